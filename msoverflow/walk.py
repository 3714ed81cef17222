"""The one walk over a dump: (rank, step) units, each read through the reader registry and judged on its own.
The reduce (msoverflow/parallel.py) orders the units' summaries; analyze builds the report from them.

Every dump goes this way: npy, binary DumpData, statistic.csv, per-op statistics, Opdebug-flagged and msprobe
framework dumps. Two things are modes of the unit, not other pipelines:
  - flags: the dump holds hardware overflow records (Opdebug). The unit matches its records to its ops, judges
    by the flags (only flagged ops' inputs decide) and reads its collectives to see what other ranks delivered;
  - msprobe: the registry's msprobe reader turns a step's dump.json into events and graph nodes.
Inside a unit, npy files and statistic.csv rows stay columns (the readers hand them over as such): the outputs of
a step are checked in one vectorised pass and only op runs that hold something suspicious (a bad or saturated
value, a tensor that could not be checked, a repeated run) become OpExecution objects. Those, and every tensor
other readers gave as objects, go through the same judge(): the rules stay the one place that tells origin from
propagator.

A unit hands the reduce facts, never a sample to infer from: its step span (first and last op time of every op),
counts (op runs, files), what was dumped (DumpedFacts), every collective that delivered a bad value, the judged
executions with their verdicts, the records and the files it could not read.

For other tools (compare two runs, repro): `units(path, ranks, steps)` plans the units of a dump and
`unit_events(unit, warn)` / `unit_executions(unit, warn)` give every tensor event of one unit as objects;
`read_unit_runs(unit, warn)` gives its op runs, a plain npy unit kept as columns (objects made per run on demand).
"""
from __future__ import annotations

import functools
import math
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from . import names
from .dtypes import canonical
from .errors import READ_ERRORS, reading
from .evaluate import TensorAccess
from .layout import Dump, DumpDir, Unit
from .model import CLEAN, CROSS_RANK, INPUT, OUTPUT, PROPAGATOR, OpExecution, OverflowRecord, Status, TensorEvent
from .readers import npy
from .readers.exec_order import execution_order
from .readers.registry import DirContent, read_dir

if TYPE_CHECKING:
    from .readers.ir_graph import GraphIndex

BATCH_BYTES = 64 << 20      # small tensors checked together, at most this many bytes at a time
Warn = Callable[[str], None]

# A Cell in a scoped op name ("network-WithLossCell_", "fc1-Dense_"), in a `{type}.{name}.{task}.{stream}` prefix
_SCOPED_PREFIX = re.compile(r"-[A-Z][A-Za-z0-9]*(?:_|\.-?[0-9]+\.-?[0-9]+$)", re.M)
_SCOPED_RAW = r"-[A-Z][A-Za-z0-9]*([_/]|$)"     # the same, on names as statistic.csv writes them
_CELL_SEGMENT = re.compile(r"-[A-Z][A-Za-z0-9]*(_|$)")


@dataclass
class DumpedFacts:
    """What the files of a step hold (counted over every op run, not a sample): coverage.py reads the dump
    config's limits from these."""
    runs: int = 0               # op runs
    parameter_runs: int = 0     # runs of Parameter "ops" (weights, graph inputs)
    with_inputs: int = 0        # runs with an input tensor dumped
    with_outputs: int = 0       # runs with an output tensor dumped
    scoped: int = 0             # op runs (not Parameters) whose name carries a Cell (graph-mode naming); >= 1 if any
    flagged: int = 0            # op runs (not Parameters) the hardware flagged

    def add(self, other: "DumpedFacts") -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def count(self, executions: Iterable[OpExecution]) -> None:
        for ex in executions:
            self.runs += 1
            self.with_inputs += bool(ex.inputs)
            self.with_outputs += bool(ex.outputs)
            if ex.is_parameter:
                self.parameter_runs += 1
                continue
            self.flagged += bool(ex.flags)
            self.scoped += bool(_CELL_SEGMENT.search(ex.op_name))

    @property
    def ops(self) -> int:
        return self.runs - self.parameter_runs


