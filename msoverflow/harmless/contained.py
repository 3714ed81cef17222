"""Contained values: a non-finite value whose spread ends in finite outputs is no fault.

The standard case is a causal attention mask: `masked_fill(scores, causal, -inf)` before Softmax, which turns the
-inf into exact zeros. Decided per (rank, step) from the data flow, never from op names: the bad op runs of the
step are joined along the saved graph's edges into groups; a group is contained when
  - every kernel that reads a value of the group is in the group or absorbs it: an op the knowledge lists as
    absorbing (Softmax, exp, max, select, where: msoverflow/data/op_knowledge.yaml) that ran in this step with
    finite outputs;
  - no value of the group leaves the graph, and none of its ops is a backward op, a parameter, an optimizer update
    or a state write: it reaches no loss, gradient, parameter or optimizer state;
  - where the value came from is known: a constant of the program, a graph input no kernel writes, or an op of the
    group that made it.
Anything else (no saved graph, a consumer that was not dumped, ...) is not contained and stays a finding.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from ..dataflow import CONST, PARAM, Flow, Flows, Judged, StepIndex
from ..model import INVALID, PROPAGATOR, Contained, OpExecution, RunKey, Source, TensorStats
from ..rules.knowledge import OpKnowledge
from ..scope import cell_of


@dataclass
class Group:
    """Bad op runs of one step joined by the graph's edges, and what the check found."""
    members: List[Judged]
    absorbers: Dict[str, str] = field(default_factory=dict)    # full name -> op type
    origins: List[str] = field(default_factory=list)           # where the value came from, in words
    why_not: str = ""                                          # empty: contained


def find_contained(judged: Sequence[Judged], flows: Flows,
                   index_of: Callable[[int, int], Optional[StepIndex]], access, kn: OpKnowledge
                   ) -> Tuple[List[Contained], Set[RunKey]]:
    """(the contained values, merged over the steps they recur in; ids of the op runs they account for)."""
    by_step: Dict[Tuple[int, int], List[Judged]] = {}
    for pair in judged:
        by_step.setdefault((pair[0].rank, pair[0].step), []).append(pair)
    found: Dict[Tuple[int, str, str], Contained] = {}
    ids: Set[RunKey] = set()
    for (rank, step), pairs in by_step.items():
        for group in _groups(pairs, flows):
            _check(group, flows, functools.partial(index_of, rank, step), access, kn)
            if group.why_not:
                continue
            ids.update(ex.key for ex, _v in group.members)
            entry = _describe(group, flows, access)
            key = (rank, entry.graph, entry.op_name)
            if key in found:
                found[key].steps.append(step)
            else:
                found[key] = entry
    return sorted(found.values(), key=lambda c: (c.rank, c.steps[0], c.op_name)), ids


