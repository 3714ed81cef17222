"""The judgement of a report: one ordered table of rules. Each rule is a small named function over the report's
Evidence (msoverflow/judgement/evidence.py) that returns a Conclusion, or None when it does not apply; the first
that applies wins (the shape of black's line transforms). A rule declares the evidence fields it reads (`uses`);
the Conclusion carries them.

To add a rule: write `def my_rule(e: Evidence) -> Optional[Conclusion]` in this module, decorate it with
`@rule("field", ...)` naming the Evidence fields it reads, and put it in RULES where it belongs in the order. Its
docstring's first line is its line in docs/how-analyze-decides.md (a test keeps the two equal).
"""
from __future__ import annotations

from typing import Callable, List, Optional, Tuple

from ..model import (
    BASIS_ENTERED,
    CAUSE_DATA,
    CAUSE_DEVICE,
    CAUSE_DOMAIN,
    CAUSE_DYNAMICS,
    CAUSE_PRECISION,
    CAUSE_UNKNOWN,
    CROSS_RANK,
    INVALID,
    OVERFLOW,
    PATCH_GUARD,
    PATCH_NONE,
    PATCH_PRECISION,
    SUSPECT,
    VERDICT_ANOMALY,
    VERDICT_CLEAN,
    VERDICT_INCONCLUSIVE,
    Conclusion,
    Finding,
)
from .evidence import Evidence, kind_word

Rule = Callable[[Evidence], Optional[Conclusion]]

# The fix each cause names (the recompute's causes, and the history's)
FIX = {
    CAUSE_PRECISION: "Compute this region in float32 (or bfloat16): the value fits there.",
    CAUSE_DOMAIN: "The fix is in the data or the code, not the dtype: no training dtype holds this value.",
    CAUSE_DATA: "The fix is in the data pipeline (or a guard that skips such a batch), not in the dtype.",
    CAUSE_DEVICE: ("Re-run this step on the same device and on another: a fault that follows the device is "
                   "hardware, one that recurs everywhere is a kernel bug. A precision patch is not the fix."),
    CAUSE_DYNAMICS: ("The values grew over the steps before this one: lower the learning rate or lengthen its "
                     "warm-up, clip the gradients, or add weight decay; a precision patch only delays it."),
    CAUSE_UNKNOWN: "",
}
SKIP_UPDATE = ("An update was applied with non-finite gradients: check the gradients for overflow before the "
               "update and skip it when they are not finite (TrainOneStepWithLossScaleCell with a loss-scale "
               "manager does; a custom construct must use the overflow flag it returns).")
# knowledge recommendations (op_knowledge.yaml keys) that prescribe a wider dtype: wrong for a cause no dtype fixes
PRECISION_ADVICE = frozenset({"overflow", "invalid", "overflow_cast", "saturation", "flagged"})
# "the origin is earlier: dump an earlier step": wrong once the cause shows the data batch held the value
EARLIER_ADVICE = "nonfinite_input"

RULES: List[Rule] = []
USES: dict = {}


def rule(*uses: str) -> Callable[[Rule], Rule]:
    """Declare the evidence fields a rule reads (the Conclusion names them)."""
    def register(fn: Rule) -> Rule:
        USES[fn.__name__] = tuple(uses)
        return fn
    return register


def judge(e: Evidence, rules: Optional[List[Rule]] = None) -> Conclusion:
    """The conclusion of the first rule that applies (the last rule always does)."""
    for fn in rules if rules is not None else RULES:
        found = fn(e)
        if found is not None:
            found.rule = fn.__name__
            found.used = list(USES.get(fn.__name__, ()))
            return found
    raise AssertionError("the rule table's last rule applies to every report")


def table() -> List[Tuple[str, str, Tuple[str, ...]]]:
    """(name, what it decides, the evidence it reads) per rule, in order: docs/how-analyze-decides.md's table."""
    return [(fn.__name__, (fn.__doc__ or "").strip().splitlines()[0], USES.get(fn.__name__, ())) for fn in RULES]