@dataclass
class UnitSummary:
    rank: int
    step: int
    judged: list = field(default_factory=list)        # [(OpExecution, Verdict)] not clean, in time order
    arrivals: List[OpExecution] = field(default_factory=list)   # every collective that delivered a bad value
    after_arrival: List[int] = field(default_factory=list)  # indices in judged: origins after a bad arrival
    has_origin: bool = False
    earlier_bad: bool = False      # this rank has seen a bad value by the end of this step
    span: Optional[Tuple[int, int]] = None    # first and last op time of the step (this rank's clock)
    facts: DumpedFacts = field(default_factory=DumpedFacts)
    records: List[OverflowRecord] = field(default_factory=list)   # every Opdebug record read (matched_op set)
    nodes: Dict[Tuple[int, str], list] = field(default_factory=dict)   # msprobe: (rank, graph) -> GraphNodes
    files: int = 0
    has_statistics: bool = False
    tensors_read: int = 0
    side_reads: int = 0            # of those, reads that only told whether a collective delivered a bad value
    # what a worker's scan found of the tensors of the runs it kept (evaluate.TensorAccess.known), handed to the
    # analysis's access so later stages do not read them again
    known: Dict[tuple, tuple] = field(default_factory=dict)
    unreadable_count: int = 0
    unknown: List[str] = field(default_factory=list)       # files whose names were not understood
    unreadable: List[str] = field(default_factory=list)    # files that could not be read
    truncated: List[str] = field(default_factory=list)     # of those, files that stop short of their header
    refused: List[str] = field(default_factory=list)       # "path: why" of statistics files refused whole
    undecodable: List[Tuple[str, str]] = field(default_factory=list)   # (file, why) of tensors never decodable
    warnings: List[str] = field(default_factory=list)
    layouts: List[str] = field(default_factory=list)
    rank_roots: Dict[Tuple[int, str], Optional[str]] = field(default_factory=dict)

    @property
    def executions(self) -> int:
        return self.facts.runs


def units(path: str, ranks=None, steps=None, warn: Warn = lambda message: None) -> List[Unit]:
    """The units of the dump at `path` (any layout), optionally only some ranks/steps."""
    return Dump.open(path, warn).plan(ranks, steps).units


def _file_of(ex: OpExecution) -> str:
    """A file of this op execution, to name in an internal error."""
    for event in ex.inputs + ex.outputs:
        return event.source
    return ex.flags[0].source if ex.flags else f"{ex.op_type} {ex.op_name}"


def _order(rank_root: str, graph: str) -> Mapping[str, int]:
    """The graph's kernel order, read once per version of its csv (the steps of a rank share it)."""
    path = os.path.join(rank_root, "execution_order", f"ms_execution_order_graph_{graph}.csv")
    try:
        stamp = os.stat(path)
        version = (stamp.st_mtime_ns, stamp.st_size, stamp.st_ino)
    except OSError:
        return {}
    return _order_of(rank_root, graph, version)


@lru_cache(maxsize=256)
def _order_of(rank_root: str, graph: str, _version) -> Mapping[str, int]:
    return execution_order(rank_root, graph, lambda message: None)


# ---- the unit's events as objects (every reader, no judging) ----------------------------------------------

def unit_events(unit: Unit, warn: Warn = lambda message: None) -> List[TensorEvent]:
    """Every tensor event of one unit as an object (npy columns and statistic rows included), duplicates
    dropped: the registry's answer for one (rank, step), for tools that compare or copy tensors."""
    return [e for ex in read_unit(unit, warn).executions for e in ex.inputs + ex.outputs]


def unit_executions(unit: Unit, warn: Warn = lambda message: None) -> List[OpExecution]:
    """unit_events() grouped into op runs, in time order (graph order breaks ties)."""
    return read_unit(unit, warn).executions


@dataclass
class UnitRead:
    """One unit read whole, as objects: its op runs in time order (Opdebug records joined to their ops), and
    where their graphs are (msprobe's built from its entries; `.ir` files under the rank roots); `unread`: what its
    readers could not read (unread_of), before any tensor is touched."""
    executions: List[OpExecution]
    records: List[OverflowRecord]
    graphs: Dict[Tuple[int, str], GraphIndex]
    rank_roots: Dict[Tuple[int, str], Optional[str]]
    unread: Dict[str, Status] = field(default_factory=dict)


def unread_of(contents: Iterable[DirContent], events: Iterable[TensorEvent],
              known: Optional[Dict[str, Status]] = None) -> Dict[str, Status]:
    """The one rule of "read", for analyze and compare alike: every file a reader could not read (a header that
    does not parse, an empty file, a shortened name no mapping.csv row resolves) and every tensor whose bytes could
    not be read (a payload cut short, a file that turned out empty or corrupt when read): path -> Status
    (TRUNCATED when the file stops short, else UNREADABLE). Any of these could hold the origin. known: what an
    earlier look at the same unit found (UnitRead.unread), to which the tensors read since are added."""
    found: Dict[str, Status] = dict(known or {})
    for content in contents:
        for path, status in content.unread.items():
            if status is Status.TRUNCATED or path not in found:
                found[path] = status
    for e in events:
        if e.status.unread and (e.status is Status.TRUNCATED or e.source not in found):
            found[e.source] = e.status
    return found


def split_unread(found: Dict[str, Status]) -> Tuple[List[str], List[str]]:
    """(every unread file, the ones cut short), sorted."""
    return sorted(found), sorted(path for path, status in found.items() if status is Status.TRUNCATED)


