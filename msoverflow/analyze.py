"""The pipeline: discover layout -> one walk over (rank, step) units -> findings -> Report.

Per rank, executions are walked in time order (iteration, then timestamp). The first execution whose outputs
are bad while its inputs are fine is that rank's origin. The rest of that step is scanned cheaply (a tensor
read stops at its first bad chunk) to show how it spread; later steps are skipped unless `scan_all`.
Ranks are compared by step, never by their clocks.
The walk runs as a map over (rank, step) units (msoverflow/walk.py: every format through the reader registry,
events as columns where they fit, rules on the few suspicious ops) and a reduce that orders their summaries
(msoverflow/parallel.py); what follows builds findings from the facts they hand back.
"""
from __future__ import annotations

import os
import sys
import types
from typing import Callable, Dict, List, Optional, Tuple

from .completeness import check as check_completeness, cross_rank_advice, settle
from .errors import UserError, reading
from .evaluate import TensorAccess
from . import selection
from .layout import LAYOUT_MSPROBE, discover
from .selection import not_in_dump
from .coverage import coverage_limits, inconclusive_reasons
from .model import (CROSS_RANK, FLAGGED, ORIGIN, PROPAGATOR, RANK_CLEAN, SUSPECT, Arrival, Finding, OpExecution,
                    Report, Source, TensorEvent, TensorSummary)
from .names import scope_to_file_name
from .parallel import map_reduce
from .ranks import RankTable, expected_ranks
from .rules import Verdict
from .rules.knowledge import knowledge
from .walk import plan_units, survey
from .scope import cell_of, enclosing_class, forward_in_scope, is_backward


