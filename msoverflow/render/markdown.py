"""Markdown: the same story as text, for issues and chat."""
from __future__ import annotations

from typing import List

from ..model import SUSPECT, Report, TensorSummary
from .text import op_label, rank_text, shape_text


def _row(t: TensorSummary) -> str:
    s = t.stats
    g = (lambda x: "-" if x is None else f"{x:.4g}")
    return (f"| {t.slot} | {t.dtype or '?'}{' (' + t.payload_dtype + ' bytes)' if t.payload_dtype else ''} | "
            f"{shape_text(t.shape)} | {g(s.max_abs if s else None)} | "
            f"{f'{t.headroom:.0%}' if t.headroom is not None else '-'} | {s.nan if s else '-'} | "
            f"{s.posinf if s else '-'} | {s.neginf if s else '-'} |")


def render_markdown(report: Report, top: int = 10) -> str:
    out: List[str] = ["# msoverflow report", ""]
    f = report.first
    if f is None and report.inconclusive:
        out.append(f"**Inconclusive**: no bad value seen, but {report.inconclusive[0]}")
        out += [f"- also: {reason}" for reason in report.inconclusive[1:]]
    elif f is None:
        out.append(f"**Clean**: no inf, NaN or out-of-range value in {report.files} files.")
    elif f.role == SUSPECT:
        out.append(f"**Anomaly** (flagged): the hardware flagged **{op_label(f)}** on rank {f.rank}, step "
                   f"{f.iteration}; its inputs were not dumped, so it may have received the bad value.")
    else:
        made = "first seen in" if f.role == "propagator" else "first created by"
        out.append(f"**Anomaly** ({f.kind}): {made} **{op_label(f)}** on rank {f.rank}, "
                   f"step {f.iteration}, graph {f.graph}.")
    if f is None:
        out += [f"- caveat: {limit}" for limit in report.coverage]
    else:
        out.append("")
        out.append(f"- what: {f.detail}")
        if f.source:
            out.append(f"- source: `{f.source.file}:{f.source.line}` `{f.source.code}`")
        out.append(f"- op: `{f.full_name or f.op_name}`")
        if f.recommendation:
            out.append(f"- fix: {f.recommendation}")
        for title, tensors in (("Inputs", f.inputs), ("Outputs", f.outputs)):
            if tensors:
                out += ["", f"{title}:", "", "| slot | dtype | shape | max abs | of max | nan | +inf | -inf |",
                        "|---|---|---|---|---|---|---|---|"] + [_row(t) for t in tensors]
        if f.evidence:
            out += [""] + [f"- {e}" for e in f.evidence]
        if len(report.anomalies) > 1:
            out += ["", "Later origins:", ""]
            out += [f"- rank {a.rank} step {a.iteration}: {a.kind} in {op_label(a)}: {a.detail}"
                    for a in report.anomalies[1:top + 1]]
        if report.flagged:
            out += ["", "Flagged by the hardware, not decided:", ""]
            out += [f"- rank {a.rank} step {a.iteration}: {op_label(a)}: {a.detail}" for a in report.flagged[:top]]
        if report.coverage or report.inconclusive:
            out += ["", "Limits of this dump:", ""] + [f"- caveat: {c}" for c in report.coverage]
            out += [f"- also: {c}" for c in report.inconclusive]
    if report.rank_status:
        out += ["", "Ranks:", "", "| rank | status | step | first bad op / how |", "|---|---|---|---|"]
        out += [f"| {r.rank} | {r.status} | {'-' if r.iteration is None else r.iteration} | "
                f"{rank_text(r).replace('|', '/')} |" for r in report.rank_status]
    if report.warnings:
        out += ["", f"Warnings ({len(report.warnings)}):", ""] + [f"- {w}" for w in report.warnings[:20]]
    return "\n".join(out) + "\n"