def read_unit(unit: Unit, warn: Warn = lambda message: None) -> UnitRead:
    return _unit_read(unit, [read_dir(d, warn) for d in unit.dirs], warn)


def _unit_read(unit: Unit, contents: List[DirContent], warn: Warn,
               ops: Optional[Callable[[str], bool]] = None) -> UnitRead:
    events: List[TensorEvent] = []
    records: List[OverflowRecord] = []
    nodes: Dict[Tuple[int, str], list] = {}
    for content in contents:
        d = content.d
        made = _content_events(content, all_rows=True, ops=ops)
        events.extend(made if ops is None else [e for e in made if ops(e.op_name)])
        records.extend(content.records)
        if content.nodes:
            nodes.setdefault((d.rank, d.graph), []).extend(content.nodes)
    executions = group_executions(drop_duplicates(events, warn))
    _attach_order(executions, unit)
    if records:
        _match_records(records, executions)
    return UnitRead(executions, records, msprobe_graphs(nodes),
                    {(d.rank, d.graph): d.rank_root for d in unit.dirs}, unread_of(contents, events))


class OpRun:
    """One op run as a tool that matches runs needs it (compare): names, first time, graph order and its npy
    output files as (slot, path, dtype); execution() gives it as an OpExecution with its tensors as objects,
    made only when asked for a unit read as columns."""
    __slots__ = ("rank", "graph", "step", "op_type", "op_name", "time", "order", "npy_outputs", "n_outputs",
                 "_make", "_execution", "_key")

    def __init__(self, rank, graph, step, op_type, op_name, time, order, npy_outputs, n_outputs, make):
        self.rank, self.graph, self.step, self.op_type, self.op_name = rank, graph, step, op_type, op_name
        self.time, self.order, self.npy_outputs, self.n_outputs = time, order, npy_outputs, n_outputs
        self._make, self._execution, self._key = make, None, None

    @classmethod
    def of(cls, ex: OpExecution) -> "OpRun":
        plain = [(e.slot, e.source, e.dtype) for e in ex.outputs
                 if not e.loader and e.stats is None and e.source.endswith(".npy")]
        run = cls(ex.rank, ex.graph, ex.step, ex.op_type, ex.op_name, ex.time, ex.order, plain,
                  len(ex.outputs), None)
        run._execution = ex
        return run

    @property
    def key(self) -> tuple:
        """What names this run within one dump (never an object's id()): two runs of one op in one step differ by
        their time or their place in the graph's order. Made once: compare asks for it at every stage."""
        if self._key is None:
            self._key = (self.rank, self.step, self.graph, self.op_type, self.op_name, self.time, self.order)
        return self._key

    @property
    def is_parameter(self) -> bool:
        return self.op_type == "Parameter"

    def execution(self) -> OpExecution:
        if self._execution is None:
            self._execution = self._make()
            self._execution.order = self.order
        return self._execution

    def tensors(self) -> List[TensorEvent]:
        """The tensors made so far (none while the run is still columns): what unread_of() looks at after a read."""
        ex = self._execution
        return ex.inputs + ex.outputs if ex is not None else []


def read_unit_runs(unit: Unit, warn: Warn = lambda message: None,
                   ops: Optional[Callable[[str], bool]] = None) -> Tuple[List[OpRun], UnitRead]:
    """A unit's op runs in time order (graph order breaks ties), as read_unit() orders its executions. A unit of
    plain npy files (one directory per graph, no statistics, no repeated run, no odd name) stays columns, as in
    analyze's scan: its names parsed in bulk, tensors made objects only when a run's execution() is asked for;
    any other unit is read whole as objects. ops(op name as in file names): only those ops' runs (a statistic.csv
    then makes objects of their rows only: a few ops of a 50,000-row step cost what they are)."""
    contents = [read_dir(d, warn) for d in unit.dirs]
    roots = {(d.rank, d.graph): d.rank_root for d in unit.dirs}
    runs = _column_runs(contents, roots)
    if runs is not None:
        if ops is not None:
            runs = [run for run in runs if ops(run.op_name)]
        return runs, UnitRead([], [], {}, roots, unread_of(contents, []))
    read = _unit_read(unit, contents, warn, ops)
    return [OpRun.of(ex) for ex in read.executions], read


