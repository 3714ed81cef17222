"""Completeness per (rank, step): what a step's files hold against what should be there.

A job killed mid-step, a dump still being written or a copy that lost files leaves steps that stop short; an
analysis that does not notice calls the missing part clean. The dump itself says what to expect, and this module
compares, cheaply (directory listings; names, sizes and npy/DumpData headers only where needed; never a tensor):
- the graph's kernels (execution_order/ms_execution_order_graph_{g}.csv) against the kernels that wrote files;
  two steps with the same file count are believed complete, and when they hold fewer kernels than the csv lists,
  they set the count (on CPU the csv and the file names do not name every kernel alike);
- a rank's last step against the same graph's other steps on that rank, and against the same step on the other
  ranks that run the same graph (same kernel count in their csv): a job dies in its last step;
- a step present on some ranks and absent on another that holds other steps;
- in each rank's last step (where a killed job stops and a running one writes): 0-byte files, files shorter than
  their header says (a header is read only when the other ranks' same step, or else the rank's previous step, does
  not hold the same tensor at the same size), and files modified in the last seconds while older ones exist (a
  dump whose every file is that young was written at once: a fresh copy, a short run).
Overflow-only dumps (Opdebug files, op_debug_mode 1-4) and kernel-filtered ones (dump_mode 1) dump a different
set of ops each step: only their files are checked, not their counts.
"""
from __future__ import annotations

import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

from . import names
from .layout import LAYOUT_DEBUG, LAYOUT_MS, DumpDir
from .model import (RANK_CLEAN, RANK_INCOMPLETE, RANK_RECEIVED, RankStatus, StepCompleteness)

RECENT_SECONDS = 10.0     # files younger than this: the writer may still be at work
CAUSE = "the job died or the dump is still being written"
STILL_WRITTEN = "the dump may still be being written: run again when the job has finished"
_METADATA_DIRS = ("graphs", "execution_order", ".dump_metadata")


class _Listing:
    """One dump directory (rank, graph, step): its listing, and on demand its kernels and its files' sizes and
    times (a stat per file: only for the steps that need them)."""

    def __init__(self, d: DumpDir, warn):
        self.d = d
        try:
            entries = [e for e in os.scandir(d.path) if e.is_file()]
        except OSError as exc:
            warn(f"{d.path}: cannot list directory ({exc.strerror})")
            entries = []
        mapping = (names.read_mapping(os.path.join(d.path, "mapping.csv"), lambda message: None)
                   if any(e.name == "mapping.csv" for e in entries) else {})     # long names written as random ones
        self.entries = [(e, mapping.get(e.name, e.name)) for e in entries
                        if e.name != "mapping.csv" and not e.name.startswith("acl_dump")]
        self.files = len(self.entries)
        self.opdebug = any(name.startswith("Opdebug.") for _e, name in self.entries)
        try:
            self.mtime = os.stat(d.path).st_mtime     # when its last file was created
        except OSError:
            self.mtime = float("inf")
        self._kernels: Optional[int] = None
        self._keys: Dict[str, tuple] = {}            # path -> the tensor's identity without the file's timestamp
        self._stat: Optional[Dict[str, Tuple[int, float]]] = None
        self._rows: Optional[int] = -1

    def rows(self) -> Optional[int]:
        """statistic.csv rows, when the directory holds one."""
        if self._rows == -1:
            path = next((e.path for e, name in self.entries if name == "statistic.csv"), None)
            self._rows = _rows(path) if path else None
        return self._rows

    def kernels(self) -> int:
        """Op runs that wrote a file (Parameter files excluded), from the names (one grammar: msoverflow.names)."""
        if self._kernels is None:
            kernels: Set[str] = set()
            npy_names, npy_paths = [], []
            for entry, name in self.entries:
                if name.endswith(".npy"):
                    npy_names.append(name)
                    npy_paths.append(entry.path)
                    continue
                parsed = names.parse(name) if not name.startswith("Opdebug.") and name != "statistic.csv" else None
                if parsed is None or parsed.kind == names.KIND_OPDEBUG:
                    continue
                key = (parsed.op_type, parsed.op_name, parsed.task_id, parsed.stream_id)
                if parsed.kind == names.KIND_BIN:
                    self._keys[entry.path] = key
                if parsed.op_type != "Parameter":
                    kernels.add(".".join(map(str, key)))
            columns = names.parse_many(npy_names)
            kernels.update(p for p in columns.prefix if not p.startswith("Parameter."))
            for row, prefix, io, slot in zip(columns.rows, columns.prefix, columns.io, columns.slot):
                self._keys[npy_paths[row]] = (prefix, io, slot)
            self._kernels = len(kernels)
        return self._kernels

    def keys(self) -> Dict[str, tuple]:
        self.kernels()
        return self._keys

    def stat(self) -> Dict[str, Tuple[int, float]]:
        """path -> (size, mtime)."""
        if self._stat is None:
            self._stat = {}
            for entry, _name in self.entries:
                try:
                    st = entry.stat()
                except OSError:
                    continue
                self._stat[entry.path] = (st.st_size, st.st_mtime)
        return self._stat


