"""Overflows a dynamic loss scale handles by design are no fault.

fp16 training with a dynamic loss scale (TrainOneStepWithLossScaleCell with a DynamicLossScaleUpdateCell, and
MindFormers' cells built on them) starts with a scale too large on purpose: the first steps' scaled gradients
overflow, the cell skips their updates and halves the scale until the gradients fit. Per rank, a run of steps is
handled when all three hold:
  1. the overflow is in the backward only: every op that made a bad value in the step is a backward op, and no
     parameter or state write holds one (forward and loss finite);
  2. the steps' updates were not applied: the optimizer's kernels did not run (they ran in other steps of the
     dump), or the weights and optimizer state are unchanged from the step before;
  3. a later step recovers: it holds no bad value.
A step whose bad values all arrived through a collective (data parallel: the gradient AllReduce brings another
rank's overflow) is judged with the rank that made them: handled when that rank's overflow of the step is
handled and this rank's update was skipped too.
An overflow is a fault when it is in the forward, reaches an applied update, or persists while the scale sits at
its floor (1). The scale is read from the dump where it is there (the loss-scale Parameter as the step's ops read
it, the Parameter dumped after the step before, the gradient's sens input), else inferred from magnitudes that
shrink step by step; the report says which.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from ..dataflow import PARAM, Flows, Judged, StepIndex
from ..model import CROSS_RANK, INVALID, PROPAGATOR, Handled, OpExecution, RunKey
from ..rules.knowledge import OpKnowledge

UNPROVEN = "backward not proven"          # why_harmful's mark: said on the finding (it may yet be a loss scale's)
SCALE_FLOOR = 1.0                         # DynamicLossScaleUpdateCell never goes below 1
WEIGHT_BYTES_COMPARED = 256 << 20         # at most this much of the weights is compared between two steps
HALVING = (0.3, 0.8)                      # median step-to-step ratio of magnitudes read as a halving scale


@dataclass
class StepState:
    """What one dumped step of a rank says about its overflow and its update."""
    step: int
    bad: List[Judged] = field(default_factory=list)
    backward_only: bool = False
    why_harmful: str = ""                 # why an overflow of this step is not one a loss scale handles
    first: Optional[OpExecution] = None   # the first op that made a bad value
    update: Optional[bool] = None         # applied; None: the dump does not tell
    update_how: str = ""
    scale: Optional[float] = None
    scale_how: str = ""
    magnitude: Optional[float] = None     # largest finite |x| among the first bad op's inputs
    received: bool = False                # every bad value arrived through a collective from another rank


def find_handled(judged: Sequence[Judged], scanned: Dict[int, List[int]],
                 flows: Flows, index_of: Callable[[int, int], Optional[StepIndex]],
                 access, kn: OpKnowledge) -> Tuple[List[Handled], Set[RunKey], List[Tuple[int, List[int], str]]]:
    """(the handled runs of steps, merged across ranks that agree; ids of the op runs they account for; notes
    (rank, steps, text) on runs that look handled but cannot be confirmed, for their findings). scanned: rank ->
    the steps the walk read, in order."""
    by_step: Dict[Tuple[int, int], List[Judged]] = {}
    for pair in judged:
        by_step.setdefault((pair[0].rank, pair[0].step), []).append(pair)
    judged_runs: List[Tuple[int, Handled, bool, str, List[StepState]]] = []
    unproven: List[Tuple[int, List[int], str]] = []
    for rank, steps in sorted(scanned.items()):
        if not any((rank, step) in by_step for step in steps):
            continue
        states = _states(rank, steps, by_step, flows, index_of, access, kn)
        unproven += [(rank, [s.step], s.why_harmful[len(UNPROVEN) + 2:]) for s in states
                     if s.why_harmful.startswith(UNPROVEN)]

        def scale_at(step, rank=rank, steps=steps):
            return _scale_at(rank, step, steps, flows, index_of, kn)
        for run, confirmed, note in _runs(rank, states, scale_at):
            judged_runs.append((rank, run, confirmed, note, [s for s in states if s.step in run.steps]))
    # (rank, step)s whose own overflow (not one received) is confirmed handled
    made = {(rank, state.step) for rank, _run, confirmed, _note, states in judged_runs if confirmed
            for state in states if not state.received}
    runs: List[Handled] = []
    ids: Set[RunKey] = set()
    notes: List[Tuple[int, List[int], str]] = list(unproven)
    for rank, run, confirmed, note, states in judged_runs:
        if confirmed:
            confirmed, note = _received_handled(rank, run, states, made)
        if confirmed:
            runs.append(run)
            ids.update(ex.key for state in states for ex, _v in state.bad)
        elif note:
            notes.append((rank, run.steps, note))
    return _merge_ranks(runs), ids, notes


def _received_handled(rank: int, run: Handled, states: List[StepState], made: Set[Tuple[int, int]]) -> Tuple[bool, str]:
    """Whether the steps of a run whose bad values this rank only received are handled: the overflow another rank
    made in each of them is confirmed handled. (confirmed, note)."""
    received = [state for state in states if state.received]
    if not received:
        return True, ""
    senders = {state.step: sorted(other for other, step in made if step == state.step and other != rank)
               for state in received}
    via = received[0].first.op_type if received[0].first is not None else "a collective"
    unconfirmed = [step for step, ranks in senders.items() if not ranks]
    if unconfirmed:
        return False, (f"the bad values of step{'s' if len(unconfirmed) > 1 else ''} {_steps_text(unconfirmed)} "
                       f"arrived through {via} from another rank whose overflow there is not confirmed handled (a "
                       "fault there, or not dumped), so a loss scale handling it here is not confirmed")
    run.received[rank] = sorted(senders)
    run.evidence.insert(1, f"rank {rank} only received the overflow of step{'s' if len(received) > 1 else ''} "
                           f"{_steps_text(sorted(senders))} through {via}, from rank "
                           f"{','.join(map(str, sorted({r for ranks in senders.values() for r in ranks})))}, "
                           "where it is handled")
    return True, ""


def may_be_handled(pairs: Sequence[Judged], flows: Flows, kn: OpKnowledge) -> bool:
    """Whether the bad values of one step could be a loss scale's business (backward only, no update applied
    with them): the walk reads on past such a step, since only later steps can confirm it."""
    return not _harmful(pairs, flows, kn)[0]


# ---- one step -------------------------------------------------------------------------------------------------

def _states(rank, steps, by_step, flows, index_of, access, kn) -> List[StepState]:
    """The rank's scanned steps; the update and scale only of steps whose overflow a loss scale may handle."""
    ran: List[Set[int]] = []

    def updates_in() -> Set[int]:
        """The steps whose optimizer kernels ran (every step listed once, only when a step may be handled)."""
        if not ran:
            ran.append({step for step in steps
                        if (index_of(rank, step) or StepIndex([])).of_types(kn.updates_weights)})
        return ran[0]

    states: List[StepState] = []
    for position, step in enumerate(steps):
        state = StepState(step, by_step.get((rank, step), []))
        states.append(state)
        if not state.bad:
            continue
        harmful, why, first = _harmful(state.bad, flows, kn)
        state.backward_only, state.why_harmful, state.first = not harmful, why, first
        state.received = _received(state.bad)
        if harmful:
            continue
        state.magnitude = _magnitude(first, access)
        previous = steps[position - 1] if position and steps[position - 1] == step - 1 else None
        index, before = index_of(rank, step), (index_of(rank, previous) if previous is not None else None)
        state.update, state.update_how = _update(index, before, previous, updates_in, flows, rank, kn)
        state.scale, state.scale_how = _scale(step, index, before, previous, flows, rank, kn)
    return states