def _column_runs(contents: List[DirContent], roots) -> Optional[List[OpRun]]:
    import numpy as np

    if len({c.d.graph for c in contents}) != len(contents) or any(
            c.npy is None or c.table is not None or c.events or c.records or c.nodes or c.npy.odd
            for c in contents):
        return None
    runs: List[OpRun] = []
    for content in contents:
        d, parsed = content.d, content.npy
        assert parsed is not None           # columns in every content: checked above
        if not parsed.rows:
            continue
        codes_of: Dict[str, int] = {}
        codes = [codes_of.setdefault(p, len(codes_of)) for p in parsed.prefix]
        code_array = np.asarray(codes, dtype=np.int64)
        stamp_array = np.asarray(parsed.timestamp, dtype=np.int64)
        is_output = [x == OUTPUT for x in parsed.io]
        grouped = _group_runs(code_array, stamp_array, np.asarray(is_output, dtype=bool),
                              np.asarray(parsed.slot, dtype=np.int64), len(codes_of))
        if grouped is None or grouped[1].any():     # a repeated tensor or run: the object path says which
            return None
        first = _group_first_times(code_array, stamp_array, len(codes_of)).tolist()
        # each op's rows and its output files, in one pass over the rows
        members: List[List[int]] = [[] for _ in codes_of]
        outputs_of: List[list] = [[] for _ in codes_of]
        slot, dtype, file_of, files = parsed.slot, parsed.dtype, parsed.rows, content.npy_files
        prefix = d.path + os.sep
        for k, code in enumerate(codes):
            members[code].append(k)
            if is_output[k]:
                outputs_of[code].append((slot[k], prefix + files[file_of[k]], dtype[k]))
        root = roots.get((d.rank, d.graph))
        order = _order(root, d.graph) if root else {}
        rank, graph, step = d.rank, d.graph, d.step
        for code, op in enumerate(codes_of):
            split = _split_prefix(op)
            if split is None:
                return None
            outputs = outputs_of[code]
            if len(outputs) > 1:
                outputs.sort()
            runs.append(OpRun(rank, graph, step, split[0], split[1], first[code], order.get(split[1]), outputs,
                              len(outputs), functools.partial(_one_execution, content, members[code])))
    runs.sort(key=_time_then_order)
    return runs


def _time_then_order(run: "OpRun") -> tuple:
    return (run.time, run.order if run.order is not None else 1 << 30)


_split_prefix = lru_cache(maxsize=1 << 16)(names.split_prefix)    # the same ops recur on every rank and step


def _one_execution(content: DirContent, rows: List[int]) -> OpExecution:
    return group_executions(_npy_events(content, rows))[0]


def msprobe_graphs(nodes: Dict[Tuple[int, str], list]) -> Dict[Tuple[int, str], GraphIndex]:
    """(rank, graph) -> GraphIndex of the nodes msprobe's reader built from its steps' entries."""
    if not nodes:
        return {}
    from .readers.ir_graph import GraphIndex
    from .readers.msprobe import forward_nodes
    graphs: Dict[Tuple[int, str], GraphIndex] = {}
    for key, found in nodes.items():
        unique = list({n.full_name: n for n in reversed(found)}.values())[::-1]
        graphs[key] = GraphIndex(unique + forward_nodes(unique))
    return graphs


def _content_events(content: DirContent, all_rows: bool,
                    ops: Optional[Callable[[str], bool]] = None) -> List[TensorEvent]:
    """A directory's tensors as objects: statistic rows (stats joined to their tensor files), npy files, and
    what the other readers made. ops: only the rows of the ops it takes (the caller filters the rest)."""
    d = content.d
    table_rows = None
    if content.table is not None:
        table_rows = _all(content.table.size) if ops is None else content.table.rows_of_ops(ops)
    rows = content.table.events(table_rows, d.rank, d.graph, d.step) if content.table is not None else []
    files = _npy_events(content, range(len(content.npy.rows))) if content.npy is not None else []
    if content.table is not None and content.table_covers_npy:
        return rows + content.events
    events = merge_statistics(files + content.events, rows) if rows else files + content.events
    return events


def _all(size: int):
    import numpy as np
    return np.arange(size)


def _npy_events(content: DirContent, rows) -> List[TensorEvent]:
    """TensorEvents of the given rows of a directory's npy name columns."""
    d, columns = content.d, content.npy
    assert columns is not None          # called for contents whose npy names were parsed
    prefix = d.path + os.sep
    ops: Dict[str, Optional[tuple]] = {}
    events = []
    for k in rows:
        odd = columns.odd.get(k)
        op = ops.get(columns.prefix[k])
        if op is None:
            op = ops[columns.prefix[k]] = names.split_prefix(columns.prefix[k])
        assert op is not None               # parse_many's prefixes split
        events.append(TensorEvent(
            source=prefix + content.npy_files[columns.rows[k]], rank=d.rank, graph=d.graph, step=d.step,
            op_type=op[0], op_name=op[1], task_id=op[2], stream_id=op[3], timestamp=columns.timestamp[k],
            io=columns.io[k] or INPUT, slot=columns.slot[k], fmt=columns.fmt[k], dtype=columns.dtype[k],
            shape=odd.shape if odd is not None else None,
            context_id=odd.context_id if odd is not None else None,
            thread_id=odd.thread_id if odd is not None else None))
    return events


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


