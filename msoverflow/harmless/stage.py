"""The harmless stage of the analysis: which non-finite values are no fault. Contained values first
(msoverflow/harmless/contained.py), then the overflows a loss scale handled (msoverflow/harmless/loss_scale.py),
over the op runs the walk judged not clean. In the chain (msoverflow/analysis.py):

    sight = Sight(graphs, units, dump.step_reads, kn) what the diagnosis reads the dump through
    walk(..., stops=sight.stops(strict))              a rank's walk reads on past a step that may be harmless
    harmless = find(walked, sight, strict)            -> Harmless
    walked = harmless.remove(walked)                  what it accounts for is no finding (unless --strict)
    decide, settle                                    the first origin is the first harmful one
    decision = harmless.explain(decision, sight)      unconfirmed ones said on their findings; since when

Each step takes one value and hands on a new one; nothing changes what an earlier stage handed over.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

from ..cause.history import history
from ..dataflow import Flows, StepIndex, StepReads
from ..model import ORIGIN, Contained, Finding, Handled
from ..rules.knowledge import OpKnowledge
from .contained import find_contained
from .loss_scale import find_handled, may_be_handled

if TYPE_CHECKING:
    from ..findings import Decision
    from ..graphs import SavedGraphs
    from ..layout import Unit
    from ..parallel import Walked
    from ..walk import UnitSummary

class Sight:
    """What the diagnosis reads the dump through: the saved graphs' data flow (learnt as the walk goes) and each
    planned (rank, step)'s op runs, read again when asked for through the dump's one step cache (StepReads)."""

    def __init__(self, graphs: "SavedGraphs", units: Sequence["Unit"], reads: StepReads, kn: OpKnowledge):
        self.graphs, self.reads, self.access, self.kn = graphs, reads, reads.access, kn
        self.flows = Flows(graphs.graph, graphs.ids, kn)
        self.steps: Dict[int, List[int]] = {}
        for unit in units:
            self.steps.setdefault(unit.rank, []).append(unit.step)
        self._planned = {(unit.rank, unit.step) for unit in units}

    def index_of(self, rank: int, step: int) -> Optional[StepIndex]:
        """The op runs of a planned (rank, step) (None for one outside the selection)."""
        return self.reads(rank, step) if (rank, step) in self._planned else None

    def ops_of(self, rank: int, step: int, ops: Callable[[str], bool]) -> Optional[StepIndex]:
        """The op runs of (rank, step) that ops(op name) takes (the history needs one op and a few parameters of
        each step: a whole step read as objects costs seconds on a statistic.csv of 50,000 rows)."""
        return self.reads.ops_of(rank, step, ops) if (rank, step) in self._planned else None

    def stops(self, strict: bool = False) -> "EarlyStop":
        """The walk's early stop (--strict reads the same steps: it changes what is reported, not what is read)."""
        return EarlyStop(self)


class EarlyStop:
    """The walk's stop rule, the one interface the walk asks (msoverflow/parallel.py): called once per (rank, step)
    in each rank's step order with what the walk found there, it says whether that rank's walk ends after it.

    A rank stops after a step that holds a fault for sure (neither contained nor possibly handled by a loss scale),
    unless earlier steps that a loss scale may have handled still wait for a later step that recovers (a clean
    one): only that step can tell calibration from a fault, so the walk reads on to it (as --all would)."""

    def __init__(self, sight: Sight):
        self.sight = sight
        self.waiting: Dict[int, bool] = {}     # rank -> steps that may be handled wait for a recovering step
        self.faulted: Dict[int, bool] = {}     # rank -> a step held a fault for sure

    def __call__(self, summary: "UnitSummary") -> bool:
        sight, rank = self.sight, summary.rank
        sight.graphs.learn(summary.rank_roots)
        if not summary.has_origin:
            if summary.judged:          # bad values, no origin (received, propagated): no recovery, no fault
                return False
            self.waiting[rank] = False  # a clean step: what waited is decided
            return self.faulted.get(rank, False)
        if harmful_step(summary.judged, sight.flows, sight.index_of, sight.access, sight.kn):
            self.faulted[rank] = True
            return not self.waiting.get(rank, False)
        self.waiting[rank] = True
        return False


