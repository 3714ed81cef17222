"""Markdown: the same story as text (verdict, evidence with producers, spread, later origins, ranks, scan summary,
warnings), for issues and chat."""
from __future__ import annotations

from typing import List

from ..model import SUSPECT, Report, TensorSummary
from .text import (chain_label, coords_text, max_abs_text, op_label, parallel_text, range_used_text, rank_where,
                   rank_text, scan_summary, shape_text)

_TENSOR_HEADER = ["| slot | dtype | shape | max \\|x\\| | range used | nan | +inf | -inf | produced by |",
                  "|---|---|---|---|---|---|---|---|---|"]


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _row(t: TensorSummary) -> str:
    s = t.stats
    dtype = (t.dtype or "?") + (f" ({t.payload_dtype} bytes)" if t.payload_dtype else "")
    producer = "/".join((t.producer or "").rsplit("/", 2)[-2:])
    return (f"| {t.slot} | {dtype} | {shape_text(t.shape)} | {max_abs_text(s)} | {range_used_text(t)} | "
            f"{s.nan if s else '-'} | {s.posinf if s else '-'} | {s.neginf if s else '-'} | "
            f"{'`' + _cell(producer) + '`' if producer else ''} |")


def render_markdown(report: Report, top: int = 10) -> str:
    out: List[str] = ["# msoverflow report", ""]
    f = report.first
    if f is None and report.inconclusive:
        out.append(f"**Inconclusive**: no bad value seen, but {report.inconclusive[0]}")
        out += [f"- also: {reason}" for reason in report.inconclusive[1:]]
    elif f is None:
        out.append(f"**Clean**: no inf, NaN or out-of-range value in {report.files} files.")
    elif f.role == SUSPECT:
        out.append(f"**Anomaly** (flagged): the hardware flagged **{op_label(f)}** on "
                   f"{rank_where(f.rank, report)}, step "
                   f"{f.iteration}; its inputs were not dumped, so it may have received the bad value.")
    else:
        made = "first seen in" if f.role == "propagator" else "first created by"
        out.append(f"**Anomaly** ({f.kind}): {made} **{op_label(f)}** on {rank_where(f.rank, report)}, "
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
                out += ["", f"{title}:", ""] + _TENSOR_HEADER + [_row(t) for t in tensors]
        if f.flags or f.evidence:
            out.append("")
        for flag in f.flags:
            out.append(f"- overflow flag: {flag.unit} status {flag.status:#x} "
                       f"({', '.join(flag.status_words) or 'overflow'}) from `{flag.source}`")
        out += [f"- {e}" for e in f.evidence]
        if report.propagation:
            chain = [chain_label(p) for p in report.propagation]
            shown = chain[:8] + (["..."] + chain[-3:] if len(chain) > 11 else chain[8:])
            out += ["", f"Spread in step {f.iteration} through {len(chain)} ops: "
                    + " -> ".join(f"`{c}`" if c != "..." else c for c in [chain_label(f)] + shown)]
        later = report.anomalies[1:]
        if later:
            out += ["", f"Later origins ({len(later)}, time order):", ""]
            out += [f"- rank {a.rank} step {a.iteration} graph {a.graph}: {a.kind} in {op_label(a)}: {a.detail}"
                    for a in later[:top]]
            if len(later) > top:
                out.append(f"- ... {len(later) - top} more (--top N, or --format json)")
        if report.flagged:
            out += ["", "Flagged by the hardware, not decided:", ""]
            out += [f"- rank {a.rank} step {a.iteration}: {op_label(a)}: {a.detail}" for a in report.flagged[:top]]
        if report.coverage or report.inconclusive:
            out += ["", "Limits of this dump:", ""] + [f"- caveat: {c}" for c in report.coverage]
            out += [f"- also: {c}" for c in report.inconclusive]
    if report.rank_status:
        coords = any(r.coords for r in report.rank_status)
        out += ["", "Ranks:", "",
                "| rank | status | step | first bad op / how |" + (" coordinates |" if coords else ""),
                "|---|---|---|---|" + ("---|" if coords else "")]
        out += [f"| {r.rank_label} | {r.status} | {'-' if r.iteration is None else r.iteration} | "
                f"{rank_text(r).replace('|', '/')} |" + (f" {coords_text(r.coords) or '-'} |" if coords else "")
                for r in report.rank_status]
        if report.parallel:
            out += ["", f"Layout: {_cell(parallel_text(report.parallel))}."]
    if report.parameters:
        out += ["", f"Parameters hit ({len(report.parameters)}: first non-finite gradient or value, per rank):", "",
                "| rank | coordinates | step | parameter | shape | how |", "|---|---|---|---|---|---|"]
        out += [f"| {h.rank} | {coords_text(h.coords) or '-'} | {h.iteration} | `{_cell(h.name)}` | "
                f"{shape_text(h.shape)} | {_cell(h.how)} |" for h in report.parameters[:40]]
        if len(report.parameters) > 40:
            out.append(f"- ... {len(report.parameters) - 40} more (--format json lists all)")
    out += ["", scan_summary(report) + "."]
    if not report.tail_clean:
        out.append("Steps after the first origin were not scanned (--all scans every step).")
    if report.warnings:
        out += ["", f"Warnings ({len(report.warnings)}):", ""] + [f"- {w}" for w in report.warnings[:20]]
        if len(report.warnings) > 20:
            out.append(f"- ... {len(report.warnings) - 20} more (--format json lists all)")
    return "\n".join(out) + "\n"
