"""The fix follows all the evidence (issue 32, item 4), on the project's real MindSpore 2.10 CPU runs
(tests/support/gen_real_dumps.py): the history, the batch and the applied update decide beside the op's own
recompute, in the API and all four formats, and CLEAN carries no patch hint."""
import json

import pytest

import msoverflow
from msoverflow.cli import main
from msoverflow.render import render
from msoverflow.render.consistency import check

FORMATS = ("text", "json", "markdown", "html")


def _out(report):
    return {fmt: render(report, fmt) for fmt in FORMATS}


def test_a_warm_up_that_diverges_is_dynamics_with_no_precision_patch(real_dumps, tmp_path, capsys):
    report = msoverflow.analyze(str(real_dumps["lr_warmup_divergence"]), progress=False)
    c = report.conclusion
    assert (c.cause, c.patch, c.next_command) == ("dynamics", "", "")
    assert any("learning rate" in fix and "warm-up" in fix for fix in c.fix)
    assert not any("float32" in fix for fix in c.fix)
    assert report.first.cause.cause == "precision"        # the op's own recompute, shown beside it
    out = _out(report)
    for fmt, text in out.items():
        assert "dynamics" in text and "learning rate" in text, fmt
    assert json.loads(out["json"])["conclusion"]["cause"] == "dynamics"
    assert "op    : precision" in out["text"]
    assert check(report) == []
    capsys.readouterr()
    assert main(["analyze", str(real_dumps["lr_warmup_divergence"]), "--no-progress",
                 "--save", str(tmp_path / "r.json")]) == 1
    assert "next: msoverflow patch" not in capsys.readouterr().err


def test_a_batch_that_jumps_at_the_step_is_data(real_dumps):
    report = msoverflow.analyze(str(real_dumps["loss_scale_then_forward_overflow"]), progress=False)
    c = report.conclusion
    assert (report.first.op_type, report.first.step, c.cause, c.rule, c.patch) == ("MatMul", 10, "data",
                                                                                    "data_jump", "")
    assert "6.5e+04" in c.reason and "data pipeline" in c.fix[0]
    for fmt, text in _out(report).items():
        assert "data pipeline" in text, fmt
    assert check(report) == []


def test_an_update_applied_with_non_finite_values_names_the_overflow_check(real_dumps):
    report = msoverflow.analyze(str(real_dumps["nan_in_batch"]), progress=False)
    c = report.conclusion
    assert c.rule == "update_applied" and c.cause == "data" and "skip" in c.fix[0]
    for fmt, text in _out(report).items():
        assert "overflow before the update" in text, fmt
    assert [row.status for row in report.rank_status] == ["origin"]      # its own data: never "received"
    assert not any("dump without filters" in w for w in report.warnings)


def test_the_update_itself_is_not_an_applied_non_finite_gradient(real_dumps):
    report = msoverflow.analyze(str(real_dumps["sgd_update_overflow"]), progress=False)
    assert report.conclusion.rule == "cause_domain" and not any("skip" in f for f in report.conclusion.fix)


@pytest.mark.parametrize("case", ["clean_fp32", "loss_scale_calibration_fp16", "causal_mask_softmax"])
def test_clean_prints_no_patch_hint(real_dumps, case, tmp_path, capsys):
    assert main(["analyze", str(real_dumps[case]), "--no-progress", "--save", str(tmp_path / "r.json")]) == 0
    err = capsys.readouterr().err
    assert "next:" not in err
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["conclusion"]["patch_may_act"] is False and doc["conclusion"]["next_command"] == ""


def test_strict_reads_the_steps_the_default_reads(real_dumps):
    path = str(real_dumps["loss_scale_calibration_fp16"])
    default, strict = msoverflow.analyze(path, progress=False), msoverflow.analyze(path, progress=False, strict=True)
    assert strict.scanned_steps == default.scanned_steps
    assert not any("no later dumped step recovers" in e for f in strict.anomalies for e in f.evidence)
