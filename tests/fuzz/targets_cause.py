"""Fuzz targets of issue 33: the recompute and the harmless stage (completeness is targets_read.completeness_step).

Each case's input bytes are a small JSON plan that hypothesis draws whole (a mutated plan that is no JSON is
skipped), so a failing case is saved and replayed like any other harness input:
- recompute: one op run of any reference-kernel op (and ops without one, and ops that take code) with tensors of
  any shape, dtype and values (0, -0, subnormals, the dtypes' limits, inf, NaN), hostile saved-graph attributes,
  literals and inferred shapes, through cause.diagnose (numpy only: MindSpore's subprocess is its own test).
  Contract: a Cause in the known set, never an exception; an op that takes code is never recomputed; a dumped
  output that IS the op's result in its own dtype is never called a device fault; memory bounded (run_long's
  RLIMIT_AS and peak RSS: a recompute over the element budget is refused, never computed).
- harmless: a small multi-step dump with a saved graph (a weight, a masked Softmax, a backward op, an optimizer
  update that runs or is skipped, a loss-scale parameter) with non-finite values planted per step; analyzed
  in-process. Contract: exit in 0/1/2/3, no traceback, the dump unchanged; a weight that holds a non-finite value
  is never CLEAN (neither a contained value nor a handled overflow may account for it).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from hypothesis import strategies as st

PALETTE = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-8, -1e-8, 6e-8, 65504.0, -65504.0, 65520.0, 3.4e38, -3.4e38,
           1e300, float("inf"), float("-inf"), float("nan"), 7.0, -3.0]
FINITE = [i for i, v in enumerate(PALETTE) if abs(v) < 1e30]
DTYPES = ["float16", "float32", "bfloat16", "float64", "int32", "bool"]
ATTRS = ["", "transpose_a: Bool(0), transpose_b: Bool(0)", "transpose_a: Bool(1), transpose_b: Bool(0)",
         "transpose_a: Bool(0), transpose_b: Bool(1)", "axis: (I64(-1))", "axis: (I64(0), I64(1)), keep_dims: Bool(1)",
         "axis: I64(99)", "keep_dims: Bool(1), skip_mode: Bool(1)", "begin_norm_axis: I64(-1), begin_params_axis: "
         "I64(-1), epsilon: F32(1e-05)", "begin_norm_axis: I64(7), epsilon: F32(nan)", "data_format: I64(1)",
         "data_format: \"NCHW\"", "is_grad: Bool(1)", "weight_decay: F32(0.1)", "nesterov: Bool(1)",
         "multiples: (I64(4000), I64(4000))", "func: \"payload.cc:Fn\", func_type: \"aot\"", "file: \"x.so\"",
         "axis: (" * 40 + ")" * 40, "epsilon: F32(" + "9" * 400 + ")"]
LITERALS = ["Bool(1)", "Bool(0)", "I64(-1)", "I64(0)", "I64(1)", "I64(9223372036854775807)", "F32(1e-05)",
            "(I64(0), I64(1))", "()", "\"NCHW\"", "Tensor(shape=[], dtype=Float32, value=16)", "%3", "U", "F32(inf)"]
OPS_WITHOUT_KERNEL = ["Transpose", "Tile", "Custom", "Custom_divide_7bc51c98", "PyFunc", "Gather"]


@st.composite
def recompute_seed_plan(draw) -> bytes:
    """A plan: an op and a seed that _derive() grows into the whole plan (hypothesis draws two values, not forty:
    the generation costs less than the case). The whole plan (as _derive() gives it) replays too (the corpus)."""
    from msoverflow.cause import recompute
    return json.dumps({"op": draw(st.sampled_from(sorted(recompute.KERNELS) + OPS_WITHOUT_KERNEL)),
                       "derive": draw(st.integers(0, (1 << 63) - 1))}).encode()


def _derive(op: str, seed: int) -> dict:
    """The whole plan, drawn from random.Random(seed): 1 in 10 has operands whose product or broadcast is far over
    the element budget, 1 in 5 tensors may hold inf/NaN, half the dumped outputs are the op's own result."""
    import random

    from msoverflow.cause import recompute
    rng = random.Random(seed)
    signature = recompute.signatures().get(op)
    count = signature.tensors if signature is not None and signature.tensors is not None else rng.randint(1, 4)
    wide = rng.randint(0, 9) == 0

    def shape(is_wide):
        if is_wide:
            return rng.choice([(3000, 16), (16, 3000), (3000, 1), (1, 3000), (70, 70, 70, 70)])
        return tuple(rng.randint(0, 5) for _ in range(rng.randint(0, 3)))

    def picks(pool):
        return [rng.choice(pool) for _ in range(rng.randint(1, 6))]
    base = shape(False)
    tensors = []
    for slot in range(count + rng.choice([0, 0, 0, 1, 3])):
        if rng.randint(0, 9) == 0:
            continue
        one = shape(wide) if (wide or rng.randint(0, 3) == 0) else base
        pool = list(range(len(PALETTE))) if rng.randint(0, 4) == 0 else FINITE
        tensors.append({"slot": slot, "shape": list(one), "dtype": rng.choice(DTYPES), "values": picks(pool)})
    return {"op": op, "tensors": tensors, "declared": rng.choice(["float16", "float32", "bfloat16"]),
            "exact": rng.random() < 0.5, "out_shape": list(shape(False)),
            "out_values": picks(list(range(len(PALETTE)))), "node": rng.random() < 0.5, "attrs": rng.choice(ATTRS),
            "literals": {str(rng.randint(0, 6)): rng.choice(LITERALS) for _ in range(rng.randint(0, 2))},
            "types": rng.choice(["", "(<Tensor[Float16], (2, 3)>, <Tensor[Float16], (3, 2)>) -> "
                                 "(<Tensor[Float16], (2, 2)>)", "(<Tensor[Float32], (100000, 100000)>) -> "
                                 "(<Tensor[Float32], (100000, 100000)>)", "() -> ()"]),
            "seed": rng.randint(0, 1 << 30)}


