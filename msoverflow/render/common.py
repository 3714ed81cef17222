"""What every renderer says the same way: the facts of the Report in words, and what a table leaves out.

Renderers compute nothing: the Report carries the arrivals, the steps scanned per rank, the propagation edges and
the provenance; these helpers only phrase them, so text, markdown and HTML read alike (the JSON carries the same
fields). Large dumps stay readable: tables are capped and say what they left out.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Tuple

from ..model import NONFINITE_INPUT, PROPAGATOR, RANK_CLEAN, RANK_NOT_DUMPED
from ..selection import format_ids

if TYPE_CHECKING:
    from ..model import Arrival, Contained, Handled, History, RankStatus, Report, TensorSummary

MAX_RANK_ROWS = 64        # text and markdown; the HTML shows more (render/html/)
MAX_ARRIVALS = 64
MAX_TENSOR_ROWS = 16      # per input/output table: the bad tensors first


def steps_text(values: Iterable[int], limit: int = 20) -> str:
    """Steps or ranks in a report (selection.format_ids, the one formatter of id lists); "-" for none."""
    return format_ids(values, limit) or "-"


def count_cell(stats, name: str) -> str:
    """A count in a tensor table: "-" without statistics, "≥1" when it is a lower bound (TensorStats.count_text)."""
    return "-" if stats is None else stats.count_text(name)


def counts_note(tensors: Iterable[TensorSummary]) -> Optional[str]:
    """The footnote a table needs when some of its counts are lower bounds."""
    if any(t.stats is not None and not t.stats.counts_exact for t in tensors):
        return ("≥: a lower bound - the dump recorded statistics (max, min), not counts; the tensor may hold "
                "more such values")
    return None


def tensors_shown(tensors: List[TensorSummary], limit: int = MAX_TENSOR_ROWS) -> Tuple[List[TensorSummary], str]:
    """At most `limit` tensors (the bad ones first, then in slot order) and a line on what was left out."""
    if len(tensors) <= limit:
        return list(tensors), ""
    bad = [t for t in tensors if t.stats is not None and t.stats.bad]
    chosen = {id(t) for t in bad[:limit]}
    for t in tensors:
        if len(chosen) >= limit:
            break
        chosen.add(id(t))
    shown = [t for t in tensors if id(t) in chosen]
    left_bad = len(bad) - sum(1 for t in bad if id(t) in chosen)
    return shown, (f"{len(tensors) - len(shown)} more not shown ({left_bad} of them bad); --format json lists "
                   "every tensor")


def ranks_shown(rows: List[RankStatus], limit: int = MAX_RANK_ROWS) -> Tuple[List[Tuple[str, RankStatus]], str]:
    """Rows to show as (rank label, row); a row may already stand for ranks rank..last_rank. Beyond `limit` rows,
    runs of consecutive clean or not-dumped ranks in the same step fold into one row `5-99999`; past that the
    table stops and says how many ranks it left out."""
    rows = sorted(rows, key=lambda r: r.rank)
    if len(rows) <= limit:
        return [(r.rank_label, r) for r in rows], ""
    folded: List[Tuple[RankStatus, int]] = []
    for row in rows:
        last_of_row = row.last_rank if row.last_rank is not None else row.rank
        if folded:
            head, last = folded[-1]
            if (row.status in (RANK_CLEAN, RANK_NOT_DUMPED) and row.status == head.status and row.rank == last + 1
                    and row.step == head.step and not row.coords and not head.coords):
                folded[-1] = (head, last_of_row)
                continue
        folded.append((row, last_of_row))
    shown = [(str(head.rank) if last == head.rank else f"{head.rank}-{last}", head) for head, last in folded[:limit]]
    left = folded[limit:]
    left_ranks = sum(last - head.rank + 1 for head, last in left)
    note = f"{left_ranks} more rank(s) not shown; --format json lists every rank" if left else ""
    if len(folded) < len(rows):
        note = "runs of clean / not dumped ranks folded into one row" + (f"; {note}" if note else "")
    return shown, note


def coords_phrase(coords: Optional[Dict[str, int]]) -> str:
    """"pp 1, dp 0, tp 1": a rank's coordinates, the one notation of every view (headline, rank and parameter
    tables; JSON `coords` has the same keys in the same order: pipeline-major, tp fastest, as ranks are numbered)."""
    if not coords:
        return ""
    return ", ".join(f"{key} {coords[key]}" for key in ("pp", "dp", "tp") if key in coords)


def rank_phrase(rank: int, coords: Optional[Dict[str, int]]) -> str:
    """"rank 5 (pp 1, dp 0, tp 1)"; "rank 5" without coordinates."""
    where = coords_phrase(coords)
    return f"rank {rank} ({where})" if where else f"rank {rank}"


def rank_where(rank: int, report: Report) -> str:
    """rank_phrase() of a rank of the report (with its coordinates when the report carries them)."""
    row = next((r for r in report.rank_status if r.rank == rank), None)
    return rank_phrase(rank, row.coords if row is not None else None)


def producer_text(t: TensorSummary) -> str:
    """Who made a tensor, short: the last two scopes of the producing op, or `parameter NAME`."""
    if not t.producer:
        return ""
    if t.producer.startswith("param:"):
        return "parameter " + t.producer[len("param:"):]
    return "/".join(t.producer.rsplit("/", 2)[-2:])


MAX_STAGES_SHOWN = 16


def parallel_text(parallel: Dict[str, Any]) -> str:
    """The layout the coordinates come from: sizes (or inferred stages), and where they came from."""
    if "stages" in parallel:
        items = list(dict(parallel["stages"]).items())
        stages = "; ".join(f"stage {k}: ranks {steps_text(int(r) for r in v)}" for k, v in items[:MAX_STAGES_SHOWN])
        if len(items) > MAX_STAGES_SHOWN:
            stages += f"; {len(items) - MAX_STAGES_SHOWN} more stages (--format json lists all)"
        return f"{stages} ({parallel.get('source')}; dp and tp unknown: give --parallel)"
    return f"pp={parallel.get('pp')}, dp={parallel.get('dp')}, tp={parallel.get('tp')} ({parallel.get('source')})"


MAX_PARAMETER_ROWS = 40


def parameters_shown(report: Report, limit: int = MAX_PARAMETER_ROWS):
    """The parameter rows a text or markdown table shows, and what it left out."""
    shown = report.parameters[:limit]
    left = len(report.parameters) - len(shown)
    return shown, (f"{left} more parameter(s) (--format json lists all)" if left else "")


def arrival_text(a: Arrival) -> str:
    """`rank 3, step 1: AllReduce <op> (32.692 ms into the rank's step)`."""
    when = f" ({a.offset_us / 1000:.3f} ms into the rank's step)" if a.offset_us is not None else ""
    return f"rank {a.rank}, step {a.step}: {a.op_type} {a.op_name}{when}"


def arrivals_shown(report: Report, limit: int = MAX_ARRIVALS) -> Tuple[List[Arrival], str]:
    shown = report.arrivals[:limit]
    left = len(report.arrivals) - len(shown)
    return shown, (f"{left} more arrival(s); --format json lists all" if left > 0 else "")


def bad_value_phrase(report: Report) -> str:
    """Whether an inconclusive analysis saw a bad value at all ("" when its reasons say it: a likely origin, an
    origin). A value a collective delivered whose maker was not found was made in files the analysis did not
    read (cut short, missing, unreadable or not selected)."""
    if report.likely_origin is None and report.bad_value_received:
        return "a bad value was received but its origin may be in unreadable or missing files"
    return "" if report.bad_values_seen else "no bad value seen"


def inconclusive_lead(report: Report) -> str:
    """What leads an inconclusive verdict's first reason (text, markdown, the one-line repr)."""
    phrase = bad_value_phrase(report)
    return "" if not phrase else phrase + (", but " if phrase == "no bad value seen" else ": ")


