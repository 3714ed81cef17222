"""The numbers of one tensor pair: max absolute and relative error, cosine, error in ulps; read a chunk at a time
(small npy outputs of a step stacked and compared together through readers/npy.py's batch reader)."""
from __future__ import annotations

import math
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np

from .. import stats as tensor_stats
from ..errors import READ_ERRORS, reading
from ..evaluate import TensorAccess, _take_header
from ..model import TensorEvent
from .model import _MANTISSA, SCALE_FLOOR, TensorDiff

CHUNK = 1 << 20
BATCH_BYTES = 4 << 20           # small tensors compared together, at most this many bytes (as float64) at a time


def _precision(dtype: Optional[str]) -> int:
    return _MANTISSA.get(dtype or "", -1)


def _ulp_dtype(a: Optional[str], b: Optional[str], finer: bool) -> Optional[str]:
    floats = [d for d in (a, b) if d in _MANTISSA]
    if not floats:
        return None
    return (max if finer else min)(floats, key=_precision)


_TINY = {"float16": 2.0 ** -14, "bfloat16": 2.0 ** -126, "float32": 2.0 ** -126, "float64": 2.0 ** -1022}


def _spacing(magnitude: np.ndarray, dtype: str) -> np.ndarray:
    """The ulp of `dtype` at each (float64) magnitude, from the exponent bits (subnormals: the smallest
    normal's ulp): 2 ** (exponent - mantissa bits)."""
    exponent = np.maximum(magnitude, _TINY[dtype]).view(np.int64) >> 52
    return ((exponent - _MANTISSA[dtype]) << 52).view(np.float64)


def _as_float(array: np.ndarray) -> np.ndarray:
    return array.astype(np.float64, copy=False) if array.dtype != np.float64 else array


def _c_ordered(array) -> bool:
    """Its storage order is C order (what stats._chunks yields is then the flat C-order sequence)."""
    return hasattr(array, "chunks") or array.ndim <= 1 or array.flags.c_contiguous


def _paired_chunks(a, b) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
    """Both tensors as matching flat pieces in C order, read a chunk at a time (arrays, memory maps and
    readers.raw.DecodedTensor alike; chunks of different lengths are cut to match)."""
    from ..stats import _chunks
    if _c_ordered(a) and _c_ordered(b):
        first, second = _chunks(a), _chunks(b)
    else:   # a Fortran-ordered tensor: element i must meet element i
        flat_a, flat_b = np.ravel(np.asarray(a), order="C"), np.ravel(np.asarray(b), order="C")
        first = (flat_a[i:i + CHUNK] for i in range(0, flat_a.size, CHUNK))
        second = (flat_b[i:i + CHUNK] for i in range(0, flat_b.size, CHUNK))
    ca = cb = np.empty(0)
    while True:
        fed_a = next(first, None) if ca.size == 0 else ca
        fed_b = next(second, None) if cb.size == 0 else cb
        if fed_a is None or fed_b is None:
            return
        n = min(fed_a.size, fed_b.size)
        yield fed_a[:n], fed_b[:n]
        ca, cb = fed_a[n:], fed_b[n:]


def row_partials(a: np.ndarray, b: np.ndarray, ulp_dtype: Optional[str], scale: np.ndarray) -> dict:
    """The metric kernel, per row of two 2-D float64 matrices (a row: a tensor or a chunk of one; `scale`: each
    row's largest finite |baseline| for the ulp floor). Non-finite values agree only with the same non-finite
    value and count nowhere else. Returns per-row arrays that combine over chunks (max, sum)."""
    both = np.isfinite(a) & np.isfinite(b)
    special = ~both
    if special.any():
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        mismatched = np.count_nonzero(special & ~same, axis=1)
        a, b = np.where(both, a, 0.0), np.where(both, b, 0.0)
    else:
        mismatched = np.zeros(a.shape[0], np.int64)
    diff = np.abs(b - a)
    abs_a = np.abs(a)
    if ulp_dtype is not None:
        magnitude = np.maximum(np.maximum(abs_a, np.abs(b)), (scale * SCALE_FLOOR)[:, None])
        ulps = (diff / _spacing(magnitude, ulp_dtype)).max(axis=1)
    else:
        ulps = diff.max(axis=1)
    # the relative error where the reference is not ~0 (at least SCALE_FLOOR of the tensor's largest |value|): a
    # zero that became 1e-10 is no infinite relative error; a reference all ~0 has none (NaN, shown as "-")
    sized = (abs_a > 0) & (abs_a >= (scale * SCALE_FLOOR)[:, None])
    rel = np.divide(diff, abs_a, out=np.zeros_like(diff), where=sized).max(axis=1)
    rel = np.where(sized.any(axis=1) | (diff.max(axis=1) == 0), rel, math.nan)
    return dict(max_abs=diff.max(axis=1), max_rel=rel, ulps=ulps, ref_max=abs_a.max(axis=1),
                dot=np.einsum("ij,ij->i", a, b),
                norm_a=np.einsum("ij,ij->i", a, a), norm_b=np.einsum("ij,ij->i", b, b), mismatched=mismatched)