def _scale_at(rank, step, steps, flows, index_of, kn) -> Tuple[Optional[float], str]:
    previous = step - 1 if step - 1 in steps else None
    return _scale(step, index_of(rank, step), index_of(rank, previous) if previous is not None else None, previous,
                  flows, rank, kn)


def _harmful(pairs: Sequence[Judged], flows, kn: OpKnowledge) -> Tuple[bool, str, Optional[OpExecution]]:
    """(harmful, why, the first op that made a bad value) for the bad op runs of one step."""
    ordered = sorted(pairs, key=lambda pair: pair[0].time)
    makers = [ex for ex, verdict in ordered if verdict.role != PROPAGATOR] or [ordered[0][0]]
    for ex, _verdict in ordered:
        if ex.is_parameter:
            return True, f"parameter {ex.op_name} holds a bad value: an update applied it", makers[0]
        if kn.updates_weights(ex.op_type) or ex.op_type in kn.state_updates:
            return True, f"{ex.op_type} ({ex.op_name}) wrote a bad value into the state", makers[0]
    if _received(pairs):
        return False, "", makers[0]       # another rank made it: judged with that rank (find_handled)
    for ex, verdict in ordered:
        if verdict.role != PROPAGATOR and verdict.kind == INVALID:
            # a loss scale handles overflows a smaller scale removes: never NaN from 0/0, inf - inf, a value outside
            # an op's domain or a device fault
            return True, (f"{ex.op_type} ({ex.op_name}) made NaN or divided by 0 from finite inputs: no smaller "
                          "loss scale removes that"), makers[0]
    for ex in makers:
        flow = flows(ex.rank, ex.graph)
        node = flow.node(ex.op_name) if flow is not None else None
        if node is None or not flow.is_backward(node):
            # backward is decided from the saved graph (what it differentiates, what it feeds), never from names
            if node is not None and node.forward_name:
                return True, f"{ex.op_type} ({ex.op_name}) made it in the forward (it feeds the loss)", makers[0]
            return True, (f"{UNPROVEN}: {ex.op_type} ({ex.op_name}) is not shown to be in the backward (the saved "
                          "graph records no forward node it differentiates), so a loss scale handling it is not "
                          "proven"), makers[0]
    return False, "", makers[0]


