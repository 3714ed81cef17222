"""Assemble the Report: the decision, and what a reader of it needs around it (the per-rank table, what the dump
could not show, why a verdict is not clean, rank coordinates, the parameters hit, arrivals, step spans and the
propagation edges). Every Report of an analysis is constructed here; renderers only phrase it.
"""
from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple

from .completeness import cross_rank_advice, mark_ranks
from .coverage import coverage_limits, inconclusive_reasons
from .findings import Decision
from .layout import LAYOUT_MSPROBE, Dump, Plan
from .logs import Notes
from .model import CROSS_RANK, RANK_CLEAN, Arrival, Finding, OpExecution, RankStatus, Report
from .rank_rows import RankRows
from .ranks import RankTable
from .rules.knowledge import OpKnowledge
from .walk import events_frame

if TYPE_CHECKING:
    from .parallel import Walked

Warn = Callable[[str], None]


def assemble(dump: Dump, plan: Plan, walked: "Walked", decision: Decision, ranks: RankRows, kn: OpKnowledge,
             note: Notes) -> Report:
    """The Report of an analysis, composed from the stages' values: the dump (its graphs, its tensor access, its
    metadata), the walk, the decision and the rank rows. `note`: the warnings so far, which takes more (the report
    keeps them all)."""
    graphs, access = dump.graphs, dump.access
    flagged_ranks = {record.rank for record in walked.records}
    steps_seen = {rank: steps for rank, steps in walked.steps.items() if rank in walked.runs or rank in flagged_ranks}
    # steps scanned that held something understood (op runs or hardware records): never more than was seen
    scanned_steps = {rank: [s for s in steps if s in steps_seen.get(rank, ())]
                     for rank, steps in walked.scanned.items()}
    rank_status, layout = ranks.rows, ranks.parallel
    meta = _metadata(dump, walked)
    limits = coverage_limits(meta.get("settings") or {}, meta.get("runtime") or {}, walked.facts,
                             len(walked.records), framework_dump=LAYOUT_MSPROBE in walked.layouts,
                             pynative=graphs.compiled_by_pynative())
    unreadable = sorted(set(walked.unreadable))
    reasons = inconclusive_reasons(unknown=walked.unknown[:5], unknown_count=len(walked.unknown),
                                   unreadable=unreadable, rank_status=rank_status, dumped_anything=True,
                                   refused=walked.refused)
    # a directory that could not be listed and is no step directory itself (rank_1/, rank_0/Net/): named
    # (a rank_N/ one is named on its rank's row)
    told = {d.path for d in dump.dirs if d.unlisted} | {r.path for r in dump.rank_dirs.values()}
    if any(path not in told for path, _why in dump.unlisted):
        reasons.append(dump.unlisted_reason())
    _note_unread_ranks(rank_status, unreadable, dump.dirs)
    reasons += _undecodable(walked.undecodable, note)
    mark_ranks(rank_status, decision.incomplete, decision.likely, decision.first)
    if any(v.kind == CROSS_RANK for _ex, v in decision.judged):
        advice = cross_rank_advice(decision.first, rank_status, decision.incomplete, selected=bool(plan.ranks))
        if advice:
            note(f"no rank holds the origin: a collective delivered the first bad value; {advice}")
    from .parameters import parameter_hits
    judged_runs: Dict[int, List[OpExecution]] = {}
    for ex, _v in decision.judged:
        judged_runs.setdefault(ex.rank, []).append(ex)
    hits = parameter_hits(judged_runs, rank_status, access.stats, graphs.node,
                          lambda op_type: op_type in kn.state_updates, kn.is_collective, note,
                          {(ex.rank, ex.step) for ex, _v in decision.judged}, graphs.of_rank)
    scanned_units = [u for u in plan.units if u.step in walked.scanned.get(u.rank, ())]
    # msprobe's dump.json records the order of its entries, not when they ran: no step span, no time into a step.
    clocked = LAYOUT_MSPROBE not in walked.layouts
    return Report(dump_dir=os.path.abspath(dump.path), first=decision.first, anomalies=decision.anomalies,
                  propagation=decision.propagation, warnings=list(note), ranks=sorted(walked.runs), steps=steps_seen,
                  files=walked.files, tensors_read=access.tensors_read, outputs_checked=walked.facts.with_outputs,
                  inputs_checked=walked.facts.with_inputs,
                  layout=",".join(walked.layouts),
                  tail_clean=walked.scanned_all, rank_status=rank_status, coverage=limits,
                  extra={"tensors_read_to_decide": decision.tensors_read_to_decide, "mindspore": meta["summary"]},
                  inconclusive=decision.reasons + reasons, flagged=decision.flagged,
                  step_times=_step_times(walked) if clocked else {}, overflow_records=list(walked.records),
                  arrivals=_arrivals(walked, clocked),
                  scanned_steps={rank: steps for rank, steps in scanned_steps.items() if steps},
                  edges=_edges(decision.first, decision.propagation), completeness=decision.incomplete,
                  likely_origin=decision.likely, parallel=layout, parameters=hits,
                  event_reader=functools.partial(events_frame, scanned_units), contained=decision.contained,
                  handled=decision.handled, strict=decision.strict)


