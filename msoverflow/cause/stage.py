"""The diagnose stage of the analysis chain (msoverflow/analysis.py): every origin of the decision gets its cause
(Finding.cause), recomputed from the dump.

It is handed the decision and what the walk already holds: the op run each origin was built from and its saved
graph. A (rank, step) is read again only when a cause needs more of it (a zero denominator's producer, a forward
entry, a consumer's input, a data-parallel peer's copy), and then once. A decision without origins never reaches
this module. Reading a tensor that fails here is a warning and an `unknown` cause, never an error of the analysis.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, Dict, List, Optional

from ..dataflow import StepIndex, StepReads
from ..evaluate import TensorAccess
from ..model import (
    BASIS_ENTERED,
    CAUSE_DATA,
    CAUSE_DEVICE,
    CAUSE_UNKNOWN,
    CROSS_RANK,
    LIKELY_ORIGIN,
    MADE_BY_NO_OP,
    ORIGIN,
    OVERFLOW,
    PROPAGATOR,
    Cause,
    Finding,
    OpExecution,
    TensorEvent,
)
from ..rules.corruption import CORRUPTED
from ..rules.knowledge import knowledge
from .cause import ADVICE
from .cause import diagnose as diagnose_op

if TYPE_CHECKING:
    from ..findings import Decision
    from ..graphs import SavedGraphs
    from ..layout import Dump, Plan
    from ..parallel import Walked
    from .between import StoredBefore

Warn = Callable[[str], None]
# What reading a dump's tensors again may raise (a file truncated or replaced since the walk, a header that lies)
READ_FAULTS = (OSError, ValueError, IndexError, TypeError, OverflowError, MemoryError)


def to_diagnose(decision: "Decision") -> List[Finding]:
    """The findings whose cause is looked for: the origins (first, likely, the later ones), and the first finding
    whatever its role (an op first seen with a bad input: its cause is where that input came from)."""
    out: List[Finding] = []
    taken = set()           # ids: a set, not a scan of `out` (20,000 origins on one rank took minutes)
    for finding in [decision.first, decision.likely, *decision.anomalies]:
        if finding is None or id(finding) in taken:
            continue
        if finding.role in (ORIGIN, LIKELY_ORIGIN) or finding is decision.first:
            out.append(finding)
            taken.add(id(finding))
    return out


def diagnose(decision: "Decision", dump: "Dump", plan: "Plan", walked: "Walked", graphs: "SavedGraphs",
             warn: Warn, parallel=None, mindspore: bool = True) -> "Decision":
    """A new Decision whose origins carry their cause (and the recommendation that follows it); the findings
    handed in are left as they were. parallel: the analysis's parallel_layout.ParallelSpec (the data-parallel
    groups whose replicas are compared, resolved only when an origin needs them)."""
    wanted = to_diagnose(decision)
    if not wanted:
        return decision
    steps = _Steps(dump, plan, walked, graphs, warn)
    access = steps.reads.access
    groups = _Groups(parallel, dump, walked)
    # the op run each finding was built from: the walk's own (findings name their run's op, graph and time)
    runs = {(ex.rank, ex.step, ex.graph, ex.op_name, ex.time): ex for ex, _v in decision.judged}
    reached = [f.op_name for f in decision.propagation if decision.first is not None
               and (f.rank, f.step) == (decision.first.rank, decision.first.step)]
    diagnosed: Dict[int, Finding] = {}
    for finding in wanted:
        run = runs.get((finding.rank, finding.step, finding.graph, finding.op_name, finding.timestamp))
        cause = _cause(finding, run, steps, access, warn, mindspore=mindspore and finding is decision.first)
        if cause.cause in (CAUSE_DEVICE, CAUSE_UNKNOWN):
            _replica_evidence(finding, cause, reached if finding is decision.first else [], groups, steps, access)
        diagnosed[id(finding)] = dataclasses.replace(finding, cause=cause, evidence=_made_by_no_op(finding, cause),
                                                     recommendation=_recommendation(finding, cause))

    def new(f: Finding) -> Finding:
        return diagnosed.get(id(f), f)
    decision = dataclasses.replace(decision, first=new(decision.first) if decision.first is not None else None,
                                   likely=new(decision.likely) if decision.likely is not None else None,
                                   anomalies=[new(f) for f in decision.anomalies],
                                   flagged=[new(f) for f in decision.flagged])
    first = decision.first
    if first is None or first.role != ORIGIN or first.cause is None or \
            first.cause.cause in (CAUSE_DEVICE, CAUSE_DATA):
        return decision
    run = runs.get((first.rank, first.step, first.graph, first.op_name, first.timestamp))
    return _entered(decision, first, run, steps, access)


def _made_by_no_op(finding: Finding, cause: Cause) -> List[str]:
    """The finding's evidence, where "the origin is in an op ... not dumped" gives way to what the cause showed: a
    weight changed in memory between the steps was made by no op at all."""
    from ..findings import NOT_DUMPED
    if cause.basis not in MADE_BY_NO_OP:
        return finding.evidence
    return [("its input was already bad, and no op made that value: the weight changed in memory between the "
             "steps (see the cause)") if line == NOT_DUMPED else line for line in finding.evidence]


def _entered(decision: "Decision", first: Finding, run: Optional[OpExecution], steps: "_Steps",
             access: TensorAccess) -> "Decision":
    """The origin moved upstream to the op that read its value from a weight corrupted in memory (a few values
    absurd for the weight, changed since the step before with no writer: msoverflow/cause/entered.py); when that
    is not shown, the first origin stays and its cause says what the weight showed or what evidence is missing."""
    from . import entered
    step = steps.get(first.rank, first.step, scanned_only=True)
    graph = steps.graphs.graph(first.rank, first.graph)
    if step is None or graph is None or first.cause is None:
        return decision
    ex = run if run is not None else _execution(step, first)
    if ex is None:
        return decision
    try:
        found = entered.find(ex, graph, step.executions, access, knowledge(),
                             _stored_before(steps, first.rank, first.step))
    except READ_FAULTS as exc:
        steps.warn(f"{first.op_name}: where its input came from could not be read ({type(exc).__name__}: {exc})")
        return decision
    if found is None:
        return decision
    itself = found.reader.key == ex.key
    carried = (f"its input {found.slot} is the weight {found.parameter}, holding |x| {found.value:.4g}" if itself else
               f"its input carries |x| {found.value:.4g} unchanged from the weight {found.parameter}, read by "
               f"{found.reader.op_type} ({found.reader.op_name}) in step {first.step}")
    if found.written or not found.stored or found.change is None or found.change.verdict != CORRUPTED:
        if found.written:
            why = "a kernel of this step wrote it before that read"
        elif not found.stored:
            why = (f"the dump does not hold it after step {first.step - 1}, so whether it changed in memory (a "
                   "device fault) or the program set it cannot be shown")
        elif found.change is None:
            why = f"it is as step {first.step - 1} left it"
        else:
            why = found.change.text
        cause = dataclasses.replace(first.cause, evidence=[*first.cause.evidence, f"{carried}: {why}"])
        moved = dataclasses.replace(first, cause=cause)
        return dataclasses.replace(decision, first=moved,
                                   anomalies=[moved if f is first else f for f in decision.anomalies])
    return _moved(decision, first, found, itself, steps, access)


def _moved(decision: "Decision", first: Finding, found, itself: bool, steps: "_Steps",
           access: TensorAccess) -> "Decision":
    """The reader of the corrupted weight as the first origin, device; the op that overflowed on it becomes the
    first op its value reached (itself: the reader is the op that overflowed, it stays the origin)."""
    from ..findings import describe
    from ..rules.judge import Verdict
    from .where import MEMORY_STOMP
    assert found.change is not None and first.cause is not None
    reader, name, change = found.reader, found.parameter, found.change
    made = "overflowed on it" if first.kind == OVERFLOW else f"made {first.kind} values of it"
    detail = (f"input {found.slot}, the weight {name}, holds |x| up to {found.value:.4g} that no op of step "
              f"{first.step} wrote; {first.op_type} downstream {made}")
    verdict = Verdict(ORIGIN, first.kind, detail, advice=first.advice,
                      evidence=[f"the value reached {' -> '.join(found.path)} unchanged before {first.op_type} "
                                "made its bad value"])
    origin = first if itself else describe(reader, verdict, access, steps.graphs, knowledge(), full=True)
    cause = Cause(CAUSE_DEVICE, advice=ADVICE[CAUSE_DEVICE], basis=BASIS_ENTERED, reason=(
        f"input {found.slot}, the weight {name} as {reader.op_type} read it in step {first.step}: {change.text}; "
        f"its dump after step {first.step - 1} holds what that step left there, and no op of step {first.step} "
        "wrote it before this read: it changed in memory between the steps (a device fault, or a stray write)"))
    cause.evidence = [f"{change.changed} of {change.total} values of {name} differ from its dump after step "
                      f"{first.step - 1}",
                      f"recomputed alone, {first.op_type} is right from its inputs: {first.cause.reason}"]
    cause.pattern = MEMORY_STOMP
    cause.pattern_text = (f"{change.changed} of {change.total} values turned absurd for the weight: the pattern of a "
                          "memory stomp")
    cause.where = change.block
    origin = dataclasses.replace(origin, cause=cause, recommendation=_recommendation(origin, cause))
    if itself:
        return dataclasses.replace(decision, first=origin,
                                   anomalies=[origin if f is first else f for f in decision.anomalies])
    reached = dataclasses.replace(first, role=PROPAGATOR)
    return dataclasses.replace(decision, first=origin,
                               anomalies=[origin, *[f for f in decision.anomalies if f is not first]],
                               propagation=[reached, *decision.propagation])


def follow_origin(rows, before: Optional[Finding], after: Optional[Finding]) -> None:
    """The rank table's row names the first origin the diagnosis settled on (it may have moved upstream)."""
    if before is None or after is None or (before.op_name, before.graph) == (after.op_name, after.graph):
        return
    for row in rows:
        if (row.rank, row.step, row.op_name) == (before.rank, before.step, before.op_name):
            row.op_name, row.op_type, row.time = after.op_name, after.op_type, after.timestamp


