"""Completeness per (rank, step): what a step's files hold against what should be there.

A job killed mid-step, a dump still being written or a copy that lost files leaves steps that stop short; an
analysis that does not notice calls the missing part clean. The dump itself says what to expect, and this module
compares, cheaply: the dump's one listing (msoverflow/layout.py: names, and each directory's time), and what the
walk's reads of npy/DumpData headers found cut short; a stat per file only in a directory written to in the last
seconds; never a tensor:
- the graph's kernels (execution_order/ms_execution_order_graph_{g}.csv) against the kernels that wrote files;
  two steps with the same file count are believed complete, and when they hold fewer kernels than the csv lists,
  they set the count (on CPU the csv and the file names do not name every kernel alike);
- every step against the same graph's other steps on that rank (files, or statistic.csv rows), and against the same
  step on the other ranks that run the same graph (same kernel count in their csv): a job dies in its last step, and
  a copy or a full disk loses files of any step;
- a step present on some ranks and absent on another that holds other steps;
- in every step: empty files and files shorter than their header says (the walk reads the header of every tensor
  that could hold an origin and marks these model.Status.TRUNCATED; a step the walk did not scan, after its rank's
  first origin, cannot change the answer and is checked by its counts);
- in each rank's last step (where a running job writes): files written in the last seconds while older ones exist
  (a dump whose every file is that young was written at once: a fresh copy, a short run).
Overflow-only dumps (Opdebug files, op_debug_mode 1-4) and kernel-filtered ones (dump_mode 1) dump a different
set of ops each step: only their files are checked, not their counts. Files whose names the grammar does not read
are the walk's "not understood" (a checkpoint left in a step directory is no dump file: a note), never counted here.

check() finds the incomplete (rank, step)s; settle() is the analysis stage that says what they change in the
decision (msoverflow/analysis.py); mark_ranks() marks their ranks' rows when the report is assembled.
"""
from __future__ import annotations

import os
import time
from collections import Counter, defaultdict
from dataclasses import replace
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from . import names
from .evaluate import TensorAccess
from .findings import Decision, describe, likely_origin, proven
from .graphs import SavedGraphs
from .layout import LAYOUT_DEBUG, LAYOUT_MS, DumpDir
from .model import (
    RANK_CLEAN,
    RANK_INCOMPLETE,
    RANK_NOT_DUMPED,
    RANK_ORIGIN,
    RANK_RECEIVED,
    Finding,
    RankStatus,
    StepCompleteness,
)
from .rules.knowledge import OpKnowledge, knowledge
from .selection import format_ids

RECENT_SECONDS = 10.0     # files younger than this: the writer may still be at work
CAUSE = "the job died or the dump is still being written"
LOST = "files of a step the job went past are missing or cut short (an incomplete copy, a full disk, files removed)"
STILL_WRITTEN = "the dump may still be being written: run again when the job has finished"
UNREADABLE = "a file that could not be read could hold the origin"


