"""Incomplete dumps, as real jobs leave them: copies of REAL MindSpore 2.10 CPU dumps (tests/support/gen_real_dumps.py,
the 2-rank `msrun` fp16 NormHead run whose origin is SqrtGrad on rank 1 at its last step, and the clean 2-step fp32
run) cut the way a killed job, a lost directory or a writer still at work cuts them. msoverflow/completeness.py must
notice from the listing and the headers, and the answer must say so: `incomplete` ranks, an inconclusive verdict
(exit 3) with the counts, never `clean`, never "dump the other ranks" when they are dumped. Formats only Ascend
writes (binary DumpData, msaccucmp) are SPEC-BUILT from the documented formats (tests/support/ascend_fixtures.py)."""
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from msoverflow import names
from msoverflow.analysis import analyze
from msoverflow.cli import main
from msoverflow.completeness import RECENT_SECONDS, check
from msoverflow.layout import Dump
from msoverflow.render import render
from tests.support.fixture_runs import copy_dump

SCHEMA = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "msoverflow", "schema", "report.schema.json")
NORMHEAD = "dp2_normhead_one_rank"      # origin: SqrtGrad on rank 1 at iteration 1 (its last step)
LAST = 1
RECEIVED_LEAD = "a bad value was received but its origin may be in unreadable or missing files"


def _step_dir(dump, rank, iteration):
    return dump / f"rank_{rank}" / "Net" / "0" / str(iteration)


def _by_time(folder):
    """The step's files in the order they were written (the timestamp in each name)."""
    return sorted(os.listdir(folder), key=lambda name: names.parse(name).timestamp)


def _cut(step, keep):
    """Delete the step's files written after the first `keep(names in the order written)` of them, as a job killed
    there leaves its dump."""
    written = _by_time(step)
    for name in written[keep(written):]:
        os.remove(step / name)


def _sqrtgrad_output(folder):
    [name] = [n for n in os.listdir(folder) if n.startswith("SqrtGrad.") and ".output.0." in n]
    return folder / name


def _age(folder, seconds=3600):
    """The times a finished job leaves: truncating a file in a test makes it look freshly written."""
    then = time.time() - seconds
    for name in os.listdir(folder):
        os.utime(folder / name, (then, then))


def _row(report, rank):
    return next(row for row in report.rank_status if row.rank == rank)


def _every_form(report):
    doc = json.loads(render(report, "json"))
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, json.load(open(SCHEMA)))
    return render(report, "text"), render(report, "markdown"), doc, render(report, "html")


@pytest.fixture(scope="session")
def three_step_dumps():
    """tests/support/gen_incomplete_dumps.py: a clean 3-step fp32 run (the demo with its NormHead in fp32), cached."""
    from tests.conftest import mindspore_available
    if not mindspore_available():
        pytest.skip("mindspore is not installed (pip install 'msoverflow[mindspore]')")
    from tests.support import gen_incomplete_dumps
    return gen_incomplete_dumps.ensure_cases(
        progress=lambda msg: print(f"[incomplete dumps] {msg}", file=sys.__stderr__, flush=True))


@pytest.fixture(scope="module")
def msprobe_dumps():
    from tests.support import gen_msprobe_dumps
    if not gen_msprobe_dumps.available():
        pytest.skip("mindstudio-probe is not installed")
    return gen_msprobe_dumps.ensure_cases()


def _all_real_dumps(real_dumps, multirank_dumps, msprobe_dumps, three_step_dumps):
    found = [real_dumps[name] for name in real_dumps] + [multirank_dumps[name] for name in multirank_dumps]
    found += [three_step_dumps[name] for name in three_step_dumps]
    return found + [msprobe_dumps[name] / "dump" if (msprobe_dumps[name] / "dump").is_dir() else msprobe_dumps[name]
                    for name in msprobe_dumps]