def _json(path: str):
    try:
        plan = json.loads(Path(path).read_bytes())
    except (ValueError, UnicodeDecodeError):
        return None
    return plan if isinstance(plan, dict) else None


def _fill(shape, dtype: str, picks, rng) -> np.ndarray:
    size = int(np.prod(shape, dtype=np.int64))
    values = np.asarray([PALETTE[i % len(PALETTE)] for i in picks], dtype=np.float64)
    with np.errstate(all="ignore"):
        flat = values[rng.integers(0, len(values), size)] if size else np.zeros(0)
        if dtype == "bool":
            return (flat.reshape(shape) != 0)
        if dtype == "int32":
            return np.nan_to_num(flat, nan=0, posinf=7, neginf=-7).clip(-1e6, 1e6).astype(np.int32).reshape(shape)
        stored = "float32" if dtype == "bfloat16" else dtype      # a bfloat16 dump's bytes, widened by the reader
        return flat.astype(stored).reshape(shape)


def _event(path: str, op: str, io: str, slot: int, dtype: str):
    from msoverflow.model import TensorEvent
    return TensorEvent(source=path, rank=0, graph="0", step=0, op_type=op, op_name=f"{op}-op1", task_id=0,
                       stream_id=0, timestamp=100, io=io, slot=slot, dtype=dtype)