def drop_duplicates(events: List[TensorEvent], warn: Warn) -> List[TensorEvent]:
    """The same tensor twice (a copied directory, a linked file): keep the first, say so once per file."""
    seen: Dict[tuple, str] = {}
    kept = []
    for e in events:
        key = (e.graph, e.step) + _tensor_key(e)
        if key in seen:
            warn(f"{e.source}: duplicate of {seen[key]}, ignored")
            continue
        seen[key] = e.source
        kept.append(e)
    return kept


def group_executions(events: Iterable[TensorEvent]) -> List[OpExecution]:
    """Tensors of one op run share op/task/stream in one directory; a repeated (io, slot) starts a new run."""
    groups: Dict[tuple, List[TensorEvent]] = defaultdict(list)
    for e in events:
        groups[(e.rank, e.graph, e.step, e.op_type, e.op_name, e.task_id, e.stream_id)].append(e)
    executions: List[OpExecution] = []
    for key, members in groups.items():
        members.sort(key=lambda e: e.timestamp)
        current: Optional[OpExecution] = None
        seen: Set[tuple] = set()
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


def _attach_order(executions: List[OpExecution], unit: Unit) -> None:
    roots = {(d.rank, d.graph): d.rank_root for d in unit.dirs}
    orders: Dict[Tuple[int, str], Mapping[str, int]] = {}  # the csv stat'ed once per graph, not once per op
    for ex in executions:
        root = roots.get((ex.rank, ex.graph))
        if root and (ex.rank, ex.graph) not in orders:
            orders[(ex.rank, ex.graph)] = _order(root, ex.graph)
        ex.order = orders[(ex.rank, ex.graph)].get(ex.op_name) if root else None
    executions.sort(key=lambda ex: (ex.time, ex.order if ex.order is not None else 1 << 30))


def _match_records(records: List[OverflowRecord], executions: List[OpExecution]) -> None:
    """Opdebug records join the op they name (ids inside the record), in their directory first, else in their
    step (2.2 async: rank_{r}/debug_files/{iter}/ holds the records, rank_{r}/{net}/{graph}/{iter}/ the ops)."""
    from .readers.opdebug import match_records
    by_dir: Dict[str, List[OpExecution]] = defaultdict(list)
    for ex in executions:
        by_dir[ex.graph].append(ex)
    for record in records:
        pairs = match_records([record], by_dir.get(record.graph, []))
        if all(ex is None for _, ex in pairs):
            pairs = match_records([record], executions)
        for rec, matched in pairs:
            if matched is not None:
                matched.flags.append(rec)
                rec.matched_op = matched.op_name


# ---- the unit ------------------------------------------------------------------------------------------------

