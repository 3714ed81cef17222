"""The pipeline: discover layout -> index file names -> order executions -> evaluate lazily -> rules -> Report.

Per rank, executions are walked in time order (iteration, then timestamp). The first execution whose outputs
are bad while its inputs are fine is that rank's origin. The rest of that step is scanned cheaply (a tensor
read stops at its first bad chunk) to show how it spread; later steps are skipped unless `scan_all`.
Ranks are compared by step, never by their clocks.
The walk runs as a map over (rank, step) units (msoverflow/scan.py: names, events as columns, rules on the few
suspicious ops) and a reduce that orders their summaries (msoverflow/parallel.py); what follows builds findings.
"""
from __future__ import annotations

import os
import sys
from typing import Callable, Dict, List, Optional, Tuple

from .completeness import check as check_completeness, cross_rank_advice, settle
from .errors import UserError, reading
from .evaluate import TensorAccess
from .index import DumpIndex, build_index
from .layout import LAYOUT_MSPROBE, discover
from .coverage import coverage_limits, inconclusive_reasons
from .model import (CLEAN, CROSS_RANK, FLAGGED, ORIGIN, PROPAGATOR, RANK_CLEAN, SUSPECT, Finding, OpExecution,
                    Report, Source, TensorEvent, TensorSummary)
from .names import scope_to_file_name
from .parallel import map_reduce
from .ranks import RankTable, expected_ranks
from .rules import Verdict, judge
from .rules.knowledge import knowledge
from .scan import plan_units, survey
from .scope import cell_of, enclosing_class