def table_markdown() -> str:
    """The rule table as docs/how-analyze-decides.md shows it (tests/unit/test_judgement.py keeps the two equal)."""
    rows = ["| # | rule | decides | evidence read |", "|---|---|---|---|"]
    rows += [f"| {n} | `{name}` | {what} | {', '.join(uses)} |" for n, (name, what, uses) in enumerate(table(), 1)]
    return "\n".join(rows)


def finding_fix(finding: Finding, cause: Optional[str], cause_advice: str = "") -> str:
    """The fix of one finding from its cause: a device fault or a value no dtype holds gets the cause's fix, never
    a precision fix, and a batch that held the value never "dump an earlier step"; otherwise the op's own
    recommendation (msoverflow/rules/knowledge)."""
    if cause == CAUSE_DEVICE or (cause in (CAUSE_DOMAIN, CAUSE_DATA) and finding.advice in PRECISION_ADVICE) or \
            (cause == CAUSE_DATA and finding.advice == EARLIER_ADVICE):
        return cause_advice or FIX.get(cause or "", "")
    return finding.recommendation


def _anomaly(e: Evidence, cause: str, reason: str, fix: List[str], patch: str, next_command: str = "") -> Conclusion:
    kind = kind_word(e.origin) if e.origin is not None else e.value
    return Conclusion(rule="", verdict=VERDICT_ANOMALY, harmful=True, kind=kind, cause=cause, reason=reason,
                      fix=[f for f in fix if f], next_command=next_command, patch=patch)


PATCH_NEXT = "msoverflow patch --from {report}"


# ---- the rules, in order ----------------------------------------------------------------------------------------

@rule("verdict", "inconclusive", "complete")
def inconclusive(e: Evidence) -> Optional[Conclusion]:
    """Nothing bad was read, but not everything was understood or read: inconclusive, with the reasons."""
    if e.origin is not None or e.verdict != VERDICT_INCONCLUSIVE:
        return None
    return Conclusion(rule="", verdict=VERDICT_INCONCLUSIVE, harmful=None, reason=e.inconclusive[0] if
                      e.inconclusive else "", fix=[])


@rule("verdict", "handled", "contained")
def clean(e: Evidence) -> Optional[Conclusion]:
    """Nothing harmful: clean (contained values and overflows a loss scale handled are said, never patched)."""
    if e.origin is not None or e.verdict != VERDICT_CLEAN:
        return None
    harmless = [w for w, have in (("contained values", e.contained), ("overflows the loss scale handled",
                                                                        e.handled)) if have]
    return Conclusion(rule="", verdict=VERDICT_CLEAN, harmful=False,
                      reason=("only " + " and ".join(harmless)) if harmless else "no bad value")


@rule("origin", "update_applied", "updated")
def update_applied(e: Evidence) -> Optional[Conclusion]:
    """An update wrote the non-finite value into the weights: the overflow check/skip is the fix, beside the rest."""
    if e.origin is None or not e.update_applied or e.origin.role == SUSPECT or e.origin.kind == CROSS_RANK:
        return None
    rest = judge(_without_update(e))
    shown = ", ".join(e.updated[:3]) + (f" and {len(e.updated) - 3} more" if len(e.updated) > 3 else "")
    reason = (f"{rest.reason}; the update was applied with the non-finite values ({shown} went non-finite)"
              if rest.reason else f"the update was applied with the non-finite values ({shown} went non-finite)")
    return Conclusion(rule="", verdict=VERDICT_ANOMALY, harmful=True, kind=rest.kind, cause=rest.cause,
                      reason=reason, fix=[SKIP_UPDATE, *rest.fix], next_command=rest.next_command,
                      patch=rest.patch)


def _without_update(e: Evidence) -> Evidence:
    import dataclasses
    return dataclasses.replace(e, update_applied=False, updated=[])


