"""Every file of a dump told truly (issue 33, "Told wrongly about files"): each class on a copy of a REAL MindSpore
2.10 CPU dump (tests/support/gen_real_dumps.py, gen_dumpobj_dumps.py), edited as labelled in each test.

A file that cannot be read, whatever the reason, goes through the rule of a truncated one: its step is incomplete,
it is named, and it never makes a false origin. Tests run as root, where chmod 000 stops no read: the permission
cases run the CLI with the capabilities that let root bypass file permissions dropped (util-linux `setpriv`), so
the kernel refuses the read as it does for any user; a FIFO or a directory in a file's place is unreadable to
anyone."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from msoverflow.analysis import analyze
from tests.support.fixture_runs import copy_dump

ORIGIN_OUTPUT = "SqrtGrad.*output.0.*"       # the fp16 NormHead overflow's origin file (normhead_fp16_overflow)


def _as_a_user(argv):
    """argv as run by a process the file permissions apply to: root without CAP_DAC_OVERRIDE/READ_SEARCH."""
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without util-linux setpriv: file permissions cannot be made to apply")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search", *argv]


def _cli(path, *args, user=False):
    argv = [sys.executable, "-m", "msoverflow", "analyze", str(path), "--no-save", *args]
    return subprocess.run(_as_a_user(argv) if user else argv, capture_output=True, text=True, timeout=300)


def _json(proc):
    assert proc.returncode in (0, 1, 3), proc.stderr
    return json.loads(proc.stdout)


def _origin_file(dump):
    found = sorted((dump / "rank_0" / "Net" / "0" / "0").glob(ORIGIN_OUTPUT))
    assert len(found) == 1
    return found[0]


def _told_as_likely_origin(report, how):
    """The documented answer for the origin's own output file lost: INCONCLUSIVE, the likely origin named, the
    rank incomplete, and nothing that only a false origin would say."""
    assert report["verdict"] == "inconclusive"
    assert report["first"] is None
    assert report["likely_origin"]["op_type"] == "SqrtGrad"
    assert f"its output file {how}" in report["likely_origin"]["detail"]
    assert [(row["rank"], row["status"]) for row in report["ranks"]] == [(0, "incomplete")]
    said = json.dumps(report)
    assert "received" not in {row["status"] for row in report["ranks"]}
    assert "dump without filters" not in said and "first seen" not in said


def test_a_file_unreadable_by_permission_is_told_as_a_truncated_one_is(real_dumps, tmp_path):
    """Edited copy: the origin's output file chmod 000. Before: Cast "first seen" ANOMALY, the single rank
    "received", "dump without filters"."""
    cut = copy_dump(real_dumps["normhead_fp16_overflow"], tmp_path, "truncated")
    origin = _origin_file(cut)
    origin.write_bytes(origin.read_bytes()[:100])
    unreadable = copy_dump(real_dumps["normhead_fp16_overflow"], tmp_path, "unreadable")
    os.chmod(_origin_file(unreadable), 0)
    truncated = _json(_cli(cut, "--format", "json"))
    _told_as_likely_origin(truncated, "is truncated")
    proc = _cli(unreadable, "--format", "json", user=True)
    assert proc.returncode == 3
    report = _json(proc)
    _told_as_likely_origin(report, "cannot be read")
    assert report["likely_origin"]["op_name"] == truncated["likely_origin"]["op_name"]
    step = report["completeness"][0]
    assert (step["rank"], step["iteration"]) == (0, 0) and "1 of 422 files cannot be read" in step["reasons"][0]
    assert any("Permission denied" in w for w in report["warnings"])


@pytest.mark.parametrize("in_place", ["fifo", "directory"])
def test_a_fifo_or_a_directory_in_a_files_place_is_an_unreadable_file_of_its_step(real_dumps, tmp_path, in_place):
    """Edited copy: the origin's output file replaced by a FIFO or a directory of the same name: the listing names
    it and the step is incomplete as for any unread file; the likely origin is the op whose file it is."""
    dump = copy_dump(real_dumps["normhead_fp16_overflow"], tmp_path)
    origin = _origin_file(dump)
    origin.unlink()
    os.mkfifo(origin) if in_place == "fifo" else origin.mkdir()
    report = analyze(str(dump))
    assert report.verdict == "inconclusive" and report.first is None
    assert report.likely_origin is not None and report.likely_origin.op_type == "SqrtGrad"
    assert [(s.rank, s.step, s.unreadable) for s in report.completeness] == [(0, 0, [str(origin)])]
    assert not any("dump without filters" in w for w in report.warnings)


@pytest.mark.parametrize("how", ["permission", "truncated", "empty", "fifo"])
@pytest.mark.parametrize("which", ["input.0", "output.0"])
def test_every_unreadable_file_is_named_once(real_dumps, tmp_path, which, how):
    """Edited copy: one of the origin SqrtGrad's files made unreadable. The walk names it; the diagnosis, which
    asks for the same tensor again, does not name it a second time (before: an input unreadable by permission
    was warned twice, by the walk and by the recompute)."""
    dump = copy_dump(real_dumps["normhead_fp16_overflow"], tmp_path)
    path = sorted((dump / "rank_0" / "Net" / "0" / "0").glob(f"SqrtGrad.*{which}.*"))[0]
    if how == "permission":
        os.chmod(path, 0)
    elif how == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    elif how == "empty":
        path.write_bytes(b"")
    else:
        path.unlink()
        os.mkfifo(path)
    report = _json(_cli(dump, "--format", "json", user=how == "permission"))
    assert report["verdict"] != "clean"
    named = [w for w in report["warnings"] if path.name in w]
    assert len(named) == 1, named


def test_an_unreadable_rank_directory_is_named_not_no_dump_files_found(real_dumps, tmp_path):
    """Edited copy: rank_0/ chmod 000 (the only rank): exit 2 naming the directory."""
    dump = copy_dump(real_dumps["clean_fp32"], tmp_path)
    os.chmod(dump / "rank_0", 0)
    try:
        proc = _cli(dump, user=True)
    finally:
        os.chmod(dump / "rank_0", 0o755)
    assert proc.returncode == 2
    assert "no dump files found" not in proc.stderr
    assert f"{dump / 'rank_0'}: cannot list directory (Permission denied)" in proc.stderr


def test_an_unreadable_step_directory_is_an_incomplete_step_never_clean(real_dumps, tmp_path):
    """Edited copy: rank_0/Net/0/0/ chmod 000 in the clean two-step run (before: CLEAN over step 1 alone)."""
    dump = copy_dump(real_dumps["clean_fp32"], tmp_path)
    step0 = dump / "rank_0" / "Net" / "0" / "0"
    os.chmod(step0, 0)
    try:
        proc = _cli(dump, "--format", "json", user=True)
    finally:
        os.chmod(step0, 0o755)
    assert proc.returncode == 3
    report = _json(proc)
    assert [(s["rank"], s["iteration"]) for s in report["completeness"]] == [(0, 0)]
    assert "the step's directory cannot be listed (Permission denied)" in report["completeness"][0]["reasons"][0]
    assert report["ranks"][0]["status"] == "incomplete"

    both = copy_dump(real_dumps["clean_fp32"], tmp_path, "both")
    for step in (0, 1):
        os.chmod(both / "rank_0" / "Net" / "0" / str(step), 0)
    proc = _cli(both, user=True)
    assert proc.returncode == 2 and "cannot list directory (Permission denied)" in proc.stderr
    assert "no dump files found" not in proc.stderr


def test_one_extra_empty_file_is_named_in_its_own_step_and_no_other_step_is_short(multirank_dumps, tmp_path):
    """Edited copy of the 2-rank x 2-step run: one extra empty file in rank 0, step 0 (before: rank 0 step 1 and
    rank 1 step 0 "118 of 119 files")."""
    dump = copy_dump(multirank_dumps["dp2_empty_loss_mask"], tmp_path)
    step0 = dump / "rank_0" / "Net" / "0" / "0"
    model = sorted(step0.glob("MatMul.*.input.0.*.npy"))[0].name
    parts = model.split(".")
    parts[-5] = "7"                 # an input slot no step holds
    extra = step0 / ".".join(parts)
    extra.write_bytes(b"")
    report = analyze(str(dump))
    assert [(s.rank, s.step) for s in report.completeness] == [(0, 0)]
    assert report.completeness[0].truncated == [str(extra)]
    assert "1 of 119 files empty" in report.completeness[0].reasons[0]


def test_a_step_directory_emptied_between_two_steps_is_a_step_with_its_lost_files_counted(real_dumps, tmp_path):
    """Edited copy of the three-step run (overflow at its last step): step 1's files removed, its directory kept
    (before: step 1 not listed at all)."""
    dump = copy_dump(real_dumps["overflow_last_of_three_steps"], tmp_path)
    step1 = dump / "rank_0" / "Net" / "0" / "1"
    held = len(os.listdir(step1))
    for name in os.listdir(step1):
        os.unlink(step1 / name)
    report = analyze(str(dump))
    assert [(s.rank, s.step, s.present, s.earlier) for s in report.completeness] == [(0, 1, 0, True)]
    assert report.completeness[0].expected and report.completeness[0].expected <= held
    assert report.first is not None and report.first.op_type == "SqrtGrad" and report.first.step == 2


def test_a_checkpoint_left_in_a_clean_step_is_clean_with_a_note(real_dumps, tmp_path):
    """Edited copy of the clean run: `net.step.100.ckpt` written into step 0 (before: exit 3, not understood)."""
    dump = copy_dump(real_dumps["clean_fp32"], tmp_path)
    ckpt = dump / "rank_0" / "Net" / "0" / "0" / "net.step.100.ckpt"
    ckpt.write_bytes(b"\x08\x01" * 64)
    proc = _cli(dump)
    assert proc.returncode == 0 and proc.stdout.startswith("CLEAN")
    assert f"{ckpt}: a MindSpore checkpoint, not a dump file: skipped" in proc.stdout


def test_a_pynative_dump_of_the_optimizer_alone_gets_the_compiled_graphs_caveat(dumpobj_dumps):
    """Real PyNative run (no @jit): only nn.SGD's graph is dumped, three ops (before: no caveat under four ops).
    The saved graph says PyNative compiled it; a graph-mode run's does not."""
    report = analyze(str(dumpobj_dumps["pynative_optimizer_only"]))
    assert report.verdict == "clean"
    ops = {f.split(".")[0] for f in os.listdir(dumpobj_dumps["pynative_optimizer_only"] / "rank_0" / "Net" / "0" / "0")}
    assert ops == {"SGD", "AssignAdd", "Parameter"}
    assert any(line.startswith("PyNative run: only compiled graphs") for line in report.coverage)