def clean_text(report: Report) -> str:
    """What a clean verdict covers, in its headline: the outputs, files, ranks and steps read (a dump of step 0
    alone is clean in step 0, not in the run), what was skipped on purpose, and the non-finite values that are no
    fault when there are some."""
    steps = {step for scanned in report.scanned_steps.values() for step in scanned}
    where = f"{read_text(report)} (ranks {steps_text(report.ranks)}; steps {steps_text(steps)})"
    skipped = "" if report.layout == "hunt" and not report.files else (
        "; not read, on purpose: integer tensors" if inputs_only(report) else
        "; not read, on purpose: the inputs of ops whose outputs are fine, integer tensors")
    harmless = [text for count, text in ((len(report.contained), "contained"),
                                         (sum(len(h.steps) for h in report.handled), "handled by the loss scale"))
                if count]
    if harmless:
        return f"no fault in {where}; its non-finite values are {' or '.join(harmless)} (below){skipped}"
    return f"no inf, NaN or out-of-range value in {where}{skipped}"


def scale_text(value: Optional[float]) -> str:
    """A loss scale: 2^24 for a power of two, else the number."""
    if value is None:
        return "?"
    import math
    if value > 0 and math.log2(value) == int(math.log2(value)):
        return f"2^{int(math.log2(value))}"
    return f"{value:g}"


