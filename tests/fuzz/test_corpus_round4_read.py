"""Regression cases of issue 28 (hardening round 4), A1-A5: never CLEAN or EQUIVALENT on data that was not read.

Each builds the smallest dump that showed the class (the formats as tests/support/ascend_fixtures.py and
synth_dump.py write them, labelled there) and runs the real CLI in-process under the harness contract (exit code in
0/1/2/3, no traceback). The long fuzz targets of these classes are in tests/fuzz/targets_read.py.
"""
import contextlib
import io
import itertools
import os
from pathlib import Path

import numpy as np
import pytest

import msoverflow
from msoverflow import cli
from msoverflow.errors import UserError
from tests.fuzz import targets_read
from tests.support import ascend_fixtures as af
from tests.support.synth_dump import SynthDump

CLEAN, ANOMALY, INCONCLUSIVE = 0, 1, 3
X = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float16)
INF = np.array([[np.inf, 2.0], [3.0, 4.0]], dtype=np.float16)


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(a) for a in argv])
    assert "Traceback" not in err.getvalue() and code in (0, 1, 2, 3), err.getvalue()[-1500:]
    return code, out.getvalue() + err.getvalue()


def steps_dump(root: Path, steps=3, ops=10, fmt="npy", ranks=1) -> Path:
    """`ops` clean Add ops in each of `steps` steps (npy files, or one statistic.csv per step)."""
    for rank in range(ranks):
        dump = SynthDump(str(root), rank=rank)
        for step in range(steps):
            if fmt == "npy":
                for i in range(ops):
                    dump.op(step, "Add", f"Default_network-Net_Add-op{i}", [X], [X * 2])
            else:
                rows = [dict(op_type="Add", op_name=f"Default/network-Net/Add-op{i}", task_id=i, stream_id=0,
                             timestamp=1000 * step + i, io="output", slot=0, array=X) for i in range(ops)]
                af.write_statistic_csv(os.path.join(dump.dir(step), "statistic.csv"), rows, variant="2.2")
    return root


def step_dir(root: Path, step: int, rank: int = 0) -> Path:
    return root / f"rank_{rank}" / "Net" / "0" / str(step)


# ---- A1: a DumpData output payload cut short -------------------------------------------------------------------

@pytest.mark.parametrize("output", [X, INF], ids=["finite", "inf"])
def test_dumpdata_with_its_output_payload_cut_is_never_clean(tmp_path, output):
    path = af.write_dump_bin(str(tmp_path / "d" / "Add.Default_network-Net_Add-op1.1.0.100"),
                             "Default/network-Net/Add-op1", inputs=[X], outputs=[output])
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[:-4])          # the last output's payload stops 4 bytes short
    code, text = run("analyze", tmp_path / "d", "--no-progress")
    assert code == INCONCLUSIVE, text


# ---- A2: a shortened DumpData name that mapping.csv does not resolve ------------------------------------------

@pytest.mark.parametrize("mapping", [None, b""], ids=["missing", "empty"])
def test_short_named_dumpdata_without_its_mapping_is_never_clean(tmp_path, mapping):
    folder = tmp_path / "d" / "rank_0" / "Net" / "0" / "0"
    folder.mkdir(parents=True)
    af.write_dump_bin(str(folder / ("0123456789abcdef01234567")), "Default/network-Net/Add-op1", inputs=[X],
                      outputs=[INF])
    af.write_dump_bin(str(folder / "Mul.Default_network-Net_Mul-op2.2.0.101"), "Default/network-Net/Mul-op2",
                      inputs=[X], outputs=[X])
    if mapping is not None:
        (folder / "mapping.csv").write_bytes(mapping)
    code, text = run("analyze", tmp_path / "d", "--no-progress")
    assert code != CLEAN, text


# ---- A3: cuts outside each rank's last step -----------------------------------------------------------------

