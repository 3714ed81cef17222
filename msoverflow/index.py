"""Build the file index: dump directories -> TensorEvents (file names first, no tensor data read here)
-> OpExecutions ordered per rank by iteration, then time (graph order breaks ties)."""
from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from . import names
from .layout import LAYOUT_MSPROBE, DumpDir
from .model import INPUT, OpExecution, OverflowRecord, TensorEvent
from .readers import dumpdata_bin, opdebug, raw, statistic_csv
from .readers.exec_order import execution_order

Warn = Callable[[str], None]


@dataclass
class DumpIndex:
    executions: Dict[int, List[OpExecution]] = field(default_factory=dict)   # rank -> ordered executions
    overflow_records: List[OverflowRecord] = field(default_factory=list)
    files: int = 0
    unknown_files: int = 0
    rank_roots: Dict[Tuple[int, str], Optional[str]] = field(default_factory=dict)  # (rank, graph) -> rank root
    layouts: List[str] = field(default_factory=list)
    unknown_examples: List[str] = field(default_factory=list)   # a few files whose names were not understood
    unreadable: List[str] = field(default_factory=list)         # dump files that yielded nothing readable
    graphs: Dict[Tuple[int, str], object] = field(default_factory=dict)  # (rank, graph) -> GraphIndex a reader built
    # Per step, kept apart from `executions` (which may hold only the executions that need a closer look):
    iterations: Dict[int, List[int]] = field(default_factory=dict)       # rank -> steps that hold op runs
    step_start: Dict[Tuple[int, int], int] = field(default_factory=dict)  # (rank, step) -> earliest timestamp
    has_statistics: bool = False


def _npy_event(path: str, parsed: names.ParsedName, d: DumpDir) -> TensorEvent:
    return TensorEvent(source=path, rank=d.rank, graph=d.graph, iteration=d.iteration, op_type=parsed.op_type,
                       op_name=parsed.op_name, task_id=parsed.task_id, stream_id=parsed.stream_id,
                       timestamp=parsed.timestamp, io=parsed.io or INPUT, slot=parsed.slot or 0, fmt=parsed.fmt,
                       dtype=parsed.dtype, context_id=parsed.context_id, thread_id=parsed.thread_id)


def _is_binary_dump(name: str) -> bool:
    if name.endswith((".npy", ".csv", ".json")) or name.startswith("Opdebug."):
        return False
    parsed = names.parse(name)
    return parsed is not None and parsed.kind == names.KIND_BIN


