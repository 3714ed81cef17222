"""Map: one (rank, step) unit of a dump -> a small UnitSummary. The reduce (msoverflow/parallel.py) orders the
summaries and hands the judged executions to analyze, which builds the report.

Inside a unit the events are columns, not objects: file names are parsed in bulk, statistic.csv is read column
by column, the output tensors of a step are checked in one vectorised pass, and rows are grouped into op runs
by their `{op_type}.{op_name}.{task}.{stream}` key. Only op runs that hold something suspicious (a bad or
saturated value, a tensor that could not be checked here, an unusual shape of run) become OpExecution objects,
and those go through the same judge() as always: the rules stay the one place that tells origin from
propagator. Anything unusual in a directory (binary dumps, mapping.csv, statistic.csv that does not cover the
files, a duplicate directory) takes the object path of msoverflow/index.py for that directory.
"""
from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Dict, List, Optional, Tuple

from . import names
from .dtypes import canonical
from .coverage import _CELL_SEGMENT
from .errors import reading
from .evaluate import TensorAccess
from .index import _drop_duplicates, events_of_dir, group_executions
from .layout import DumpDir
from .model import CLEAN, CROSS_RANK, INPUT, OUTPUT, PROPAGATOR, OpExecution, TensorEvent
from .readers import npy
from .readers.exec_order import execution_order

BATCH_BYTES = 64 << 20      # small tensors checked together, at most this many bytes at a time
COLUMNAR = True             # False: every directory takes the object path (tests compare the two)


@dataclass
class Unit:
    """The directories of one rank's step (several graphs may run in one step)."""
    rank: int
    iteration: int
    dirs: List[DumpDir]


@dataclass
class UnitSummary:
    rank: int
    iteration: int
    judged: list = field(default_factory=list)        # [(OpExecution, Verdict)] not clean, in time order
    sample: list = field(default_factory=list)        # a few clean OpExecutions: what the step's runs look like
    after_arrival: List[int] = field(default_factory=list)  # indices in judged: origins after a bad arrival
    has_origin: bool = False
    earlier_bad: bool = False      # this rank has seen a bad value by the end of this step
    executions: int = 0            # op runs in the step (most never became objects)
    step_start: Optional[int] = None
    files: int = 0
    unknown_files: int = 0
    has_statistics: bool = False
    tensors_read: int = 0
    unreadable: int = 0
    warnings: List[str] = field(default_factory=list)
    layouts: List[str] = field(default_factory=list)
    rank_roots: Dict[Tuple[int, str], Optional[str]] = field(default_factory=dict)
    lists: Dict[str, list] = field(default_factory=dict)    # the object path's lists of files (by index field)


def plan_units(dirs: List[DumpDir], ranks=None, iterations=None) -> List[Unit]:
    units: Dict[Tuple[int, int], Unit] = {}
    for d in dirs:
        if (ranks is not None and d.rank not in ranks) or (iterations is not None and d.iteration not in iterations):
            continue
        units.setdefault((d.rank, d.iteration), Unit(d.rank, d.iteration, [])).dirs.append(d)
    return [units[k] for k in sorted(units)]


def survey(units: List[Unit]) -> Tuple[bool, int]:
    """(Opdebug records anywhere, number of entries): one listing of every directory. With hardware flags the
    records answer for the whole dump, so analyze judges it in one piece (these dumps hold only the flagged
    ops); the count sizes the progress bar and the choice of a process pool."""
    flags, files = False, 0
    for unit in units:
        for d in unit.dirs:
            try:
                entries = os.listdir(d.path)
            except OSError:
                continue
            files += len(entries)
            flags = flags or any(name.startswith("Opdebug.") for name in entries)
    return flags, files


def _file_of(ex: OpExecution) -> str:
    """A file of this op execution, to name in an internal error."""
    for event in ex.inputs + ex.outputs:
        return event.source
    return ex.flags[0].source if ex.flags else f"{ex.op_type} {ex.op_name}"


@lru_cache(maxsize=256)
def _order(rank_root: str, graph: str) -> Dict[str, int]:
    return execution_order(rank_root, graph, lambda message: None)