@rule("origin")
def flagged_only(e: Evidence) -> Optional[Conclusion]:
    """Only the hardware flag names the op (its inputs were not dumped): dump its inputs; a patch assumes precision."""
    if e.origin is None or e.origin.role != SUSPECT:
        return None
    return _anomaly(e, "", "the hardware flagged it; its inputs were not dumped", [e.origin.recommendation],
                    PATCH_PRECISION, PATCH_NEXT)


@rule("origin", "ranks")
def received(e: Evidence) -> Optional[Conclusion]:
    """A collective delivered the first bad value: its cause is on the rank that sent it."""
    if e.origin is None or e.origin.kind != CROSS_RANK:
        return None
    return _anomaly(e, CAUSE_UNKNOWN, "a collective delivered the value; its cause is on the rank that sent it",
                    [e.origin.recommendation], PATCH_NONE)


@rule("origin", "cause")
def corrupted_weight(e: Evidence) -> Optional[Conclusion]:
    """A weight read with a few values absurd for it, changed since the step before with no writer: device, no patch."""
    if e.origin is None or e.cause is None or e.cause.basis != BASIS_ENTERED or e.cause.cause != CAUSE_DEVICE:
        return None
    return _anomaly(e, CAUSE_DEVICE, e.cause.reason, [e.cause.advice or FIX[CAUSE_DEVICE]], PATCH_NONE)


@rule("origin", "history", "cause")
def dynamics(e: Evidence) -> Optional[Conclusion]:
    """The history shows an earlier onset (weights or inputs growing over the steps): cause dynamics, no precision patch."""
    if e.origin is None or e.history is None or not e.history.earlier_cause:
        return None
    if e.cause is not None and e.cause.cause == CAUSE_DEVICE:
        return None                  # the device made a value its inputs do not explain: growth does not explain it
    return _anomaly(e, CAUSE_DYNAMICS, e.history.summary, [FIX[CAUSE_DYNAMICS]], PATCH_NONE)


@rule("origin", "history", "cause")
def data_jump(e: Evidence) -> Optional[Conclusion]:
    """The data batch (a graph input feeding the origin) jumps at the origin's step from steady steps: cause data."""
    if e.origin is None or e.history is None or e.origin.kind not in (OVERFLOW, INVALID) or \
            (e.cause is not None and e.cause.cause == CAUSE_DEVICE):
        return None
    jumped = [s for s in e.history.series if s.kind == "graph input" and s.trend == "jump"
              and s.since == e.origin.step]
    if not jumped or not _steady_before(jumped[0]):
        return None
    return _anomaly(e, CAUSE_DATA, e.history.summary, [FIX[CAUSE_DATA]], PATCH_NONE)


def _steady_before(series) -> bool:
    """The values before the jump stay within a factor of 10 of each other (a batch that jumps, not a growth)."""
    known = [v for v in series.max_abs[:-1] if v is not None and v > 0]
    return bool(known) and max(known) <= 10 * min(known)


@rule("origin", "cause")
def cause_device(e: Evidence) -> Optional[Conclusion]:
    """Recomputed finite from its dumped inputs: a device fault (or kernel bug), no patch."""
    if e.origin is None or e.cause is None or e.cause.cause != CAUSE_DEVICE:
        return None
    return _anomaly(e, CAUSE_DEVICE, e.cause.reason, [e.cause.advice or FIX[CAUSE_DEVICE]], PATCH_NONE)


@rule("origin", "cause")
def upstream_precision(e: Evidence) -> Optional[Conclusion]:
    """A low-precision producer upstream made the origin's exact 0 or inf, which float32 holds: precision, that producer named."""
    if e.origin is None or e.cause is None or e.cause.basis != "upstream":
        return None
    return _anomaly(e, CAUSE_PRECISION, e.cause.reason, [e.cause.advice or FIX[CAUSE_PRECISION]], PATCH_PRECISION,
                    PATCH_NEXT)