def test_statistic_csv_cut_in_step_0_of_3_is_inconclusive(tmp_path):
    root = steps_dump(tmp_path / "d", fmt="statistic")
    csv = step_dir(root, 0) / "statistic.csv"
    lines = csv.read_bytes().splitlines(keepends=True)
    csv.write_bytes(b"".join(lines[:3]))           # the header and 2 of 10 rows
    code, text = run("analyze", root, "--no-progress")
    assert code == INCONCLUSIVE and "2 of 10" in text, text


def test_kernels_removed_from_step_0_without_execution_order_are_inconclusive(tmp_path):
    root = steps_dump(tmp_path / "d")
    assert not (root / "rank_0" / "execution_order").exists()
    for name in sorted(os.listdir(step_dir(root, 0)))[:6]:      # 3 of 10 kernels' files
        os.remove(step_dir(root, 0) / name)
    code, text = run("analyze", root, "--no-progress")
    assert code == INCONCLUSIVE, text


def test_a_step_cut_like_the_others_is_clean(tmp_path):
    """The check compares steps with each other: a dump whose steps all agree stays CLEAN (no false alarm)."""
    code, text = run("analyze", steps_dump(tmp_path / "d"), "--no-progress")
    assert code == CLEAN, text


# ---- A4/A5: compare reads and checks both sides -------------------------------------------------------------

def _bin_pair(root: Path):
    sides = []
    for side in ("a", "b"):
        folder = root / side
        folder.mkdir(parents=True)
        for i, op in enumerate(("Add", "Mul")):
            af.write_dump_bin(str(folder / f"{op}.Default_network-Net_{op}-op{i}.{i}.0.10{i}"),
                              f"Default/network-Net/{op}-op{i}", inputs=[X], outputs=[X])
        sides.append(folder)
    return sides


@pytest.mark.parametrize("cut", ["payload", "empty"])
def test_compare_with_a_cut_dumpdata_target_file_is_inconclusive(tmp_path, cut):
    a, b = _bin_pair(tmp_path)
    assert run("compare", a, b)[0] == CLEAN           # EQUIVALENT before the cut
    victim = b / "Mul.Default_network-Net_Mul-op1.1.0.101"
    victim.write_bytes(victim.read_bytes()[:-4] if cut == "payload" else b"")
    code, text = run("compare", a, b)
    assert code == INCONCLUSIVE and "target is incomplete" in text, text


def test_compare_with_a_target_that_lost_its_last_kernels_is_inconclusive(tmp_path):
    a, b = steps_dump(tmp_path / "a", ops=20), steps_dump(tmp_path / "b", ops=20)
    for name in sorted(os.listdir(step_dir(b, 2)))[-12:]:       # the last 12 kernel files of the last step
        os.remove(step_dir(b, 2) / name)
    code, text = run("compare", a, b)
    assert code == INCONCLUSIVE and "target is incomplete" in text, text
    code, text = run("compare", b, a)                  # the cut side as the baseline
    assert code == INCONCLUSIVE and "baseline is incomplete" in text, text


def test_compare_with_a_kernel_filtered_baseline_is_inconclusive_with_the_counts(tmp_path):
    a, b = steps_dump(tmp_path / "a", steps=1, ops=2), steps_dump(tmp_path / "b", steps=1, ops=28)
    code, text = run("compare", a, b)
    assert code == INCONCLUSIVE and "only 2 of the target's 28 op runs" in text, text


def test_compare_of_two_whole_dumps_stays_equivalent(tmp_path):
    code, text = run("compare", steps_dump(tmp_path / "a"), steps_dump(tmp_path / "b"))
    assert code == CLEAN and "EQUIVALENT" in text, text


# ---- C6 (API): an iterable selection is listed only so far ----------------------------------------------------

@pytest.mark.parametrize("ranks", [itertools.count(), range(0, 2 ** 40, 3)], ids=["endless", "stepped"])
def test_an_endless_iterable_selection_is_refused(tmp_path, ranks):
    root = steps_dump(tmp_path / "d", steps=1, ops=1)
    with pytest.raises(UserError, match="more than 1,000,000 values"):
        msoverflow.analyze(str(root), ranks=ranks)


# ---- the fuzz targets themselves: a cut they make is seen ----------------------------------------------------

