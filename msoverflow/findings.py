"""Decide the findings: from what the walk judged to the first origin, the later ones, how the first one spread
and the ops only the hardware flagged. Origin rules that need the whole dump live here (a Cell wrapping an
origin is no second origin, the order of candidates across ranks, the likely origin of a cut file); the rules of
one op execution live in msoverflow/rules/.

decide() is pure: it hands back a new Decision and changes neither the walk's facts nor its verdicts (a demoted
verdict is a new Verdict). It reads tensors only through the TensorAccess, for the numbers a finding shows.
"""
from __future__ import annotations

import dataclasses
import os
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

from . import names
from .dataflow import Flow
from .errors import reading
from .evaluate import TensorAccess
from .graphs import SavedGraphs
from .model import (
    CROSS_RANK,
    FLAGGED,
    INVALID,
    LIKELY_ORIGIN,
    MADE_BY_NO_OP,
    ORIGIN,
    OVERFLOW,
    PROPAGATOR,
    SUSPECT,
    Contained,
    Finding,
    GraphNode,
    Handled,
    OpExecution,
    OverflowRecord,
    RunKey,
    Status,
    StepCompleteness,
    TensorEvent,
    TensorSummary,
)
from .ranks import RankTable
from .rules import Verdict
from .rules.judge import nan_from_negative_infinity
from .rules.knowledge import OpKnowledge
from .scope import enclosing_class

if TYPE_CHECKING:
    from .layout import DumpDir
    from .parallel import Walked

Judged = List[Tuple[OpExecution, Verdict]]


@dataclass(frozen=True)
class Decision:
    """What the dump says, as findings. Later stages (completeness.settle, the diagnosis) return new Decisions."""
    judged: Judged                          # every op not clean, in rank, step, time order (demotions applied)
    table: RankTable                        # per-rank positions of origins and arrivals
    unmatched: List[OverflowRecord]         # Opdebug records that name no dumped op
    first: Optional[Finding]
    anomalies: List[Finding]                # origins in step order, the first included
    propagation: List[Finding]              # how the first origin spread in its step
    flagged: List[Finding]                  # flagged ops whose inputs could not decide
    tensors_read_to_decide: int = 0         # tensors the walk read to judge (not those read to describe)
    likely: Optional[Finding] = None        # LIKELY_ORIGIN: its output file is cut short (never proven)
    incomplete: List[StepCompleteness] = field(default_factory=list)   # (rank, step)s found incomplete
    reasons: List[str] = field(default_factory=list)   # why no answer stands, from the stages after decide
    # non-finite values that are no fault (the harmless stage, msoverflow/harmless/stage.py)
    contained: List[Contained] = field(default_factory=list)
    handled: List[Handled] = field(default_factory=list)
    strict: bool = False                    # they stayed findings (--strict)
    # the first bad value was first seen as an op's input and no dumped op made it (unmade_note: what to dump)
    unmade: bool = False


# what the user hears when no dumped op made the first bad value and nothing later showed where it was made
NO_FILTERS_NOTE = "no dumped op created the first bad value: it is first seen as an input; dump without filters"
NOT_DUMPED = ("its input was already bad, and no dumped op created that value: the origin is in an op, step or "
              "rank that was not dumped")