def recompute_case(path: str, work: str):
    from msoverflow.cause import recompute, safety
    from msoverflow.cause.cause import diagnose
    from msoverflow.evaluate import TensorAccess
    from msoverflow.model import CAUSE_DEVICE, CAUSE_UNKNOWN, GraphNode, OpExecution
    from tests.fuzz.harness import CaseFailure
    plan = _json(path)
    try:
        if "derive" in plan:
            plan = _derive(str(plan["op"]), int(plan["derive"]))
        op, declared = str(plan["op"]), str(plan["declared"])
        rng = np.random.default_rng(int(plan["seed"]))
        specs = [(int(t["slot"]), tuple(int(d) for d in t["shape"]), str(t["dtype"]), list(t["values"]))
                 for t in plan["tensors"]]
        out_shape = tuple(int(d) for d in plan["out_shape"])
        literals = {int(k): str(v) for k, v in dict(plan["literals"]).items()}
        assert declared in DTYPES and all(d in DTYPES and len(s) <= 4 and all(0 <= x <= 4000 for x in s)
                                          and 0 <= slot < 16 for slot, s, d, _v in specs)
        assert len(out_shape) <= 3 and all(0 <= d <= 16 for d in out_shape)
        assert all(isinstance(i, int) for *_r, v in specs for i in v) and isinstance(plan["out_values"], list)
        assert all(isinstance(i, int) for i in plan["out_values"])
    except (TypeError, KeyError, ValueError, AssertionError, AttributeError, OverflowError):
        return            # a mutated plan: nothing to build
    inputs, arrays = [], {}
    for slot, shape, dtype, picks in specs:
        if any(e.slot == slot for e in inputs) or int(np.prod(shape, dtype=np.int64)) > 1 << 22:
            continue
        array = _fill(shape, dtype, picks or [0], rng)
        file = os.path.join(work, f"in{slot}.npy")
        np.save(file, array)
        arrays[slot] = array
        inputs.append(_event(file, op, "input", slot, dtype))
    node = None
    if plan.get("node"):
        node = GraphNode(full_name=f"Default/network-Net/{op}-op1", op_type=op, literals=literals,
                         attrs_text=str(plan["attrs"]), types_text=str(plan["types"]))
    dumped = None
    if plan.get("exact") and op in recompute.KERNELS and op not in recompute.UPDATES and node is None:
        # the dumped output is the op's own result in the dumped dtype (from the same inputs, in slot order)
        ordered = [arrays[s] for s in sorted(arrays)]
        produced = safety.produced_elements(op, [a.shape for a in ordered], {}, pointwise=True) or 0
        if safety.over_budget(op, sum(a.size for a in ordered), produced, 1, 1 << 20):
            ordered = []         # the harness's own reference stays small (the package's path is what is fuzzed)
        try:
            made = recompute.run(op, ordered, {}, declared if declared != "float64" else "float32", [declared])
            dumped = np.asarray(made[0]) if made else None
        except recompute.RecomputeError:
            dumped = None
        if dumped is not None and (dumped.size > 1 << 16 or dumped.dtype.kind != "f"):
            dumped = None
    exact = dumped is not None
    if dumped is None:
        dumped = _fill(out_shape, declared, plan["out_values"] or [15], rng)
        if dumped.size and dumped.dtype.kind == "f":
            dumped.reshape(-1)[0] = np.inf                 # the origin made a bad value
    out_file = os.path.join(work, "out0.npy")
    np.save(out_file, dumped.astype(np.float32) if declared == "bfloat16" and dumped.dtype.kind == "f" else dumped)
    ex = OpExecution(rank=0, graph="0", step=0, op_type=op, op_name=f"{op}-op1", task_id=0, stream_id=0,
                     inputs=inputs, outputs=[_event(out_file, op, "output", 0, declared)])
    warnings = []
    cause = diagnose(ex, TensorAccess(warnings.append), node=node, mindspore=False)
    known = {"precision", "domain", "data", "device", "unknown", "dynamics"}
    if cause.cause not in known:
        raise CaseFailure(f"{op}: cause {cause.cause!r} is not one of {sorted(known)}")
    if cause.cause == CAUSE_UNKNOWN and not cause.reason:
        raise CaseFailure(f"{op}: cause unknown without a reason")
    if safety.takes_code(op, node.attrs_text if node is not None else "") and cause.by:
        raise CaseFailure(f"{op} takes code and was recomputed by {cause.by}")
    if exact and cause.cause == CAUSE_DEVICE:
        raise CaseFailure(f"{op}: its dumped output is its own result in {declared}, yet called a device fault: "
                          f"{cause.reason}")


# ---- harmless ------------------------------------------------------------------------------------------------

_W = "Default/network-Net/fc-Dense/weight"
_NAMES = {"matmul": "Default/network-Net/fc-Dense/MatMul-op1", "softmax": "Default/network-Net/attn/Softmax-op2",
          "fill": "Default/network-Net/attn/Add-op3",
          "grad": "Gradients/Default/network-Net/fc-Dense/gradMatMul/MatMul-op4",
          "sgd": "Default/optimizer-SGD/SGD-op5"}
PLANTS = ["none", "none", "fill_neginf", "grad_inf", "grad_nan", "forward_nan", "weight_nan", "sgd_inf",
          "weight_stomp"]
# a column of the weight overwritten in memory with garbage that stays finite in its dtype (the stomp class); the
# forward MatMul sums it past the dtype's range, so the step is never CLEAN (the origin's finite input is followed
# back to the weight: cause/entered.py, rules/corruption.py)
STOMP_COLUMN = {"float32": [3e38, 3e38, 1e-20, -5e-9], "float16": [4e4, 3e4, -2e-5, 9e-3]}


@st.composite
def harmless_plan(draw) -> bytes:
    steps = draw(st.integers(1, 4))
    plan = {"steps": [{"plant": draw(st.sampled_from(PLANTS)), "sgd": draw(st.booleans()),
                       "scale": draw(st.sampled_from([65536.0, 32768.0, 1.0, 0.5, float("inf")]))}
                      for _ in range(steps)],
            "ir": draw(st.booleans()), "dtype": draw(st.sampled_from(["float16", "float32"])),
            "fmt": draw(st.sampled_from(["json", "text"])), "strict": draw(st.integers(0, 5)) == 0}
    return json.dumps(plan).encode()


