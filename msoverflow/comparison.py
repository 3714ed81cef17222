"""Compare two runs (`msoverflow compare`, `msoverflow.compare()`; not named compare.py, which would shadow the
lazy `msoverflow.compare` function): the first operator where a TARGET dump parts from a BASELINE dump.

Both dumps are read by the same walk and readers as `analyze` (layout.Dump.open -> Dump.plan, the selection carried
unexpanded -> one (rank, step) unit at a time -> walk.read_unit_runs, through the reader registry); where an op
lives in the code comes from the same graphs.SavedGraphs.
Ops are matched per (rank, step) by graph, op type, scope path
without the `-opN` number, and occurrence in execution order: task ids, op numbers and timestamps change between
compilations, the scope path and the order do not (a backward op's scope is its forward op's Cell and
`Grad_<Op>`). Ops present on one side only (Casts amp inserts, fused kernels) are listed, never fatal.

Each matched output pair is compared element by element in chunks (memory flat): max absolute error, max relative
error, cosine similarity, and the error in ulps of the finer of the two dtypes. An op whose outputs differ beyond
the tolerance and whose inputs agree (in ulps of the coarser dtype: a value rounded to a lower precision is still
the same input) is where the runs part; one whose input already differs is a propagator (analyze's origin logic).
Statistics-only dumps compare their statistics (min, max) and say that is all they could compare.
"""
from __future__ import annotations

import functools
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Tuple, TypeVar

import numpy as np

from . import stats as tensor_stats
from .errors import READ_ERRORS, UserError, reading
from .evaluate import TensorAccess, _take_header
from .graphs import SavedGraphs
from .layout import Dump, Plan
from .logs import Notes
from .model import IterationAlias, NamedRun, OpExecution, Source, Status, TensorEvent, formatted
from .report_dict import finite_or_none, graph_id
from .rules.knowledge import knowledge
from .scope import cell_of
from .selection import Selection, format_ids, not_in_dump
from .walk import read_unit_runs, split_unread, unread_of

VERDICT_DIVERGED = "diverged"
VERDICT_EQUIVALENT = "equivalent"
VERDICT_INCONCLUSIVE = "inconclusive"

ROLE_ORIGIN = "origin"          # inputs agree, outputs do not: the runs part here
ROLE_PROPAGATOR = "propagator"  # an input already differs
ROLE_RECEIVED = "received"      # a collective whose own inputs agree: the difference came from another rank

DEFAULT_ULPS = 8.0              # tolerance, in ulps of the compared dtype
SCALE_FLOOR = 2.0 ** -10        # an element's ulp is taken at >= this share of the tensor's largest |value|
MIN_MATCHED_SHARE = 0.5         # fewer of the baseline's ops matched than this: inconclusive
MAX_UNMATCHED_LISTED = 200
MAX_SERIES = 4000               # points of the error-along-execution-order plot (sampled evenly beyond)
CHUNK = 1 << 20
BATCH_BYTES = 4 << 20           # small tensors compared together, at most this many bytes (as float64) at a time
_MANTISSA = {"float16": 10, "bfloat16": 7, "float32": 23, "float64": 52}
_OP_NUMBER = re.compile(r"-op\d+$")
Run = TypeVar("Run", bound=NamedRun)     # an OpExecution or a walk.OpRun: match() pairs either
_OP_NUMBER_INNER = re.compile(r"-op\d+(?=[_/])")


@dataclass
class TensorDiff:
    """One matched tensor pair (an input or output slot of a matched op)."""
    io: str
    slot: int
    baseline_dtype: Optional[str]
    target_dtype: Optional[str]
    shape: Optional[Tuple[int, ...]]
    target_shape: Optional[Tuple[int, ...]]
    baseline_file: str
    target_file: str
    ulp_dtype: Optional[str] = None        # the dtype whose ulps measure the error
    max_abs_error: Optional[float] = None
    max_rel_error: Optional[float] = None
    cosine: Optional[float] = None
    error_ulps: Optional[float] = None
    tolerance_ulps: float = DEFAULT_ULPS
    agree: Optional[bool] = None           # None: could not be compared (note says why)
    statistics_only: bool = False          # only min/max were compared
    note: str = ""
    nonfinite_differ: int = 0              # elements whose inf/NaN the other side does not hold

    @property
    def exact(self) -> bool:
        """Compared and equal in every element (the same non-finite values included)."""
        return self.agree is True and self.max_abs_error == 0.0 and not self.nonfinite_differ

    @property
    def scaled_error(self) -> Optional[float]:
        """The error for the values' size, comparable across dtypes: the ulps times the ulp dtype's relative
        spacing (about |error| / max(|value|, 2^-10 of the tensor's largest)); the relative error for a tensor
        compared exactly (integers, bool)."""
        if self.error_ulps is None:
            return None
        if self.ulp_dtype in _MANTISSA:
            return self.error_ulps * 2.0 ** -_MANTISSA[self.ulp_dtype]
        return self.max_rel_error