def _received(pairs: Sequence[Judged]) -> bool:
    """Every bad value of the step arrived through a collective: nothing made one here, and the first bad op
    delivered it from another rank."""
    ordered = sorted(pairs, key=lambda pair: pair[0].time)
    return bool(ordered) and all(verdict.role == PROPAGATOR for _ex, verdict in ordered) and \
        ordered[0][1].kind == CROSS_RANK


def _update(index, before, previous, updates_in, flows, rank, kn) -> Tuple[Optional[bool], str]:
    """Whether the step's update was applied, and how that is known: the optimizer's kernels ran or not (when the
    dump shows them in some step), else the weights changed or not."""
    if index is None:
        return None, ""
    ran = index.of_types(kn.updates_weights)
    if ran:
        return True, f"{ran[0].op_type} ran"
    if updates_in():
        ran_in = sorted(updates_in())
        return False, (f"the optimizer's kernels did not run (they ran in step{'s' if len(ran_in) > 1 else ''} "
                       f"{_steps_text(ran_in)})")
    changed = _weights_changed(index, before, flows, rank, kn)
    if changed is None:
        return None, ""
    since = f"from step {previous}" if before is not None else "by the step (as its ops read them, and after it)"
    return changed, (f"the weights and optimizer state changed {since}" if changed else
                     f"the weights and optimizer state are unchanged {since}")


def _weights_changed(index: StepIndex, before: Optional[StepIndex], flows, rank, kn) -> Optional[bool]:
    """Whether a written parameter (weight, optimizer state) as dumped after the step differs from its value
    before it: as dumped after the step before, else as an op of this step read it (an op's inputs are dumped
    when it ran, before the update). None when no parameter can be compared."""
    import numpy as np

    budget, compared = WEIGHT_BYTES_COMPARED, 0
    for name in sorted(flows.written(rank, updates_only=True)):
        now = index.parameter(name)
        after = _output(now, index.access) if now is not None else None
        if after is None:
            continue
        if before is not None:
            then = before.parameter(name)
            earlier = _output(then, before.access) if then is not None else None
        else:
            earlier = _as_read(name, index, flows, rank, kn)
        if earlier is None:
            continue
        if after.nbytes > budget:
            break
        budget -= after.nbytes
        compared += 1
        if after.shape != earlier.shape or not np.array_equal(after, earlier, equal_nan=True):
            return True
    return False if compared else None


def _as_read(name: str, index: StepIndex, flows, rank, kn):
    """A parameter's value as the first op of the step that reads it (and does not write it) got it."""
    reads = []
    for graph in flows.graph_ids().get(rank, ()):
        flow = flows(rank, graph)
        for node, slot in (flow.consumers(PARAM + name)[0] if flow is not None else []):
            run = index.run(graph, flow.graph.file_name(node.full_name))
            if run is not None and slot not in kn.written_inputs(node.op_type):
                reads.append((run.time, run, slot))
    for _time, run, slot in sorted(reads, key=lambda read: read[0]):
        event = next((e for e in run.execution().inputs if e.slot == slot), None)
        array = index.access.array(event) if event is not None else None
        if array is not None:
            return array
    return None


def _output(run, access):
    outputs = run.execution().outputs
    return access.array(outputs[0]) if outputs else None