def decide(walked: "Walked", graphs: SavedGraphs, access: TensorAccess, kn: OpKnowledge, note) -> Decision:
    """The findings of a walk; `note` takes what the user should hear (an origin not dumped, an unmatched record)."""
    reads_to_decide = access.tensors_read - walked.side_reads
    demoted = _not_second_origins(walked.judged, graphs, access.stats)
    judged = [(ex, demoted.get(ex.key, v)) for ex, v in walked.judged]
    table = RankTable(walked.runs, judged, walked.arrivals)
    candidates = [(ex, v) for ex, v in judged if v.role in (ORIGIN, SUSPECT) and v.kind != CROSS_RANK]
    after_arrival = set(walked.after_arrival)
    for ex, _v in candidates:      # a collective delivered a bad value to this rank earlier in the same step
        arrival = table.first_arrival(ex.rank, before=ex, same_step=True) if ex.key not in after_arrival else None
        if arrival is not None and arrival.step == ex.step:
            after_arrival.add(ex.key)
    unmatched = [r for r in walked.records if r.matched_op is None]
    # No origin anywhere but a rank received bad values: report the earliest cross-rank arrival.
    if not candidates and not unmatched:
        candidates = [(ex, v) for ex, v in judged if v.kind == CROSS_RANK][:1]
    unmade = False
    if not candidates and not unmatched:
        # Bad values, but every bad op's input was already bad: the op that created it is not in the dump
        # (kernel filter, overflow-only mode, a step not dumped). Never clean: name the first bad op seen.
        seen = _ordered(walked, [(ex, v) for ex, v in judged if v.role == PROPAGATOR], after_arrival, kn)
        given = _given_by_program(seen[0], graphs) if seen else ""
        made = _nan_from_fill(seen, access) if given else None
        if made is not None:
            # the program's -inf fill is no fault; the op that made NaN of it is (a fully masked row)
            judged = [(ex, made[1] if ex.key == made[0].key else v) for ex, v in judged]
            table = RankTable(walked.runs, judged, walked.arrivals)
            candidates = [(made[0], dataclasses.replace(made[1], evidence=made[1].evidence + [
                f"the -inf came from the program: {given}"]))]
        else:
            candidates = [(ex, dataclasses.replace(v, evidence=v.evidence + [
                f"its input was already bad: {given}, no op made it" if given else NOT_DUMPED]))
                for ex, v in seen[:1]]
        # an unread file may hold it: no advice to dump more. The advice waits for the diagnosis (unmade_note): a
        # weight changed in memory between the steps was made by no op, dumped or not
        unmade = bool(candidates) and not given and not walked.unreadable
    after_forward = _after_their_forward(candidates, graphs)
    candidates = _ordered(walked, candidates, after_arrival, kn, _fed_by_bad(candidates, judged, graphs),
                          after_forward)
    found = []
    for ex, v in candidates:
        with reading(_file_of(ex)):
            found.append(describe(ex, v, access, graphs, kn, full=True))
    from_candidates = found[0] if found else None
    found += [_unmatched_finding(record) for record in unmatched]
    found.sort(key=lambda f: f.step)      # stable: an unmatched record goes last in its step
    origins = [f for f in found if f.role != SUSPECT]
    suspects = [f for f in found if f.role == SUSPECT]
    first = found[0] if found else None
    propagation: List[Finding] = []
    if candidates and first is from_candidates:
        first_ex = candidates[0][0]
        # from the first origin, or from its gradient when the scheduler ran that earlier (what it spread counts)
        since = min([first_ex.time] + [ex.time for ex, _v in candidates if ex.key in after_forward
                                       and (ex.rank, ex.step) == (first_ex.rank, first_ex.step)])
        propagation = [describe(ex, v, access, graphs, kn, full=False) for ex, v in judged
                       if v.role == PROPAGATOR and ex.rank == first_ex.rank and ex.step == first_ex.step
                       and ex.time >= since]
    for record in unmatched:
        note(f"{record.source}: overflow record ({record.unit}, task {record.task_id}, stream "
             f"{record.stream_id}) matches no dumped op in its directory")
    return Decision(judged=judged, table=table, unmatched=unmatched, first=first,
                    anomalies=([first] if first is not None and first.role == SUSPECT else []) + origins,
                    propagation=propagation, flagged=[f for f in suspects if f is not first],
                    tensors_read_to_decide=reads_to_decide, unmade=unmade and first is from_candidates)


def unmade_note(decision: Decision, note) -> None:
    """Tell the user to dump without filters when no dumped op made the first bad value, unless the diagnosis
    showed where it was made without an op (a weight changed in memory between the steps)."""
    first = decision.first
    if not decision.unmade or first is None:
        return
    if first.cause is not None and first.cause.basis in MADE_BY_NO_OP:
        return
    note(NO_FILTERS_NOTE)