def _finish(p: dict, i: int, ulp_dtype: Optional[str], tolerance: float) -> dict:
    """Row i of combined partials -> the metrics of one tensor."""
    norm_a, norm_b = float(p["norm_a"][i]), float(p["norm_b"][i])
    if norm_a == 0.0 and norm_b == 0.0:
        cosine = 1.0
    elif norm_a == 0.0 or norm_b == 0.0:
        cosine = 0.0
    else:
        cosine = max(-1.0, min(1.0, float(p["dot"][i]) / math.sqrt(norm_a * norm_b)))
    mismatched = int(p["mismatched"][i])
    ulps = float(p["ulps"][i])
    limit = tolerance if ulp_dtype is not None else 0.0
    rel = float(p["max_rel"][i])
    return dict(max_abs_error=float(p["max_abs"][i]), max_rel_error=None if math.isnan(rel) else rel, cosine=cosine,
                reference_max=float(p["ref_max"][i]),
                error_ulps=ulps, agree=mismatched == 0 and ulps <= limit, nonfinite_differ=mismatched,
                note=f"{mismatched} non-finite value(s) differ" if mismatched else "")


def _finite_max(values: np.ndarray) -> float:
    finite = np.abs(values[np.isfinite(values)])
    return float(finite.max()) if finite.size else 0.0


def compare_arrays(a: np.ndarray, b: np.ndarray, ulp_dtype: Optional[str], tolerance: float) -> dict:
    """Metrics of target `b` against baseline `a` (same number of elements), a chunk at a time."""
    scale = None
    if a.size > CHUNK:      # the tensor's largest |value| first, for the ulp floor
        scale = max((_finite_max(_as_float(ca)) for ca, _cb in _paired_chunks(a, b)), default=0.0)
    total = None
    for ca, cb in _paired_chunks(a, b):
        fa, fb = _as_float(ca).reshape(1, -1), _as_float(cb).reshape(1, -1)
        if fa.size == 0:
            continue
        part = row_partials(fa, fb, ulp_dtype, np.array([_finite_max(fa) if scale is None else scale]))
        if total is None:
            total = part
        else:
            for key in ("max_abs", "ulps", "ref_max"):
                total[key] = np.maximum(total[key], part[key])
            total["max_rel"] = np.fmax(total["max_rel"], part["max_rel"])      # NaN: no sized element in a chunk
            for key in ("dot", "norm_a", "norm_b", "mismatched"):
                total[key] = total[key] + part[key]
    if total is None:
        return dict(max_abs_error=0.0, max_rel_error=0.0, cosine=1.0, error_ulps=0.0, agree=True, note="")
    return _finish(total, 0, ulp_dtype, tolerance)


def compare_matrices(a: np.ndarray, b: np.ndarray, ulp_dtype: Optional[str], tolerance: float) -> List[Optional[dict]]:
    """compare_arrays() of many small tensors at once: row i of `a` against row i of `b`. Rows equal bit for
    bit in value (a re-run's tensors mostly are) need no arithmetic: their errors are 0, their cosine 1."""
    same = (a == b).all(axis=1) if a.dtype == b.dtype else np.zeros(a.shape[0], bool)
    found: List[Optional[dict]] = [dict(max_abs_error=0.0, max_rel_error=0.0, cosine=1.0, error_ulps=0.0,
                                        agree=True, note="") if s else None for s in same.tolist()]
    rows = np.flatnonzero(~same)
    if rows.size:
        fa, fb = _as_float(a[rows]), _as_float(b[rows])
        finite_a = np.where(np.isfinite(fa), np.abs(fa), 0.0)
        part = row_partials(fa, fb, ulp_dtype, finite_a.max(axis=1) if fa.shape[1] else np.zeros(rows.size))
        for i, row in enumerate(rows.tolist()):
            found[row] = _finish(part, i, ulp_dtype, tolerance)
    return found


