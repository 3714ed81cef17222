"""Was a weight corrupted in memory, or set by the program? The one numeric rule over a weight as a step read it
against the same weight as the step before left it (cause/entered.py asks it; the judgement table decides).

A memory stomp overwrites a small block of a tensor's bytes: a few values change, and random bytes give magnitudes
absurd for that weight (orders of magnitude beyond its other values) with mixed exponents. A training script that
sets a weight between steps (Parameter.set_data, a rescale, a reload) changes the tensor as a whole, typically by
one factor. Only the first is called corrupted; the second is named as set, never as a device fault.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

ABSURD = 1e6           # changed values at least this many times larger than the weight's unchanged values
FEW = 0.25             # at most this share of the weight changed (a block, not the tensor) ...
FEW_MAX = 1 << 20      # ... and at most this many values
CHUNK = 1 << 20        # values compared at once
MAX_TYPICAL = 1 << 24  # values an op's input may hold for its typical magnitude to be taken (a sort of them)
UNIFORM = 1e-3         # relative spread of read/stored ratios below which a change is one scale factor
ALIGN_BYTES = 64       # a stomp's granularity named in the words (a cache line)

CORRUPTED = "corrupted"    # a few values absurd for the weight: changed in memory
SET = "set"                # changed as a whole (or by one factor): the program set it
OTHER = "other"            # changed, but neither shape is shown


@dataclass(frozen=True)
class Change:
    verdict: str           # CORRUPTED | SET | OTHER
    changed: int           # values that differ
    total: int
    text: str              # what changed, in words
    block: str = ""        # where the changed values sit (CORRUPTED)


def stands_out(values: np.ndarray) -> bool:
    """The largest |x| is at least ABSURD times the typical one (the 75th percentile of the non-zero finite |x|): a
    few values absurd beside the rest, as a stomp's garbage carried into an op is. Values that grew or were scaled
    together (a set_data, training dynamics) do not stand out so."""
    flat = np.asarray(values).reshape(-1)
    if flat.dtype.kind != "f" or flat.size < 2 or flat.size > MAX_TYPICAL:
        return False
    magnitudes = np.abs(flat.astype(np.float64))
    magnitudes = magnitudes[np.isfinite(magnitudes) & (magnitudes > 0)]
    if magnitudes.size < 2:
        return False
    return float(magnitudes.max()) >= ABSURD * float(np.percentile(magnitudes, 100 * (1 - FEW)))


def judge_change(read: np.ndarray, stored: np.ndarray) -> Optional[Change]:
    """The change from `stored` (as the step before left the weight) to `read` (as this step read it); None when
    nothing changed or they cannot be compared. Read in chunks: memory stays bounded for any weight."""
    read, stored = np.asarray(read), np.asarray(stored)
    if read.shape != stored.shape or read.dtype.kind != "f" or stored.dtype.kind != "f" or read.size == 0:
        return None
    total = int(read.size)
    few = min(int(FEW * total), FEW_MAX)
    flat_r, flat_s = read.reshape(-1), stored.reshape(-1)
    n, ceiling, kept = 0, 0.0, []
    lo, hi, one_factor = np.inf, -np.inf, True
    for start in range(0, total, CHUNK):
        r = np.asarray(flat_r[start:start + CHUNK], dtype=np.float64)
        s = np.asarray(flat_s[start:start + CHUNK], dtype=np.float64)
        with np.errstate(invalid="ignore"):
            changed = ~((r == s) | (np.isnan(r) & np.isnan(s)))
        n += int(changed.sum())
        rest = np.abs(r[~changed])
        rest = rest[np.isfinite(rest)]
        ceiling = max(ceiling, float(rest.max()) if rest.size else 0.0)
        if n <= few:
            kept.append((np.flatnonzero(changed) + start, np.abs(r[changed])))
        finite = np.isfinite(r)
        if not np.array_equal(finite, np.isfinite(s)) or np.any(r[finite & (s == 0)] != 0):
            one_factor = False
        both = finite & (s != 0)
        if one_factor and both.any():
            ratios = r[both] / s[both]
            lo, hi = min(lo, float(ratios.min())), max(hi, float(ratios.max()))
    if n == 0:
        return None
    factor = (lo + hi) / 2
    if one_factor and np.isfinite(factor) and factor != 0 and hi - lo <= UNIFORM * abs(factor):
        return Change(SET, n, total, f"{n} of {total} values changed, every value by one factor ({factor:.4g}x): "
                      "the weight was set as a whole (host code, e.g. Parameter.set_data), not changed in memory")
    if n > few or ceiling == 0.0:
        return Change(OTHER, n, total, f"{n} of {total} values changed: the weight changed as a whole, not in a "
                      "block")
    where = np.concatenate([k for k, _v in kept])
    new = np.concatenate([v for _k, v in kept])
    big = float(new[np.isfinite(new)].max()) if np.isfinite(new).any() else float("inf")
    if big < ABSURD * ceiling:
        return Change(OTHER, n, total, f"{n} of {total} values changed, up to {big:.4g}, within reach of the "
                      f"others (up to {ceiling:.4g}): not values absurd for the weight")
    block = _block(where, read.dtype.itemsize)
    return Change(CORRUPTED, n, total, f"{block} changed to {_magnitudes(new)}, while the other {total - n} values "
                  f"stay within {ceiling:.4g}: values absurd for this weight, as bytes overwritten in memory give",
                  block)


def _block(flat: np.ndarray, itemsize: int) -> str:
    """'16 consecutive values at element 64 (byte offset 256, 64-byte aligned)', or how many and where (flat: the
    changed positions, ascending)."""
    first, last = int(flat[0]), int(flat[-1])
    offset = first * itemsize
    aligned = f", {ALIGN_BYTES}-byte aligned" if offset % ALIGN_BYTES == 0 else ""
    if last - first + 1 == flat.size:
        return f"{flat.size} consecutive value{'s' if flat.size > 1 else ''} at element {first} (byte offset " \
               f"{offset}{aligned})"
    return f"{flat.size} values within elements {first}-{last} (byte offset {offset}{aligned})"


def _magnitudes(values: np.ndarray) -> str:
    """'|x| from 3.1e-21 to 2e+36 (57 decades)': random bytes give exponents all over the range."""
    finite = values[np.isfinite(values) & (values > 0)]
    nonfinite = int((~np.isfinite(values)).sum())
    extra = f" and {nonfinite} non-finite" if nonfinite else ""
    if finite.size == 0:
        return f"{values.size} non-finite values"
    low, high = float(finite.min()), float(finite.max())
    decades = int(round(np.log10(high) - np.log10(low))) if low > 0 else 0
    return f"|x| from {low:.2g} to {high:.2g} ({decades} decades){extra}"