def _nan_from_fill(seen: Judged, access: TensorAccess):
    """(op run, origin verdict) of the first op, in the first bad op's rank and step, that made NaN from inputs
    whose bad values are all -inf: the -inf is a fill the program gave, the NaN that op's own. None: no such op."""
    first = seen[0][0]
    for ex, _v in seen:
        if (ex.rank, ex.step) != (first.rank, first.step):
            continue
        made = nan_from_negative_infinity(ex, access)
        if made is not None:
            return ex, made
    return None


def _given_by_program(pair, graphs: SavedGraphs) -> str:
    """'input 0 is a constant of the program' / 'input 0 is the graph input x' when the saved graph says the first
    bad input came from the program or the data, not from an op (then no filter hid its maker); '' otherwise."""
    ex, v = pair
    node, _graph = graphs.node(ex)
    event = v.bad_input
    if node is None or event is None or event.slot >= len(node.inputs):
        return ""
    ref = node.inputs[event.slot]
    if ref == "const":
        return f"input {event.slot} of {ex.op_type} is a constant of the program"
    if ref.startswith("param:"):
        return f"input {event.slot} of {ex.op_type} is the graph input or parameter {ref[len('param:'):]}"
    return ""


def proven(f: Finding) -> bool:
    """An origin shown by its own inputs (or flagged by the hardware), not a value a collective or an input brought."""
    return f.role == SUSPECT or (f.role == ORIGIN and f.kind != CROSS_RANK)


def _not_second_origins(judged: Judged, graphs: SavedGraphs,
                        stats_of: Callable = lambda event: None) -> Dict[RunKey, Verdict]:
    """The demoted verdicts (by their execution's key). A Cell entry of a framework dump (msprobe:
    `Cell.head.NormHead.backward.0`) wraps the ops that ran inside it: when an op inside its scope already went bad
    in the same step, the Cell's bad output is that value passing through, not a later origin.
    stats_of(event): the statistics of a tensor the dump states none of (msprobe task "tensor": npy files only),
    read only for the shapes that a Cell entry's bad outputs have."""
    made: Dict[Tuple[int, int], List[str]] = {}
    made_nodes: Dict[Tuple[int, int], List[GraphNode]] = {}
    demoted: Dict[RunKey, Verdict] = {}
    wrappers = [ex for ex, v in judged if v.role in (ORIGIN, SUSPECT) and v.kind != CROSS_RANK
                and getattr(graphs.node(ex)[0], "wraps_scope", None) is not None]
    if not wrappers:
        return demoted
    shapes = {tuple(e.shape) for ex in wrappers for e in ex.outputs if e.shape is not None}
    outputs = _api_outputs(judged, graphs, shapes, stats_of)
    for ex, v in judged:
        if v.role not in (ORIGIN, SUSPECT) or v.kind == CROSS_RANK:
            continue
        node, _graph = graphs.node(ex)
        name = node.full_name if node is not None else ex.op_name
        if node is not None and node.wraps_scope is not None:
            inside = [n for n in made.get((ex.rank, ex.step), []) if n.startswith(node.wraps_scope + "/")]
            if inside:
                demoted[ex.key] = dataclasses.replace(v, role=PROPAGATOR, evidence=v.evidence + [
                    f"its Cell holds {inside[0]}, which made the bad value first"])
                continue
            same = _same_value(ex, outputs.get((ex.rank, ex.step, _direction(ex.op_name)), {}), stats_of)
            if same is not None:
                demoted[ex.key] = dataclasses.replace(v, role=PROPAGATOR, evidence=v.evidence + [
                    f"its output is the output of {same} (same shape and statistics): the same value, made inside "
                    "it"])
                continue
            within = _inside_by_source(node, made_nodes.get((ex.rank, ex.step), []), _direction(ex.op_name))
            if within is not None:
                demoted[ex.key] = dataclasses.replace(v, role=PROPAGATOR, evidence=v.evidence + [
                    f"{within}, which made the bad value first, runs in the source of its Cell's class"])
                continue
        made.setdefault((ex.rank, ex.step), []).append(name)
        if node is not None:
            made_nodes.setdefault((ex.rank, ex.step), []).append(node)
    return demoted


