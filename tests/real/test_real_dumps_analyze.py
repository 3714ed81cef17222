"""`msoverflow analyze` on REAL MindSpore 2.10 CPU dumps (tests/conftest.py: real_dumps, tests/support/cases/realdump/).

Each case's case.json states what the case was built to show (its design intent, written once by the generator);
these tests hold the analysis to it, plus the facts the issue names: NormHead fp16 -> SqrtGrad, Sqrt, NormHead, the
sqrt(...) line; the fp32 variant -> clean; three steps -> iteration 2; zero tokens -> invalid at the division by the
token count.
"""
import json
import os

import pytest

from msoverflow.analysis import analyze
from msoverflow.cli import main

pytestmark = pytest.mark.mindspore

CASES = ["clean_fp32", "normhead_fp16_overflow", "normhead_fp32_clean", "overflow_last_of_three_steps",
         "zero_token_loss_division", "zero_token_mask_weights", "sqrt_negative", "log_nonpositive",
         "jit_value_and_grad_three_graphs", "normhead_kernels_filtered", "normhead_inputs_only",
         "sgd_update_overflow", "causal_mask_softmax", "loss_scale_calibration_fp16",
         "loss_scale_then_forward_overflow", "lr_warmup_divergence", "kernel_zoo", "sdc_gradient_nan"]


@pytest.mark.parametrize("case", CASES)
def test_verdict_first_op_kind_forward_cell_and_source_match_the_case(real_dumps, case):
    expected = real_dumps.case(case)
    report = analyze(str(real_dumps[case]), progress=False)
    assert report.verdict == expected["expected_verdict"]
    f = report.first
    if expected["expected_verdict"] == "clean":
        assert f is None and report.anomalies == []
        return
    assert f.op_type == expected["expected_first_op_type"]
    assert f.iteration == expected["expected_iteration"]
    assert f.graph == str(expected["expected_graph"])
    assert f.kind == expected["expected_kind"]
    assert f.forward_op == expected["expected_forward_op"]
    assert f.cell_type == expected["expected_cell"]
    assert f.source is not None and expected["expected_source_contains"] in f.source.code
    assert os.path.isfile(f.source.file)
    assert f.role == "origin" and f.recommendation


def test_normhead_fp16_story(real_dumps):
    """fp16 NormHead overflows in SqrtGrad -> SqrtGrad, backward of Sqrt, lm_head NormHead, the sqrt line,
    input statistics with headroom, the fp32 payload behind the fp16 label, and how it spread."""
    r = analyze(str(real_dumps["normhead_fp16_overflow"]), progress=False)
    f = r.first
    assert (f.op_type, f.forward_op, f.cell, f.cell_type) == ("SqrtGrad", "Sqrt", "network._backbone.lm_head",
                                                            "NormHead")
    assert f.full_name.endswith("lm_head-NormHead/Grad_Sqrt/SqrtGrad-op0")
    assert f.source.code == "norm = self.sqrt(variance + self.eps)"
    out = f.outputs[0]
    assert out.dtype == "float16" and out.payload_dtype == "float32" and out.stats.max_abs > 65504
    assert all(t.stats is not None and t.stats.nonfinite == 0 for t in f.inputs)
    assert any(t.headroom is not None and 0 < t.headroom < 1 for t in f.inputs)
    assert "float32" in f.recommendation and "whole region" in f.recommendation
    chain = [p.op_type for p in r.propagation]
    assert chain[0] == "Cast" and "Parameter" in chain   # the overflow reaches the updated weights
    assert "lm_head_weight" in {p.op_name for p in r.propagation if p.op_type == "Parameter"}
    assert len(r.anomalies) == 1                         # propagators are not reported as origins


def test_three_steps_finds_iteration_2_with_and_without_scan_all(real_dumps):
    quick = analyze(str(real_dumps["overflow_last_of_three_steps"]), progress=False)
    full = analyze(str(real_dumps["overflow_last_of_three_steps"]), scan_all=True, progress=False)
    assert quick.first.iteration == full.first.iteration == 2
    assert quick.iterations == {0: [0, 1, 2]}


def test_zero_token_names_the_zero_denominator_and_its_source(real_dumps):
    for case in ("zero_token_loss_division", "zero_token_mask_weights"):
        expected = real_dumps.case(case)
        f = analyze(str(real_dumps[case]), progress=False).first
        slot = expected["expected_zero_denominator_input_slot"]
        assert f"denominator (input {slot}) is 0" in f.detail
        assert any("zero denominator" in e and "reduce_sum(mask)" in e for e in f.evidence)
        assert "skip the step" in f.recommendation.lower()
    masked = analyze(str(real_dumps["zero_token_mask_weights"]), progress=False).first
    assert masked.detail.startswith("0/0")


