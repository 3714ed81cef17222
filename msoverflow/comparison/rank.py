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


def significance(op: OpDiff) -> Tuple[bool, bool, float, float]:
    """How the largest differences are ranked (highest first): an op whose outputs' inf/NaN differ, then the ops
    where the runs part (origin), then its error for the values' size (_size_error) over what its inputs already carry (an origin, whose inputs agree, over the
    floor; an op whose inputs are not in the dump, a parameter, as 1: it carries what it was given), then the
    absolute error."""
    parts = op.role == ROLE_ORIGIN       # a collective that received the difference only carries it
    error = max((_size_error(t) for t in op.outputs), default=0.0)
    if not op.inputs:       # a parameter after its update, or inputs not dumped: what it adds is not visible
        return bool(op.nonfinite_differ), parts, 1.0 if error else 0.0, op.max_abs_error or 0.0
    # what the op was given: an origin's changed constant (an epsilon) is its own change, not a carried one
    carried = max((_size_error(t) for t in op.inputs if not parts or t.agree), default=0.0)
    return bool(op.nonfinite_differ), parts, error / max(SIGNIFICANCE_FLOOR, carried), op.max_abs_error or 0.0


def _size_error(t) -> float:
    """A tensor's error for its values' size: the largest absolute error over its largest |value| (a value that
    cancels to ~0, a gradient sum, is not measured against itself), else its scaled ulps (statistics)."""
    found = t.normwise_error
    if found is None:
        found = t.scaled_error
    return found or 0.0


def largest(diverged: List[OpDiff], top: int) -> List[OpDiff]:
    return sorted((op for op in diverged if op.error_ulps is not None or op.nonfinite_differ),
                  key=significance, reverse=True)[:top]


def _sample(items: list, limit: int) -> list:
    if len(items) <= limit:
        return items
    step = (len(items) - 1) / (limit - 1)
    return [items[round(i * step)] for i in range(limit)]