def _groups(pairs: List[Judged], flows) -> List[Group]:
    """The step's bad op runs joined along the graph's edges (a run with no graph node is a group alone)."""
    names = {(ex.graph, ex.op_name): k for k, (ex, _v) in enumerate(pairs)}
    parent = list(range(len(pairs)))

    def root(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for k, (ex, _v) in enumerate(pairs):
        flow = flows(ex.rank, ex.graph)
        value = flow.value_of(ex) if flow is not None else None
        if value is None:
            continue
        for consumer, _slot in flow.consumers(value)[0]:
            other = names.get((ex.graph, flow.graph.file_name(consumer.full_name)))
            if other is not None:
                parent[root(other)] = root(k)
    groups: Dict[int, List[Judged]] = {}
    for k, pair in enumerate(pairs):
        groups.setdefault(root(k), []).append(pair)
    return [Group(members) for members in groups.values()]


def _check(group: Group, flows, step_index: Callable[[], Optional[StepIndex]], access, kn: OpKnowledge) -> None:
    """Sets group.why_not (empty when contained), group.absorbers and group.origins. What the graph alone rules
    out is asked first: the step's files are listed only for a group that may be contained."""
    inside = {(ex.graph, ex.op_name) for ex, _v in group.members}
    values = []
    for ex, verdict in group.members:
        flow = flows(ex.rank, ex.graph)
        value = flow.value_of(ex) if flow is not None else None
        if value is None:
            group.why_not = f"{ex.op_type} {ex.op_name} is not in a saved graph: its consumers are not known"
            return
        values.append((ex, verdict, flow, value))
        not_a_fill = _not_a_fill(ex, verdict, access)
        if not_a_fill:
            group.why_not = not_a_fill
            return
        if ex.is_parameter:
            name = value[len(PARAM):]
            if name in flows.written(ex.rank):
                group.why_not = f"parameter {name} holds it: a weight or optimizer state"
                return
            group.why_not = f"the data batch holds it (graph input {name}): a value from the data is no fill"
            return
        node = flow.node(ex.op_name)
        if flow.is_backward(node):
            group.why_not = f"it reaches the backward ({ex.op_type} {node.full_name})"
            return
        if kn.updates_weights(ex.op_type) or ex.op_type in kn.state_updates or kn.written_inputs(ex.op_type):
            group.why_not = f"it reaches a state write ({ex.op_type} {node.full_name})"
            return
        if kn.is_collective(ex.op_type):
            group.why_not = f"it crosses ranks ({ex.op_type} {node.full_name})"
            return
        if flow.consumers(value)[1]:
            group.why_not = f"{ex.op_type} {node.full_name} hands it out of the graph"
            return
        if verdict.role != PROPAGATOR:
            group.origins.append(f"{ex.op_type} made it: {verdict.detail}")
            continue
        made, why = _made_outside(ex, node, flow, flows.written(ex.rank), inside, access)
        if made is None:
            group.why_not = why or f"where the bad input of {ex.op_type} {node.full_name} came from is not known"
            return
        group.origins.extend(made)
    index = step_index()
    for ex, _verdict, flow, value in values:
        _absorbed(group, ex, value, flow, inside, index, kn)
        if group.why_not:
            return
    if not group.absorbers:
        group.why_not = "no op absorbed it"


def _absorbed(group: Group, ex: OpExecution, value: str, flow: Flow, inside, index: Optional[StepIndex],
              kn: OpKnowledge) -> None:
    """Every kernel reading `value` is in the group or absorbs it (ran this step, finite outputs, an absorbing
    op); sets group.why_not when one does not."""
    for consumer, _slot in flow.consumers(value)[0]:
        name = flow.graph.file_name(consumer.full_name)
        if (ex.graph, name) in inside:
            continue
        run = index.run(ex.graph, name) if index is not None else None
        if run is None:
            group.why_not = f"{consumer.op_type} {consumer.full_name} reads it but was not dumped"
            return
        if consumer.op_type not in kn.absorbers:
            group.why_not = (f"{consumer.op_type} {consumer.full_name} reads it and is not known to absorb "
                             "non-finite values")
            return
        if not run.n_outputs:
            group.why_not = f"{consumer.op_type} {consumer.full_name} reads it; its outputs were not dumped"
            return
        group.absorbers[consumer.full_name] = consumer.op_type


def _not_a_fill(ex: OpExecution, verdict, access) -> str:
    """Why an op run's bad value is no fill a program makes by design ('' when it may be one): contained is only
    -inf or a large negative value; never NaN, +inf, or a value made outside an op's domain (log(0), x/0)."""
    if verdict.role != PROPAGATOR and verdict.kind == INVALID:
        return f"{ex.op_type} made it outside its domain ({verdict.detail}): a domain error is no fill"
    for event in ex.outputs or ex.inputs:
        stats = access.stats(event) if (event.dtype is None or event.is_float) else None
        if stats is not None and stats.nan:
            return f"{ex.op_type} {ex.op_name} holds NaN: no program fills with NaN by design"
        if stats is not None and stats.posinf:
            return f"{ex.op_type} {ex.op_name} holds +inf: a fill is -inf or a large negative value"
    return ""


def _made_outside(ex: OpExecution, node, flow: Flow, written: frozenset, inside,
                  access) -> Tuple[Optional[List[str]], str]:
    """Where the bad inputs of a propagator came from, when not from an op of its group: a constant of the
    program ([] when every one came from the group); (None, why) when unknown or from the data batch."""
    made = []
    for event in ex.inputs:
        if not (event.dtype is None or event.is_float) or not access.bad(event):
            continue
        ref = flow.producer(node, event.slot)
        if ref == CONST:
            made.append(f"input {event.slot} of {ex.op_type} is a constant of the program")
        elif ref is not None and ref.startswith(PARAM) and ref[len(PARAM):] not in written:
            return None, (f"input {event.slot} of {ex.op_type} is the graph input {ref[len(PARAM):]}: a value from "
                          "the data batch is no fill")
        elif ref is None or (ex.graph, flow.graph.file_name(ref)) not in inside:
            return None, ""
    return made, ""


def _describe(group: Group, flows, access) -> Contained:
    members = sorted(group.members, key=lambda pair: pair[0].time)
    site, _verdict = members[0]
    flow = flows(site.rank, site.graph)
    node = None if site.is_parameter else flow.node(site.op_name)
    full_name = node.full_name if node is not None else flow.value_of(site)[len(PARAM):]
    # a graph input holding the value has no Cell of its own: name the Cell of the op that absorbed it
    cell, cell_type = cell_of(full_name if node is not None else min(group.absorbers))
    source = (Source(node.source_file, node.source_line or 0, node.source_code or "")
              if node is not None and node.source_file else None)
    evidence = list(dict.fromkeys(group.origins))
    absorbers = sorted(group.absorbers)
    evidence.append("absorbed by " + ", ".join(f"{group.absorbers[name]} ({name})" for name in absorbers)
                    + ": finite outputs in the dump")
    evidence.append("every op that reads it in the saved graph is accounted for: it reaches no loss, gradient, "
                    "parameter or optimizer state")
    return Contained(rank=site.rank, steps=[site.step], graph=site.graph, op_type=site.op_type,
                     op_name=site.op_name, value=_value(site, access),
                     absorbed_by=sorted(set(group.absorbers.values())), full_name=full_name, cell=cell,
                     cell_type=cell_type, source=source,
                     spread=[ex.op_type for ex, _v in members[1:]], absorbers=absorbers, evidence=evidence)


def _value(ex: OpExecution, access) -> str:
    """What the site's outputs hold: "-inf", "+inf and NaN", "values beyond float16's range"."""
    words: List[str] = []
    for event in ex.outputs:
        stats = access.stats(event) or TensorStats(count=0)
        for present, word in ((stats.neginf, "-inf"), (stats.posinf, "+inf"), (stats.nan, "NaN"),
                              (stats.over_range, f"values beyond {event.dtype}'s range")):
            if present and word not in words:
                words.append(word)
    return " and ".join(words) or "non-finite values"