def _inside_by_source(cell: GraphNode, made: List[GraphNode], backward: bool) -> Optional[str]:
    """Without construct.json an API entry's scope names no Cell (`Gradients/Default/Primitive.sqrt.Sqrt.0.backward`):
    the API entry of the same step and pass, made bad before the Cell entry, whose user source line lies in the
    body of a class of the Cell entry's class (NormHead) ran inside it."""
    cls = (cell.wraps_scope or "").rsplit("/", 1)[-1].rsplit("-", 1)[-1]
    for node in made:
        if (node.wraps_scope is None and node.full_name.rsplit("/", 1)[0] in ("Default", "Gradients/Default")
                and _direction(node.full_name) == backward and node.source_file and node.source_line
                and enclosing_class(node.source_file, node.source_line) == cls):
            return node.full_name.rsplit("/", 1)[-1]
    return None


def _direction(op_name: str) -> bool:
    """A framework dump entry of the backward pass (`Torch.sqrt.0.backward`, `Module.head.NormHead.backward.0`)."""
    return ".backward" in op_name


def _fingerprint(event, stats_of: Callable = lambda event: None) -> Optional[tuple]:
    """A tensor's shape and the dump's statistics of it (else stats_of's); None when none or nothing bad."""
    st = event.stats if event.stats is not None else stats_of(event)
    if st is None or event.shape is None or not (st.nonfinite or st.over_range):
        return None
    numbers = tuple(x if x is None or x == x else "nan" for x in (st.min, st.max, st.max_abs))
    return (tuple(event.shape), event.dtype, st.nan, st.posinf, st.neginf) + numbers


def _api_outputs(judged: Judged, graphs: SavedGraphs, shapes: Set[tuple],
                 stats_of: Callable) -> Dict[Tuple[int, int, bool], Dict[tuple, str]]:
    """Per (rank, step, backward?): the bad outputs (of the given shapes) of the ops that are not Cell/Module
    entries, by fingerprint."""
    found: Dict[Tuple[int, int, bool], Dict[tuple, str]] = {}
    for ex, _v in judged:
        node, _graph = graphs.node(ex)
        if node is None or node.wraps_scope is not None:
            continue
        for event in ex.outputs:
            key = _fingerprint(event, stats_of) if event.shape is not None and tuple(event.shape) in shapes else None
            if key is not None:
                found.setdefault((ex.rank, ex.step, _direction(ex.op_name)), {}).setdefault(key, ex.op_name)
    return found


def _same_value(ex: OpExecution, api_outputs: Dict[tuple, str], stats_of: Callable) -> Optional[str]:
    """The op (not a Cell entry) of the same step and pass whose bad output a Cell/Module entry's bad output equals:
    a Module's forward returns what an API call inside it computed. Without construct.json the Module's scope does
    not hold its API calls; the equal value still says it is the same one."""
    for event in ex.outputs:
        key = _fingerprint(event, stats_of)
        if key is not None and key in api_outputs and api_outputs[key] != ex.op_name:
            return api_outputs[key]
    return None


def _ordered(walked: "Walked", candidates: Judged, after_arrival: Set[RunKey], kn: OpKnowledge,
             fed_by_bad: FrozenSet[RunKey] = frozenset(), after_forward: FrozenSet[RunKey] = frozenset()) -> Judged:
    """Ranks by evidence, never by clock. By step first. Within a step: a candidate on a rank that had not yet
    received a bad value through a collective comes first (pipeline: the last stage's backward feeds the earlier
    stages); an op proven by its inputs before one only the hardware flagged; a backward op after the forward op
    it differentiates when both made the bad value from one input (`after_forward`); a flagged op that consumes what
    others made (global norm, loss scale, optimizer) or whose producer in the saved graph already went bad
    (`fed_by_bad`) after the rest; then the time since the rank's own step began (clock offsets between ranks
    cancel), where the ranks' execution-order files put that rank's candidates in graph order; then the rank."""
    relative = {ex.key: ex.time - walked.step_start(ex.rank, ex.step) for ex, _v in candidates}
    # Flagged ops decided by nothing but their flags: a debug file's timestamp is when it was written, not when the
    # op ran (CANN), so on one rank the graph's order wins. Ops decided by their data keep the dump's time order
    # (on CPU the execution-order csv is not the run order).
    groups: Dict[Tuple[int, int, str], List[OpExecution]] = {}
    for ex, v in candidates:
        if ex.order is not None and v.role == SUSPECT:
            groups.setdefault((ex.rank, ex.step, ex.graph), []).append(ex)
    for members in groups.values():
        times = sorted(relative[ex.key] for ex in members)
        for ex, when in zip(sorted(members, key=lambda e: (e.order, relative[e.key])), times, strict=True):
            relative[ex.key] = when
    return sorted(candidates, key=lambda pair: (
        pair[0].step, pair[0].key in after_arrival, pair[1].role != ORIGIN, pair[0].key in after_forward,
        pair[1].role == SUSPECT and (kn.is_consumer(pair[0].op_type, pair[0].op_name) or pair[0].key in fed_by_bad),
        relative[pair[0].key], pair[0].rank))