class _Listing:
    """One dump directory (rank, graph, step) as the dump's one listing gave it: its dump files, and on demand its
    kernels (from their names), its statistic.csv rows and its files' times."""

    def __init__(self, d: DumpDir):
        self.d = d
        # the files whose names the grammar reads: a stray file (a checkpoint left in a step directory) is the walk's
        # "not understood", never a tensor this step lacks
        self.names = [name for name in d.entries if name.endswith(".npy") or _counted(d.original(name))]
        self.files = len(self.names)
        self.opdebug = d.holds("Opdebug.")
        self.mtime = d.mtime     # when its last file was created
        self._kernels: Optional[int] = None
        self._prefixes: Set[str] = set()
        self._rows: Optional[int] = -1
        self._keys: Optional[Dict[str, str]] = None

    def times(self) -> List[float]:
        """Its files' mtimes: a stat per file."""
        folder, times = self.d.path + os.sep, []
        for name in self.names:
            try:
                times.append(os.stat(folder + name).st_mtime)
            except OSError:
                continue
        return times

    def rows(self) -> Optional[int]:
        """statistic.csv rows, when the directory holds one."""
        if self._rows == -1:
            held = self.d.holds("statistic.csv") and "statistic.csv" in self.names
            self._rows = _rows(os.path.join(self.d.path, "statistic.csv")) if held else None
        return self._rows

    def kernels(self) -> int:
        """Op runs that wrote a file (Parameter files excluded), from the names (one grammar: msoverflow.names)."""
        if self._kernels is None:
            kernels: Set[str] = set()
            npy_names = []
            for name in map(self.d.original, self.names):
                if name.endswith(".npy"):
                    npy_names.append(name)
                    continue
                parsed = names.parse(name) if not name.startswith("Opdebug.") and name != "statistic.csv" else None
                if parsed is not None and parsed.kind != names.KIND_OPDEBUG and parsed.op_type != "Parameter":
                    kernels.add(f"{parsed.op_type}.{parsed.op_name}.{parsed.task_id}.{parsed.stream_id}")
            kernels.update(p for p in names.parse_many(npy_names).prefix if not p.startswith("Parameter."))
            self._kernels = len(kernels)
            self._prefixes = kernels
        return self._kernels

    def keys(self) -> Dict[str, str]:
        """Its files by name without the time stamp (`{op_type}.{op_name}.{task}.{stream}.{io}.{slot}` for a
        tensor file): the same file of another step or rank has the same key; a graph run twice in one folder
        gives each key twice. Parsed on demand (only where the counts leave a doubt)."""
        if self._keys is None:
            keys: Dict[str, str] = {}
            npy_names = [name for name in self.names if self.d.original(name).endswith(".npy")]
            if npy_names:
                columns = names.parse_many([self.d.original(name) for name in npy_names])
                rejected = set(columns.rejected)
                for i, row in enumerate(columns.rows):
                    keys.setdefault(f"{columns.prefix[i]}.{columns.io[i]}.{columns.slot[i]}", npy_names[row])
                for row in rejected:
                    keys.setdefault(npy_names[row], npy_names[row])
            for name in self.names:
                if self.d.original(name).endswith(".npy"):
                    continue
                parsed = names.parse(self.d.original(name))
                key = name if parsed is None else \
                    f"{parsed.op_type}.{parsed.op_name}.{parsed.task_id}.{parsed.stream_id}.{parsed.io}.{parsed.slot}"
                keys.setdefault(key, name)
            self._keys = keys
        return self._keys

    def kernel_prefixes(self) -> Set[str]:
        """`{op_type}.{op_name}.{task}.{stream}` of each op run that wrote a file (Parameter files excluded)."""
        self.kernels()
        return self._prefixes

def _counted(name: str) -> bool:
    return name.endswith(".npy") or (names.is_dump_file(name) and names.understood(name))


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


def _counts_limited(settings: Dict[str, object], listings: Iterable[_Listing]) -> bool:
    """Dumps whose set of dumped ops changes from step to step: counts say nothing about completeness."""
    def number(key):
        try:
            return int(settings.get(key))
        except (TypeError, ValueError):
            return None
    return (number("dump_mode") == 1 or bool(settings.get("kernels")) or number("op_debug_mode") in (1, 2, 3, 4)
            or any(item.opdebug for item in listings))