@pytest.mark.parametrize("fmt", targets_read.FORMATS)
@pytest.mark.parametrize("action", ["remove", "truncate", "rows", "mapping_missing"])
def test_fuzz_cut_plans_of_each_format(fmt, action):
    """Each cut the long run draws, in each format, once: compare never EQUIVALENT, analyze never CLEAN."""
    from tests.fuzz import harness
    plan = {"format": fmt, "ranks": 1, "order": False, "bad": False, "side": "b", "rank": 0, "step": 0,
            "action": action, "k": 3, "pos": 5, "noise": [], "fmt": "json"}
    data = __import__("json").dumps(plan).encode()
    harness.run_case("compare_cut", data)
    harness.run_case("completeness_step", data)


# ---- a layout YAML found without --parallel: a bounded set of files, a bounded read each ----------------------

def test_yamls_beside_a_dump_are_read_and_parsed_a_bounded_number_of_times(tmp_path, monkeypatch):
    """A dump directly under a folder of unrelated and hostile YAMLs (one analyze under /tmp hung for minutes on
    one): at most 16 are read, 4 parsed (only those with a top-level parallel_config: key), each read bounded."""
    from msoverflow import parallel_layout, safeio
    dump = steps_dump(tmp_path / "d", steps=1, ops=1)
    for i in range(30):
        (tmp_path / f"a{i:02d}.yaml").write_text("parallel_config:\n  data_parallel: [" + "1, " * 20 + "]\n")
        (tmp_path / f"b{i:02d}.yml").write_text("x: 1\n" * 50_000)              # unrelated, 250 KB
    reads, parses = [], []
    real_read, real_loads = safeio.read_text, safeio.loads_yaml
    monkeypatch.setattr(safeio, "read_text", lambda path, limit, **kw: reads.append(limit) or real_read(
        path, limit, **kw))
    monkeypatch.setattr(safeio, "loads_yaml", lambda text, *a, **kw: parses.append(len(text)) or real_loads(
        text, *a, **kw))
    warnings = []
    assert parallel_layout._yaml_beside(str(dump), warnings.append) is None
    assert len(reads) <= 16 and all(limit <= 64 << 10 for limit in reads)
    assert len(parses) == 4
    assert any("--parallel" in w for w in warnings)


def test_a_yaml_beside_the_dump_with_a_layout_is_still_found(tmp_path):
    from msoverflow import parallel_layout
    dump = steps_dump(tmp_path / "d", steps=1, ops=1)
    (tmp_path / "notes.yaml").write_text("title: unrelated\n")
    (tmp_path / "run_llama.yaml").write_text("model: {}\nparallel_config:\n  data_parallel: 2\n  model_parallel: 1\n")
    spec = parallel_layout._yaml_beside(str(dump), lambda message: None)
    assert spec is not None and spec.dp == 2 and "run_llama.yaml" in spec.source


@pytest.mark.parametrize("fmt", ["npy", "statistic"])
def test_the_clean_headline_counts_what_was_read_and_says_what_was_skipped(tmp_path, fmt):
    """The headline counted files (input files never read among them): it counts the op runs whose outputs were
    read (values or statistics) and names what is skipped on purpose."""
    code, text = run("analyze", steps_dump(tmp_path / "d", fmt=fmt), "--no-progress")
    assert code == CLEAN
    files = 60 if fmt == "npy" else 3
    assert (f"no inf, NaN or out-of-range value in the outputs of 30 op run(s) read from {files} file(s)" in text
            and "not read, on purpose: the inputs of ops whose outputs are fine" in text), text


@pytest.mark.parametrize("steps", [10 ** 5000, [10 ** 5000]], ids=["int", "listed"])
def test_a_selection_of_5000_digits_is_named_briefly(tmp_path, steps):
    """Found by the api_args target: the message printed the number (ValueError: int too large to convert)."""
    root = steps_dump(tmp_path / "d", steps=1, ops=1)
    with pytest.raises(UserError, match="integer of 16610 bits is not a step or rank id"):
        msoverflow.compare(str(root), str(root), steps=steps)
