"""Issue 32 item 3: the cause can lie upstream, flags are never guessed, integer casts go by the target dtype, a
weight is not a mask count, complex values are bad like floats, and CPU Adam is the origin of what it writes. Each on
a real MindSpore 2.10 CPU run of its own (tests/support/gen_upstream_dumps.py; edited copies are labelled in their
case.json), checked in the four formats and through the API."""
import json

import pytest

from msoverflow.analysis import analyze
from msoverflow.render import render

pytestmark = pytest.mark.mindspore


def _formats(report):
    return (render(report, "text"), render(report, "markdown"), render(report, "html"),
            json.loads(render(report, "json")))


def _rules(report):
    """The rule that concluded, and the one beneath update_applied (which adds the skip-on-overflow fix to it)."""
    import dataclasses

    from msoverflow.judgement import Evidence, judge
    found = [report.conclusion.rule]
    if report.conclusion.rule == "update_applied":
        found.append(judge(dataclasses.replace(Evidence.of(report), update_applied=False, updated=[])).rule)
    return found


def _says_cause_everywhere(report, cause):
    text, markdown, html, doc = _formats(report)
    assert report.cause is not None and report.cause.cause == cause
    assert f"  cause : {cause}: {report.cause.reason}" in text
    assert f"- cause: **{cause}**" in markdown
    assert f'<strong class="cause">{cause}</strong>' in html
    assert doc["first"]["cause"] == cause and doc["first"]["diagnosis"]["reason"] == report.cause.reason
    return text, markdown, html, doc


def test_fp16_softmax_underflow_is_named_as_the_cause_one_op_upstream(upstream_dumps):
    report = analyze(str(upstream_dumps["fp16_log_softmax"]), progress=False)
    text, markdown, html, doc = _says_cause_everywhere(report, "precision")
    reason = report.cause.reason
    assert reason.startswith("Softmax underflowed to 0 in float16; float32 gives ") and "then gave -inf" in reason
    wide = float(reason.split("float32 gives ")[1].split(";")[0])
    assert 1e-9 < wide < 1e-8                     # exp(-19) / sum: float32 holds it, float16's subnormals do not
    # the rule that decides (update_applied wraps it: SGD applied the NaN gradients, and says so first)
    assert report.conclusion.cause == "precision" and "upstream_precision" in _rules(report)
    fix = " ".join(report.conclusion.fix)
    assert "float32" in fix and "log_softmax" in fix
    for rendered in (text, markdown, html):
        assert "log_softmax" in rendered
    assert "no training dtype holds this value" not in text


@pytest.mark.parametrize("case", ["fp16_log_softmax", "fp16_log_softmax_steps"])
def test_the_forward_log_is_the_origin_on_every_entry_path(upstream_dumps, case, capsys):
    """Log(0) and its gradient dout / 0 (Div, "backward of Log") both make -inf from Softmax's 0, and MindSpore CPU
    runs that Div first (dout does not depend on the forward's values). The origin is the forward Log, with Softmax
    named as the cause (precision), through the API, --all, --strict and the CLI, in one step and in three."""
    from msoverflow.cli import main
    from msoverflow.render.consistency import check
    dump = str(upstream_dumps[case])
    for options in ({}, {"scan_all": True}, {"strict": True}, {"scan_all": True, "strict": True}):
        report = analyze(dump, progress=False, **options)
        assert (report.first.op_type, report.first.step, report.first.forward_op) == ("Log", 0, "Log"), options
        assert report.cause.reason.startswith("Softmax underflowed to 0 in float16") and \
            "Log then gave -inf" in report.cause.reason, options
        assert report.conclusion.cause == "precision" and check(report) == [], options
        text, markdown, html, doc = _formats(report)
        assert text.startswith("ANOMALY: inf first created by Log in "), options
        assert doc["first"]["op_type"] == "Log" and "backward of Log" not in text.splitlines()[0], options
    for flags in ([], ["--all"], ["--strict"]):
        assert main(["analyze", dump, "--no-progress", "--no-save", *flags]) == 1
        assert capsys.readouterr().out.startswith("ANOMALY: inf first created by Log in "), flags


