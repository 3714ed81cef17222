"""Rules through the whole pipeline on SYNTHETIC dumps (MindSpore-layout npy files written by tests/support/synth_dump.py).
The real-MindSpore counterparts live in tests/real/test_real_dumps_analyze.py."""
import json
import os

import numpy as np
import pytest

from msoverflow.analysis import analyze
from msoverflow.render.json_report import render_json
from tests.support.synth_dump import SynthDump, ir_node

F16 = np.float16
F32 = np.float32


def fin(*shape, value=1.0, dtype=F32):
    return np.full(shape or (4,), value, dtype)


def test_fp16_declared_file_holding_fp32_bytes_over_65504_is_an_overflow_origin(tmp_path):
    d = SynthDump(str(tmp_path))
    d.op(0, "Mul", "Default_a-A_Mul-op0", [fin(4), fin(4)], [fin(4)])
    d.op(0, "SqrtGrad", "Gradients_Default_a-A_Grad_Sqrt_SqrtGrad-op0",
         [fin(4, value=1e-3), fin(4, value=47580.0)], [fin(4, value=2.4e7)], declared="float16")
    d.op(0, "Cast", "Default_a-A_Cast-op1", [fin(4, value=2.4e7)], [fin(4, value=np.inf, dtype=F16)],
         declared="float16")
    r = analyze(str(tmp_path))
    assert r.first.op_type == "SqrtGrad" and r.first.kind == "overflow"
    assert r.first.forward_op == "Sqrt"
    out = r.first.outputs[0]
    assert (out.dtype, out.payload_dtype) == ("float16", "float32") and out.stats.over_range == 4
    assert [p.op_type for p in r.propagation] == ["Cast"]
    assert len(r.anomalies) == 1            # the Cast propagated it, it did not create it


@pytest.mark.parametrize("y, dy, cause", [
    (np.array([0.5, 2e-3, 0.8, 0.9], F32), 400.0, True),     # dy fits fp16; 1/(2 sqrt) of a tiny sqrt blows it up
    (np.array([0.5, 0.6, 0.8, 0.9], F32), 7e4, False),       # the numerator alone is past fp16's max
])
def test_a_division_that_overflows_names_its_tiny_denominator_when_that_is_the_cause(tmp_path, y, dy, cause):
    d = SynthDump(str(tmp_path))
    dx = (dy * 0.5 / y).astype(F32)
    d.op(0, "SqrtGrad", "Gradients_Default_a-A_Grad_Sqrt_SqrtGrad-op0", [y, fin(4, value=dy)], [dx],
         declared="float16")
    r = analyze(str(tmp_path))
    assert (r.first.op_type, r.first.kind) == ("SqrtGrad", "overflow")
    smallest = f"{float(np.abs(y).min()):.6g}"
    assert (f"the denominator (input 0) goes down to |x| = {smallest}" in r.first.detail) == cause, r.first.detail


def test_zero_over_zero_names_the_denominator(tmp_path):
    d = SynthDump(str(tmp_path))
    d.op(0, "ReduceSum", "Default_loss-L_ReduceSum-op0", [np.zeros(8, F32)], [np.zeros((), F32)])
    d.op(0, "RealDiv", "Default_loss-L_RealDiv-op0", [np.zeros((), F32), np.zeros((), F32)],
         [np.full((), np.nan, F32)])
    r = analyze(str(tmp_path))
    assert (r.first.op_type, r.first.kind) == ("RealDiv", "invalid")
    assert r.first.detail.startswith("0/0: denominator (input 1) is 0")
    assert "skip the step" in r.first.recommendation.lower()


def test_division_by_zero_of_a_nonzero_numerator_is_invalid_not_a_precision_overflow(tmp_path):
    d = SynthDump(str(tmp_path))
    d.op(0, "RealDiv", "Default_RealDiv-op0", [fin(2), np.array([1.0, 0.0], F32)], [np.array([1, np.inf], F32)])
    r = analyze(str(tmp_path))
    assert r.first.kind == "invalid" and "division by zero" in r.first.detail
    assert "guard the denominator" in r.first.recommendation.lower()


