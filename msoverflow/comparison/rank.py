"""Rank: the first divergence and the largest differences, by how far each op run goes beyond what its inputs
carry (its error for the values' size over its inputs' difference), never by clocks."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

from .model import ROLE_ORIGIN, ROLE_PROPAGATOR, ROLE_RECEIVED, OpDiff

# an error no input carries is measured against this (relative; about float32's ulp): ranks stay comparable
# across dtypes (fifty float16 ulps above two thousand float32 ones)
SIGNIFICANCE_FLOOR = 2.0 ** -23


def first_divergence(diverged: List[OpDiff], orders: Dict[Tuple[int, int], int]) -> Optional[OpDiff]:
    """By step; an op that parts by itself before a collective that received the difference, before a
    propagator; then how far through its own (rank, step) it ran (clocks of two ranks are never compared)."""
    rank_of_role = {ROLE_ORIGIN: 0, ROLE_RECEIVED: 1, ROLE_PROPAGATOR: 2}
    if not diverged:
        return None

    def order(op: OpDiff):
        assert op.role is not None          # a diverged op has a role
        return op.step, rank_of_role[op.role], op.position / orders[(op.rank, op.step)], op.rank
    first = min(diverged, key=order)
    if first.role == ROLE_PROPAGATOR:
        first.note = ("its input already differs and no matched op before it parts: the difference comes from "
                      "an op present on one side only, a step or rank not compared, or the data")
    return first


def significance(op: OpDiff) -> Tuple[bool, float, float]:
    """How the largest differences are ranked (highest first): an op whose outputs' inf/NaN differ, then its
    error for the values' size over what its inputs already carry (an origin, whose inputs agree, over the
    floor), then the absolute error."""
    carried = max((t.scaled_error or 0.0 for t in op.inputs), default=0.0)
    return bool(op.nonfinite_differ), (op.scaled_error or 0.0) / max(SIGNIFICANCE_FLOOR, carried), \
        op.max_abs_error or 0.0


def largest(diverged: List[OpDiff], top: int) -> List[OpDiff]:
    return sorted((op for op in diverged if op.error_ulps is not None or op.nonfinite_differ),
                  key=significance, reverse=True)[:top]


def _sample(items: list, limit: int) -> list:
    if len(items) <= limit:
        return items
    step = (len(items) - 1) / (limit - 1)
    return [items[round(i * step)] for i in range(limit)]