def analyze(path: str, *, ranks: Optional[List[int]] = None, iterations: Optional[List[int]] = None,
            scan_all: bool = False, progress: Optional[bool] = None,
            warn: Optional[Callable[[str], None]] = None, jobs: Optional[int] = None,
            scheduler: Optional[str] = None, finished: bool = False) -> Report:
    """jobs: worker processes (None: from the CPU count, for dumps large enough); scheduler: a Dask scheduler
    address to run the per-rank scans on (msoverflow/parallel.py)."""
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
    units = plan_units(dirs, ranks, iterations)
    if not units and (ranks or iterations):
        raise UserError(_selection_lacks(path, dirs, ranks, iterations))
    # (rank, step)s whose files stop short (job killed, dump still being written): listings and headers only
    incomplete = check_completeness(dirs, ranks=ranks, iterations=iterations, warn=note, finished=finished)
    access = TensorAccess(note)
    kn = knowledge()
    show = sys.stderr.isatty() if progress is None else progress

    hardware_flags, files = survey(units)
    # msprobe framework dumps are one dump.json per step (their reader builds the ops and the graph), not files to
    # scan as columns: they are judged in one piece too.
    whole_dump = hardware_flags or any(d.layout == LAYOUT_MSPROBE for d in dirs)
    if whole_dump:
        # Opdebug records mean the hardware watched every op: only flagged ops (whose inputs decide) and
        # collectives (which tell which rank a bad value came from) are worth a tensor read. The records answer
        # across ranks, so these dumps (flagged ops only) are judged in one piece.
        index = build_index(dirs, note, ranks, iterations)
        index.executions = {rank: exs for rank, exs in index.executions.items() if exs}
        if not index.executions and not index.overflow_records:
            return _nothing_understood(index, path, warnings, ranks, iterations)
        _attach_overflow_records(index, note)
        flags_answer = bool(index.overflow_records)
        with _Progress(show, sum(len(v) for v in index.executions.values())) as bar:
            judged, after_arrival, scanned_all = _scan(index, access, kn, scan_all, flags_answer, bar)
    else:
        # map: each (rank, step) on its own into a summary; reduce: ordered summaries (msoverflow/parallel.py).
        # index.executions then holds the judged executions and a clean sample of each step, not every one.
        with _Progress(show, files) as bar:
            index, judged, after_arrival, scanned_all = map_reduce(
                units, kn, scan_all, access, note, jobs=jobs, scheduler=scheduler, files=files,
                advance=bar.advance)
        if not index.executions and not index.overflow_records:
            return _nothing_understood(index, path, warnings, ranks, iterations)
    graphs = _GraphCache(index, note)

    # Files that could not be read (corrupt, truncated) are warnings; when none could, the verdict says so
    # (inconclusive, with the files named) rather than failing the command.
    reads_to_decide = access.tensors_read

    def delivered_bad(ex: OpExecution) -> bool:
        with reading(_file_of(ex)):
            return judge(ex, access, kn, earlier_bad=False).kind == CROSS_RANK

    _not_second_origins(judged, graphs)
    table = RankTable(index.executions, judged, kn.is_collective, delivered_bad)
    candidates = [(ex, v) for ex, v in judged if v.role in (ORIGIN, SUSPECT) and v.kind != CROSS_RANK]
    for ex, _v in candidates:      # a collective delivered a bad value to this rank earlier in the same step
        arrival = table.first_arrival(ex.rank, before=ex, same_step=True) if id(ex) not in after_arrival else None
        if arrival is not None and arrival.iteration == ex.iteration:
            after_arrival.add(id(ex))
    unmatched = [r for r in index.overflow_records if r.matched_op is None]
    # No origin anywhere but a rank received bad values: report the earliest cross-rank arrival.
    if not candidates and not unmatched:
        candidates = [(ex, v) for ex, v in judged if v.kind == CROSS_RANK][:1]
    if not candidates and not unmatched:
        # Bad values, but every bad op's input was already bad: the op that created it is not in the dump
        # (kernel filter, overflow-only mode, a step not dumped). Never clean: name the first bad op seen.
        seen = [(ex, v) for ex, v in judged if v.role == PROPAGATOR]
        _order_candidates(index, seen, after_arrival, kn)
        candidates = seen[:1]
        if candidates:
            candidates[0][1].evidence.append("its input was already bad, and no dumped op created that value: the "
                                             "origin is in an op, step or rank that was not dumped")
            note("no dumped op created the first bad value: it is first seen as an input; dump without filters")
    _order_candidates(index, candidates, after_arrival, kn, _fed_by_bad(candidates, judged, graphs))
    findings = []
    for ex, v in candidates:
        with reading(_file_of(ex)):
            findings.append(_finding(ex, v, access, graphs, full=True))
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
    iterations_seen: Dict[int, List[int]] = {r: its for r, its in index.iterations.items() if r in index.executions}
    roots = sorted({r for r in index.rank_roots.values() if r})
    expected = expected_ranks(path, set(index.executions), roots, note) if not ranks else {}
    if iterations:
        expected = {rank: f"no file of step {', '.join(map(str, iterations))} on this rank ({why})"
                    for rank, why in expected.items()}
    rank_status = table.rows(expected, ranks, unmatched)
    meta = _metadata(index, note)
    limits = coverage_limits(meta.get("settings") or {}, meta.get("runtime") or {},
                             (ex for exs in index.executions.values() for ex in exs), len(index.overflow_records),
                             framework_dump=LAYOUT_MSPROBE in index.layouts)
    unreadable = index.unreadable + sorted({e.source for exs in index.executions.values() for ex in exs
                                            for e in ex.inputs + ex.outputs if e.note.startswith("unreadable")})
    reasons = inconclusive_reasons(unknown=index.unknown_examples, unknown_count=index.unknown_files,
                                   unreadable=unreadable, rank_status=rank_status, dumped_anything=True)
    _note_unread_ranks(rank_status, unreadable, dirs)
    reasons += _undecodable(index, note)
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
    arrivals, scanned_steps, edges = _report_facts(index, judged, table, rank_status, first, propagation, scan_all)
    return Report(dump_dir=os.path.abspath(path), first=first, anomalies=anomalies, propagation=propagation,
                  warnings=warnings, ranks=sorted(index.executions), iterations=iterations_seen,
                  files=index.files, tensors_read=access.tensors_read, layout=",".join(index.layouts),
                  tail_clean=scanned_all, extra=extra, rank_status=rank_status, coverage=limits,
                  inconclusive=reasons, flagged=flagged, step_times=_step_times(index),
                  overflow_records=list(index.overflow_records), arrivals=arrivals, scanned_steps=scanned_steps,
                  edges=edges, completeness=incomplete, likely_origin=likely)


