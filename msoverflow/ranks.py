"""Every rank accounted for: which ranks the dump should hold, and for each one how it first went bad.

A rank is `origin` when one of its ops created a bad value (inputs finite, output not), `received` when a
collective delivered it (output bad, inputs fine), `flagged` when only the hardware flag speaks and the inputs
that would decide were not dumped, `clean`, or `not dumped` when the rank is expected but has no file.
Expected ranks come from the rank_* directories present (empty ones included), gaps in their numbering, and the
rank count the dump's metadata declares. Ranks are never compared by their clocks: within a rank its own order
is used, across ranks only steps and collectives.
"""
from __future__ import annotations

import os
import re
from typing import Callable, Dict, List, Optional, Set, Tuple

from . import safeio
from .errors import reading
from .layout import Dump
from .model import (
    CROSS_RANK,
    ORIGIN,
    RANK_CLEAN,
    RANK_FLAGGED,
    RANK_NOT_DUMPED,
    RANK_ORIGIN,
    RANK_RECEIVED,
    SUSPECT,
    OpExecution,
    RankStatus,
)
from .names import RANK_DIR
from .selection import format_ids

_RANK_SIZE_KEYS = ("rank_size", "RANK_SIZE", "group_size", "world_size", "device_num")
MAX_PLAUSIBLE_GAPS = 64   # missing rank numbers between present ranks that are filled in (more: 8 per present rank)


def inside_one_rank(path: str) -> bool:
    """The path names one rank's directory or a place inside it: other ranks are not expected."""
    return any(RANK_DIR.match(part) for part in os.path.abspath(path).split(os.sep))


def declared_rank_count(rank_roots: List[str], warn: Callable[[str], None]) -> Optional[int]:
    """The number of ranks a dump's metadata declares (rank_N/.dump_metadata/*.json), when it says."""
    for root in rank_roots:
        folder = os.path.join(root, ".dump_metadata")
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".json"))
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            try:   # regular files only (a FIFO never blocks), bounded size and nesting (msoverflow.safeio)
                with reading(path):
                    doc = safeio.load_json(path, limit=1 << 20)
            except (OSError, ValueError):
                continue
            count = _find_count(doc)
            if count:
                return count
    return None


_ACL_CONFIG = re.compile(r"^acl_dump_([0-9]{1,9})\.json$")
_RANK_TABLE = re.compile(r"(rank_table|hccl).*\.json$", re.IGNORECASE)


def _ranks_named_at_root(dump: Dump) -> Dict[int, str]:
    """Ranks the files beside the dump name: `acl_dump_{device}.json` (one per device that was told to dump) and an
    HCCL rank table (`rank_table*.json`, `hccl*.json`: server_list[].device[].rank_id)."""
    found: Dict[int, str] = {}
    for name in dump.root_files:
        match = _ACL_CONFIG.match(name)
        if match:
            found.setdefault(int(match.group(1)), f"{name} configures device {match.group(1)} to dump")
        elif _RANK_TABLE.search(name):
            for rank in sorted(rank_table_ranks(os.path.join(dump.path, name))):
                found.setdefault(rank, f"the rank table {name} lists rank {rank}")
    return found


def rank_table_ranks(path: str) -> Set[int]:
    """The ranks an HCCL rank table lists (server_list[].device[].rank_id); empty when it is not one."""
    ranks: Set[int] = set()
    try:
        with reading(path):
            table = safeio.load_json(path, limit=4 << 20)
    except (OSError, ValueError):
        return ranks
    servers = table.get("server_list") if isinstance(table, dict) else None
    for server in servers if isinstance(servers, list) else []:
        devices = server.get("device") if isinstance(server, dict) else None
        for device in devices if isinstance(devices, list) else []:
            try:
                rank = int(str(device.get("rank_id"))[:8])
            except (AttributeError, TypeError, ValueError):
                continue
            if 0 <= rank <= 1 << 16:
                ranks.add(rank)
    return ranks