def check(dirs: Sequence[DumpDir], *, cut: Iterable[str] = (), unreadable: Iterable[str] = (),
          warn: Callable[[str], None] = lambda message: None, now: Optional[float] = None,
          finished: bool = False, settings: Optional[Dict[str, object]] = None) -> List[StepCompleteness]:
    """The (rank, step)s of these directories (a Plan's: the selection applied) found incomplete, each with counts
    and reasons (in the order rank, step). cut: the files the walk found shorter than their headers say (empty ones
    included: model.Status.TRUNCATED); unreadable: every file the walk could not read, whatever the reason
    (permission, a FIFO or directory in a file's place, cut short): one rule for all of them, a step holding one is
    incomplete, since the file could hold the origin; finished: the job that wrote the dump is known to have ended
    (msoverflow run, patch --verify): files written seconds ago are complete; settings: the dump config's
    common_dump_settings as the Dump parsed them (layout.Dump.settings; None: read here)."""
    from .readers.exec_order import dump_metadata, execution_order
    now = time.time() if now is None else now
    # a folder of strays holds no step; an empty step directory (files removed) or one that cannot be listed does
    listings = [item for item in map(_Listing, dirs) if item.files or not item.d.entries]
    chosen = [item.d for item in listings]
    quiet = lambda message: None     # noqa: E731  (the analysis reads these files too, and says what is wrong)
    if settings is None:
        settings = {}
        for root in sorted({d.rank_root for d in chosen if d.rank_root}):
            config = dump_metadata(root, quiet).get("dump_config")
            if isinstance(config, dict) and isinstance(config.get("common_dump_settings"), dict):
                settings = config["common_dump_settings"]
                break
    counted = not _counts_limited(settings, listings)
    problems: Dict[Tuple[int, int], List[Tuple[int, int, str]]] = defaultdict(list)   # (present, expected, why)
    truncated: Dict[Tuple[int, int], List[str]] = defaultdict(list)
    recent: Dict[Tuple[int, int], List[float]] = defaultdict(list)     # mtimes of files written seconds ago
    last_step: Dict[int, int] = {}
    at_step: Dict[Tuple[str, int], List[_Listing]] = defaultdict(list)     # (graph, step) -> every rank's listing
    of_graph: Dict[Tuple[int, str], List[_Listing]] = defaultdict(list)    # (rank, graph) -> every step's listing
    for item in listings:
        last_step[item.d.rank] = max(last_step.get(item.d.rank, item.d.step), item.d.step)
        at_step[(item.d.graph, item.d.step)].append(item)
        of_graph[(item.d.rank, item.d.graph)].append(item)

    # Every step: files cut short or empty (as the walk's reads of their headers found them). Each rank's last step
    # (where a running job writes): files written in the last seconds. A writer creates its files, so only a
    # directory written to in the last seconds has its files' times looked at (a stat each).
    young = now - RECENT_SECONDS
    cut_in: Dict[str, List[str]] = defaultdict(list)
    short_files = set(cut)
    for path in sorted(short_files | set(unreadable)):
        cut_in[os.path.dirname(path)].append(path)
    unread: Dict[Tuple[int, int], List[str]] = defaultdict(list)
    oldest = min((item.mtime for item in listings), default=now)
    for item in listings:
        step = (item.d.rank, item.d.step)
        if item.d.unlisted:
            unread[step].append(item.d.path)
            problems[step].append((0, 0, f"the step's directory cannot be listed ({item.d.unlisted})"))
            continue
        short = cut_in.get(item.d.path, [])
        truncated[step].extend(path for path in short if path in short_files)
        unread[step].extend(path for path in short if path not in short_files)
        if short:
            problems[step].append((item.files - len(short), item.files,
                                   f"{len(short)} of {item.files} files {_unread_words(short, short_files)}"))
        if item.d.step != last_step[item.d.rank] or item.mtime <= young:
            continue
        times = item.times()
        fresh = [mtime for mtime in times if mtime > young]
        if fresh and not short and _matched_by_settled_step(item, of_graph, young):
            # a job that ended seconds ago looks like this too: what would show a writer at work (fewer files
            # or rows than an earlier step, a file shorter than its header) is absent
            warn(f"{item.d.path}: {len(fresh)} file(s) written in the last {RECENT_SECONDS:.0f} s, but the step holds "
                 "as many files as an earlier one and none is cut short: taken as complete (if the job is still "
                 "running, analyse again when it has finished)")
            fresh = []
        recent[step].extend(fresh)
        oldest = min([oldest] + times)
    if oldest > young or finished:
        recent.clear()     # every file is that young: written at once (a copy, a short run), not a writer still at work

    files_at: Dict[Tuple[int, int], int] = defaultdict(int)
    for item in listings:
        files_at[(item.d.rank, item.d.step)] += item.files
    empties: Set[str] = set()
    if counted:      # overflow-only and filtered dumps hold different ops (and steps) on each rank
        # a directory that could not be listed has no count to compare (named above)
        listed = [item for item in listings if not item.d.unlisted]
        _counts(listed, {key: [i for i in items if not i.d.unlisted] for key, items in at_step.items()},
                {key: [i for i in items if not i.d.unlisted] for key, items in of_graph.items()}, problems,
                execution_order, quiet, empties)
        by_path = {item.d.path: item for item in listed}
        for path in sorted(empties):     # an empty file the counts came upon (the walk did not read it): its step's
            holder = by_path.get(os.path.dirname(path))
            if holder is None or path in cut_in.get(holder.d.path, ()):
                continue
            step = (holder.d.rank, holder.d.step)
            truncated[step].append(path)
            problems[step].append((holder.files - 1, holder.files, f"1 of {holder.files} files empty ({path})"))
        _absent_steps([d for d in chosen if d.layout != LAYOUT_DEBUG], files_at, problems)

    found = []
    for step in sorted({s for s, p in problems.items() if p} | {s for s, r in recent.items() if r}):
        reasons = [why for _p, _e, why in problems.get(step, [])]
        if recent.get(step):
            age = max(0.0, now - max(recent[step]))
            reasons.append(f"{len(recent[step])} file(s) modified {age:.0f} s ago")
        # the counts shown: kernels when the execution order gave them (what a person can check), else the
        # largest shortfall
        worst = max(problems.get(step, []), key=lambda p: ("kernels'" in p[2], p[1] - p[0]), default=None)
        files = files_at[step]
        present, expected = (worst[0], worst[1]) if worst else (files, None)
        found.append(StepCompleteness(rank=step[0], step=step[1], complete=False, present=present,
                                      expected=expected, reasons=reasons, truncated=sorted(truncated.get(step, [])),
                                      unreadable=sorted(unread.get(step, [])),
                                      recent=bool(recent.get(step)), earlier=step[1] < last_step.get(step[0], step[1])))
    return found