def analyze(path: str, *, ranks=None, iterations=None, scan_all: bool = False, progress: Optional[bool] = None,
            warn: Optional[Callable[[str], None]] = None, jobs: Optional[int] = None,
            scheduler: Optional[str] = None, finished: bool = False, parallel=None) -> Report:
    """ranks/iterations: a selection (msoverflow.selection.Selection, or any collection; None: all).
    jobs: worker processes (None: from the CPU count, for dumps large enough); scheduler: a Dask scheduler
    address to run the per-rank scans on (msoverflow/parallel.py); parallel: a parallel_layout.ParallelSpec
    (None: from a file beside the dump, else inferred from the graphs)."""
    warnings: List[str] = []

    def note(message: str):
        warnings.append(message)
        if warn:
            warn(message)

    dirs = discover(path, note)
    if not dirs:
        others = _other_files(path)
        if not others:
            raise UserError(f"{path}: no dump files found (expected rank_*/<net>/<graph>/<iteration>/ with .npy, "
                            "binary dump, statistic.csv or Opdebug files)")
        return _not_understood(path, warnings, unknown=others, unknown_count=len(others))
    ranks, iterations = selection.parse(ranks, "--ranks"), selection.parse(iterations, "--steps")
    units = plan_units(dirs, ranks, iterations)
    if not units and (ranks or iterations):
        raise not_in_dump(path, ranks, iterations, dirs)
    # (rank, step)s whose files stop short (job killed, dump still being written): listings and headers only
    incomplete = check_completeness(dirs, ranks=ranks, iterations=iterations, warn=note, finished=finished)
    access = TensorAccess(note)
    kn = knowledge()
    show = sys.stderr.isatty() if progress is None else progress

    # Opdebug records mean the hardware watched every op: every unit is judged by them (only flagged ops, whose
    # inputs decide, and collectives, which tell which rank a bad value came from, are worth a tensor read).
    flags, files = survey(units)
    with _Progress(show, files) as bar:
        walked = map_reduce(units, kn, scan_all, access, note, jobs=jobs, scheduler=scheduler, files=files,
                            advance=bar.advance, flags=flags)
    if not walked.runs and not walked.records:
        if ranks or iterations:
            raise not_in_dump(path, ranks, iterations, dirs)
        return _nothing_understood(walked, path, warnings)
    graphs = _GraphCache(walked, note)
    judged, after_arrival = walked.judged, walked.after_arrival

    # Files that could not be read (corrupt, truncated) are warnings; when none could, the verdict says so
    # (inconclusive, with the files named) rather than failing the command.
    reads_to_decide = access.tensors_read - walked.side_reads
    _not_second_origins(judged, graphs)
    table = RankTable(walked.runs, judged, walked.arrivals)
    candidates = [(ex, v) for ex, v in judged if v.role in (ORIGIN, SUSPECT) and v.kind != CROSS_RANK]
    for ex, _v in candidates:      # a collective delivered a bad value to this rank earlier in the same step
        arrival = table.first_arrival(ex.rank, before=ex, same_step=True) if id(ex) not in after_arrival else None
        if arrival is not None and arrival.iteration == ex.iteration:
            after_arrival.add(id(ex))
    unmatched = [r for r in walked.records if r.matched_op is None]
    # No origin anywhere but a rank received bad values: report the earliest cross-rank arrival.
    if not candidates and not unmatched:
        candidates = [(ex, v) for ex, v in judged if v.kind == CROSS_RANK][:1]
    if not candidates and not unmatched:
        # Bad values, but every bad op's input was already bad: the op that created it is not in the dump
        # (kernel filter, overflow-only mode, a step not dumped). Never clean: name the first bad op seen.
        seen = [(ex, v) for ex, v in judged if v.role == PROPAGATOR]
        _order_candidates(walked, seen, after_arrival, kn)
        candidates = seen[:1]
        if candidates:
            candidates[0][1].evidence.append("its input was already bad, and no dumped op created that value: the "
                                             "origin is in an op, step or rank that was not dumped")
            note("no dumped op created the first bad value: it is first seen as an input; dump without filters")
    _order_candidates(walked, candidates, after_arrival, kn, _fed_by_bad(candidates, judged, graphs))
    findings = []
    runs_of: Dict[int, OpExecution] = {}      # finding -> the op run it describes (the diagnose step reads it)
    for ex, v in candidates:
        with reading(_file_of(ex)):
            findings.append(_finding(ex, v, access, graphs, full=True))
        if findings[-1].op_name == ex.op_name:
            runs_of[id(findings[-1])] = ex
    from_candidates = findings[0] if findings else None
    findings += [_unmatched_finding(record) for record in unmatched]
    findings.sort(key=lambda f: f.iteration)      # stable: an unmatched record goes last in its step
    origins = [f for f in findings if f.role != SUSPECT]
    suspects = [f for f in findings if f.role == SUSPECT]
    first = findings[0] if findings else None
    anomalies = ([first] if first is not None and first.role == SUSPECT else []) + origins
    flagged = [f for f in suspects if f is not first]
    propagation: List[Finding] = []
    if candidates and first is from_candidates:
        first_ex = candidates[0][0]
        propagation = [_finding(ex, v, access, graphs, full=False) for ex, v in judged
                       if v.role == PROPAGATOR and ex.rank == first_ex.rank and ex.iteration == first_ex.iteration
                       and ex.time >= first_ex.time]
    for record in unmatched:
        note(f"{record.source}: overflow record ({record.unit}, task {record.task_id}, stream "
             f"{record.stream_id}) matches no dumped op in its directory")
    flagged_ranks = {record.rank for record in walked.records}
    iterations_seen: Dict[int, List[int]] = {r: its for r, its in walked.iterations.items()
                                             if r in walked.runs or r in flagged_ranks}
    # steps scanned that held something understood (op runs or hardware records): never more than was seen
    scanned_steps = {rank: [s for s in steps if s in iterations_seen.get(rank, ())]
                     for rank, steps in walked.scanned.items()}
    roots = sorted({r for r in walked.rank_roots.values() if r})
    expected = expected_ranks(path, set(walked.runs), roots, note) if not ranks else {}
    if iterations:
        expected = {rank: f"no file of step {iterations} on this rank ({why})"
                    for rank, why in expected.items()}
    rank_status = table.rows(expected, ranks, unmatched)
    from .parallel_layout import label_ranks     # coordinates, and the ranks a layout declares that are not dumped
    layout = label_ranks(parallel, path, rank_status, walked.rank_roots, note, selected=ranks)
    meta = _metadata(walked, note)
    limits = coverage_limits(meta.get("settings") or {}, meta.get("runtime") or {}, walked.facts,
                             len(walked.records), framework_dump=LAYOUT_MSPROBE in walked.layouts)
    unreadable = sorted(set(walked.unreadable))
    reasons = inconclusive_reasons(unknown=walked.unknown[:5], unknown_count=len(walked.unknown),
                                   unreadable=unreadable, rank_status=rank_status, dumped_anything=True,
                                   refused=walked.refused)
    _note_unread_ranks(rank_status, unreadable, dirs)
    reasons += _undecodable(walked.undecodable, note)
    # incomplete (rank, step)s: their ranks' rows, and no answer from a value only received after a cut
    settled = settle(incomplete, first, anomalies, propagation, rank_status, unreadable, judged, graphs.node, dirs,
                     access, describe=lambda ex, v: _finding(ex, v, access, graphs, full=True))
    first, anomalies, propagation, likely = settled.first, settled.anomalies, settled.propagation, settled.likely
    reasons = settled.reasons + reasons
    if any(v.kind == CROSS_RANK for _ex, v in judged):
        advice = cross_rank_advice(first, rank_status, incomplete, selected=bool(ranks))
        if advice:
            note(f"no rank holds the origin: a collective delivered the first bad value; {advice}")
    extra = {"tensors_read_to_decide": reads_to_decide, "mindspore": meta["summary"]}
    from .parameters import parameter_hits
    judged_runs: Dict[int, List[OpExecution]] = {}
    for ex, _v in judged:
        judged_runs.setdefault(ex.rank, []).append(ex)
    hit = parameter_hits(judged_runs, rank_status, access.stats, graphs.node,
                         lambda op_type: op_type in kn.state_updates, kn.is_collective, note,
                         {(ex.rank, ex.iteration) for ex, _v in judged})
    scanned_units = [u for u in units if u.iteration in walked.scanned.get(u.rank, ())]
    # msprobe's dump.json records the order of its entries, not when they ran: no step span, no time into a step.
    clocked = LAYOUT_MSPROBE not in walked.layouts
    report = Report(dump_dir=os.path.abspath(path), first=first, anomalies=anomalies, propagation=propagation,
                  warnings=warnings, ranks=sorted(walked.runs), iterations=iterations_seen,
                  files=walked.files, tensors_read=access.tensors_read, layout=",".join(walked.layouts),
                  tail_clean=walked.scanned_all, extra=extra, rank_status=rank_status, coverage=limits,
                  inconclusive=reasons, flagged=flagged, step_times=_step_times(walked) if clocked else {},
                  overflow_records=list(walked.records), arrivals=_arrivals(walked, clocked),
                  scanned_steps={rank: steps for rank, steps in scanned_steps.items() if steps},
                  edges=_edges(first, propagation), completeness=incomplete, likely_origin=likely,
                  scanned_units=scanned_units, parallel=layout, parameters=hit)
    # diagnose: the cause of every origin, recomputed from its dumped inputs (msoverflow/diagnosis); a report
    # without findings does not even import it
    if first is not None or likely is not None or anomalies:
        from .diagnosis.stage import diagnose_report
        diagnose_report(report, warn=note, runs=runs_of, graph_of=graphs.node)
    return report