def _find_count(doc, depth: int = 0) -> Optional[int]:
    if depth > 4:
        return None
    if isinstance(doc, dict):
        for key in _RANK_SIZE_KEYS:
            value = doc.get(key)
            if value is None:
                continue
            try:
                number = int(value)
            except (TypeError, ValueError, OverflowError):
                continue
            if 0 < number <= 1 << 16:
                return number
        for value in doc.values():
            found = _find_count(value, depth + 1)
            if found:
                return found
    return None


def expected_ranks(dump: Dump, dumped: Set[int], rank_roots: List[str],
                   warn: Callable[[str], None]) -> Dict[int, str]:
    """rank -> why it is expected, for the ranks that should be in the dump (its rank_* directories, empty ones
    included, as the one listing found them)."""
    if inside_one_rank(dump.path):
        return {r: "dumped" for r in dumped}
    reasons: Dict[int, str] = {}
    for rank, directory in dump.rank_dirs.items():
        shown = os.path.relpath(directory.path, dump.path)
        unlisted = dict(dump.unlisted).get(directory.path)
        reasons[rank] = (f"{shown}/ cannot be listed ({unlisted})" if unlisted else
                         f"{shown}/ is present but none of its files is a tensor file msoverflow understood"
                         if directory.holds_files else f"{shown}/ is present but holds no file")
    declared = declared_rank_count(rank_roots, warn)
    if declared:
        for rank in range(declared):
            reasons.setdefault(rank, f"the dump metadata declares {declared} ranks")
    for rank, why in _ranks_named_at_root(dump).items():
        reasons.setdefault(rank, why)
    known = set(reasons) | set(dumped)
    if len(known) > 1 or (known and max(known) > 0):
        gaps = max(known) + 1 - len(known)
        if gaps <= max(MAX_PLAUSIBLE_GAPS, 8 * len(known)):
            why = f"ranks {format_ids(known, limit=6)} are present: missing between them"
            for rank in range(max(known) + 1):
                reasons.setdefault(rank, why)
        else:     # rank_0 beside a lone rank_99999: not a job of 100,000 ranks; say so instead of listing them
            warn(f"ranks {format_ids(known, limit=6)} are present: the {gaps} rank numbers between them are not "
                 "expected (too many gaps for a real job); only the ranks present and declared are checked")
    return reasons


def compress_not_dumped(rows: List[RankStatus]) -> List[RankStatus]:
    """Consecutive not-dumped ranks with the same reason become one row (rank..last_rank)."""
    out: List[RankStatus] = []
    for row in rows:
        last = out[-1] if out else None
        if (last is not None and row.status == RANK_NOT_DUMPED and last.status == RANK_NOT_DUMPED
                and last.note == row.note and (last.last_rank or last.rank) + 1 == row.rank):
            last.last_rank = row.rank
        else:
            out.append(row)
    return out


