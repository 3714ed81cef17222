"""The tests of tests/unit/test_html_views.py that read a real MindSpore dump (moved here: tests/unit holds no MindSpore run;
the helpers stay in tests/unit/test_html_views.py)."""
import pytest

from tests.unit.test_html_views import _views


@pytest.mark.mindspore
def test_headroom_only_for_a_low_precision_overflow(real_dumps):
    from msoverflow.analysis import analyze
    from msoverflow.render import render
    fp16 = analyze(str(real_dumps["normhead_fp16_overflow"]), progress=False)
    assert fp16.first.kind == "overflow" and "float16" in {t.dtype for t in fp16.first.outputs}
    assert _views(render(fp16, "html")) == ({"timeline", "propagation", "headroom"}, {})
    for case in ("zero_token_loss_division", "sgd_update_overflow"):      # fp32 1/0; an fp32 optimizer overflow
        report = analyze(str(real_dumps[case]), progress=False)
        assert not {t.dtype for t in report.first.inputs + report.first.outputs} & {"float16", "bfloat16"}
        shown, missing = _views(render(report, "html"))
        assert "headroom" not in shown and "headroom" in missing, case
        assert "timeline" in shown, case


@pytest.mark.mindspore
def test_backward_ops_are_named_as_such_in_every_format(real_dumps):
    from msoverflow.analysis import analyze
    from msoverflow.render import render
    from msoverflow.render.text import op_label
    report = analyze(str(real_dumps["zero_token_loss_division"]), progress=False)
    # the forward Div is the origin; its gradient (1/0, run first by the scheduler) a later origin, listed
    [backward] = [a for a in report.anomalies if a.full_name.startswith("Gradients/") and a.op_type == "Div"]
    assert backward.forward_op == "Div"             # from its scope: .../Grad_Div/Div-op0
    for fmt in ("text", "markdown", "html"):
        assert "Div (backward of Div)" in render(report, fmt), fmt
    fp16 = analyze(str(real_dumps["normhead_fp16_overflow"]), progress=False)
    for fmt in ("text", "markdown", "html"):
        assert "SqrtGrad (backward of Sqrt)" in render(fp16, fmt), fmt
    forward = analyze(str(real_dumps["sqrt_negative"]), progress=False)     # the forward Sqrt of a negative
    assert not forward.first.full_name.startswith("Gradients")
    assert op_label(forward.first) == f"Sqrt in {forward.first.cell} ({forward.first.cell_type})"


@pytest.mark.mindspore
def test_the_tiny_denominator_of_sqrtgrad_is_shown_in_every_format(real_dumps):
    from msoverflow.analysis import analyze
    from msoverflow.render import render
    report = analyze(str(real_dumps["normhead_fp16_overflow"]), progress=False)
    y = report.first.inputs[0]                             # SqrtGrad(y, dy): dy * 0.5 / y
    assert 0 < y.stats.min < 1e-2
    shown = f"goes down to |x| = {y.stats.min:.6g}"
    for fmt in ("text", "markdown", "html", "json"):
        assert shown in render(report, fmt).replace("\\", ""), fmt       # markdown escapes the |