def scan_unit(unit: Unit, kn, earlier_bad: bool = False, access: Optional[TensorAccess] = None,
              warn: Optional[Callable[[str], None]] = None) -> UnitSummary:
    """Judge one rank's step. `access` and `warn` are the caller's when it runs in the same process; a worker
    makes its own and sends warnings and counts back in the summary."""
    from .rules import judge

    summary = UnitSummary(unit.rank, unit.iteration)
    note = summary.warnings.append if warn is None else warn
    # A unit's own access: its caches are keyed by object id, and the events of a clean step die with it.
    caller_access, access = access, TensorAccess(note)
    counters = {"files": 0, "unknown": 0}
    keys = Counter((d.graph, d.iteration) for d in unit.dirs)
    executions: List[OpExecution] = []
    plain_events: List[TensorEvent] = []
    starts = []
    for d in unit.dirs:
        if d.layout not in summary.layouts:
            summary.layouts.append(d.layout)
        summary.rank_roots.setdefault((d.rank, d.graph), d.rank_root)
        step = None
        if COLUMNAR and keys[(d.graph, d.iteration)] == 1:         # a twin directory needs the duplicate check below
            step = _columnar_dir(d, note, counters, access)
        if step is None:
            events, _records = events_of_dir(d, note, counters)
            plain_events.extend(events)
            continue
        suspicious, start, runs, statistics = step
        executions.extend(suspicious)
        summary.executions += runs
        summary.has_statistics |= statistics
        if start is not None:
            starts.append(start)
    if plain_events:
        plain = group_executions(_drop_duplicates(plain_events, note), note)
        summary.executions += len(plain)
        summary.has_statistics |= any(e.stats is not None for ex in plain for e in ex.outputs)
        starts.extend(ex.time for ex in plain)
        executions.extend(plain)
    summary.files, summary.unknown_files = counters["files"], counters["unknown"]
    summary.lists = {k: v for k, v in counters.items() if isinstance(v, list)}
    summary.step_start = min(starts) if starts else None
    for ex in executions:
        root = summary.rank_roots.get((ex.rank, ex.graph))
        ex.order = _order(root, ex.graph).get(ex.op_name) if root else None
    executions.sort(key=lambda ex: (ex.time, ex.order if ex.order is not None else 1 << 30))

    arrived = False
    scoped = None                 # a clean op whose name carries a Cell (the sample must show graph-mode naming)
    for ex in executions:
        with reading(_file_of(ex)):
            verdict = judge(ex, access, kn, earlier_bad)
        if verdict.role == CLEAN:
            # collectives stay out: the scan judged them already, and nothing after it need read them again
            if not kn.is_collective(ex.op_type):
                if len(summary.sample) < 2 * SAMPLE:
                    summary.sample.append(ex)
                if scoped is None and _CELL_SEGMENT.search(ex.op_name):
                    scoped = ex
            continue
        earlier_bad = True
        if verdict.kind == CROSS_RANK:
            arrived = True
        if verdict.role != PROPAGATOR:          # an origin (or any role that answers for the rank)
            summary.has_origin = True
            if arrived:
                summary.after_arrival.append(len(summary.judged))
        summary.judged.append((ex, verdict))
    summary.earlier_bad = earlier_bad
    if scoped is not None and all(ex is not scoped for ex in summary.sample):
        summary.sample.append(scoped)
    if caller_access is not None:
        caller_access.adopt(access, [e for ex in [ex for ex, _ in summary.judged] + summary.sample
                                     for e in ex.inputs + ex.outputs])
    else:
        summary.tensors_read, summary.unreadable = access.tensors_read, access.unreadable
    return summary


# ---- the columnar path -------------------------------------------------------------------------------------

def _columnar_dir(d: DumpDir, warn, counters, access: TensorAccess):
    """(suspicious OpExecutions, step start, op runs, has statistics) for a plain directory, or None to take the
    object path. Warnings and counters are the ones the object path would give, and given only on success."""
    try:
        entries = sorted(os.listdir(d.path))
    except OSError:
        return None                               # the object path says why
    # subdirectories are not files (a leaf holds few, and never under a tensor file's name)
    entries = [n for n in entries if n.endswith(".npy") or not os.path.isdir(os.path.join(d.path, n))]
    pending: List[str] = []
    examples: List[str] = []
    mine = {"files": 0, "unknown": 0}
    npy_names = []
    for name in entries:
        if name.endswith(".npy") and not name.startswith("Opdebug."):
            npy_names.append(name)
        elif name in ("statistic.csv", "mapping.csv") or name.startswith("acl_dump"):
            continue
        elif name.startswith("Opdebug.") or names.parse(name) is not None:
            return None                           # flags, binary dumps: the object path
        elif name.endswith(".json") or name.count(".") >= 4:
            pending.append(f"{os.path.join(d.path, name)}: file name not understood, skipped")
            mine["unknown"] += 1
            examples.append(os.path.join(d.path, name))
    # names over 255 characters were replaced by random ones; mapping.csv gives them back
    mapping = names.read_mapping(os.path.join(d.path, "mapping.csv"), pending.append) \
        if "mapping.csv" in entries else {}
    if "statistic.csv" in entries:
        from .readers.statistic_csv import read_columns
        table = read_columns(os.path.join(d.path, "statistic.csv"))
        if table is None or table.size < len(npy_names) or table.size == 0:
            return None
        mine["files"] += 1 + len(npy_names)
        result = _statistic_step(d, table) + (True,)
    elif npy_names:
        result = _npy_step(d, npy_names, [mapping.get(n, n) for n in npy_names] if mapping else npy_names,
                           pending.append, mine, access)
        if result is None:
            return None
        result = result + (False,)
    else:
        return None
    for message in pending:
        warn(message)
    counters["files"] += mine["files"]
    counters["unknown"] += mine["unknown"]
    if examples:                                  # as the object path keeps them (a few, for the verdict's reasons)
        kept = counters.setdefault("unknown_examples", [])
        kept.extend(examples[:max(0, 5 - len(kept))])
    return result


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
        tensors = list(zip(key[again].tolist(), stamps[again].tolist()))
        if len(set(tensors)) != len(tensors):
            return None
        repeated[codes[again]] = True
    return has_output, repeated


