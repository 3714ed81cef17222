"""The cause of an origin, found by recomputing its op from the dumped inputs.

The op is recomputed in the dumped (declared) dtype and in float32 and float64 (msoverflow/cause/recompute.py;
MindSpore in a subprocess for ops without a reference kernel, when it is installed). Then:

- precision: bad in the low-precision dtype the dump declares, finite in float32: a precision patch is the fix;
- domain: bad in every training dtype from finite inputs: sqrt/log of a negative, 0/0, x/0, inf - inf, or a value
  beyond float32's range (the inputs are named, with the positions);
- data: a denominator that is a token or mask count equal to 0 (the zero-token case), or the data batch, a graph
  input, already holds the bad value (the rows are named);
- device: the recompute is finite, or differs beyond tolerance, where the dump is bad: the device made a value its
  inputs do not explain (a kernel bug, or a hardware fault such as silent data corruption);
- unknown: it could not be recomputed, and the reason says why.
"""
from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from ..dtypes import dtype_max
from ..judgement.table import FIX
from ..model import (
    BASIS_BETWEEN_STEPS,
    CAUSE_DATA,
    CAUSE_DEVICE,
    CAUSE_DOMAIN,
    CAUSE_PRECISION,
    CAUSE_UNKNOWN,
    Cause,
    GraphNode,
    OpExecution,
    Recomputed,
    Sample,
    TensorEvent,
)
from ..resources import load_yaml
from ..rules.knowledge import OpKnowledge, knowledge
from ..rules.numerics import division_form, outside
from ..values import bad_mask
from . import between, recompute, safety, upstream, where
from .recompute import LOW_PRECISION, Precision, RecomputeError

# Inputs and results of one recompute, in elements: beyond this the op is not recomputed (memory stays bounded).
MAX_ELEMENTS = safety.MAX_ELEMENTS
SAMPLES = 4
# A recompute in a low precision that lands this close to the dtype's limit is not proof of a device fault: a
# kernel that orders its arithmetic differently can overflow there.
EDGE = 0.5

# The fix each cause names is the judgement's (one text, msoverflow/judgement/table.py)
ADVICE = FIX


@dataclass
class _Inputs:
    tensors: List[np.ndarray]
    args: Dict[str, object]
    by_slot: Dict[int, np.ndarray] = field(default_factory=dict)   # the kernel's tensor inputs by its slot
    kernel: str = ""
    defaulted: List[str] = field(default_factory=list)     # arguments neither the dump nor the graph gave
    notes: List[str] = field(default_factory=list)         # how the recompute read what it was not told


def diagnose(ex: OpExecution, access, *, node: Optional[GraphNode] = None, graph=None,
             produced: Optional[Sequence[TensorEvent]] = None,
             step: Optional[Callable[[], Sequence[OpExecution]]] = None,
             kn: Optional[OpKnowledge] = None, mindspore: bool = True,
             stored_before: Optional[between.StoredBefore] = None) -> Cause:
    """The cause of the bad value `ex` made. access: msoverflow.evaluate.TensorAccess (arrays and their badness);
    node/graph: the saved graph's node of this op and its graph (literal arguments, attributes, producers);
    produced: the tensors holding the op's results when they are not its outputs (an inputs-only dump: the
    consumer's input; an in-place write: the written input); step: the executions of the same rank and step
    (a framework dump's forward entry, a zero denominator's producer), asked only when needed; stored_before: a
    Parameter as the dump holds it after the step before (a weight read bad that no op wrote)."""
    kn = kn or knowledge()
    if ex.is_parameter:
        return _parameter(ex, graph, access)
    written = kn.written_inputs(ex.op_type)
    bad_inputs = [e for e in ex.inputs if e.slot not in written and access.bad(e)]
    if bad_inputs and not _fills_only(ex, bad_inputs, access, kn):
        changed = _changed_between_steps(ex, bad_inputs, node, graph, step, stored_before, access, kn)
        return changed or _made_before(ex, bad_inputs[0], node, graph, access)
    produced = list(produced if produced is not None else ex.outputs)
    out = next((e for e in produced if access.bad(e)), None)
    own = [e for e in ex.inputs if e.slot in written and access.bad(e)]
    if out is None and own:
        # its outputs are finite and it wrote the bad value into an input (CPU Adam): the dump holds that input
        # after the op ran, so what it started from is gone, unless its kernel here gives the update it adds
        if ex.op_type not in recompute.UPDATES:
            return _unknown(f"{ex.op_type} wrote the bad value into input {own[0].slot} in place, and the dump "
                            "holds that input after it ran: the values it started from are gone")
        produced, out = own, own[0]
    if out is None:
        pinned = next((e for e in produced if access.pinned(e)), None)
        if pinned is None:
            return _unknown("its dumped outputs hold no bad value (only the hardware flag says it overflowed)")
        out = pinned
    dumped = access.array(out)
    if dumped is None:
        return _unknown(_unread_why(out, "output"))
    if int(np.prod(np.shape(dumped), dtype=np.int64)) > MAX_ELEMENTS:
        return _unknown(f"its output holds {int(np.prod(np.shape(dumped), dtype=np.int64)):,} elements, more than "
                        f"the {MAX_ELEMENTS:,} recomputed and located in memory")
    dumped = np.asarray(dumped)
    mask = bad_mask(dumped, out.dtype)
    if dumped.dtype.kind == "c":
        if np.any(dumped.imag[~mask]):
            cause = _unknown("its output is complex; the reference kernels recompute real values")
            _place(cause, dumped.real, mask, None, None, None)
            return cause
        dumped = dumped.real                # a complex tensor of real values: what a real kernel computes
    if not mask.any():                       # saturation: values pinned at the dtype's max
        limit = dtype_max(out.dtype)
        mask = np.abs(dumped) == limit if limit else mask
    out_dtypes = [e.dtype for e in sorted(produced, key=lambda e: e.slot)]
    try:
        results, by, gathered = reproduce(ex, access, _precisions(out.dtype), node=node, step=step,
                                          out_slot=out.slot, out_shape=dumped.shape, out_dtypes=out_dtypes,
                                          mindspore=mindspore)
    except RecomputeError as exc:
        cause = _unknown(str(exc))
        _place(cause, dumped, mask, None, None, None)
        return cause
    slot = out.slot if gathered.kernel not in recompute.UPDATES else 0
    if any(slot >= len(r) for r in results.values()):
        return _unknown(f"the recompute of {gathered.kernel} has no output {slot}")
    outputs = {p: r[slot] for p, r in results.items()}
    cause = _decide(ex, out, dumped, mask, outputs, gathered, by, node, graph, step, kn, access)
    return _upstream(cause, ex, node, graph, step, access, dumped, mask)