@dataclass
class OpDiff(IterationAlias):
    """One op run matched in both dumps."""
    rank: int
    step: int
    graph: str
    position: int                 # index in the baseline's execution order of this (rank, step)
    op_type: str
    op_name: str                  # baseline's name
    target_op_name: str
    target_op_type: str
    role: Optional[str] = None    # ROLE_* when the outputs differ; None when they agree
    inputs: List[TensorDiff] = field(default_factory=list)
    outputs: List[TensorDiff] = field(default_factory=list)
    cell: Optional[str] = None
    cell_type: Optional[str] = None
    full_name: Optional[str] = None
    source: Optional[Source] = None
    dtype_change: str = ""        # "target computed Softmax in float16 (baseline float32)"
    note: str = ""
    coords: Optional[Dict[str, int]] = None   # the rank's parallel coordinates when the layout is known

    @property
    def error_ulps(self) -> Optional[float]:
        values = [t.error_ulps for t in self.outputs if t.error_ulps is not None]
        return max(values) if values else None

    def _largest(self, name: str) -> Optional[float]:
        values = [getattr(t, name) for t in self.outputs if getattr(t, name) is not None]
        return max(values) if values else None

    @property
    def max_abs_error(self) -> Optional[float]:
        """The largest over the outputs (so are max_rel_error and scaled_error)."""
        return self._largest("max_abs_error")

    @property
    def max_rel_error(self) -> Optional[float]:
        return self._largest("max_rel_error")

    @property
    def scaled_error(self) -> Optional[float]:
        return self._largest("scaled_error")

    @property
    def cosine(self) -> Optional[float]:
        """The lowest over the outputs that have one (a tensor of one element has none)."""
        values = [t.cosine for t in self.outputs if t.cosine is not None]
        return min(values) if values else None

    @property
    def ulp_dtype(self) -> Optional[str]:
        """The dtype whose ulps measure error_ulps (the output with the largest error)."""
        measured = [t for t in self.outputs if t.error_ulps is not None]
        return max(measured, key=lambda t: t.error_ulps or 0.0).ulp_dtype if measured else None

    @property
    def nonfinite_differ(self) -> int:
        return sum(t.nonfinite_differ for t in self.outputs)

    def severity(self) -> Tuple[bool, float, float]:
        """How the largest differences are ranked (highest first): an op whose outputs' inf/NaN differ, then the
        error for the values' size (ulps alone would rank a float16 tensor's error with a float32 one's), then
        the absolute error."""
        return bool(self.nonfinite_differ), self.scaled_error or 0.0, self.max_abs_error or 0.0


@dataclass
class UnmatchedOp(IterationAlias):
    side: str                     # "baseline" | "target"
    rank: int
    step: int
    op_type: str
    op_name: str
    coords: Optional[Dict[str, int]] = None


@dataclass
class Comparison:
    """What `msoverflow compare` found; renderers and msoverflow.compare() share it."""
    baseline: str
    target: str
    verdict: str
    first_divergence: Optional[OpDiff]
    worst: List[OpDiff]
    unmatched: List[UnmatchedOp]
    unmatched_counts: Dict[str, int]
    matched_ops: int
    baseline_ops: int
    target_ops: int
    tensors_compared: int
    units: List[Tuple[int, int]]                 # (rank, step) compared
    reasons: List[str] = field(default_factory=list)     # why inconclusive
    caveats: List[str] = field(default_factory=list)     # what the comparison could not show
    warnings: List[str] = field(default_factory=list)
    tolerance_ulps: float = DEFAULT_ULPS
    statistics_only: bool = False
    # (rank, step, position, cell, max output error in ulps or None, role) along each unit's order, for plots
    series: List[Tuple[int, int, int, str, Optional[float], Optional[str]]] = field(default_factory=list)
    diverged_ops: int = 0
    parallel: Optional[Dict[str, object]] = None          # the layout (parallel_layout.ParallelLayout.to_dict())
    coords: Dict[int, Dict[str, int]] = field(default_factory=dict)   # rank -> its coordinates (known layout)
    provenance: Dict[str, object] = field(default_factory=dict)   # msoverflow version, command, time, host (api)
    # every matched op run whose outputs differ, in the order compared (frame(); not in the JSON answer)
    differences: List[OpDiff] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict:
        """The JSON answer (schema msoverflow/schema/compare.schema.json) as a dict."""
        return comparison_dict(self)

    def frame(self):
        """Every matched op run whose outputs differ, as a pandas DataFrame ordered by rank, step and position in
        the baseline's execution order: rank, step, position, graph, op_type, op_name, role (origin | received |
        propagator), first (the first divergence), cell, cell_type, max_abs_error, max_rel_error, cosine (None
        for a single value), error_ulps, ulp_dtype, nonfinite_differ, dtype_change, note. Empty (with these
        columns) when nothing differs."""
        import pandas as pd
        first = self.first_divergence
        rows = [dict(rank=op.rank, step=op.step, position=op.position, graph=op.graph, op_type=op.op_type,
                     op_name=op.op_name, role=op.role, first=op is first, cell=op.cell, cell_type=op.cell_type,
                     max_abs_error=op.max_abs_error, max_rel_error=op.max_rel_error, cosine=op.cosine,
                     error_ulps=op.error_ulps, ulp_dtype=op.ulp_dtype, nonfinite_differ=op.nonfinite_differ,
                     dtype_change=op.dtype_change, note=op.note)
                for op in sorted(self.differences, key=lambda op: (op.rank, op.step, op.position))]
        return pd.DataFrame(rows, columns=list(_FRAME_COLUMNS)).astype(_FRAME_COLUMNS)

    def __repr__(self) -> str:
        """One line: the verdict, how much differs, the two dumps (the formatter render/notebook.py registers)."""
        return formatted(self, "repr") or f"<Comparison {self.baseline} -> {self.target}>"

    def _repr_html_(self) -> str:
        """A notebook shows the verdict card, not the object's fields."""
        return formatted(self, "html") or ""