def _npy_step(d: DumpDir, npy_names: List[str], shown: List[str], warn, counters, access: TensorAccess):
    """npy_names: the files; shown: their names as MindSpore meant them (mapping.csv applied)."""
    import numpy as np

    from .stats import scan, scan_rows

    # Columns only when every name has the plain form; any other name (a new form, a typo) sends the directory
    # to the object path, which reads each name with parse() and says what it could not understand.
    parsed = names.parse_uniform(shown)
    if parsed is None:
        return None
    codes_of: Dict[str, int] = {}
    codes = [codes_of.setdefault(p, len(codes_of)) for p in parsed.prefix]
    prefixes = list(codes_of)
    rows, stamps, io, slot, dtype, fmt = (parsed.rows, parsed.timestamp, parsed.io, parsed.slot, parsed.dtype,
                                          parsed.fmt)
    counters["files"] += len(rows)
    n_groups = len(prefixes)
    code_array = np.asarray(codes, dtype=np.int64)
    stamp_array = np.asarray(stamps, dtype=np.int64)
    is_output = np.asarray([x == OUTPUT for x in io], dtype=bool)
    runs = _group_runs(code_array, stamp_array, is_output, np.asarray(slot, dtype=np.int64), n_groups)
    if runs is None:
        return None
    has_output, repeated = runs
    suspicious = (~has_output | repeated).tolist()
    floats = {t: t is None or "float" in t for t in set(dtype)}

    # Every float output of the step, read once and checked in one pass (what judge() would ask first).
    # Files with the same header bytes and size are stacked as rows of one matrix.
    seeded: Dict[int, tuple] = {}       # row -> (bad, pinned, header)
    batches: Dict[tuple, list] = {}     # (header, declared, size) -> [[rows], [file bytes], bytes]
    os_open, os_read, os_close, first = os.open, os.read, os.close, npy.FIRST_READ
    nonblocking = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)

    def flush(key):
        header, declared, _ = key
        members, blobs, _ = batches.pop(key)
        count = math.prod(header.shape) if header.shape else 1
        size = len(blobs[0])
        matrix = np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(len(blobs), size)
        payload = matrix[:, header.offset:header.offset + count * header.payload_dtype.itemsize]
        with reading(prefix + npy_names[rows[members[0]]]):    # an internal error names a file of the batch
            bad, pinned = scan_rows(payload.view(header.payload_dtype), declared)
        for j, r in enumerate(members):
            seeded[r] = (bool(bad[j]), bool(pinned[j]), header)

    prefix = d.path + os.sep
    output_list = is_output.tolist()
    # The files of a step mostly share one header: a file whose size and first bytes match the previous one
    # joins its batch at once (`same`: header bytes, size, dtype from the name, the batch's key).
    same = None
    for r in [r for r in range(len(rows)) if output_list[r] and floats[dtype[r]] and not suspicious[codes[r]]]:
        path = prefix + npy_names[rows[r]]
        try:
            fd = os_open(path, nonblocking)       # a FIFO or device never blocks the scan
            try:
                blob = os_read(fd, first)
            finally:
                os_close(fd)
        except OSError:
            suspicious[codes[r]] = True              # judge() reads it again and says what is wrong
            continue
        if same is not None and len(blob) == same[1] and dtype[r] == same[2] and blob.startswith(same[0]):
            batch = batches[same[3]]
        else:
            same = None
            whole = len(blob) < first
            try:
                if not whole:
                    blob, whole = npy.read_start(path)
                if whole:
                    header = npy.header_of_bytes(path, blob)
                else:
                    header = npy.read_header(path, blob[:4096], os.path.getsize(path))
            except (npy.NpyError, OSError, ValueError):
                suspicious[codes[r]] = True
                continue
            payload = header.payload_dtype
            if payload.kind != "f" or payload.hasobject or not (math.prod(header.shape) if header.shape else 1):
                seeded[r] = (False, False, header)
                continue
            declared = dtype[r] or canonical(header.header_dtype.name)
            if not whole:
                try:
                    with reading(path):
                        bad, pinned = scan(npy.open_array(path, header), declared)
                except (npy.NpyError, OSError, ValueError):
                    suspicious[codes[r]] = True
                    continue
                seeded[r] = (bad, pinned, header)
                continue
            key = (header, declared, len(blob))
            batch = batches.get(key)
            if batch is None:
                batch = batches[key] = [[], [], 0]
            same = (blob[:header.offset], len(blob), dtype[r], key)
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
    sample = _sample_groups(code_array, is_output, parameter_group[code_array])
    scoped = next((code for code, p in enumerate(prefixes) if _CELL_SEGMENT.search(names.split_plain_prefix(p)[1])), None)
    if scoped is not None:
        sample.add(scoped)
    by_group: Dict[int, List[int]] = {}
    for r, code in enumerate(codes):
        if suspicious[code] or code in sample:
            by_group.setdefault(code, []).append(r)
    events = []
    for code, members in by_group.items():
        op_type, op_name, task, stream = names.split_plain_prefix(prefixes[code])
        for r in members:
            e = TensorEvent(source=prefix + npy_names[rows[r]], rank=d.rank, graph=d.graph,
                            iteration=d.iteration, op_type=op_type, op_name=op_name, task_id=task,
                            stream_id=stream, timestamp=stamps[r], io=io[r] or INPUT, slot=slot[r], fmt=fmt[r],
                            dtype=dtype[r])
            if r in seeded:
                bad, pinned, header = seeded[r]
                access.seed(e, header, bad, pinned)
            events.append(e)
    access.tensors_read += len(seeded)
    executions = group_executions(events, warn)
    return executions, min(stamps), n_groups - len(by_group) + len(executions)