@pytest.mark.mindspore
def test_every_real_dump_as_written_is_complete(real_dumps, multirank_dumps, msprobe_dumps, three_step_dumps):
    """No false alarm: CPU single-rank (filtered, inputs-only, three graphs), msrun and msprobe dumps are complete,
    although on CPU the execution order and the files do not name every kernel alike."""
    checked = 0
    for dump in _all_real_dumps(real_dumps, multirank_dumps, msprobe_dumps, three_step_dumps):
        found = check(Dump.open(str(dump), lambda message: None).dirs)
        assert found == [], (dump, [(s.rank, s.iteration, s.reasons) for s in found])
        checked += 1
    assert checked >= 21


@pytest.mark.mindspore
def test_truncated_origin_output_and_an_empty_file_make_rank_1_incomplete_not_received(multirank_dumps, tmp_path,
                                                                                       capsys):
    dump = copy_dump(multirank_dumps[NORMHEAD], tmp_path)
    step = _step_dir(dump, 1, LAST)
    with open(_sqrtgrad_output(step), "r+b") as fh:
        fh.truncate(100)
    empty = next(n for n in _by_time(step) if n.startswith("Mul.") and ".output." in n)
    open(step / empty, "wb").close()
    _age(step)
    report = analyze(str(dump), progress=False)
    assert report.verdict == "inconclusive" and report.first is None and report.likely_origin is None
    row = _row(report, 1)
    assert (row.status, row.iteration, row.present, row.expected) == ("incomplete", LAST, 454, 456)
    assert "2 of 456 files truncated or empty" in row.note and "received" not in row.note
    assert _row(report, 0).status == "received"      # rank 0 did receive it: its own files are complete
    [cut] = report.completeness
    assert (cut.rank, cut.iteration) == (1, LAST) and len(cut.truncated) == 2
    assert not any("dump the other ranks" in w for w in report.warnings)
    assert any("rank(s) 1 hold incomplete steps" in w for w in report.warnings)
    assert main(["analyze", str(dump), "--no-progress"]) == 3
    out = capsys.readouterr().out
    assert out.startswith(f"INCONCLUSIVE: {RECEIVED_LEAD}: rank 1, step 1: 2 of 456 files truncated or empty")
    assert "cross-rank" not in out and "dump the other ranks" not in out


@pytest.mark.mindspore
def test_a_received_bad_value_in_a_cut_step_is_said_in_every_form_never_no_bad_value_seen(multirank_dumps, tmp_path):
    """Rank 0 received the bad value through the gradient AllReduce, then its step was cut short; rank 0 analysed
    alone. The arrival is a bad value read: the verdict is inconclusive with the arrival as its lead, not 'no bad
    value seen'."""
    dump = copy_dump(multirank_dumps[NORMHEAD], tmp_path)
    step = _step_dir(dump, 0, LAST)
    _cut(step, lambda written: 20 + max(i for i, n in enumerate(written)          # 20 files after the delivery
                                        if n.startswith("AllReduce.") and ".output." in n))
    report = analyze(str(dump), ranks=[0], progress=False)
    assert report.verdict == "inconclusive" and report.first is None and report.likely_origin is None
    assert [(a.rank, a.step, a.op_type) for a in report.arrivals] == [(0, LAST, "AllReduce")]
    assert _row(report, 0).status == "incomplete" and report.bad_values_seen
    text, markdown, doc, page = _every_form(report)
    assert text.startswith(f"INCONCLUSIVE: {RECEIVED_LEAD}: rank 0, step {LAST}: ")
    assert markdown.startswith(f"# msoverflow report\n\n**Inconclusive**: {RECEIVED_LEAD}: rank 0, step {LAST}: ")
    assert f"<dt>bad values</dt><dd>{RECEIVED_LEAD}</dd>" in page
    assert doc["arrivals"][0]["op_type"] == "AllReduce" and doc["verdict"] == "inconclusive"
    assert not any("no bad value seen" in form for form in (text, markdown, page))