def scan_unit(unit: Unit, kn, earlier_bad: bool = False, access: Optional[TensorAccess] = None,
              warn: Optional[Warn] = None, flags: bool = False) -> UnitSummary:
    """Judge one rank's step. `access` and `warn` are the caller's when it runs in the same process; a worker
    makes its own and sends warnings and counts back in the summary. flags: the dump holds hardware overflow
    records (every unit of it is judged by them)."""
    from .rules import judge

    summary = UnitSummary(unit.rank, unit.step)
    note = summary.warnings.append if warn is None else warn
    # A unit's own access: its caches are keyed by object id, and the events of a clean step die with it.
    caller_access, access = access, TensorAccess(note)
    twins = Counter((d.graph, d.step) for d in unit.dirs)
    executions: List[OpExecution] = []
    contents: List[DirContent] = []
    plain_events: List[TensorEvent] = []
    firsts: List[int] = []
    lasts: List[int] = []
    for d in unit.dirs:
        if d.layout not in summary.layouts:
            summary.layouts.append(d.layout)
        summary.rank_roots.setdefault((d.rank, d.graph), d.rank_root)
        content = read_dir(d, note)
        contents.append(content)
        summary.files += content.files
        summary.unknown += content.unknown
        summary.refused += content.refused
        summary.records += content.records
        if content.nodes:
            summary.nodes.setdefault((d.rank, d.graph), []).extend(content.nodes)
        step = None
        # Columns where they fit: one directory of its (graph, step) (a twin needs the duplicate check), and no
        # hardware flags (records are matched to every op of their step as objects, and unflagged ops are judged
        # from statistics only, so no output is read in a batch; overflow-only dumps hold few files).
        if twins[(d.graph, d.step)] == 1 and not flags and not content.records:
            if content.table is not None and content.table_covers_npy:
                step = _statistic_step(d, content.table)
            elif content.npy is not None and content.table is None:
                step = _npy_step(content, access)
        if step is None:
            plain_events.extend(_content_events(content, all_rows=True))
            continue
        suspicious, span, facts, statistics = step
        plain_events.extend(content.events)
        executions.extend(suspicious)
        summary.facts.add(facts)
        summary.facts.count(suspicious)
        summary.has_statistics |= statistics
        if span is not None:
            firsts.append(span[0])
            lasts.append(span[1])
    if plain_events:
        plain = group_executions(drop_duplicates(plain_events, note))
        summary.facts.count(plain)
        summary.has_statistics |= any(e.stats is not None for ex in plain for e in ex.outputs)
        executions.extend(plain)
        if plain:
            times = [ex.time for ex in plain]
            firsts.append(min(times))
            lasts.append(max(times))
    _attach_order(executions, unit)
    if summary.records:
        _match_records(summary.records, executions)
        summary.facts.flagged += sum(1 for ex in executions if ex.flags and not ex.is_parameter)
    summary.span = (min(firsts), max(lasts)) if firsts else None

    arrived = False
    side = TensorAccess(note)      # reads that tell arrivals only (not what decided an origin)
    for ex in executions:
        with reading(_file_of(ex)):
            verdict = judge(ex, access, kn, earlier_bad, flags_answer=flags)
        if verdict.role == CLEAN:
            # Flags mode judges unflagged ops from statistics only: a collective's tensors are read to see whether
            # it delivered a bad value from another rank (the rank table names every arrival).
            if flags and kn.is_collective(ex.op_type) and ex.outputs:
                with reading(_file_of(ex)):
                    if judge(ex, side, kn, earlier_bad=False).kind == CROSS_RANK:
                        summary.arrivals.append(ex)
            elif flags and earlier_bad and ex.op_type in kn.state_updates and len(ex.inputs) > 1:
                # an optimizer update after a bad value: its inputs say which parameter was hit (parameters.py)
                with reading(_file_of(ex)):
                    update = judge(ex, side, kn, earlier_bad=True)
                if update.role == PROPAGATOR:
                    summary.judged.append((ex, update))
            continue
        earlier_bad = True
        if verdict.kind == CROSS_RANK:
            arrived = True
            summary.arrivals.append(ex)
        if verdict.role != PROPAGATOR:          # an origin (or any role that answers for the rank)
            summary.has_origin = True
            if arrived:
                summary.after_arrival.append(len(summary.judged))
        summary.judged.append((ex, verdict))
    summary.earlier_bad = earlier_bad
    events = [e for ex in executions for e in ex.inputs + ex.outputs]
    summary.undecodable = [(e.source, e.note) for e in events if e.status is Status.UNDECODABLE]
    summary.unreadable, summary.truncated = split_unread(unread_of(contents, events))
    kept = [ex for ex, _ in summary.judged] + summary.arrivals
    summary.side_reads = side.tensors_read
    if caller_access is not None:
        caller_access.adopt(access, [e for ex in kept for e in ex.inputs + ex.outputs])
        caller_access.adopt(side, [])
    else:
        summary.tensors_read = access.tensors_read + side.tensors_read
        summary.unreadable_count = access.unreadable + side.unreadable
        summary.known = access.known([e for ex in kept for e in ex.inputs + ex.outputs])
    return summary


# ---- columns: how a unit reads npy files and statistic.csv fast ---------------------------------------------

def _group_first_times(codes, stamps, n_groups: int):
    """The earliest timestamp of each group (numpy)."""
    import numpy as np
    first = np.full(n_groups, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, codes, stamps)
    return first


def _column_facts(codes, is_output, is_parameter_group, clean_groups, scoped: bool) -> DumpedFacts:
    """DumpedFacts of the clean groups (one op run each; the others become objects and are counted as such)."""
    import numpy as np
    n = clean_groups.size
    has_output = np.bincount(codes[is_output], minlength=n) > 0
    has_input = np.bincount(codes[~is_output], minlength=n) > 0
    return DumpedFacts(runs=int(clean_groups.sum()),
                       parameter_runs=int((clean_groups & is_parameter_group).sum()),
                       with_inputs=int((clean_groups & has_input).sum()),
                       with_outputs=int((clean_groups & has_output).sum()), scoped=int(scoped))


def _span(first_times, executions: List[OpExecution], clean_groups) -> Optional[Tuple[int, int]]:
    """First and last op start of the step: the clean groups' first times and the objects' times."""
    times = first_times[clean_groups]
    extremes = [int(times.min()), int(times.max())] if times.size else []
    extremes += [ex.time for ex in executions]
    return (min(extremes), max(extremes)) if extremes else None
