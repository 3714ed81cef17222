"""The regression corpus: every class of hostile or broken input from issue 9 (and each new one the fuzzer found),
each with its expected outcome, run through the real CLI in a subprocess (RLIMIT_AS 4 GB, 60 s of CPU time).

A hang is measured in CPU time (RLIMIT_CPU in the child, ITIMER_PROF in-process: a loop that spins is caught the
same on an idle machine and at a load of 40), with a generous wall limit (WALL_LIMIT) for a case that blocks; the
long fuzz run (tests/fuzz/run_long.py) keeps its 30 s wall limit per case.

Every case also checks the contract: no traceback, exit code as expected (never 4 for bad input, never 1 for a
crash), the dump tree byte-for-byte unchanged, and nothing written where it must not be.
Inputs that are bytes live in tests/fuzz/corpus/ (CORPUS.json says what each is and what must happen);
inputs that cannot live in git (FIFOs, links to /dev/zero, 100k-dim headers) are built here.
"""
import json
import os
import resource
import signal
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from msoverflow.readers import _protobuf as pb
from tests.fuzz import harness
from tests.fuzz.harness import FULL, OP, tree_digest

CORPUS = Path(__file__).resolve().parent / "corpus"
NPY = f"MatMul.{OP}.1.0.100.output.0.DefaultFormat.Float16.npy"


CPU_LIMIT = 60           # seconds of CPU time one corpus case may use: a hang, whatever the machine's load
WALL_LIMIT = 600         # seconds on the clock: only a case that blocks (never spins) gets this far


def _limits():
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT, CPU_LIMIT + 5))


def msoverflow(*args, cwd=None, env=None):
    # MSOVERFLOW_REPORT_JSON="": analyze saves no ./report.json into the directory the tests run from
    full_env = dict(os.environ, PYTHONIOENCODING="utf-8", MSOVERFLOW_REPORT_JSON="")
    full_env.update(env or {})
    try:
        return subprocess.run([sys.executable, "-m", "msoverflow", *map(str, args)], capture_output=True,
                              timeout=WALL_LIMIT, cwd=cwd, env=full_env, preexec_fn=_limits)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hang: msoverflow {' '.join(map(str, args))} blocked for {WALL_LIMIT} s")


def contract(proc, expect, *, says=None):
    err = proc.stderr.decode("utf-8", "replace")
    out = proc.stdout.decode("utf-8", "replace")
    assert "Traceback" not in err, err[-2000:]
    assert proc.returncode != -signal.SIGXCPU, f"hang: over {CPU_LIMIT} s of CPU time\n{err[-1500:]}"
    assert proc.returncode in expect, f"exit {proc.returncode}, expected {expect}\n{err[-1500:]}\n{out[-500:]}"
    if says:
        assert says in err + out, f"expected {says!r} in the output:\n{err[-1500:]}\n{out[-800:]}"
    return out, err


def clean_dump(root: Path) -> Path:
    """A dump with one clean op (so a corrupt extra file can only make it inconclusive, never crash it)."""
    step = root / "rank_0" / "Net" / "0" / "0"
    step.mkdir(parents=True)
    x = np.array([1.0, 2.0], dtype=np.float16)
    np.save(step / f"MatMul.{OP}.1.0.100.input.0.DefaultFormat.Float16.npy", x)
    np.save(step / NPY, x * 2)
    return step


def dumpdata(outputs=1, dims=(2,), size=None, header_length=None, wire_type_shape=pb.LEN, tail=b"") -> bytes:
    shape = pb.field_packed_varints(1, dims) if wire_type_shape == pb.LEN else b""
    body = pb.field_varint(1, 1) + pb.field_varint(2, 2)
    body += pb.field_bytes(3, shape) if wire_type_shape == pb.LEN else pb.field_varint(3, 5)
    body += pb.field_varint(6, 8 if size is None else size)
    message = pb.field_bytes(1, "2.0") + pb.field_bytes(3, body) * outputs + pb.field_bytes(6, FULL)
    length = len(message) if header_length is None else header_length
    return struct.pack("<Q", length) + message + b"\0" * 8 + tail