def _upstream(cause: Cause, ex: OpExecution, node, graph, step, access, dumped: np.ndarray,
              mask: np.ndarray) -> Cause:
    """An origin that is right from its inputs (no dtype at fault: domain or data) whose low-precision input
    holds an exact 0 or inf a producer made: that producer, recomputed in float32, is the cause
    (msoverflow/cause/upstream.py)."""
    if cause.cause not in (CAUSE_DOMAIN, CAUSE_DATA):
        return cause
    found = upstream.find(ex, node, graph, step, access, mask, np.asarray(dumped)[mask], reproduce)
    if found is None:
        return cause
    return dataclasses.replace(cause, cause=CAUSE_PRECISION, reason=found.text, advice=found.advice, basis="upstream",
                               evidence=[f"recomputed alone, {ex.op_type} is right: {cause.reason}",
                                         *upstream.evidence(found), *cause.evidence])


def _fills_only(ex: OpExecution, bad_inputs: Sequence[TensorEvent], access, kn: OpKnowledge) -> bool:
    """An op whose bad inputs hold -inf only (a mask's fill), meant to absorb it (Softmax) or making NaN of it
    (-inf - (-inf) in a softmax written out): what it made from them is recomputed (the -inf is the program's fill,
    not an earlier fault)."""
    stats = [access.stats(e) for e in bad_inputs]
    if not all(st is not None and st.neginf > 0 and not st.nan and not st.posinf for st in stats):
        return False
    if ex.op_type in kn.absorbers:
        return True
    made = [access.stats(e) for e in ex.outputs if access.bad(e)]
    return any(st is not None and st.nan for st in made)


def reproduce(ex: OpExecution, access, precisions: Sequence[str], *, node: Optional[GraphNode] = None, step=None,
              out_slot: int = 0, out_shape=(), out_dtypes: Sequence[Optional[str]] = (), mindspore: bool = True):
    """The op recomputed from its dumped inputs: ({precision: outputs}, what computed them ('numpy' or
    'mindspore'), the inputs used). Raises RecomputeError saying why it cannot be."""
    why = safety.takes_code(ex.op_type, node.attrs_text if node is not None else "")
    if why:
        raise RecomputeError(safety.refusal(why))
    gathered = _gather(ex, access, node, step)
    reason = safety.over_budget(ex.op_type, sum(int(t.size) for t in gathered.tensors),
                                int(np.prod(out_shape, dtype=np.int64)), len(precisions), MAX_ELEMENTS)
    if reason:
        raise RecomputeError(reason)
    results, by = _run(gathered, list(precisions), list(out_dtypes), node, mindspore, out_slot, out_shape)
    return results, by, gathered


# ---- what to recompute -----------------------------------------------------------------------------------------

def _precisions(declared: Optional[str]) -> List[str]:
    return ([declared] if declared in LOW_PRECISION else []) + ["float32", "float64"]


