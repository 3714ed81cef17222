"""The one decision of x/0 and of an op's domain, shared by the walk's rules (rules/judge.py, from statistics or
values) and the cause (cause/cause.py, from the recomputed inputs): what counts as outside a domain, and when a
zero denominator is 0/0 or x/0."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..model import TensorStats


def outside(needs: str, values) -> Optional[np.ndarray]:
    """Where `values` lie outside the domain op_knowledge.yaml states (`needs`); None for a domain not known."""
    arg = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        if needs == "non-negative":
            return arg < 0
        if needs == "positive":
            return arg <= 0
        if needs == "greater than -1":
            return arg <= -1
        if needs.startswith("within"):
            return np.abs(arg) > 1
    return None


def outside_stats(needs: str, st: TensorStats) -> str:
    """The same decision from a tensor's statistics: what lies outside, in words ('' when nothing does)."""
    negative, zero = st.negative or 0, st.zero or 0
    if needs == "non-negative" and negative:
        return f"a negative value ({negative} values < 0)"
    if needs == "positive" and (negative or zero):
        return f"a negative value ({negative} values < 0)" if negative else f"zero ({zero} values)"
    if needs == "greater than -1" and st.min is not None and st.min <= -1:
        return "a value <= -1"
    if needs.startswith("within") and st.max_abs is not None and st.max_abs > 1:
        return "a value outside [-1, 1]"
    return ""


def zero_over_zero(numerator, denominator, where=None) -> int:
    """How many positions divide 0 by 0 (within `where`, a mask over the broadcast shape, when given); 0 when the
    shapes do not broadcast (the dump lost something)."""
    try:
        both = np.logical_and(np.asarray(numerator) == 0, np.asarray(denominator) == 0)
        if where is not None:
            both = np.logical_and(both, where)
    except ValueError:
        return 0
    return int(np.count_nonzero(both))


def division_form(numerator, denominator, where=None) -> str:
    """'0/0' when every zero denominator (within `where`) has a zero numerator, else 'x/0'."""
    den_zero = np.asarray(denominator) == 0
    if where is not None:
        den_zero = np.logical_and(den_zero, where)
    total = int(np.count_nonzero(den_zero))
    return "0/0" if numerator is not None and total and zero_over_zero(numerator, denominator, den_zero) == total \
        else "x/0"