def events_of_dir(d: DumpDir, warn: Warn, counters: Dict[str, int]) -> Tuple[List[TensorEvent], List[OverflowRecord]]:
    events: List[TensorEvent] = []
    records: List[OverflowRecord] = []
    try:   # regular files only (symlinks followed); layout discovery already warned about FIFOs and devices
        entries = sorted(e.name for e in os.scandir(d.path) if e.is_file())
    except OSError as exc:
        warn(f"{d.path}: cannot list directory ({exc.strerror})")
        return events, records
    mapping = names.read_mapping(os.path.join(d.path, "mapping.csv"), warn) if "mapping.csv" in entries else {}
    stat_rows: List[TensorEvent] = []
    if "statistic.csv" in entries:
        counters["files"] += 1
        stat_path = os.path.join(d.path, "statistic.csv")
        complaints: List[str] = []

        def stat_warn(message: str):
            complaints.append(message)
            warn(message)

        stat_rows = statistic_csv.read_statistic_csv(stat_path, rank=d.rank, graph=d.graph, iteration=d.iteration,
                                                     warn=stat_warn)
        if complaints:     # rows (or the whole file) that could not be read could hold the bad value: never clean
            counters.setdefault("unreadable", []).append(stat_path)
    npy_files = sum(1 for name in entries if name.endswith(".npy"))
    # When statistic.csv has a row for every npy file here (and there is no binary file to join), its rows are
    # the events: no file name needs parsing and no tensor will be read.
    rows_suffice = bool(stat_rows) and len(stat_rows) >= npy_files and not any(
        _is_binary_dump(n) for n in entries)
    if rows_suffice:
        counters["files"] += npy_files
    for name in entries:
        if name in ("statistic.csv", "mapping.csv") or name.startswith("acl_dump") or (
                rows_suffice and name.endswith(".npy")):
            continue
        path = os.path.join(d.path, name)
        parsed = names.parse(mapping.get(name, name))
        if parsed is None:
            if name.endswith((".npy", ".json", ".bin")) or (name.count(".") >= 4 and not name.endswith(".csv")):
                warn(f"{path}: file name not understood, skipped")
                counters["unknown"] += 1
                if len(counters.setdefault("unknown_examples", [])) < 5:
                    counters["unknown_examples"].append(path)
            continue
        counters["files"] += 1
        if parsed.kind == names.KIND_NPY:
            events.append(_npy_event(path, parsed, d))
        elif parsed.kind == names.KIND_OPDEBUG:
            try:
                opdebug.read_entries(path)
            except opdebug.OpdebugFormatError:
                counters.setdefault("unreadable", []).append(path)
            records.extend(opdebug.read_opdebug(
                path, rank=d.rank, graph=d.graph, iteration=d.iteration, file_timestamp=parsed.timestamp,
                file_task_id=parsed.task_id, file_stream_id=parsed.stream_id, warn=warn))
        elif parsed.kind == names.KIND_BIN:
            found = dumpdata_bin.tensor_events(
                path, parsed, rank=d.rank, graph=d.graph, iteration=d.iteration, warn=warn)
            if not found:
                counters.setdefault("unreadable", []).append(path)
            events.extend(found)
        elif parsed.kind == names.KIND_RAW:
            events.append(raw.raw_event(path, parsed, rank=d.rank, graph=d.graph, iteration=d.iteration))
        elif parsed.kind == names.KIND_OPCSV:
            rows = statistic_csv.read_op_csv(path, parsed, rank=d.rank, graph=d.graph, iteration=d.iteration,
                                             warn=warn)
            if not rows:
                counters.setdefault("unreadable", []).append(path)
            stat_rows.extend(rows)
    if rows_suffice:
        return stat_rows, records
    if stat_rows:
        events = merge_statistics(events, stat_rows)
    return events, records


def _tensor_key(e: TensorEvent):
    return (e.op_type, e.op_name, e.task_id, e.stream_id, e.timestamp, e.io, e.slot)


def merge_statistics(events: List[TensorEvent], rows: List[TensorEvent]) -> List[TensorEvent]:
    """statistic.csv rows give stats to the tensor files they describe (same op, io, slot; the nearest timestamp,
    since a row and its file need not carry the same one); rows without a file stand alone."""
    by_key: Dict[tuple, List[TensorEvent]] = defaultdict(list)
    for e in events:
        by_key[_tensor_key(e)[:4] + _tensor_key(e)[5:]].append(e)
    for row in rows:
        candidates = [e for e in by_key.get(_tensor_key(row)[:4] + _tensor_key(row)[5:], []) if e.stats is None]
        match = min(candidates, key=lambda e: abs(e.timestamp - row.timestamp), default=None)
        if match is not None:
            match.stats = row.stats
            match.dtype = match.dtype or row.dtype
            match.shape = match.shape or row.shape
        else:
            events.append(row)
    return events


def _drop_duplicates(events: List[TensorEvent], warn: Warn) -> List[TensorEvent]:
    """The same tensor twice (a copied directory, a linked file): keep the first, say so once per file."""
    seen: Dict[tuple, str] = {}
    kept = []
    for e in events:
        key = (e.graph, e.iteration) + _tensor_key(e)
        if key in seen:
            warn(f"{e.source}: duplicate of {seen[key]}, ignored")
            continue
        seen[key] = e.source
        kept.append(e)
    return kept


