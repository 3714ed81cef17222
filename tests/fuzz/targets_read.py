"""Fuzz targets of issue 28 (round 4): a verdict on data that was read, and every output path through one guard.

Each case's input bytes are a small JSON plan (hypothesis draws it; a mutated plan that is no JSON is skipped), so
a failing case is saved and replayed like any other harness input:
- compare_cut: two identical dumps (npy, statistic.csv, DumpData, or DumpData under shortened names with
  mapping.csv), one side cut in any step (files removed, a file cut short or emptied, statistic.csv rows cut, the
  mapping removed or emptied) or its bytes mutated: a cut side is never EQUIVALENT (exit 0);
- completeness_step: one such dump (1-2 ranks, 3 steps, with or without execution_order/), cut in any step:
  never CLEAN (exit 0);
- api_args: msoverflow.analyze()/compare() with argument values of any type (huge ranges, generators, strings
  of digits, NaN): a result, TypeError or msoverflow's UserError, nothing else, bounded in time and memory;
- cli_parallel: --parallel text or a hostile layout file for analyze and compare;
- output_paths: -o, --save, --log-file, --out-dir/--dump-dir/--workdir of analyze, compare, convert, repro,
  patch, run and hunt into every input (dump roots, a rank directory, a symlink into a dump, the other compare
  side, a FIFO, /dev/null, a path under a file): every input unchanged, a refused command creates nothing.
Every case also keeps the harness contract (exit in 0/1/2/3, no traceback, no hang, bounded memory).
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Dict

import numpy as np
from hypothesis import strategies as st

from tests.support import ascend_fixtures as af

STEPS, OPS = 3, 4
FORMATS = ["npy", "statistic", "bin", "short_bin"]
CUTS = ["remove", "truncate", "empty", "rows", "mapping_missing", "mapping_empty", "remove_step"]
NOT_CUTS = ["mutate", "none"]
_TEMPLATES: Dict[tuple, str] = {}


class _Fail(AssertionError):
    pass


def _fail(message: str):
    from tests.fuzz.harness import CaseFailure
    raise CaseFailure(message)


# ---- a small clean multi-step dump in each format ------------------------------------------------------------

def _op_name(i: int) -> str:
    return f"Default/network-Net/Add-op{i}"


def _write_dump(root: str, fmt: str, ranks: int, order: bool, bad: bool) -> None:
    x = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float16)
    for rank in range(ranks):
        rank_root = os.path.join(root, f"rank_{rank}")
        for step in range(STEPS):
            folder = os.path.join(rank_root, "Net", "0", str(step))
            os.makedirs(folder)
            rows, mapping = [], []
            for i in range(OPS):
                ts = 1_700_000_000_000 + step * 1000 + i
                out = x * 2
                if bad and step == 1 and i == 2:
                    out = np.array([np.inf, 2.0, 3.0, 4.0], dtype=np.float16)
                flat = _op_name(i).replace("/", "_")
                if fmt == "npy":
                    for io_, arr in (("input", x), ("output", out)):
                        np.save(os.path.join(folder, f"Add.{flat}.{i}.0.{ts}.{io_}.0.DefaultFormat.Float16.npy"),
                                arr)
                elif fmt == "statistic":
                    rows += [dict(op_type="Add", op_name=_op_name(i), task_id=i, stream_id=0, timestamp=ts, io=io_,
                                  slot=0, array=arr) for io_, arr in (("input", x), ("output", out))]
                else:
                    name = f"Add.{flat}.{i}.0.{ts}"
                    if fmt == "short_bin":
                        short = f"{rank:04x}{step:04x}{i:016x}"
                        mapping.append(f"{short},{name}")
                        name = short
                    af.write_dump_bin(os.path.join(folder, name), _op_name(i), inputs=[x], outputs=[out])
            if rows:
                af.write_statistic_csv(os.path.join(folder, "statistic.csv"), rows, variant="2.2")
            if mapping:
                Path(folder, "mapping.csv").write_text("\n".join(mapping) + "\n")
        if order:
            os.makedirs(os.path.join(rank_root, "execution_order"))
            Path(rank_root, "execution_order", "ms_execution_order_graph_0.csv").write_text(
                "\n".join(_op_name(i) for i in range(OPS)) + "\n")


def _template(fmt: str, ranks: int, order: bool, bad: bool) -> str:
    """A dump built once per process and copied for each case (the cases stay cheap)."""
    import tempfile
    key = (fmt, ranks, order, bad)
    if key not in _TEMPLATES or not os.path.isdir(_TEMPLATES[key]):
        root = os.path.join(tempfile.mkdtemp(prefix="msoverflow-fuzz-template-"), "dump")
        _write_dump(root, fmt, ranks, order, bad)
        _TEMPLATES[key] = root
    return _TEMPLATES[key]


def _copy(plan: dict, dest: str) -> str:
    shutil.copytree(_template(plan["format"], plan["ranks"], plan["order"], plan["bad"]), dest,
                    copy_function=shutil.copyfile)
    return dest


def _cut(root: str, plan: dict) -> bool:
    """Apply the plan's cut or mutation to `root`; True when the dump is now cut (files lost or unreadable)."""
    folder = os.path.join(root, f"rank_{plan['rank'] % plan['ranks']}", "Net", "0", str(plan["step"] % STEPS))
    files = sorted(f for f in os.listdir(folder) if f != "mapping.csv")
    action, k, pos = plan["action"], plan["k"], plan["pos"]
    if action == "remove_step":
        shutil.rmtree(folder)
        os.makedirs(folder)          # a step directory left empty: no step at all
        return False     # an empty step directory: not seen as a step (see docs/robustness.md)
    if action == "remove" and len(files) > 1:
        for name in files[:max(1, min(k, len(files) - 1))] if pos % 2 else files[-max(1, min(k, len(files) - 1)):]:
            os.remove(os.path.join(folder, name))
        return True
    target = os.path.join(folder, files[pos % len(files)])
    data = Path(target).read_bytes()
    # the input of an op whose outputs are fine is skipped on purpose (never read): cutting it leaves every output
    # read, so only the contract holds, no verdict is asked for
    decisive = ".input." not in os.path.basename(target)
    if action == "truncate" and len(data) > 1:
        Path(target).write_bytes(data[:pos % len(data)])
        return decisive
    if action == "empty":
        Path(target).write_bytes(b"")
        return decisive
    if action == "rows" and plan["format"] == "statistic":
        lines = data.splitlines(keepends=True)
        keep = 1 + (k % (len(lines) - 1))      # the header and fewer rows than written
        if keep < len(lines):
            Path(target).write_bytes(b"".join(lines[:keep]))
            return True
        return False
    if action in ("mapping_missing", "mapping_empty") and plan["format"] == "short_bin":
        mapping = os.path.join(folder, "mapping.csv")
        if action == "mapping_missing":
            os.remove(mapping)
        else:
            Path(mapping).write_bytes(b"")
        return True
    if action == "mutate" and data:
        noise = bytearray(data)
        for i, value in enumerate(plan.get("noise", [])[:16]):
            noise[(pos + i * 7919) % len(noise)] = value & 0xFF
        Path(target).write_bytes(bytes(noise))
    return False