def _array(access, event: Optional[TensorEvent], what: str) -> np.ndarray:
    if event is None:
        raise RecomputeError(f"{what} was not dumped")
    if event.shape is not None and int(np.prod(event.shape, dtype=np.int64)) > MAX_ELEMENTS:
        raise RecomputeError(f"{what} holds {int(np.prod(event.shape, dtype=np.int64)):,} elements, more than the "
                             f"{MAX_ELEMENTS:,} recomputed in memory")
    array = access.array(event)
    if array is None:
        raise RecomputeError(_unread_why(event, what))
    return np.asarray(array)


def _unread_why(event: TensorEvent, what: str) -> str:
    if event.stats is not None and event.loader is None and not event.source.endswith(".npy"):
        return "the dump holds statistics only (no tensor to recompute from)"
    return f"{what} could not be read ({event.note or event.source})"


def _framework_backward(op_type: str) -> Optional[dict]:
    if not op_type.endswith(".backward"):
        return None
    return (load_yaml("op_knowledge.yaml").get("framework_backward") or {}).get(op_type[: -len(".backward")])


def _gather(ex: OpExecution, access, node: Optional[GraphNode], step) -> _Inputs:
    spec = _framework_backward(ex.op_type)
    if spec is not None:
        return _gather_framework_backward(ex, access, node, step, spec)
    if ex.op_type.endswith((".backward", ".forward")) or (node is not None and node.wraps_scope):
        raise RecomputeError(f"{ex.op_type} is a framework-level entry with no single-op reference")
    by_slot = {e.slot: e for e in ex.inputs}
    signature = recompute.signatures().get(ex.op_type)
    if signature is None or ex.op_type not in recompute.KERNELS:
        # MindSpore may know it: hand it every dumped input and literal, by slot
        inputs = {slot: _array(access, e, f"input {slot}") for slot, e in by_slot.items()}
        return _Inputs([inputs[s] for s in sorted(inputs)], {}, inputs, kernel=ex.op_type)
    count = len(by_slot) if signature.tensors is None else signature.tensors
    if not by_slot and count:
        raise RecomputeError("its inputs were not dumped")
    tensors = []
    for slot in range(count):
        event = by_slot.get(slot)
        if event is None and node is not None and slot in node.literals:
            tensors.append(_literal_tensor(node, slot))
            continue
        tensors.append(_array(access, event, f"input {slot}"))
    args: Dict[str, object] = {}
    defaulted: List[str] = []
    attrs = None
    for name, (slot, default) in signature.args.items():
        if slot is not None and slot in by_slot:
            value = access.array(by_slot[slot])
            if value is not None:
                args[name] = np.asarray(value).tolist()
                continue
        if slot is not None and node is not None and slot in node.literals:
            args[name] = _literal(node, slot)
            continue
        if node is not None:
            if attrs is None:
                from ..readers.ir_graph import attributes
                attrs = attributes(node)
            if name in attrs:
                args[name] = attrs[name]
                continue
        args[name] = default
        defaulted.append(name)
    unknown_flags = [name for name in _TRANSPOSES if name in defaulted and ex.op_type in ("MatMul", "BatchMatMul")]
    if unknown_flags:
        raise RecomputeError(f"the {ex.op_type}'s {' and '.join(unknown_flags)} flag"
                             f"{'s are' if len(unknown_flags) > 1 else ' is'} in neither the dump nor a saved graph, "
                             "and flags are never guessed from shapes (square operands fit several)")
    return _Inputs(tensors, args, dict(enumerate(tensors)), kernel=ex.op_type, defaulted=defaulted)


def _shapings(tensors: List[np.ndarray], node: Optional[GraphNode], kernel: str, out_shape):
    """The inputs as dumped, then other readings of their shapes: as the saved graph infers them, and (pointwise
    ops) as the output's shape. A dump may hold an input before a Reshape the backend dropped as a no-op: same
    values, another shape."""
    yield tensors
    if node is not None and node.types_text:
        from ..readers.ir_graph import shapes
        wanted, _outputs = shapes(node)
        reshaped = list(tensors)
        for slot, tensor in enumerate(tensors):
            shape = wanted[slot] if slot < len(wanted) else None
            if shape is not None and tensor.shape != shape and tensor.size == int(np.prod(shape, dtype=np.int64)):
                reshaped[slot] = tensor.reshape(shape)
        if any(a is not b for a, b in zip(reshaped, tensors, strict=True)):
            yield reshaped
    if kernel in recompute.POINTWISE:
        size = int(np.prod(out_shape, dtype=np.int64))
        reshaped = [t.reshape(out_shape) if t.shape != tuple(out_shape) and t.size == size else t for t in tensors]
        if any(a is not b for a, b in zip(reshaped, tensors, strict=True)):
            yield reshaped


_TRANSPOSES = ("transpose_a", "transpose_b")


