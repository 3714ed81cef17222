"""The diagnose stage: every origin of a Report gets its cause (Finding.cause), recomputed from the dump.

It reads again only the (rank, step) units holding origins (their op runs and saved graph), and the tensors of the
origin ops: the walk's cost does not change, and a dump without origins costs nothing here.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

from ..evaluate import TensorAccess
from ..model import (CAUSE_DATA, CAUSE_DEVICE, CAUSE_DOMAIN, CAUSE_UNKNOWN, CROSS_RANK, LIKELY_ORIGIN, ORIGIN,
                     Cause, Finding, OpExecution, Report, TensorEvent)
from ..rules.knowledge import knowledge
from .cause import ADVICE, diagnose

Warn = Callable[[str], None]
# What reading a dump's tensors again may raise (a file truncated or replaced since the walk, a header that lies)
READ_FAULTS = (OSError, ValueError, IndexError, TypeError, OverflowError, MemoryError)


class _Step:
    """One (rank, step) unit read whole, once, on first need."""

    def __init__(self, unit, warn: Warn):
        self.unit, self.warn = unit, warn
        self._read = None
        self._graphs: Dict[str, object] = {}
        self._by_name: Optional[Dict[str, List[OpExecution]]] = None

    @property
    def read(self):
        if self._read is None:
            from ..walk import read_unit
            self._read = read_unit(self.unit, self.warn)
        return self._read

    def executions(self) -> List[OpExecution]:
        return self.read.executions

    def named(self, name: str) -> List[OpExecution]:
        """The step's runs of one op name (indexed once: a step may hold thousands of origins)."""
        if self._by_name is None:
            self._by_name = {}
            for ex in self.read.executions:
                self._by_name.setdefault(ex.op_name, []).append(ex)
        return self._by_name.get(name, [])

    def graph(self, rank: int, graph: str):
        key = str(graph)
        if key not in self._graphs:
            found = self.read.graphs.get((rank, graph)) or self.read.graphs.get((rank, key))
            root = self.read.rank_roots.get((rank, graph)) or self.read.rank_roots.get((rank, key))
            if found is None and root:
                from ..readers.ir_graph import graph_files, load_ir
                for path in graph_files(root, key):
                    try:
                        found = load_ir(path)
                        break
                    except OSError as exc:
                        self.warn(f"{path}: cannot read saved graph ({exc.strerror})")
            self._graphs[key] = found
        return self._graphs[key]


class _Steps:
    """The (rank, step) units diagnosis reads, each read once: the scanned ones, and others of the dump on demand
    (a data-parallel peer's step the walk did not need)."""

    def __init__(self, report: Report, warn: Warn):
        self.report, self.warn = report, warn
        self.units = {(u.rank, u.iteration): u for u in report.scanned_units}
        self.steps: Dict[Tuple[int, int], Optional[_Step]] = {}

    def get(self, rank: int, iteration: int) -> Optional[_Step]:
        key = (rank, iteration)
        if key not in self.steps:
            unit = self.units.get(key)
            if unit is None:
                from ..walk import units
                found = units(self.report.dump_dir, ranks=[rank], steps=[iteration], warn=self.warn)
                unit = found[0] if found else None
            self.steps[key] = _Step(unit, self.warn) if unit is not None else None
        return self.steps[key]


def diagnose_report(report: Report, *, warn: Warn = lambda message: None, mindspore: bool = True,
                    runs: Optional[Dict[int, OpExecution]] = None, graph_of=None) -> None:
    """Set `cause` on the report's origins (first, anomalies, likely origin). runs: id(finding) -> the op run the
    walk built it from; graph_of: op run -> (its saved-graph node, the graph). With them a step is read again only
    when a cause needs more of it (a zero denominator's producer, a forward entry, a consumer's input); without
    them every origin's step is read once."""
    steps = _Steps(report, warn)
    access = TensorAccess(warn)
    coords = {row.rank: row.coords for row in report.rank_status}
    seen = set()
    for finding in [report.first, report.likely_origin, *report.anomalies]:
        # the first finding may be an op first seen with a bad input (no dumped op made the value): its cause is
        # then where that input came from
        if finding is None or id(finding) in seen or (finding.role not in (ORIGIN, LIKELY_ORIGIN)
                                                      and finding is not report.first):
            continue
        seen.add(id(finding))
        step = steps.get(finding.rank, finding.iteration) if (finding.rank, finding.iteration) in steps.units \
            else None
        if step is None:
            finding.cause = Cause(CAUSE_UNKNOWN, "not recomputed: its step was not scanned")
            continue
        # MindSpore's subprocess (seconds) only for the first origin; the others get what numpy can say
        try:
            finding.cause = diagnose_finding(finding, step, access, mindspore=mindspore and finding is report.first,
                                             run=(runs or {}).get(id(finding)), graph_of=graph_of)
        except READ_FAULTS as exc:     # a file that changed or lies about itself: a warning, never fatal
            warn(f"{finding.op_name}: its cause could not be found ({type(exc).__name__}: {exc})")
            finding.cause = Cause(CAUSE_UNKNOWN, f"not recomputed: {type(exc).__name__} while reading its tensors")
            continue
        reached = [f.op_name for f in report.propagation if f.rank == finding.rank
                   and f.iteration == finding.iteration] if finding is report.first else []
        _replica_evidence(finding, reached, coords, steps, access)
        _follow_the_cause(finding)