@pytest.mark.parametrize("op, arg, out, words", [
    ("Sqrt", np.array([4.0, -1.0], F32), np.array([2.0, np.nan], F32), "negative"),
    ("Log", np.array([1.0, 0.0], F32), np.array([0.0, -np.inf], F32), "zero"),
    ("Log", np.array([1.0, -2.0], F32), np.array([0.0, np.nan], F32), "negative"),
])
def test_domain_errors_are_invalid(tmp_path, op, arg, out, words):
    d = SynthDump(str(tmp_path))
    d.op(0, op, f"Default_{op}-op0", [arg], [out])
    r = analyze(str(tmp_path))
    assert r.first.kind == "invalid" and words in r.first.detail


def test_nan_from_finite_inputs_without_a_known_cause(tmp_path):
    d = SynthDump(str(tmp_path))
    d.op(0, "Softmax", "Default_Softmax-op0", [fin(4)], [np.array([np.nan] * 4, F32)])
    r = analyze(str(tmp_path))
    assert r.first.kind == "invalid" and "NaN from finite inputs" in r.first.detail


def test_cast_of_large_fp32_to_fp16_is_a_cast_overflow(tmp_path):
    d = SynthDump(str(tmp_path))
    d.op(0, "Cast", "Default_Cast-op0", [fin(2, value=1e6)], [np.array([np.inf, np.inf], F16)])
    r = analyze(str(tmp_path))
    assert r.first.kind == "overflow" and "cast overflow" in r.first.detail


def test_saturation_mode_values_pinned_at_fp16_max(tmp_path):
    d = SynthDump(str(tmp_path))
    d.op(0, "Mul", "Default_Mul-op0", [fin(2, value=300, dtype=F16), fin(2, value=300, dtype=F16)],
         [np.array([65504, 65504], F16)])
    d.op(0, "Add", "Default_Add-op0", [np.array([65504, 65504], F16), fin(2, dtype=F16)],
         [np.array([65504, 65504], F16)])
    r = analyze(str(tmp_path))
    assert (r.first.op_type, r.first.kind) == ("Mul", "saturation")
    assert len(r.anomalies) == 1


def test_ranks_are_compared_by_step_never_by_clock(tmp_path):
    early = SynthDump(str(tmp_path), rank=0, clock=1_000)            # rank 0's clock is far behind
    early.op(0, "Add", "Default_Add-op0", [fin(2)], [fin(2)])
    early.op(1, "Exp", "Default_Exp-op0", [fin(2)], [np.array([np.inf, 1], F32)])
    late = SynthDump(str(tmp_path), rank=1, clock=9_000_000_000)
    late.op(0, "Exp", "Default_Exp-op1", [fin(2)], [np.array([np.inf, 1], F32)])
    r = analyze(str(tmp_path))
    assert (r.first.rank, r.first.iteration) == (1, 0)
    assert [(a.rank, a.iteration) for a in r.anomalies] == [(1, 0), (0, 1)]


def test_collective_delivering_nan_is_cross_rank_not_an_origin(tmp_path):
    stage1 = SynthDump(str(tmp_path), rank=1)
    stage1.op(0, "SqrtGrad", "Gradients_SqrtGrad-op0", [fin(2), fin(2)], [np.array([np.inf, 1], F32)])
    stage0 = SynthDump(str(tmp_path), rank=0)
    stage0.op(0, "Receive", "Default_Receive-op0", [], [np.array([np.inf, 1], F32)])
    stage0.op(0, "AllReduce", "Default_AllReduce-op0", [fin(2)], [np.array([np.nan, 1], F32)])
    r = analyze(str(tmp_path))
    assert (r.first.rank, r.first.op_type) == (1, "SqrtGrad")
    assert [a.rank for a in r.anomalies] == [1]


def test_parameter_already_nonfinite_means_the_origin_is_before_the_dump(tmp_path):
    d = SynthDump(str(tmp_path))
    d.parameter(0, "lm_head_weight", np.array([np.nan, 1], F32))
    r = analyze(str(tmp_path))
    assert r.first.kind == "nonfinite-input" and "earlier" in r.first.recommendation