def _cause(finding: Finding, run: Optional[OpExecution], steps: "_Steps", access: TensorAccess, warn: Warn,
           mindspore: bool) -> Cause:
    step = steps.get(finding.rank, finding.step, scanned_only=True)
    if step is None:
        return Cause(CAUSE_UNKNOWN, "not recomputed: its step was not scanned")
    try:
        # MindSpore's subprocess (seconds) only for the first origin; the others get what numpy can say
        return diagnose_finding(finding, step, access, mindspore=mindspore, run=run, graphs=steps.graphs,
                                stored_before=_stored_before(steps, finding.rank, finding.step))
    except READ_FAULTS as exc:     # a file that changed or lies about itself: a warning, never fatal
        warn(f"{finding.op_name}: its cause could not be found ({type(exc).__name__}: {exc})")
        return Cause(CAUSE_UNKNOWN, f"not recomputed: {type(exc).__name__} while reading its tensors")


def _stored_before(steps: "_Steps", rank: int, step: int) -> "StoredBefore":
    """A Parameter (graph name) as the dump holds it after the step before on the rank (that step is read only
    when asked: a weight read bad that no dumped op made). None when a kernel that writes in place (an optimizer
    in a graph of its own) ran after that file was written: then it is not the last value the step left."""
    from ..dataflow import parameter_name
    kn = knowledge()

    def stored(name: str) -> Optional[TensorEvent]:
        before = steps.get(rank, step - 1) if step > 0 else None
        if before is None:
            return None
        run = next((ex for ex in before.named(parameter_name(name)) if ex.is_parameter and ex.outputs), None)
        if run is None or any(kn.written_inputs(ex.op_type) and ex.time > run.time for ex in before.executions()):
            return None
        return run.outputs[0]
    return stored


