"""`msoverflow compare` when the two graphs differ (issue 34), on SYNTHETIC dumps (tests/support/synth_dump.py):
ops one side inserted are gaps, not mis-pairs; a pair whose shapes differ is a gap, not a verdict; no "rel err inf"
from a zero reference; the place reads "rank 0, step 0"; each reason is said once; a steps mismatch names the
selection that makes the sides comparable; --map pairs names the built-in rules would not. The real pairs are in
tests/real/test_compare_precision_real.py."""
import numpy as np
import pytest

from msoverflow.cli import main
from msoverflow.comparison import compare, compare_arrays
from msoverflow.comparison.names import family, load_map
from msoverflow.errors import UserError
from tests.support.synth_dump import SynthDump

X = np.linspace(0.5, 2.5, 64, dtype=np.float32)


def _chain(root, *, casts=0, steps=(0,), exp_scale=1.0):
    """Mul -> [Cast x casts, the same scope, other shapes] -> Exp -> Add; casts: inserted ops (as a precision
    patch inserts), whose outputs have another shape than the chain's."""
    d = SynthDump(str(root))
    for step in steps:
        y = X * 2
        d.op(step, "Mul", "Default_net-Net_head-Head_Mul-op0", [X, np.full(1, 2, np.float32)], [y])
        for k in range(casts):
            d.op(step, "Cast", f"Default_net-Net_head-Head_Cast-op{k}", [y[:8]], [y[:8].astype(np.float16)])
        e = np.exp(y * np.float32(exp_scale)).astype(np.float32)
        d.op(step, "Exp", "Default_net-Net_head-Head_Exp-op0", [y], [e])
        d.op(step, "Cast", "Default_net-Net_head-Head_Cast-op9", [e], [e.astype(np.float16)])
        d.op(step, "Add", "Default_net-Net_Add-op0", [e, np.ones(64, np.float32)], [e + 1])
    return str(root)


def test_inserted_ops_are_gaps_not_mispairs(tmp_path):
    """The target inserts two Casts in the same scope as an existing Cast: paired by occurrence alone the
    existing Cast met an inserted one (shapes 64 against 8: the old answer was inconclusive); aligned, the
    inserted ones are listed as one side only and the runs are equivalent."""
    result = compare(_chain(tmp_path / "a"), _chain(tmp_path / "b", casts=2))
    assert result.verdict == "equivalent", result.reasons
    assert result.matched_ops == result.baseline_ops == 4
    assert [(u.side, u.op_type) for u in result.unmatched] == [("target", "Cast"), ("target", "Cast")]


def test_a_zero_reference_gives_no_infinite_relative_error():
    a = np.array([0.0, 0.0, 1.0, 2.0], np.float32)
    b = np.array([1e-10, 0.0, 1.0, 2.5], np.float32)
    found = compare_arrays(a, b, "float32", 8)
    assert found["max_rel_error"] == pytest.approx(0.25)        # 0.5 of 2; the 1e-10 against 0 left out
    assert compare_arrays(np.zeros(4, np.float32), np.full(4, 1e-3, np.float32), "float32", 8)[
        "max_rel_error"] is None                                    # no element of the reference to relate to


def test_the_changed_op_leads_the_largest_differences(tmp_path):
    """Exp computes with another scale in the target: it is where the runs part and leads the ranking, before
    the Add and Cast that only carry its difference (whatever their ulps)."""
    result = compare(_chain(tmp_path / "a"), _chain(tmp_path / "b", exp_scale=1.001))
    assert result.verdict == "diverged" and result.first_divergence.op_type == "Exp"
    assert result.worst[0].op_type == "Exp" and result.worst[0].role == "origin"
    assert all(op.max_rel_error is None or op.max_rel_error < 1 for op in result.worst)


def test_place_reads_rank_and_step_in_every_format(tmp_path, capsys):
    a, b = _chain(tmp_path / "a"), _chain(tmp_path / "b", exp_scale=1.001)
    for fmt in ("text", "markdown", "html"):
        assert main(["compare", a, b, "--format", fmt]) == 1
        out = capsys.readouterr().out
        assert "rank 0, step 0" in out, fmt
        assert "rank 0, 0" not in out, fmt


def test_a_steps_mismatch_names_the_selection_and_each_reason_is_said_once(tmp_path, capsys):
    a, b = _chain(tmp_path / "a", steps=(0, 1)), _chain(tmp_path / "b", steps=(0,))
    for fmt in ("text", "markdown", "html"):
        assert main(["compare", a, b, "--format", fmt]) == 3
        out = capsys.readouterr().out
        reason = "the runs are not the same job: the baseline holds steps 0,1, the target steps 0"
        assert out.count(reason) == 1, (fmt, out)
        assert "--steps 0 compares the steps both hold" in out
    assert main(["compare", a, b, "--steps", "0"]) == 0
    capsys.readouterr()


def test_api_names_pair_by_op_family():
    assert family("Softmax", "Functional.softmax.0.forward") == "Softmax"
    assert family("Softmax", "Primitive.softmax.Softmax.3.forward") == "Softmax"
    assert family("Tensor.__mul__", "Tensor.__mul__.0.forward") == "Mul"
    assert family("BatchMatMul", "Default_net-Net_BatchMatMul-op0") == "MatMul"
    assert family("Functional.shape", "Functional.shape.0.forward") is None


def test_map_files_ours_and_msprobes_as_they_are(tmp_path):
    ours = tmp_path / "map.yaml"
    ours.write_text("'*head-Head_Exp': Functional.exp\n")
    assert load_map(str(ours)).key_of(("Exp", "Default_net-Net_head-Head_Exp"), "baseline") == "map0"
    api_mapping = tmp_path / "api_mapping.yaml"
    api_mapping.write_text("- ms_api: Functional.softmax\n  pt_api: Torch.softmax\n  ms_args: [0]\n  pt_args: [0]\n")
    found = load_map(str(api_mapping))
    assert found.pairs == [("Functional.softmax", "Torch.softmax")]
    assert found.key_of(("Torch.softmax", "Softmax"), "target") == "map0"
    bad = tmp_path / "bad.yaml"
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(UserError, match="bad.yaml"):
        load_map(str(bad))


def test_map_overrides_the_pairing(tmp_path):
    """--map pairs what the names alone would not: the baseline's Exp with the target's Mul (a renamed op), so
    their difference is found and named."""
    a, b = _chain(tmp_path / "a"), _chain(tmp_path / "b")
    mapping = tmp_path / "map.yaml"
    mapping.write_text("'*head-Head_Exp': '*head-Head_Mul'\n")
    result = compare(a, b, name_map=str(mapping))
    exp = [op for op in result.differences if op.op_type == "Exp"]
    assert exp and exp[0].target_op_type == "Mul"