def _after_their_forward(candidates: Judged, graphs: SavedGraphs) -> FrozenSet[RunKey]:
    """Backward ops whose forward op (the saved graph's record of the node it differentiates) is also an origin in
    the same step on the same rank, reading the same producer: log(0) and its gradient dout / 0 both make -inf from
    Softmax's 0. The scheduler may run the gradient first (its inputs are ready: dout does not depend on the
    forward's values), but the program's forward made the value first."""
    nodes = {}
    for ex, v in candidates:
        if v.role == ORIGIN:
            node, _graph = graphs.node(ex)
            if node is not None:
                nodes[ex.key] = (ex, node)
    forward = {(ex.rank, ex.step, node.full_name): node for ex, node in nodes.values()}
    after = set()
    for key, (ex, node) in nodes.items():
        differentiated = forward.get((ex.rank, ex.step, node.forward_name)) if node.forward_name else None
        if differentiated is not None and set(differentiated.inputs) & set(node.inputs):
            after.add(key)
    return frozenset(after)


def _fed_by_bad(candidates: Judged, judged: Judged, graphs: SavedGraphs) -> FrozenSet[RunKey]:
    """Flagged-undecided ops whose producer (from the saved graph) is an op that went bad in the same step on the
    same rank: they come after it."""
    bad = {(ex.rank, ex.step, ex.op_name) for ex, _v in judged}
    fed = set()
    for ex, v in candidates:
        if v.role != SUSPECT:
            continue
        node, graph = graphs.node(ex)
        producers = [p for p in (node.inputs if node else []) if p and not p.startswith("param:")]
        if any((ex.rank, ex.step, graph.file_name(p)) in bad for p in producers):
            fed.add(ex.key)
    return frozenset(fed)


def _unmatched_finding(record: OverflowRecord) -> Finding:
    """An Opdebug record that names no dumped op: the hardware saw an overflow the dump cannot place."""
    words = ", ".join(record.status_words) or "overflow"
    detail = (f"Opdebug record ({record.unit}, status {record.status:#x}: {words}) names task {record.task_id}, "
              f"stream {record.stream_id}, which matches no dumped op (file {record.source})")
    return Finding(rank=record.rank, graph=record.graph, step=record.step, op_type="unknown op",
                   op_name=f"task {record.task_id} stream {record.stream_id}", role=SUSPECT, kind=FLAGGED,
                   detail=detail, timestamp=record.timestamp, flags=[record],
                   recommendation="Dump this step with the ops' tensors (dump_mode 0, input_output 0) so the record "
                                  "can be matched to its op, then run analyze again.",
                   evidence=["the record's task/stream ids match no file in its directory or step"])


def _file_of(ex: OpExecution) -> str:
    """A file of this op execution, to name in an internal error."""
    for event in ex.inputs + ex.outputs:
        return event.source
    return ex.flags[0].source if ex.flags else f"{ex.op_type} {ex.op_name}"


def _summary(event: TensorEvent, access: TensorAccess, producer: Optional[str], full: bool) -> TensorSummary:
    stats = access.stats(event) if full else event.stats
    return TensorSummary(slot=event.slot, io=event.io, dtype=event.dtype, shape=event.shape, stats=stats,
                         payload_dtype=event.payload_dtype, producer=producer, note=event.note, file=event.source)