# ---- DumpData headers that lie: analyze and convert fail fast --------------------------------------------

DUMPDATA_CASES = {
    "100k-dims": dumpdata(dims=[3] * 100_000),
    "terabyte-dims": dumpdata(dims=[1 << 20, 1 << 20, 1 << 20], size=0),
    "terabyte-size": dumpdata(size=1 << 42),
    "thousands-of-outputs": dumpdata(outputs=5000),
    "too-many-outputs": dumpdata(outputs=20000),
    "wrong-wire-type": dumpdata(wire_type_shape=pb.VARINT),
    "group-wire-type": dumpdata()[:8] + bytes([0x33]) + dumpdata()[9:],
    "huge-header-length": dumpdata(header_length=(1 << 64) - 1),
    "flipped-header-bytes": bytes(b ^ 0x5A if 8 <= i < 40 else b for i, b in enumerate(dumpdata())),
}


@pytest.mark.parametrize("name", sorted(DUMPDATA_CASES))
def test_dumpdata_header_lies_analyze(tmp_path, name):
    step = clean_dump(tmp_path / "dump")
    (step / "MatMul.Default_network-Net_MatMul-op9.1.0.200").write_bytes(DUMPDATA_CASES[name])
    before = tree_digest(str(tmp_path / "dump"))
    contract(msoverflow("analyze", tmp_path / "dump", "--no-progress"), {0, 3})
    assert tree_digest(str(tmp_path / "dump")) == before


@pytest.mark.parametrize("name", sorted(DUMPDATA_CASES))
def test_dumpdata_header_lies_convert(tmp_path, name):
    src = tmp_path / "acl"
    src.mkdir()
    (src / "MatMul.Default_network-Net_MatMul-op9.1.0.200").write_bytes(DUMPDATA_CASES[name])
    before = tree_digest(str(src))
    # Nothing readable: exit 2 naming the file; or a partial conversion (exit 0) of what the header allows.
    contract(msoverflow("convert", src, "-o", tmp_path / "out"), {0, 2})
    assert tree_digest(str(src)) == before


# ---- special files: FIFOs and links to devices are skipped, never opened ------------------------------------

