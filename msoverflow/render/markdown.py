"""Markdown: the same story as text (verdict, evidence with producers, spread, later origins, ranks, arrivals, steps
scanned, warnings, provenance), for issues and chat. Every name from the dump goes through render/safe.py: a report
pasted into an issue tracker shows the dump's `<img>` as text and never renders it."""
from __future__ import annotations

from typing import TYPE_CHECKING, List

from ..model import SUSPECT
from .common import (
    arrival_text,
    arrivals_shown,
    cause_shown,
    cause_values_text,
    clean_text,
    contained_text,
    coords_phrase,
    count_cell,
    counts_note,
    fixes_shown,
    handled_details,
    handled_text,
    history_lines,
    inconclusive_lead,
    kind_shown,
    made_shown,
    parallel_text,
    parameters_shown,
    producer_text,
    provenance_text,
    rank_where,
    ranks_shown,
    recompute_rows,
    recompute_shown,
    recompute_title,
    sample_texts,
    scanned_text,
    tensors_shown,
)
from .safe import md, md_code
from .text import chain_label, max_abs_text, op_label, range_used_text, rank_text, scan_summary, shape_text

if TYPE_CHECKING:
    from ..model import Report, TensorSummary

_TENSOR_HEADER = ["| slot | dtype | shape | max \\|x\\| | range used | nan | +inf | -inf | produced by |",
                  "|---|---|---|---|---|---|---|---|---|"]


def _row(t: TensorSummary) -> str:
    s = t.stats
    dtype = (t.dtype or "?") + (f" ({t.payload_dtype} bytes)" if t.payload_dtype else "")
    producer = producer_text(t)
    return (f"| {t.slot} | {md(dtype)} | {md(shape_text(t.shape))} | {max_abs_text(s)} | {range_used_text(t)} | "
            f"{count_cell(s, 'nan')} | {count_cell(s, 'posinf')} | {count_cell(s, 'neginf')} | "
            f"{md_code(producer, table=True) if producer else ''} |")


def _tensor_block(title: str, tensors: List[TensorSummary]) -> List[str]:
    shown, left_out = tensors_shown(tensors)
    out = ["", f"{title}:", ""] + _TENSOR_HEADER + [_row(t) for t in shown]
    note = counts_note(shown)
    out += ([""] if left_out or note else []) + ([f"- ... {left_out}"] if left_out else [])
    return out + ([f"- {note}"] if note else [])


def _cause_block(cause) -> List[str]:
    out: List[str] = []
    if cause.recompute:
        title = recompute_title(cause)
        out += ["", f"{md(title[:1].upper() + title[1:])}:", "", "| dtype | finite | max abs | agrees with the dump |",
                "|---|---|---|---|"]
        out += ["| " + " | ".join(md(cell) for cell in row) + " |" for row in recompute_rows(cause)]
        out += [""] + [f"- {md(text)}" for text in sample_texts(cause)]
    if cause.evidence:
        out += [""] + [f"- {md(e)}" for e in cause.evidence]
    return out


def _harmless(report: Report, top: int) -> List[str]:
    """Non-finite values that are no fault: contained ones, and overflows the loss scale handled."""
    out: List[str] = []
    strict = " (reported as findings: --strict)" if report.strict else ""
    if report.contained:
        out += ["", f"Contained ({len(report.contained)}: absorbed with finite outputs; they reach no loss, gradient, "
                    f"parameter or optimizer state){strict}:", ""]
        for c in report.contained[:top]:
            out.append(f"- {md(contained_text(c))}"
                       + (f": {md_code(f'{c.source.file}:{c.source.line}')} {md_code(c.source.code)}"
                          if c.source else ""))
        if len(report.contained) > top:
            out.append(f"- ... {len(report.contained) - top} more (--top N, or --format json)")
    if report.handled:
        out += ["", f"Handled by the loss scale ({len(report.handled)}: backward only, updates skipped, later steps "
                    f"recover){strict}:", ""]
        for h in report.handled[:top]:
            out.append(f"- {md(handled_text(h))}")
            out += [f"  - {md(detail)}" for detail in handled_details(h)]
        if len(report.handled) > top:
            out.append(f"- ... {len(report.handled) - top} more (--top N, or --format json)")
    return out