def describe(ex: OpExecution, v: Verdict, access: TensorAccess, graphs: SavedGraphs, kn: OpKnowledge,
             full: bool) -> Finding:
    """A judged op execution as a Finding: where it lives in the code, its tensors' numbers (read when `full`),
    the evidence and the advice."""
    node, graph = graphs.node(ex)
    op_type, op_name = ex.op_type, ex.op_name
    evidence = list(v.evidence)
    if v.via_producer and node is not None and v.bad_input is not None:
        # Inputs-only dump: name the producer of the first bad input as the op that created it.
        producer = node.inputs[v.bad_input.slot] if v.bad_input.slot < len(node.inputs) else None
        pnode = graph.by_full.get(producer) if producer else None
        if pnode is not None:
            evidence.append(f"seen first as input {v.bad_input.slot} of {ex.op_type} ({ex.op_name})")
            node, op_type, op_name = pnode, pnode.op_type, graph.file_name(pnode.full_name)
    place = graphs.place(ex, node, graph, op_type, forward_of=kn.forward_of)
    cell_type = place.cell_type
    at = place.cell_source or place.source
    if cell_type is None and v.role == ORIGIN and at is not None:
        cell_type = enclosing_class(at.file, at.line)
        if cell_type:
            evidence.append(f"Cell {place.cell + ' ' if place.cell_source and place.cell else ''}({cell_type}) "
                            "taken from the call trace and the source file (the scope name carries no Cell)"
                            if place.cell_source else
                            f"Cell {cell_type} taken from the source file (the scope name carries no Cell)")
    inputs, outputs = [], []
    if full or v.role == ORIGIN:
        for e in ex.inputs:
            producer = node.inputs[e.slot] if node and e.slot < len(node.inputs) else None
            inputs.append(_summary(e, access, producer, full))
        outputs = [_summary(e, access, None, full) for e in ex.outputs]
    den_slot = v.values.get("denominator_slot")
    if den_slot is not None and node is not None and int(den_slot) < len(node.inputs) and graph is not None:
        den_node = graph.by_full.get(node.inputs[int(den_slot)])
        if den_node is not None:
            code = f": {den_node.source_code}" if den_node.source_code else ""
            evidence.append(f"the zero denominator (input {den_slot}) comes from {den_node.op_type} "
                            f"{den_node.full_name}{code}")
    if node is not None and node.kernel_out and node.inferred_out and node.kernel_out != node.inferred_out:
        evidence.append(f"kernel ran in {node.kernel_out} while the graph declares {node.inferred_out}")
    if node is not None and node.is_backend_cast:
        evidence.append("a Cast the backend inserted (not in the user's code)")
    for summary in inputs:
        if summary.range_used is not None and summary.stats is not None and summary.dtype in ("float16", "bfloat16"):
            evidence.append(f"input {summary.slot} max |x| {summary.stats.max_abs:.6g} = "
                            f"{summary.range_used:.0%} of {summary.dtype} max")
    values = {"op_type": op_type, "op_name": op_name, "forward_op": place.forward_op or op_type,
              "cell": f"{place.cell} ({cell_type})" if place.cell else "its Cell", "dtype": "float16", **v.values}
    inner = (full or v.role == ORIGIN) and node is not None and graph is not None and bool(node.forward_name) \
        and node.full_name in _flow(graph, kn).feeds_forward()
    return Finding(rank=ex.rank, graph=ex.graph, step=ex.step, op_type=op_type, op_name=op_name,
                   role=v.role, kind=v.kind, detail=v.detail, timestamp=ex.time, full_name=place.full_name,
                   forward_op=place.forward_op, inner_gradient=inner, cell=place.cell, cell_type=cell_type, source=place.source,
                   inputs=inputs, outputs=outputs, flags=list(ex.flags),
                   recommendation=kn.recommend(v.advice, **values) if v.role in (ORIGIN, SUSPECT) else "",
                   evidence=evidence, producers=list(node.inputs) if node else [], advice=v.advice,
                   ir_file=getattr(graph, "path", None) if node else None, ir_line=node.ir_line if node else None)


_FLOWS: "weakref.WeakKeyDictionary[object, Flow]" = weakref.WeakKeyDictionary()


