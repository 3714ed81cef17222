"""`msoverflow analyze` on REAL multi-rank MindSpore 2.10 CPU dumps: `msrun` starts 2 or 4 workers, MCCL
collectives, data parallel so TrainOneStepCell's gradient AllReduce carries one rank's bad gradient to every rank
(tests/support/gen_real_dumps.py MULTI_RANK_CASES, tests/support/cases/realdump/dp_allreduce.py). Each case's case.json states
the first origin and every rank's status; these tests hold the analysis to it, in every output format, and with the
ranks' clocks shifted by hours."""
import json
import os
import random
import shutil

import pytest

from msoverflow.analysis import analyze
from msoverflow.cli import main
from msoverflow.render import render
from msoverflow.report_dict import report_dict
from tests.support import gen_real_dumps as gen

pytestmark = pytest.mark.mindspore
CASES = [case.name for case in gen.MULTI_RANK_CASES if case.expected["expected_verdict"] == "anomaly"]
SCHEMA = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "msoverflow", "schema", "report.schema.json")


def _table(report):
    return {str(r.rank): {"status": r.status, "iteration": r.iteration, "op_type": r.op_type}
            for r in report.rank_status}


@pytest.mark.parametrize("case", CASES)
def test_first_origin_its_rank_and_step_and_every_ranks_status(multirank_dumps, case):
    expected = multirank_dumps.case(case)
    report = analyze(str(multirank_dumps[case]), progress=False)
    f = report.first
    assert report.verdict == "anomaly"
    assert (f.rank, f.iteration, f.op_type, f.kind, f.role) == (
        expected["expected_origin_rank"], expected["expected_iteration"], expected["expected_first_op_type"],
        expected["expected_kind"], "origin")
    assert f.cell_type == expected["expected_cell"] and expected["expected_source_contains"] in f.source.code
    assert _table(report) == expected["expected_ranks"]
    later = [{"rank": a.rank, "iteration": a.iteration, "op_type": a.op_type} for a in report.anomalies[1:]]
    assert later == expected.get("expected_later_origins", [])
    assert report.flagged == []
    for row in report.rank_status:
        if row.status == "received":
            assert row.via.startswith("AllReduce ") and "grad_reducer" in row.op_name


def test_received_rank_is_named_in_text_markdown_and_json(multirank_dumps, capsys):
    dump = str(multirank_dumps["dp2_empty_loss_mask"])
    assert main(["analyze", dump, "--no-progress"]) == 1
    text = capsys.readouterr().out
    table = text[text.index("\nRanks"):]
    assert "0     received" in table and "via AllReduce" in table and "1     origin" in table
    report = analyze(dump, progress=False)
    assert "| 0 | received | 1 | via AllReduce" in render(report, "markdown")
    doc = report_dict(report)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, json.load(open(SCHEMA)))
    assert doc["ranks"][0]["status"] == "received" and doc["ranks"][0]["via"].startswith("AllReduce")
    assert doc["summary"]["ranks"] == [0, 1]


def test_an_empty_rank_directory_is_not_dumped_and_a_clean_step_is_then_inconclusive(multirank_dumps, capsys):
    dump = str(multirank_dumps["dp4_rank_dump_empty"])
    assert main(["analyze", dump, "--no-progress"]) == 1           # the anomaly on rank 1 still stands
    capsys.readouterr()
    # step 0 is clean on every dumped rank, but rank 2 could hold an origin: not clean
    assert main(["analyze", dump, "--iteration", "0", "--no-progress"]) == 3
    out = capsys.readouterr().out
    assert out.startswith("INCONCLUSIVE") and "rank 2" in out.splitlines()[0]