def _unread_words(paths: List[str], short: Set[str]) -> str:
    cut = sum(path in short for path in paths)
    if cut == len(paths):
        return "truncated or empty"
    return "cannot be read" if not cut else "truncated, empty or unreadable"


def _matched_by_settled_step(item: _Listing, of_graph, young: float) -> bool:
    """An earlier step of the same graph on this rank, settled before the last seconds, holds as many files (and
    statistic.csv rows) as this fresh one."""
    return any(other.d.step < item.d.step and other.mtime <= young and other.files == item.files
               and other.rows() == item.rows() for other in of_graph[(item.d.rank, item.d.graph)])


def _counts(listings: List[_Listing], at_step, of_graph, problems, execution_order, warn,
            empties: Optional[Set[str]] = None) -> None:
    """Kernels against the execution order; every step against the same graph's other steps on its rank and the
    other ranks that run the same graph (the same kernels in their execution order: pipeline stages share graph ids,
    not graphs). Names are parsed only where the file counts leave a doubt."""
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
            step = (rank, item.d.step)
            # two full steps agree: whole; statistic.csv without tensor files: its kernels are rows, not files
            if listed and not (item.files == most and len(full) >= 2) \
                    and not (item.rows() is not None and not item.kernels()):
                # when two steps agree on fewer kernels than the csv lists, the steps are believed (on CPU not
                # every listed kernel need write a file)
                expected = min(listed, full[0].kernels()) if len(full) >= 2 else listed
                views = _views_without_files(item, order) if len(full) < 2 and item.kernels() < expected else 0
                if item.kernels() + views < expected:
                    problems[step].append((item.kernels(), expected, f"{item.kernels()} of {expected} kernels' "
                                           f"files (graph {graph})"))
                    continue
            others = [other for other in items if other is not item]
            _compare(item, others, f"step {{}} of graph {graph} on this rank", problems[step], empties=empties)
    for item in listings:       # the same step on the other ranks that run the same graph
        rank, graph = item.d.rank, item.d.graph
        if item.d.layout != LAYOUT_MS or not ordered.get((rank, graph)):
            continue
        peers = [other for other in at_step[(graph, item.d.step)] if other.d.rank != rank
                 and other.d.layout == LAYOUT_MS
                 and ordered.get((other.d.rank, graph)) == ordered[(rank, graph)]]
        _compare(item, peers, "rank {} at this step", problems[(rank, item.d.step)], by_rank=True,
                 empties=empties)


def _views_without_files(item: _Listing, order: Dict[str, int]) -> int:
    """Kernels of the execution order without a file in this step that MindSpore may run in place on their input's
    memory, writing no dump file (op_knowledge.yaml's in_place_views): they do not make a step look cut short."""
    present = {split[1] for split in map(names.split_prefix, item.kernel_prefixes()) if split}
    views = knowledge().in_place_views
    return sum(name not in present and name.rsplit("_", 1)[-1].split("-op", 1)[0] in views for name in order)


