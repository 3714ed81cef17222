"""Tensor statistics computed in bounded-memory chunks, so peak memory does not grow with tensor size."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from .model import TensorStats
from .values import as_parts, bad_extremes, limit_of, over_range_mask, pinned_extremes

CHUNK = 1 << 20  # elements per chunk (8 MB as float64 at most)


def _chunks(array: np.ndarray):
    """Flat chunks in storage order (statistics do not depend on order). A memory-mapped tensor is read with
    plain file reads into one reused-size buffer: touching the map would leave every page of a large tensor
    resident, so peak memory would grow with tensor size."""
    if hasattr(array, "chunks"):          # readers.raw.DecodedTensor: bf16 / packed ints decoded chunk by chunk
        yield from array.chunks(CHUNK)
        return
    if isinstance(array, np.memmap) and array.filename and (array.flags.c_contiguous or array.flags.f_contiguous):
        from .safeio import open_regular
        with open_regular(array.filename, "rb") as fh:
            fh.seek(array.offset)
            remaining = array.size
            while remaining > 0:
                chunk = np.fromfile(fh, dtype=array.dtype, count=min(CHUNK, remaining))
                if chunk.size == 0:
                    return
                remaining -= chunk.size
                yield chunk
        return
    flat = array.reshape(-1, order="A") if array.ndim != 1 else array
    for start in range(0, flat.size, CHUNK):
        yield flat[start:start + CHUNK]


def compute(array: np.ndarray, declared: Optional[str]) -> TensorStats:
    """Full statistics of a float tensor, judged against its declared dtype (an fp16 file may hold fp32 bytes)."""
    limit = limit_of(declared)
    count = int(array.size)              # values (a complex value counts once; its parts are judged)
    array = as_parts(array)
    if array.dtype.kind not in "f":
        if array.dtype.kind in "iub" and count:
            lo, hi = None, None
            for chunk in _chunks(array):
                c_lo, c_hi = chunk.min(), chunk.max()
                lo = c_lo if lo is None else min(lo, c_lo)
                hi = c_hi if hi is None else max(hi, c_hi)
            assert lo is not None and hi is not None        # count > 0: at least one chunk
            return TensorStats(count=count, min=float(lo), max=float(hi), max_abs=float(max(abs(lo), abs(hi))))
        return TensorStats(count=count)
    nan = posinf = neginf = over = at_max = zero = negative = 0
    lo = hi = None
    for chunk in _chunks(array):
        finite = np.isfinite(chunk)
        n_finite = int(np.count_nonzero(finite))
        if n_finite != chunk.size:
            isnan = np.isnan(chunk)
            nan += int(np.count_nonzero(isnan))
            posinf += int(np.count_nonzero(np.isposinf(chunk)))
            neginf += int(np.count_nonzero(np.isneginf(chunk)))
            values = chunk[finite]
        else:
            values = chunk
        if values.size:
            c_lo, c_hi = float(values.min()), float(values.max())
            lo = c_lo if lo is None else min(lo, c_lo)
            hi = c_hi if hi is None else max(hi, c_hi)
            zero += int(values.size - np.count_nonzero(values))
            negative += int(np.count_nonzero(values < 0))
            beyond = over_range_mask(values, limit)
            if beyond is not None:
                over += int(np.count_nonzero(beyond))
                at_max += int(np.count_nonzero(np.abs(values) == limit))
    max_abs = None if lo is None or hi is None else max(abs(lo), abs(hi))     # (set together)
    return TensorStats(count=count, nan=nan, posinf=posinf, neginf=neginf, min=lo, max=hi, max_abs=max_abs,
                       over_range=over, at_max=at_max, zero=zero, negative=negative)


def scan(array: np.ndarray, declared: Optional[str]) -> Tuple[bool, bool]:
    """(bad, pinned): bad stops at the first chunk holding a bad value (values.py; cheap for propagated
    tensors); pinned = some value sits exactly at the declared dtype's max (saturation)."""
    array = as_parts(array)
    if array.dtype.kind != "f" or array.size == 0:
        return False, False
    limit = limit_of(declared)
    pinned = False
    for chunk in _chunks(array):
        high, low = chunk.max(), chunk.min()
        if bad_extremes(high, low, limit):
            return True, pinned
        pinned = pinned or bool(pinned_extremes(high, low, limit))
    return False, pinned


def scan_rows(matrix: np.ndarray, declared: Optional[str]) -> Tuple[np.ndarray, np.ndarray]:
    """scan() of each row of a (tensors x values) float matrix of small tensors, vectorised: (bad, pinned) per
    row. A clean batch costs two reductions; the per-row work is done only when something is off."""
    matrix = as_parts(matrix)
    rows = matrix.shape[0]
    limit = limit_of(declared)
    high, low = matrix.max(), matrix.min()
    if not bad_extremes(high, low, limit) and not pinned_extremes(high, low, limit):
        return np.zeros(rows, dtype=bool), np.zeros(rows, dtype=bool)
    high, low = matrix.max(axis=1), matrix.min(axis=1)
    bad = bad_extremes(high, low, limit)
    return bad, pinned_extremes(high, low, limit) & ~bad