def _steps_phrase(steps: Iterable[int]) -> str:
    steps = list(steps)
    return f"step {steps[0]}" if len(steps) == 1 else f"steps {steps_text(steps)}"


def contained_text(c: Contained) -> str:
    """`MaskedFill in network._backbone.attn (CausalSelfAttention): -inf, absorbed by Softmax (rank 0, steps 0-1)`."""
    where = f" in {c.cell} ({c.cell_type})" if c.cell else ""
    return (f"{c.op_type}{where}: {c.value}, absorbed by {', '.join(c.absorbed_by)} "
            f"(rank {c.rank}, {_steps_phrase(c.steps)})")


def handled_text(h: Handled) -> str:
    """`steps 0-7: the dynamic loss scale calibrating (2^24 -> 2^16); updates skipped; not a fault (rank 0)`."""
    if h.scale_from is not None and h.scale_to is not None and h.scale_to < h.scale_from:
        what = f"the dynamic loss scale calibrating ({scale_text(h.scale_from)} -> {scale_text(h.scale_to)})"
    elif h.scale_from is not None:
        what = f"an overflow at loss scale {scale_text(h.scale_from)}"
    elif h.scale_how == "inferred":
        what = "the dynamic loss scale calibrating (its value is not in the dump)"
    else:
        what = "an overflow in the backward"
    ranks = f"rank {h.ranks[0]}" if len(h.ranks) == 1 else f"ranks {steps_text(h.ranks)}"
    return f"{_steps_phrase(h.steps)}: {what}; updates skipped; not a fault ({ranks})"


def handled_details(h: Handled) -> List[str]:
    """How each part of a handled run is known: the scale (read or inferred), the skipped updates, the recovery."""
    lines = []
    if h.scale_how == "read":
        lines.append(f"scale read from {h.scale_evidence}")
    elif h.scale_how == "inferred":
        lines.append(f"scale {h.scale_evidence}")
    else:
        lines.append("scale: not in the dump")
    lines.append(f"updates skipped: {h.skipped_how}")
    for rank, steps in sorted(h.received.items()):
        lines.append(f"rank {rank} only received the overflow of {_steps_phrase(steps)} through a collective, from "
                     "a rank where it is handled")
    if h.recovered_at is not None:
        lines.append(f"recovered: step {h.recovered_at} holds no bad value")
    return lines


def history_lines(h: History, limit: int = 6) -> List[str]:
    """The history's series in a line each: `fc.weight (parameter): 0.212 at step 0 -> 3.1e+04 at step 37,
    growing from step 10`."""
    lines = []
    for one in h.series[:limit]:
        known = [(s, v) for s, v in zip(one.steps, one.max_abs, strict=True) if v is not None]
        if not known:
            continue
        trend = {"growing": f", growing from step {one.since}", "jump": f", jumped at step {one.since}",
                 "steady": ", steady"}.get(one.trend, "")
        lines.append(f"{one.name} ({one.kind}): max |x| {known[0][1]:.3g} at step {known[0][0]} -> "
                     f"{known[-1][1]:.3g} at step {known[-1][0]}{trend}")
    return lines


def read_text(report: Report) -> str:
    """What was read: "the outputs of 33 op runs read from 66 files" of a dump (what a clean verdict rests on:
    their values or statistics), or "1234 tensors checked live" by hunt (which reads no file)."""
    if report.layout == "hunt" and not report.files:
        return f"{report.tensors_read} tensors checked live"
    if inputs_only(report):
        return f"the inputs of {report.inputs_checked} op run(s) read from {report.files} file(s)"
    return f"the outputs of {report.outputs_checked} op run(s) read from {report.files} file(s)"


def inputs_only(report: Report) -> bool:
    """A dump without output files (input_output 1): its inputs are what was read, every one of them."""
    return not report.outputs_checked and report.inputs_checked > 0


def scanned_text(report: Report) -> str:
    """The steps actually scanned per rank, and the ones skipped (a rank's walk stops after its first origin's
    step): `steps scanned: 0-2 on every rank` or `steps scanned: rank 0: 0-2; rank 1: 0,1 (not scanned: 2)`."""
    scanned = report.scanned_steps
    if not scanned:
        return "steps scanned: none"
    parts = {}
    for rank, steps in sorted(scanned.items()):
        skipped = sorted(set(report.steps.get(rank, [])) - set(steps))
        parts[rank] = steps_text(steps) + (f" (not scanned: {steps_text(skipped)})" if skipped else "")
    if len(set(parts.values())) == 1:
        return f"steps scanned: {next(iter(parts.values()))} on every rank"
    shown = list(parts.items())[:MAX_RANK_ROWS]
    more = len(parts) - len(shown)
    return ("steps scanned: " + "; ".join(f"rank {r}: {v}" for r, v in shown)
            + (f"; ... {more} more rank(s) (--format json)" if more > 0 else ""))