_FRAME_COLUMNS = {"rank": "int64", "step": "int64", "position": "int64", "graph": "object", "op_type": "object",
                  "op_name": "object", "role": "object", "first": "bool", "cell": "object", "cell_type": "object",
                  "max_abs_error": "float64", "max_rel_error": "float64", "cosine": "float64",
                  "error_ulps": "float64", "ulp_dtype": "object", "nonfinite_differ": "int64",
                  "dtype_change": "object", "note": "object"}


# ---- the JSON answer (msoverflow/schema/compare.schema.json, schema 1: `iteration` for steps) ------------------

SCHEMA_VERSION = 1


def _tensor_dict(t: TensorDiff) -> dict:
    return {"io": t.io, "slot": t.slot, "baseline_dtype": t.baseline_dtype, "target_dtype": t.target_dtype,
            "shape": list(t.shape) if t.shape is not None else None,
            "target_shape": list(t.target_shape) if t.target_shape is not None else None,
            "max_abs_error": finite_or_none(t.max_abs_error), "max_rel_error": finite_or_none(t.max_rel_error),
            "max_rel_error_infinite": t.max_rel_error == math.inf, "cosine": finite_or_none(t.cosine),
            "error_ulps": finite_or_none(t.error_ulps), "ulp_dtype": t.ulp_dtype, "tolerance_ulps": t.tolerance_ulps,
            "agree": t.agree, "statistics_only": t.statistics_only, "note": t.note,
            "nonfinite_differ": t.nonfinite_differ,
            "baseline_file": t.baseline_file, "target_file": t.target_file}


def op_dict(op: OpDiff) -> dict:
    return {"rank": op.rank, "coords": op.coords, "iteration": op.step, "graph": graph_id(op.graph),
            "position": op.position,
            "op_type": op.op_type, "op_name": op.op_name, "target_op_name": op.target_op_name,
            "full_name": op.full_name, "role": op.role, "cell": op.cell, "cell_type": op.cell_type,
            "source": ({"file": op.source.file, "line": op.source.line, "code": op.source.code}
                       if op.source else None),
            "dtype_change": op.dtype_change or None, "error_ulps": finite_or_none(op.error_ulps), "note": op.note,
            "inputs": [_tensor_dict(t) for t in op.inputs], "outputs": [_tensor_dict(t) for t in op.outputs]}


def comparison_dict(c: Comparison) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "verdict": c.verdict,
        "baseline": c.baseline,
        "target": c.target,
        "first_divergence": op_dict(c.first_divergence) if c.first_divergence else None,
        "worst": [op_dict(op) for op in c.worst],
        "unmatched": {"baseline": c.unmatched_counts.get("baseline", 0), "target": c.unmatched_counts.get("target", 0),
                      "ops": [{"side": u.side, "rank": u.rank, "coords": u.coords, "iteration": u.step,
                               "op_type": u.op_type, "op_name": u.op_name} for u in c.unmatched]},
        "summary": {"matched_ops": c.matched_ops, "baseline_ops": c.baseline_ops, "target_ops": c.target_ops,
                    "diverged_ops": c.diverged_ops, "tensors_compared": c.tensors_compared,
                    "units": [{"rank": r, "coords": c.coords.get(r), "iteration": s} for r, s in c.units],
                    "tolerance_ulps": c.tolerance_ulps, "statistics_only": c.statistics_only},
        "parallel": c.parallel,
        "inconclusive": c.reasons,
        "caveats": c.caveats,
        "warnings": c.warnings,
        "provenance": c.provenance or None,
    }


# ---- reading: the one place that turns a dump into (rank, step) -> ordered op runs -----------------------------