def _group_runs(codes, stamps, is_output, slot, n_groups: int):
    """Per group (numpy): whether it has an output, and whether an (io, slot) repeats (the op ran more than
    once). None when one tensor appears twice (same op, time, io and slot: the object path reports those)."""
    import numpy as np

    has_output = np.bincount(codes[is_output], minlength=n_groups) > 0
    key = (codes * 2 + is_output) * (int(slot.max()) + 1 if slot.size else 1) + slot
    unique, counts = np.unique(key, return_counts=True)
    repeated = np.zeros(n_groups, dtype=bool)
    twice = unique[counts > 1]
    if twice.size:
        again = np.isin(key, twice)
        tensors = list(zip(key[again].tolist(), stamps[again].tolist(), strict=True))
        if len(set(tensors)) != len(tensors):
            return None
        repeated[codes[again]] = True
    return has_output, repeated


@lru_cache(maxsize=1)
def _outputs_not_written() -> frozenset:
    from .rules.knowledge import knowledge
    kn = knowledge()
    return frozenset(kn.outputs_not_written)


def _npy_step(content: DirContent, access: TensorAccess):
    """(suspicious OpExecutions, span, DumpedFacts of the rest, False) of a directory's npy files as columns
    (content.npy: their names parsed in bulk); None when one tensor appears twice (the caller then takes every
    file as an object, and drops the duplicate with a warning)."""
    import numpy as np

    from .stats import scan, scan_rows

    d, parsed, npy_names = content.d, content.npy, content.npy_files
    if parsed is None or not parsed.rows:
        return None
    codes_of: Dict[str, int] = {}
    codes = [codes_of.setdefault(p, len(codes_of)) for p in parsed.prefix]
    prefixes = list(codes_of)
    rows, stamps, io, slot, dtype = parsed.rows, parsed.timestamp, parsed.io, parsed.slot, parsed.dtype
    n_groups = len(prefixes)
    code_array = np.asarray(codes, dtype=np.int64)
    stamp_array = np.asarray(stamps, dtype=np.int64)
    is_output = np.asarray([x == OUTPUT for x in io], dtype=bool)
    runs = _group_runs(code_array, stamp_array, is_output, np.asarray(slot, dtype=np.int64), n_groups)
    if runs is None:
        return None
    has_output, repeated = runs
    suspicious = (~has_output | repeated).tolist()
    for k in parsed.odd:        # FFTS+ sub-tasks, sliced ops, shapes in the name: judged as objects
        suspicious[codes[k]] = True
    writers = _outputs_not_written()
    for code, prefix_text in enumerate(prefixes):
        # an op that writes inputs in place and returns other outputs (MindSpore CPU's Adam): judge() reads them
        if prefix_text.split(".", 1)[0] in writers:
            suspicious[code] = True
    # the values a scan judges: floats and complex numbers (values.py)
    floats = {t: t is None or "float" in t or t.startswith("complex") for t in set(dtype)}

    # Every float output of the step, read once and checked in one pass (what judge() would ask first).
    # Files with the same header bytes and size are stacked as rows of one matrix.
    seeded: Dict[int, tuple] = {}       # row -> (bad, pinned, header)
    batches: Dict[tuple, list] = {}     # (header, declared, size) -> [[rows], [file bytes], bytes]

    def flush(key):
        header, declared, _ = key
        members, blobs, _ = batches.pop(key)
        payload = npy.stack_payloads(blobs, header)
        with reading(prefix + npy_names[rows[members[0]]]):    # an internal error names a file of the batch
            bad, pinned = scan_rows(payload, declared)
        for j, r in enumerate(members):
            seeded[r] = (bool(bad[j]), bool(pinned[j]), header)

    prefix = d.path + os.sep
    output_list = is_output.tolist()
    reader = npy.SmallReader()
    # The files of a step mostly share one header: a file read with the previous one's header (the reader gives
    # the same object), size and dtype in its name joins that one's batch at once (`same`: header, size, dtype,
    # the batch's key).
    same = None
    for r in [r for r in range(len(rows)) if output_list[r] and floats[dtype[r]] and not suspicious[codes[r]]]:
        path = prefix + npy_names[rows[r]]
        try:
            blob, header, whole = reader.read(path)
        except READ_ERRORS:
            suspicious[codes[r]] = True              # judge() reads it again and says what is wrong
            continue
        if same is not None and header is same[0] and len(blob) == same[1] and dtype[r] == same[2]:
            batch = batches[same[3]]
        else:
            same = None
            payload = header.payload_dtype
            if payload.kind not in "fc" or payload.hasobject or not (math.prod(header.shape) if header.shape else 1):
                seeded[r] = (False, False, header)
                continue
            declared = dtype[r] or canonical(header.header_dtype.name)
            if not whole:
                try:
                    with reading(path):
                        bad, pinned = scan(npy.open_array(path, header), declared)
                except READ_ERRORS:
                    suspicious[codes[r]] = True
                    continue
                seeded[r] = (bad, pinned, header)
                continue
            key = (header, declared, len(blob))
            if key not in batches:
                batches[key] = [[], [], 0]
            batch = batches[key]
            same = (header, len(blob), dtype[r], key)
        batch[0].append(r)
        batch[1].append(blob)
        batch[2] += len(blob)
        if batch[2] >= BATCH_BYTES:
            flush(same[3] if same is not None else key)
            same = None
    for key in list(batches):
        flush(key)
    for r, (bad, pinned, _) in seeded.items():
        if bad or pinned:
            suspicious[codes[r]] = True

    parameter_group = np.asarray([p.startswith("Parameter.") for p in prefixes], dtype=bool)
    suspicious_groups = np.asarray(suspicious, dtype=bool)
    clean_groups = ~suspicious_groups
    ops = [p for p, clean, param in zip(prefixes, clean_groups.tolist(), parameter_group.tolist(), strict=True) if clean and not param]
    scoped = bool(_SCOPED_PREFIX.search("\n".join(ops)))
    facts = _column_facts(code_array, is_output, parameter_group, clean_groups, scoped)
    members = [k for k, code in enumerate(codes) if suspicious[code]]
    events = _npy_events(content, members)
    for k, e in zip(members, events, strict=True):
        if k in seeded:
            bad, pinned, header = seeded[k]
            access.seed(e, header, bad, pinned)
    access.tensors_read += len(seeded)
    executions = group_executions(events)
    span = _span(_group_first_times(code_array, stamp_array, n_groups), executions, clean_groups)
    return executions, span, facts, False