def _literal(node: GraphNode, slot: int):
    from ..readers.ir_graph import literal
    try:
        return literal(node.literals[slot])
    except ValueError as exc:
        raise RecomputeError(f"argument {slot} of the saved graph is not understood ({exc})") from None


def _literal_tensor(node: GraphNode, slot: int) -> np.ndarray:
    """A tensor input the saved graph gives as a literal (a scalar, a tuple of numbers)."""
    value = _literal(node, slot)
    try:
        return np.asarray(value, dtype=np.float32)
    except (ValueError, TypeError, OverflowError) as exc:     # "NCHW", a ragged tuple where a number goes
        raise RecomputeError(f"input {slot} is given by the saved graph as {node.literals[slot][:40]!r}, not a "
                             f"number ({exc})") from None


def _gather_framework_backward(ex, access, node, step, spec: dict) -> _Inputs:
    forward = None
    if any(ref.startswith("forward.") for ref in spec["inputs"]):
        forward_name = node.forward_name if node is not None else None
        if forward_name is None or step is None:
            raise RecomputeError("the forward entry of this backward entry is not known")
        entry = forward_name.rsplit("/", 1)[-1]
        forward = next((e for e in step() if e.op_name == entry), None)
        if forward is None:
            raise RecomputeError(f"the forward entry {entry} was not dumped")
    tensors = []
    for ref in spec["inputs"]:
        parts = ref.split(".")
        owner = forward if parts[0] == "forward" and forward is not None else ex
        io, slot = parts[-2], int(parts[-1])
        events = owner.outputs if io == "output" else owner.inputs
        tensors.append(_array(access, next((e for e in events if e.slot == slot), None), ref))
    return _Inputs(tensors, {}, dict(enumerate(tensors)), kernel=spec["kernel"])


def _run(gathered: _Inputs, precisions: List[str], out_dtypes, node, mindspore: bool, out_slot: int, out_shape):
    """{precision: outputs} and what computed them. The first reading of the inputs' shapes whose result has the
    dumped output's size is taken."""
    if gathered.kernel in recompute.KERNELS and gathered.kernel in recompute.signatures():
        size = int(np.prod(out_shape, dtype=np.int64))
        failure: Optional[RecomputeError] = None
        held = sum(int(t.size) for t in gathered.tensors)
        for tensors in _shapings(gathered.tensors, node, gathered.kernel, out_shape):
            args = gathered.args
            # the shape this reading computes, not the dumped output's, is what memory holds
            produced = safety.produced_elements(gathered.kernel, [t.shape for t in tensors], args, pointwise=True)
            reason = safety.over_budget(gathered.kernel, held, max(produced or 0, size), len(precisions),
                                        MAX_ELEMENTS)
            if reason:
                failure = failure or RecomputeError(reason)
                continue
            try:
                results = {p: recompute.run(gathered.kernel, tensors, args, p, out_dtypes)
                           for p in precisions}
            except RecomputeError as exc:
                failure = failure or exc
                continue
            first = results[precisions[0]]
            if gathered.kernel in recompute.UPDATES or (out_slot < len(first) and first[out_slot].size == size):
                gathered.by_slot = dict(enumerate(tensors))
                return results, "numpy"
            failure = failure or RecomputeError(f"the recompute of {gathered.kernel} gives shape "
                                                f"{first[out_slot].shape if out_slot < len(first) else None}, the "
                                                f"dump {tuple(out_shape)}")
        raise failure or RecomputeError(f"no reading of the inputs' shapes fits {gathered.kernel}")
    if not mindspore:
        raise RecomputeError(f"no reference kernel for {gathered.kernel}")
    if importlib.util.find_spec("mindspore") is None:
        raise RecomputeError(f"no reference kernel for {gathered.kernel}, and MindSpore, which could recompute it, "
                             "is not installed")
    from .mindspore_kernel import run_in_subprocess
    return run_in_subprocess(gathered.kernel, gathered.by_slot, node, precisions, out_dtypes,
                             out_shapes=[tuple(out_shape)]), "mindspore"


# ---- deciding ---------------------------------------------------------------------------------------------------

def _summary(precision: str, values: np.ndarray, dumped: np.ndarray, declared: Optional[str],
             comparable: bool) -> Recomputed:
    finite = np.isfinite(values)
    max_abs = float(np.max(np.abs(values[finite]))) if finite.any() else None
    agrees, mismatches = None, 0
    if comparable:
        try:
            differ = recompute.disagreement(values, dumped, precision, declared)
            mismatches = int(np.count_nonzero(differ))
            agrees = mismatches == 0
        except RecomputeError:
            agrees = None
    return Recomputed(dtype=precision, finite=bool(finite.all()), max_abs=max_abs,
                      nonfinite=int(values.size - np.count_nonzero(finite)), agrees=agrees, mismatches=mismatches)