def _rows(path: str) -> Optional[int]:
    """Data rows of a statistic.csv (lines after the header), counted without parsing."""
    from . import safeio
    try:
        with safeio.open_regular(path, "rb") as fh:
            lines = 0
            last = b"\n"
            while True:
                chunk = fh.read(1 << 22)
                if not chunk:
                    break
                lines += chunk.count(b"\n")
                last = chunk[-1:]
        return max(0, lines + (last != b"\n") - 1)
    except OSError:
        return None


_SHORT = ("truncated", "too short", "runs past the end")     # the readers' words for a file that stops early


def _cut(path: str) -> Optional[str]:
    """Why a tensor file holds less than its header says (None when it holds all of it, or is corrupt in some other
    way: the walk reports those as unreadable)."""
    if path.endswith(".npy"):
        from .readers import npy
        try:
            npy.read_header(path)
        except npy.NpyError as exc:
            return str(exc) if any(word in str(exc) for word in _SHORT) else None
        return None
    from .readers import dumpdata_bin
    try:
        problems = dumpdata_bin.read_dump_header(path).problems
    except dumpdata_bin.DumpFormatError as exc:
        problems = [str(exc)]
    cut = [p for p in problems if any(word in p for word in _SHORT)]
    return cut[0] if cut else None


def _counts_limited(settings: Dict[str, object], listings: Iterable[_Listing]) -> bool:
    """Dumps whose set of dumped ops changes from step to step: counts say nothing about completeness."""
    def number(key):
        try:
            return int(settings.get(key))
        except (TypeError, ValueError):
            return None
    return (number("dump_mode") == 1 or bool(settings.get("kernels")) or number("op_debug_mode") in (1, 2, 3, 4)
            or any(item.opdebug for item in listings))