@st.composite
def cut_plan(draw) -> bytes:
    plan = {"format": draw(st.sampled_from(FORMATS)), "ranks": draw(st.sampled_from([1, 1, 2])),
            "order": draw(st.booleans()), "bad": draw(st.booleans()), "side": draw(st.sampled_from(["a", "b"])),
            "rank": draw(st.integers(0, 1)), "step": draw(st.integers(0, STEPS - 1)),
            "action": draw(st.sampled_from(CUTS + NOT_CUTS)), "k": draw(st.integers(0, 40)),
            "pos": draw(st.integers(0, 1 << 16)), "noise": draw(st.lists(st.integers(0, 255), max_size=8)),
            "fmt": draw(st.sampled_from(["json", "text", "markdown"]))}
    return json.dumps(plan).encode()


def _plan(path: str):
    try:
        plan = json.loads(Path(path).read_bytes())
        assert isinstance(plan, dict)
        plan = {"format": FORMATS[0], "ranks": 1, "order": False, "bad": False, "side": "b", "rank": 0, "step": 0,
                "action": "none", "k": 0, "pos": 0, "noise": [], "fmt": "json", **plan}
        assert plan["format"] in FORMATS and plan["ranks"] in (1, 2) and plan["action"] in CUTS + NOT_CUTS
        assert all(isinstance(plan[key], int) and 0 <= plan[key] < 1 << 20 for key in ("rank", "step", "k", "pos"))
        assert isinstance(plan["noise"], list) and all(isinstance(v, int) for v in plan["noise"])
        assert plan["fmt"] in ("json", "text", "markdown") and isinstance(plan["order"], bool)
        return plan
    except (ValueError, AssertionError, TypeError, KeyError):
        return None         # a mutated plan: nothing to build