def _statistic_step(d: DumpDir, table):
    """(suspicious OpExecutions, span, DumpedFacts of the rest, True) of a statistic.csv as columns: bad or
    saturated rows found vectorised, their op runs made objects; None when a tensor has two rows."""
    import numpy as np

    if table.size == 0 or table.has_duplicates():
        return None
    suspicious_rows = table.suspicious()
    groups, n_groups = table.group_codes()
    flagged = np.zeros(n_groups, dtype=bool)
    flagged[groups[suspicious_rows]] = True
    is_output = np.asarray([v == OUTPUT for v in table.columns["io"].values], dtype=bool)[table.columns["io"].codes]
    # a group whose (io, slot) repeats ran more than once: objects, so each run is judged on its own
    key = (groups * 2 + is_output) * (int(table.columns["slot"][0].max()) + 1) + table.columns["slot"][0]
    unique, counts = np.unique(key, return_counts=True)
    if (counts > 1).any():
        flagged[groups[np.isin(key, unique[counts > 1])]] = True
    types = table.columns["op_type"]
    parameter_row = np.asarray([v == "Parameter" for v in types.values], dtype=bool)[types.codes]
    parameter_group = np.zeros(n_groups, dtype=bool)
    parameter_group[groups[parameter_row]] = True
    clean_groups = ~flagged
    scoped_row = table.first_row_named_like(_SCOPED_RAW)
    facts = _column_facts(groups, is_output, parameter_group, clean_groups, scoped_row is not None)
    rows = np.flatnonzero(flagged[groups])
    executions = group_executions(table.events(rows, d.rank, d.graph, d.step))
    first_times = _group_first_times(groups, np.asarray(table.columns["timestamp"][0], dtype=np.int64), n_groups)
    return executions, _span(first_times, executions, clean_groups), facts, True


EVENT_COLUMNS = ("rank", "step", "op_type", "op_name", "io", "slot", "dtype", "shape", "max_abs", "nan", "posinf",
                 "neginf", "over_range", "counts_exact", "bad", "file")


def events_frame(scanned: List[Unit], warn: Warn = lambda message: None):
    """msoverflow.events() / Report.events(): every tensor event of these units as a pandas DataFrame
    (EVENT_COLUMNS). Counts come from the dump's statistics where it has them (counts_exact False when inferred
    from Max/Min), else from the data. `bad` is msoverflow's one definition (msoverflow/values.py: non-finite, or
    beyond the declared dtype's range, so an fp16 tensor holding 1e5 is bad); False for integer tensors, which
    hold no such value; <NA> for a float tensor that could not be read (`events[events.bad]` leaves those out)."""
    import pandas as pd

    rows = []
    for unit in scanned:
        access = TensorAccess(warn)
        for ex in read_unit(unit, warn).executions:
            for e in ex.inputs + ex.outputs:
                checked = e.dtype is None or e.is_float or e.stats is not None
                stats = access.stats(e) if checked else None
                rows.append((e.rank, e.step, e.op_type, e.op_name, e.io, e.slot, e.dtype, e.shape)
                            + ((None,) * 6 if stats is None else
                               (stats.max_abs, stats.nan, stats.posinf, stats.neginf, stats.over_range,
                                stats.counts_exact))
                            + (stats.bad if stats is not None else (None if checked else False), e.source))
                access.forget(e)
    frame = pd.DataFrame.from_records(rows, columns=list(EVENT_COLUMNS))
    frame["bad"] = frame["bad"].astype("boolean")
    return frame