def _side(path: str, ranks: Optional[Selection], steps: Optional[Selection], warn) -> Tuple[Plan, Dict[int, str]]:
    """One dump opened once (analyze's Dump) and its plan of (rank, step) units for the selection, never expanded;
    and every rank of the dump (selected or not) -> its rank_N directory or "" (the world and the graphs the
    parallel layout is read from). A selection the dump has nothing of is a usage error saying what it holds."""
    dump = Dump.open(path, warn)
    if not dump.dirs:
        raise UserError(f"{path}: no dump files found (expected rank_*/<net>/<graph>/<iteration>/ with .npy, "
                        "binary dump, statistic.csv or msprobe dump.json files)")
    roots: Dict[int, str] = {}
    for d in sorted(dump.dirs, key=lambda d: (d.rank, str(d.graph))):
        if not roots.get(d.rank):
            roots[d.rank] = d.rank_root or ""
    plan = dump.plan(ranks, steps)
    if not plan.units:
        raise not_in_dump(path, plan.ranks, plan.steps, dump.dirs)
    return plan, roots


# ---- matching ----------------------------------------------------------------------------------------------------

def match_key(ex: NamedRun) -> Tuple[str, str, str]:
    """What stays the same across compilations: graph, op type and the scope path without op numbers."""
    return ex.graph, ex.op_type, _without_op_numbers(ex.op_name)


@functools.lru_cache(maxsize=1 << 16)
def _without_op_numbers(op_name: str) -> str:
    """The same names recur on every rank and step."""
    return _OP_NUMBER_INNER.sub("", _OP_NUMBER.sub("", op_name))


def _keys(runs: List[Run], graphs) -> List[tuple]:
    """match_key() of each run; a backward op (`Gradients/...`) whose saved graph names its forward op is keyed
    by that forward op too (its key and occurrence), so backward ops pair through their forward op even when
    the backward runs in another order."""
    keys: List[tuple] = [match_key(ex) for ex in runs]
    if graphs is None:
        return keys
    from .names import scope_to_file_name
    seen: Counter = Counter()
    forward_of_name: Dict[str, tuple] = {}
    for ex, key in zip(runs, keys, strict=True):
        if not ex.op_name.startswith("Gradients"):
            forward_of_name.setdefault(ex.op_name, key + (seen[key],))
            seen[key] += 1
    for i, ex in enumerate(runs):
        if ex.op_name.startswith("Gradients"):
            node, _graph = graphs.node(ex)
            if node is not None and node.forward_name:
                name = scope_to_file_name(node.forward_name)
                if name in forward_of_name:
                    keys[i] += ("of",) + forward_of_name[name]
                elif "/" in node.forward_name:    # a scoped forward op that was not dumped
                    keys[i] += ("of", _OP_NUMBER.sub("", name))
                # else an internal id ("Reshape_13522", renumbered by every compilation): no help
    return keys


def match(baseline: List[Run], target: List[Run], graphs=(None, None)):
    """[(baseline run, target run)] in the baseline's order, and the runs of each side that found no partner:
    the n-th run of a key on one side pairs with the n-th run of the same key on the other. graphs: the two
    sides' saved graphs (graphs.SavedGraphs) when both have them: backward ops then pair through their
    forward op."""
    use = graphs if all(g is not None for g in graphs) else (None, None)
    base_keys, target_keys = _keys(baseline, use[0]), _keys(target, use[1])
    by_key: Dict[tuple, List[Run]] = {}
    for ex, key in zip(target, target_keys, strict=True):
        by_key.setdefault(key, []).append(ex)
    taken: Counter = Counter()
    pairs, only_baseline = [], []
    for ex, key in zip(baseline, base_keys, strict=True):
        candidates = by_key.get(key, [])
        n = taken[key]
        if n < len(candidates):
            pairs.append((ex, candidates[n]))
            taken[key] += 1
        else:
            only_baseline.append(ex)
    only_target = [ex for key, exs in by_key.items() for ex in exs[taken[key]:]]
    only_target.sort(key=lambda ex: (ex.time, ex.order if ex.order is not None else 1 << 30))
    return pairs, only_baseline, only_target