def provenance_text(report) -> str:
    """`msoverflow 0.4.0 on host, 2026-12-01T03:40:00Z: msoverflow analyze DUMP (MindSpore 2.10.0)`; "" when the
    Report (or Comparison) carries none."""
    p = report.provenance or {}
    if not p:
        return ""
    head = f"msoverflow {p.get('msoverflow_version') or '?'}"
    where = ", ".join(str(p[k]) for k in ("host", "time") if p.get(k))
    text = head + (f" on {where}" if where else "")
    if p.get("command"):
        command = p["command"]
        text += ": " + (" ".join(map(str, command)) if isinstance(command, (list, tuple)) else str(command))
    if p.get("mindspore_version"):
        text += f" (MindSpore {p['mindspore_version']})"
    return text


# ---- the cause of an origin (msoverflow/cause) ---------------------------------------------------------

def value_text(x: Optional[float]) -> str:
    """A recomputed or dumped value: nan, inf, -inf or the number."""
    if x is None:
        return "-"
    if x != x:
        return "nan"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    return f"{x:.6g}"


def made_shown(f) -> str:
    """How every view says the finding came to be: "first seen in" when the dump only shows the value (a
    propagator, or a graph input or weight already bad when the dump starts: no op made it), else "first created
    by"."""
    return "first seen in" if f.role == PROPAGATOR or f.kind == NONFINITE_INPUT else "first created by"


def kind_shown(f) -> str:
    """The kind of a finding in every view: NaN when the value is NaN (msoverflow/judgement)."""
    from ..judgement.evidence import kind_word
    return kind_word(f)


def cause_shown(report, f) -> Optional[Tuple[str, str]]:
    """(cause, reason) a view shows for a finding: the report's conclusion for the first one (it weighs the history
    and the update beside the recompute), the recompute's for the others; None when there is none."""
    if f is report.first:
        from ..judgement import conclusion_of
        c = conclusion_of(report)
        if c.cause:
            return c.cause, c.reason
    return (f.cause.cause, f.cause.reason) if f.cause is not None else None


def fixes_shown(report, f) -> List[str]:
    """The fixes a view shows for a finding, most important first: the conclusion's for the first origin."""
    if f is report.first:
        from ..judgement import conclusion_of
        return list(conclusion_of(report).fix)
    return [f.recommendation] if f.recommendation else []


def recompute_shown(report, f):
    """The recompute's cause when the conclusion names another (shown beside it as what the op's recompute says)."""
    shown = cause_shown(report, f)
    if f.cause is not None and shown is not None and shown[0] != f.cause.cause:
        return f.cause
    return None


def cause_text(cause) -> str:
    """'device: recomputed from its dumped inputs, ...' (the cause's word, then what showed it)."""
    return f"{cause.cause}: {cause.reason}"


def cause_values_text(cause) -> str:
    """Where the bad values sit, and the pattern they form."""
    return "; ".join(part for part in (cause.where, cause.pattern_text) if part)


def recompute_rows(cause) -> List[Tuple[str, str, str, str]]:
    """(dtype, finite, max |x|, agrees with the dump) per precision the origin was recomputed in."""
    rows = []
    for r in cause.recompute:
        finite = "yes" if r.finite else f"no ({r.nonfinite} non-finite)"
        several = r.mismatches != 1
        agrees = ("-" if r.agrees is None else "yes" if r.agrees else
                  f"no ({r.mismatches} value{'s' if several else ''} differ{'' if several else 's'})")
        rows.append((r.dtype, finite, value_text(r.max_abs), agrees))
    return rows


def recompute_title(cause) -> str:
    by = {"numpy": "msoverflow's reference kernels", "mindspore": "MindSpore on this machine's CPU"}.get(cause.by, "")
    return f"recomputed from the dumped inputs ({by})" if by else "recomputed from the dumped inputs"


def sample_texts(cause) -> List[str]:
    """'at row 3, column 0: dumped 5.77e+05; float16 inf, float32 5.77e+05, float64 5.77e+05'."""
    from ..cause.where import axis_names, position_text
    lines = []
    for s in cause.samples:
        where = position_text(list(s.index), axis_names(len(s.index))) if s.index else "the only value"
        values = ", ".join(f"{dtype} {value_text(v)}" for dtype, v in s.recomputed.items())
        lines.append(f"at {where}: dumped {value_text(s.dumped)}; recomputed {values}")
    return lines