# Recommendations (op_knowledge.yaml keys) that prescribe a wider dtype: wrong for a cause no dtype fixes.
_PRECISION_ADVICE = frozenset({"overflow", "invalid", "overflow_cast", "saturation", "flagged"})


def _follow_the_cause(finding: Finding) -> None:
    """The recommendation follows the cause: a device fault or a value no dtype holds gets the cause's advice,
    not a precision fix."""
    cause = finding.cause
    if cause is None or not cause.advice:
        return
    if cause.cause == CAUSE_DEVICE or (cause.cause in (CAUSE_DOMAIN, CAUSE_DATA) and
                                       finding.advice in _PRECISION_ADVICE):
        finding.recommendation = cause.advice


def _replica_evidence(finding: Finding, reached: List[str], coords, steps: _Steps, access: TensorAccess) -> None:
    """Data-parallel replicas of what the origin made (and what its value reached) on the other ranks of its dp
    group: a rank holding a copy its peers do not is the suspect device. Only for origins the recompute calls
    a device fault or could not decide: the others need no more reading."""
    from .replicas import compare, dp_group
    cause = finding.cause
    if cause is None or cause.cause not in (CAUSE_DEVICE, CAUSE_UNKNOWN):
        return
    group = dp_group(finding.rank, coords)
    if len(group) < 2:
        if len(coords) > 1:
            cause.evidence.append("replicas: not compared (the data-parallel groups are not known; --parallel "
                                  "dp=N,tp=M gives them)")
        return
    own = steps.get(finding.rank, finding.iteration)
    graph = own.graph(finding.rank, finding.graph) if own is not None else None

    def runs_of(rank: int):
        step = steps.get(rank, finding.iteration)
        return step.executions() if step is not None else []

    check = compare(finding.rank, group, runs_of, access, knowledge(),
                    getattr(graph, "data_inputs", frozenset()), only=[finding.op_name, *reached])
    cause.evidence.append(check.text)
    if check.suspect and cause.cause == CAUSE_UNKNOWN:
        first = next(d for d in check.differences if finding.rank in d.odd)
        peers = ", ".join(str(r) for r in check.group if r not in first.odd)
        cause.evidence.insert(0, f"the recompute alone could not decide: {cause.reason}")
        cause.cause = CAUSE_DEVICE
        cause.reason = (f"its data-parallel replicas disagree: rank {finding.rank}'s {first.name} differs from ranks "
                        f"{peers}, which agree ({first.detail})")
        cause.advice = ADVICE[CAUSE_DEVICE]


def diagnose_finding(finding: Finding, step: _Step, access: TensorAccess, *, mindspore: bool = True,
                     run: Optional[OpExecution] = None, graph_of=None) -> Cause:
    if finding.kind == CROSS_RANK:
        return Cause(CAUSE_UNKNOWN, "not recomputed: a collective delivered the value; its cause is on the rank "
                     "that sent it")
    ex = run if run is not None else _execution(step, finding)
    if ex is None:
        return Cause(CAUSE_UNKNOWN, "not recomputed: the op's own files were not found in its step")
    if graph_of is not None and run is not None:
        node, graph = graph_of(ex)
    else:
        graph = step.graph(finding.rank, finding.graph)
        node = graph.find(finding.op_name) if graph is not None else None
    produced = _produced(ex, step, node, graph, access)
    return diagnose(ex, access, node=node, graph=graph, produced=produced, step=step.executions,
                    mindspore=mindspore)


def _execution(step: _Step, finding: Finding) -> Optional[OpExecution]:
    names = {finding.op_name}
    if finding.full_name:
        from ..names import scope_to_file_name
        names.add(scope_to_file_name(finding.full_name))
    matches = [ex for name in names for ex in step.named(name) if ex.graph == finding.graph]
    if not matches:
        return None
    return min(matches, key=lambda ex: abs(ex.time - finding.timestamp))


def _produced(ex: OpExecution, step: _Step, node, graph, access) -> Optional[List[TensorEvent]]:
    """Where the op's results are when its outputs were not dumped: the inputs it writes in place, or, in an
    inputs-only dump, the input of a consumer it feeds (found through the saved graph)."""
    if ex.outputs:
        return None
    written = knowledge().written_inputs(ex.op_type)
    own = [e for e in ex.inputs if e.slot in written]
    if own:
        return own
    if node is None or graph is None:
        return None
    fed = []
    for consumer in step.executions():
        if consumer.iteration != ex.iteration or consumer.graph != ex.graph:
            continue
        cnode = graph.find(consumer.op_name)
        if cnode is None or node.full_name not in cnode.inputs:
            continue
        for event in consumer.inputs:
            if event.slot < len(cnode.inputs) and cnode.inputs[event.slot] == node.full_name:
                fed.append(event)
    bad = [e for e in fed if access.bad(e)]
    if bad:
        bad[0].slot = 0 if bad[0].slot is None else bad[0].slot
    return [_as_output(bad[0])] if bad else None


def _as_output(event: TensorEvent) -> TensorEvent:
    """A consumer's input read as the producer's output 0 (a copy: the walk's event is left as it was)."""
    from dataclasses import replace
    return replace(event, io="output", slot=0)