def _harmless_ir() -> str:
    from tests.support.synth_dump import ir_node
    return ("%para1_fc.weight : <Tensor[Float32], (4, 4)>\n%para2_scale_sense : <Tensor[Float32], ()>\n"
            "%para3_mask : <Tensor[Float32], (4, 4)>\n"
            + ir_node(1, "MatMul", _NAMES["matmul"], ["%para0", "%para1"])
            + ir_node(3, "Add", _NAMES["fill"], ["%1", "%para3"])
            + ir_node(2, "Softmax", _NAMES["softmax"], ["%3"])
            + ir_node(4, "MatMul", _NAMES["grad"], ["%2", "%para2"])
            + ir_node(5, "SGD", _NAMES["sgd"], ["%para1", "%4"]))


def harmless_case(path: str, work: str):
    from tests.fuzz.harness import CaseFailure, run_cli, tree_digest
    from tests.support.synth_dump import SynthDump
    plan = _json(path)
    try:
        steps = list(plan["steps"])
        assert 1 <= len(steps) <= 6 and plan["dtype"] in ("float16", "float32") and plan["fmt"] in ("json", "text")
        for s in steps:
            assert s["plant"] in PLANTS and isinstance(s["sgd"], bool) and isinstance(s["scale"], (int, float))
    except (TypeError, KeyError, AssertionError):
        return
    root = os.path.join(work, "dump")
    dump = SynthDump(root)
    dtype = np.dtype(plan["dtype"])
    weight_bad = False
    weight = np.full((4, 4), 0.5, np.float32)
    for step, s in enumerate(steps):
        plant = s["plant"]
        x = np.ones((4, 4), dtype)
        scale = np.asarray(s["scale"], np.float32)
        dump.parameter(step, "scale_sense", scale)
        w = weight.copy()
        if plant == "weight_nan":
            w[0, 0] = np.nan
            weight_bad = True
        if plant == "weight_stomp":
            w[:, 1] = STOMP_COLUMN[plan["dtype"]]
            weight_bad = True
        dump.parameter(step, "fc.weight", w)
        with np.errstate(all="ignore"):
            y = (x.astype(np.float32) @ w).astype(dtype)
            if plant == "forward_nan":
                y[1, 1] = np.nan
            mask = np.zeros((4, 4), dtype)
            if plant == "fill_neginf":
                mask[:, 0] = -np.inf          # a causal mask's fill: Softmax turns it into zeros
            filled = y + mask
            e = np.exp(filled.astype(np.float32) - np.nanmax(filled.astype(np.float32), axis=-1, keepdims=True))
            soft = (e / e.sum(axis=-1, keepdims=True)).astype(dtype)
            grad = (soft.astype(np.float32) * scale).astype(dtype)
            if plant == "grad_inf":
                grad[0, 0] = np.inf
            if plant == "grad_nan":
                grad[0, 1] = np.nan
        name = lambda key: _NAMES[key].replace("/", "_")     # noqa: E731 (file names carry '_' for '/')
        dump.op(step, "MatMul", name("matmul"), [x, w.astype(dtype)], [y])
        dump.op(step, "Add", name("fill"), [y, mask], [filled])
        dump.op(step, "Softmax", name("softmax"), [filled], [soft])
        dump.op(step, "MatMul", name("grad"), [soft, np.asarray(scale, dtype).reshape(1, 1)], [grad])
        if s["sgd"] or plant == "sgd_inf":
            update = np.full((4, 4), -0.01, np.float32)
            if plant == "sgd_inf":
                update[2, 2] = np.inf
                weight_bad = True          # the update applied an inf: the next weight (or this write) holds it
            dump.op(step, "SGD", name("sgd"), [w, grad.astype(np.float32)], [update])
            with np.errstate(all="ignore"):
                weight = weight + update
    if plan.get("ir"):
        dump.write_ir(_harmless_ir())
    before = tree_digest(root)
    argv = ["analyze", root, "--no-progress", "--format", plan["fmt"], "-o", os.path.join(work, "r.out")]
    code = run_cli(argv + (["--strict"] if plan.get("strict") else []))
    if tree_digest(root) != before:
        raise CaseFailure("the dump tree changed")
    if weight_bad and code == 0:
        raise CaseFailure(f"CLEAN with a non-finite weight or update: {json.dumps(plan)}")


TARGETS = {"recompute": ("recompute_plan", recompute_case), "harmless": ("harmless_plan", harmless_case)}
STRATEGIES = {"recompute": recompute_seed_plan, "harmless": harmless_plan}