def test_a_missing_rank_directory_between_others_is_not_dumped(multirank_dumps, tmp_path):
    copy = tmp_path / "dump"
    shutil.copytree(multirank_dumps["dp4_two_origins"], copy)
    shutil.rmtree(copy / "rank_2")
    rows = {r.rank: r for r in analyze(str(copy), progress=False).rank_status}
    assert rows[2].status == "not dumped" and "missing between" in rows[2].note
    assert [rows[r].status for r in (0, 1, 3)] == ["received", "origin", "origin"]


def _shift_clocks(src, dst, offsets):
    """Copy a dump, adding offsets[rank] microseconds to the timestamp in every tensor file name of that rank."""
    shutil.copytree(src, dst)
    for rank, offset in offsets.items():
        for root, _dirs, files in os.walk(os.path.join(dst, f"rank_{rank}")):
            for name in files:
                # {op_type}.{op_name}.{task}.{stream}.{timestamp}.{io}.{slot}.{format}.{DType}.npy
                parts = name[:-4].rsplit(".", 5) if name.endswith(".npy") else []
                if len(parts) != 6 or not parts[1].isdigit():
                    continue
                parts[1] = str(int(parts[1]) + offset)
                os.rename(os.path.join(root, name), os.path.join(root, ".".join(parts) + ".npy"))


def _answer(report):
    return ([(a.rank, a.iteration, a.op_name) for a in report.anomalies],
            [(r.rank, r.status, r.iteration, r.op_name, r.via) for r in report.rank_status])


@pytest.mark.parametrize("case", ["dp2_empty_loss_mask", "dp4_two_origins"])
def test_shifting_each_ranks_clock_by_hours_changes_nothing(multirank_dumps, tmp_path, case):
    src = str(multirank_dumps[case])
    baseline = _answer(analyze(src, progress=False))
    ranks = len(multirank_dumps.case(case)["expected_ranks"])
    rng = random.Random(case)
    for trial in range(2):
        offsets = {r: rng.randint(-8 * 3600, 8 * 3600) * 1_000_000 for r in range(ranks)}
        shifted = str(tmp_path / f"t{trial}")
        _shift_clocks(src, shifted, offsets)
        assert _answer(analyze(shifted, progress=False)) == baseline, offsets


@pytest.mark.parametrize("case", [c.name for c in gen.MULTI_RANK_CASES if c.workers])
def test_msrun_case_ran_every_rank_with_the_gradient_allreduce(multirank_dumps, case):
    record = multirank_dumps.case(case)
    dump = multirank_dumps[case]
    workers = gen.CASES_BY_NAME[case].workers
    assert record["exit_code"] == 0 and record["self_check"] == [], record["self_check"]
    assert os.path.basename(record["command"][0]) == "msrun" and f"--worker_num={workers}" in record["command"]
    assert sorted(p.name for p in dump.iterdir()) == [f"rank_{r}" for r in range(workers)]
    log = (dump.parent / "run.log").read_text(errors="replace")
    for rank in range(workers):
        assert f"--- worker_{rank}.log ---" in log
        files = [t for t in gen.iter_tensor_files(dump) if t.rank == rank]
        assert any(t.op_type == "AllReduce" and "grad_reducer" in t.op_name for t in files)
    first = record["observed"]["first_bad_tensors"][0]
    # a clean case that holds bad values by design (a loss scale's) states its first bad tensor
    want = record.get("expected_first_bad_tensor") or {"iteration": record["expected_iteration"],
                                                       "op_type": record["expected_first_op_type"]}
    assert (first["rank"], first["iteration"], first["op_type"]) == (
        record["expected_origin_rank"], want["iteration"], want["op_type"])


def test_derived_case_is_its_source_with_rank_2_emptied(multirank_dumps):
    record = multirank_dumps.case("dp4_rank_dump_empty")
    assert record["derived_from"] == ["dp4_two_origins", "empty_rank_2"]
    assert record["observed"]["empty_rank_dirs"] == ["rank_2"]
    assert record["observed"]["rank_dirs"] == ["rank_0", "rank_1", "rank_2", "rank_3"]