class _Step:
    """One (rank, step), read again through the dump's step cache only on first need (dataflow.StepIndex), its
    runs as executions."""

    def __init__(self, reads: StepReads, rank: int, step: int):
        self.reads, self.rank, self.step = reads, rank, step

    @property
    def index(self) -> StepIndex:
        return self.reads(self.rank, self.step) or StepIndex([])

    def executions(self) -> List[OpExecution]:
        return [run.execution() for run in self.index.runs]

    def named(self, name: str) -> List[OpExecution]:
        """The step's runs of one op name (indexed once: a step may hold thousands of origins)."""
        return [run.execution() for run in self.index.named(name)]


class _Steps:
    """The (rank, step)s diagnosis reads again, through the dump's one step cache (Dump.step_reads): the
    scanned ones, and others of the opened dump on demand (a data-parallel peer's step the walk did not need)."""

    def __init__(self, dump: "Dump", plan: "Plan", walked: "Walked", graphs: "SavedGraphs", warn: Warn):
        self.dump, self.graphs, self.warn = dump, graphs, warn
        if dump.step_reads is None:        # a dump opened without the analysis (the stage called on its own)
            dump.access = dump.access if dump.access is not None else TensorAccess(warn)
            dump.step_reads = StepReads(dump, dump.access, warn)
            dump.step_reads.scanned = walked.scanned
        self.reads: StepReads = dump.step_reads
        self.scanned = {(u.rank, u.step) for u in plan.units if u.step in walked.scanned.get(u.rank, ())}

    def get(self, rank: int, step: int, scanned_only: bool = False) -> Optional[_Step]:
        if scanned_only and (rank, step) not in self.scanned:
            return None
        return _Step(self.reads, rank, step) if self.reads.unit(rank, step) is not None else None