def compare_cut(path: str, work: str):
    from tests.fuzz.harness import run_cli, tree_digest
    plan = _plan(path)
    if plan is None:
        return
    a, b = _copy(plan, os.path.join(work, "a")), _copy(plan, os.path.join(work, "b"))
    cut = _cut(a if plan["side"] == "a" else b, plan)
    before = (tree_digest(a), tree_digest(b))
    out = os.path.join(work, f"c.{plan['fmt']}")
    code = run_cli(["compare", a, b, "--format", plan["fmt"], "-o", out, "-q"])
    if (tree_digest(a), tree_digest(b)) != before:
        _fail("compare changed a dump")
    if cut and code == 0:
        _fail(f"EQUIVALENT on a cut side: {json.dumps(plan)}")


def completeness_step(path: str, work: str):
    from tests.fuzz.harness import run_cli, tree_digest
    plan = _plan(path)
    if plan is None:
        return
    root = _copy(plan, os.path.join(work, "dump"))
    cut = _cut(root, plan)
    before = tree_digest(root)
    code = run_cli(["analyze", root, "--no-progress", "--format", plan["fmt"], "-o",
                    os.path.join(work, f"r.{plan['fmt']}")])
    if tree_digest(root) != before:
        _fail("analyze changed the dump")
    if cut and code == 0:
        _fail(f"CLEAN on a cut dump: {json.dumps(plan)}")


# ---- API arguments ---------------------------------------------------------------------------------------------

VALUES = {
    "none": None, "zero": 0, "one": 1, "neg": -1, "big": 10 ** 30, "float": 1.5, "nan": float("nan"),
    "inf": float("inf"), "true": True, "str_digits": "10", "str_range": "0-3", "str_huge": "0-3000000000",
    "str_junk": "a,b", "str_empty": "", "bytes": b"0", "list": [0, 1], "list_str": ["0", "x"], "tuple": (0,),
    "set": {1, 0}, "dict": {0: 1}, "range": range(0, 2), "range_huge": range(0, 2 ** 31 - 1),
    "range_back": range(5, 0, -1), "gen": "GEN", "gen_huge": "GEN_HUGE", "object": object(),
    "list_huge_int": [10 ** 40], "list_nested": [[0]], "list_float": [0.5],
    "range_step": range(0, 2 ** 40, 3), "int_huge_digits": 10 ** 5000,
    "spec": "dp=2,tp=1,pp=1", "spec_bad": "dp=0,tp=-1", "spec_huge": "dp=" + "9" * 60,
}
API_ARGS = {"analyze": ["ranks", "steps", "jobs", "scheduler", "parallel", "scan_all", "finished", "progress",
                        "warn"],
            "compare": ["ranks", "steps", "tolerance_ulps", "top", "parallel", "warn"]}