def _compare_stats(sa, sb, ulp_dtype: Optional[str], tolerance: float) -> dict:
    """Statistics (TensorStats) of a pair where one side at least has nothing else: their min and max (and whether
    each holds NaN or infinities) within tolerance. The errors are lower bounds of the element errors."""
    pairs = [(x, y) for x, y in ((sa.min, sb.min), (sa.max, sb.max)) if x is not None and y is not None]
    specials_differ = (sa.nan > 0) != (sb.nan > 0) or (sa.posinf > 0) != (sb.posinf > 0) or \
        (sa.neginf > 0) != (sb.neginf > 0)
    if not pairs:
        return dict(agree=None if not specials_differ else False,
                    note="no statistics to compare" if not specials_differ else "non-finite values differ")
    a, b = np.array([p[0] for p in pairs], np.float64), np.array([p[1] for p in pairs], np.float64)
    found = compare_arrays(a, b, ulp_dtype, tolerance)
    found.pop("cosine")
    if specials_differ:       # the counts may be lower bounds: at least one element differs
        differ = sum(abs(getattr(sa, k) - getattr(sb, k)) for k in ("nan", "posinf", "neginf"))
        found.update(agree=False, note="non-finite values differ", nonfinite_differ=max(1, int(differ)))
    return found


# what prefetch() knows of two outputs whose files are byte for byte the same (read, never changed)
_EQUAL = dict(max_abs_error=0.0, max_rel_error=0.0, cosine=1.0, error_ulps=0.0, agree=True, note="")