def render_markdown(report: Report, top: int = 10) -> str:
    out: List[str] = ["# msoverflow report", ""]
    f = report.first
    if f is None and report.inconclusive:
        out.append(f"**Inconclusive**: {md(inconclusive_lead(report))}{md(report.inconclusive[0])}")
        out += [f"- also: {md(reason)}" for reason in report.inconclusive[1:]]
    elif f is None:
        out.append(f"**Clean**: {md(clean_text(report))}.")
    elif f.role == SUSPECT:
        out.append(f"**Anomaly** (flagged): the hardware flagged **{md(op_label(f))}** on "
                   f"{md(rank_where(f.rank, report))}, step "
                   f"{f.step}; its inputs were not dumped, so it may have received the bad value.")
    else:
        out.append(f"**Anomaly** ({md(kind_shown(f))}): {made_shown(f)} **{md(op_label(f))}** on "
                   f"{md(rank_where(f.rank, report))}, "
                   f"step {f.step}, graph {md(f.graph)}.")
    if f is None:
        out += [f"- caveat: {md(limit)}" for limit in report.coverage]
    else:
        out.append("")
        out.append(f"- what: {md(f.detail)}")
        if f.source:
            out.append(f"- source: {md_code(f'{f.source.file}:{f.source.line}')} {md_code(f.source.code)}")
        said, recomputed = cause_shown(report, f), recompute_shown(report, f)
        if said is not None:
            out.append(f"- cause: **{md(said[0])}**: {md(said[1])}")
        if recomputed is not None:
            out.append(f"- op's recompute: **{md(recomputed.cause)}**: {md(recomputed.reason)}")
        if f.cause is not None:
            if cause_values_text(f.cause):
                out.append(f"- values: {md(cause_values_text(f.cause))}")
        out.append(f"- op: {md_code(f.full_name or f.op_name)}")
        out += [f"- fix: {md(fix)}" for fix in fixes_shown(report, f)]
        for title, tensors in (("Inputs", f.inputs), ("Outputs", f.outputs)):
            if tensors:
                out += _tensor_block(title, tensors)
        if f.flags or f.evidence:
            out.append("")
        for flag in f.flags:
            out.append(f"- overflow flag: {md(flag.unit)} status {flag.status:#x} "
                       f"({md(', '.join(flag.status_words) or 'overflow')}) from {md_code(flag.source)}")
        out += [f"- {md(e)}" for e in f.evidence[:top * 4]]
        if f.cause is not None:
            out += _cause_block(f.cause)
        if report.propagation:
            chain = [chain_label(p) for p in report.propagation]
            shown = chain[:8] + (["..."] + chain[-3:] if len(chain) > 11 else chain[8:])
            out += ["", f"Spread in step {f.step} through {len(chain)} ops: "
                    + " -> ".join(md_code(c) if c != "..." else c for c in [chain_label(f)] + shown)]
        if f.history is not None:
            out += ["", f"Since when: {md(f.history.summary)}", ""]
            out += [f"- {md(line)}" for line in history_lines(f.history)]
        later = report.anomalies[1:]
        if later:
            out += ["", f"Later origins ({len(later)}, time order):", ""]
            out += [f"- rank {a.rank} step {a.step} graph {md(a.graph)}: {md(a.kind)} in {md(op_label(a))}: "
                    f"{md(a.detail)}" + (f" (cause: {md(a.cause.cause)})" if a.cause is not None else "")
                    for a in later[:top]]
            if len(later) > top:
                out.append(f"- ... {len(later) - top} more (--top N, or --format json)")
        if report.flagged:
            out += ["", "Flagged by the hardware, not decided:", ""]
            out += [f"- rank {a.rank} step {a.step}: {md(op_label(a))}: {md(a.detail)}"
                    for a in report.flagged[:top]]
            if len(report.flagged) > top:
                out.append(f"- ... {len(report.flagged) - top} more (--top N, or --format json)")
        if report.coverage or report.inconclusive:
            out += ["", "Limits of this dump:", ""] + [f"- caveat: {md(c)}" for c in report.coverage]
            out += [f"- also: {md(c)}" for c in report.inconclusive]
    out += _harmless(report, top)
    if report.rank_status:
        with_coords = any(r.coords for r in report.rank_status)
        shown_ranks, left_out = ranks_shown(report.rank_status)
        out += ["", "Ranks:", "", "| rank | status | step |" + (" coords |" if with_coords else "")
                + " first bad op / how |", "|---|---|---|" + ("---|" if with_coords else "") + "---|"]
        out += [f"| {label} | {md(r.status)} | {'-' if r.step is None else r.step} | "
                + (f"{md(coords_phrase(r.coords))} | " if with_coords else "") + f"{md(rank_text(r))} |"
                for label, r in shown_ranks]
        if left_out:
            out += ["", f"- ... {md(left_out)}"]
        if report.parallel:
            out += ["", f"Layout: {md(parallel_text(report.parallel))}."]
    if report.parameters:
        shown_hits, left_out = parameters_shown(report)
        out += ["", f"Parameters hit ({len(report.parameters)}: first non-finite gradient or value, per rank):", "",
                "| rank | coordinates | step | parameter | shape | how |", "|---|---|---|---|---|---|"]
        out += [f"| {h.rank} | {md(coords_phrase(h.coords) or '-')} | {h.step} | {md_code(h.name, table=True)} | "
                f"{md(shape_text(h.shape))} | {md(h.how)} |" for h in shown_hits]
        if left_out:
            out += ["", f"- ... {md(left_out)}"]
    if report.arrivals:
        shown_arrivals, left_out = arrivals_shown(report)
        out += ["", f"Arrivals ({len(report.arrivals)}: a collective delivered a bad value to the rank):", ""]
        out += [f"- {md(arrival_text(a))}" for a in shown_arrivals]
        if left_out:
            out.append(f"- ... {left_out}")
    out += ["", md(scan_summary(report)) + ".", "", md(scanned_text(report).capitalize()) + "."]
    if not report.tail_clean:
        out.append("Steps after the first origin were not scanned (--all scans every step).")
    if report.warnings:
        out += ["", f"Warnings ({len(report.warnings)}):", ""] + [f"- {md(w)}" for w in report.warnings[:20]]
        if len(report.warnings) > 20:
            out.append(f"- ... {len(report.warnings) - 20} more (--format json lists all)")
    provenance = provenance_text(report)
    if provenance:
        out += ["", f"Made by {md(provenance)}."]
    return "\n".join(out) + "\n"