@pytest.mark.mindspore
def test_only_the_origin_output_truncated_names_the_likely_origin_in_every_form(multirank_dumps, tmp_path):
    dump = copy_dump(multirank_dumps[NORMHEAD], tmp_path)
    step = _step_dir(dump, 1, LAST)
    with open(_sqrtgrad_output(step), "r+b") as fh:
        fh.truncate(100)
    _age(step)
    report = analyze(str(dump), progress=False)
    assert report.verdict == "inconclusive" and report.first is None
    likely = report.likely_origin
    assert (likely.rank, likely.iteration, likely.op_type, likely.role, likely.kind) == (
        1, LAST, "SqrtGrad", "likely-origin", "overflow")
    assert likely.cell_type == "NormHead" and likely.forward_op == "Sqrt"
    assert "its output file is truncated" in likely.detail and "received input 0 from it" in likely.detail
    assert all(t.stats is not None and not t.stats.bad for t in likely.inputs)      # its inputs were finite
    assert report.inconclusive[0].startswith("likely origin: SqrtGrad (backward of Sqrt) in ")
    row = _row(report, 1)
    assert (row.status, row.op_type) == ("incomplete", "SqrtGrad")
    text, markdown, doc, html = _every_form(report)
    assert text.startswith("INCONCLUSIVE: likely origin: SqrtGrad") and "its output file is truncated" in text
    assert "likely origin: SqrtGrad" in markdown and "| 1 | incomplete |" in markdown
    assert doc["verdict"] == "inconclusive" and doc["first"] is None
    assert (doc["likely_origin"]["op_type"], doc["likely_origin"]["role"]) == ("SqrtGrad", "likely-origin")
    assert doc["ranks"][1]["status"] == "incomplete" and doc["ranks"][1]["expected"] == 456
    assert doc["completeness"][0]["truncated"] == [str(_sqrtgrad_output(step))]
    assert "likely origin: SqrtGrad" in html and 'class="incomplete"' in html


@pytest.mark.mindspore
def test_a_step_killed_after_sqrtgrads_inputs_is_incomplete_not_clean(multirank_dumps, tmp_path, capsys):
    dump = copy_dump(multirank_dumps[NORMHEAD], tmp_path)
    step = _step_dir(dump, 1, LAST)
    _cut(step, lambda written: 1 + max(i for i, n in enumerate(written)
                                       if n.startswith("SqrtGrad.") and ".input." in n))
    report = analyze(str(dump), progress=False)
    assert report.verdict == "inconclusive" and report.first is None
    row = _row(report, 1)
    assert row.status == "incomplete" and row.iteration == LAST
    assert row.expected == 145 and 0 < row.present < 145       # the graph's 145 kernels (execution order)
    assert f"{row.present} of 145 kernels' files" in row.note and "the job died" in row.note
    assert main(["analyze", str(dump), "--no-progress"]) == 3
    assert f"{row.present} of 145 kernels' files" in capsys.readouterr().out


@pytest.mark.mindspore
def test_a_step_without_files_only_for_in_place_views_is_complete(three_step_dumps, tmp_path):
    """MindSpore may run a Reshape as a view of its input and write no file for it (seen: the zero-token guard's
    skip branch, a graph that ran in one step only, had no files for the Reshapes of its inputs). The last step of
    the 3-step fp32 NormHead run alone (as --steps 2 dumps it), its Reshape files removed: complete (clean); with
    a MatMul's files removed too, cut short."""
    dump = copy_dump(three_step_dumps["normhead_fp32_clean_3steps"], tmp_path)
    for step in (0, 1):
        shutil.rmtree(_step_dir(dump, 0, step))
    last = _step_dir(dump, 0, 2)
    removed = [name for name in os.listdir(last) if name.startswith("Reshape.")]
    assert len(removed) >= 10
    for name in removed:
        os.remove(last / name)
    report = analyze(str(dump), progress=False)
    assert report.completeness == [] and report.verdict == "clean"
    matmul = sorted(n for n in os.listdir(last) if n.startswith("MatMul."))[0].split(".")[1]
    for name in os.listdir(last):
        if name.split(".")[1] == matmul:
            os.remove(last / name)
    report = analyze(str(dump), progress=False)
    assert [(cut.rank, cut.iteration) for cut in report.completeness] == [(0, 2)] and report.verdict == "inconclusive"