class Comparer:
    def __init__(self, base_access: TensorAccess, target_access: TensorAccess, tolerance: float):
        self.base = base_access
        self.target = target_access
        self.tolerance = tolerance
        self.compared = 0
        self.statistics_only = 0
        self.known: Dict[tuple, tuple] = {}  # (baseline OpRun.key, slot) -> (metrics, headers) found by prefetch()

    def prefetch(self, pairs) -> None:
        """Compare the small npy outputs of many matched op runs (walk.OpRun pairs) together: each file read by
        readers/npy.py's batch reader (the walk's: one open and one read, the header of the file before taken
        when it is the same), the pairs of one dtype and size stacked as two matrices and compared row by row (the
        same kernel as one tensor at a time). Anything unusual (large, Fortran order, unreadable) is left to
        tensor()."""
        from ..dtypes import canonical
        from ..readers import npy
        groups: Dict[tuple, list] = {}
        known = self.known

        def flush(key):
            members = groups.pop(key)
            a = npy.stack_payloads([m[1] for m in members], members[0][3])
            b = npy.stack_payloads([m[2] for m in members], members[0][4])
            for (token, _a, _b, ha, ht), found in zip(members, compare_matrices(a, b, key[2], self.tolerance),
                                                      strict=True):
                known[token] = (found, ha, ht)

        base_reader, target_reader = npy.SmallReader(), npy.SmallReader()
        same = None     # the pair before: its two headers, sizes and declared dtypes, and its group's key
        for run, target_run in pairs:
            for slot, path, dtype in run.npy_outputs:
                partner = next((t for t in target_run.npy_outputs if t[0] == slot), None)
                if partner is None:
                    continue
                _slot, target_path, target_dtype = partner
                token = (run.key, slot)
                try:
                    blob, ha, whole = base_reader.read(path)
                    if not whole:
                        continue      # a large file: tensor() reads it a chunk at a time
                    target_blob, ht, whole = target_reader.read(target_path)
                except READ_ERRORS:
                    continue          # tensor() reads it again and says what is wrong
                if not whole:
                    continue
                if blob == target_blob:      # the same file content (a re-run's tensors mostly are): no arithmetic
                    known[token] = (_EQUAL, ha, ht)
                    continue
                if same is not None and ha is same[0] and ht is same[1] and len(blob) == same[2] and \
                        len(target_blob) == same[3] and dtype == same[4] and target_dtype == same[5]:
                    key = same[6]
                else:
                    count = math.prod(ha.shape) if ha.shape else 1
                    if ha.fortran or ht.fortran or count != (math.prod(ht.shape) if ht.shape else 1) or \
                            count == 0 or ha.payload_dtype.kind not in "fiub" or \
                            ht.payload_dtype.kind not in "fiub" or \
                            len(blob) < ha.offset + count * ha.payload_dtype.itemsize or \
                            len(target_blob) < ht.offset + count * ht.payload_dtype.itemsize:
                        continue
                    declared = dtype or canonical(ha.header_dtype.name)
                    target_declared = target_dtype or canonical(ht.header_dtype.name)
                    # one stack per header and file size on each side (stack_payloads' rows are one size)
                    key = ((ha, len(blob)), (ht, len(target_blob)), _ulp_dtype(declared, target_declared, True),
                           count)
                    same = (ha, ht, len(blob), len(target_blob), dtype, target_dtype, key)
                members = groups.setdefault(key, [])
                members.append((token, blob, target_blob, ha, ht))
                if len(members) * key[3] * 8 >= BATCH_BYTES:
                    flush(key)
        for key in list(groups):
            flush(key)

    def settled(self, run, target_run) -> Optional[float]:
        """When prefetch() found every output of this op run to agree (and the target has no other output):
        the largest error in ulps, the results taken (counted as compared); else None."""
        if not run.n_outputs or run.n_outputs != target_run.n_outputs or len(run.npy_outputs) != run.n_outputs:
            return None
        run_id, errors = run.key, []
        for slot, _path, _dtype in run.npy_outputs:
            found = self.known.get((run_id, slot))
            if found is None or not found[0]["agree"]:
                return None
            errors.append(found[0]["error_ulps"])
        for slot, _path, _dtype in run.npy_outputs:
            del self.known[(run_id, slot)]
        self.compared += len(errors)
        return max(errors)

    def tensor(self, base: TensorEvent, tgt: TensorEvent, finer: bool, token=None) -> TensorDiff:
        """token: (the baseline OpRun's key, slot) of an output prefetch() may have compared."""
        found = self.known.pop(token, None) if finer and token is not None else None
        if found is not None:
            known, ha, ht = found
            _take_header(base, ha)
            _take_header(tgt, ht)
        diff = TensorDiff(io=base.io, slot=base.slot, baseline_dtype=base.dtype, target_dtype=tgt.dtype,
                          shape=base.shape, target_shape=tgt.shape, baseline_file=base.source,
                          target_file=tgt.source, tolerance_ulps=self.tolerance)
        if found is not None:
            self.compared += 1
            diff.ulp_dtype = _ulp_dtype(base.dtype, tgt.dtype, True)
            for key, value in known.items():
                setattr(diff, key, value)
            return _one_value_has_no_cosine(diff)
        with reading(base.source):
            a = self.base.array(base) if base.stats is None or base.loader or base.source.endswith(".npy") else None
        with reading(tgt.source):
            b = self.target.array(tgt) if tgt.stats is None or tgt.loader or tgt.source.endswith(".npy") else None
        diff.baseline_dtype, diff.target_dtype = base.dtype, tgt.dtype     # array() may have read the header
        diff.shape, diff.target_shape = base.shape, tgt.shape
        diff.ulp_dtype = _ulp_dtype(base.dtype, tgt.dtype, finer)
        if a is None or b is None:
            # a side with statistics only (a statistics dump, msprobe's task statistics) against statistics or a
            # tensor (whose own Max and Min are computed): compared by Max and Min
            sa = base.stats if base.stats is not None or a is None else tensor_stats.compute(a, base.dtype)
            sb = tgt.stats if tgt.stats is not None or b is None else tensor_stats.compute(b, tgt.dtype)
            if sa is not None and sb is not None:
                diff.statistics_only = True
                self.statistics_only += 1
                self.compared += 1
                for key, value in _compare_stats(sa, sb, diff.ulp_dtype, self.tolerance).items():
                    setattr(diff, key, value)
            else:
                diff.note = "unreadable: " + "; ".join(e.note for e in (base, tgt) if e.note) if (
                    base.note or tgt.note) else "no data to compare"
            return diff
        self.compared += 1
        if a.size != b.size:
            diff.agree = False
            diff.note = f"shape differs: {tuple(a.shape)} vs {tuple(b.shape)}"
            return diff
        if a.dtype.kind not in "fciub" or b.dtype.kind not in "fciub":
            diff.note = f"dtype {a.dtype} / {b.dtype} not compared"
            return diff
        for key, value in compare_arrays(a, b, diff.ulp_dtype, self.tolerance).items():
            setattr(diff, key, value)
        return _one_value_has_no_cosine(diff)


def _one_value_has_no_cosine(diff: TensorDiff) -> TensorDiff:
    """A tensor of one element (a scalar: an epsilon, an axis) has no cosine worth the name (it is 1, 0 or -1
    whatever the error): None, shown as "-"."""
    if diff.shape is not None and math.prod(diff.shape) < 2:
        diff.cosine = None
    return diff