# ---- INTERIM (i16reports): the facts every renderer shows, derived once here until the one walk (i16core)
# hands them over itself. Delete this function when the walk fills Report.arrivals/scanned_steps/edges.
def _report_facts(index: DumpIndex, judged, table: RankTable, rank_status, first: Optional[Finding],
                  propagation: List[Finding], scan_all: bool):
    """(arrivals, scanned steps per rank, propagation edges). Arrivals: the first collective that delivered a bad
    value to each rank in each step. Scanned steps: a rank's walk stops after the step of its first origin (or
    flagged op) unless scan_all. Edges: (producer, consumer) among the first origin and the ops it reached, from
    the saved graph only (ops named by full name, else file name)."""
    from .model import Arrival, RANK_ORIGIN, RANK_RECEIVED
    stop: Dict[int, int] = {}
    for ex, v in judged:
        if v.role in (ORIGIN, SUSPECT):
            stop[ex.rank] = min(stop.get(ex.rank, ex.iteration), ex.iteration)
    scanned = {rank: [s for s in steps if scan_all or rank not in stop or s <= stop[rank]]
               for rank, steps in sorted(index.iterations.items()) if index.executions.get(rank)}
    delivered: Dict[Tuple[int, int], OpExecution] = {}
    for ex, v in judged:
        if v.kind == CROSS_RANK:
            key = (ex.rank, ex.iteration)
            if key not in delivered or table.position(ex) < table.position(delivered[key]):
                delivered[key] = ex
    origin_ex = {}
    for ex, v in judged:
        if v.role == ORIGIN and v.kind != CROSS_RANK:
            origin_ex.setdefault(ex.rank, ex)
    for row in rank_status:      # arrivals the rank table found by reading collectives the walk did not judge
        ex = None
        if row.status == RANK_RECEIVED:
            ex = table.first_arrival(row.rank)
        elif row.status == RANK_ORIGIN and row.rank in origin_ex:
            ex = table.first_arrival(row.rank, before=origin_ex[row.rank])
        if ex is not None:
            delivered.setdefault((ex.rank, ex.iteration), ex)
    arrivals = [Arrival(rank, step, ex.op_type, ex.op_name,
                        offset_us=ex.time - index.step_start[(rank, step)]
                        if (rank, step) in index.step_start else None)
                for (rank, step), ex in sorted(delivered.items())]
    edges: List[Tuple[str, str]] = []
    if first is not None:
        nodes = [first] + list(propagation)
        key_of: Dict[str, str] = {}
        for f in nodes:
            for name in (f.full_name, f.op_name):
                if name:
                    key_of.setdefault(name, f.full_name or f.op_name)
        for f in nodes[1:]:
            own = f.full_name or f.op_name
            for producer in f.producers:
                source = key_of.get(producer[len("param:"):] if producer.startswith("param:") else producer)
                if source is not None and source != own and (source, own) not in edges:
                    edges.append((source, own))
    return arrivals, scanned, edges


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


def _undecodable(index: DumpIndex, warn) -> List[str]:
    """Tensors whose dtype cannot be decoded (readers mark them `dtypes.UNDECODABLE`): never read, so a verdict
    without findings cannot be clean."""
    from .dtypes import UNDECODABLE
    found = [e for exs in index.executions.values() for ex in exs for e in ex.inputs + ex.outputs
             if e.note.startswith(UNDECODABLE)]
    if not found:
        return []
    reason = (f"{len(found)} tensor(s) have a data type msoverflow cannot decode, e.g. {found[0].source}: "
              f"{found[0].note}")
    warn(reason)
    return [reason]


def _nothing_understood(index: DumpIndex, path: str, warnings: List[str], ranks, iterations) -> Report:
    if ranks or iterations:
        raise UserError(f"{path}: no tensor files for the selected rank/iteration")
    return _not_understood(path, warnings, unknown=index.unknown_examples + index.unreadable,
                           unknown_count=index.unknown_files + len(index.unreadable), files=index.files,
                           layout=",".join(index.layouts))


def _spans(values) -> str:
    """[0, 1, 2, 5] -> "0-2,5" (the --steps/--ranks grammar, so the answer can be pasted back)."""
    out, values = [], sorted(set(values))
    for v in values:
        if out and v == out[-1][1] + 1:
            out[-1][1] = v
        else:
            out.append([v, v])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


def _selection_lacks(path: str, dirs, ranks, iterations) -> str:
    """--ranks/--steps the dump does not hold: say what it holds, per rank, to pick from."""
    asked = " ".join(f"--{name} {_spans(chosen)}" for name, chosen in (("ranks", ranks), ("steps", iterations))
                     if chosen)
    steps: Dict[int, set] = {}
    for d in dirs:
        steps.setdefault(d.rank, set()).add(d.iteration)
    held = "; ".join(f"rank {rank}: steps {_spans(s)}" for rank, s in sorted(steps.items())[:16])
    more = f" (and {len(steps) - 16} more ranks)" if len(steps) > 16 else ""
    return (f"{path}: the dump has no files for {asked}; it holds ranks {_spans(steps)} ({held}{more})")


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


def _scan(index: DumpIndex, access: TensorAccess, kn, scan_all: bool, flags_answer: bool, bar):
    """Judge each rank's executions in time order; stop a rank after the step of its first origin."""
    judged: List[Tuple[OpExecution, Verdict]] = []
    after_arrival = set()      # origins on a rank that had already received a bad value from another rank
    scanned_all = True
    for rank in sorted(index.executions):
        first_iteration = None
        earlier_bad = False
        arrived = set()        # iterations in which a collective delivered a bad value to this rank
        for ex in index.executions[rank]:
            if first_iteration is not None and ex.iteration > first_iteration and not scan_all:
                scanned_all = False
                break
            bar.advance()
            with reading(_file_of(ex)):
                verdict = judge(ex, access, kn, earlier_bad, flags_answer=flags_answer)
            if verdict.role == CLEAN:
                continue
            earlier_bad = True
            judged.append((ex, verdict))
            if verdict.kind == CROSS_RANK:
                arrived.add(ex.iteration)
            if verdict.role in (ORIGIN, SUSPECT):
                if ex.iteration in arrived:
                    after_arrival.add(id(ex))
                if first_iteration is None:
                    first_iteration = ex.iteration
    return judged, after_arrival, scanned_all