@st.composite
def api_plan(draw) -> bytes:
    fn = draw(st.sampled_from(sorted(API_ARGS)))
    names = draw(st.lists(st.sampled_from(API_ARGS[fn]), max_size=3, unique=True))
    args = {name: draw(st.sampled_from(sorted(VALUES))) for name in names}
    return json.dumps({"fn": fn, "args": args, "path": draw(st.sampled_from(["dump", "missing", "file"]))}).encode()


def _value(token: str):
    import itertools
    if token == "gen":
        return (i for i in (0, 1))
    if token == "gen_huge":
        return itertools.count()
    return VALUES[token]


def api_args(path: str, work: str):
    import msoverflow
    from msoverflow.errors import UserError
    try:
        plan = json.loads(Path(path).read_bytes())
        fn, args, where = plan["fn"], plan["args"], plan.get("path", "dump")
        assert fn in API_ARGS and isinstance(args, dict) and all(
            k in API_ARGS[fn] and v in VALUES for k, v in args.items())
    except (ValueError, AssertionError, TypeError, KeyError):
        return
    template = _template("npy", 1, False, False)
    root = os.path.join(work, "dump")
    if where == "dump":
        shutil.copytree(template, root, copy_function=shutil.copyfile)
    elif where == "file":
        Path(root).write_bytes(b"x")
    kwargs = {k: _value(v) for k, v in args.items()}
    try:
        if fn == "analyze":
            msoverflow.analyze(root, **kwargs)
        else:
            msoverflow.compare(root, root, **kwargs)
    except (TypeError, ValueError) as exc:      # a wrong type or a value out of range, naming the argument
        if not any(name in str(exc) for name in kwargs):
            _fail(f"{type(exc).__name__} that names no argument ({exc}): {fn}({args})")
    except UserError:
        pass


# ---- --parallel text and files -----------------------------------------------------------------------------------

PARALLEL_SEEDS = [b"dp=2,tp=1,pp=1", b"dp=1,mp=2", b"pp=2", b"dp=4,tp=2,pp=2,world=8"]


