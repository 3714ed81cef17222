"""Everything a report's judgement may read, in one object (Evidence), gathered once from the assembled Report.

Rules (msoverflow/judgement/table.py) read these fields and nothing else; a rule names the ones it used.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from ..model import (
    CROSS_RANK,
    INVALID,
    OVERFLOW,
    SATURATION,
    Cause,
    Contained,
    Finding,
    Handled,
    History,
    Report,
)

# Op types that divide: an invalid value born in one of them with a zero count is the zero-token case (guard)
DIVISION_OPS = frozenset({"Div", "RealDiv", "DivNoNan", "Divide", "DivExt"})


@dataclass(frozen=True)
class Evidence:
    """The evidence of one report. Field names are what a rule's `uses` lists."""
    verdict: str                                   # VERDICT_* as the findings give it
    origin: Optional[Finding]                      # the first origin (or first bad op seen), None when none
    value: str = ""                                # what the origin's bad output holds: "NaN", "inf", "beyond range"
    cause: Optional[Cause] = None                  # the recompute's cause of the origin (also of its producers)
    history: Optional[History] = None              # since when: the origin's inputs and parameters over the steps
    update_applied: Optional[bool] = None          # a non-finite value reached a weight (the update was applied)
    updated: List[str] = field(default_factory=list)   # the parameters that went non-finite
    loss_scale: Optional[float] = None             # a loss scale the dump shows (read, not inferred), else None
    handled: List[Handled] = field(default_factory=list)       # overflows a loss scale handled
    contained: List[Contained] = field(default_factory=list)   # values absorbed by design
    ranks: int = 1                                 # ranks in the dump
    complete: bool = True                          # every (rank, step) read holds what it should
    inconclusive: List[str] = field(default_factory=list)      # why nothing found is not clean
    strict: bool = False
    division: bool = False                         # the origin is a division op (or its gradient's forward is)

    @staticmethod
    def of(report: Report) -> "Evidence":
        first = report.first
        loss_scale = next((h.scale_from for h in report.handled if h.scale_how == "read"
                           and h.scale_from is not None), None)
        updated = [p.name for p in report.parameters
                   if first is None or (p.rank == first.rank and p.step >= first.step)]
        return Evidence(verdict=report.verdict, origin=first, value=value_of(first),
                        cause=first.cause if first is not None else None,
                        history=first.history if first is not None else None,
                        update_applied=bool(updated) if first is not None else None, updated=updated,
                        loss_scale=loss_scale, handled=list(report.handled), contained=list(report.contained),
                        ranks=len(report.ranks), complete=not report.completeness,
                        inconclusive=list(report.inconclusive), strict=report.strict,
                        division=first is not None and bool({first.op_type, first.forward_op} & DIVISION_OPS))


def value_of(finding: Optional[Finding]) -> str:
    """What a finding's bad value is, in the words a report uses: NaN when any NaN is there (a NaN is never "an
    overflow"), inf, or beyond the dtype's range; its kind's word when the tensors do not say."""
    if finding is None:
        return ""
    tensors = finding.outputs or finding.inputs
    stats = [t.stats for t in tensors if t.stats is not None]
    if any(s.nan for s in stats):
        return "NaN"
    if any(s.posinf or s.neginf for s in stats):
        return "inf"
    if any(s.over_range for s in stats):
        return "beyond range"
    return {INVALID: "NaN", OVERFLOW: "inf", SATURATION: "saturation", CROSS_RANK: "received"}.get(finding.kind,
                                                                                                   finding.kind)


def kind_word(finding: Finding) -> str:
    """A finding's kind as every view says it: NaN when its value is NaN (not "invalid"), else its kind."""
    return "NaN" if value_of(finding) == "NaN" else finding.kind
