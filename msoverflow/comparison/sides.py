"""Discover both sides: each dump opened once (analyze's Dump and plan), its (rank, step) units read by the walk,
its saved graphs, the parallel layout; and what makes a side not comparable (another job, cut files)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Tuple

from ..errors import UserError
from ..graphs import SavedGraphs
from ..layout import Dump, Plan
from ..model import Status
from ..selection import Selection, format_ids, not_in_dump
from ..walk import read_unit_runs, split_unread, unread_of


def _side(path: str, ranks: Optional[Selection], steps: Optional[Selection], warn) -> Tuple[Plan, Dict[int, str]]:
    """One dump opened once (analyze's Dump) and its plan of (rank, step) units for the selection, never expanded;
    and every rank of the dump (selected or not) -> its rank_N directory or "" (the world and the graphs the
    parallel layout is read from). A selection the dump has nothing of is a usage error saying what it holds."""
    dump = Dump.open(path, warn)
    if not dump.dirs:
        raise UserError(f"{path}: no dump files found (expected rank_*/<net>/<graph>/<iteration>/ with .npy, "
                        "binary dump, statistic.csv or msprobe dump.json files)")
    roots: Dict[int, str] = {}
    for d in sorted(dump.dirs, key=lambda d: (d.rank, str(d.graph))):
        if not roots.get(d.rank):
            roots[d.rank] = d.rank_root or ""
    plan = dump.plan(ranks, steps)
    if not plan.units:
        raise not_in_dump(path, plan.ranks, plan.steps, dump.dirs)
    return plan, roots



def _unread(reads: List[Dict[str, Status]]) -> Dict[str, Status]:
    """One side's unread files over its compared units (each unit's _unread_of_unit)."""
    found: Dict[str, Status] = {}
    for unread in reads:
        found.update(unread)
    return found


def _unread_of_unit(index, runs) -> Dict[str, Status]:
    """walk.unread_of over one compared unit of one side: the files its readers could not read and the tensors
    whose bytes could not be read when compared (analyze's one rule of "read"). Taken once the unit is judged, so
    that its runs (and their directories' names) need not be kept: memory is one unit's."""
    return unread_of([], (e for run in runs for e in run.tensors()), index.unread)


def _side_gaps(side: str, plan: Plan, reads, warn) -> List[str]:
    """analyze's completeness check (completeness.check: every step against the other steps of its graph and the
    other ranks, files cut short or empty) on one side: a side that is cut is never equivalent."""
    from .. import completeness
    _unread_files, cut = split_unread(_unread(reads))
    incomplete = completeness.check(plan.dirs, cut=cut, warn=warn)
    return [f"the {side} is incomplete: {line}" for line in completeness.reasons(incomplete)]



def _different_jobs(base_units, target_units) -> List[str]:
    """Why two runs are not the same job, from their (rank, step)s: different ranks, different steps; when both
    hold some in common, the selection that compares those (`--steps 0`)."""
    found = []
    for what, of in (("ranks", lambda units: {r for r, _s in units}), ("steps", lambda units: {s for _r, s in units})):
        mine, theirs = of(base_units), of(target_units)
        if mine != theirs:
            only = [f"{what[:-1]} {format_ids(a - b, 8)} in the {side} only" for side, a, b in
                    (("baseline", mine, theirs), ("target", theirs, mine)) if a - b]
            common = format_ids(mine & theirs, 8)
            hint = f"; --{what} {common} compares the {what} both hold" if common and "..." not in common else ""
            found.append(f"the runs are not the same job: the baseline holds {what} {format_ids(mine, 8)}, the "
                         f"target {what} {format_ids(theirs, 8)} ({'; '.join(only)}{hint})")
    if not found:
        for side, mine, other in (("baseline", base_units, target_units), ("target", target_units, base_units)):
            only = sorted(set(mine) - set(other))
            if only:
                found.append(f"the runs are not the same job: {len(only)} (rank, step)(s) are in the {side} only "
                             f"(first: rank {only[0][0]}, step {only[0][1]})")
    return found


def _layout(parallel, baseline: str, base_roots: Dict[int, str], target_roots: Dict[int, str], warn):
    """The parallel layout of the compared ranks (parallel_layout.resolve, as analyze labels its ranks): the two
    runs are the same job, so the baseline's files and graphs place them; the world size counts both sides."""
    from ..parallel_layout import parse_spec, resolve
    spec = parse_spec(parallel) if isinstance(parallel, str) else parallel
    return resolve(spec, baseline, sorted(set(base_roots) | set(target_roots)),
                   {rank: root for rank, root in base_roots.items() if root}, warn)


def _graphs_of(caches: Dict[tuple, SavedGraphs], rank: int, read, warn) -> SavedGraphs:
    """The saved graphs of one side for this unit (`read`: walk.UnitRead): one SavedGraphs per rank and set of
    graphs, so a rank's .ir is parsed once for all its steps; graphs a reader built from the unit itself (msprobe)
    get one of their own."""
    if read.graphs:
        return SavedGraphs(read.graphs, read.rank_roots, warn)
    key = (rank, tuple(sorted(read.rank_roots.items())))    # steps that hold the same graphs share one
    if key not in caches:
        caches[key] = SavedGraphs(read.graphs, read.rank_roots, warn)
    return caches[key]


@dataclass
class UnitRead:
    """One (rank, step) of both sides, read by the walk: the op runs in each side's execution order and the
    saved graphs that place them."""
    rank: int
    step: int
    base_runs: list
    target_runs: list
    base_graphs: SavedGraphs
    target_graphs: SavedGraphs


@dataclass
class Sides:
    """Both dumps discovered: their plans, the (rank, step)s they share, the layout, and what was read of each."""
    baseline: str
    target: str
    base_plan: Plan
    target_plan: Plan
    units: List[Tuple[int, int]]
    different: List[str]                    # why the two runs are not the same job (their ranks or steps differ)
    layout: Optional[object]
    read_of: Dict[str, list] = field(default_factory=lambda: {"baseline": [], "target": []})  # unread, per unit

    def coords_of(self, rank: int) -> Optional[Dict[str, int]]:
        return self.layout.coords(rank) if self.layout is not None else None   # type: ignore[attr-defined]

    def read_units(self, warn) -> Iterator[UnitRead]:
        """Each shared (rank, step) of both sides through walk.read_unit_runs, one at a time (memory: one unit)."""
        base_units = {(u.rank, u.step): u for u in self.base_plan.units}
        target_units = {(u.rank, u.step): u for u in self.target_plan.units}
        caches: Dict[str, Dict[tuple, SavedGraphs]] = {"baseline": {}, "target": {}}
        for rank, step in self.units:
            base_runs, base_index = read_unit_runs(base_units[(rank, step)], warn)
            target_runs, target_index = read_unit_runs(target_units[(rank, step)], warn)
            yield UnitRead(rank, step, base_runs, target_runs, _graphs_of(caches["baseline"], rank, base_index, warn),
                           _graphs_of(caches["target"], rank, target_index, warn))
            self.read_of["baseline"].append(_unread_of_unit(base_index, base_runs))    # once judged
            self.read_of["target"].append(_unread_of_unit(target_index, target_runs))

    def gaps(self, warn) -> Tuple[List[str], int]:
        """What either side could not give (analyze's completeness check) and how many tensor files were unread."""
        reasons, unread = [], 0
        for side, plan in (("baseline", self.base_plan), ("target", self.target_plan)):
            reasons.extend(_side_gaps(side, plan, self.read_of[side], warn))
            unread += len(_unread(self.read_of[side]))
        return reasons, unread


def discover(baseline: str, target: str, ranks: Optional[Selection], steps: Optional[Selection], parallel,
             warn) -> Sides:
    """Both dumps opened once, planned for the selection, and the layout that places their ranks."""
    if os.path.realpath(baseline) == os.path.realpath(target):
        warn("baseline and target are the same directory")
    base_plan, base_roots = _side(baseline, ranks, steps, warn)
    target_plan, target_roots = _side(target, ranks, steps, warn)
    base_units = {(u.rank, u.step) for u in base_plan.units}
    target_units = {(u.rank, u.step) for u in target_plan.units}
    return Sides(baseline=os.path.abspath(baseline), target=os.path.abspath(target), base_plan=base_plan,
                 target_plan=target_plan, units=sorted(base_units & target_units),
                 different=_different_jobs(base_units, target_units),
                 layout=_layout(parallel, baseline, base_roots, target_roots, warn))