def test_zero_token_forward_division_is_the_origin_before_its_gradient(real_dumps):
    """MindSpore CPU runs the division's gradient (dloss / token_count = 1/0 -> +inf) before the forward Div
    (0/0 -> NaN): both divide by the zero count, and the program's forward made its value first. The forward Div is
    the origin; its gradient is listed as a later origin."""
    forward = real_dumps.case("zero_token_loss_division")["expected_later_origin"]     # the forward Div
    r = analyze(str(real_dumps["zero_token_loss_division"]), progress=False)
    assert forward["scope_contains"] in r.first.op_name and r.first.outputs[0].stats.nan
    later = [a for a in r.anomalies[1:] if a.op_type == "Div" and a.full_name.startswith("Gradients/")]
    assert later and later[0].forward_op == "Div" and later[0].outputs[0].stats.posinf


def test_inputs_only_dump_attributes_the_bad_input_to_its_producer(real_dumps):
    first_bad = real_dumps.case("normhead_inputs_only")["expected_first_bad_tensor"]
    f = analyze(str(real_dumps["normhead_inputs_only"]), progress=False).first
    assert f.op_type == "SqrtGrad"
    assert any(f"input {first_bad['slot']} of {first_bad['op_type']}" in e for e in f.evidence)


def test_json_cli_on_a_real_dump_matches_the_schema_and_never_writes_into_the_dump(real_dumps, tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    dump = real_dumps["normhead_fp16_overflow"]
    before = sorted(os.listdir(dump / "rank_0" / "Net" / "0" / "0"))
    out = tmp_path / "report.json"
    assert main(["analyze", str(dump), "--format", "json", "-o", str(out), "--no-progress"]) == 1
    report = json.loads(out.read_text())
    schema_path = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "msoverflow", "schema", "report.schema.json")
    jsonschema.validate(report, json.load(open(schema_path)))
    assert report["first"]["source"]["line"] > 0 and report["first"]["cell_type"] == "NormHead"
    meta = report["summary"]["mindspore"]                 # from rank_0/.dump_metadata
    assert meta["device_target"] == "CPU" and meta["version"].startswith("2.") and meta["input_output"] == 0
    assert sorted(os.listdir(dump / "rank_0" / "Net" / "0" / "0")) == before


def test_text_report_leads_with_a_five_second_verdict(real_dumps, capsys):
    assert main(["analyze", str(real_dumps["normhead_fp16_overflow"]), "--no-progress"]) == 1
    head = capsys.readouterr().out.splitlines()[:4]
    assert head[0].startswith("ANOMALY: overflow first created by SqrtGrad (backward of Sqrt)")
    assert "NormHead" in head[0] and "step 0" in head[1] and "model.py:" in head[3]
    assert main(["analyze", str(real_dumps["normhead_fp32_clean"]), "--no-progress"]) == 0
    assert capsys.readouterr().out.startswith("CLEAN")


def test_an_update_written_in_place_is_made_by_the_optimizer_not_received(real_dumps):
    """SGD's input 0 is the weight it writes; the dump reads it after SGD ran, so it holds SGD's own inf. The
    origin is SGD (from finite gradient and learning rate), with the optimizer advice, not "input 0 already bad"
    and "the origin was not dumped"; step 1's forward, which reads the inf weights, is not a second origin."""
    case = real_dumps["sgd_update_overflow"]
    report = analyze(str(case), progress=False)
    f = report.first
    assert (f.op_type, f.role, f.iteration) == ("SGD", "origin", 0)
    assert any(e.startswith("input 0 is written in place by SGD") for e in f.evidence)
    assert "learning rate" in f.recommendation and "whole region" not in f.recommendation
    assert [a.iteration for a in report.anomalies] == [0]
    assert report.rank_status[0].status == "origin"
    weights = {t.slot: t for t in f.inputs}
    # MindSpore 2.x names the parameter in every graph reference (`SGD(%para1_fc.bias, ...)`, dots included)
    assert (weights[0].producer, weights[2].producer) == ("param:fc.bias", "param:learning_rate")
    assert weights[0].stats.posinf + weights[0].stats.neginf > 0       # the written weight, as dumped
    assert all(t.stats.nonfinite == 0 for t in f.inputs if t.slot not in (0, 3, 5))
    # Without the rule's reason (nothing bad earlier in the step), a written input still counts as given: the
    # step-1 SGD, whose weights came in already inf from step 0, is a propagator.
    assert all(a.op_type != "SGD" or a.iteration == 0 for a in report.anomalies)