def test_inputs_only_dump_names_the_producer_from_the_graph(tmp_path):
    d = SynthDump(str(tmp_path))
    d.op(0, "Sqrt", "Default_net-N_Sqrt-op0", [fin(2)])
    d.op(0, "Cast", "Default_net-N_Cast-op0", [np.array([np.inf, 2], F32)])
    d.write_ir(ir_node(1, "Sqrt", "Default/net-N/Sqrt-op0", ["%0"], ("/m.py", 9, "y = self.sqrt(x)"))
               + ir_node(2, "Cast", "Default/net-N/Cast-op0", ["%1"]))
    r = analyze(str(tmp_path))
    assert (r.first.op_type, r.first.cell_type, r.first.source.line) == ("Sqrt", "N", 9)
    assert any("input 0 of Cast" in e for e in r.first.evidence)


def test_later_steps_are_skipped_after_the_origin_unless_scan_all(tmp_path):
    d = SynthDump(str(tmp_path))
    d.op(0, "Exp", "Default_Exp-op0", [fin(2)], [np.array([np.inf, 1], F32)])
    for it in (1, 2):
        d.op(it, "Add", "Default_Add-op0", [fin(2)], [fin(2)])
        d.op(it, "Exp", "Default_Exp-op0", [fin(2)], [np.array([np.inf, 1], F32)])
    quick = analyze(str(tmp_path))
    full = analyze(str(tmp_path), scan_all=True)
    assert quick.first.iteration == full.first.iteration == 0
    assert not quick.tail_clean and full.tail_clean
    assert quick.tensors_read < full.tensors_read
    assert [a.iteration for a in full.anomalies] == [0, 1, 2]


def test_corrupt_files_are_reported_and_skipped(tmp_path):
    d = SynthDump(str(tmp_path))
    good = d.tensor(0, "Add", "Default_Add-op0", "output", 0, fin(2))
    truncated = d.tensor(0, "Exp", "Default_Exp-op0", "output", 0, fin(1000))
    with open(truncated, "r+b") as fh:
        fh.truncate(200)
    garbage = os.path.join(os.path.dirname(good), "Mul.Default_Mul-op0.0.0.99.output.0.DefaultFormat.Float32.npy")
    with open(garbage, "wb") as fh:
        fh.write(b"not an npy file at all")
    d.op(0, "Log", "Default_Log-op0", [np.array([0.0], F32)], [np.array([-np.inf], F32)])
    r = analyze(str(tmp_path))
    assert r.first.op_type == "Log"
    joined = "\n".join(r.warnings)
    assert "truncated" in joined and os.path.basename(truncated) in joined
    assert "not a valid npy" in joined and os.path.basename(garbage) in joined


def test_clean_dump_and_json_schema(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.load(open(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "msoverflow", "schema",
                                         "report.schema.json")))
    d = SynthDump(str(tmp_path))
    d.op(0, "Add", "Default_Add-op0", [fin(2)], [fin(2)])
    clean = json.loads(render_json(analyze(str(tmp_path))))
    jsonschema.validate(clean, schema)
    assert clean["verdict"] == "clean" and clean["first"] is None
    d.op(0, "Exp", "Default_Exp-op0", [fin(2)], [np.array([np.inf, 1], F32)])
    bad = json.loads(render_json(analyze(str(tmp_path))))
    jsonschema.validate(bad, schema)
    assert bad["verdict"] == "anomaly" and bad["first"]["op_type"] == "Exp"
    assert bad["first"]["outputs"][0]["posinf"] == 1


def test_duplicate_tensor_files_are_reported_once_and_ignored(tmp_path):
    d = SynthDump(str(tmp_path / "dump"))
    d.op(0, "Exp", "Default_Exp-op0", [fin(2)], [np.array([np.inf, 1], F32)])
    folder = d.dir(0)
    twin = tmp_path / "dump" / "copy" / "rank_0" / "Net" / "0" / "0"   # a copied step directory
    os.makedirs(twin)
    for name in os.listdir(folder):
        os.link(os.path.join(folder, name), str(twin / name))
    r = analyze(str(tmp_path / "dump"))
    assert r.first.op_type == "Exp" and len(r.anomalies) == 1 and r.propagation == []
    assert sum("duplicate of" in w for w in r.warnings) == 2
