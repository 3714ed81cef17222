"""The ranks stage: every dumped or expected rank's row (how it first went bad), with its parallel coordinates.
The parallel layout is resolved here, once per analysis, and kept on the Dump (`Dump.layout`): the diagnosis asks
it for data-parallel groups, the report shows it; nobody resolves it again.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, List, Optional

from .model import RankStatus
from .ranks import expected_ranks
from .selection import format_ids

if TYPE_CHECKING:
    from .findings import Decision
    from .layout import Dump, Plan
    from .parallel import Walked


@dataclass
class RankRows:
    rows: List[RankStatus]
    parallel: Optional[Dict[str, object]]     # Report.parallel (None: the layout is unknown)


def rank_rows(dump: "Dump", plan: "Plan", walked: "Walked", decision: "Decision", note: Callable[[str], None],
              spec=None) -> RankRows:
    """spec: a parallel_layout.ParallelSpec (None: from a file beside the dump, else inferred from the graphs)."""
    from .parallel_layout import apply_layout, resolve
    roots = sorted({r for r in walked.rank_roots.values() if r})
    expected = expected_ranks(dump, set(walked.runs), roots, note) if not plan.ranks else {}
    if plan.steps:
        expected = {rank: f"no file of step {format_ids(plan.steps)} on this rank ({why})"
                    for rank, why in expected.items()}
    rows = decision.table.rows(expected, plan.ranks, decision.unmatched)
    by_rank: Dict[int, str] = {}
    for (rank, _graph), root in sorted(walked.rank_roots.items(), key=lambda item: (item[0][0], str(item[0][1]))):
        if root:
            by_rank.setdefault(rank, root)
    dump.layout = resolve(spec, dump.path, [row.rank for row in rows], by_rank, note, dump.root_files)
    dump.layout_resolved = True
    return RankRows(rows, apply_layout(dump.layout, rows, selected=plan.ranks))
