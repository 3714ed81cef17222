"""The judgement of a report (after assemble): Evidence gathered once, one ordered rule table, one Conclusion that
renderers, `patch` and the next-command hint read.

    report = conclude(report)            # the Report carrying judge(Evidence.of(report))
"""
from __future__ import annotations

import dataclasses

from ..model import Conclusion, Report
from .evidence import Evidence
from .table import RULES, judge, rule, table

__all__ = ["Evidence", "RULES", "conclude", "conclusion_of", "judge", "rule", "table"]


def conclude(report: Report) -> Report:
    """A new Report carrying its conclusion (the findings are left as they were: views take the first origin's fix
    from the conclusion, fix_of)."""
    return dataclasses.replace(report, conclusion=judge(Evidence.of(report)))


def conclusion_of(report: Report) -> Conclusion:
    """The report's conclusion: the one the analysis set, else the table's for this Report (one made by hand)."""
    return report.conclusion if report.conclusion is not None else judge(Evidence.of(report))