def cli_parallel(path: str, work: str):
    from tests.fuzz.harness import run_cli, tree_digest
    data = Path(path).read_bytes()
    root = shutil.copytree(_template("npy", 2, True, bool(data[:1] and data[0] & 1)), os.path.join(work, "dump"),
                           copy_function=shutil.copyfile)
    if data[:1] and data[0] % 3 == 0:            # a layout file: the bytes are its contents
        spec = os.path.join(work, ["run.yaml", "strategy.ckpt", "rank_table.json"][data[0] % 9 // 3])
        Path(spec).write_bytes(data[1:])
    else:
        spec = data.decode("utf-8", "surrogateescape").replace("\0", "")[:4096] or "dp=1"
        if spec.startswith("-"):
            spec = " " + spec
    before = tree_digest(root)
    run_cli(["analyze", root, "--no-progress", "--format", "json", "--parallel", spec, "-o",
             os.path.join(work, "r.json")])
    run_cli(["compare", root, root, "--format", "json", "--parallel", spec, "-o", os.path.join(work, "c.json"), "-q"])
    if tree_digest(root) != before:
        _fail("the dump changed")


def parallel_seed(draw_seed: bytes = b""):
    from tests.fuzz.harness import SEEDS, mutated
    return st.one_of(st.sampled_from(PARALLEL_SEEDS).flatmap(mutated),
                     mutated(b"\x00" + SEEDS["layout_yaml"]), mutated(b"\x03" + SEEDS["strategy_json"]),
                     mutated(b"\x06" + SEEDS["strategy_ckpt"]))


# ---- output paths --------------------------------------------------------------------------------------------------

COMMANDS = ["analyze", "compare", "convert", "repro", "patch", "run", "hunt"]
WHERE = ["dump_root", "in_rank", "in_step", "rank_dir", "symlink_into", "other_side", "fifo", "devnull",
         "under_file", "outside", "outside_new_dir", "source_dir", "existing_file_in_dump"]
OPTIONS = ["-o", "--save", "--log-file", "dir"]
INSIDE = {"dump_root", "in_rank", "in_step", "rank_dir", "symlink_into", "existing_file_in_dump"}


@st.composite
def output_plan(draw) -> bytes:
    return json.dumps({"cmd": draw(st.sampled_from(COMMANDS)), "opt": draw(st.sampled_from(OPTIONS)),
                       "where": draw(st.sampled_from(WHERE)), "second": draw(st.sampled_from(OPTIONS + [None])),
                       "where2": draw(st.sampled_from(WHERE))}).encode()


def _place(where: str, work: str, dump: str, other: str, name: str) -> str:
    """A path of the kind `where` names; FIFOs and files made here (outside every dump, or inside one for
    `existing_file_in_dump`, which the digest already holds)."""
    if where == "dump_root":
        return os.path.join(dump, name)
    if where == "in_rank":
        return os.path.join(dump, "rank_0", name)
    if where == "in_step":
        return os.path.join(dump, "rank_0", "Net", "0", "0", name)
    if where == "rank_dir":
        return os.path.join(dump, "rank_0")
    if where == "symlink_into":
        link = os.path.join(work, "link")
        if not os.path.lexists(link):
            os.symlink(dump, link)
        return os.path.join(link, name)
    if where == "other_side":
        return os.path.join(other, name)
    if where == "fifo":
        fifo = os.path.join(work, "fifo")
        if not os.path.exists(fifo):
            os.mkfifo(fifo)
        return fifo
    if where == "devnull":
        return os.devnull
    if where == "under_file":
        Path(work, "plain").write_bytes(b"x")
        return os.path.join(work, "plain", name)
    if where == "existing_file_in_dump":
        files = sorted(os.path.join(top, f) for top, _dirs, found in os.walk(dump) for f in found)
        return files[0] if files else os.path.join(dump, "rank_0", "Net", "0", "0", name)
    if where == "source_dir":
        return os.path.join(work, "src", name)
    if where == "outside_new_dir":
        return os.path.join(work, "fresh", name)
    return os.path.join(work, name)


def output_paths(path: str, work: str):
    from tests.fuzz.harness import SEEDS, run_cli, tree_digest
    try:
        plan = json.loads(Path(path).read_bytes())
        cmd, opt, where = plan["cmd"], plan["opt"], plan["where"]
        second, where2 = plan.get("second"), plan.get("where2", "outside")
        assert cmd in COMMANDS and opt in OPTIONS and where in WHERE and where2 in WHERE
        assert second in OPTIONS + [None]
    except (ValueError, AssertionError, TypeError, KeyError):
        return
    dump = shutil.copytree(_template("npy", 1, False, True), os.path.join(work, "dump"),
                           copy_function=shutil.copyfile)
    other = shutil.copytree(_template("npy", 1, False, False), os.path.join(work, "other"),
                            copy_function=shutil.copyfile)
    src = os.path.join(work, "src")
    os.makedirs(src)
    Path(src, "model.py").write_bytes(SEEDS["source"])
    report = os.path.join(work, "report.json")
    Path(report).write_text(json.dumps({
        "schema_version": 1, "verdict": "anomaly", "dump_dir": dump, "first": {
            "op_name": "Default_network-Net_Add-op2", "op_type": "Add", "rank": 0, "iteration": 1, "graph": "0",
            "forward_op": "Add", "cell": "network", "cell_type": "Net",
            "source": {"file": os.path.join(src, "model.py"), "line": 7, "code": "return x @ x"},
            "inputs": [{"slot": 0, "dtype": "float16"}], "outputs": [{"slot": 0, "dtype": "float16"}]}}))
    acl = os.path.join(work, "acl")
    os.makedirs(acl)
    Path(acl, "MatMul.Default_network-Net_MatMul-op1.1.0.100").write_bytes(SEEDS["dumpdata"])
    inputs = {"analyze": [dump], "compare": [dump, other], "convert": [acl], "repro": [dump], "patch": [dump],
              "run": [], "hunt": []}[cmd]
    # the directory the command itself fills (run's dump, hunt's records) is an input of its own analysis
    made = {"run": os.path.join(work, "made"), "hunt": os.path.join(work, "made")}.get(cmd)
    first_input = inputs[0] if inputs else made
    paths, inside = {}, False
    for option, spot, name in ((opt, where, "out.json"), (second, where2, "log.txt")):
        if option == "dir" and cmd in ("convert", "repro"):    # their -o is their output directory
            option = "-o"
        if option is None or option in paths or (option == "dir" and cmd in ("analyze", "compare")) or (
                option == "--save" and cmd not in ("analyze", "run", "hunt")):
            continue
        paths[option] = _place(spot, work, first_input, other if cmd != "compare" else dump, name)
        inside = inside or (spot in INSIDE or spot == "other_side" and cmd == "compare")
    if cmd in ("run", "hunt") and "dir" in paths:      # the command's own directory moved: nothing is inside it
        inside = False
    argv = {"analyze": ["analyze", dump, "--no-progress"], "compare": ["compare", dump, other, "-q"],
            "convert": ["convert", acl], "repro": ["repro", "--from", report],
            "patch": ["patch", "--from", report, "--source", os.path.join(src, "model.py"), "--line", "7"],
            "run": ["run", "--dump-dir", made, "--device", "cpu"] if False else ["run", "--dump-dir", made],
            "hunt": ["hunt", "--out-dir", made]}[cmd]
    dir_option = {"convert": "-o", "repro": "-o", "patch": "--workdir", "run": "--dump-dir", "hunt": "--out-dir",
                  "analyze": None, "compare": None}[cmd]
    for option, target in paths.items():
        if option == "dir":
            if dir_option is None:
                continue
            if dir_option in argv:
                i = argv.index(dir_option)
                argv[i + 1] = target
            else:
                argv += [dir_option, target]
        elif option == "-o" and cmd in ("convert", "repro"):
            argv += ["-o", target]
        elif option == "--save" and cmd not in ("analyze", "run", "hunt"):
            continue
        elif option == "-o" and cmd == "patch":
            argv += ["-o", target]
        else:
            argv += [option, target]
    if cmd in ("convert", "repro") and "-o" not in argv:
        argv += ["-o", os.path.join(work, "out")]
    if cmd in ("run", "hunt"):
        argv += ["--", "true"]
    watched = [p for p in inputs if os.path.isdir(p)]
    before = {p: tree_digest(p) for p in watched}
    listing = sorted(os.listdir(work))
    source = Path(src, "model.py").read_bytes()
    code = run_cli(argv)
    if Path(src, "model.py").read_bytes() != source:
        _fail(f"{cmd} without --write changed the model source: {argv}")
    for p in watched:
        if tree_digest(p) != before[p]:
            _fail(f"{cmd} wrote into its input {os.path.basename(p)}: {argv}")
    if inside:          # a path inside an input: refused (exit 2) before anything is created
        created = set(os.listdir(work)) - set(listing)
        if code != 2 or created:
            _fail(f"{cmd} with a path inside its input: exit {code}, created {sorted(created)}: {argv}")


TARGETS = {
    "compare_cut": ("cut_plan", compare_cut),
    "completeness_step": ("cut_plan", completeness_step),
    "api_args": ("api_plan", api_args),
    "cli_parallel": ("parallel", cli_parallel),
    "output_paths": ("output_plan", output_paths),
}
STRATEGIES = {"compare_cut": cut_plan, "completeness_step": cut_plan, "api_args": api_plan,
              "cli_parallel": parallel_seed, "output_paths": output_plan}
