"""Every line of a report agrees: the self-consistency check over a Report (issue 32, item 5). It sits with the
renderers because it reads the rendered headline too.

check(report) lists what contradicts the report's own conclusion or evidence ([] when every line agrees). The
tests run it over every real fixture and every fuzz corpus case; a new rule or renderer that breaks it fails there.
"""
from __future__ import annotations

from typing import List

from ..judgement.evidence import value_of
from ..model import (
    CAUSE_DATA,
    CAUSE_DEVICE,
    CAUSE_DOMAIN,
    CAUSE_DYNAMICS,
    MADE_BY_NO_OP,
    PATCH_PRECISION,
    RANK_RECEIVED,
    VERDICT_CLEAN,
    Report,
)

NO_FILTERS = "dump without filters"
# causes a precision patch does not fix
NOT_PRECISION = frozenset({CAUSE_DEVICE, CAUSE_DOMAIN, CAUSE_DATA, CAUSE_DYNAMICS})


def check(report: Report) -> List[str]:
    from ..judgement import conclusion_of
    c = conclusion_of(report)
    first = report.first
    problems: List[str] = []
    if c.cause in NOT_PRECISION and c.patch == PATCH_PRECISION:
        problems.append(f"the fix is a precision patch while the cause is {c.cause}")
    if c.cause == CAUSE_DYNAMICS and any("float32" in fix for fix in c.fix):
        problems.append("the fix names float32 while the cause is the training dynamics")
    if c.verdict == VERDICT_CLEAN and (c.next_command or c.patch_may_act or c.fix):
        problems.append("a clean report carries a fix, a patch or a next command")
    if c.verdict != report.verdict:
        problems.append(f"the conclusion says {c.verdict}, the report {report.verdict}")
    received = [row.rank for row in report.rank_status if row.status == RANK_RECEIVED]
    if received and len(report.ranks) < 2:
        problems.append(f"rank {received[0]} is called received in a single-rank job")
    own_data = first is not None and first.cause is not None and first.cause.cause == CAUSE_DATA
    if own_data and first is not None and first.rank in received:
        problems.append(f"rank {first.rank} is called received for a value its own data made")
    if first is not None and any(NO_FILTERS in w for w in report.warnings) and (own_data or _from_program(first)):
        problems.append("'dump without filters' is said of a value that is a program constant or a graph input")
    made_by_no_op = first is not None and first.cause is not None and first.cause.basis in MADE_BY_NO_OP
    if made_by_no_op and any(NO_FILTERS in w for w in report.warnings):
        problems.append("'dump without filters' is said of a weight that changed in memory between the steps")
    if made_by_no_op and first is not None and any("was not dumped" in line for line in first.evidence):
        problems.append("the origin is said to be in an op not dumped, while no op made the value")
    if first is not None and value_of(first) == "NaN" and c.kind != "NaN":
        problems.append(f"the value is NaN but the kind says {c.kind!r}")
    if first is not None:
        from .text import headline
        line = headline(report)
        if value_of(first) == "NaN" and ("invalid" in line.split(" first ")[0] or "NaN" not in line) \
                and "flagged" not in line:
            problems.append(f"the headline does not say NaN: {line}")
    return problems


def _from_program(finding) -> bool:
    """The bad value came in through an input the program or the data gave (a constant, a graph input)."""
    for t in finding.inputs:
        if t.stats is not None and t.stats.bad and t.producer is not None and \
                (t.producer == "const" or t.producer.startswith("param:")):
            return True
    return False