def _decide(ex, out, dumped, mask, outputs: Dict[str, np.ndarray], gathered: _Inputs, by: str, node, graph, step,
            kn: OpKnowledge, access) -> Cause:
    declared = out.dtype
    update = gathered.kernel in recompute.UPDATES
    low = declared if declared in LOW_PRECISION else None
    home = low or "float32"
    shaped = {}
    for p, values in outputs.items():
        values = np.asarray(values)
        if not update and values.shape != dumped.shape:
            if values.size != dumped.size:
                return _unknown(f"the recompute gives shape {values.shape}, the dump {dumped.shape}")
            values = values.reshape(dumped.shape)
        shaped[p] = values
    summaries = [_summary(p, v, dumped, declared, comparable=not update) for p, v in shaped.items()]
    if update:
        return _decide_update(ex, summaries, shaped, declared, by, dumped, mask)
    limit = dtype_max(declared) or Precision(home).limit
    home_bad = bad_mask(shaped[home], home)[mask] | (np.abs(shaped[home][mask]) > limit)
    wide32 = shaped["float32"][mask]
    wide64 = shaped["float64"][mask]
    cause = Cause(cause=CAUSE_UNKNOWN, reason="", by=by, output_slot=out.slot, recompute=summaries,
                  evidence=list(gathered.notes))
    cause.samples = _samples(dumped, mask, shaped)
    reproduced = bool(home_bad.all())
    if not home_bad.any():
        edge = float(np.max(np.abs(shaped[home][mask]))) if mask.any() else 0.0
        if low is not None and edge > EDGE * limit:
            cause.cause = CAUSE_PRECISION
            cause.reason = (f"recomputed in {low}, the bad values come out at {edge:.6g}, near its max {limit:.6g}: "
                            f"a kernel that orders its arithmetic differently overflows there; float32 holds them")
        else:
            cause.cause = CAUSE_DEVICE
            what = _bad_words(dumped, mask, declared)
            cause.reason = (f"recomputed from its dumped inputs, {_op(ex)} gives finite values where the dump holds "
                            f"{what}: the device made a value its inputs do not explain")
        _place(cause, dumped, mask, shaped["float64"], limit, reproduced=False)
    else:
        if not reproduced:
            cause.evidence.append(f"{int((~home_bad).sum())} of {int(mask.sum())} bad values are not reproduced by "
                                  f"the recompute in {home}: the device may also have made some of them")
        _classify_reproduced(cause, ex, out, dumped, mask, shaped, low, limit, gathered, node, graph, step, kn,
                             access, wide32, wide64)
        _place(cause, dumped, mask, shaped["float64"], limit, reproduced=True)
    home_summary = next(s for s in summaries if s.dtype == home)
    if home_summary.agrees is False and cause.cause != CAUSE_DEVICE:
        finite_off = home_summary.mismatches - int((~home_bad).sum()) if not reproduced else home_summary.mismatches
        if finite_off > 0:
            cause.evidence.append(f"{finite_off} other value(s) differ from the recompute in {home} beyond its "
                                  "tolerance")
    cause.advice = cause.advice or ADVICE[cause.cause]
    return cause


