"""The root cause of a blow-up, finite or not, from per-step statistics.

For the first event that is a blow-up (spike, divergence, non-finite value; a projected overflow when nothing
else happened), on its rank:
  - each float tensor's departure: the first step of the run of steps, ending at the event, over which its max |x|
    rose to at least LEFT_FACTOR times where it stood before the run (a value may dip by RISE_TOLERANCE inside the
    run); a tensor that did not rise so has not left its trend;
  - onset: the earliest departure; the first tensor: the one departing then (ties: what feeds the step first:
    inputs, optimizer state, weights, updates, outputs, loss);
  - class, from the evidence:
      data       an input of the step jumped at the onset step (one step, not a trend), or held a NaN/inf at the
                 step the first non-finite value came (the batch itself: nothing had blown up before it);
      optimizer  the optimizer's state left its trend before the weights and updates, or a weight's state fell
                 out of its range (read up to the step before the blow-up: a state read at a step already holds
                 that step's gradient) and then the weight or its update rose: the optimizer's own ratio grew the
                 steps (Adam's m / sqrt(v) when v forgets faster than m), not the gradient;
      dynamics   weights or updates grew over steps (a run of several steps);
      precision  a float16/bfloat16 tensor used most of its range with no growth before it, or the tensor
                 that went non-finite is low precision and was already near its limit;
      attention  the QK logits (a softmax's input shaped queries x keys, seen in PyNative mode) left their range
                 before any weight, update or optimizer state did;
When a non-finite value follows, the cause is joined to it in one sentence. When the onset comes right after steps
read for the loss alone (the sampling's gap, longer than MIN_HISTORY steps), the report says so: the tensor may
have left its range anywhere in the gap, and `--full-every` reads it.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Tuple

from .detect import DIVERGENCE, NONFINITE, PROJECTED, SPIKE, Event
from .series import KIND_ORDER, Store

LEFT_FACTOR = 3.0
MIN_HISTORY = 5             # steps a tensor's own range is read from before it can leave it
RISE = 1.2                  # a climb rises at least 20% a step
ONWARD_TOLERANCE = 1.5      # across a long gap, a climb's rate is its rate after the gap within this factor (a jump
                            # then a climb of 1.3x a step, read across 10 steps, is 1.8x faster across the gap)
MAX_STEPS = 64
LOW_PRECISION = ("float16", "bfloat16")
NEAR_LIMIT = 0.25              # a low-precision tensor using a quarter of its range is near its limit

FIXES = {
    "data": "inspect and drop the batch of the onset step (validate inputs in the data pipeline: range, NaN, "
            "scaling), or skip a step whose loss spikes",
    "dynamics": "lower the learning rate or lengthen the warm-up, and clip the gradients "
                "(ops.clip_by_global_norm before the optimizer)",
    "precision": "compute the op that nears its limit in float32 (msoverflow patch), or let a dynamic loss scale "
                 "back off",
    "optimizer": "raise the optimizer's eps (it bounds the step where the second moment is small), keep beta1 "
                 "below sqrt(beta2) (the second moment must not forget faster than the first), clip the updates, "
                 "or reset its state after the event",
    "attention": "bound the QK logits: normalise q and k (QK-norm) or soft-cap the logits, check the 1/sqrt(d) "
                 "scale, lower the learning rate of the q/k projections, and compute the logits and softmax in "
                 "float32",
}


@dataclass
class Departure:
    tensor: str
    kind: str
    op: str
    cell: str
    dtype: Optional[str]
    since: int
    before: float
    after: float
    growth: float                   # per step over the run
    nonfinite: int = 0              # NaN/inf values the tensor held at `since` (a batch that came in so)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class RootCause:
    rank: int
    event: Event
    onset: Optional[int]
    first: Optional[Departure]
    cause: str                      # data | attention | optimizer | dynamics | precision | unknown
    evidence: List[str] = field(default_factory=list)
    fix: str = ""
    summary: str = ""
    departures: List[Departure] = field(default_factory=list)
    upto: int = 0                   # the trends were read up to this step
    diverged: bool = False          # the loss rose step after step before it
    unread: Optional[Tuple[int, int]] = None     # (last full step, onset): nothing but the loss read in between

    def to_dict(self) -> dict:
        return {"rank": self.rank, "event": self.event.to_dict(), "onset_step": self.onset,
                "first_tensor": self.first.to_dict() if self.first else None, "cause": self.cause,
                "evidence": self.evidence, "fix": self.fix, "summary": self.summary,
                "departures": [d.to_dict() for d in self.departures[:8]],
                "unread_between": list(self.unread) if self.unread else None}


def departure(store: Store, key: str, step: int, falling: bool = False) -> Optional[Departure]:
    """When the tensor left its own range, up to `step`: the first step j ending a climb (steps that each rose by
    at least RISE to a new high of the series) whose value, and the value at `step`, are LEFT_FACTOR times the
    largest value before the climb (read over MIN_HISTORY steps or more); the climb's first step is the departure.
    A weight that grows as it learns, or a bias learning up from zero, never triples its own earlier largest.
    falling: the same for a fall (a climb of 1 / max |x|: each step 1/RISE of the one before, to a third of the
    smallest value before it); its growth is negative."""
    values = [(s, 1.0 / v if falling else v) for s, v in store.values(key, step) if v > 0][-MAX_STEPS:]
    # read at `step` (or not captured there: a sampled step held only the loss): its last reading stands
    if len(values) <= MIN_HISTORY or (values[-1][0] != step and step in store.points.get(key, {})):
        return None
    end = values[-1][1]
    spacing = sorted(b[0] - a[0] for a, b in zip(values, values[1:], strict=False))[(len(values) - 1) // 2]
    highs = [values[0][1]]                 # highs[k]: the largest value of values[:k + 1]
    for _s, v in values[1:]:
        highs.append(max(highs[-1], v))
    for j in range(MIN_HISTORY, len(values)):
        # back over the readings that each rose by RISE to a new high, read at the series' usual spacing, or
        # across a short gap (up to MIN_HISTORY steps) over which it rose RISE a step (read every 2-3 steps under
        # load: the attention run); across a longer gap the climb is not seen: it starts at the first reading
        # after it. i is the climb's first
        i = j
        while i - 1 > MIN_HISTORY and values[i - 2][1] * RISE <= values[i - 1][1] \
                and values[i - 1][1] > highs[i - 2] \
                and _climbs_across(values, i, spacing):
            i -= 1
        baseline = highs[i - 1]
        if values[j][1] > LEFT_FACTOR * baseline and end > LEFT_FACTOR * baseline:
            break
    else:
        return None
    tracked = store.tensors[key]
    n = max(1, values[-1][0] - values[i - 1][0])
    if falling:
        baseline, end = 1.0 / baseline, 1.0 / end
    growth = (end / baseline) ** (1.0 / n) - 1
    return Departure(tracked.name, tracked.kind, tracked.op, tracked.cell, tracked.dtype, values[i][0], baseline,
                     end, growth)


def _climbs_across(values: List[Tuple[int, float]], k: int, spacing: int) -> bool:
    """Whether a climb runs from reading k - 1 to reading k: read at the usual spacing; or across a short
    gap (up to MIN_HISTORY steps) rising RISE a step; or across a longer one at the rate (within 1.5x) of the climb's
    readings after it (onward: their log growth a step), at least RISE a step. A one-step jump read across a gap is
    many times faster than what follows it (the data_spike runs' updates); a climb read sparsely is not (the
    attention run under load, read at 18, 21, 27, was named at 27 for 21)."""
    before, after = values[k - 1], values[k]
    gap = after[0] - before[0]
    if gap <= spacing or (gap <= MIN_HISTORY and after[1] >= before[1] * RISE ** gap):
        return True
    onward = _rate_onward(values, k) if before[1] > 0 else None      # (only for a long gap: the rare case)
    if onward is None:
        return False
    across = math.log(after[1] / before[1]) / gap
    return across >= math.log(RISE) and onward / ONWARD_TOLERANCE <= across <= onward * ONWARD_TOLERANCE


def _rate_onward(values: List[Tuple[int, float]], k: int) -> Optional[float]:
    """The log growth a step of the climb that goes on from reading k: the readings after it that each rose at
    least RISE a step over the one before (read at most MIN_HISTORY steps apart); None with fewer than two."""
    end = k
    while end + 1 < len(values) and 0 < values[end + 1][0] - values[end][0] <= MIN_HISTORY \
            and values[end + 1][1] >= values[end][1] * RISE ** (values[end + 1][0] - values[end][0]):
        end += 1
    if end - k < 2 or values[k][1] <= 0:
        return None
    return math.log(values[end][1] / values[k][1]) / (values[end][0] - values[k][0])


def _line(ys: List[float]) -> Tuple[float, float]:
    """(value at x=0, slope) of the least-squares line through ys at x = 0, 1, ..."""
    if len(ys) < 2:
        return ys[0], 0.0
    mx, my = (len(ys) - 1) / 2, sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in range(len(ys)))
    k = sum((x - mx) * (y - my) for x, y in zip(range(len(ys)), ys, strict=True)) / den
    return my - k * mx, k


def _line_residual(ys: List[float]) -> float:
    """Squared residual of the best line through ys; two points are a level (a line through them would always
    fit, and a spike's step would be moved one step early)."""
    if len(ys) < 3:
        mean = sum(ys) / len(ys)
        return sum((y - mean) ** 2 for y in ys)
    xs = range(len(ys))
    mx, my = (len(ys) - 1) / 2, sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    k = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den
    return sum((y - (my + k * (x - mx))) ** 2 for x, y in zip(xs, ys, strict=True))


def _lr_at(store: Store, rank: int, step: int) -> Optional[float]:
    for key, tracked in store.tensors.items():
        if tracked.rank == rank and tracked.kind == "optimizer setting" and "learning_rate" in tracked.name:
            point = store.points.get(key, {}).get(step)
            if point is not None and point.high is not None:
                return point.high
    return None


def root_cause(store: Store, events: List[Event]) -> Optional[RootCause]:
    blowups = [e for e in events if e.kind in (SPIKE, DIVERGENCE, NONFINITE)] or \
              [e for e in events if e.kind == PROJECTED]
    if not blowups:
        return None
    event = min(blowups, key=lambda e: (e.step, e.rank))
    nonfinite = next((e for e in events if e.kind == NONFINITE and e.rank == event.rank), None)
    batch = _nonfinite_batch(store, events, event)
    if batch is not None:
        return _came_in_with_the_batch(store, events, event, nonfinite, batch)
    # the trends are read up to the first blow-up; when a non-finite value follows, up to the last finite step
    # before it, unless an input of the step jumped at the first blow-up (data: what came later is its aftermath)
    at_event = _departures(store, event.rank, event.step)
    step, departures = event.step, at_event
    if nonfinite is not None and not any(d.kind == "input" and d.since == event.step for d in at_event):
        step = max(nonfinite.step - 1, 0)
        departures = _departures(store, event.rank, step)
    collapsed = _collapsed_state(store, event.rank, step, departures)
    departures = sorted(departures + [state for state, _rose in collapsed],
                        key=lambda d: (d.since, KIND_ORDER.get(d.kind, 9)))
    result = RootCause(event.rank, event, None, None, "unknown", departures=departures, upto=step)
    jumped = [d for d in departures if d.kind == "input" and d.since == event.step]
    if jumped:        # an input of the step jumped at the blow-up: that is where it starts, whatever drifted before
        departures = jumped + [d for d in departures if d not in jumped]
        result.departures = departures
    if departures:
        result.first = departures[0]
        result.onset = departures[0].since
    result.diverged = any(e.kind == DIVERGENCE and e.rank == event.rank and e.step <= step for e in events)
    _classify(result, store, nonfinite, collapsed)
    if result.onset is not None:
        result.unread = _unread_before(store, event.rank, result.onset)
    if result.unread:
        last, onset = result.unread
        result.evidence.append(f"only the loss was read between steps {last} and {onset} (the sampling's full steps "
                               f"are {onset - last} steps apart there): the onset may lie anywhere in that gap; "
                               f"watch again with --full-every N, N well under {onset - last}, to read it")
    result.fix = FIXES.get(result.cause, "")
    result.summary = _summary(result, store, nonfinite)
    return result


def _nonfinite_batch(store: Store, events: List[Event], event: Event) -> Optional[Departure]:
    """An input of the step that held NaN/inf at the first blow-up's own step, when that blow-up is a non-finite
    value: the batch brought it (every later non-finite value is its aftermath)."""
    if event.kind != NONFINITE:
        return None
    came = next((e for e in events if e.kind == NONFINITE and e.rank == event.rank and e.step == event.step
                 and e.tensor_kind == "input"), None)
    if came is None:
        return None
    key = next((k for k, t in store.tensors.items() if t.rank == event.rank and t.name == came.tensor), None)
    point = store.points.get(key, {}).get(came.step) if key is not None else None
    before = store.recent(key, 1, came.step - 1) if key is not None else []
    usual = before[-1][1] if before else 0.0
    finite_part = point.max_abs if point is not None and point.max_abs is not None else usual
    return Departure(came.tensor, "input", came.op, came.cell, came.dtype, came.step, usual, finite_part, 0.0,
                     nonfinite=point.nonfinite if point is not None else 1)


def _came_in_with_the_batch(store: Store, events: List[Event], event: Event, nonfinite: Optional[Event],
                            batch: Departure) -> RootCause:
    result = RootCause(event.rank, event, batch.since, batch, "data", departures=[batch], upto=batch.since)
    later = [e.tensor for e in events if e.kind == NONFINITE and e.rank == event.rank and e.step == batch.since
             and e.tensor != batch.tensor]
    if len(later) > 4:
        later = later[:3] + [f"{len(later) - 3} more"]
    result.evidence.append(f"{batch.tensor} of the step held {batch.nonfinite} NaN/inf value(s) at step "
                           f"{batch.since}: the batch came in so; nothing had blown up before it")
    if later:
        result.evidence.append(f"{', '.join(later)} became non-finite in the same step: its aftermath")
    result.fix = FIXES["data"]
    result.summary = _summary(result, store, nonfinite)
    return result


def _unread_before(store: Store, rank: int, onset: int) -> Optional[Tuple[int, int]]:
    """(the last full step before the onset, the onset) when more than MIN_HISTORY steps lie between them."""
    full = store.full_steps.get(rank, [])
    earlier = [s for s in full if s < onset]
    if earlier and onset - max(earlier) > MIN_HISTORY:
        return max(earlier), onset
    return None


def _departures(store: Store, rank: int, step: int) -> List[Departure]:
    found = []
    for key, tracked in store.tensors.items():
        if tracked.rank != rank or tracked.kind == "optimizer setting":
            continue
        d = departure(store, key, step)
        if d is not None:
            found.append(d)
    found.sort(key=lambda d: (d.since, KIND_ORDER.get(d.kind, 9)))
    return found


def _collapsed_state(store: Store, rank: int, step: int, at_step: List[Departure]) -> List[Tuple[Departure,
                                                                                               Departure]]:
    """(the state, the weight or update that rose) for each optimizer state that fell out of its range up to the
    step before `step` (a state read at a step already holds that step's gradient: at a spike, the spike's) and
    whose weight, or the weight's update, then rose (from the state's fall on; read at `step`, at_step, or at the
    step before). The state belongs to the weight it ends with: MindSpore's optimizers name it `<moment>.<weight>`
    (moment1.fc.weight, adam_v.fc.weight)."""
    before = step - 1
    rose = [d for d in at_step + _departures(store, rank, before) if d.kind in ("parameter", "update")]
    weights = sorted((t.name for t in store.tensors.values() if t.rank == rank and t.kind == "parameter"),
                     key=len, reverse=True)
    found = []
    for key, tracked in store.tensors.items():
        if tracked.rank != rank or tracked.kind != "optimizer state":
            continue
        weight = next((w for w in weights if tracked.name.endswith("." + w)), None)
        if weight is None:
            continue
        fell = departure(store, key, before, falling=True)
        after = [d for d in rose if d.tensor in (weight, f"{weight} update") and fell is not None
                 and d.since >= fell.since]
        lr_start, lr_end = (_lr_at(store, rank, fell.since), _lr_at(store, rank, before)) if fell else (None, None)
        if lr_start is not None and lr_end is not None and lr_end > lr_start * RISE:
            continue            # the steps grew with the learning rate
        if fell is not None and after:
            found.append((fell, min(after, key=lambda d: (d.since, KIND_ORDER.get(d.kind, 9)))))
    found.sort(key=lambda pair: pair[0].since)
    return found


def _classify(result: RootCause, store: Store, nonfinite: Optional[Event],
              collapsed: List[Tuple[Departure, Departure]]) -> None:
    onset, first, evidence = result.onset, result.first, result.evidence
    deps = result.departures
    at_onset = [d for d in deps if d.since == onset]
    data = [d for d in at_onset if d.kind == "input"]
    state = [d for d in deps if d.kind == "optimizer state"]
    weights = [d for d in deps if d.kind in ("parameter", "update")]
    grown = [d for d in weights if result.upto - d.since >= 2 or result.diverged]
    if data:
        d = data[0]
        result.cause = "data"
        evidence.append(f"{d.tensor} of the step jumped at step {d.since}: max |x| {d.before:.4g} -> {d.after:.4g}")
        return
    logits = [d for d in deps if d.kind == "attention logits"]
    if logits and min(d.since for d in logits) <= min((d.since for d in state + weights), default=logits[0].since):
        d = min(logits, key=lambda d: d.since)
        result.cause = "attention"
        evidence.append(f"{d.tensor} (the QK logits, the input of {d.cell}'s softmax) max |x| {d.before:.4g} -> "
                        f"{d.after:.4g}, {growth_text(d.growth)} from step {d.since}, before any weight or update "
                        "left its range")
        moved = [w for w in weights if w.cell == d.cell]
        if moved:
            w = moved[0]
            evidence.append(f"{w.tensor} grew after it: {w.before:.4g} -> {w.after:.4g} from step {w.since}")
        low = _low_precision_near_limit(store, result, nonfinite)
        if low:
            evidence.append(low)
        return
    if collapsed and collapsed[0][0].since <= min((w.since for w in weights), default=collapsed[0][0].since):
        d, w = collapsed[0]
        result.cause = "optimizer"
        evidence.append(f"optimizer state {d.tensor} fell out of its range from step {d.since}: max |x| "
                        f"{d.before:.4g} -> {d.after:.4g}, {growth_text(d.growth)}, by step {result.upto - 1}")
        evidence.append(f"{w.tensor} rose after it: max |x| {w.before:.4g} -> {w.after:.4g}, "
                        f"{growth_text(w.growth)} from step {w.since}: its steps grew as its optimizer state fell "
                        "(the optimizer's ratio, such as m / sqrt(v), not the gradient)")
        lr_start, lr_end = _lr_at(store, result.rank, d.since), _lr_at(store, result.rank, result.upto - 1)
        if lr_start is not None and lr_end is not None:
            evidence.append(f"learning rate {lr_start:.3g} at step {d.since}, {lr_end:.3g} at step {result.upto - 1}")
        return
    if state and (not weights or min(s.since for s in state) < min(w.since for w in weights)):
        d = state[0]
        result.cause = "optimizer"
        evidence.append(f"optimizer state {d.tensor} left its trend at step {d.since} ({d.before:.4g} -> "
                        f"{d.after:.4g}), before the weights and updates")
        return
    low = _low_precision_near_limit(store, result, nonfinite)
    if grown:
        d = min(grown, key=lambda d: (d.since, KIND_ORDER.get(d.kind, 9)))
        result.cause = "dynamics"
        evidence.append(f"{d.tensor} max |x| {d.before:.4g} -> {d.after:.4g}, {growth_text(d.growth)} from "
                        f"step {d.since}")
        if result.diverged:
            evidence.append("the loss rose step after step before the blow-up (a divergence event)")
        lr = _lr_at(store, result.rank, d.since)
        if lr is not None:
            evidence.append(f"learning rate {lr:.3g} at step {d.since}")
        if low:
            evidence.append(low + " (the growth came first: dynamics, not the dtype)")
        return
    if low:
        result.cause = "precision"
        evidence.append(low)
        return
    if first is not None:
        evidence.append(f"{first.tensor} left its trend at step {first.since} ({first.before:.4g} -> "
                        f"{first.after:.4g}); no input, weight or optimizer state moved first")


def _low_precision_near_limit(store: Store, result: RootCause, nonfinite: Optional[Event]) -> str:
    candidates = []
    if nonfinite is not None and nonfinite.dtype in LOW_PRECISION:
        candidates.append(nonfinite.tensor)
    candidates += [d.tensor for d in result.departures if d.dtype in LOW_PRECISION]
    for name in candidates:
        key = next((k for k, t in store.tensors.items() if t.name == name and t.rank == result.rank), None)
        if key is None:
            continue
        tracked = store.tensors[key]
        finite = store.values(key)
        limit = tracked.limit
        if finite and limit:
            step, peak = max(finite, key=lambda sv: sv[1])
            if peak / limit >= NEAR_LIMIT or (nonfinite is not None and nonfinite.tensor == name):
                return (f"{name} is {tracked.dtype} and used {peak / limit * 100:.0f}% of its range "
                        f"({peak:.4g} of {limit:.4g}) at step {step}")
    return ""


def _summary(result: RootCause, store: Store, nonfinite: Optional[Event]) -> str:
    event = result.event
    head = (f"{nonfinite.tensor} ({nonfinite.op}) became non-finite at step {nonfinite.step}"
            if nonfinite is not None else f"{event.kind.replace('_', ' ')} of {event.tensor} at step {event.step}")
    if result.first is None:
        return f"{head}; no tracked tensor left its trend before it: {result.cause}"
    d = result.first
    moved = (f"held {d.nonfinite} NaN/inf value(s)" if d.nonfinite else
             f"left its trend first, {d.before:.4g} -> {d.after:.4g}")
    text = (f"{head}; onset step {result.onset}: {d.tensor} ({d.op}" + (f" in {d.cell}" if d.cell else "") + ") "
            + moved + (f", {growth_text(d.growth)}" if result.cause != "data" else ""))
    lr = _lr_at(store, result.rank, result.onset) if result.onset is not None else None
    if lr is not None and result.cause == "dynamics":
        text += f", at lr {lr:.3g}"
    if result.unread:
        text += f" (not read in full between steps {result.unread[0]} and {result.unread[1]})"
    return f"{text}: {result.cause}"


def growth_text(growth: float) -> str:
    return f"{growth * 100:+.0f}%/step" if growth < 9 else f"x{1 + growth:.3g}/step"


def kinds_of(events: List[Event]) -> Dict[str, int]:
    out: Dict[str, int] = {}
    for e in events:
        out[e.kind] = out.get(e.kind, 0) + 1
    return out


def pick(events: List[Event]) -> Tuple[List[Event], List[Event]]:
    """(warnings, events that are blow-ups)."""
    return ([e for e in events if e.kind == PROJECTED], [e for e in events if e.kind != PROJECTED])