class _Groups:
    """The data-parallel group of a rank, from the parallel layout, resolved on first need (only an origin the
    recompute calls a device fault or cannot decide asks, on a dump of several ranks). Its warnings are not said
    here: the report's rank table resolves the same layout and says them once."""

    def __init__(self, parallel, dump: "Dump", walked: "Walked"):
        self.parallel, self.dump, self.walked = parallel, dump, walked
        self._coords: Optional[Dict[int, Optional[Dict[str, int]]]] = None

    @property
    def ranks(self) -> List[int]:
        return sorted(self.walked.runs)

    def of(self, rank: int) -> List[int]:
        from .replicas import dp_group
        if self._coords is None:
            from ..parallel_layout import resolve
            roots: Dict[int, str] = {}
            for (r, _graph), root in sorted(self.walked.rank_roots.items(), key=lambda i: (i[0][0], str(i[0][1]))):
                if root:
                    roots.setdefault(r, root)
            # resolved once per analysis (rank_rows.rank_rows, on the Dump); resolved here only when called alone
            layout = self.dump.layout if getattr(self.dump, "layout_resolved", False) else \
                resolve(self.parallel, self.dump.path, self.ranks, roots, lambda message: None)
            self._coords = {r: layout.coords(r) if layout is not None else None for r in self.ranks}
        return dp_group(rank, self._coords)


def _recommendation(finding: Finding, cause: Cause) -> str:
    """The recommendation follows the cause (the judgement's one rule for a finding's fix)."""
    from ..judgement.table import finding_fix
    return finding_fix(finding, cause.cause, cause.advice)


def _replica_evidence(finding: Finding, cause: Cause, reached: List[str], groups: _Groups, steps: _Steps,
                      access: TensorAccess) -> None:
    """Data-parallel replicas of what the origin made (and what its value reached) on the other ranks of its dp
    group: a rank holding a copy its peers do not is the suspect device. Only for origins the recompute calls
    a device fault or could not decide: the others need no more reading."""
    from .replicas import compare
    if len(groups.ranks) < 2:
        return
    group = groups.of(finding.rank)
    if len(group) < 2:
        cause.evidence.append("replicas: not compared (the data-parallel groups are not known; --parallel "
                              "dp=N,tp=M gives them)")
        return
    graph = steps.graphs.graph(finding.rank, finding.graph)

    def runs_of(rank: int):
        step = steps.get(rank, finding.step)
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


def diagnose_finding(finding: Finding, step: _Step, access: TensorAccess, *, graphs: "SavedGraphs",
                     mindspore: bool = True, run: Optional[OpExecution] = None,
                     stored_before: Optional["StoredBefore"] = None) -> Cause:
    """The cause of one finding. run: the op run the walk built it from (None: found again in its step, which
    is then read)."""
    if finding.kind == CROSS_RANK:
        return Cause(CAUSE_UNKNOWN, "not recomputed: a collective delivered the value; its cause is on the rank "
                     "that sent it")
    ex = run if run is not None else _execution(step, finding)
    if ex is None:
        return Cause(CAUSE_UNKNOWN, "not recomputed: the op's own files were not found in its step")
    graph = graphs.graph(finding.rank, finding.graph)
    node = graph.find(ex.op_name) if graph is not None else None
    if node is None and graph is not None and run is None:
        node = graph.find(finding.op_name)
    produced = _produced(ex, step, node, graph, access)
    return diagnose_op(ex, access, node=node, graph=graph, produced=produced, step=step.executions,
                       mindspore=mindspore, stored_before=stored_before)


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
        if consumer.step != ex.step or consumer.graph != ex.graph:
            continue
        cnode = graph.find(consumer.op_name)
        if cnode is None or node.full_name not in cnode.inputs:
            continue
        for event in consumer.inputs:
            if event.slot < len(cnode.inputs) and cnode.inputs[event.slot] == node.full_name:
                fed.append(event)
    bad = [e for e in fed if access.bad(e)]
    return [_as_output(bad[0])] if bad else None


def _as_output(event: TensorEvent) -> TensorEvent:
    """A consumer's input read as the producer's output 0 (a copy: the walk's event is left as it was)."""
    return dataclasses.replace(event, io="output", slot=0)