@dataclass(frozen=True)
class Harmless:
    """The non-finite values that are no fault, and the op runs they account for."""
    contained: List[Contained] = field(default_factory=list)
    handled: List[Handled] = field(default_factory=list)
    accounted: frozenset = frozenset()                   # keys (OpExecution.key) of the op runs the two account for
    # (rank, steps, text): steps that look handled but cannot be confirmed; said on their findings
    notes: List[Tuple[int, List[int], str]] = field(default_factory=list)
    strict: bool = False                                 # they stay findings (--strict)

    def keep(self, judged: Sequence[tuple]) -> list:
        """The judged (op run, verdict) pairs that remain findings."""
        if self.strict:
            return list(judged)
        return [pair for pair in judged if pair[0].key not in self.accounted]

    def remove(self, walked: "Walked") -> "Walked":
        """The walk without what is no fault: a new Walked whose judged op runs and arrivals leave it out."""
        if self.strict or not self.accounted:
            return walked
        return dataclasses.replace(walked, judged=self.keep(walked.judged),
                                   arrivals=[ex for ex in walked.arrivals if ex.key not in self.accounted])

    def explain(self, decision: "Decision", sight: Sight) -> "Decision":
        """A new Decision carrying the contained values and handled overflows, the notes on findings whose steps
        look handled but could not be confirmed (the first origin's since-when history: since_when)."""
        renewed: Dict[int, Finding] = {}
        for finding in [decision.first, *decision.anomalies, *decision.flagged]:
            if finding is None or id(finding) in renewed:
                continue
            said = [text for rank, steps, text in self.notes if finding.rank == rank and finding.step in steps]
            renewed[id(finding)] = dataclasses.replace(finding, evidence=finding.evidence + said) if said else finding
        return dataclasses.replace(
            decision, first=renewed.get(id(decision.first), decision.first),
            anomalies=[renewed.get(id(f), f) for f in decision.anomalies],
            flagged=[renewed.get(id(f), f) for f in decision.flagged],
            contained=self.contained, handled=self.handled, strict=self.strict)


def since_when(decision: "Decision", sight: Sight) -> "Decision":
    """The first origin's since-when history, once the diagnosis has settled which op that is (it may move the
    origin upstream, to the reader of a corrupted weight)."""
    first = decision.first
    if first is None or first.role != ORIGIN:
        return decision
    found = history(first.rank, first.graph, first.op_name, first.op_type, first.step,
                    sight.steps.get(first.rank, []), sight.flows, sight.ops_of, sight.kn)
    if found is None:
        return decision
    dated = dataclasses.replace(first, history=found)
    return dataclasses.replace(decision, first=dated, anomalies=[dated if f is first else f
                                                                 for f in decision.anomalies])


def find(walked: "Walked", sight: Sight, strict: bool = False) -> Harmless:
    """The contained values and handled overflows among the walk's judged op runs (scanned: rank -> the steps the
    walk read, in order)."""
    judged = walked.judged
    contained, ids = find_contained(judged, sight.flows, sight.index_of, sight.access, sight.kn)
    rest = [pair for pair in judged if pair[0].key not in ids]
    handled, handled_ids, notes = find_handled(rest, walked.scanned, sight.flows, sight.index_of, sight.access,
                                               sight.kn)
    return Harmless(contained, handled, frozenset(ids | handled_ids), notes, strict)


def harmful_step(pairs: Sequence[tuple], flows: Flows, index_of, access, kn: OpKnowledge) -> bool:
    """Whether one step's bad op runs hold a value that is surely a fault: neither contained nor possibly handled
    by a loss scale. The walk stops after such a step; past any other it reads on, since later steps decide."""
    _contained, ids = find_contained(pairs, flows, index_of, access, kn)
    rest = [pair for pair in pairs if pair[0].key not in ids]
    return bool(rest) and not may_be_handled(rest, flows, kn)