def not_understood(dump: Dump, warnings: List[str]) -> Report:
    """Files are there, but none looks like a dump file: never clean."""
    reasons = inconclusive_reasons(unknown=dump.other_files[:5], unknown_count=len(dump.other_files),
                                   unreadable=[], rank_status=[], dumped_anything=False)
    return Report(dump_dir=os.path.abspath(dump.path), first=None, anomalies=[], propagation=[], warnings=warnings,
                  ranks=[], steps={}, inconclusive=reasons)


def nothing_understood(dump: Dump, walked: "Walked", warnings: List[str]) -> Report:
    """Dump files are there, but none could be understood or read: never clean."""
    reasons = inconclusive_reasons(unknown=walked.unknown[:5], unknown_count=len(walked.unknown),
                                   unreadable=sorted(walked.unreadable), rank_status=[], dumped_anything=False,
                                   refused=walked.refused)
    reasons += [dump.unlisted_reason()] if dump.unlisted else []
    return Report(dump_dir=os.path.abspath(dump.path), first=None, anomalies=[], propagation=[], warnings=warnings,
                  ranks=[], steps={}, files=walked.files, layout=",".join(walked.layouts), inconclusive=reasons)


def _arrivals(walked: "Walked", clocked: bool = True) -> List[Arrival]:
    """The bad value a collective delivered to each rank in each scanned step (the first one of that step), timed
    from that rank's own step start (clock offsets between ranks cancel)."""
    first: Dict[Tuple[int, int], OpExecution] = {}
    for ex in walked.arrivals:
        key = (ex.rank, ex.step)
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


def _note_unread_ranks(rank_status: List[RankStatus], unreadable: List[str], dirs) -> None:
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


def _undecodable(found: List[Tuple[str, str]], warn: Warn) -> List[str]:
    """Tensors whose dtype cannot be decoded (model.Status.UNDECODABLE): never read, so a verdict without findings
    cannot be clean. found: (file, why)."""
    if not found:
        return []
    reason = f"{len(found)} tensor(s) have a data type msoverflow cannot decode, e.g. {found[0][0]}: {found[0][1]}"
    warn(reason)
    return [reason]


def _step_times(walked: "Walked") -> Dict[int, Dict[int, Tuple[int, int]]]:
    """rank -> step -> (first, last) op time on that rank's clock, over every op of each scanned step."""
    times: Dict[int, Dict[int, Tuple[int, int]]] = {}
    for (rank, step), span in sorted(walked.spans.items()):
        times.setdefault(rank, {})[step] = span
    return times


def _metadata(dump: Dump, walked: "Walked") -> Dict[str, dict]:
    """MindSpore version, device and the dump config, from the first rank's .dump_metadata/ (when written; parsed
    once, by the Dump): {"summary": for the report, "settings": common_dump_settings, "runtime": config.json}."""
    for root in sorted({r for r in walked.rank_roots.values() if r}):
        meta = dump.metadata(root)
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