@pytest.mark.parametrize("name", [NPY.replace(".0.100.", ".0.101."), "statistic.csv",
                                  "Opdebug.Node_OpDebug.9.0.100.output.0.json", "mapping.csv",
                                  "MatMul.Default_network-Net_MatMul-op9.1.0.200"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero-link"])
def test_special_files_in_the_dump_are_skipped(tmp_path, name, kind):
    step = clean_dump(tmp_path / "dump")
    if kind == "fifo":
        os.mkfifo(step / name)
    else:
        os.symlink("/dev/zero", step / name)
    contract(msoverflow("analyze", tmp_path / "dump", "--no-progress"), {0, 3}, says="not a regular file")


def test_fifo_config_for_check(tmp_path):
    os.mkfifo(tmp_path / "dump_config.json")
    contract(msoverflow("config", "--check", tmp_path / "dump_config.json", "--ms-version", "2.4"), {2},
             says="not a regular file")


def test_fifo_and_dev_zero_report_for_patch(tmp_path):
    os.mkfifo(tmp_path / "report.json")
    contract(msoverflow("patch", "--from", tmp_path / "report.json"), {2}, says="not a regular file")
    os.symlink("/dev/zero", tmp_path / "zero.json")
    contract(msoverflow("patch", "--from", tmp_path / "zero.json"), {2}, says="not a regular file")


def _ir(source_file: str, line="5", code="return x @ x", extra="") -> str:
    return (f"%para1_x : <Tensor[Float16], (2)>\n"
            f"  %1(CNode_1) = PrimFunc_MatMul(%para1, %para1) primitive_attrs: {{}}\n"
            f"      : (<Tensor[Float16], (2)>) -> (<Tensor[Float16], (2)>)\n"
            f"      : (<Float16xDefaultFormat>) -> (<Float16xDefaultFormat>)\n"
            f"      # Fullname with scope: ({FULL})\n"
            f"      # In file {source_file}:{line}, 8~20/        {code}/{extra}\n")


def overflow_dump(root: Path, ir_text: str = None) -> Path:
    """An overflowing op whose graph (when given) points at a source file."""
    step = root / "rank_0" / "Net" / "0" / "0"
    step.mkdir(parents=True)
    np.save(step / f"MatMul.{OP}.1.0.100.input.0.DefaultFormat.Float16.npy", np.array([1.0, 60000.0], np.float16))
    np.save(step / NPY, np.array([1.0, np.inf], np.float16))
    if ir_text is not None:
        (root / "rank_0" / "graphs").mkdir()
        (root / "rank_0" / "graphs" / "ms_output_trace_code_graph_0.ir").write_text(ir_text)
    return step


@pytest.mark.parametrize("target", ["fifo", "/dev/zero", "nested-source", "unary-chain-source", "nul-source"])
def test_ir_source_reference_is_read_safely(tmp_path, target):
    source = tmp_path / "model.py"
    if target == "fifo":
        os.mkfifo(source)
    elif target == "/dev/zero":
        source = Path("/dev/zero")
    elif target == "nested-source":
        source.write_text("class Net:\n    def f(self, x):\n        return " + "(" * 5000 + "x" + ")" * 5000 + "\n")
    elif target == "unary-chain-source":
        source.write_text("class Net:\n    def f(self, x):\n        return " + "-" * 20000 + "x\n")
    else:
        source.write_bytes(b"class Net:\n    def f(self, x):\n        return x\0\n")
    overflow_dump(tmp_path / "dump", _ir(str(source)))
    out, _ = contract(msoverflow("analyze", tmp_path / "dump", "--no-progress", "--format", "json"), {1, 3})
    assert json.loads(out)["first"]["op_type"] == "MatMul"


def test_long_in_file_line_is_linear(tmp_path):
    """A 240 KB `# In file` line (catastrophic backtracking before): parsed in linear time."""
    long_code = "x" + ", 1~2/x:" * 30000
    overflow_dump(tmp_path / "dump", _ir(str(tmp_path / "model.py"), code=long_code, extra=" " * 1000 + "z"))
    contract(msoverflow("analyze", tmp_path / "dump", "--no-progress"), {1, 3})


def test_million_digit_line_number_in_ir(tmp_path):
    overflow_dump(tmp_path / "dump", _ir(str(tmp_path / "model.py"), line="9" * 1_000_000))
    contract(msoverflow("analyze", tmp_path / "dump", "--no-progress"), {1, 3})


def test_truncated_statistic_csv(tmp_path):
    step = tmp_path / "dump" / "rank_0" / "Net" / "0" / "0"
    step.mkdir(parents=True)
    text = harness.SEEDS["statistic_csv"]
    for cut in (len(text) // 2, len(text) - 7, 40):
        (step / "statistic.csv").write_bytes(text[:cut] + b'"(2,')
        contract(msoverflow("analyze", tmp_path / "dump", "--no-progress"), {0, 1, 2, 3})


def test_mapping_csv_error_is_a_warning(tmp_path):
    step = clean_dump(tmp_path / "dump")
    (step / "mapping.csv").write_bytes(b"a.npy,b\0c\n" + b'"' + b"x" * 200_000 + b'"\n')
    contract(msoverflow("analyze", tmp_path / "dump", "--no-progress"), {0, 3}, says="mapping file")


# ---- outputs never land inside the dump ---------------------------------------------------------------------

def test_output_into_dump_root_from_a_subdirectory_is_refused(tmp_path):
    clean_dump(tmp_path / "dump")
    before = tree_digest(str(tmp_path / "dump"))
    sub = tmp_path / "dump" / "rank_0" / "Net"
    contract(msoverflow("analyze", sub, "-o", tmp_path / "dump" / "report.json"), {2}, says="refusing to write")
    assert tree_digest(str(tmp_path / "dump")) == before


def test_output_through_a_symlink_into_the_dump_is_refused(tmp_path):
    clean_dump(tmp_path / "dump")
    (tmp_path / "reports").symlink_to(tmp_path / "dump" / "rank_0")
    before = tree_digest(str(tmp_path / "dump"))
    contract(msoverflow("analyze", tmp_path / "dump", "-o", tmp_path / "reports" / "r.json"), {2},
             says="refusing to write")
    os.symlink(tmp_path / "dump" / "rank_0" / "new.json", tmp_path / "link.json")
    contract(msoverflow("analyze", tmp_path / "dump", "-o", tmp_path / "link.json"), {2}, says="refusing to write")
    assert tree_digest(str(tmp_path / "dump")) == before


def test_convert_and_config_outputs_inside_the_dump_are_refused(tmp_path):
    root = tmp_path / "dump" / "20240101120000" / "0" / "Net" / "1" / "0"
    root.mkdir(parents=True)
    (root / "MatMul.Default_network-Net_MatMul-op9.1.0.200").write_bytes(dumpdata())
    contract(msoverflow("convert", root, "-o", tmp_path / "dump" / "npy"), {2}, says="refusing to write")
    contract(msoverflow("config", "overflow", "--ms-version", "2.4", "--device", "cpu", "--path", tmp_path / "dump",
                        "-o", tmp_path / "dump" / "cfg.json"), {2}, says="refusing to write")
    assert not (tmp_path / "dump" / "npy").exists() and not (tmp_path / "dump" / "cfg.json").exists()


# ---- tracebacks that became clear answers -------------------------------------------------------------------

def test_deep_json_everywhere(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000
    step = clean_dump(tmp_path / "dump")
    (step / "Opdebug.Node_OpDebug.9.0.100.output.0.json").write_text('{"AI Core": ' + deep + "}")
    (tmp_path / "dump" / "rank_0" / ".dump_metadata").mkdir()
    (tmp_path / "dump" / "rank_0" / ".dump_metadata" / "config.json").write_text(deep)
    contract(msoverflow("analyze", tmp_path / "dump", "--no-progress"), {0, 3}, says="nested")
    (tmp_path / "cfg.json").write_text('{"common_dump_settings": ' + deep + "}")
    contract(msoverflow("config", "--check", tmp_path / "cfg.json", "--ms-version", "2.4"), {2}, says="nested")
    (tmp_path / "report.json").write_text('{"verdict": "anomaly", "first": ' + deep + "}")
    contract(msoverflow("patch", "--from", tmp_path / "report.json"), {2}, says="nested")


@pytest.mark.parametrize("shape", ["(inf,)", "(1j, 2)", "(None,)", "(2.5,)", "(-1,)", "(" + "9" * 5000 + ",)",
                                   "((2,),)", "'x'", "(" + "3, " * 100 + ")"])
def test_npy_header_shapes(tmp_path, shape):
    header = "{'descr': '<f2', 'fortran_order': False, 'shape': " + shape + ", }"
    _npy_case(tmp_path, header)


@pytest.mark.parametrize("descr", ["f3", "<f3", "|O", "<U0", "|V0", "'"])
def test_npy_header_descr(tmp_path, descr):
    _npy_case(tmp_path, "{'descr': " + repr(descr) + ", 'fortran_order': False, 'shape': (2,), }")


def _npy_case(tmp_path, header):
    step = clean_dump(tmp_path / "dump")
    text = header.ljust(117) + "\n"
    (step / NPY.replace(".0.100.", ".0.101.")).write_bytes(
        b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1") + b"\0" * 8)
    contract(msoverflow("analyze", tmp_path / "dump", "--no-progress"), {0, 3})


def test_million_digit_integers_in_config_and_report(tmp_path):
    big = "9" * 1_000_000
    (tmp_path / "cfg.json").write_text('{"common_dump_settings": {"op_debug_mode": ' + big + "}}")
    contract(msoverflow("config", "--check", tmp_path / "cfg.json", "--ms-version", "2.4"), {2}, says="digits")
    (tmp_path / "r.json").write_text('{"verdict": "anomaly", "first": {"cell": "a", "source": {"file": "m.py", '
                                     '"line": ' + big + "}}}")
    contract(msoverflow("patch", "--from", tmp_path / "r.json"), {2}, says="digits")
    (tmp_path / "r2.json").write_text('{"verdict": "anomaly", "first": {"cell": "a", "source": {"file": "m.py", '
                                      '"line": 1' + "0" * 30 + "}}}")
    contract(msoverflow("patch", "--from", tmp_path / "r2.json"), {2}, says="line number")


@pytest.mark.parametrize("version", ["2." + "1" * 5000, "1" * 5000 + ".4", "2" + "0" * 5000])
@pytest.mark.parametrize("command", ["config", "check", "run"])
def test_five_thousand_digit_ms_version(tmp_path, version, command):
    """Issue 21 (a first-round class still failing): a 5000-digit --ms-version was a ValueError in version parsing."""
    (tmp_path / "cfg.json").write_text('{"common_dump_settings": {}}')
    argv = {"config": ["config", "overflow", "--device", "cpu", "-o", "-"],
            "check": ["config", "--check", tmp_path / "cfg.json", "--device", "cpu"],
            "run": ["run", "--device", "cpu", "--dump-dir", tmp_path / "d"]}[command]
    after = ["--", "true"] if command == "run" else []
    _, err = contract(msoverflow(*argv, "--ms-version", version, *after), {2}, says="not a version like 2.4")
    assert len(err.strip().splitlines()) == 1 and len(err) < 400, err[:400]
    assert not (tmp_path / "d").exists()


def test_nan_version_and_values_never_break_json(tmp_path):
    overflow_dump(tmp_path / "dump")
    meta = tmp_path / "dump" / "rank_0" / ".dump_metadata"
    meta.mkdir()
    (meta / "config.json").write_text('{"ms_version": NaN, "device_target": "CPU"}')
    contract(msoverflow("analyze", tmp_path / "dump", "--no-progress", "--format", "json"), {1, 3})
    (meta / "config.json").write_text('{"ms_version": 2.1, "device_target": ["CPU"]}')
    (meta / "data_dump.json").write_text('{"common_dump_settings": {"dump_mode": 1e999}}')
    out, _ = contract(msoverflow("analyze", tmp_path / "dump", "--no-progress", "--format", "json"), {1, 3})
    json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in the JSON report"))
    (tmp_path / "cfg.json").write_text('{"common_dump_settings": {"op_debug_mode": NaN}}')
    contract(msoverflow("config", "--check", tmp_path / "cfg.json", "--ms-version", "2.4"), {2}, says="NaN")
    contract(msoverflow("config", "--check", tmp_path / "cfg.json", "--ms-version", "nan"), {2})


@pytest.mark.parametrize("fmt", ["text", "markdown", "json"])
def test_non_utf8_file_names_print_and_write(tmp_path, fmt):
    step = tmp_path / "dump" / "rank_0" / "Net" / "0" / "0"
    step.mkdir(parents=True)
    bad = b"Default_network-Net_\xff\xfeMatMul-op1"
    for io_, arr in (("input", np.array([1.0, 60000.0], np.float16)), ("output", np.array([1.0, np.inf], np.float16))):
        name = b"MatMul." + bad + f".1.0.100.{io_}.0.DefaultFormat.Float16.npy".encode()
        with open(os.path.join(os.fsencode(step), name), "wb") as fh:
            np.save(fh, arr)
    os.mkfifo(os.path.join(os.fsencode(step), b"Add.\xff.1.0.1.output.0.DefaultFormat.Float16.npy"))
    contract(msoverflow("analyze", tmp_path / "dump", "--no-progress", "--format", fmt), {1, 3})
    contract(msoverflow("analyze", tmp_path / "dump", "--no-progress", "--format", fmt, "-o", tmp_path / "r"),
             {1, 3})
    assert (tmp_path / "r").read_bytes().decode("utf-8")   # the written report is valid UTF-8


def test_non_utf8_report_for_patch(tmp_path):
    (tmp_path / "r.json").write_bytes(b'{"verdict": "anomaly", "first": {"cell": "\xff\xfe"}}')
    contract(msoverflow("patch", "--from", tmp_path / "r.json"), {2}, says="UTF-8")


@pytest.mark.parametrize("first", ['"lm_head"', "[1, 2]", "3", '{"cell": 5}', '{"cell": "a", "source": "m.py"}',
                                   '{"cell": "a", "source": {"file": 1, "line": 2}}',
                                   '{"cell": "a", "source": {"file": "m.py", "line": "7"}}',
                                   '{"cell": "a", "source": {"file": "m.py", "line": true}}',
                                   '{"cell": "a", "source": {"file": "m.py", "line": 1.5}}'])
def test_wrong_types_in_report(tmp_path, first):
    (tmp_path / "r.json").write_text('{"verdict": "anomaly", "first": ' + first + "}")
    contract(msoverflow("patch", "--from", tmp_path / "r.json"), {2}, says="not an msoverflow analysis report")


@pytest.mark.parametrize("verdict", ["5", "null", "[]"])
def test_wrong_verdict_type(tmp_path, verdict):
    (tmp_path / "r.json").write_text('{"verdict": ' + verdict + ', "first": null}')
    contract(msoverflow("patch", "--from", tmp_path / "r.json"), {0, 2})


@pytest.mark.parametrize("body", ['{"common_dump_settings": []}', '{"common_dump_settings": {"kernels": {"a": 1}}}',
                                  '{"common_dump_settings": {"path": 5, "iteration": [], "support_device": "x"}}',
                                  '[]', '"x"', '{"e2e_dump_settings": 3}', '{"common_dump_settings": null}',
                                  '{"common_dump_settings": {"statistic_category": [[], {}, null]}}'])
@pytest.mark.parametrize("platform", [["--ms-version", "2.2", "--device", "ascend"],
                                      ["--ms-version", "2.10", "--device", "cpu"],
                                      ["--ms-version", "2.4", "--device", "ascend", "--jit-level", "O2"]])
def test_checker_wrong_types(tmp_path, body, platform):
    (tmp_path / "cfg.json").write_text(body)
    contract(msoverflow("config", "--check", tmp_path / "cfg.json", *platform), {0, 1, 2})


@pytest.mark.parametrize("source", ["-" * 20000 + "x", "(" * 5000 + "x" + ")" * 5000, "not " * 20000 + "x",
                                    " if 1 else ".join(["x"] * 20000), "x\0"])
def test_patch_source_parser_crash_is_a_clear_error(tmp_path, source):
    """libcst's native parser segfaulted (-11) on deeply nested source: now a clear error, exit 2."""
    model = tmp_path / "model.py"
    model.write_text("class Net:\n    def construct(self, x):\n        return " + source + "\n")
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"verdict": "anomaly", "first": {
        "cell": "net", "cell_type": "Net", "op_type": "Neg",
        "source": {"file": str(model), "line": 3, "code": "return"}}}))
    before = model.read_bytes()
    contract(msoverflow("patch", "--from", report, "--how", "source"), {2})
    contract(msoverflow("patch", "--source", model, "--line", "3", "--cell", "Net"), {2})
    assert model.read_bytes() == before


@pytest.mark.parametrize("target", ["/dev/zero", "fifo", "18MB"])
def test_guard_patch_reads_its_source_safely(tmp_path, target):
    """Issue 21: the guard patch read its source without the safe-I/O contract: /dev/zero grew memory, a FIFO
    hung, an 18 MB source was parsed whole. Now the source patch's reader: one line, exit 2."""
    source = target
    if target == "fifo":
        source = str(tmp_path / "train.py")
        os.mkfifo(source)
    elif target == "18MB":
        source = str(tmp_path / "train.py")
        Path(source).write_text("def loss(a, b):\n    return a / b\n" + "x = 1\n" * (3 << 20))
    _, err = contract(msoverflow("patch", "--source", source, "--line", "2", "--how", "guard", "--op", "RealDiv"),
                      {2})
    assert len(err.strip().splitlines()) == 1, err


# ---- inputs the fuzzer found: bytes in tests/fuzz/corpus/, expectations in CORPUS.json ---------------------

def _corpus_entries():
    index = CORPUS / "CORPUS.json"
    if not index.exists():
        return []
    return sorted(json.loads(index.read_text()).items())


@pytest.mark.parametrize("name,entry", _corpus_entries())
def test_fuzz_corpus(name, entry):
    """Each saved input runs through its harness target and keeps the contract (CORPUS.json: `expect`)."""
    def hang(signum, frame):
        raise AssertionError(f"hang: {name} used over {CPU_LIMIT} s of CPU time"
                             if signum == signal.SIGPROF else f"hang: {name} blocked for {WALL_LIMIT} s")
    assert entry["expect"] == "contract"
    previous = {sig: signal.signal(sig, hang) for sig in (signal.SIGPROF, signal.SIGALRM)}
    signal.setitimer(signal.ITIMER_PROF, CPU_LIMIT)       # CPU time of this process: load does not stretch it
    signal.alarm(WALL_LIMIT)
    try:
        harness.run_case(entry["target"], (CORPUS / name).read_bytes())
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.alarm(0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_report_source_file_is_read_safely(tmp_path, target):
    """A report's source.file pointing at /dev/zero or a FIFO: a one-line error, no memory growth, no hang."""
    source = target
    if target == "fifo":
        source = str(tmp_path / "model.py")
        os.mkfifo(source)
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"verdict": "anomaly", "first": {
        "cell": "net", "cell_type": "Net", "op_type": "Sqrt", "source": {"file": source, "line": 3, "code": "x"}}}))
    contract(msoverflow("patch", "--from", report, "--how", "source"), {2}, says="not a regular file")
    contract(msoverflow("patch", "--from", report), {0, 2})


