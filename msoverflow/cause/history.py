"""Since when: the history of an origin's inputs and of the parameters that feed it, across the dumped steps.

An op overflows at step N; was it this op's precision, or had the values feeding it been growing for steps? For
the origin's float inputs (the same op in every dumped step of its rank up to N) and the parameters nearest to it
in the saved graph's forward (a backward op is fed through the forward op it differentiates), the largest finite
|x| per step is read, and each series is called:
  - growing: it ends at least GROWTH times its first value, and rose from the last step it was near that value;
  - jump: its value at step N is at least GROWTH times every earlier one;
  - steady: neither.
A growing parameter names a cause earlier than the step: training dynamics (learning rate, clipping), not this
op's precision.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

from ..dataflow import PARAM, Flow, Flows, StepIndex, is_backward, parameter_name
from ..model import GraphNode, History, Series
from ..rules.knowledge import OpKnowledge

GROWTH = 10.0              # a series that ends this many times above where it was has grown (or jumped)
NEAR_START = 1.5           # a value within this factor of the first one has not started growing yet
MAX_STEPS = 64             # steps read for a history (evenly spread, the first and the origin's always)
MAX_PARAMETERS = 4         # the parameters nearest to the origin
MAX_HOPS = 8               # how far back through the forward the parameters are looked for


def history(rank: int, graph: str, op_name: str, op_type: str, step: int, steps: List[int], flows: Flows,
            ops_of: Callable[[int, int, Callable[[str], bool]], Optional[StepIndex]],
            kn: OpKnowledge) -> Optional[History]:
    """The history of the origin op `op_name` (graph `graph`) of rank `rank` at `step`, over `steps` (the rank's
    dumped steps; ops_of(rank, step, ops) reads the runs of the ops named); None when fewer than two steps up to
    the origin's are dumped."""
    steps = _spread([s for s in sorted(set(steps)) if s <= step], step)
    if len(steps) < 2:
        return None
    inputs: Dict[int, List[Optional[float]]] = {}
    flow = flows(rank, graph)
    parameters = _feeding_parameters(flow, flows.written(rank), op_name, kn) if flow is not None else []
    params: Dict[str, List[Optional[float]]] = {name: [] for name, _written in parameters}
    wanted = {op_name} | {parameter_name(name) for name in params}
    for position, s in enumerate(steps):
        index = ops_of(rank, s, wanted.__contains__)
        if index is None:
            for values in params.values():
                values.append(None)
            continue
        ex = index.execution(graph, op_name)
        for event in (ex.inputs if ex is not None else []):
            if event.dtype is not None and not event.is_float:
                continue
            stats = index.access.stats(event)
            inputs.setdefault(event.slot, [None] * len(steps))[position] = stats.max_abs if stats else None
        for name in params:
            run = index.parameter(name)
            stats = index.access.stats(run.execution().outputs[0]) if run is not None and run.n_outputs else None
            params[name].append(stats.max_abs if stats is not None else None)
    written = dict(parameters)
    series = [Series(f"input {slot} of {op_type}", "input", steps, values) for slot, values in sorted(inputs.items())]
    series += [Series(name, "parameter" if written[name] else "graph input", steps, values)
               for name, values in params.items() if any(v is not None for v in values)]
    for one in series:
        one.trend, one.since = _trend(one)
    node = flow.node(op_name) if flow is not None else None
    backward = is_backward(node.full_name, node.forward_name) if node is not None else is_backward(op_name)
    summary, earlier = _summary(series, op_type, steps, step, backward)
    return History(rank=rank, step=step, series=series, summary=summary, earlier_cause=earlier)


def _spread(steps: List[int], last: int) -> List[int]:
    """At most MAX_STEPS of them, evenly spread; the first and the origin's step always in."""
    if len(steps) <= MAX_STEPS:
        return steps
    picked = {steps[round(k * (len(steps) - 1) / (MAX_STEPS - 1))] for k in range(MAX_STEPS)}
    return sorted(picked | {steps[0], last})