def check(dirs: List[DumpDir], *, ranks: Optional[List[int]] = None, iterations: Optional[List[int]] = None,
          warn: Callable[[str], None] = lambda message: None, now: Optional[float] = None,
          finished: bool = False) -> List[StepCompleteness]:
    """The (rank, step)s found incomplete, each with counts and reasons (in the order rank, step). finished: the
    job that wrote the dump is known to have ended (msoverflow run, patch --verify): young files are complete."""
    from .readers.exec_order import dump_metadata, execution_order
    now = time.time() if now is None else now
    chosen = [d for d in dirs if (ranks is None or d.rank in ranks)
              and (iterations is None or d.iteration in iterations)]
    listings = [_Listing(d, warn) for d in chosen]
    settings: Dict[str, object] = {}
    quiet = lambda message: None     # noqa: E731  (the analysis reads these files too, and says what is wrong)
    for root in sorted({d.rank_root for d in chosen if d.rank_root}):
        config = dump_metadata(root, quiet).get("dump_config")
        if isinstance(config, dict) and isinstance(config.get("common_dump_settings"), dict):
            settings = config["common_dump_settings"]
            break
    counted = not _counts_limited(settings, listings)
    problems: Dict[Tuple[int, int], List[Tuple[int, int, str]]] = defaultdict(list)   # (present, expected, why)
    truncated: Dict[Tuple[int, int], List[str]] = defaultdict(list)
    recent: Dict[Tuple[int, int], List[str]] = defaultdict(list)
    last_step: Dict[int, int] = {}
    at_step: Dict[Tuple[str, int], List[_Listing]] = defaultdict(list)     # (graph, step) -> every rank's listing
    of_graph: Dict[Tuple[int, str], List[_Listing]] = defaultdict(list)    # (rank, graph) -> every step's listing
    for item in listings:
        last_step[item.d.rank] = max(last_step.get(item.d.rank, item.d.iteration), item.d.iteration)
        at_step[(item.d.graph, item.d.iteration)].append(item)
        of_graph[(item.d.rank, item.d.graph)].append(item)

    # Files of each rank's last step (where a killed job stops, where a running one writes): empty, cut short,
    # being written.
    young = now - RECENT_SECONDS
    oldest = min((item.mtime for item in listings), default=now)
    for item in listings:
        if item.d.iteration != last_step[item.d.rank]:
            continue
        step = (item.d.rank, item.d.iteration)
        stats = item.stat()
        cut = [path for path, (size, _t) in stats.items() if size == 0]
        cut += _short_files(item, _reference(item, at_step, of_graph))
        truncated[step].extend(cut)
        if cut:
            problems[step].append((item.files - len(cut), item.files, f"{len(cut)} of {item.files} files "
                                   "truncated or empty"))
        fresh = [path for path, (_size, mtime) in stats.items() if mtime > young]
        if fresh and not cut and _matched_by_settled_step(item, of_graph, young):
            # a job that ended seconds ago looks like this too: what would show a writer at work (fewer files
            # or rows than an earlier step, a file shorter than its header) is absent
            warn(f"{item.d.path}: {len(fresh)} file(s) written in the last {RECENT_SECONDS:.0f} s, but the step holds "
                 "as many files as an earlier one and none is cut short: taken as complete (if the job is still "
                 "running, analyse again when it has finished)")
            fresh = []
        recent[step].extend(fresh)
        oldest = min([oldest] + [mtime for _size, mtime in stats.values()])
    if oldest > young or finished:
        recent.clear()     # every file is that young: written at once (a copy, a short run), not a writer still at work

    files_at: Dict[Tuple[int, int], int] = defaultdict(int)
    for item in listings:
        files_at[(item.d.rank, item.d.iteration)] += item.files
    if counted:      # overflow-only and filtered dumps hold different ops (and steps) on each rank
        _counts(listings, at_step, of_graph, problems, last_step, execution_order, quiet)
        _absent_steps([d for d in chosen if d.layout != LAYOUT_DEBUG], files_at, problems)

    found = []
    for step in sorted({s for s, p in problems.items() if p} | {s for s, r in recent.items() if r}):
        reasons = [why for _p, _e, why in problems.get(step, [])]
        if recent.get(step):
            age = max(0.0, now - max(_mtime(p) for p in recent[step][:1000]))
            reasons.append(f"{len(recent[step])} file(s) modified {age:.0f} s ago")
        # the counts shown: kernels when the execution order gave them (what a person can check), else the
        # largest shortfall
        worst = max(problems.get(step, []), key=lambda p: ("kernels'" in p[2], p[1] - p[0]), default=None)
        files = files_at[step]
        present, expected = (worst[0], worst[1]) if worst else (files, None)
        found.append(StepCompleteness(rank=step[0], iteration=step[1], complete=False, present=present,
                                      expected=expected, reasons=reasons, truncated=sorted(truncated.get(step, [])),
                                      recent=bool(recent.get(step))))
    return found


def _matched_by_settled_step(item: _Listing, of_graph, young: float) -> bool:
    """An earlier step of the same graph on this rank, settled before the last seconds, holds as many files (and
    statistic.csv rows) as this fresh one."""
    return any(other.d.iteration < item.d.iteration and other.mtime <= young and other.files == item.files
               and other.rows() == item.rows() for other in of_graph[(item.d.rank, item.d.graph)])


def _reference(item: _Listing, at_step, of_graph) -> List[_Listing]:
    """Where the same tensors should have the same sizes: the other ranks' same step of the same graph, else this
    rank's previous step of it."""
    peers = [o for o in at_step[(item.d.graph, item.d.iteration)]
             if o.d.rank != item.d.rank and o.d.layout == item.d.layout]
    if peers:
        return peers
    earlier = [o for o in of_graph[(item.d.rank, item.d.graph)]
               if o.d.iteration < item.d.iteration and o.d.layout == item.d.layout]
    return [max(earlier, key=lambda o: o.d.iteration)] if earlier else []


