"""Classify one op execution: origin (created the bad value), propagator, or clean; and the kind of fault.

An origin has all float inputs finite and in range, and some output that is not. The kind comes from what the
inputs were: a zero denominator (0/0 or x/0), an input outside the op's domain (sqrt/log of a negative),
a cast out of range, saturation (values pinned at the dtype max), or plain overflow.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Protocol

import numpy as np

from ..dtypes import dtype_max
from ..model import (
    CLEAN,
    CROSS_RANK,
    FLAGGED,
    INVALID,
    NONFINITE_INPUT,
    ORIGIN,
    OVERFLOW,
    PROPAGATOR,
    SATURATION,
    SUSPECT,
    OpExecution,
    TensorEvent,
    TensorStats,
)
from .knowledge import OpKnowledge
from .numerics import outside_stats, zero_over_zero


class TensorAccess(Protocol):
    def bad(self, event: TensorEvent) -> Optional[bool]: ...        # None: unreadable
    def known_bad(self, event: TensorEvent) -> Optional[bool]: ...  # from the dump's statistics, no read
    def pinned(self, event: TensorEvent) -> bool: ...
    def stats(self, event: TensorEvent) -> Optional[TensorStats]: ...
    def array(self, event: TensorEvent) -> Optional[np.ndarray]: ...


@dataclass
class Verdict:
    role: str
    kind: str = ""
    detail: str = ""
    advice: str = "overflow"                  # key into the knowledge's recommendations
    values: Dict[str, str] = field(default_factory=dict)   # for the recommendation template
    evidence: List[str] = field(default_factory=list)
    via_producer: bool = False                # inputs-only dump: the bad value came from this input's producer
    bad_input: Optional[TensorEvent] = None


def _floats(events: List[TensorEvent]) -> List[TensorEvent]:
    # Unknown dtype (old names, unread header) counts as float until the data says otherwise.
    return [e for e in events if e.dtype is None or e.is_float]


def _fmt(x: Optional[float]) -> str:
    if x is None:
        return "n/a"
    return f"{x:.6g}" if abs(x) < 1e6 else f"{x:.4g}"


def judge(ex: OpExecution, access: TensorAccess, kn: OpKnowledge, earlier_bad: bool,
          flags_answer: bool = False) -> Verdict:
    """flags_answer: the hardware's overflow records cover this step, so only flagged ops (and collectives, which
    tell whether a bad value came from another rank) are worth a tensor read."""
    if flags_answer:
        return _judge_by_flags(ex, access, kn)
    outs = _floats(ex.outputs)
    bad_outs = [e for e in outs if access.bad(e)]

    if ex.is_parameter:
        if not bad_outs:
            return Verdict(CLEAN)
        if earlier_bad:
            return Verdict(PROPAGATOR, NONFINITE_INPUT, f"parameter {ex.op_name} holds non-finite values after the step")
        return Verdict(ORIGIN, NONFINITE_INPUT, f"{ex.op_name} is non-finite in this dump with no earlier bad op",
                       advice="nonfinite_input")

    if not ex.outputs:
        return _judge_inputs_only(ex, access, kn, earlier_bad)

    if not bad_outs:
        if ex.flags:
            pinned = [e for e in outs if access.pinned(e)]
            kind, advice = (SATURATION, "saturation") if pinned else (FLAGGED, "flagged")
            words = ", ".join(sorted({w for r in ex.flags for w in r.status_words})) or "overflow"
            return Verdict(ORIGIN, kind, f"Opdebug flagged {words} ({ex.flags[0].unit}) while the tensors look finite",
                           advice=advice)
        pinned = [e for e in outs if access.pinned(e)]
        if pinned and kn.is_collective(ex.op_type):
            return Verdict(PROPAGATOR, CROSS_RANK, f"{ex.op_type} delivered values pinned at the dtype max from "
                           "another rank", advice="cross_rank")
        if pinned and not any(access.pinned(i) for i in _floats(ex.inputs)):
            limit = dtype_max(pinned[0].dtype)
            return Verdict(ORIGIN, SATURATION, f"output {pinned[0].slot} pinned at +-{_fmt(limit)} ({pinned[0].dtype} max): "
                           "saturated overflow", advice="saturation")
        if not earlier_bad and ex.op_type in kn.outputs_not_written:
            # an op whose outputs are not what it wrote (MindSpore CPU's Adam returns finite outputs and writes the
            # weights in place): its written inputs hold what it made
            return _judge_written(ex, access, kn)
        return Verdict(CLEAN)

    ins = _floats(ex.inputs)
    bad_ins = [e for e in ins if access.bad(e)]
    written = _written_by_the_op(ex, bad_ins, kn, earlier_bad)
    if written:
        verdict = _fault_kind(ex, bad_outs, access, kn)
        if verdict.advice in ("overflow", "invalid") and kn.updates_weights(ex.op_type):
            verdict.advice = "optimizer_update"
        verdict.evidence.append(written)
        return verdict
    if ex.op_type in kn.absorbers:
        # -inf is what a mask fills in, and this op is meant to absorb it: the NaN is its own (Softmax of a row that
        # is -inf everywhere: exp(-inf - (-inf)) -- a row with nothing to attend to)
        made = nan_from_negative_infinity(ex, access)
        if made is not None:
            return made
    if bad_ins:
        return Verdict(PROPAGATOR, _nonfinite_kind(access, bad_outs), f"input {bad_ins[0].slot} already bad",
                       bad_input=bad_ins[0])
    if kn.is_collective(ex.op_type):
        return Verdict(PROPAGATOR, CROSS_RANK, f"{ex.op_type} delivered a bad value from another rank",
                       advice="cross_rank")
    if not ex.inputs and earlier_bad:
        return Verdict(PROPAGATOR, _nonfinite_kind(access, bad_outs), "inputs not dumped; an earlier op went bad")
    verdict = _fault_kind(ex, bad_outs, access, kn)
    if not ex.inputs:
        verdict.evidence.append("inputs were not dumped: this is the first bad tensor in time")
    return verdict


def _judge_by_flags(ex: OpExecution, access: TensorAccess, kn: OpKnowledge) -> Verdict:
    """Opdebug names the ops that overflowed. A flag says "this op overflowed", not "this op created the bad value":
    only its inputs decide. Unflagged ops are judged from the dump's statistics alone (no read); a flagged op's
    inputs are read when no statistics cover them (overflow-only dumps hold few files, so this stays cheap)."""
    if not ex.flags:
        known_in = [access.known_bad(e) for e in _floats(ex.inputs)]
        known_out = [access.known_bad(e) for e in _floats(ex.outputs)]
        if any(known_out):
            if kn.is_collective(ex.op_type) and not any(known_in):
                return Verdict(PROPAGATOR, CROSS_RANK, f"{ex.op_type} delivered a bad value from another rank",
                               advice="cross_rank")
            return Verdict(PROPAGATOR, _nonfinite_kind_known(ex, access), "not flagged by the hardware: propagated")
        return Verdict(CLEAN)
    words = ", ".join(sorted({w for r in ex.flags for w in r.status_words})) or "overflow"
    record = ex.flags[0]
    flag = f"Opdebug flagged {words} ({record.unit}, task {record.task_id}, stream {record.stream_id})"
    unread: List[TensorEvent] = []
    for event in _floats(ex.inputs):
        state = access.known_bad(event)
        if state is None:
            state = access.bad(event)
        if state:
            kind = INVALID if (access.stats(event) or TensorStats(count=0)).nan else OVERFLOW
            return Verdict(PROPAGATOR, kind, f"flagged ({words}, {record.unit}) but input {event.slot} was already "
                           "bad", bad_input=event)
        if state is None:
            unread.append(event)
    if not ex.inputs or unread:
        why = ("its inputs were not dumped" if not ex.inputs else
               f"input {', '.join(str(e.slot) for e in unread)} could not be read")
        return Verdict(SUSPECT, FLAGGED, f"{flag}; {why}, so whether it created the bad value or received it "
                       "is not known", advice="flagged_undecided")
    # Every float input is finite and in range: the flag marks a real origin. Name the fault from the outputs.
    outs = _floats(ex.outputs)
    bad_outs = [e for e in outs if access.bad(e)]
    if bad_outs:
        verdict = _fault_kind(ex, bad_outs, access, kn)
        verdict.evidence.append(f"{flag}; every input finite and in range")
        return verdict
    pinned = [e for e in outs if access.pinned(e)]
    if pinned:
        return Verdict(ORIGIN, SATURATION, f"{flag}; output {pinned[0].slot} pinned at the {pinned[0].dtype} max "
                       "(saturation mode)", advice="saturation")
    return Verdict(ORIGIN, FLAGGED, f"{flag} while its inputs and outputs look finite"
                   + ("" if ex.outputs else " (outputs not dumped)"), advice="flagged")


def _nonfinite_kind_known(ex: OpExecution, access: TensorAccess) -> str:
    return INVALID if any(e.stats is not None and e.stats.nan for e in ex.outputs) else OVERFLOW


def _nonfinite_kind(access: TensorAccess, bad: List[TensorEvent]) -> str:
    stats = [access.stats(e) for e in bad]
    if any(s is not None and s.nan for s in stats):
        return INVALID
    return OVERFLOW


def _written_by_the_op(ex: OpExecution, bad_ins: List[TensorEvent], kn: OpKnowledge, earlier_bad: bool) -> str:
    """Why the op's only bad inputs are its own results: they are inputs it writes in place (a dump holds their
    values after it ran), and nothing earlier in the step was bad, so they were finite when it started (the forward
    pass read the weights). Empty when that does not hold."""
    written = kn.written_inputs(ex.op_type)
    if earlier_bad or not bad_ins or not written or any(e.slot not in written for e in bad_ins):
        return ""
    slots = ", ".join(str(e.slot) for e in bad_ins)
    return (f"input {slots} is written in place by {ex.op_type}: the dump holds its value after {ex.op_type} ran; "
            "nothing earlier in this step was bad, so it was finite before")


def nan_from_negative_infinity(ex: OpExecution, access: TensorAccess) -> Optional[Verdict]:
    """The op made NaN from inputs whose bad values are all -inf (a mask's fill): the NaN is its own, an origin
    (Softmax of a row that is -inf everywhere; -inf - (-inf) in a softmax written out). None otherwise."""
    bad_ins = [e for e in _floats(ex.inputs) if access.bad(e)]
    bad_outs = [e for e in _floats(ex.outputs) if access.bad(e)]
    if not bad_ins or not bad_outs or not _only_negative_infinity(bad_ins, access) \
            or _nonfinite_kind(access, bad_outs) != INVALID:
        return None
    return Verdict(ORIGIN, INVALID, f"NaN from input {bad_ins[0].slot}, whose bad values are all -inf (a row "
                   "that is -inf everywhere)", advice="invalid", bad_input=bad_ins[0])


def _only_negative_infinity(events: List[TensorEvent], access: TensorAccess) -> bool:
    stats = [access.stats(e) for e in events]
    return all(st is not None and st.neginf > 0 and not st.nan and not st.posinf and not st.over_range for st in stats)


def _judge_written(ex: OpExecution, access: TensorAccess, kn: OpKnowledge) -> Verdict:
    """An op with finite outputs that writes inputs in place, nothing earlier in the step bad: a written input that
    is bad was made by the op."""
    written = kn.written_inputs(ex.op_type)
    bad = [e for e in _floats(ex.inputs) if e.slot in written and access.bad(e)]
    if not bad:
        return Verdict(CLEAN)
    why = _written_by_the_op(ex, bad, kn, earlier_bad=False)
    return Verdict(ORIGIN, _nonfinite_kind(access, bad), f"{ex.op_type} wrote a non-finite value into input "
                   f"{bad[0].slot} (its outputs stay finite)", advice="optimizer_update"
                   if kn.updates_weights(ex.op_type) else "overflow", evidence=[why], bad_input=bad[0])


def _judge_inputs_only(ex: OpExecution, access: TensorAccess, kn: OpKnowledge, earlier_bad: bool) -> Verdict:
    bad_ins = [e for e in _floats(ex.inputs) if access.bad(e)]
    if not bad_ins:
        return Verdict(CLEAN)
    written = _written_by_the_op(ex, bad_ins, kn, earlier_bad)
    if written:
        kind = _nonfinite_kind(access, bad_ins)
        return Verdict(ORIGIN, kind, f"{ex.op_type} wrote a non-finite value into input {bad_ins[0].slot} from "
                       "finite inputs (inputs-only dump)", advice="optimizer_update" if kn.updates_weights(ex.op_type)
                       else "overflow", evidence=[written], bad_input=bad_ins[0])
    if earlier_bad:
        return Verdict(PROPAGATOR, _nonfinite_kind(access, bad_ins), f"input {bad_ins[0].slot} already bad",
                       bad_input=bad_ins[0])
    kind = _nonfinite_kind(access, bad_ins)
    return Verdict(ORIGIN, kind, f"first bad tensor is input {bad_ins[0].slot} of {ex.op_type} "
                   "(inputs-only dump): it was created by that input's producer", via_producer=True,
                   bad_input=bad_ins[0])


def _fault_kind(ex: OpExecution, bad_outs: List[TensorEvent], access: TensorAccess, kn: OpKnowledge) -> Verdict:
    out = bad_outs[0]
    st = access.stats(out) or TensorStats(count=0)
    by_slot = {e.slot: e for e in ex.inputs}
    division = kn.division.get(ex.op_type)
    domain = kn.domain.get(ex.op_type)

    if division is not None:
        den = by_slot.get(division.get("denominator"))
        num_slot = division.get("numerator")
        num = by_slot.get(num_slot) if num_slot is not None else None
        zero_den = _zero_positions(access, den)
        if zero_den and den is not None:      # (no zeros counted without a denominator)
            both = _zero_over_zero(access, num, den) if num is not None else 0
            if st.nan and both:
                return Verdict(ORIGIN, INVALID, f"0/0: denominator (input {den.slot}) is 0 at {zero_den} of "
                               f"{den_size(den, access)} positions, and the numerator is 0 there too",
                               advice="zero_over_zero", values={"denominator_slot": str(den.slot)},
                               evidence=[f"{both} positions are 0/0"])
            # x/0 is not a precision problem: no dtype holds it, so it is invalid, not an overflow.
            whole = zero_den == den_size(den, access)
            return Verdict(ORIGIN, INVALID, f"division by zero: denominator (input {den.slot}) is 0 at {zero_den} "
                           f"of {den_size(den, access)} positions", advice="zero_over_zero" if whole else
                           "division_by_zero", values={"denominator_slot": str(den.slot)})

    if domain is not None:
        arg = by_slot.get(domain.get("slot", 0))
        arg_stats = access.stats(arg) if arg is not None else None
        needs = str(domain.get("needs", ""))
        if arg_stats is not None:
            outside = _outside_domain(arg_stats, needs)
            if outside and arg is not None:       # (arg_stats implies arg)
                return Verdict(ORIGIN, INVALID, f"{ex.op_type} of {outside} (input {arg.slot} min {_fmt(arg_stats.min)})",
                               advice="domain", values={"needs": needs})

    if st.nan and not (st.posinf or st.neginf or st.over_range):
        return Verdict(ORIGIN, INVALID, f"NaN from finite inputs ({st.count_text('nan')} of {st.count} values)",
                       advice="invalid")

    limit = dtype_max(out.dtype)
    if ex.op_type == "Cast" and ex.inputs:
        src = ex.inputs[0]
        return Verdict(ORIGIN, OVERFLOW, f"{src.dtype or 'float'} -> {out.dtype} cast overflow "
                       f"(input max |x| {_fmt(_max_abs(access, src))} > {_fmt(limit)})", advice="overflow_cast",
                       values={"dtype": str(out.dtype)})
    if st.over_range:
        payload = f" (the file holds {out.payload_dtype} values)" if out.payload_dtype else ""
        detail = (f"{out.dtype} overflow: max |output {out.slot}| {_fmt(st.max_abs)} > {_fmt(limit)}, "
                  f"{st.count_text('over_range')} values out of range{payload}")
    else:
        detail = (f"overflow: output {out.slot} has {st.count_text('posinf')} +inf, {st.count_text('neginf')} -inf"
                  + (f", {st.count_text('nan')} NaN" if st.nan else "") + f" of {st.count} values")
    if division is not None:
        detail += _small_denominator(access, by_slot, division, limit)
    return Verdict(ORIGIN, OVERFLOW, detail, advice="overflow")


def _small_denominator(access: TensorAccess, by_slot: Dict[int, TensorEvent], division: dict,
                       limit: Optional[float]) -> str:
    """Why a division overflowed when its numerator fits the output's range: a denominator close to 0 (SqrtGrad's
    dy / (2 sqrt(x)) with a tiny sqrt). Its smallest |x| is the cause, so the detail states it; "" otherwise."""
    den_slot = division.get("denominator")
    den = by_slot.get(den_slot) if den_slot is not None else None
    num = by_slot.get(division["numerator"]) if division.get("numerator") is not None else None
    smallest = _min_abs(access, den)
    num_max = _max_abs(access, num) if num is not None else 1.0
    if den is None or smallest is None or num_max is None or not 0 < smallest < 1 or (limit and num_max > limit):
        return ""
    numerator = f"input {num.slot}" if num is not None else "1"
    return (f"; the denominator (input {den.slot}) goes down to |x| = {_fmt(smallest)} while the numerator "
            f"({numerator}) reaches only {_fmt(num_max)}")


def _min_abs(access: TensorAccess, event: Optional[TensorEvent]) -> Optional[float]:
    """The smallest |x| of a tensor: from its values when readable, else from min/max when they share a sign."""
    if event is None:
        return None
    values = access.array(event)
    if values is not None:
        finite = np.abs(np.asarray(values, dtype=np.float64))
        finite = finite[np.isfinite(finite)]
        return float(finite.min()) if finite.size else None
    st = access.stats(event)
    if st is None or st.min is None or st.max is None:
        return None
    return st.min if st.min >= 0 else -st.max if st.max <= 0 else None


def den_size(event: TensorEvent, access: TensorAccess) -> int:
    st = access.stats(event)
    return st.count if st else 0


def _max_abs(access: TensorAccess, event: TensorEvent) -> Optional[float]:
    st = access.stats(event)
    return st.max_abs if st else None


def _zero_positions(access: TensorAccess, event: Optional[TensorEvent]) -> int:
    if event is None:
        return 0
    st = access.stats(event)
    return int(st.zero or 0) if st else 0


def _zero_over_zero(access: TensorAccess, num: TensorEvent, den: TensorEvent) -> int:
    a, b = access.array(num), access.array(den)
    if a is None or b is None:
        return 0
    return zero_over_zero(a, b)


def _outside_domain(st: TensorStats, needs: str) -> str:
    return outside_stats(needs, st)