def _flow(graph, kn: OpKnowledge) -> Flow:
    """One Flow per saved graph, whoever describes its ops (20,000 origins on one rank share it)."""
    flow = _FLOWS.get(graph)
    if flow is None:
        flow = _FLOWS[graph] = Flow(graph, kn)
    return flow


def likely_origin(steps: List[StepCompleteness], unreadable: Iterable[str], judged: Judged, graphs: SavedGraphs,
                  dirs: List["DumpDir"], access: TensorAccess) -> Optional[Tuple[OpExecution, Verdict]]:
    """(OpExecution, Verdict) of the op X when the only files that could not be read are X's outputs, X's inputs
    are finite and an op fed by X (in the saved graph) received a bad value from it; else None. The consumer's
    input is X's output as it arrived: it tells what X made, so the kind is named; the role stays
    LIKELY_ORIGIN (the verdict stays inconclusive)."""
    from .layout import Unit
    from .walk import read_unit
    cut = set(unreadable) | {path for step in steps for path in step.truncated + step.unreadable}
    short = {path for step in steps for path in step.truncated}
    if not cut or any(step.recent or len(step.reasons) != 1 or not (step.truncated or step.unreadable)
                      for step in steps):
        return None      # files are missing or still being written: any of them could hold the origin
    parsed = {path: names.parse(os.path.basename(path)) for path in cut}
    owners = {(os.path.dirname(path), p.op_type, p.op_name, p.task_id, p.stream_id) if p and p.io == "output"
              else None for path, p in parsed.items()}
    owner = owners.pop() if len(owners) == 1 else None
    if owner is None:
        return None
    folder, op_type, op_name, task, stream = owner
    d = next((d for d in dirs if os.path.realpath(d.path) == os.path.realpath(folder)), None)
    if d is None:
        return None
    quiet = lambda message: None     # noqa: E731  (the walk already said what it could not read)
    executions = read_unit(Unit(d.rank, d.step, [d]), quiet).executions
    # (an output in a FIFO's or directory's place was never listed as a file: the op run is matched by its name)
    runs = [ex for ex in executions if (ex.op_type, ex.op_name, ex.task_id, ex.stream_id)
            == (op_type, op_name, task, stream) and (any(e.source in cut for e in ex.outputs) or not any(
                e.source in cut for e in ex.inputs))]
    if len(runs) != 1 or not runs[0].inputs:
        return None
    ex = runs[0]
    for event in ex.outputs:
        if event.source in cut:      # already reported by the walk: not read (and warned about) a second time
            event.status, event.note, event.loader = Status.TRUNCATED, "unreadable: truncated", (lambda: None)
    if any(access.bad(e) is not False for e in ex.inputs if e.dtype is None or e.is_float):
        return None      # an input bad or unreadable: X may have received the bad value
    for consumer, verdict in judged:
        if consumer.rank != ex.rank or consumer.step != ex.step or verdict.role != PROPAGATOR:
            continue
        node, graph = graphs.node(consumer)
        for event in consumer.inputs:
            producer = node.inputs[event.slot] if node is not None and event.slot < len(node.inputs) else None
            if producer is None or graph.file_name(producer) != op_name or not access.bad(event):
                continue
            stats = access.stats(event)
            kind = INVALID if stats is not None and stats.nan else OVERFLOW
            shown = "; ".join(os.path.basename(path) for path in sorted(cut))    # every one is this op's output
            what = (f"max |x| {stats.max_abs:.6g}, nan {stats.nan}, +inf {stats.posinf}, -inf {stats.neginf}"
                    if stats is not None and stats.max_abs is not None else "a bad value")
            how = "is truncated" if any(e.source in short for e in ex.outputs) else "cannot be read"
            detail = (f"its output file {how} ({shown}); its inputs are finite and {consumer.op_type} "
                      f"({consumer.op_name}) received input {event.slot} from it with {what}")
            return ex, Verdict(LIKELY_ORIGIN, kind, detail, advice="invalid" if kind == INVALID else "overflow",
                               evidence=[f"{consumer.op_type} input {event.slot} is {op_type}'s output as it "
                                         "arrived: it holds the bad value the unread file would show"])
    return None
