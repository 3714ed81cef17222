"""Assemble: the verdict and its reasons from what was judged, into the Comparison. A difference between runs
that are not the same model or job is never a divergence; each reason is given once."""
from __future__ import annotations

from typing import List

from .judge import Judged, lower_precision
from .metrics import Comparer
from .model import MAX_SERIES, MIN_MATCHED_SHARE, VERDICT_DIVERGED, VERDICT_EQUIVALENT, VERDICT_INCONCLUSIVE, Comparison
from .rank import _sample, first_divergence, largest
from .sides import Sides


def assemble(sides: Sides, comparer: Comparer, judged: Judged, top: int, tolerance_ulps: float, warn) -> Comparison:
    first = first_divergence(judged.diverged, judged.orders)
    worst = largest(judged.diverged, top)
    caveats = []
    if comparer.statistics_only:
        caveats.append(f"{comparer.statistics_only} tensor(s) were compared by their statistics only (Max, Min): "
                       "the errors shown are lower bounds, and values that differ inside the same range are not "
                       "visible")
    if judged.within_precision:
        caveats.append(_precision_caveat(judged))
    if judged.shape_gaps:
        op, t = judged.shape_gaps[0]
        caveats.append(f"{len(judged.shape_gaps)} paired op run(s) gave outputs of different shapes and were "
                       f"counted as present on one side only (first: {op.op_type} {op.op_name} output {t.slot}, "
                       f"{_shape_text(t.shape)} against {_shape_text(t.target_shape)})")
    if judged.frameworks is not None:
        base, target = judged.frameworks
        caveats.append(f"across frameworks ({base}'s API calls against {target}'s): each op is another "
                       f"implementation, so an op whose inputs agree may differ by {tolerance_ulps:g} ulps of its "
                       "dtype, measured norm-wise (the largest error over the tensor's largest value)")
    if judged.comparable is not None:
        caveats.append(f"across {'frameworks' if judged.frameworks else 'modes (graph kernels against API calls)'}: "
                       "only forward op runs that compute a tensor "
                       f"can pair ({judged.comparable[0]} of the baseline's, {judged.comparable[1]} of the target's); "
                       "backward runs, parameters, the optimizer and views (Reshape) are listed as one side only")
    different = list(sides.different)
    # the Casts one side inserted (amp, a precision patch) are no sign of another model: not counted in the share
    inserted = {side: sum(1 for u in judged.unmatched if u.side == side and u.op_type == "Cast")
                for side in ("baseline", "target")}
    if judged.comparable is not None:     # across modes: the share of the runs that could pair at all
        reasons = _share_reasons(judged.matched, judged.comparable[0], judged.comparable[1], different)
    else:
        reasons = _share_reasons(judged.matched, judged.baseline_ops - inserted["baseline"],
                                 judged.target_ops - inserted["target"], different, sum(inserted.values()))
    reasons += different
    if not sides.units:
        reasons.append("no (rank, step) is in both dumps")
    elif comparer.compared == 0:
        reasons.append("no tensor could be compared (no data or statistics in both dumps)")
    gaps, unread = sides.gaps(warn)
    reasons += gaps
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
    units = sides.units
    return Comparison(baseline=sides.baseline, target=sides.target, verdict=verdict,
                      first_divergence=first, worst=worst, unmatched=judged.unmatched,
                      unmatched_counts=judged.counts, matched_ops=judged.matched, baseline_ops=judged.baseline_ops,
                      target_ops=judged.target_ops, tensors_compared=comparer.compared, units=units,
                      reasons=list(dict.fromkeys(reasons)), caveats=caveats, warnings=list(warn),
                      tolerance_ulps=tolerance_ulps,
                      statistics_only=bool(comparer.compared) and comparer.statistics_only == comparer.compared,
                      series=_sample(judged.series, MAX_SERIES), diverged_ops=len(judged.diverged),
                      differences=judged.diverged, within_precision_ops=len(judged.within_precision),
                      parallel=sides.layout.to_dict() if sides.layout is not None else None,   # type: ignore[attr-defined]
                      coords={rank: found for rank in sorted({r for r, _s in units})
                              if (found := sides.coords_of(rank))})


def _precision_caveat(judged: Judged) -> str:
    """What differs within precision: how many op runs, the dtypes, the largest error against its budget."""
    ops = judged.within_precision
    lowers = sorted({d for op in ops if (d := lower_precision(op))}) or sorted(
        {t.ulp_dtype for op in ops for t in op.outputs if t.within_precision and t.ulp_dtype})
    closest = max((t.budget_share or 0.0 for op in ops for t in op.outputs if t.within_precision), default=0.0)
    return (f"{len(ops)} op run(s) differ within precision ({', '.join(lowers) or 'what their inputs carry'}): "
            f"each by no more than its rounding budget and what its inputs already carry (closest: "
            f"{closest:.0%} of its budget)")


def _share_reasons(matched: int, baseline_ops: int, target_ops: int, different: List[str],
                   casts: int = 0) -> List[str]:
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
                        f"({baseline_ops} in the baseline, {target_ops} in the target"
                        + (f", not counting {casts} Cast(s) present on one side only" if casts else "")
                        + f"; runs of one model match at least {MIN_MATCHED_SHARE:.0%})")
    return []



def _shape_text(shape) -> str:
    return "x".join(map(str, shape)) if shape else "scalar" if shape == () else "unknown"