def _classify_reproduced(cause: Cause, ex, out, dumped, mask, shaped, low, limit, gathered: _Inputs, node, graph,
                         step, kn: OpKnowledge, access, wide32, wide64) -> None:
    finite32 = bool(np.all(np.isfinite(wide32)))
    if low is not None and finite32:
        cause.cause = CAUSE_PRECISION
        cause.reason = (f"recomputed from its dumped inputs, {_op(ex)} overflows {low} as the dump does "
                        f"({_bad_words(shaped[low], mask, low)}), and is finite in float32 (up to "
                        f"{float(np.max(np.abs(wide32))):.6g})")
        return
    division = kn.division.get(gathered.kernel)
    if division is not None and division.get("denominator") in gathered.by_slot:
        den_slot = int(division["denominator"])
        den = _broadcast(gathered.by_slot[den_slot], dumped.shape)
        if den is not None and np.any(den[mask] == 0):
            num_slot = division.get("numerator")
            num = _broadcast(gathered.by_slot[num_slot], dumped.shape) if num_slot in gathered.by_slot else None
            form = division_form(num, den, mask)
            zero_over_zero = form == "0/0"
            count = _token_count(ex, den_slot, den, node, graph, step, kn, access)
            placement = where.place(mask & (den == 0))
            weight = _summed_weight(node, den_slot, graph)
            if count:
                cause.cause = CAUSE_DATA
                cause.reason = f"{form}: the denominator (input {den_slot}) is 0 and {count}"
            elif weight:
                cause.cause = CAUSE_DOMAIN
                cause.reason = (f"{form} in every dtype: the denominator (input {den_slot}) is the sum of the weight "
                                f"{weight}, 0 at {placement.text}: a weight, not a count of tokens")
                cause.advice = (f"The weight {weight} sums to 0 (initialised to zeros, or trained there): initialise "
                                "it away from 0, or divide by its sum plus a small epsilon. No batch and no dtype "
                                "fixes it.")
                cause.basis = "weight_sum"
            else:
                cause.cause = CAUSE_DOMAIN
                cause.reason = (f"{form} in every dtype: the denominator (input {den_slot}) is 0 at "
                                f"{placement.text}" + (", and so is the numerator" if zero_over_zero else ""))
            return
    if 0 in gathered.by_slot:
        # reached with -inf inputs only when they are a mask's fill (_fills_only)
        rows = _negative_infinity_rows(gathered.by_slot[0], dumped.shape, mask)
        if rows is not None:
            made = "exp(-inf - (-inf))" if gathered.kernel in kn.absorbers else "-inf - (-inf)"
            cause.cause = CAUSE_DOMAIN
            cause.reason = (f"{_op(ex)} of a row that is -inf everywhere ({where.place(rows).text}): "
                            f"{made} is NaN in every dtype; the row has nothing to attend to")
            cause.advice = ("A row with nothing to attend to (every key masked, e.g. left padding under a causal "
                            "mask): give it a finite fill (the dtype's lowest value instead of -inf) or drop the row.")
            cause.basis = "masked_row"
            return
    domain = kn.domain.get(gathered.kernel)
    if domain is not None and int(domain.get("slot", 0)) in gathered.by_slot:
        slot = int(domain.get("slot", 0))
        arg = _broadcast(gathered.by_slot[slot], dumped.shape)
        outside = _outside(arg, str(domain.get("needs", ""))) if arg is not None else None
        if arg is not None and outside is not None and np.any(outside & mask):
            hit = outside & mask
            cause.cause = CAUSE_DOMAIN
            cause.reason = (f"{_op(ex)} of a value outside its domain ({domain.get('needs')}), bad in every dtype: "
                            f"input {slot} is {_values_at(arg, hit)}")
            return
    if np.all(np.isfinite(wide64)) and not finite32:
        cause.cause = CAUSE_DOMAIN
        cause.reason = (f"beyond float32's range: recomputed in float64, {_op(ex)} reaches "
                        f"{float(np.max(np.abs(wide64))):.4g} (float32 max {Precision('float32').limit:.4g}); no "
                        "training dtype holds it")
        return
    nan = bool(np.any(np.isnan(wide64)))
    cause.cause = CAUSE_DOMAIN
    cause.reason = (f"{'NaN' if nan else 'inf'} in every dtype from finite inputs" +
                    (" (inf - inf or 0 * inf inside the op)" if nan else ""))


def _decide_update(ex, summaries: List[Recomputed], shaped, declared, by, dumped, mask) -> Cause:
    by_dtype = {s.dtype: s for s in summaries}
    cause = Cause(cause=CAUSE_UNKNOWN, reason="", by=by, output_slot=0, recompute=summaries)
    low = declared if declared in LOW_PRECISION else None
    if not by_dtype["float32"].finite:
        cause.cause = CAUSE_DOMAIN
        wide = by_dtype["float64"]
        cause.reason = (f"the update {ex.op_type} adds is not finite in float32" +
                        (f" (float64: max |x| {wide.max_abs:.4g}): beyond float32's range, no training dtype holds "
                         "it" if wide.finite and wide.max_abs is not None else " nor in float64"))
    elif low is not None and not by_dtype[low].finite:
        cause.cause = CAUSE_PRECISION
        cause.reason = f"the update {ex.op_type} adds overflows {low} and is finite in float32"
    else:
        cause.reason = (f"the update {ex.op_type} adds recomputes finite, but the weights it wrote over were not "
                        "dumped, so whether the result should be finite cannot be told")
    cause.advice = ADVICE[cause.cause]
    _place(cause, dumped, mask, None, None, None)
    return cause


def _token_count(ex, den_slot: int, den: np.ndarray, node, graph, step, kn: OpKnowledge, access) -> str:
    """Why the zero denominator is a token/mask count ('' when it is not known to be one): its producer is a
    count reduction (ReduceSum ...) of a 0/1 mask, read from the step where it was dumped."""
    if node is None or graph is None or den_slot >= len(node.inputs):
        return ""
    producer = graph.by_full.get(node.inputs[den_slot])
    counts = set(load_yaml("op_knowledge.yaml").get("count_reductions") or [])
    if producer is None or producer.op_type not in counts:
        return ""
    if not np.all(den == np.round(den)):
        return ""
    if producer.inputs and _is_weight(producer.inputs[0], graph):
        return ""                         # it sums a weight: a count of tokens is never a trained parameter
    code = f" ({producer.source_code})" if producer.source_code else ""
    mask_values = None
    if step is not None:
        run = next((e for e in step() if graph.find(e.op_name) is producer), None)
        source = next((e for e in run.inputs if e.slot == 0), None) if run is not None else None
        if source is not None:
            mask_values = access.array(source)
    if mask_values is None:
        return f"it is {producer.op_type} {producer.full_name}{code}, a count (the counted mask was not dumped)"
    mask_values = np.asarray(mask_values)
    if not np.all(np.isin(mask_values, (0, 1))):
        return ""
    return f"it counts a 0/1 mask ({producer.op_type}{code}) that {_empty_rows(mask_values)}: no token to learn from"


