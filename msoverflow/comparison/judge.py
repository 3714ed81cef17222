"""Judge each pair: does the op's output differ beyond what its dtype and its inputs explain; origin, received or
propagator; the first divergence."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ..graphs import SavedGraphs
from ..model import OpExecution
from ..rules.knowledge import knowledge
from ..scope import cell_of
from .metrics import Comparer
from .model import (
    _MANTISSA,
    MAX_SERIES,
    MAX_UNMATCHED_LISTED,
    ROLE_ORIGIN,
    ROLE_PROPAGATOR,
    ROLE_RECEIVED,
    OpDiff,
    TensorDiff,
    UnmatchedOp,
)


def _compare_op(ex: OpExecution, tx: OpExecution, position: int, comparer: Comparer, graphs,
                run_id: int, budget: Optional[str] = None, other_kernels: bool = False) -> OpDiff:
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
    if any(t.note.startswith("shape differs") for t in op.outputs):
        return op                    # not one op's two runs: pair_gaps() makes it a gap
    if _within_precision(op, comparer.tolerance, run_lower=budget, other_kernels=other_kernels):
        return op
    node, _graph = graphs.node(ex)
    producers = node.inputs if node is not None else []
    differing = [t for t in op.inputs if not t.agree]
    # A constant input of the graph (an attribute passed as a tensor, like LayerNorm's epsilon) that differs was
    # changed in this op's call, not made by an earlier op: the runs part here.
    constants = [t for t in differing if t.slot < len(producers) and producers[t.slot] == "const"]
    # every input both sides record was compared (across modes an API call may not record an attribute the
    # graph kernel takes as an input)
    complete = len(op.inputs) == len(ex.inputs) == len(tx.inputs) or (
        0 < len(op.inputs) == min(len(ex.inputs), len(tx.inputs)) and ex.graph != tx.graph)
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


@functools.lru_cache(maxsize=1 << 16)
def _cell_name(op_name: str) -> str:
    """The Cell of a file-name op name (the same names recur on every rank and step)."""
    cell, _ = cell_of(op_name, from_file_name=True)
    return cell or ""


def _describe(op: OpDiff, ex: OpExecution, graphs: SavedGraphs) -> None:
    """Cell, Cell type and source line from the saved graph (the forward op's line for a backward op)."""
    place = graphs.place(ex)
    op.full_name, op.cell, op.cell_type, op.source = place.full_name, place.cell, place.cell_type, place.source


# The rounding budget of a pair computed in a lower precision on one side (fp32 against fp16/bf16): an output may
# differ by the op's own rounding in the lower dtype, plus what its inputs already carry (times a small gain: most
# ops pass a relative error on at most doubled). Beyond that, the op itself makes the difference.
ROUNDING_ULPS = 2.0         # the op's own rounding, in ulps of the lower dtype (a correctly rounded op: 0.5)
CARRY_GAIN = 2.0            # how much of its inputs' relative difference an op may pass on
# in a run computed in another precision throughout, the differences compound op after op: a product or a square
# doubles its inputs' relative difference exactly, so the gain there must exceed 2
CARRY_GAIN_ANOTHER_PRECISION = 4.0
MIN_OTHER_PRECISION_RUNS = 8     # fewer op runs in other dtypes: a few ops changed, not the run's precision
PRECISION_SAMPLE = 4096          # pairs looked at to tell (spread evenly over the step)
CARRY_CAP = 2.0 ** -6       # an input difference larger than this (relative) is no rounding: not excused


def _normwise(t: TensorDiff) -> Optional[float]:
    return t.normwise_error


def _elementwise(t: TensorDiff) -> Optional[float]:
    return t.scaled_error


def _baseline_is_lower(op: OpDiff, lower: str) -> bool:
    """The baseline computed this op's outputs in the lower dtype (the target widened it: a precision patch, or
    a compiler that placed a Cast on the other side of it): the baseline's own rounding bounds what it can say."""
    return any(t.baseline_dtype == lower and t.target_dtype != lower for t in op.outputs)


def in_another_precision(pairs) -> Optional[str]:
    """The target computed this (rank, step) in another precision (amp O2 against O0): at least a quarter of the
    pairs hold outputs whose dtypes differ (from the file names when the walk has them; amp O2 of a small MLP: 24
    of 61, the rest being the fp32 loss, optimizer and parameters; a precision patch of one Cell: 14 of 141).
    Then every pair is judged by the lower dtype's budget, norm-wise; the lower dtype is returned, else None."""
    def dtypes(run) -> tuple:
        outputs = run.npy_outputs
        if outputs and len(outputs) == run.n_outputs:
            return (outputs[0][2],) if len(outputs) == 1 else tuple(d for _slot, _path, d in sorted(outputs))
        return tuple(e.dtype for e in run.execution().outputs)
    if len(pairs) > PRECISION_SAMPLE:       # runs without npy names become objects to say their dtypes: a sample
        step = len(pairs) / PRECISION_SAMPLE
        pairs = [pairs[int(i * step)] for i in range(PRECISION_SAMPLE)]
    differ, seen = 0, set()  # type: Tuple[int, set]
    for run, target_run in pairs:
        mine, theirs = dtypes(run), dtypes(target_run)
        if mine != theirs:
            differ += 1
            seen.update(d for d in mine + theirs if d in _MANTISSA)
    if differ >= MIN_OTHER_PRECISION_RUNS and differ * 4 >= len(pairs) and seen:
        return min(seen, key=lambda d: _MANTISSA[d])
    return None


def lower_precision(op: OpDiff) -> Optional[str]:
    """The coarsest float dtype either side computed this op in (its inputs and outputs), when the two sides'
    dtypes differ; None when both computed it in the same dtypes."""
    tensors = op.inputs + op.outputs
    if all(t.baseline_dtype == t.target_dtype for t in tensors):
        return None
    floats = [d for t in tensors for d in (t.baseline_dtype, t.target_dtype) if d in _MANTISSA]
    return min(floats, key=lambda d: _MANTISSA[d]) if floats else None


def _within_precision(op: OpDiff, tolerance: float, run_lower: Optional[str], other_kernels: bool = False) -> bool:
    """Outputs that differ by no more than the rounding budget and what their inputs already carry agree "within
    precision" (each says its budget); True when every output then agrees. The budget: the op's own rounding in
    the lower dtype when one side computed it in lower precision (else the tolerance in its own dtype), plus
    CARRY_GAIN times its inputs' relative difference when that difference is rounding-sized (<= CARRY_CAP; a
    larger one came from something that parts, and stays a propagator). other_kernels: the two sides are other
    frameworks, each op another implementation (another summation order): measured norm-wise, an op whose inputs
    agree may differ by the tolerance of its dtype."""
    normwise = run_lower is not None or other_kernels
    lower = lower_precision(op)
    if normwise and lower is None and not op.inputs:
        lower = run_lower       # a parameter after the step's update (no inputs): the run's precision bounds it
    if not normwise and lower is not None and not _baseline_is_lower(op, lower):
        return False        # the target computed it in less precision: the change is named, not excused
    measure = _normwise if normwise else _elementwise
    carried = max((e for t in op.inputs if (e := measure(t)) is not None), default=0.0)
    if carried > CARRY_CAP or any(t.nonfinite_differ for t in op.inputs):
        carried = 0.0
    if lower is not None:
        unit, own = 2.0 ** -_MANTISSA[lower], ROUNDING_ULPS
    elif not normwise:      # same dtypes on both sides, in a run of one precision: the tolerance decides
        return False
    else:
        measured = [t.ulp_dtype for t in op.outputs if t.ulp_dtype in _MANTISSA]
        if not (carried or other_kernels) or not measured:
            return False
        lower = measured[0]
        unit, own = 2.0 ** -_MANTISSA[lower], tolerance
    gain = CARRY_GAIN_ANOTHER_PRECISION if normwise else CARRY_GAIN
    budget = (own + gain * carried / unit) * unit      # relative, like the measure
    for t in op.outputs:
        error = measure(t)
        if t.agree is not False or t.nonfinite_differ or error is None or t.ulp_dtype not in _MANTISSA:
            continue
        t.budget_ulps = budget / 2.0 ** -_MANTISSA[t.ulp_dtype]
        t.budget_share = error / budget if budget else None
        if error <= budget:
            t.agree, t.within_precision = True, True
            t.note = (f"within {lower}'s precision: {error / unit:.3g} ulps of {lower} against a budget of "
                      f"{budget / unit:.3g} (its rounding, {own:g}, and {gain:g}x its inputs' "
                      f"{carried / unit:.3g})")
    return all(t.agree is not False for t in op.outputs)


@dataclass
class Judged:
    """Every pair of every unit judged: the op runs that differ beyond their budget, the gaps, the counts."""
    diverged: List[OpDiff] = field(default_factory=list)
    unmatched: List[UnmatchedOp] = field(default_factory=list)
    counts: Dict[str, int] = field(default_factory=lambda: {"baseline": 0, "target": 0})
    shape_gaps: List[Tuple[OpDiff, TensorDiff]] = field(default_factory=list)   # pairs whose shapes differ
    within_precision: List[OpDiff] = field(default_factory=list)   # differ, within the lower dtype's budget
    series: List[tuple] = field(default_factory=list)
    orders: Dict[Tuple[int, int], int] = field(default_factory=dict)
    shapes_of: Dict[tuple, tuple] = field(default_factory=dict)  # (side, run.key) -> first output shape, if they differed
    comparable: Optional[Tuple[int, int]] = None   # across modes: the runs of each side that could pair at all
    frameworks: Optional[Tuple[str, str]] = None   # across frameworks: (baseline's, target's)
    matched: int = 0
    baseline_ops: int = 0
    target_ops: int = 0

    def gap(self, side: str, rank: int, step: int, runs, coords) -> None:
        self.counts[side] += len(runs)
        for ex in runs:
            if len(self.unmatched) < MAX_UNMATCHED_LISTED:
                self.unmatched.append(UnmatchedOp(side, rank, step, ex.op_type, ex.op_name, coords))


def judge_units(paired, comparer: Comparer, coords_of) -> Judged:
    """Each unit's pairs compared and judged (pairing.UnitPairs, one unit at a time). A pair whose outputs'
    shapes differ is not one op's two runs: both become gaps (one side only), not a verdict."""
    judged = Judged()
    for unit_pairs in paired:
        unit = unit_pairs.unit
        rank, step, coords = unit.rank, unit.step, coords_of(unit.rank)
        judged.baseline_ops += len(unit.base_runs)
        judged.target_ops += len(unit.target_runs)
        judged.orders[(rank, step)] = max(1, len(unit.base_runs))
        if unit_pairs.comparable is not None:
            before = judged.comparable or (0, 0)
            judged.comparable = (before[0] + unit_pairs.comparable[0], before[1] + unit_pairs.comparable[1])
        comparer.prefetch(unit_pairs.pairs)
        position_of = {run.key: i for i, run in enumerate(unit.base_runs)}
        only_base, only_target = list(unit_pairs.only_baseline), list(unit_pairs.only_target)
        budget = in_another_precision(unit_pairs.pairs)
        other_kernels = unit_pairs.frameworks is not None
        judged.frameworks = judged.frameworks or unit_pairs.frameworks
        retry: list = []
        for run, target_run in unit_pairs.pairs:
            gap = _judge_pair(judged, run, target_run, unit, comparer, position_of, coords, budget, other_kernels)
            if gap is not None:
                retry.append((run, target_run, gap))
        # pairs whose shapes differ: paired again among themselves by key and output shape (same-key ops, like
        # an optimizer's update of each parameter, that ran in another order)
        pairs, left_base, left_target = _pair_by_shape(retry, judged)
        judged.shape_gaps += [gap for run, _t, gap in retry if run in left_base]
        for run, target_run in pairs:
            gap = _judge_pair(judged, run, target_run, unit, comparer, position_of, coords, budget, other_kernels)
            if gap is not None:
                judged.shape_gaps.append(gap)
                left_base.append(run)
                left_target.append(target_run)
        only_base += left_base
        only_target += left_target
        judged.gap("baseline", rank, step, only_base, coords)
        judged.gap("target", rank, step, only_target, coords)
    return judged


def _judge_pair(judged: Judged, run, target_run, unit, comparer: Comparer, position_of,
                coords, budget: Optional[str], other_kernels: bool = False) -> Optional[Tuple[OpDiff, TensorDiff]]:
    """One pair compared and judged into `judged`; when its outputs' shapes differ (not one op's two runs), the
    op and its first such output, and nothing recorded."""
    error: Optional[float]
    settled = comparer.settled(run, target_run)
    if settled is not None:      # every output already found to agree: nothing more to ask
        error, role, cell = settled, None, None
    else:
        ex = run.execution()
        op = _compare_op(ex, target_run.execution(), position_of[run.key], comparer, unit.base_graphs, run.key,
                         budget, other_kernels)
        shapes = [t for t in op.outputs if t.note.startswith("shape differs")]
        if shapes:
            judged.shapes_of[("baseline", run.key)] = tuple(shapes[0].shape or ())
            judged.shapes_of[("target", target_run.key)] = tuple(shapes[0].target_shape or ())
            return op, shapes[0]
        if op.role is not None:
            _describe(op, ex, unit.base_graphs)
            op.coords = coords
            judged.diverged.append(op)
        elif any(t.within_precision for t in op.outputs):
            judged.within_precision.append(op)
        error, role, cell = op.error_ulps, op.role, op.cell
    judged.matched += 1
    if len(judged.series) < 50 * MAX_SERIES:
        judged.series.append((unit.rank, unit.step, position_of[run.key], cell or _cell_name(run.op_name), error,
                              role))
    return None


def _pair_by_shape(retry, judged: Judged):
    """The runs of pairs whose shapes differed, paired again by match_key and first output shape."""
    from .pairing import match_key
    free: Dict[tuple, list] = {}
    for _run, target_run, _gap in retry:
        free.setdefault((match_key(target_run), judged.shapes_of.get(("target", target_run.key))), []).append(target_run)
    pairs, left_base = [], []
    for run, _target_run, _gap in retry:
        candidates = free.get((match_key(run), judged.shapes_of.get(("baseline", run.key))))
        if candidates:
            pairs.append((run, candidates.pop(0)))
        else:
            left_base.append(run)
    paired = {t.key for _r, t in pairs}
    left_target = [t for _r, t, _gap in retry if t.key not in paired]
    return pairs, left_base, left_target