def test_default_saved_report_never_lands_in_the_dump_root(tmp_path):
    clean_dump(tmp_path / "dump")
    before = tree_digest(str(tmp_path / "dump"))
    contract(msoverflow("analyze", tmp_path / "dump" / "rank_0" / "Net", "--no-progress", cwd=tmp_path / "dump",
                        env={"MSOVERFLOW_REPORT_JSON": "report.json"}), {0, 3}, says="not saving")
    assert tree_digest(str(tmp_path / "dump")) == before


@pytest.mark.parametrize("first", ['{"op_name": "x", "rank": "0", "iteration": 0}',
                                   '{"op_name": "x", "rank": 0, "iteration": [1]}',
                                   '{"op_name": "x", "rank": 0, "iteration": 0, "inputs": 5}'])
def test_repro_report_wrong_types(tmp_path, first):
    clean_dump(tmp_path / "dump")
    (tmp_path / "r.json").write_text('{"verdict": "anomaly", "first": ' + first + "}")
    contract(msoverflow("repro", "--from", tmp_path / "r.json", "--dump", tmp_path / "dump", "-o", tmp_path / "out"),
             {2})


def test_repro_output_inside_the_dump_root_is_refused(tmp_path):
    clean_dump(tmp_path / "dump")
    (tmp_path / "r.json").write_text(json.dumps({"verdict": "anomaly", "first": {
        "op_name": OP, "op_type": "MatMul", "rank": 0, "iteration": 0, "graph": "0"}}))
    before = tree_digest(str(tmp_path / "dump"))
    contract(msoverflow("repro", "--from", tmp_path / "r.json", "--dump", tmp_path / "dump" / "rank_0",
                        "-o", tmp_path / "dump" / "repro"), {2}, says="refusing to write")
    assert tree_digest(str(tmp_path / "dump")) == before


def test_rank_metadata_and_rank_tables_are_read_safely(tmp_path):
    """Files the per-rank accounting reads: a FIFO and deep JSON in .dump_metadata, a deep or infinite rank table."""
    clean_dump(tmp_path / "dump")
    meta = tmp_path / "dump" / "rank_0" / ".dump_metadata"
    meta.mkdir()
    os.mkfifo(meta / "hccl.json")
    (meta / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (meta / "inf.json").write_text('{"rank_size": 1e999, "world_size": Infinity}')
    (tmp_path / "dump" / "rank_table.json").write_text('{"server_list": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (tmp_path / "dump" / ("rank_" + "9" * 200)).mkdir()
    contract(msoverflow("analyze", tmp_path / "dump", "--no-progress"), {0, 3})