def _summed_weight(node, den_slot: int, graph) -> str:
    """The weight's name when the denominator is a count reduction (ReduceSum ...) of a weight ('' otherwise)."""
    if node is None or graph is None or den_slot >= len(node.inputs):
        return ""
    producer = graph.by_full.get(node.inputs[den_slot])
    counts = set(load_yaml("op_knowledge.yaml").get("count_reductions") or [])
    if producer is None or producer.op_type not in counts or not producer.inputs:
        return ""
    name = producer.inputs[0]
    for _ in range(4):
        if name.startswith("param:"):
            return name[len("param:"):] if _is_weight(name, graph) else ""
        hop = graph.by_full.get(name)
        if hop is None or hop.op_type not in _HANDS_ON or not hop.inputs:
            return ""
        name = hop.inputs[0]
    return ""


def _negative_infinity_rows(values: np.ndarray, shape, mask: np.ndarray) -> Optional[np.ndarray]:
    """The bad positions that lie in rows (last axis) that are -inf everywhere (None: none)."""
    values = np.asarray(values)
    if values.shape != tuple(shape) or values.ndim == 0 or values.dtype.kind != "f":
        return None
    rows = np.broadcast_to(np.all(np.isneginf(values), axis=-1, keepdims=True), values.shape) & mask
    return rows if rows.any() else None


# Ops that hand a value on unchanged (a parameter reaches its readers through Load)
_HANDS_ON = frozenset({"Load", "Depend", "Cast", "Reshape", "ExpandDims", "Squeeze", "Flatten", "Identity"})


def _is_weight(full_name: str, graph, hops: int = 4) -> bool:
    """Whether a value is a parameter of the graph that is not a data input (a weight), through ops that hand it
    on unchanged."""
    for _ in range(hops):
        if full_name.startswith("param:"):
            return full_name[len("param:"):] not in getattr(graph, "data_inputs", ())
        node = graph.by_full.get(full_name)
        if node is None or node.op_type not in _HANDS_ON or not node.inputs:
            return False
        full_name = node.inputs[0]
    return False


def _empty_rows(mask: np.ndarray) -> str:
    """'is 0 in all 8 positions (rows 0-1)', 'is 0 in row 1 (4 of 8 positions)'."""
    zero = mask == 0
    total, count = int(zero.size), int(zero.sum())
    if mask.ndim < 2:
        return f"is 0 in {count} of {total} positions" if count < total else f"is 0 in all {total} positions"
    rows = zero.reshape(zero.shape[0], -1).all(axis=1)
    empty = np.flatnonzero(rows)
    label = f"row{'s' if len(empty) != 1 else ''} {where.spans(empty.tolist())}" if len(empty) else "no whole row"
    if count == total:
        return f"is 0 in all {total} positions (rows 0-{zero.shape[0] - 1})"
    return f"is 0 in {count} of {total} positions, empty in {label}"


def _parameter(ex: OpExecution, graph, access) -> Cause:
    name = ex.op_name
    if graph is not None and name in getattr(graph, "data_inputs", ()):
        return _data_input(name, next((e for e in ex.outputs if access.bad(e)), None), access)
    return _unknown(f"{name} was already bad when this dump starts: nothing in it to recompute the value from")


def _made_before(ex: OpExecution, event: TensorEvent, node, graph, access) -> Cause:
    """The op's input was already bad (no dumped op made the value): the batch itself when that input is a graph
    input, else an op, step or rank the dump does not hold."""
    producer = node.inputs[event.slot] if node is not None and event.slot < len(node.inputs) else None
    if producer and producer.startswith("param:") and graph is not None and \
            producer[len("param:"):] in getattr(graph, "data_inputs", ()):
        return _data_input(producer[len("param:"):], event, access)
    return _unknown(f"its input {event.slot} was already bad: the op that made the value"
                    + (f" ({producer})" if producer and producer != "const" else "") + " is not in the dump")