def group_executions(events: Iterable[TensorEvent], warn: Warn) -> List[OpExecution]:
    """Tensors of one op run share op/task/stream in one directory; a repeated (io, slot) starts a new run."""
    groups: Dict[tuple, List[TensorEvent]] = defaultdict(list)
    for e in events:
        groups[(e.rank, e.graph, e.iteration, e.op_type, e.op_name, e.task_id, e.stream_id)].append(e)
    executions: List[OpExecution] = []
    for key, members in groups.items():
        members.sort(key=lambda e: e.timestamp)
        current: Optional[OpExecution] = None
        seen = set()
        for e in members:
            slot_key = (e.io, e.slot)
            if current is None or slot_key in seen:   # a repeat: the op ran again (loops, micro-batches)
                current = OpExecution(*key)
                executions.append(current)
                seen = set()
            seen.add(slot_key)
            (current.inputs if e.io == INPUT else current.outputs).append(e)
    for ex in executions:
        ex.inputs.sort(key=lambda e: e.slot)
        ex.outputs.sort(key=lambda e: e.slot)
    return executions


def build_index(dirs: List[DumpDir], warn: Warn, ranks: Optional[List[int]] = None,
                iterations: Optional[List[int]] = None) -> DumpIndex:
    index = DumpIndex()
    counters = {"files": 0, "unknown": 0}
    per_rank: Dict[int, List[TensorEvent]] = defaultdict(list)
    orders: Dict[Tuple[int, str], Dict[str, int]] = {}
    msprobe_nodes: Dict[Tuple[int, str], list] = {}
    for d in dirs:
        if ranks is not None and d.rank not in ranks:
            continue
        if iterations is not None and d.iteration not in iterations:
            continue
        if d.layout not in index.layouts:
            index.layouts.append(d.layout)
        index.rank_roots.setdefault((d.rank, d.graph), d.rank_root)
        if d.rank_root and (d.rank, d.graph) not in orders:
            orders[(d.rank, d.graph)] = execution_order(d.rank_root, d.graph, warn)
        if d.layout == LAYOUT_MSPROBE:      # msprobe framework dump: dump.json, not file names
            from .readers import msprobe
            events, nodes, files, unread = msprobe.read_step_dir(d, warn)
            counters["files"] += files
            if unread:     # a step whose dump.json cannot be read: never a clean verdict
                counters.setdefault("unreadable", []).append(os.path.join(d.path, msprobe.DUMP_JSON))
            msprobe_nodes.setdefault((d.rank, d.graph), []).extend(nodes)
            records = []
        else:
            events, records = events_of_dir(d, warn, counters)
        per_rank[d.rank].extend(events)
        index.overflow_records.extend(records)
    index.files = counters["files"]
    index.unknown_files = counters["unknown"]
    index.unknown_examples = list(counters.get("unknown_examples", []))
    index.unreadable = list(counters.get("unreadable", []))
    if msprobe_nodes:
        from .readers.ir_graph import GraphIndex
        from .readers.msprobe import forward_nodes
        for key, nodes in msprobe_nodes.items():
            unique = list({n.full_name: n for n in reversed(nodes)}.values())[::-1]
            index.graphs[key] = GraphIndex(unique + forward_nodes(unique))
    for rank, events in per_rank.items():
        events = _drop_duplicates(events, warn)
        executions = group_executions(events, warn)
        for ex in executions:
            ex.order = orders.get((rank, ex.graph), {}).get(ex.op_name)
        executions.sort(key=lambda ex: (ex.iteration, ex.time, ex.order if ex.order is not None else 1 << 30))
        index.executions[rank] = executions
        for ex in executions:
            key = (rank, ex.iteration)
            index.step_start[key] = min(index.step_start.get(key, ex.time), ex.time)
            index.has_statistics = index.has_statistics or any(e.stats is not None for e in ex.outputs)
        index.iterations[rank] = sorted({ex.iteration for ex in executions})
    return index