def _short_files(item: _Listing, reference: List[_Listing]) -> List[str]:
    """Tensor files shorter than their header says. When a reference holds the same sizes, nothing is cut and no
    header is read; otherwise a file is whole when the reference holds its tensor at its size, and its header is
    read when not."""
    from collections import Counter
    sizes = Counter(size for size, _t in item.stat().values())
    if any(Counter(size for size, _t in other.stat().values()) == sizes for other in reference):
        return []
    known: Dict[tuple, Set[int]] = defaultdict(set)
    for other in reference:
        stats = other.stat()
        for path, key in other.keys().items():
            if path in stats:
                known[key].add(stats[path][0])
    stats = item.stat()
    return sorted(path for path, key in item.keys().items() if path in stats and stats[path][0]
                  and stats[path][0] not in known.get(key, ()) and _cut(path))


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _counts(listings: List[_Listing], at_step, of_graph, problems, last_step: Dict[int, int], execution_order,
            warn) -> None:
    """Kernels against the execution order; a rank's last step against its other steps and the other ranks that
    run the same graph (the same kernels in their execution order: pipeline stages share graph ids, not graphs).
    Names are parsed only where the file counts leave a doubt."""
    by_graph = {key: [item for item in items if item.d.layout == LAYOUT_MS] for key, items in of_graph.items()}
    by_graph = {key: items for key, items in by_graph.items() if items}
    ordered: Dict[Tuple[int, str], Optional[int]] = {}     # the graph's kernels, as a fingerprint of their names
    for (rank, graph), items in by_graph.items():
        root = items[0].d.rank_root
        order = execution_order(root, graph, warn) if root else {}
        listed = getattr(order, "listed", len(order))     # counted even when too many to keep their names
        ordered[(rank, graph)] = hash(tuple(order)) if order else None
        most = max(item.files for item in items)
        full = [item for item in items if item.files == most]
        for item in items:
            step = (rank, item.d.iteration)
            # two full steps agree: whole; statistic.csv without tensor files: its kernels are rows, not files
            if listed and not (item.files == most and len(full) >= 2) \
                    and not (item.rows() is not None and not item.kernels()):
                # when two steps agree on fewer kernels than the csv lists, the steps are believed (on CPU not
                # every listed kernel need write a file)
                expected = min(listed, full[0].kernels()) if len(full) >= 2 else listed
                if item.kernels() < expected:
                    problems[step].append((item.kernels(), expected, f"{item.kernels()} of {expected} kernels' "
                                           f"files (graph {graph})"))
                    continue
            if item.d.iteration == last_step[rank]:
                others = [other for other in items if other is not item]
                _compare(item, others, f"step {{}} of graph {graph} on this rank", problems[step])
    for item in listings:       # the same step on the other ranks that run the same graph
        rank, graph = item.d.rank, item.d.graph
        if item.d.layout != LAYOUT_MS or item.d.iteration != last_step[rank] or not ordered.get((rank, graph)):
            continue
        peers = [other for other in at_step[(graph, item.d.iteration)] if other.d.rank != rank
                 and other.d.layout == LAYOUT_MS
                 and ordered.get((other.d.rank, graph)) == ordered[(rank, graph)]]
        _compare(item, peers, "rank {} at this step", problems[(rank, item.d.iteration)], by_rank=True)


def _compare(item: _Listing, others: List[_Listing], where: str, out: list, by_rank: bool = False) -> None:
    """Fewer files (or statistic.csv rows) than the fullest comparable directory."""
    if not others:
        return
    if item.rows() is not None:
        best = max(others, key=lambda o: o.rows() or 0)
        if best.rows() and item.rows() < best.rows():
            out.append((item.rows(), best.rows(), f"{item.rows()} of {best.rows()} statistic.csv rows (as "
                        f"{where.format(best.d.rank if by_rank else best.d.iteration)})"))
        return
    best = max(others, key=lambda o: o.files)
    if item.files < best.files and not any(p[1] - p[0] >= best.files - item.files for p in out):
        out.append((item.files, best.files, f"{item.files} of {best.files} files (as "
                    f"{where.format(best.d.rank if by_rank else best.d.iteration)})"))


def _absent_steps(dirs: List[DumpDir], files_at: Dict[Tuple[int, int], int], problems) -> None:
    """A step some ranks hold and another rank (which holds other steps) lacks entirely."""
    steps_of: Dict[int, Set[int]] = defaultdict(set)
    for d in dirs:
        steps_of[d.rank].add(d.iteration)
    if len(steps_of) < 2:
        return
    for step in sorted(set().union(*steps_of.values())):
        holders = sorted(r for r, steps in steps_of.items() if step in steps)
        if len(holders) == len(steps_of):
            continue
        expected = max(files_at[(r, step)] for r in holders)
        shown = ", ".join(map(str, holders[:6])) + (" ..." if len(holders) > 6 else "")
        for rank, steps in steps_of.items():
            if step not in steps:
                problems[(rank, step)].append((0, expected, f"step {step} is absent on this rank (ranks {shown} "
                                               f"hold it, {expected} files)"))