@rule("origin", "cause")
def masked_row(e: Evidence) -> Optional[Conclusion]:
    """Softmax of a row that is -inf everywhere (nothing to attend to) made NaN: domain; a finite fill, or drop the row."""
    if e.origin is None or e.cause is None or e.cause.basis != "masked_row":
        return None
    return _anomaly(e, CAUSE_DOMAIN, e.cause.reason, [e.cause.advice or FIX[CAUSE_DOMAIN]], PATCH_NONE)


@rule("origin", "cause", "division")
def weight_zero_division(e: Evidence) -> Optional[Conclusion]:
    """A 0/0 whose denominator sums a weight (a weight is not a mask count): domain, never the zero-token guard."""
    if e.origin is None or e.cause is None or e.cause.basis != "weight_sum":
        return None
    return _anomaly(e, CAUSE_DOMAIN, e.cause.reason, [e.cause.advice or FIX[CAUSE_DOMAIN]], PATCH_NONE)


@rule("origin", "cause", "division")
def zero_division(e: Evidence) -> Optional[Conclusion]:
    """An invalid value (0/0, x/0) born in a division, not a device fault: the zero-token guard (patch writes it)."""
    if e.origin is None or not e.division or e.origin.kind != "invalid" or \
            (e.cause is not None and e.cause.cause == CAUSE_DEVICE):
        return None
    cause = e.cause.cause if e.cause is not None else ""
    return _anomaly(e, cause, e.cause.reason if e.cause is not None else e.origin.detail,
                    [finding_fix(e.origin, cause, e.cause.advice if e.cause is not None else "")], PATCH_GUARD,
                    PATCH_NEXT)


@rule("origin", "cause")
def cause_domain(e: Evidence) -> Optional[Conclusion]:
    """Bad in every training dtype from finite inputs (x/0, log of a negative, beyond float32): fix the code or data."""
    if e.origin is None or e.cause is None or e.cause.cause != CAUSE_DOMAIN:
        return None
    return _anomaly(e, CAUSE_DOMAIN, e.cause.reason, [finding_fix(e.origin, CAUSE_DOMAIN, e.cause.advice)],
                    PATCH_NONE)


@rule("origin", "cause")
def cause_data(e: Evidence) -> Optional[Conclusion]:
    """The data batch (a graph input) already holds the value, or a zero count made it: fix the data pipeline."""
    if e.origin is None or e.cause is None or e.cause.cause != CAUSE_DATA:
        return None
    return _anomaly(e, CAUSE_DATA, e.cause.reason, [finding_fix(e.origin, CAUSE_DATA, e.cause.advice)], PATCH_NONE)


@rule("origin", "cause")
def cause_precision(e: Evidence) -> Optional[Conclusion]:
    """Bad in the low-precision dtype, finite in float32: a precision patch is the fix."""
    if e.origin is None or e.cause is None or e.cause.cause != CAUSE_PRECISION:
        return None
    return _anomaly(e, CAUSE_PRECISION, e.cause.reason, [e.origin.recommendation or FIX[CAUSE_PRECISION]],
                    PATCH_PRECISION, PATCH_NEXT)


@rule("origin", "cause")
def cause_unknown(e: Evidence) -> Optional[Conclusion]:
    """The cause could not be established (the reason says why): the op's recommendation; a patch says it assumes."""
    if e.origin is None:
        return None
    reason = e.cause.reason if e.cause is not None else ""
    cause = e.cause.cause if e.cause is not None else ""
    return _anomaly(e, cause, reason, [e.origin.recommendation], PATCH_PRECISION, PATCH_NEXT)


@rule("verdict")
def no_origin(e: Evidence) -> Optional[Conclusion]:
    """Anything else (a verdict without an origin the rules above know): its verdict, no fix."""
    return Conclusion(rule="", verdict=e.verdict, harmful=None if e.verdict == VERDICT_INCONCLUSIVE else
                      e.verdict == VERDICT_ANOMALY)


RULES[:] = [inconclusive, clean, update_applied, flagged_only, received, corrupted_weight, dynamics, data_jump, cause_device,
            upstream_precision, masked_row, weight_zero_division, zero_division, cause_domain, cause_data, cause_precision, cause_unknown, no_origin]
