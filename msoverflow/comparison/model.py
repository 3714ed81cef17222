"""The Comparison model at the bottom of comparison/: what `msoverflow compare` found (Comparison, OpDiff,
TensorDiff, UnmatchedOp), its constants and its JSON answer. Imports nothing else of comparison/; renderers and
msoverflow.compare() share it."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ..model import IterationAlias, Source, formatted
from ..report_dict import finite_or_none, graph_id

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
    reference_max: Optional[float] = None  # the baseline's largest finite |value|
    budget_ulps: Optional[float] = None    # the rounding budget (ulps of ulp_dtype) of a lower-precision pair
    budget_share: Optional[float] = None   # the error over that budget (both in the budget's own measure)
    within_precision: bool = False         # differs beyond the tolerance, within the lower dtype's budget

    @property
    def exact(self) -> bool:
        """Compared and equal in every element (the same non-finite values included)."""
        return self.agree is True and self.max_abs_error == 0.0 and not self.nonfinite_differ

    @property
    def normwise_error(self) -> Optional[float]:
        """The largest absolute error over the baseline's largest |value|: a dot product's rounding is relative
        to its terms, not to a result that cancels near zero (what a lower precision's budget is measured in)."""
        if self.max_abs_error is None or self.reference_max is None:
            return None
        if self.reference_max > 0:
            return self.max_abs_error / self.reference_max
        return 0.0 if self.max_abs_error == 0 else None

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
    within_precision_ops: int = 0      # op runs that differ within the lower dtype's rounding budget
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
            "budget_ulps": finite_or_none(t.budget_ulps), "within_precision": t.within_precision,
            "reference_max": finite_or_none(t.reference_max),
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
                    "diverged_ops": c.diverged_ops, "within_precision_ops": c.within_precision_ops,
                    "tensors_compared": c.tensors_compared,
                    "units": [{"rank": r, "coords": c.coords.get(r), "iteration": s} for r, s in c.units],
                    "tolerance_ulps": c.tolerance_ulps, "statistics_only": c.statistics_only},
        "parallel": c.parallel,
        "inconclusive": c.reasons,
        "caveats": c.caveats,
        "warnings": c.warnings,
        "provenance": c.provenance or None,
    }
