"""The one definition of a bad value, beside the data model (the ground floor): a value that is not finite (NaN,
+inf, -inf), or whose magnitude exceeds the largest finite value of the tensor's *declared* dtype (an fp16-declared
tensor holding 1.8e5 in an fp32 payload overflowed). A value exactly at that maximum is not bad but `pinned`
(saturation mode).

Everything that decides "bad" uses these: tensor scans (chunk by chunk, or many small tensors as rows),
statistics (Max/Min and counts), TensorStats.bad (the counts form) and the `bad` column of msoverflow.events().

A complex value is bad like a float: when its real or imaginary part is (complex64's parts are float32s).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .dtypes import dtype_max

_COMPLEX_PARTS = {"complex32": "float16", "complex64": "float32", "complex128": "float64"}


def limit_of(declared: Optional[str]) -> Optional[float]:
    """The largest finite magnitude the declared dtype holds (None: no limit known); a complex dtype's is its
    parts'."""
    return dtype_max(_COMPLEX_PARTS.get(declared or "", declared))


def as_parts(values: np.ndarray) -> np.ndarray:
    """A complex array as the float array of its parts (real and imaginary side by side, no copy when it is
    contiguous); any other array unchanged. Scans judge the parts."""
    values = np.asarray(values)
    if values.dtype.kind != "c":
        return values
    return np.ascontiguousarray(values).view(values.real.dtype)



def bad_extremes(high, low, limit: Optional[float]):
    """Whether a tensor whose largest and smallest values are `high` and `low` holds a bad value (numpy's max/min
    propagate NaN). Scalars or arrays (one per tensor)."""
    with np.errstate(invalid="ignore"):
        bad = ~(np.isfinite(high) & np.isfinite(low))
        if limit is not None:
            bad = bad | (np.fmax(np.abs(high), np.abs(low)) > limit)
    return bad


def pinned_extremes(high, low, limit: Optional[float]):
    """Whether some value sits exactly at the declared dtype's max (saturated), with nothing beyond it."""
    if limit is None:
        return np.zeros(np.shape(high), dtype=bool) if np.ndim(high) else False
    with np.errstate(invalid="ignore"):
        return np.fmax(np.abs(high), np.abs(low)) == limit


def bad_counts(nonfinite: int, over_range: int) -> bool:
    """The counts form: a tensor with any non-finite or out-of-range value is bad."""
    return nonfinite > 0 or over_range > 0


def over_range_mask(values: np.ndarray, limit: Optional[float]) -> Optional[np.ndarray]:
    """Finite values beyond the limit (for counting); None without a limit."""
    return None if limit is None else np.abs(values) > limit


def bad_mask(values: np.ndarray, declared: Optional[str]) -> np.ndarray:
    """Element by element: not finite, or beyond the declared dtype's range (the same definition, per value)."""
    values = np.asarray(values)
    if values.dtype.kind == "c":
        return bad_mask(values.real, declared) | bad_mask(values.imag, declared)
    if values.dtype.kind != "f":
        return np.zeros(values.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        beyond = over_range_mask(values, limit_of(declared))
        return ~np.isfinite(values) if beyond is None else (~np.isfinite(values) | beyond)