# ---- metrics -----------------------------------------------------------------------------------------------------

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
    from .stats import _chunks
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
    nonzero = abs_a > 0
    rel = np.divide(diff, abs_a, out=np.zeros_like(diff), where=nonzero).max(axis=1)
    rel = np.where((diff * ~nonzero).max(axis=1) > 0, math.inf, rel)   # a zero that became non-zero
    return dict(max_abs=diff.max(axis=1), max_rel=rel, ulps=ulps, dot=np.einsum("ij,ij->i", a, b),
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
    return dict(max_abs_error=float(p["max_abs"][i]), max_rel_error=float(p["max_rel"][i]), cosine=cosine,
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
            for key in ("max_abs", "max_rel", "ulps"):
                total[key] = np.maximum(total[key], part[key])
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


class _Comparer:
    def __init__(self, base_access: TensorAccess, target_access: TensorAccess, tolerance: float):
        self.base = base_access
        self.target = target_access
        self.tolerance = tolerance
        self.compared = 0
        self.statistics_only = 0
        self.known: Dict[tuple, tuple] = {}  # (id(baseline OpRun), slot) -> (metrics, headers) found by prefetch()

    def prefetch(self, pairs) -> None:
        """Compare the small npy outputs of many matched op runs (walk.OpRun pairs) together: each file read with
        one os.read, the pairs of one dtype and size stacked as two matrices and compared row by row (the same
        kernel as one tensor at a time). Anything unusual (large, Fortran order, unreadable) is left to tensor()."""
        from .dtypes import canonical
        from .readers import npy
        groups: Dict[tuple, list] = {}

        def flush(key):
            members = groups.pop(key)
            a = np.stack([np.frombuffer(m[1], key[0], key[2], m[3].offset) for m in members])
            b = np.stack([np.frombuffer(m[2], key[1], key[2], m[4].offset) for m in members])
            for (token, _a, _b, ha, ht), found in zip(members, compare_matrices(a, b, key[3], self.tolerance), strict=True):
                self.known[token] = (found, ha, ht)

        for run, target_run in pairs:
            target_outputs = {slot: (path, dtype) for slot, path, dtype in target_run.npy_outputs}
            for slot, path, dtype in run.npy_outputs:
                if slot not in target_outputs:
                    continue
                target_path, target_dtype = target_outputs[slot]
                token = (id(run), slot)
                try:
                    blob, whole = npy.read_start(path)
                    target_blob, target_whole = npy.read_start(target_path) if whole else (b"", False)
                    if not (whole and target_whole):
                        continue
                    ha, ht = npy.header_of_bytes(path, blob), npy.header_of_bytes(target_path, target_blob)
                except READ_ERRORS:
                    continue          # tensor() reads it again and says what is wrong
                if blob == target_blob:      # the same file content (a re-run's tensors mostly are): no arithmetic
                    self.known[token] = (dict(max_abs_error=0.0, max_rel_error=0.0, cosine=1.0, error_ulps=0.0,
                                              agree=True, note=""), ha, ht)
                    continue
                count = math.prod(ha.shape) if ha.shape else 1
                if ha.fortran or ht.fortran or count != (math.prod(ht.shape) if ht.shape else 1) or count == 0 or \
                        ha.payload_dtype.kind not in "fiub" or ht.payload_dtype.kind not in "fiub":
                    continue
                declared = dtype or canonical(ha.header_dtype.name)
                target_declared = target_dtype or canonical(ht.header_dtype.name)
                key = (ha.payload_dtype, ht.payload_dtype, count, _ulp_dtype(declared, target_declared, True))
                groups.setdefault(key, []).append((token, blob, target_blob, ha, ht))
                if len(groups[key]) * count * 8 >= BATCH_BYTES:
                    flush(key)
        for key in list(groups):
            flush(key)

    def settled(self, run, target_run) -> Optional[float]:
        """When prefetch() found every output of this op run to agree (and the target has no other output):
        the largest error in ulps, the results taken (counted as compared); else None."""
        if not run.n_outputs or run.n_outputs != target_run.n_outputs or len(run.npy_outputs) != run.n_outputs:
            return None
        run_id, errors = id(run), []
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
        """token: (id of the baseline's OpRun, slot) of an output prefetch() may have compared."""
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


# ---- the walk ----------------------------------------------------------------------------------------------------

def compare(baseline: str, target: str, *, ranks: Optional[Selection] = None, steps: Optional[Selection] = None,
            tolerance_ulps: float = DEFAULT_ULPS, top: int = 10, warn: Optional[Callable[[str], None]] = None,
            parallel=None) -> Comparison:
    """Compare two dumps; see the module docstring. ranks/steps: only these (a Selection, kept as ranges all the way
    to the plan; None: all). parallel: the layout as `--parallel` takes it (text or a parallel_layout.ParallelSpec;
    None: a YAML beside the baseline, else inferred pipeline stages, else unknown)."""
    note = Notes(warn)
    if os.path.realpath(baseline) == os.path.realpath(target):
        note("baseline and target are the same directory")
    base_plan, base_roots = _side(baseline, ranks, steps, note)
    target_plan, target_roots = _side(target, ranks, steps, note)
    base_units = {(u.rank, u.step): u for u in base_plan.units}
    target_units = {(u.rank, u.step): u for u in target_plan.units}
    layout = _layout(parallel, baseline, base_roots, target_roots, note)
    coords_of = (lambda rank: layout.coords(rank)) if layout is not None else (lambda rank: None)
    comparer = _Comparer(TensorAccess(note), TensorAccess(note), tolerance_ulps)
    reasons: List[str] = []
    unmatched: List[UnmatchedOp] = []
    counts = {"baseline": 0, "target": 0}
    diverged: List[OpDiff] = []
    series: List[tuple] = []
    matched = baseline_ops = target_ops = 0
    units = sorted(set(base_units) & set(target_units))
    different = _different_jobs(base_units, target_units)     # the runs are not the same model or job: why
    shapes_differ: List[Tuple[OpDiff, TensorDiff]] = []
    orders: Dict[Tuple[int, int], int] = {}
    base_caches: Dict[tuple, SavedGraphs] = {}
    target_caches: Dict[tuple, SavedGraphs] = {}
    read_of: Dict[str, list] = {"baseline": [], "target": []}   # (UnitRead, runs) of each compared unit
    for rank, step in units:
        base_runs, base_index = read_unit_runs(base_units[(rank, step)], note)
        target_runs, target_index = read_unit_runs(target_units[(rank, step)], note)
        read_of["baseline"].append((base_index, base_runs))
        read_of["target"].append((target_index, target_runs))
        baseline_ops += len(base_runs)
        target_ops += len(target_runs)
        orders[(rank, step)] = max(1, len(base_runs))
        base_graphs = _graphs_of(base_caches, rank, base_index, note)
        target_graphs = _graphs_of(target_caches, rank, target_index, note)
        has_graph = [any(g.node(ex)[1] is not None for ex in runs[:1]) if runs else False
                     for g, runs in ((base_graphs, base_runs), (target_graphs, target_runs))]
        pairs, only_base, only_target = match(base_runs, target_runs, (base_graphs, target_graphs)
                                              if all(has_graph) else (None, None))
        matched += len(pairs)
        for side, runs in (("baseline", only_base), ("target", only_target)):
            counts[side] += len(runs)
            for ex in runs:
                if len(unmatched) < MAX_UNMATCHED_LISTED:
                    unmatched.append(UnmatchedOp(side, rank, step, ex.op_type, ex.op_name, coords_of(rank)))
        graphs = base_graphs
        comparer.prefetch(pairs)
        position_of = {id(run): i for i, run in enumerate(base_runs)}
        error: Optional[float]
        for run, target_run in pairs:
            settled = comparer.settled(run, target_run)
            if settled is not None:      # every output already found to agree: nothing more to ask
                error, role, cell = settled, None, None
            else:
                ex = run.execution()
                op = _compare_op(ex, target_run.execution(), position_of[id(run)], comparer, graphs, id(run))
                if op.role is not None:
                    _describe(op, ex, graphs)
                    op.coords = coords_of(rank)
                    diverged.append(op)
                    shapes_differ += [(op, t) for t in op.outputs if t.note.startswith("shape differs")][:1]
                error, role, cell = op.error_ulps, op.role, op.cell
            if len(series) < 50 * MAX_SERIES:
                series.append((rank, step, position_of[id(run)], cell or _cell_name(run.op_name), error, role))
    diverged_ops = len(diverged)
    first = _first(diverged, orders)
    if first is not None and first.role == ROLE_PROPAGATOR:
        first.note = ("its input already differs and no matched op before it parts: the difference comes from "
                      "an op present on one side only, a step or rank not compared, or the data")
    worst = sorted((op for op in diverged if op.error_ulps is not None or op.nonfinite_differ),
                   key=OpDiff.severity, reverse=True)[:top]
    caveats = []
    if comparer.statistics_only:
        caveats.append(f"{comparer.statistics_only} tensor(s) were compared by their statistics only (Max, Min): "
                       "the errors shown are lower bounds, and values that differ inside the same range are not "
                       "visible")
    reasons += _share_reasons(matched, baseline_ops, target_ops, different)
    if shapes_differ:
        op, t = shapes_differ[0]
        different.append(f"the op runs do not pair up as one model's: {len(shapes_differ)} matched op run(s) give "
                         f"outputs of different shapes (first: {op.op_type} {op.op_name} output {t.slot}, "
                         f"{_shape_text(t.shape)} against {_shape_text(t.target_shape)}): different models or "
                         "batch shapes, or ops paired wrongly")
    reasons += different
    if not units:
        reasons.append("no (rank, step) is in both dumps")
    elif comparer.compared == 0:
        reasons.append("no tensor could be compared (no data or statistics in both dumps)")
    unread = 0
    for side, plan in (("baseline", base_plan), ("target", target_plan)):
        reasons.extend(_side_gaps(side, plan, read_of[side], note))
        unread += len(_unread(read_of[side]))
    unread = max(unread, comparer.base.unreadable + comparer.target.unreadable)
    if unread:
        reasons.append(f"{unread} tensor file(s) could not be read")
    if different:
        # a difference between two different models or jobs is no divergence: none is named
        verdict, first, worst = VERDICT_INCONCLUSIVE, None, []
    elif first is not None:
        verdict = VERDICT_DIVERGED
    elif reasons:
        verdict = VERDICT_INCONCLUSIVE
    elif comparer.statistics_only == comparer.compared:
        verdict = VERDICT_INCONCLUSIVE
        reasons.append("only statistics could be compared (Max and Min; a dump holds statistics only): they agree, "
                       "but element values could not be compared")
    else:
        verdict = VERDICT_EQUIVALENT
    return Comparison(baseline=os.path.abspath(baseline), target=os.path.abspath(target), verdict=verdict,
                      first_divergence=first, worst=worst, unmatched=unmatched, unmatched_counts=counts,
                      matched_ops=matched, baseline_ops=baseline_ops, target_ops=target_ops,
                      tensors_compared=comparer.compared, units=units, reasons=reasons, caveats=caveats,
                      warnings=list(note), tolerance_ulps=tolerance_ulps,
                      statistics_only=bool(comparer.compared) and comparer.statistics_only == comparer.compared,
                      series=_sample(series, MAX_SERIES), diverged_ops=diverged_ops, differences=diverged,
                      parallel=layout.to_dict() if layout is not None else None,
                      coords={rank: found for rank in sorted({r for r, _s in units}) if (found := coords_of(rank))})


def _unread(reads) -> Dict[str, Status]:
    """walk.unread_of over one side's compared units: the files its readers could not read and the tensors whose
    bytes could not be read when compared (analyze's one rule of "read")."""
    found: Dict[str, Status] = {}
    for index, runs in reads:
        found.update(unread_of([], (e for run in runs for e in run.tensors()), index.unread))
    return found


def _side_gaps(side: str, plan: Plan, reads, warn) -> List[str]:
    """analyze's completeness check (completeness.check: every step against the other steps of its graph and the
    other ranks, files cut short or empty) on one side: a side that is cut is never equivalent."""
    from . import completeness
    _unread_files, cut = split_unread(_unread(reads))
    incomplete = completeness.check(plan.dirs, cut=cut, warn=warn)
    return [f"the {side} is incomplete: {line}" for line in completeness.reasons(incomplete)]


def _share_reasons(matched: int, baseline_ops: int, target_ops: int, different: List[str]) -> List[str]:
    """The matched share, counted against both sides. One side all matched inside a much larger other is a dump
    filtered by kernel lists (or cut): a reason, not a verdict on the models. Otherwise few matches mean the runs
    are not the same model: added to `different` (then no divergence is named)."""
    larger, smaller = max(baseline_ops, target_ops), min(baseline_ops, target_ops)
    if not larger or matched / larger >= MIN_MATCHED_SHARE:
        return []
    big = "baseline" if baseline_ops >= target_ops else "target"
    if matched == smaller:
        return [f"only {matched} of the {big}'s {larger} op runs matched an op run of the other side, which holds "
                f"{smaller}, all matched (a dump filtered by kernel lists, or cut short)"]
    different.insert(0, f"the runs are not the same model: {matched} of {larger} op runs matched "
                        f"({baseline_ops} in the baseline, {target_ops} in the target; runs of one model match "
                        f"at least {MIN_MATCHED_SHARE:.0%})")
    return []


def _different_jobs(base_units, target_units) -> List[str]:
    """Why two runs are not the same job, from their (rank, step)s: different ranks, different steps."""
    found = []
    for what, of in (("ranks", lambda units: {r for r, _s in units}), ("steps", lambda units: {s for _r, s in units})):
        mine, theirs = of(base_units), of(target_units)
        if mine != theirs:
            only = [f"{what[:-1]} {format_ids(a - b, 8)} in the {side} only" for side, a, b in
                    (("baseline", mine, theirs), ("target", theirs, mine)) if a - b]
            found.append(f"the runs are not the same job: the baseline holds {what} {format_ids(mine, 8)}, the "
                         f"target {what} {format_ids(theirs, 8)} ({'; '.join(only)})")
    if not found:
        for side, mine, other in (("baseline", base_units, target_units), ("target", target_units, base_units)):
            only = sorted(set(mine) - set(other))
            if only:
                found.append(f"the runs are not the same job: {len(only)} (rank, step)(s) are in the {side} only "
                             f"(first: rank {only[0][0]} step {only[0][1]})")
    return found


def _shape_text(shape) -> str:
    return "x".join(map(str, shape)) if shape else "scalar" if shape == () else "unknown"


def _layout(parallel, baseline: str, base_roots: Dict[int, str], target_roots: Dict[int, str], warn):
    """The parallel layout of the compared ranks (parallel_layout.resolve, as analyze labels its ranks): the two
    runs are the same job, so the baseline's files and graphs place them; the world size counts both sides."""
    from .parallel_layout import parse_spec, resolve
    spec = parse_spec(parallel) if isinstance(parallel, str) else parallel
    return resolve(spec, baseline, sorted(set(base_roots) | set(target_roots)),
                   {rank: root for rank, root in base_roots.items() if root}, warn)


def _graphs_of(caches: Dict[tuple, SavedGraphs], rank: int, read, warn) -> SavedGraphs:
    """The saved graphs of one side for this unit (`read`: walk.UnitRead): one SavedGraphs per rank and set of
    graphs, so a rank's .ir is parsed once for all its steps; graphs a reader built from the unit itself (msprobe)
    get one of their own."""
    if read.graphs:
        return SavedGraphs(read.graphs, read.rank_roots, warn)
    key = (rank, tuple(sorted(read.rank_roots.items())))    # steps that hold the same graphs share one
    if key not in caches:
        caches[key] = SavedGraphs(read.graphs, read.rank_roots, warn)
    return caches[key]


def _sample(items: list, limit: int) -> list:
    if len(items) <= limit:
        return items
    step = (len(items) - 1) / (limit - 1)
    return [items[round(i * step)] for i in range(limit)]


def _compare_op(ex: OpExecution, tx: OpExecution, position: int, comparer: _Comparer, graphs,
                run_id: int) -> OpDiff:
    op = OpDiff(rank=ex.rank, step=ex.step, graph=ex.graph, position=position, op_type=ex.op_type,
                op_name=ex.op_name, target_op_name=tx.op_name, target_op_type=tx.op_type)
    target_outputs = {t.slot: t for t in tx.outputs}
    op.outputs = [comparer.tensor(e, target_outputs[e.slot], finer=True, token=(run_id, e.slot)) for e in ex.outputs
                  if e.slot in target_outputs]
    if all(t.agree is not False for t in op.outputs):
        return op
    target_inputs = {t.slot: t for t in tx.inputs}
    op.inputs = [comparer.tensor(e, target_inputs[e.slot], finer=False) for e in ex.inputs
                 if e.slot in target_inputs]
    node, _graph = graphs.node(ex)
    producers = node.inputs if node is not None else []
    differing = [t for t in op.inputs if not t.agree]
    # A constant input of the graph (an attribute passed as a tensor, like LayerNorm's epsilon) that differs was
    # changed in this op's call, not made by an earlier op: the runs part here.
    constants = [t for t in differing if t.slot < len(producers) and producers[t.slot] == "const"]
    complete = len(op.inputs) == len(ex.inputs) == len(tx.inputs)
    if ex.is_parameter:
        op.role = ROLE_PROPAGATOR
        op.note = "a parameter's value: it differs because of what changed it (the step's update) or its start"
    elif complete and len(constants) == len(differing):
        op.role = ROLE_RECEIVED if (knowledge().is_collective(ex.op_type) and not constants) else ROLE_ORIGIN
        if constants:
            op.note = ", ".join(f"input {t.slot} (a constant in the graph) differs" for t in constants) + \
                ": an argument of this call changed"
    else:
        op.role = ROLE_PROPAGATOR
        if not ex.inputs:
            op.note = "the baseline dump holds no input of this op: whether its inputs agree is unknown"
        elif differing:
            op.note = "; ".join(("input {} differs" if t.agree is False else "input {} could not be compared: "
                                 + (t.note or "no data")).format(t.slot)
                                + (f" ({_producer_text(producers[t.slot])})" if t.slot < len(producers) else "")
                                for t in differing[:4])
    changed = [t for t in op.outputs if t.baseline_dtype != t.target_dtype and t.target_dtype]
    if changed:
        t = changed[0]
        op.dtype_change = f"target computed {ex.op_type} in {t.target_dtype} (baseline {t.baseline_dtype})"
    return op


def _producer_text(producer: str) -> str:
    if producer.startswith("param:"):
        return f"parameter {producer[len('param:'):]}"
    return "a constant" if producer == "const" else f"made by {producer}"


def _first(diverged: List[OpDiff], orders: Dict[Tuple[int, int], int]) -> Optional[OpDiff]:
    """By step; an op that parts by itself before a collective that received the difference, before a
    propagator; then how far through its own (rank, step) it ran (clocks of two ranks are never compared)."""
    rank_of_role = {ROLE_ORIGIN: 0, ROLE_RECEIVED: 1, ROLE_PROPAGATOR: 2}
    if not diverged:
        return None

    def order(op: OpDiff):
        assert op.role is not None          # a diverged op has a role
        return op.step, rank_of_role[op.role], op.position / orders[(op.rank, op.step)], op.rank
    return min(diverged, key=order)


@functools.lru_cache(maxsize=1 << 16)
def _cell_name(op_name: str) -> str:
    """The Cell of a file-name op name (the same names recur on every rank and step)."""
    cell, _ = cell_of(op_name, from_file_name=True)
    return cell or ""


def _describe(op: OpDiff, ex: OpExecution, graphs: SavedGraphs) -> None:
    """Cell, Cell type and source line from the saved graph (the forward op's line for a backward op)."""
    place = graphs.place(ex)
    op.full_name, op.cell, op.cell_type, op.source = place.full_name, place.cell, place.cell_type, place.source