def summary(step: StepCompleteness) -> str:
    """One line for a (rank, step): the counts, the reasons, the likely cause."""
    return f"rank {step.rank}, step {step.iteration}: {_words(step)}"


def _words(step: StepCompleteness) -> str:
    return f"{'; '.join(step.reasons)}; {STILL_WRITTEN if step.recent else CAUSE}"


def reasons(steps: List[StepCompleteness], limit: int = 3) -> List[str]:
    """Inconclusive reasons: the first few incomplete (rank, step)s, then how many more."""
    out = [summary(step) for step in steps[:limit]]
    if len(steps) > limit:
        out.append(f"{len(steps) - limit} more incomplete (rank, step)s (--format json lists all)")
    return out


def mark_ranks(rows: List[RankStatus], steps: List[StepCompleteness]) -> None:
    """A rank whose own files stop short is `incomplete`, never `clean`, and never `received` when the cut is at or
    before the step it received in (its own missing files could hold the origin)."""
    first_cut: Dict[int, StepCompleteness] = {}
    for step in steps:
        if step.rank not in first_cut or step.iteration < first_cut[step.rank].iteration:
            first_cut[step.rank] = step
    for row in rows:
        step = first_cut.get(row.rank)
        if step is None:
            continue
        words = _words(step)
        cut_first = row.iteration is None or step.iteration <= row.iteration
        if row.status == RANK_CLEAN or (row.status == RANK_RECEIVED and cut_first):
            row.status, row.iteration, row.via, row.time = RANK_INCOMPLETE, step.iteration, None, None
            row.op_name = row.op_type = None
            row.present, row.expected, row.note = step.present, step.expected, words
        else:
            row.note = f"{row.note}; " if row.note else ""
            row.note += f"step {step.iteration} incomplete: {words}"


def likely_origin(steps: List[StepCompleteness], unreadable: Iterable[str], judged, node_of, dirs: List[DumpDir],
                  access):
    """(OpExecution, Verdict) of the op X when the only files that could not be read are X's outputs, X's inputs
    are finite and an op fed by X (in the saved graph) received a bad value from it; else None. The consumer's
    input is X's output as it arrived: it tells what X made, so the kind is named; the role stays
    LIKELY_ORIGIN (the verdict stays inconclusive)."""
    from .model import INVALID, LIKELY_ORIGIN, OVERFLOW, PROPAGATOR
    from .rules import Verdict
    from .walk import Unit, read_unit
    cut = set(unreadable) | {path for step in steps for path in step.truncated}
    if not cut or any(step.recent or len(step.reasons) != 1 or not step.truncated for step in steps):
        return None      # files are missing or still being written: any of them could hold the origin
    parsed = {path: names.parse(os.path.basename(path)) for path in cut}
    owners = {(os.path.dirname(path), p.op_type, p.op_name, p.task_id, p.stream_id) if p and p.io == "output"
              else None for path, p in parsed.items()}
    if len(owners) != 1 or None in owners:
        return None
    folder, op_type, op_name, task, stream = owners.pop()
    d = next((d for d in dirs if os.path.realpath(d.path) == os.path.realpath(folder)), None)
    if d is None:
        return None
    quiet = lambda message: None     # noqa: E731  (the walk already said what it could not read)
    executions = read_unit(Unit(d.rank, d.iteration, [d]), quiet).executions
    runs = [ex for ex in executions if (ex.op_type, ex.op_name, ex.task_id, ex.stream_id)
            == (op_type, op_name, task, stream) and any(e.source in cut for e in ex.outputs)]
    if len(runs) != 1 or not runs[0].inputs:
        return None
    ex = runs[0]
    for event in ex.outputs:
        if event.source in cut:      # already reported by the walk: not read (and warned about) a second time
            event.note, event.loader = "unreadable: truncated", (lambda: None)
    if any(access.bad(e) is not False for e in ex.inputs if e.dtype is None or e.is_float):
        return None      # an input bad or unreadable: X may have received the bad value
    for consumer, verdict in judged:
        if consumer.rank != ex.rank or consumer.iteration != ex.iteration or verdict.role != PROPAGATOR:
            continue
        node, _graph = node_of(consumer)
        for event in consumer.inputs:
            producer = node.inputs[event.slot] if node is not None and event.slot < len(node.inputs) else None
            if producer is None or names.scope_to_file_name(producer) != op_name or not access.bad(event):
                continue
            stats = access.stats(event)
            kind = INVALID if stats is not None and stats.nan else OVERFLOW
            shown = "; ".join(os.path.basename(e.source) for e in ex.outputs if e.source in cut)
            what = (f"max |x| {stats.max_abs:.6g}, nan {stats.nan}, +inf {stats.posinf}, -inf {stats.neginf}"
                    if stats is not None and stats.max_abs is not None else "a bad value")
            detail = (f"its output file is truncated ({shown}); its inputs are finite and {consumer.op_type} "
                      f"({consumer.op_name}) received input {event.slot} from it with {what}")
            return ex, Verdict(LIKELY_ORIGIN, kind, detail, advice="invalid" if kind == INVALID else "overflow",
                               evidence=[f"{consumer.op_type} input {event.slot} is {op_type}'s output as it "
                                         "arrived: it holds the bad value the truncated file would show"])
    return None



