"""One judgement per report, harmless only when proven (issue 32), on real MindSpore 2.10 CPU runs of our own
(tests/support/gen_judge_cases.py): each holds a fault that the harmless stage used to excuse (CLEAN, exit 0 on
the code before this change). Each answer is checked in the API and in all four formats."""
import json
import sys

import pytest

import msoverflow
from msoverflow.cli import main
from msoverflow.render import render
from msoverflow.render.consistency import check

pytestmark = pytest.mark.mindspore


@pytest.fixture(scope="session")
def judge_cases():
    from tests.conftest import mindspore_available
    if not mindspore_available():
        pytest.skip("mindspore is not installed (pip install 'msoverflow[mindspore]')")
    from tests.support import gen_judge_cases
    return gen_judge_cases.ensure_cases(
        progress=lambda msg: print(f"[judge cases] {msg}", file=sys.__stderr__, flush=True))


def _formats(report):
    return {fmt: render(report, fmt) for fmt in ("text", "json", "markdown", "html")}


def _said_everywhere(report, *words):
    out = _formats(report)
    for fmt, text in out.items():
        for word in words:
            assert word in text, f"{fmt} does not say {word!r}"
    return out


# case, first op, step, cause (conclusion), the kind every view says, the rule that decides
EXPECTED = {
    "judge_look_backward": ("MatMul", 0, "precision", "overflow", "cause_precision"),
    "judge_sqrt_zero_row": ("SqrtGrad", 0, "domain", "inf", "cause_domain"),
    "judge_log_clamp": ("Log", 0, "domain", "NaN", "cause_domain"),
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_a_fault_the_loss_scale_or_a_clamp_hid_is_an_anomaly_in_every_format(judge_cases, case, capsys):
    op_type, step, cause, kind, rule = EXPECTED[case]
    report = msoverflow.analyze(str(judge_cases[case]), progress=False)
    assert (report.verdict, report.first.op_type, report.first.step) == ("anomaly", op_type, step)
    assert report.handled == [] and report.contained == []          # neither excused nor absorbed
    c = report.conclusion
    assert (c.cause, c.kind, c.rule, c.harmful) == (cause, kind, rule, True)
    assert check(report) == []
    out = _said_everywhere(report, op_type, cause)
    doc = json.loads(out["json"])
    assert doc["verdict"] == "anomaly" and doc["handled"] == [] and doc["contained"] == []
    assert (doc["conclusion"]["cause"], doc["conclusion"]["kind"], doc["conclusion"]["rule"]) == (cause, kind, rule)
    assert out["text"].startswith(f"ANOMALY: {kind} first created by {op_type}")
    assert f"**Anomaly** ({kind})" in out["markdown"]
    assert main(["analyze", str(judge_cases[case]), "--no-progress", "--no-save"]) == 1
    capsys.readouterr()


def test_backward_is_the_graphs_word_not_the_cell_class(judge_cases):
    """The overflowing MatMul sits in a Cell class named LookBackward: the saved graph records no forward node it
    differentiates and it feeds the loss, so it is forward, and the loss scale does not handle it."""
    report = msoverflow.analyze(str(judge_cases["judge_look_backward"]), progress=False)
    assert "LookBackward" in (report.first.full_name or "")
    assert report.first.forward_op is None or report.first.forward_op == "MatMul"
    assert report.conclusion.patch == "precision"


def test_a_zero_denominator_is_no_calibration_even_when_the_next_step_trains(judge_cases):
    """SqrtGrad's x/0 in step 0; the loss-scale cell skipped the update and step 1 trained: a smaller scale does not
    remove a 0 denominator, so it stays the finding (step 1 is still read: the dump has it)."""
    report = msoverflow.analyze(str(judge_cases["judge_sqrt_zero_row"]), progress=False)
    assert report.first.forward_op == "Sqrt" and "0" in report.conclusion.reason
    assert report.conclusion.patch != "precision"


def test_nan_dropped_by_a_clamp_is_not_contained(judge_cases):
    report = msoverflow.analyze(str(judge_cases["judge_log_clamp"]), progress=False)
    strict = msoverflow.analyze(str(judge_cases["judge_log_clamp"]), progress=False, strict=True)
    assert report.contained == [] and strict.first.op_type == "Log"
    assert report.conclusion.patch == "" and not report.conclusion.next_command


def test_a_static_loss_scale_without_an_overflow_check_names_the_skip(judge_cases, tmp_path, capsys):
    """TrainOneStepCell(sens=2^16): the scaled gradient overflows fp16 in the backward and SGD applies it. The fix
    names the overflow check/skip beside the precision fix; no loss scale is named (the dump holds no loss-scale
    Parameter: 2^16 is the sens)."""
    report = msoverflow.analyze(str(judge_cases["judge_static_scale"]), progress=False)
    c = report.conclusion
    assert (report.first.op_type, c.rule, c.cause, c.patch) == ("Cast", "update_applied", "precision", "precision")
    assert "skip it when they are not finite" in c.fix[0] and "float16" in c.fix[1]
    assert report.handled == [] and check(report) == []
    for fmt, text in _formats(report).items():
        assert "skip it when they are not finite" in text, fmt
        assert "loss scale calibrating" not in text and "at its floor" not in text, fmt
    assert main(["analyze", str(judge_cases["judge_static_scale"]), "--no-progress",
                 "--save", str(tmp_path / "r.json")]) == 1
    assert "next: msoverflow patch --from" in capsys.readouterr().err