def _compare(item: _Listing, others: List[_Listing], where: str, out: list, by_rank: bool = False,
             empties: Optional[Set[str]] = None) -> None:
    """Fewer files (or statistic.csv rows) than the fullest comparable directory."""
    if not others:
        return
    rows = item.rows()
    if rows is not None:
        best = max(others, key=lambda o: o.rows() or 0)
        best_rows = best.rows()
        if best_rows and rows < best_rows:
            out.append((rows, best_rows, f"{rows} of {best_rows} statistic.csv rows (as "
                        f"{where.format(best.d.rank if by_rank else best.d.step)})"))
        return
    best = max(others, key=lambda o: o.files)
    if item.files >= best.files:
        return
    # Fewer files: which files does it lack? Counted against its own expectation, the files (names without their
    # time stamp) that most of the comparable directories hold, never against one directory's extras (a stray or
    # empty file there) nor its repeats (a graph that ran twice in one iteration folder writes every file twice).
    # On a tie (two directories) a file counts as expected when the one holding it is not empty.
    group = [item] + others
    held = Counter(key for listing in group for key in listing.keys())
    own = item.keys()
    expected, lacking = 0, 0
    for key, holders in held.items():
        if 2 * holders < len(group) or (2 * holders == len(group) and not _holds_data(key, group, empties)):
            continue
        expected += 1
        lacking += key not in own
    if lacking and not any(p[1] - p[0] >= lacking for p in out):
        out.append((expected - lacking, expected, f"{expected - lacking} of {expected} files (as "
                    f"{where.format(best.d.rank if by_rank else best.d.step)})"))


def _holds_data(key: str, group: List["_Listing"], empties: Optional[Set[str]]) -> bool:
    """Whether a directory holding this file holds it with data (a stat of each holder: only files in doubt)."""
    found = False
    for listing in group:
        name = listing.keys().get(key)
        if name is None:
            continue
        path = os.path.join(listing.d.path, name)
        try:
            size = os.stat(path).st_size
        except OSError:
            continue
        if size:
            found = True
        elif empties is not None:
            empties.add(path)
    return found


def _absent_steps(dirs: List[DumpDir], files_at: Dict[Tuple[int, int], int], problems) -> None:
    """A step some ranks hold and another rank (which holds other steps) lacks entirely."""
    steps_of: Dict[int, Set[int]] = defaultdict(set)
    for d in dirs:
        steps_of[d.rank].add(d.step)
    if len(steps_of) < 2:
        return
    for step in sorted(set().union(*steps_of.values())):
        holders = sorted(r for r, steps in steps_of.items() if step in steps)
        if len(holders) == len(steps_of):
            continue
        expected = max(files_at[(r, step)] for r in holders)
        shown = format_ids(holders, limit=6)
        for rank, steps in steps_of.items():
            if step not in steps:
                problems[(rank, step)].append((0, expected, f"step {step} is absent on this rank (ranks {shown} "
                                               f"hold it, {expected} files)"))


def summary(step: StepCompleteness) -> str:
    """One line for a (rank, step): the counts, the reasons, the likely cause."""
    return f"rank {step.rank}, step {step.step}: {_words(step)}"


def _words(step: StepCompleteness) -> str:
    only_unreadable = step.unreadable and not step.truncated and len(step.reasons) == 1
    why = STILL_WRITTEN if step.recent else UNREADABLE if only_unreadable else LOST if step.earlier else CAUSE
    return f"{'; '.join(step.reasons)}; {why}"


def reasons(steps: List[StepCompleteness], limit: int = 3) -> List[str]:
    """Inconclusive reasons: the first few incomplete (rank, step)s, then how many more."""
    out = [summary(step) for step in steps[:limit]]
    if len(steps) > limit:
        out.append(f"{len(steps) - limit} more incomplete (rank, step)s (--format json lists all)")
    return out