def proven(f) -> bool:
    """An origin shown by its own inputs (or flagged by the hardware), not a value a collective or an input brought."""
    from .model import CROSS_RANK, ORIGIN, SUSPECT
    return f.role == SUSPECT or (f.role == ORIGIN and f.kind != CROSS_RANK)


@dataclass
class Settled:
    first: object
    anomalies: list
    propagation: list
    likely: object = None
    reasons: List[str] = field(default_factory=list)


def settle(steps: List[StepCompleteness], first, anomalies, propagation, rows: List[RankStatus], unreadable,
           judged, node_of, dirs: List[DumpDir], access, describe) -> Settled:
    """What incomplete (rank, step)s change in the answer: their ranks are `incomplete` in the table; a first bad
    value that was only received (or first seen as an input) at or after a cut is no answer (the origin may be in
    the missing files), so the verdict is inconclusive unless an origin is proven elsewhere; the likely origin is
    named when the only unreadable file is its output. `describe(ex, verdict)` makes a Finding."""
    if not steps:
        return Settled(first, anomalies, propagation)
    mark_ranks(rows, steps)
    if first is not None and not proven(first) and min(s.iteration for s in steps) <= first.iteration:
        anomalies = [f for f in anomalies if proven(f)]
        first, propagation = (anomalies[0] if anomalies else None), []
    likely = None
    if first is None:
        found = likely_origin(steps, unreadable, judged, node_of, dirs, access)
        if found is not None:
            likely = describe(*found)
    said = reasons(steps)
    if likely is not None:
        where = f" in {likely.cell} ({likely.cell_type})" if likely.cell else ""
        backward = f" (backward of {likely.forward_op})" if likely.forward_op not in (None, likely.op_type) else ""
        said.insert(0, f"likely origin: {likely.op_type}{backward}{where}, rank {likely.rank}, step "
                       f"{likely.iteration} ({likely.op_name}): its output file is truncated, so it cannot be proven")
        for row in rows:
            if row.rank == likely.rank and row.status == RANK_INCOMPLETE:
                row.op_type, row.op_name = likely.op_type, likely.op_name
                row.note = f"likely origin, its output file is truncated; {row.note}"
    return Settled(first, anomalies, propagation, likely, said)


def cross_rank_advice(first, rows: List[RankStatus], steps: List[StepCompleteness], selected: bool) -> str:
    """Where to look when a collective delivered the first bad value and no dumped op created it ("" when an origin
    was proven): never "dump the other ranks" when they are dumped."""
    from .model import RANK_NOT_DUMPED
    if first is not None and proven(first):
        return ""
    missing = [row.rank for row in rows if row.status == RANK_NOT_DUMPED]
    cut = sorted({s.rank for s in steps})
    if cut:
        return f"rank(s) {', '.join(map(str, cut))} hold incomplete steps: the origin may be in their missing files"
    if missing:
        return f"dump the other ranks (rank(s) {', '.join(map(str, missing))} not dumped)"
    if selected:
        return "analyze the other ranks too (--ranks selected only some)"
    return ("every rank is dumped: the op that sent it was not dumped or not read (kernel filter, overflow-only "
            "mode, unreadable files)")


__all__ = ["check", "settle", "cross_rank_advice", "likely_origin", "mark_ranks", "reasons", "summary",
           "RECENT_SECONDS", "CAUSE"]