def _scale(step, index, before, previous, flows, rank, kn) -> Tuple[Optional[float], str]:
    """The loss scale the step ran with, and where it was read; (None, "") when the dump does not hold it."""
    if index is None:
        return None, ""
    read: List[Tuple[int, float, str]] = []
    for graph in sorted({run.graph for run in index.runs}):
        flow = flows(rank, graph)
        if flow is None:
            continue
        for name in sorted(kn.loss_scale_parameters):
            consumers, _leaves = flow.consumers(PARAM + name)
            for node, slot in consumers:
                if slot in kn.written_inputs(node.op_type):
                    continue
                run = index.run(graph, flow.graph.file_name(node.full_name))
                value = _scalar(run, "input", slot, index.access) if run is not None else None
                if value is not None:
                    read.append((run.time, value, f"the {name} Parameter as {node.op_type} ({run.op_name}) read it "
                                                  f"in step {step}"))
    if read:
        _time, value, how = min(read)
        return value, how
    if before is not None:
        for name in sorted(kn.loss_scale_parameters):
            run = before.parameter(name)
            value = _scalar(run, "output", 0, before.access) if run is not None else None
            if value is not None:
                return value, f"the {name} Parameter as dumped after step {previous}"
    # the sens input is the loss scale only in a graph that holds one: else it is the backward's seed, a label
    sens = _sens(index, flows, rank) if _holds_loss_scale(index, flows, rank, kn) else None
    return sens if sens is not None else (None, "")


def _holds_loss_scale(index: StepIndex, flows, rank, kn: OpKnowledge) -> bool:
    """A graph of the step reads a loss-scale Parameter (scale_sense ...): the dump shows a loss scale."""
    for graph in {run.graph for run in index.runs}:
        flow = flows(rank, graph)
        if flow is not None and any(flow.consumers(PARAM + name)[0] for name in kn.loss_scale_parameters):
            return True
    return False


def _sens(index: StepIndex, flows, rank) -> Optional[Tuple[float, str]]:
    """The gradient's sens input: the first backward op of the step reads dloss/dloss times the loss scale, one
    value repeated, from outside the backward (a later backward op's one-value input is the scale divided by
    something, never the scale: without a saved graph to tell, nothing is read)."""
    for run in sorted(index.runs, key=lambda r: r.time):
        flow = flows(rank, run.graph)
        node = flow.node(run.op_name) if flow is not None else None
        if node is None or not flow.is_backward(node):
            continue
        for event in run.execution().inputs:
            if event.dtype is not None and not event.is_float:
                continue
            producer = flow.graph.by_full.get(flow.producer(node, event.slot) or "")
            if producer is not None and flow.is_backward(producer):
                continue
            stats = index.access.stats(event)
            # a sens of 1 is the seed every gradient starts from (value_and_grad's, GradOperation's): no scale; a
            # scale applied to the loss itself (loss * scale) is not in the seed
            if stats is not None and stats.count and not stats.nonfinite and stats.min == stats.max and stats.max \
                    and stats.max != 1:
                return float(stats.max), f"the gradient's sens input ({run.op_type} input {event.slot}, {run.op_name})"
        return None
    return None


def _scalar(run, io: str, slot: int, access) -> Optional[float]:
    """A one-value tensor of an op run (a loss scale), None when it is not one value."""
    ex = run.execution()
    event = next((e for e in (ex.inputs if io == "input" else ex.outputs) if e.slot == slot), None)
    stats = access.stats(event) if event is not None else None
    if stats is None or not stats.count or stats.nonfinite or stats.min != stats.max or stats.max is None:
        return None
    return float(stats.max)


# ---- runs of steps ----------------------------------------------------------------------------------------

def _runs(rank: int, states: List[StepState], scale_at):
    """(Handled, confirmed, note) per run of consecutive steps whose overflow a loss scale may have handled."""
    position = 0
    while position < len(states):
        state = states[position]
        if not (state.bad and state.backward_only):
            position += 1
            continue
        end = position
        while end + 1 < len(states) and states[end + 1].bad and states[end + 1].backward_only:
            end += 1
        run_states = states[position:end + 1]
        later = states[end + 1:]
        yield _judge_run(rank, run_states, later, scale_at)
        position = end + 1