def _feeding_parameters(flow: Flow, written: frozenset, op_name: str, kn: OpKnowledge) -> List[Tuple[str, bool]]:
    """(name, written by a kernel) of the parameters nearest to the op in the forward: breadth first through the
    producers of its inputs (a backward op: of the forward op it differentiates), never through backward ops."""
    node = flow.node(op_name)
    if node is None:
        return []
    start = [node]
    if node.forward_name and node.forward_name in flow.graph.by_full:
        start.append(flow.graph.by_full[node.forward_name])
    found: List[Tuple[str, bool]] = []
    frontier = [(n, slot) for n in start for slot in range(len(n.inputs))]
    seen = {n.full_name for n in start}
    for _hop in range(MAX_HOPS):
        upstream: List[Tuple[GraphNode, int]] = []
        for n, slot in frontier:
            if n is node and is_backward(node.full_name, node.forward_name) and len(start) > 1:
                continue          # a backward op's own inputs are gradients: the forward op says what feeds it
            ref = flow.producer(n, slot)
            if ref is None or ref == "const":
                continue
            if ref.startswith(PARAM):
                name = ref[len(PARAM):]
                if name not in kn.loss_scale_parameters and name not in [f for f, _w in found]:
                    found.append((name, name in written))
                continue
            producer = flow.graph.by_full.get(ref)
            if producer is None or producer.full_name in seen or is_backward(producer.full_name,
                                                                              producer.forward_name):
                continue
            seen.add(producer.full_name)
            upstream.extend((producer, k) for k in range(len(producer.inputs)))
        if len(found) >= MAX_PARAMETERS or not upstream:
            break
        frontier = upstream
    return found[:MAX_PARAMETERS]


def _trend(series: Series) -> Tuple[str, Optional[int]]:
    known = [(s, v) for s, v in zip(series.steps, series.max_abs, strict=True) if v is not None]
    if len(known) < 2:
        return "", None
    first, (last_step, last) = known[0][1], known[-1]
    earlier = [v for _s, v in known[:-1]]
    if max(earlier) > 0 and last >= GROWTH * max(earlier):
        return "jump", last_step
    if len(known) < 3:              # two values tell a jump, not a trend
        return "", None
    if first > 0 and last >= GROWTH * first:
        since = max(s for s, v in known if v <= NEAR_START * first)
        return "growing", since
    return "steady", None


def _summary(series: List[Series], op_type: str, steps: List[int], step: int, backward: bool) -> Tuple[str, bool]:
    """One sentence naming the cause the history shows, and whether it is earlier than the step."""
    def values(one: Series) -> Tuple[float, int, float]:
        known = [(s, v) for s, v in zip(one.steps, one.max_abs, strict=True) if v is not None]
        return known[0][1], known[0][0], known[-1][1]

    weights = [one for one in series if one.kind == "parameter" and one.trend == "growing"]
    if weights:
        one = weights[0]
        first, first_step, last = values(one)
        return (f"{one.name} max |w| {first:.3g} at step {first_step} -> {last:.3g} at step {step}, growing from "
                f"step {one.since}: training dynamics (learning rate, clipping), not this op's precision"), True
    grown = [one for one in series if one.trend == "growing"]
    if grown:
        one = grown[0]
        first, first_step, last = values(one)
        return (f"{one.name} max |x| {first:.3g} at step {first_step} -> {last:.3g} at step {step}, growing from "
                f"step {one.since}: the values feeding {op_type} grew over the steps before this one; look at "
                "what feeds them and at the training dynamics before this op's precision"), True
    jumped = [one for one in series if one.trend == "jump"]
    before = f"step {steps[0]}" if len(steps) == 2 else f"steps {steps[0]}-{steps[-2]}"
    # a weight that jumped while no graph input did (the data's jump is named first: the judgement's data rule
    # reads this sentence): what wrote the weight between the steps brought it
    data = any(one.kind == "graph input" for one in jumped)
    weight = None if data else next((one for one in jumped if one.kind == "parameter"), None)
    known = [v for v in weight.max_abs[:-1] if v is not None] if weight is not None else []
    if weight is not None and known:
        return (f"{weight.name} max |w| at most {max(known):.3g} in {before} -> {weight.max_abs[-1]:.3g} at step "
                f"{step}: the weight jumped between step {steps[-2]} and this one (written then: by the update, by "
                "host code, or in memory), not a slow growth"), False
    if jumped:
        one = jumped[0]
        known = [v for v in one.max_abs[:-1] if v is not None]
        return (f"{one.name} max |x| at most {max(known):.3g} in {before} -> "
                f"{one.max_abs[-1]:.3g} at step {step}: it jumped at this step (this step's data"
                + (", the loss scale" if backward else "") + " or an op upstream), not a slow growth"), False
    if all(one.trend == "steady" for one in series) and series:
        return (f"steady over steps {steps[0]}-{step}: the inputs and parameters at step {step} are like the earlier "
                "steps' (no trend before it)"), False
    return f"too few values over steps {steps[0]}-{step} to tell a trend", False