def test_a_graph_mode_dump_gets_no_pynative_caveat(real_dumps):
    report = analyze(str(real_dumps["clean_fp32"]))
    assert report.verdict == "clean" and not any("PyNative" in line for line in report.coverage)


def test_an_inputs_only_clean_dump_says_what_it_read(dumpobj_dumps):
    """Real run dumped with input_output 1 (before: "in the outputs of 0 op run(s) ... not read, on purpose: the
    inputs of ops whose outputs are fine")."""
    proc = _cli(dumpobj_dumps["clean_inputs_only"])
    assert proc.returncode == 0
    headline = proc.stdout.splitlines()[0]
    assert headline.startswith("CLEAN: no inf, NaN or out-of-range value in the inputs of ")
    assert "outputs of 0" not in headline and "inputs of ops whose outputs are fine" not in headline


def test_a_jit_graph_run_twice_in_one_iteration_folder_is_no_step_that_lost_files(dumpobj_dumps):
    """Real PyNative run, @jit forward/backward, update skipped at step 0: Net/0/1 holds two runs of the graph
    (steps 1 and 2), Net/0/0 one (before: "rank 0, step 0: 346 of 692 files ... files of a step the job went past
    are missing")."""
    dump = dumpobj_dumps["jit_dynamic_scale"]
    graph0 = dump / "rank_0" / "Net" / "0"
    assert len(os.listdir(graph0 / "1")) == 2 * len(os.listdir(graph0 / "0"))
    report = analyze(str(dump))
    assert report.completeness == []
    assert report.first is not None and report.first.op_type == "SqrtGrad" and report.first.step == 0
    assert not any("missing or cut short" in line for line in report.inconclusive + report.warnings)


