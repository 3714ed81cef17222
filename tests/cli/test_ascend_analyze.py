"""`msoverflow analyze` on what Ascend writes. The fixtures are BUILT FROM THE DOCUMENTED FORMAT
(tests/support/ascend_fixtures.py, shared/reference/mindspore-dumps.md), not recorded on a device: the seed scenario is an
8-rank, 2-stage pipeline-parallel Baichuan2-13B-like dump where NormHead's SqrtGrad on the last stage overflows
first (fp16 input 47580), with Opdebug records, statistic.csv and binary dumps, later distractor overflows on other
ranks, and skewed clocks (the smallest raw timestamp belongs to a distractor)."""
import json
import os

import pytest

from msoverflow.analysis import analyze
from msoverflow.cli import main
from msoverflow.report_dict import report_dict
from tests.support.ascend_fixtures import build_seed_scenario

SCHEMA = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "msoverflow", "schema", "report.schema.json")

VARIANTS = {
    "opdebug+bin+statistic, 2.2 debug_files": dict(formats=("opdebug", "bin", "statistic"), layout="async22"),
    "opdebug+bin, O0 layout": dict(formats=("opdebug", "bin"), layout="o0"),
    "binary opdebug records + bin": dict(formats=("opdebug", "bin"), opdebug_encoding="bin"),
    "new-style opdebug + npy, ACL layout": dict(formats=("opdebug", "npy"), layout="acl", opdebug_style="new"),
    "statistic.csv alone": dict(formats=("statistic",)),
    "binary dumps alone": dict(formats=("bin",)),
    "npy alone, O0 layout": dict(formats=("npy",), layout="o0"),
    "npy + statistic.csv, O0 layout": dict(formats=("npy", "statistic"), layout="o0"),
}


def _seed(tmp_path, **options):
    return build_seed_scenario(str(tmp_path / "dump"), **options)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_seed_case_names_normhead_sqrtgrad_on_the_last_stage(tmp_path, variant):
    desc = _seed(tmp_path, **VARIANTS[variant])
    report = analyze(desc["root"], progress=False)
    f = report.first
    origin = desc["origin"]
    assert (f.rank, f.iteration, f.op_type) == (origin["rank"], origin["iteration"], "SqrtGrad")
    assert (f.kind, f.forward_op, f.cell_type) == ("overflow", "Sqrt", "NormHead")
    assert f.cell.endswith("lm_head")
    assert desc["raw_earliest"]["rank"] != origin["rank"]      # a raw-clock sort would have picked a distractor
    assert not [w for w in report.warnings if "matches no dumped op" in w]
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(report_dict(report), json.load(open(SCHEMA)))


@pytest.mark.parametrize("variant", ["opdebug+bin+statistic, 2.2 debug_files", "statistic.csv alone",
                                     "npy + statistic.csv, O0 layout"])
def test_no_tensor_is_read_when_statistics_answer(tmp_path, variant):
    report = analyze(_seed(tmp_path, **VARIANTS[variant])["root"], progress=False)
    assert report.tensors_read == 0
    f = report.first
    assert max(t.stats.max_abs for t in f.inputs) == pytest.approx(47580, rel=1e-3)


@pytest.mark.parametrize("variant", ["opdebug+bin, O0 layout", "binary opdebug records + bin",
                                     "new-style opdebug + npy, ACL layout"])
def test_opdebug_records_narrow_the_search_and_the_flagged_ops_inputs_decide(tmp_path, variant):
    """Only the origin rank is flagged: the flag narrows the search to one op, and reading that op's own inputs
    (finite) is what makes it the origin. (This test used to assert that no tensor is read at all: that trusted
    the flag as proof, the bug of issue 8.)"""
    report = analyze(_seed(tmp_path, distractor_opdebug=False, **VARIANTS[variant])["root"], progress=False)
    f = report.first
    assert f.role == "origin"
    assert 0 < report.extra["tensors_read_to_decide"] <= len(f.inputs) + len(f.outputs)
    assert f.flags and "float overflow" in f.flags[0].status_words
    assert max(t.stats.max_abs for t in f.inputs) == pytest.approx(47580, rel=1e-3)


def test_a_flagged_op_fed_a_bad_input_is_a_propagator_not_a_later_origin(tmp_path):
    """Rank 2's MatMul is flagged too, but its input (from the pipeline Receive) is already NaN: a propagator.
    (This test used to expect rank 2 among the origins: the flag was taken as proof.)"""
    desc = _seed(tmp_path, **VARIANTS["opdebug+bin, O0 layout"])
    report = analyze(desc["root"], progress=False)
    assert (report.first.rank, report.first.op_type) == (5, "SqrtGrad")
    assert [a.rank for a in report.anomalies] == [5]
    status = {row.rank: row for row in report.rank_status}
    assert status[2].status == "received" and status[2].op_type == "Receive"


def test_binary_dumps_alone_read_tensors_and_skip_propagators_on_other_ranks(tmp_path):
    report = analyze(_seed(tmp_path, **VARIANTS["binary dumps alone"])["root"], progress=False)
    assert report.tensors_read > 0
    assert [a.rank for a in report.anomalies][0] == 5
    assert all(a.op_type not in ("AllReduce", "Receive") for a in report.anomalies)


@pytest.mark.parametrize("formats", [("opdebug", "bin", "statistic"), ("bin",)])
def test_saturation_mode_pinned_values_and_flags(tmp_path, formats):
    desc = _seed(tmp_path, formats=formats, saturation=True, distractor_opdebug="opdebug" in formats)
    f = analyze(desc["root"], progress=False).first
    assert (f.rank, f.op_type, f.kind) == (5, "SqrtGrad", "saturation")
    assert "INFNAN_MODE" in f.recommendation


def test_cli_json_on_acl_layout_and_exit_code(tmp_path, capsys):
    desc = _seed(tmp_path, **VARIANTS["new-style opdebug + npy, ACL layout"])
    assert main(["analyze", desc["root"], "--format", "json", "--no-progress"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["summary"]["layout"] == "acl" and report["first"]["op_type"] == "SqrtGrad"
    assert len(report["summary"]["ranks"]) == 8


def test_ge_dump_layout_without_step_directories(tmp_path):
    """GE dump: {time}/{device}/{model}/{model_id}/{iteration}/, i.e. the ACL layout without the step level
    (made here from the ACL seed by merging its step directories)."""
    import shutil
    desc = _seed(tmp_path, formats=("opdebug", "npy"), layout="acl", opdebug_style="new", distractor_opdebug=False)
    ge = tmp_path / "ge"
    for step_dir in sorted(p for p in (tmp_path / "dump").iterdir() if p.is_dir()):
        shutil.copytree(step_dir, ge, dirs_exist_ok=True)
    report = analyze(str(ge), progress=False)
    assert report.layout == "ge"
    assert (report.first.rank, report.first.iteration, report.first.op_type) == (
        desc["origin"]["rank"], desc["origin"]["iteration"], "SqrtGrad")