def _file_of(ex: OpExecution) -> str:
    """A file of this op execution, to name in an internal error."""
    for event in ex.inputs + ex.outputs:
        return event.source
    return ex.flags[0].source if ex.flags else f"{ex.op_type} {ex.op_name}"


def _order_candidates(index: DumpIndex, candidates: List[Tuple[OpExecution, Verdict]], after_arrival: set, kn,
                      fed_by_bad: Optional[set] = None):
    """Ranks by evidence, never by clock. By step first. Within a step: a candidate on a rank that had not yet
    received a bad value through a collective comes first (pipeline: the last stage's backward feeds the earlier
    stages); an op proven by its inputs before one only the hardware flagged; a flagged op that consumes what
    others made (global norm, loss scale, optimizer) or whose producer in the saved graph already went bad
    (`fed_by_bad`) after the rest; then the time since the rank's own step began (clock offsets between ranks
    cancel), where the ranks' execution-order files put that rank's candidates in graph order; then the rank."""
    fed_by_bad = fed_by_bad or set()
    step_start = index.step_start
    relative = {id(ex): ex.time - step_start.get((ex.rank, ex.iteration), 0) for ex, _v in candidates}
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


def _step_times(index: DumpIndex) -> Dict[int, Dict[int, Tuple[int, int]]]:
    """rank -> step -> (first, last) op time on that rank's clock, for timelines (renderers only)."""
    times: Dict[int, Dict[int, Tuple[int, int]]] = {}
    for rank, executions in index.executions.items():
        for ex in executions:
            t = ex.time
            first, last = times.setdefault(rank, {}).get(ex.iteration, (t, t))
            times[rank][ex.iteration] = (min(first, t), max(last, t))
    return times


def _metadata(index: DumpIndex, warn) -> Dict[str, object]:
    """MindSpore version, device and the dump config, from the first rank's .dump_metadata/ (when written):
    {"summary": for the report, "settings": common_dump_settings, "runtime": config.json}."""
    from .readers.exec_order import dump_metadata
    for root in sorted({r for r in index.rank_roots.values() if r}):
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


def _attach_overflow_records(index: DumpIndex, warn):
    """Opdebug records join the op they name (ids inside the record), earliest timestamp first."""
    if not index.overflow_records:
        return
    try:
        from .readers.opdebug import match_records
    except ImportError:
        return
    by_dir: Dict[Tuple[int, str, int], List[OpExecution]] = {}
    for executions in index.executions.values():
        for ex in executions:
            by_dir.setdefault((ex.rank, ex.graph, ex.iteration), []).append(ex)
    by_step: Dict[Tuple[int, int], List[OpExecution]] = {}
    for (rank, _graph, iteration), executions in by_dir.items():
        by_step.setdefault((rank, iteration), []).extend(executions)
    for record in index.overflow_records:
        candidates = by_dir.get((record.rank, record.graph, record.iteration), [])
        pairs = match_records([record], candidates)
        if all(ex is None for _, ex in pairs):
            # 2.2 async: rank_{r}/debug_files/{iter}/ holds the records, rank_{r}/{net}/{graph}/{iter}/ the ops.
            pairs = match_records([record], by_step.get((record.rank, record.iteration), []))
        for rec, ex in pairs:
            if ex is not None:
                ex.flags.append(rec)
                rec.matched_op = ex.op_name


class _GraphCache:
    """Saved graphs (.ir), parsed on first need only: most runs need one graph for one finding."""

    def __init__(self, index: DumpIndex, warn):
        self.index = index
        self.warn = warn
        self.cache: Dict[Tuple[int, str], object] = {}

    def node(self, ex: OpExecution):
        key = (ex.rank, ex.graph)
        if key not in self.cache:
            self.cache[key] = getattr(self.index, "graphs", {}).get(key)   # built by a reader (msprobe)
            root = self.index.rank_roots.get(key)
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
    if forward_op is None and not scope_name.startswith("Gradients"):
        forward_op = op_type
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
                   evidence=evidence, producers=list(node.inputs) if node else [],
                   ir_file=getattr(graph, "path", None) if node else None, ir_line=node.ir_line if node else None)


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