def test_the_dump_is_read_by_one_object_metadata_once_listing_once_layout_once(multirank_dumps, monkeypatch):
    """Issue 33 item 2 on the real 2-rank run (an origin, so the diagnosis runs): each rank's .dump_metadata is
    parsed once, every directory listed once, and the parallel layout resolved once (before: the diagnosis
    resolved it a second time and assemble a third)."""
    from collections import Counter

    from msoverflow import layout, parallel_layout
    parsed, resolved, listed = Counter(), [], Counter()
    real_metadata, real_resolve, real_scandir = layout.read_dump_metadata, parallel_layout.resolve, os.scandir
    monkeypatch.setattr(layout, "read_dump_metadata", lambda root, warn: parsed.update([root]) or
                        real_metadata(root, warn))
    monkeypatch.setattr(parallel_layout, "resolve", lambda *args: resolved.append(args) or real_resolve(*args))
    monkeypatch.setattr(os, "scandir", lambda path=".": listed.update([os.fspath(path)]) or real_scandir(path))
    dump = multirank_dumps["dp2_empty_loss_mask"]
    report = analyze(str(dump), jobs=1)
    assert report.first is not None and report.first.op_type == "Div"
    assert parsed and set(parsed) <= {str(dump / "rank_0"), str(dump / "rank_1")} and set(parsed.values()) == {1}
    assert len(resolved) == 1
    under = [path for path in listed if path.startswith(str(dump))]
    assert under and all(listed[path] == 1 for path in under), {p: n for p, n in listed.items() if n > 1}