def mark_ranks(rows: List[RankStatus], steps: List[StepCompleteness], likely: Optional[Finding] = None,
               first: Optional[Finding] = None) -> None:
    """A rank whose own files stop short is `incomplete`, never `clean`, and never `received` when the cut is at or
    before the step it received in (its own missing files could hold the origin). The likely origin's rank row
    names it."""
    first_cut: Dict[int, StepCompleteness] = {}
    for cut in steps:
        if cut.rank not in first_cut or cut.step < first_cut[cut.rank].step:
            first_cut[cut.rank] = cut
    for row in rows:
        step = first_cut.get(row.rank)
        if step is None:
            continue
        words = _words(step)
        cut_first = row.step is None or step.step <= row.step
        # a rank called origin only because it first saw the value (no collective delivered it), while no origin
        # stands (`first` is None after the cut): its own missing files may hold the origin, so it is incomplete
        first_seen = row.status == RANK_ORIGIN and first is None
        if row.status == RANK_CLEAN or ((row.status == RANK_RECEIVED or first_seen) and cut_first):
            row.status, row.step, row.via, row.time = RANK_INCOMPLETE, step.step, None, None
            row.op_name = row.op_type = None
            row.present, row.expected, row.note = step.present, step.expected, words
        else:
            row.note = f"{row.note}; " if row.note else ""
            row.note += f"step {step.step} incomplete: {words}"
    if likely is not None:
        for row in rows:
            if row.rank == likely.rank and row.status == RANK_INCOMPLETE:
                row.op_type, row.op_name = likely.op_type, likely.op_name
                row.note = f"likely origin, its output file {cut_word(likely)}; {row.note}"


def settle(decision: Decision, steps: List[StepCompleteness], unreadable: Iterable[str], dirs: List[DumpDir],
           graphs: SavedGraphs, access: TensorAccess, kn: OpKnowledge) -> Decision:
    """What incomplete (rank, step)s change in the decision: a first bad value that was only received (or first
    seen as an input) at or after a cut is no answer (the origin may be in the missing files), so the verdict is
    inconclusive unless an origin is proven elsewhere; the likely origin is named when the only unreadable file is
    its output. Their ranks' rows are marked by mark_ranks when the report is assembled."""
    if not steps:
        return decision
    first, anomalies, propagation = decision.first, decision.anomalies, decision.propagation
    if first is not None and not proven(first) and min(s.step for s in steps) <= first.step:
        anomalies = [f for f in anomalies if proven(f)]
        first, propagation = (anomalies[0] if anomalies else None), []
    likely = None
    if first is None:
        found = likely_origin(steps, unreadable, decision.judged, graphs, dirs, access)
        if found is not None:
            likely = describe(*found, access, graphs, kn, full=True)
    said = reasons(steps)
    if likely is not None:
        where = f" in {likely.cell} ({likely.cell_type})" if likely.cell else ""
        backward = f" (backward of {likely.forward_op})" if likely.forward_op not in (None, likely.op_type) else ""
        said.insert(0, f"likely origin: {likely.op_type}{backward}{where}, rank {likely.rank}, step "
                       f"{likely.step} ({likely.op_name}): its output file {cut_word(likely)}, so it cannot be "
                       "proven")
    return replace(decision, first=first, anomalies=anomalies, propagation=propagation, likely=likely,
                   incomplete=steps, reasons=said + decision.reasons)


def cut_word(likely: Finding) -> str:
    """How the likely origin's output file was lost, as its detail (findings.likely_origin) says."""
    return "is truncated" if likely.detail.startswith("its output file is truncated") else "cannot be read"


def cross_rank_advice(first, rows: List[RankStatus], steps: List[StepCompleteness], selected: bool) -> str:
    """Where to look when a collective delivered the first bad value and no dumped op created it ("" when an origin
    was proven): never "dump the other ranks" when they are dumped."""
    if first is not None and proven(first):
        return ""
    missing = [row.rank for row in rows if row.status == RANK_NOT_DUMPED]
    cut = sorted({s.rank for s in steps})
    if cut:
        return f"rank(s) {format_ids(cut)} hold incomplete steps: the origin may be in their missing files"
    if missing:
        return f"dump the other ranks (rank(s) {format_ids(missing)} not dumped)"
    if selected:
        return "analyze the other ranks too (--ranks selected only some)"
    return ("every rank is dumped: the op that sent it was not dumped or not read (kernel filter, overflow-only "
            "mode, unreadable files)")


__all__ = ["check", "settle", "cross_rank_advice", "mark_ranks", "reasons", "summary", "RECENT_SECONDS", "CAUSE", "LOST"]
