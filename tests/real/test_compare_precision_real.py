"""`msoverflow compare` across graphs that differ (issue 34), on real MindSpore 2.10 CPU pairs of
tests/support/gen_compare_precision.py (nothing edited by hand): before/after a precision patch made by `msoverflow
patch`, amp O0 against O2 of a healthy model and of one with a planted float16 overflow."""
import json

import pytest

from msoverflow.cli import main
from msoverflow.comparison import compare
from tests.support import gen_compare_precision

pytestmark = pytest.mark.mindspore
EXIT = {"diverged": 1, "equivalent": 0, "inconclusive": 3}


@pytest.mark.parametrize("name", [p.name for p in gen_compare_precision.PAIRS])
def test_pair_gives_its_verdict_and_first_divergence(compare_precision_pairs, name, tmp_path):
    expected = compare_precision_pairs.pair(name).expected
    baseline, target = compare_precision_pairs[name]
    out = tmp_path / "answer.json"
    code = main(["compare", str(baseline), str(target), "--format", "json", "-o", str(out)])
    answer = json.loads(out.read_text())
    assert (answer["verdict"], code) == (expected["verdict"], EXIT[expected["verdict"]]), answer["inconclusive"]
    assert answer["inconclusive"] == []
    first = answer["first_divergence"]
    if expected["verdict"] == "equivalent":
        assert first is None
        if "within_precision" in expected:
            assert any(f"within precision ({expected['within_precision']})" in c for c in answer["caveats"]), \
                answer["caveats"]
        return
    assert (first["rank"], first["iteration"]) == (expected["rank"], expected["iteration"])
    for key in ("op_type", "cell_type"):
        if key in expected:
            assert first[key] == expected[key], first
    if "cell" in expected:
        assert first["cell"].split(".")[-1] == expected["cell"]
    if "source_contains" in expected:
        assert expected["source_contains"] in first["source"]["code"]
    if "dtype" in expected:
        assert f"in {expected['dtype']}" in first["dtype_change"]


def test_after_a_patch_the_runs_part_inside_the_patched_cell_not_before(compare_precision_pairs):
    """Everything the patch did not touch is paired and agrees (the Casts it inserted are gaps, never mis-pairs);
    the first divergence is in NormHead, the Cell `msoverflow patch` rewrote."""
    baseline, target = compare_precision_pairs["precision_patch"]
    result = compare(str(baseline), str(target))
    first = result.first_divergence
    assert result.verdict == "diverged" and first.role == "origin" and first.cell_type == "NormHead"
    assert all(op.cell_type == "NormHead" or op.role != "origin" or op.step > first.step
               for op in result.differences if op.position < first.position)
    assert {u.op_type for u in result.unmatched} == {"Cast"}
    assert result.matched_ops >= 0.9 * result.baseline_ops


def test_amp_o2_is_equivalent_within_precision_and_says_so(compare_precision_pairs, capsys):
    baseline, target = compare_precision_pairs["amp_o0_vs_o2"]
    assert main(["compare", str(baseline), str(target)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("EQUIVALENT") and "within precision (float16)" in text
    assert "only in the target: Cast x" in text          # amp's Casts: listed, not fatal


def test_jit_against_pynative_pairs_forward_ops_and_lists_the_rest(compare_precision_pairs, capsys):
    """Graph kernels against msprobe's API records: the forward ops pair by op family (Primitive.*.LayerNorm with
    LayerNorm, Tensor.__mul__ with Mul); backward records, parameters and the optimizer are listed with counts."""
    baseline, target = compare_precision_pairs["jit_vs_pynative"]
    result = compare(str(baseline), str(target))
    assert result.verdict == "equivalent", result.reasons
    assert any(c.startswith("across modes") for c in result.caveats)
    assert result.matched_ops >= 10
    assert {"Parameter", "SGD"} <= {u.op_type for u in result.unmatched if u.side == "baseline"}
    assert any(u.op_type.endswith(".backward") for u in result.unmatched if u.side == "target")
    assert main(["compare", str(baseline), str(target)]) == 0
    text = capsys.readouterr().out
    assert "only in the baseline: Parameter x" in text and "only in the target:" in text


def test_the_planted_origin_leads_the_largest_differences(compare_pairs):
    """Issue 34 item 4: on the real LayerNorm-epsilon pair the LayerNorm led nothing (ranked by ulps, tiny gradient
    sums near zero came first, one with "max rel err inf"); ranked by the error over what the inputs carry, the
    origin leads and no relative error is infinite."""
    baseline, target = compare_pairs["layernorm_eps"]
    result = compare(str(baseline), str(target))
    assert result.worst[0].op_type == "LayerNorm" and result.worst[0].role == "origin"
    assert all(t.max_rel_error is None or t.max_rel_error < float("inf") for op in result.differences
               for t in op.outputs)