def _arrivals(walked, clocked: bool = True) -> List[Arrival]:
    """The bad value a collective delivered to each rank in each scanned step (the first one of that step), timed
    from that rank's own step start (clock offsets between ranks cancel)."""
    first: Dict[Tuple[int, int], OpExecution] = {}
    for ex in walked.arrivals:
        key = (ex.rank, ex.iteration)
        if key not in first or RankTable.position(ex) < RankTable.position(first[key]):
            first[key] = ex
    return [Arrival(rank, step, ex.op_type, ex.op_name, offset_us=ex.time - walked.step_start(rank, step)
                    if clocked and (rank, step) in walked.spans else None)
            for (rank, step), ex in sorted(first.items())]


def _edges(first: Optional[Finding], propagation: List[Finding]) -> List[Tuple[str, str]]:
    """(producer, consumer) among the origin and the ops its value reached, where the saved graph names the
    producer (ops named by full name, else file name)."""
    if first is None:
        return []
    nodes = [first] + list(propagation)
    key_of: Dict[str, str] = {}
    for f in nodes:
        for name in (f.full_name, f.op_name):
            if name:
                key_of.setdefault(name, f.full_name or f.op_name)
    edges: List[Tuple[str, str]] = []
    for f in nodes[1:]:
        own = f.full_name or f.op_name
        for producer in f.producers:
            source = key_of.get(producer[len("param:"):] if producer.startswith("param:") else producer)
            if source is not None and source != own and (source, own) not in edges:
                edges.append((source, own))
    return edges