def _changed_between_steps(ex: OpExecution, bad_inputs: Sequence[TensorEvent], node, graph, step,
                           stored_before: Optional[between.StoredBefore], access, kn: OpKnowledge) -> Optional[Cause]:
    """A bad input read from a weight that the dump holds finite there after the step before, and that no kernel
    of this step wrote before the read: device (msoverflow/cause/between.py). None when that is not shown."""
    if stored_before is None or step is None or graph is None:
        return None
    for event in bad_inputs:
        name = between.parameter_read(node, graph, event.slot, kn)
        if name is None or between.written_before(name, ex, graph, step(), kn):
            continue
        found = between.compare(name, event, stored_before, access)
        if found is None:
            continue
        stored_at = _values_at(found.stored, found.bad)
        cause = Cause(cause=CAUSE_DEVICE, advice=ADVICE[CAUSE_DEVICE], basis=BASIS_BETWEEN_STEPS, reason=(
            f"input {event.slot}, the weight {name} as {_op(ex)} read it in step {ex.step}, holds "
            f"{_bad_words(found.read, found.bad, event.dtype)} where the dump of that weight after step "
            f"{ex.step - 1} holds {stored_at}: no op of step {ex.step} wrote it before this read, so it changed in "
            "memory between the steps (a device fault, or host code that set it)"))
        cause.evidence.append(f"{int(found.changed.sum())} of {found.changed.size} values of {name} differ from "
                              f"its dump after step {ex.step - 1}")
        placement = where.describe(found.read, found.changed, reference=found.stored, reproduced=False,
                                   reference_word="the stored")
        cause.where, cause.axes = placement.text, placement.axes
        cause.pattern, cause.pattern_text = placement.pattern, placement.pattern_text
        return cause
    return None


def _data_input(name: str, event: Optional[TensorEvent], access) -> Cause:
    cause = Cause(cause=CAUSE_DATA, reason=f"the data batch itself: graph input {name} holds the bad values before "
                  "any op ran", advice=ADVICE[CAUSE_DATA], evidence=[f"{name} is an input of the graph, not a weight"])
    values = access.array(event) if event is not None else None
    if event is not None and values is not None:
        values = np.asarray(values)
        mask = bad_mask(values, event.dtype)
        placement = where.place(mask)          # the data explain the values: no device pattern is looked for
        cause.reason += f" ({_bad_words(values, mask, event.dtype)}; {placement.text})"
        cause.where, cause.axes = placement.text, placement.axes
    return cause


def _unknown(why: str) -> Cause:
    return Cause(cause=CAUSE_UNKNOWN, reason=f"not recomputed: {why}")


# ---- words -------------------------------------------------------------------------------------------------

def _op(ex: OpExecution) -> str:
    return ex.op_type


def _bad_words(values: np.ndarray, mask: np.ndarray, dtype: Optional[str]) -> str:
    v = np.asarray(values)[mask]
    parts = []
    for label, hit in (("NaN", np.isnan(v)), ("+inf", np.isposinf(v)), ("-inf", np.isneginf(v))):
        if hit.any():
            parts.append(f"{int(hit.sum())} {label}")
    beyond = np.isfinite(v)
    if beyond.any():
        parts.append(f"{int(beyond.sum())} beyond the {dtype} range")
    return ", ".join(parts) or "bad values"


def _values_at(values: np.ndarray, hit: np.ndarray) -> str:
    """'0 at row 0, column 0 and -1 at row 1, column 2', or a range and where they sit when there are many."""
    values = np.asarray(values, dtype=np.float64)
    index = np.argwhere(hit)
    if 0 < len(index) <= where.SHOWN:
        names = where.axis_names(values.ndim)
        parts = [f"{values[tuple(i)]:.6g} at {where.position_text([int(k) for k in i], names)}" for i in index]
        return " and ".join(parts)
    chosen = values[hit]
    return f"{chosen.min():.6g} .. {chosen.max():.6g} at {where.place(hit).text}"


def _broadcast(values: np.ndarray, shape) -> Optional[np.ndarray]:
    values = np.asarray(values)
    try:
        return np.broadcast_to(values, shape)
    except ValueError:
        if values.size == int(np.prod(shape, dtype=np.int64)):
            return values.reshape(shape)
        return None


def _outside(arg: np.ndarray, needs: str) -> Optional[np.ndarray]:
    return outside(needs, arg)


def _samples(dumped: np.ndarray, mask: np.ndarray, shaped: Dict[str, np.ndarray]) -> List[Sample]:
    found = []
    for index in np.argwhere(mask.reshape(dumped.shape) if dumped.ndim else mask.reshape(1))[:SAMPLES]:
        key = tuple(int(i) for i in index)
        at = key if dumped.ndim else ()
        found.append(Sample(index=key, dumped=float(np.asarray(dumped)[at]),
                            recomputed={p: float(np.asarray(v)[at]) for p, v in shaped.items()}))
    return found


def _place(cause: Cause, dumped: np.ndarray, mask: np.ndarray, reference, limit, reproduced) -> None:
    placement = where.describe(dumped, mask, reference=reference, limit=limit, reproduced=reproduced)
    cause.where, cause.axes = placement.text, placement.axes
    cause.pattern, cause.pattern_text = placement.pattern, placement.pattern_text
