"""Where the bad values sit in a tensor (batch rows, sequence positions, channels, or spread), and the pattern they
form: aligned blocks or whole rows (a memory stomp), a few isolated values a bit or two from a plausible one (a
bit flip), or values that grow with the inputs (a real overflow)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np

BLOCK = 2048          # elements: the granularity of device memory blocks a stomp overwrites
ISOLATED_MAX = 4      # at most this many bad values, none adjacent, to be "a few isolated values"
SHOWN = 3             # positions named one by one

# Pattern kinds (Placement.pattern)
BIT_FLIP = "bit flip"
MEMORY_STOMP = "memory stomp"
OVERFLOW = "overflow"


@dataclass
class Placement:
    count: int
    total: int
    text: str                                      # "all 30 in batch row 1", "spread across the tensor: ..."
    axes: Dict[str, List[int]] = field(default_factory=dict)   # axis name -> indices holding bad values (<= 16)
    pattern: str = ""                              # BIT_FLIP | MEMORY_STOMP | OVERFLOW | ""
    pattern_text: str = ""


def axis_names(ndim: int) -> List[str]:
    if ndim <= 1:
        return ["position"]
    if ndim == 2:
        return ["row", "column"]
    if ndim == 3:
        return ["batch row", "sequence position", "channel"]
    return ["batch row"] + [f"index on axis {k}" for k in range(1, ndim - 1)] + ["channel"]


def spans(indices: Sequence[int]) -> str:
    """[1] -> '1'; [1, 3] -> '1 and 3'; [4, 5, 6, 9] -> '4-6 and 9'."""
    values = sorted(set(int(i) for i in indices))
    parts, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            parts.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _plural(name: str, n: int) -> str:
    if n == 1:
        return name
    return {"batch row": "batch rows", "sequence position": "sequence positions"}.get(name, name + "s")


def position_text(index: Sequence[int], names: List[str]) -> str:
    if len(index) == 0:
        return "the only value"
    if len(index) == 1:
        return f"{names[0]} {index[0]}"
    return ", ".join(f"{name} {i}" for name, i in zip(names, index, strict=True))


def place(mask: np.ndarray) -> Placement:
    """Where the True elements of `mask` sit, in words."""
    mask = np.asarray(mask, dtype=bool)
    total, count = int(mask.size), int(np.count_nonzero(mask))
    shape = mask.shape if mask.ndim else (1,)
    names = axis_names(len(shape))
    if count == 0:
        return Placement(0, total, "none")
    idx = np.argwhere(mask.reshape(shape))
    axes = {names[k]: sorted(set(int(i) for i in idx[:, k]))[:16] for k in range(len(shape)) if shape[k] > 1}
    if count == total:
        return Placement(count, total, f"all {total} values" if total > 1 else "the only value", axes)
    if count <= SHOWN:
        where = [position_text([int(i) for i in row] if len(shape) > 1 else [int(row[0])], names) for row in idx]
        return Placement(count, total, f"{count} of {total} values, at " + "; ".join(where), axes)
    concentrated = []
    for k in range(len(shape)):
        distinct = np.unique(idx[:, k])
        contiguous = distinct[-1] - distinct[0] + 1 == len(distinct)
        if shape[k] > 1 and (len(distinct) <= 3 or contiguous) and len(distinct) < shape[k]:
            concentrated.append((k, distinct))
    if concentrated:
        k, distinct = concentrated[0]
        per_slice = total // shape[k]
        if count == len(distinct) * per_slice:
            text = f"{_plural(names[k], len(distinct))} {spans(distinct)} entirely ({count} of {total} values)"
        else:
            text = f"all {count} in {_plural(names[k], len(distinct))} {spans(distinct)}"
            for k2, distinct2 in concentrated[1:]:
                text += f", {_plural(names[k2], len(distinct2))} {spans(distinct2)}"
            text += f" (of {total} values)"
        return Placement(count, total, text, axes)
    rows = len(np.unique(idx[:, 0]))
    text = f"spread across the tensor: {count} of {total} values, in {rows} of {shape[0]} {_plural(names[0], shape[0])}"
    return Placement(count, total, text, axes)


# ---- patterns -----------------------------------------------------------------------------------------------

def _runs(flat: np.ndarray):
    """(start, length) of runs of consecutive flat indices."""
    if flat.size == 0:
        return []
    breaks = np.nonzero(np.diff(flat) != 1)[0]
    starts = np.concatenate(([0], breaks + 1))
    ends = np.concatenate((breaks, [flat.size - 1]))
    return [(int(flat[s]), int(flat[e] - flat[s] + 1)) for s, e in zip(starts, ends, strict=True)]


def stomp(mask: np.ndarray) -> str:
    """Aligned blocks of whole multiples of BLOCK elements, or whole rows/columns: the text, or ''."""
    mask = np.asarray(mask, dtype=bool)
    flat = np.flatnonzero(mask.reshape(-1))
    if flat.size == 0 or flat.size == mask.size:
        return ""
    runs = _runs(flat)
    if all(start % BLOCK == 0 and length % BLOCK == 0 for start, length in runs):
        return f"{len(runs)} aligned block(s) of {BLOCK}-element multiples ({flat.size} values)"
    if mask.ndim >= 2 and mask.shape[-1] > 1 and flat.size >= mask.shape[-1]:
        rows = mask.reshape(-1, mask.shape[-1])
        whole_rows = rows.all(axis=1)
        if np.array_equal(rows.any(axis=1), whole_rows):
            return f"{int(whole_rows.sum())} whole row(s) of {mask.shape[-1]} values"
        columns = rows.all(axis=0)
        if rows.shape[0] > 1 and np.array_equal(rows.any(axis=0), columns):
            return f"{int(columns.sum())} whole column(s) of {rows.shape[0]} values"
    return ""


_LAYOUT = {2: (np.uint16, 10, 5), 4: (np.uint32, 23, 8), 8: (np.uint64, 52, 11)}   # bytes -> (int, mantissa, exp)


def exponent_flips(value, reference: Optional[float], scale: float) -> Optional[int]:
    """The fewest exponent bits (1 or 2) of `value` (a numpy float scalar, in its own dtype) that, flipped, give a
    plausible value: within 1% of `reference` when there is one, else finite and no larger than `scale`. None
    when no such flip exists."""
    value = np.asarray(value)
    layout = _LAYOUT.get(value.dtype.itemsize)
    if layout is None or value.dtype.kind != "f":
        return None
    uint, mantissa, width = layout
    bits = value.view(uint)
    if reference is None:
        # An overflow writes inf (no mantissa) and an invalid op the canonical NaN (only the quiet bit): either is
        # an exponent flip away from some round value, so without a recompute they say nothing of a flip.
        fraction = int(bits) & ((1 << mantissa) - 1)
        if not np.isfinite(value) and fraction in (0, 1 << (mantissa - 1)):
            return None
    exponent_bits = [mantissa + k for k in range(width)]
    singles = ([b] for b in exponent_bits)
    pairs = ([a, b] for i, a in enumerate(exponent_bits) for b in exponent_bits[i + 1:])
    for flips in (singles, pairs):
        for chosen in flips:
            mask = uint(sum(1 << b for b in chosen))
            candidate = float((bits ^ mask).view(value.dtype))
            if not np.isfinite(candidate):
                continue
            if reference is not None and np.isfinite(reference):
                if abs(candidate - reference) <= 1e-2 * max(abs(reference), 1e-30):
                    return len(chosen)
            elif reference is None and abs(candidate) <= scale:
                return len(chosen)
    return None


def bit_flip(values: np.ndarray, mask: np.ndarray, reference: Optional[np.ndarray] = None,
             reference_word: str = "the recomputed") -> str:
    """A few isolated bad values, each one or two exponent bits from a plausible value (the reference at its
    position, or any value within the tensor's finite range): the text, or ''. reference_word names the reference
    ("the recomputed", "the stored")."""
    values, mask = np.asarray(values), np.asarray(mask, dtype=bool)
    flat = np.flatnonzero(mask.reshape(-1))
    if flat.size == 0 or flat.size > ISOLATED_MAX or flat.size * 4 > mask.size or np.any(np.diff(flat) == 1):
        return ""
    finite = values[np.isfinite(values) & ~mask]
    scale = float(np.max(np.abs(finite))) if finite.size else 0.0
    described = []
    for i in flat:
        value = values.reshape(-1)[i]
        ref = None if reference is None else float(np.asarray(reference, dtype=np.float64).reshape(-1)[i])
        flips = exponent_flips(value, ref, scale)
        if flips is None:
            return ""
        described.append((value, ref, flips))
    value, ref, flips = described[0]
    from_what = f"{reference_word} {ref:.6g}" if ref is not None else "a value in the tensor's range"
    most = max(f for _v, _r, f in described)
    return (f"{_value_word(values.reshape(-1)[flat])} in {flat.size} of {mask.size} values, isolated, "
            f"{'each ' if flat.size > 1 else ''}{most if flat.size > 1 else flips} exponent "
            f"bit{'s' if most > 1 else ''} from {from_what if flat.size == 1 else 'a plausible value'}")


def _value_word(values: np.ndarray) -> str:
    words = [w for w, hit in (("NaN", np.isnan(values)), ("+inf", np.isposinf(values)), ("-inf", np.isneginf(values)))
             if np.any(hit)]
    return " and ".join(words) if words else "out-of-range values"


def grows(mask: np.ndarray, reference: Optional[np.ndarray], limit: Optional[float]) -> str:
    """The bad values are where a wide recompute is largest and past the dtype's limit: values that grow with the
    inputs, a real overflow. The text, or ''."""
    if reference is None or limit is None:
        return ""
    mask = np.asarray(mask, dtype=bool)
    ref = np.abs(np.asarray(reference, dtype=np.float64)).reshape(mask.shape)
    if not mask.any() or not np.all(np.isfinite(ref[mask])):
        return ""
    if float(ref[mask].min()) > limit:
        return (f"the recomputed values there reach {float(ref[mask].max()):.4g}, past the limit {limit:.6g}: values "
                "that grow with the inputs, a real overflow")
    return ""


def describe(values: np.ndarray, mask: np.ndarray, *, reference: Optional[np.ndarray] = None,
             limit: Optional[float] = None, reproduced: Optional[bool] = None,
             reference_word: str = "the recomputed") -> Placement:
    """Placement of the bad values plus their pattern. `reference`: the op recomputed in a wide precision at every
    position; `reproduced`: whether the recompute makes the same bad values (None: not recomputed). A stomp or a
    bit flip is only named when the recompute did not make them (or could not run)."""
    placement = place(mask)
    if reproduced is not True:
        text = stomp(mask)
        if text and (reproduced is False or "aligned" in text):
            placement.pattern, placement.pattern_text = MEMORY_STOMP, f"{text}: the pattern of a memory stomp"
            return placement
        if text:      # whole rows also come from one bad input row carried through a product: not proof alone
            placement.pattern_text = (f"{text}: the layout of a memory stomp, or of one bad input row carried "
                                      "through the op; a recompute would tell")
            return placement
        text = bit_flip(values, mask, reference if reproduced is False else None, reference_word)
        if text:
            placement.pattern = BIT_FLIP
            placement.pattern_text = f"{text}: the pattern of a bit flip, not of an overflow"
            return placement
    if reproduced is not False:
        text = grows(mask, reference, limit)
        if text:
            placement.pattern, placement.pattern_text = OVERFLOW, text
    return placement