def _judge_run(rank: int, run: List[StepState], later: List[StepState], scale_at) -> Tuple[Handled, bool, str]:
    steps = [s.step for s in run]
    recovered = next((s for s in later if not s.bad), None)
    scales = [s.scale for s in run]
    handled = Handled(ranks=[rank], steps=steps, recovered_at=recovered.step if recovered else None,
                      ops=list(dict.fromkeys(s.first.op_type for s in run if s.first is not None)))
    # where the calibration left the scale: the step right after the run (a forward fault there is not the
    # recovery, but it ran with the scale this run reached)
    after = later[0] if later else None
    _scales(handled, run, scale_at(after.step)[0] if after is not None and recovered is not None else None)
    what = ("the overflow is in the backward only" if len(steps) == 1 else
            f"the overflow of steps {_steps_text(steps)} is in the backward only")
    applied = [s for s in run if s.update]
    unknown = [s for s in run if s.update is None]
    if applied:
        return handled, False, ""         # an applied update carried it: a fault, reported as a finding
    if unknown:
        return handled, False, (f"{what}, but whether step {unknown[0].step}'s update was skipped is not in the "
                                "dump (no optimizer kernels, no weights to compare), so a loss scale handling it is "
                                "not confirmed")
    if recovered is None:
        return handled, False, (f"{what} and the update was skipped, as a loss scale calibrating does, but no "
                                "later dumped step recovers: dump later steps to tell calibration from a fault")
    last_scale = scales[-1]
    if all(scale is not None for scale in scales) and last_scale is not None and last_scale <= SCALE_FLOOR:
        return handled, False, (f"{what}, but it persists while the loss scale sits at its floor "
                                f"({last_scale:g}): a fault")
    handled.skipped_how = "; ".join(dict.fromkeys(s.update_how for s in run if s.update_how))
    handled.evidence.append(f"forward and loss finite in steps {_steps_text(steps)}: every op that made a bad value "
                            "is a backward op")
    handled.evidence.append(f"updates skipped: {handled.skipped_how}")
    handled.evidence.append(f"step {recovered.step} recovers: no bad value")
    return handled, True, ""


def _scales(handled: Handled, run: List[StepState], recovered: Optional[float]) -> None:
    """The scale at the start of the run and the one the recovering step ran with: read, else inferred."""
    if run[0].scale is not None:
        handled.scale_from, handled.scale_how, handled.scale_evidence = run[0].scale, "read", run[0].scale_how
        handled.scale_to = recovered
        return
    inferred = _inferred(run)
    if inferred:
        handled.scale_how, handled.scale_evidence = "inferred", inferred


def _inferred(run: List[StepState]) -> str:
    """Magnitudes of the first overflowing op's inputs that shrink step by step, as a halving scale makes them
    (empty when they do not, or too few steps say)."""
    ratios = [b.magnitude / a.magnitude for a, b in zip(run, run[1:], strict=False)
              if b.step == a.step + 1 and a.first is not None and b.first is not None
              and a.first.op_name == b.first.op_name and a.magnitude and b.magnitude is not None]
    if len(ratios) < 2:
        return ""
    median = statistics.median(ratios)
    if not HALVING[0] <= median <= HALVING[1]:
        return ""
    first, last = run[0], run[-1]
    op_type = first.first.op_type if first.first is not None else "the first overflowing op"
    return (f"inferred, not read: the inputs of {op_type} shrink by a median x{median:.2f} per step "
            f"(max |x| {first.magnitude:.4g} at step {first.step}, {last.magnitude:.4g} at step {last.step}), as a "
            "halving loss scale makes them; the scale itself is not in the dump")


def _magnitude(ex: Optional[OpExecution], access) -> Optional[float]:
    if ex is None:
        return None
    values = [stats.max_abs for stats in (access.stats(e) for e in ex.inputs if e.dtype is None or e.is_float)
              if stats is not None and stats.max_abs is not None]
    return max(values) if values else None


def _merge_ranks(runs: List[Handled]) -> List[Handled]:
    """Ranks whose handled runs agree (same steps, same scales) share one entry."""
    merged: Dict[tuple, Handled] = {}
    for run in runs:
        key = (tuple(run.steps), run.scale_from, run.scale_to, run.recovered_at)
        if key in merged:
            merged[key].ranks.extend(run.ranks)
            merged[key].received.update(run.received)
            merged[key].evidence += [line for line in run.evidence if line not in merged[key].evidence]
        else:
            merged[key] = run
    return sorted(merged.values(), key=lambda h: (h.steps[0], h.ranks))


def _steps_text(steps: List[int]) -> str:
    if len(steps) > 1 and steps == list(range(steps[0], steps[-1] + 1)):
        return f"{steps[0]}-{steps[-1]}"
    return ",".join(map(str, steps))