SAMPLE = 4
_SCOPED_RAW = r"-[A-Z][A-Za-z0-9]*([_/]|$)"     # coverage's Cell-in-scope test, on names as statistic.csv writes them


def _sample_groups(codes, is_output, is_parameter) -> set:
    """A few clean op runs kept as objects beside the suspicious ones, so later stages that look at what the dump
    holds (inputs dumped? outputs? only Parameters? scoped names?) see its shape: the first runs, the first with
    an input, with an output, and the first that is not a Parameter. Arguments are per-row numpy arrays."""
    import numpy as np

    if not codes.size:
        return set()
    first_rows = np.sort(np.unique(codes, return_index=True)[1])[:SAMPLE]
    chosen = set(codes[first_rows].tolist())
    for mask in (is_output, ~is_output, ~is_parameter):
        if mask.any():
            chosen.add(int(codes[int(np.argmax(mask))]))
    return chosen


def _statistic_step(d: DumpDir, table):
    """statistic.csv rows as columns: bad or saturated rows found vectorised, their op runs made objects."""
    import numpy as np

    suspicious_rows = table.suspicious()
    groups, n_groups = table.group_codes()
    flagged = np.zeros(n_groups, dtype=bool)
    flagged[groups[suspicious_rows]] = True
    # loops (an (io, slot) seen twice in a group) are counted as extra runs by group_executions below only
    # when suspicious; the count of clean runs is the number of groups.
    types = table.columns["op_type"]
    parameter_type = np.asarray([v == "Parameter" for v in types.values], dtype=bool)
    io_output = np.asarray([v == OUTPUT for v in table.columns["io"].values], dtype=bool)
    for code in _sample_groups(groups, io_output[table.columns["io"].codes], parameter_type[types.codes]):
        flagged[code] = True
    scoped_row = table.first_row_named_like(_SCOPED_RAW)
    if scoped_row is not None:
        flagged[groups[scoped_row]] = True
    rows = np.flatnonzero(flagged[groups])
    events = table.events(rows, d.rank, d.graph, d.iteration)
    executions = group_executions(events, lambda message: None)
    return executions, table.first_timestamp(), n_groups - int(flagged.sum()) + len(executions)