def _not_second_origins(judged, graphs: "_GraphCache") -> None:
    """A Cell entry of a framework dump (msprobe: `Cell.head.NormHead.backward.0`) wraps the ops that ran inside
    it: when an op inside its scope already went bad in the same step, the Cell's bad output is that value
    passing through, not a later origin."""
    made: Dict[Tuple[int, int], List[str]] = {}
    for ex, v in judged:
        if v.role not in (ORIGIN, SUSPECT) or v.kind == CROSS_RANK:
            continue
        node, _graph = graphs.node(ex)
        name = node.full_name if node is not None else ex.op_name
        if node is not None and node.wraps_scope is not None:
            inside = [n for n in made.get((ex.rank, ex.iteration), []) if n.startswith(node.wraps_scope + "/")]
            if inside:
                v.role = PROPAGATOR
                v.evidence.append(f"its Cell holds {inside[0]}, which made the bad value first")
                continue
        made.setdefault((ex.rank, ex.iteration), []).append(name)


def _note_unread_ranks(rank_status, unreadable: List[str], dirs) -> None:
    """A rank is clean only as far as its files could be read: say so on its row when some could not."""
    rank_of_dir = {os.path.realpath(d.path): d.rank for d in dirs}
    per_rank: Dict[int, int] = {}
    for path in unreadable:
        rank = rank_of_dir.get(os.path.dirname(os.path.realpath(path)))
        if rank is not None:
            per_rank[rank] = per_rank.get(rank, 0) + 1
    for row in rank_status:
        if row.status == RANK_CLEAN and per_rank.get(row.rank):
            row.note = (f"clean in what could be read: {per_rank[row.rank]} file(s) unreadable"
                        + (f"; {row.note}" if row.note else ""))


def _undecodable(found: List[Tuple[str, str]], warn) -> List[str]:
    """Tensors whose dtype cannot be decoded (readers mark them `dtypes.UNDECODABLE`): never read, so a verdict
    without findings cannot be clean. found: (file, why)."""
    if not found:
        return []
    reason = f"{len(found)} tensor(s) have a data type msoverflow cannot decode, e.g. {found[0][0]}: {found[0][1]}"
    warn(reason)
    return [reason]


def _nothing_understood(walked, path: str, warnings: List[str]) -> Report:
    reasons = inconclusive_reasons(unknown=walked.unknown[:5] + walked.unreadable[:5],
                                   unknown_count=len(walked.unknown) + len(walked.unreadable), unreadable=[],
                                   rank_status=[], dumped_anything=False, refused=walked.refused)
    return Report(dump_dir=os.path.abspath(path), first=None, anomalies=[], propagation=[], warnings=warnings,
                  ranks=[], iterations={}, files=walked.files, layout=",".join(walked.layouts),
                  inconclusive=reasons)


def _other_files(path: str, limit: int = 2000) -> List[str]:
    """Regular files under `path` that are not dump files (a few, for the message), skipping metadata folders."""
    found: List[str] = []
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d not in ("graphs", "execution_order", ".dump_metadata")]
        for name in files:
            found.append(os.path.join(root, name))
            if len(found) >= limit:
                return found
    return found


def _not_understood(path: str, warnings: List[str], *, unknown: List[str], unknown_count: int, files: int = 0,
                    layout: str = "") -> Report:
    """Files are there, but none was understood: never clean."""
    reasons = inconclusive_reasons(unknown=unknown, unknown_count=unknown_count, unreadable=[], rank_status=[],
                                   dumped_anything=False)
    return Report(dump_dir=os.path.abspath(path), first=None, anomalies=[], propagation=[], warnings=warnings,
                  ranks=[], iterations={}, files=files, layout=layout, inconclusive=reasons)


