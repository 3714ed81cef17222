"""Which non-finite values are no fault: contained values first (msoverflow/diagnosis/contained.py), then the
overflows a loss scale handled (msoverflow/diagnosis/loss_scale.py), over the op runs the walk judged not clean.
What they account for is taken out of the findings; what is left is reported as before, its first origin the
first harmful one."""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from ..model import Contained, Handled
from ..rules.knowledge import OpKnowledge
from .contained import find_contained
from .dataflow import Flows, StepIndex
from .loss_scale import find_handled, may_be_handled

KEEP_STEPS = 8          # steps' op-run indexes kept in memory at once


@dataclass
class Harmless:
    contained: List[Contained] = field(default_factory=list)
    handled: List[Handled] = field(default_factory=list)
    accounted: Set[int] = field(default_factory=set)     # ids of the op runs the two account for
    # (rank, steps, text): steps that look handled but cannot be confirmed; said on their findings
    notes: List[Tuple[int, List[int], str]] = field(default_factory=list)

    def keep(self, judged: Sequence[tuple]) -> list:
        """The judged (op run, verdict) pairs that remain findings."""
        return [pair for pair in judged if id(pair[0]) not in self.accounted]


def find_harmless(judged: Sequence[tuple], scanned: Dict[int, List[int]], flows: Flows,
                  index_of: Callable[[int, int], Optional[StepIndex]], access, kn: OpKnowledge) -> Harmless:
    """judged: the walk's (op run, verdict) pairs that are not clean; scanned: rank -> the steps the walk read, in
    order; index_of(rank, step): that step's op runs (StepIndexes)."""
    contained, ids = find_contained(judged, flows, index_of, access, kn)
    rest = [pair for pair in judged if id(pair[0]) not in ids]
    handled, handled_ids, notes = find_handled(rest, scanned, flows, index_of, access, kn)
    return Harmless(contained, handled, ids | handled_ids, notes)


def harmful_step(pairs: Sequence[tuple], flows: Flows, index_of, access, kn: OpKnowledge) -> bool:
    """Whether one step's bad op runs hold a value that is surely a fault: neither contained nor possibly handled
    by a loss scale. The walk stops after such a step; past any other it reads on, since later steps decide."""
    contained, ids = find_contained(pairs, flows, index_of, access, kn)
    rest = [pair for pair in pairs if id(pair[0]) not in ids]
    return bool(rest) and not may_be_handled(rest, flows, kn)


def step_indexes(units: Sequence[object], warn: Callable[[str], None],
                 keep: int = KEEP_STEPS) -> Callable[[int, int], Optional[StepIndex]]:
    """index_of(rank, step) over a dump's planned units (walk.Unit), read when asked for; the last `keep` read are
    kept (the diagnosis goes through a rank's steps in order, so memory stays flat on long dumps)."""
    by_key: Dict[Tuple[int, int], object] = {(unit.rank, unit.iteration): unit for unit in units}
    cache: "OrderedDict[Tuple[int, int], Optional[StepIndex]]" = OrderedDict()

    def index_of(rank: int, step: int) -> Optional[StepIndex]:
        key = (rank, step)
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
        unit = by_key.get(key)
        cache[key] = StepIndex.of_unit(unit, warn) if unit is not None else None
        if len(cache) > keep:
            cache.popitem(last=False)
        return cache[key]
    return index_of