@pytest.mark.mindspore
def test_a_step_directory_missing_on_one_rank_is_incomplete(multirank_dumps, tmp_path):
    dump = copy_dump(multirank_dumps[NORMHEAD], tmp_path)
    shutil.rmtree(_step_dir(dump, 1, LAST))
    report = analyze(str(dump), progress=False)
    row = _row(report, 1)
    assert (row.status, row.iteration, row.present, row.expected) == ("incomplete", LAST, 0, 456)
    assert f"step {LAST} is absent on this rank (ranks 0 hold it" in row.note
    assert report.verdict == "inconclusive"


@pytest.mark.mindspore
@pytest.mark.parametrize("case", ["three_steps", "clean_fp32"])
def test_a_clean_dump_whose_last_step_lost_half_its_files_is_inconclusive_with_counts(
        real_dumps, three_step_dumps, tmp_path, capsys, case):
    """The 3-step fp32 NormHead run (and the 2-step fp32 regressor): the later half of the last step's files gone,
    as a job killed mid-step leaves it. Clean before, inconclusive (exit 3) with the kernel counts after."""
    source, last, kernels = ((three_step_dumps["normhead_fp32_clean_3steps"], 2, 97) if case == "three_steps"
                             else (real_dumps["clean_fp32"], 1, 23))
    assert main(["analyze", str(source), "--no-progress"]) == 0       # complete: clean
    capsys.readouterr()
    dump = copy_dump(source, tmp_path)
    step = _step_dir(dump, 0, last)
    _cut(step, lambda written: len(written) // 2)
    assert main(["analyze", str(dump), "--no-progress"]) == 3
    out = capsys.readouterr().out
    assert out.startswith(f"INCONCLUSIVE: no bad value seen, but rank 0, step {last}: ")
    assert f"of {kernels} kernels' files (graph 0)" in out and "the job died or the dump is still being written" in out
    report = analyze(str(dump), progress=False)
    [cut] = report.completeness
    assert (cut.rank, cut.iteration, cut.expected) == (0, last, kernels) and 0 < cut.present < kernels
    assert _row(report, 0).status == "incomplete"


@pytest.mark.mindspore
def test_a_file_written_seconds_ago_means_the_dump_may_still_be_being_written(real_dumps, tmp_path):
    dump = copy_dump(real_dumps["clean_fp32"], tmp_path)
    assert analyze(str(dump), progress=False).verdict == "clean"
    step = _step_dir(dump, 0, 1)
    os.utime(step / _by_time(step)[-1])             # now: a writer creates its files, so their directory is new too
    os.utime(step)
    # step 0 settled earlier with as many files, and no file is cut short: a job that just ended, not one at work
    warnings = []
    assert analyze(str(dump), progress=False, warn=warnings.append).verdict == "clean"
    assert any("written in the last" in w and "taken as complete" in w for w in warnings)
    # nothing to confirm the fresh step (its step 0 is gone): the writer may still be at work
    shutil.rmtree(_step_dir(dump, 0, 0))
    report = analyze(str(dump), progress=False)
    [cut] = report.completeness
    assert cut.recent and (cut.rank, cut.iteration) == (0, 1)
    assert report.verdict == "inconclusive" and "the dump may still be being written" in report.inconclusive[0]
    assert _row(report, 0).status == "incomplete"
    # the job is known to have ended (msoverflow run and patch --verify say so): young files are complete
    assert analyze(str(dump), progress=False, finished=True).verdict == "clean"
    assert main(["analyze", str(dump), "--finished", "--no-progress"]) == 0


@pytest.mark.mindspore
def test_a_fresh_copy_whose_every_file_is_new_is_not_a_dump_being_written(real_dumps, tmp_path):
    dump = copy_dump(real_dumps["clean_fp32"], tmp_path)
    now = time.time()
    for root, dirs, files in os.walk(dump):       # as `cp -r` leaves it: every file and directory new
        for name in files + dirs:
            os.utime(os.path.join(root, name), (now, now))
    assert analyze(str(dump), progress=False).verdict == "clean"
    assert check(Dump.open(str(dump), lambda message: None).dirs, now=now + RECENT_SECONDS / 2) == []


@pytest.mark.mindspore
def test_an_origin_proven_on_another_rank_stands_and_the_cut_rank_is_incomplete(multirank_dumps, tmp_path, capsys):
    """Rank 0 (which only received the bad value) lost the later half of its last step: the origin proven on rank 1
    by its own inputs is still the answer (exit 1); rank 0 is `incomplete`, not `received`, and the cut is listed
    under the dump's limits."""
    dump = copy_dump(multirank_dumps[NORMHEAD], tmp_path)
    step = _step_dir(dump, 0, LAST)
    _cut(step, lambda written: len(written) // 2)
    report = analyze(str(dump), progress=False)
    assert report.verdict == "anomaly"
    assert (report.first.rank, report.first.iteration, report.first.op_type) == (1, LAST, "SqrtGrad")
    assert [(r.rank, r.status) for r in report.rank_status] == [(0, "incomplete"), (1, "origin")]
    assert any(reason.startswith(f"rank 0, step {LAST}: ") for reason in report.inconclusive)
    assert main(["analyze", str(dump), "--no-progress"]) == 1
    assert f"also: rank 0, step {LAST}: " in capsys.readouterr().out


def _as_statistics(dump, keep=None):
    """The dump in its statistic.csv form (saved_data "statistic"): each step's npy files become rows of one
    statistic.csv (documented-format writer, tests/support/ascend_fixtures.py) computed from the real tensors.
    keep(step, rows) may cut the rows."""
    from tests.support.ascend_fixtures import statistics_form
    statistics_form(str(dump / "rank_0" / "Net" / "0"), keep)


@pytest.mark.mindspore
def test_a_statistics_dump_is_complete_and_its_cut_last_step_is_not(three_step_dumps, tmp_path):
    """statistic.csv dumps have one file per step: the kernels are rows, never "0 of 97 kernels' files"."""
    whole = copy_dump(three_step_dumps["normhead_fp32_clean_3steps"], tmp_path, "whole")
    _as_statistics(whole)
    _age(whole / "rank_0" / "Net" / "0" / "2")
    assert check(Dump.open(str(whole), lambda message: None).dirs) == []
    assert analyze(str(whole), progress=False).verdict == "clean"
    cut = copy_dump(three_step_dumps["normhead_fp32_clean_3steps"], tmp_path, "cut")
    _as_statistics(cut, keep=lambda step, rows: rows[:len(rows) // 2] if step == 2 else rows)
    _age(cut / "rank_0" / "Net" / "0" / "2")
    report = analyze(str(cut), progress=False)
    [step] = report.completeness
    assert (step.rank, step.iteration, step.present * 2 in (step.expected, step.expected - 1)) == (0, 2, True)
    assert "statistic.csv rows (as step" in step.reasons[0] and report.verdict == "inconclusive"


@pytest.mark.parametrize("form", ["bf16_bin", "ffts_bin", "msaccucmp_npy"])
def test_a_cut_binary_dump_file_is_found_by_its_header(tmp_path, form):
    """Binary DumpData and msaccucmp files, SPEC-BUILT from the documented formats (tests/support/ascend_fixtures.py):
    whole, nothing is incomplete; the SqrtGrad file cut short (its payload, as a killed writer leaves it) is named."""
    from tests.support.ascend_fixtures import build_wild_form
    desc = build_wild_form(str(tmp_path / "dump"), form)
    _age(Path(desc["dir"]))
    assert check(Dump.open(desc["root"], lambda message: None).dirs) == []
    victim = next(Path(desc["dir"]) / n for n in sorted(os.listdir(desc["dir"])) if n.startswith("SqrtGrad.")
                  and (".output." in n or not n.endswith(".npy")))
    with open(victim, "r+b") as fh:
        fh.truncate(os.path.getsize(victim) - 3)
    _age(Path(desc["dir"]))
    report = analyze(desc["root"], progress=False)        # the walk reads the header and finds the file cut
    [cut] = report.completeness
    assert cut.truncated == [str(victim)] and cut.reasons == [f"1 of {cut.expected} files truncated or empty"]
    assert report.verdict != "clean"