def _unmatched_finding(record) -> Finding:
    """An Opdebug record that names no dumped op: the hardware saw an overflow the dump cannot place."""
    words = ", ".join(record.status_words) or "overflow"
    detail = (f"Opdebug record ({record.unit}, status {record.status:#x}: {words}) names task {record.task_id}, "
              f"stream {record.stream_id}, which matches no dumped op (file {record.source})")
    return Finding(rank=record.rank, graph=record.graph, iteration=record.iteration, op_type="unknown op",
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


def _order_candidates(walked, candidates: List[Tuple[OpExecution, Verdict]], after_arrival: set, kn,
                      fed_by_bad: Optional[set] = None):
    """Ranks by evidence, never by clock. By step first. Within a step: a candidate on a rank that had not yet
    received a bad value through a collective comes first (pipeline: the last stage's backward feeds the earlier
    stages); an op proven by its inputs before one only the hardware flagged; a flagged op that consumes what
    others made (global norm, loss scale, optimizer) or whose producer in the saved graph already went bad
    (`fed_by_bad`) after the rest; then the time since the rank's own step began (clock offsets between ranks
    cancel), where the ranks' execution-order files put that rank's candidates in graph order; then the rank."""
    fed_by_bad = fed_by_bad or set()
    relative = {id(ex): ex.time - walked.step_start(ex.rank, ex.iteration) for ex, _v in candidates}
    # Flagged ops decided by nothing but their flags: a debug file's timestamp is when it was written, not when the
    # op ran (CANN), so on one rank the graph's order wins. Ops decided by their data keep the dump's time order
    # (on CPU the execution-order csv is not the run order).
    groups: Dict[Tuple[int, int, str], List[OpExecution]] = {}
    for ex, v in candidates:
        if ex.order is not None and v.role == SUSPECT:
            groups.setdefault((ex.rank, ex.iteration, ex.graph), []).append(ex)
    for members in groups.values():
        times = sorted(relative[id(ex)] for ex in members)
        for ex, when in zip(sorted(members, key=lambda e: (e.order, relative[id(e)])), times):
            relative[id(ex)] = when
    candidates.sort(key=lambda pair: (
        pair[0].iteration, id(pair[0]) in after_arrival, pair[1].role != ORIGIN,
        pair[1].role == SUSPECT and (kn.is_consumer(pair[0].op_type, pair[0].op_name) or id(pair[0]) in fed_by_bad),
        relative[id(pair[0])], pair[0].rank))


def _fed_by_bad(candidates, judged, graphs) -> set:
    """Flagged-undecided ops whose producer (from the saved graph) is an op that went bad in the same step on the
    same rank: they come after it."""
    bad = {(ex.rank, ex.iteration, ex.op_name) for ex, _v in judged}
    fed = set()
    for ex, v in candidates:
        if v.role != SUSPECT:
            continue
        node, _graph = graphs.node(ex)
        producers = [p for p in (node.inputs if node else []) if p and not p.startswith("param:")]
        if any((ex.rank, ex.iteration, scope_to_file_name(p)) in bad for p in producers):
            fed.add(id(ex))
    return fed


def _step_times(walked) -> Dict[int, Dict[int, Tuple[int, int]]]:
    """rank -> step -> (first, last) op time on that rank's clock, over every op of each scanned step."""
    times: Dict[int, Dict[int, Tuple[int, int]]] = {}
    for (rank, step), span in sorted(walked.spans.items()):
        times.setdefault(rank, {})[step] = span
    return times


def _metadata(walked, warn) -> Dict[str, object]:
    """MindSpore version, device and the dump config, from the first rank's .dump_metadata/ (when written):
    {"summary": for the report, "settings": common_dump_settings, "runtime": config.json}."""
    from .readers.exec_order import dump_metadata
    for root in sorted({r for r in walked.rank_roots.values() if r}):
        meta = dump_metadata(root, warn)
        if meta:
            runtime = meta.get("runtime") or {}
            config = meta.get("dump_config") or {}
            common = config.get("common_dump_settings") or {} if isinstance(config, dict) else {}
            runtime = runtime if isinstance(runtime, dict) else {}
            summary = {"version": runtime.get("ms_version"), "device_target": runtime.get("device_target"),
                       "dump_mode": common.get("dump_mode"), "input_output": common.get("input_output"),
                       "op_debug_mode": common.get("op_debug_mode"), "saved_data": common.get("saved_data")}
            return {"summary": summary, "settings": common, "runtime": runtime}
    return {"summary": {}, "settings": {}, "runtime": {}}


class _GraphCache:
    """Saved graphs (.ir), parsed on first need only: most runs need one graph for one finding."""

    def __init__(self, walked, warn):
        self.walked = walked
        self.warn = warn
        self.cache: Dict[Tuple[int, str], object] = {}

    def node(self, ex: OpExecution):
        key = (ex.rank, ex.graph)
        if key not in self.cache:
            self.cache[key] = self.walked.graphs.get(key)   # built by a reader (msprobe)
            root = self.walked.rank_roots.get(key)
            if root and self.cache[key] is None:
                from .readers.ir_graph import graph_files, load_ir
                for path in graph_files(root, ex.graph):
                    try:
                        self.cache[key] = load_ir(path)
                        break
                    except OSError as exc:
                        self.warn(f"{path}: cannot read saved graph ({exc.strerror})")
        graph = self.cache[key]
        return (graph.find(ex.op_name) if graph else None), graph


def _summary(event: TensorEvent, access: TensorAccess, producer: Optional[str], full: bool) -> TensorSummary:
    stats = access.stats(event) if full else event.stats
    return TensorSummary(slot=event.slot, io=event.io, dtype=event.dtype, shape=event.shape, stats=stats,
                         payload_dtype=event.payload_dtype, producer=producer, note=event.note, file=event.source)


def _finding(ex: OpExecution, v: Verdict, access: TensorAccess, graphs: _GraphCache, full: bool) -> Finding:
    kn = knowledge()
    node, graph = graphs.node(ex)
    op_type, op_name, full_name = ex.op_type, ex.op_name, node.full_name if node else None
    evidence = list(v.evidence)
    if v.via_producer and node is not None and v.bad_input is not None:
        # Inputs-only dump: name the producer of the first bad input as the op that created it.
        producer = node.inputs[v.bad_input.slot] if v.bad_input.slot < len(node.inputs) else None
        pnode = graph.by_full.get(producer) if producer else None
        if pnode is not None:
            evidence.append(f"seen first as input {v.bad_input.slot} of {ex.op_type} ({ex.op_name})")
            node, op_type, full_name = pnode, pnode.op_type, pnode.full_name
            op_name = full_name.replace("/", "_")
    forward_name = node.forward_name if node else None
    forward_node = graph.by_full.get(forward_name) if (graph and forward_name) else None
    forward_op = forward_node.op_type if forward_node else (
        forward_name.rsplit("/", 1)[-1].rsplit("_", 1)[0] if forward_name else kn.forward_of(op_type))
    scope_name = full_name or op_name
    cell, cell_type = cell_of(scope_name, from_file_name=full_name is None)
    if forward_op is None:      # a backward op's scope names its forward op (Grad_Div); a forward op is its own
        forward_op = forward_in_scope(full_name) if is_backward(scope_name) else op_type
    source = None
    src_node = node if (node and node.source_file) else forward_node
    if src_node is not None and src_node.source_file:
        source = Source(src_node.source_file, src_node.source_line or 0, src_node.source_code or "")
    if cell_type is None and source is not None and v.role == ORIGIN:
        cell_type = enclosing_class(source.file, source.line)
        if cell_type:
            evidence.append(f"Cell {cell_type} taken from the source file (the scope name carries no Cell)")
    inputs = []
    if full or v.role == ORIGIN:
        for e in ex.inputs:
            producer = node.inputs[e.slot] if node and e.slot < len(node.inputs) else None
            inputs.append(_summary(e, access, producer, full))
    outputs = [_summary(e, access, None, full) for e in ex.outputs] if (full or v.role == ORIGIN) else []
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
        if summary.headroom is not None and summary.stats is not None and summary.dtype in ("float16", "bfloat16"):
            evidence.append(f"input {summary.slot} max |x| {summary.stats.max_abs:.6g} = "
                            f"{summary.headroom:.0%} of {summary.dtype} max")
    values = {"op_type": op_type, "op_name": op_name, "forward_op": forward_op or op_type,
              "cell": f"{cell} ({cell_type})" if cell else "its Cell", "dtype": "float16", **v.values}
    return Finding(rank=ex.rank, graph=ex.graph, iteration=ex.iteration, op_type=op_type, op_name=op_name,
                   role=v.role, kind=v.kind, detail=v.detail, timestamp=ex.time, full_name=full_name,
                   forward_op=forward_op, cell=cell, cell_type=cell_type, source=source, inputs=inputs,
                   outputs=outputs, flags=list(ex.flags),
                   recommendation=kn.recommend(v.advice, **values) if v.role in (ORIGIN, SUSPECT) else "",
                   evidence=evidence, producers=list(node.inputs) if node else [], advice=v.advice,
                   ir_file=getattr(graph, "path", None) if node else None, ir_line=node.ir_line if node else None)


class _CallableModule(types.ModuleType):
    """`msoverflow.analyze` is both this module and the API function: importing the module (`from
    msoverflow.analyze import ...`) makes it the package's attribute, so calling it must still be the API."""

    def __call__(self, path: str, **options) -> Report:
        from .api import analyze as api_analyze
        return api_analyze(path, **options)


sys.modules[__name__].__class__ = _CallableModule


class _Progress:
    """A progress bar on stderr, only on a terminal."""

    def __init__(self, enabled: bool, total: int):
        self.enabled = enabled and total > 2000
        self.total = total
        self._bar = None

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import Progress
            self._bar = Progress(transient=True, console=Console(stderr=True))
            self._bar.start()
            self._task = self._bar.add_task("scanning ops", total=self.total)
        return self

    def advance(self, n: int = 1):
        if self._bar is not None:
            self._bar.advance(self._task, n)

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.stop()