class RankTable:
    """Builds the per-rank table from the walk's facts: the judged executions, every collective that delivered
    a bad value (`arrivals`) and the ranks whose scanned steps held op runs (`dumped`). Positions on a rank are
    (step, time on that rank's clock, graph order): never compared across ranks."""

    def __init__(self, dumped, judged, arrivals: List[OpExecution]):
        self.dumped = set(dumped)
        self.judged = judged
        # The earliest arrival per rank and per (rank, step): every query is a lookup, never a scan
        # (15,000 origins on one rank each ask for the arrival before them).
        self._first: Dict[int, OpExecution] = {}
        self._first_in_step: Dict[Tuple[int, int], OpExecution] = {}
        for ex in arrivals:
            if ex.rank not in self._first or self.position(ex) < self.position(self._first[ex.rank]):
                self._first[ex.rank] = ex
            step = (ex.rank, ex.step)
            if step not in self._first_in_step or self.position(ex) < self.position(self._first_in_step[step]):
                self._first_in_step[step] = ex

    @staticmethod
    def position(ex: OpExecution) -> Tuple[int, int, int]:
        return (ex.step, ex.time, ex.order if ex.order is not None else 1 << 30)

    def first_arrival(self, rank: int, before: Optional[OpExecution] = None,
                      same_step: bool = False) -> Optional[OpExecution]:
        """The first collective on `rank` that delivered a bad value, up to and including `before` (in `before`'s
        step only with same_step), or None."""
        first = (self._first_in_step.get((rank, before.step)) if same_step and before is not None
                 else self._first.get(rank))
        if first is None or (before is not None and self.position(first) > self.position(before)):
            return None
        return first

    def rows(self, expected: Dict[int, str], selected: Optional[List[int]] = None,
             unmatched_records=()) -> List[RankStatus]:
        """unmatched_records: Opdebug records that name no dumped op (the hardware saw something on that rank)."""
        by_rank: Dict[int, List] = {}
        for ex, v in self.judged:
            by_rank.setdefault(ex.rank, []).append((ex, v))
        unmatched: Dict[int, list] = {}
        for record in unmatched_records:
            unmatched.setdefault(record.rank, []).append(record)
        ranks = self.dumped | set(expected) | set(unmatched)
        if selected is not None:
            ranks = {rank for rank in ranks if rank in selected}
        rows = []
        for rank in sorted(ranks):
            records = sorted(unmatched.get(rank, []), key=lambda r: r.step)
            if rank not in self.dumped and not records:
                why = expected.get(rank) or "no tensor file of this rank was understood"
                rows.append(RankStatus(rank, RANK_NOT_DUMPED, note=why))
                continue
            items = sorted(by_rank.get(rank, []), key=lambda item: self.position(item[0]))
            row = self._row(rank, items)
            if records and row.status in (RANK_CLEAN, RANK_NOT_DUMPED) or (
                    records and row.step is not None and records[0].step < row.step
                    and row.status != RANK_ORIGIN):
                record = records[0]
                row = RankStatus(rank, RANK_FLAGGED, record.step, f"task {record.task_id} stream "
                                 f"{record.stream_id}", "unknown op",
                                 note=f"an Opdebug record ({record.unit}) matches no dumped op")
            rows.append(row)
        return compress_not_dumped(rows)

    def _row(self, rank: int, items) -> RankStatus:
        if rank not in self.dumped:
            return RankStatus(rank, RANK_CLEAN)
        origins = [(ex, v) for ex, v in items if v.role == ORIGIN and v.kind != CROSS_RANK]
        suspects = [(ex, v) for ex, v in items if v.role == SUSPECT]
        first_bad = items[0][0] if items else None
        arrival = self.first_arrival(rank, before=first_bad if first_bad is not None and not origins else None) \
            if not origins else self.first_arrival(rank, before=origins[0][0])
        if origins:
            ex, _v = origins[0]
            note = ""
            if arrival is not None:
                note = (f"had received a bad value before: step {arrival.step} via {arrival.op_type} "
                        f"{arrival.op_name}")
            return RankStatus(rank, RANK_ORIGIN, ex.step, ex.op_name, ex.op_type, note=note, time=ex.time)
        if arrival is None and first_bad is None:
            arrival = self.first_arrival(rank)
        if arrival is not None:
            return RankStatus(rank, RANK_RECEIVED, arrival.step, arrival.op_name, arrival.op_type,
                              via=f"{arrival.op_type} {arrival.op_name}", time=arrival.time)
        if suspects:
            ex, _v = suspects[0]
            return RankStatus(rank, RANK_FLAGGED, ex.step, ex.op_name, ex.op_type,
                              note="hardware flag only: the inputs that would decide were not dumped", time=ex.time)
        if first_bad is not None:
            ex, v = items[0]
            flagged = any(e.flags for e, _ in items)
            note = ("its flagged ops' inputs were already bad and no dumped op on this rank created them; the op "
                    "that delivered them was not dumped") if flagged else (
                   "no dumped op on this rank created the bad value and no dumped collective delivered it")
            # nothing says another rank sent it (no collective delivered it): first seen here is not "received"
            return RankStatus(rank, RANK_FLAGGED if flagged else RANK_ORIGIN, ex.step, ex.op_name,
                              ex.op_type, note=note, time=ex.time)
        return RankStatus(rank, RANK_CLEAN)


__all__ = ["RankTable", "expected_ranks", "declared_rank_count", "inside_one_rank",
           "compress_not_dumped"]