def test_integer_cast_goes_by_the_target_dtype(upstream_dumps):
    report = analyze(str(upstream_dumps["int_counter_fp16"]), progress=False)
    assert report.first.op_type == "Cast"
    text, _markdown, _html, _doc = _says_cause_everywhere(report, "precision")
    assert "finite in float32 (up to 69998)" in report.cause.reason
    assert "no training dtype holds this value" not in text


def test_transpose_flags_the_dump_does_not_hold_are_never_guessed(upstream_dumps):
    record = upstream_dumps.case("dense_square_no_graph")
    assert record["edited"] and "transpose flags are in no file" in record["edit"]
    report = analyze(str(upstream_dumps["dense_square_no_graph"]), progress=False)
    assert report.first.op_type == "MatMul"
    text, _markdown, _html, _doc = _says_cause_everywhere(report, "unknown")
    assert "never guessed from shapes" in report.cause.reason
    assert "device" not in report.cause.reason and "A precision patch is not the fix" not in text
    # with the saved graph the flags are known, and the product really leaves float32's range
    full = analyze(str(upstream_dumps["dense_square_overflow"]), progress=False)
    assert full.cause.cause == "domain" and "beyond float32's range" in full.cause.reason


def test_a_zero_initialised_weight_over_its_own_sum_is_no_mask_count(upstream_dumps):
    report = analyze(str(upstream_dumps["zero_init_normalised"]), progress=False)
    assert report.first.op_type == "Div"
    text, markdown, html, doc = _says_cause_everywhere(report, "domain")
    assert "0/0" in report.cause.reason and "mask" not in report.cause.reason
    assert report.conclusion.cause == "domain" and "weight_zero_division" in _rules(report)
    assert "guard" not in report.conclusion.patch
    for rendered in (text, markdown, html, json.dumps(doc)):
        assert "no token to learn from" not in rendered and "max(count, 1)" not in rendered


def test_a_complex64_inf_is_bad_like_a_float(upstream_dumps):
    record = upstream_dumps.case("complex_inf_edited")
    assert record["edited"] and "complex64" in record["edit"]
    report = analyze(str(upstream_dumps["complex_inf_edited"]), progress=False)
    assert report.first.op_type == "MatMul"          # not its consumer Sub
    assert report.first.kind == "overflow"
    text, _markdown, _html, doc = _says_cause_everywhere(report, "domain")
    assert "MatMul" in text.splitlines()[0]


def test_cpu_adam_that_writes_inf_is_the_origin_not_the_parameter(upstream_dumps):
    report = analyze(str(upstream_dumps["adam_update_overflow"]), progress=False)
    assert report.first.op_type == "Adam" and not report.first.op_name.startswith("offset")
    text, markdown, html, doc = _formats(report)
    assert text.splitlines()[0].startswith("ANOMALY: overflow first created by Adam")
    assert doc["first"]["op_type"] == "Adam"
    for rendered in (text, markdown, html):
        assert "Dump from an earlier step" not in rendered and "first created by Parameter" not in rendered
    assert "input 0" in report.first.detail


def test_a_fully_masked_attention_row_makes_softmax_the_origin(upstream_dumps):
    report = analyze(str(upstream_dumps["masked_attention_row"]), progress=False)
    assert report.first.op_type == "Softmax" and report.first.kind == "invalid"
    assert report.first.role == "origin"
    text, markdown, html, doc = _says_cause_everywhere(report, "domain")
    assert "-inf everywhere" in report.cause.reason and "nothing to attend to" in report.cause.reason
    assert report.cause.where.startswith("all 8 in batch row 1")     # queries 0 and 1 of the left-padded row
    assert report.conclusion.cause == "domain" and "masked_row" in _rules(report)
    fix = " ".join(report.conclusion.fix)
    assert "A row with nothing to attend to" in fix and "finite fill" in fix and "drop the row" in fix
    for rendered in (text, markdown, html):
        assert "nothing to attend to" in rendered and "dump without filters" not in rendered
    assert "received" not in text and "received" not in markdown and 'class="received"' not in html
    assert "received" not in json.dumps(doc)
    assert not any("dump without filters" in w for w in report.warnings)


def test_every_upstream_fixture_agrees_with_itself(upstream_dumps):
    """render.consistency over every case of this module's generator, edited copies included."""
    from msoverflow.render.consistency import check
    problems = {}
    for name in upstream_dumps:
        found = check(analyze(str(upstream_dumps[name]), progress=False))
        if found:
            problems[name] = found
    assert problems == {}
