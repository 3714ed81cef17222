"""The analyze/hunt report page: its sections, in the order a reader needs them, around the plots.

Large dumps stay usable: every table and plot is capped (the `MAX_*` numbers) and says what it left out.
Renderers know only findings: Report in, text out.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

from ...model import Finding, Report, TensorSummary
from ..common import (
    arrival_text,
    cause_shown,
    cause_values_text,
    contained_text,
    coords_phrase,
    count_cell,
    counts_note,
    fixes_shown,
    handled_details,
    handled_text,
    history_lines,
    kind_shown,
    parallel_text,
    producer_text,
    provenance_text,
    ranks_shown,
    read_text,
    recompute_rows,
    recompute_title,
    sample_texts,
    scanned_text,
    steps_text,
    tensors_shown,
)
from ..text import max_abs_text, op_label, range_used_text, shape_text
from .page import CSS, STATUS_CLASS, Links, esc, finding_id, sample, verdict_card
from .plots import headroom_svg, history_svg, plot_settings, propagation_svg, timeline_svg

MAX_TENSOR_ROWS = 32          # per input/output table of a finding (the bad tensors first)
MAX_TABLE_ROWS = 200
MAX_WARNINGS = 300


# ---- HTML sections ---------------------------------------------------------------------------------------------

def _rank_table(report: Report) -> str:
    out = ['<section id="ranks"><h2>Ranks</h2>']
    if not report.rank_status:
        out.append('<p class="note">This report carries no per-rank status; ranks seen: '
                   f'{esc(steps_text(report.ranks))}.</p>')
        return "\n".join(out + ["</section>"])
    with_coords = any(s.coords for s in report.rank_status)
    out.append('<div class="scroll"><table id="rank-table"><thead><tr><th>rank</th><th>status</th><th>first bad step</th>'
               + ("<th>coords</th>" if with_coords else "")
               + '<th>first bad op</th><th>carried by (collective)</th><th>note</th></tr></thead><tbody>')
    shown, left_out = ranks_shown(report.rank_status, MAX_TABLE_ROWS * 4)
    for label, s in shown:
        op = f"{esc(s.op_type or '')} <code>{esc(s.op_name)}</code>" if s.op_name else esc(s.op_type or "-")
        out.append(f'<tr id="rank-{s.rank}" class="{STATUS_CLASS.get(s.status, "")}" data-rank="{s.rank}"'
                   + (f' data-ranks="{esc(label)}">' if label != str(s.rank) else ">")
                   + f'<td class="num">{esc(label)}</td>'
                   f'<td class="status">{esc(s.status)}</td>'
                   f'<td class="num">{"-" if s.step is None else s.step}</td>'
                   + (f'<td class="coords">{esc(coords_phrase(s.coords))}</td>' if with_coords else "")
                   + f'<td>{op}</td><td>{esc(s.via or "-")}</td><td>{esc(s.note)}</td></tr>')
    out.append("</tbody></table></div>")
    if left_out:
        out.append(f'<p class="note">{esc(left_out)}.</p>')
    if report.parallel:
        out.append(f'<p class="note">Layout: {esc(parallel_text(report.parallel))}.</p>')
    counts: Dict[str, int] = {}
    for s in report.rank_status:
        counts[s.status] = counts.get(s.status, 0) + 1
    out.append('<p class="note">' + ", ".join(f"{n} {esc(k)}" for k, n in counts.items()) + "</p></section>")
    return "\n".join(out)


def _harmless(report: Report, top: int, links: Links) -> str:
    """Contained values and overflows the loss scale handled: what they are, and why they are no fault."""
    strict = " (reported as findings: --strict)" if report.strict else ""
    out = []
    if report.contained:
        items = []
        for c in report.contained[:top]:
            source = (f" {links.file(c.source.file, c.source.file, c.source.line)} <code>{esc(c.source.code)}</code>"
                      if c.source else "")
            items.append(f"<li>{esc(contained_text(c))}{source}<ul class=\"note\">"
                         + "".join(f"<li>{esc(e)}</li>" for e in c.evidence) + "</ul></li>")
        more = len(report.contained) - top
        out.append(f'<section id="contained"><h2>Contained ({len(report.contained)}){esc(strict)}</h2><p class="note">'
                   "Non-finite values absorbed with finite outputs; they reach no loss, gradient, parameter or "
                   "optimizer state: not faults.</p><ul>" + "".join(items) + "</ul>"
                   + (f'<p class="note">{more} more: see --format json.</p>' if more > 0 else "") + "</section>")
    if report.handled:
        items = [f"<li>{esc(handled_text(h))}<ul class=\"note\">"
                 + "".join(f"<li>{esc(d)}</li>" for d in handled_details(h)) + "</ul></li>"
                 for h in report.handled[:top]]
        more = len(report.handled) - top
        out.append(f'<section id="handled"><h2>Handled by the loss scale ({len(report.handled)}){esc(strict)}</h2>'
                   '<p class="note">Overflows in the backward only whose updates were skipped, with later steps '
                   "recovering: a dynamic loss scale doing its job, not faults.</p><ul>" + "".join(items) + "</ul>"
                   + (f'<p class="note">{more} more: see --format json.</p>' if more > 0 else "") + "</section>")
    return "\n".join(out)


def _arrivals(report: Report) -> str:
    """Every arrival the Report carries (the timeline draws them; links from its markers land here)."""
    if not report.arrivals:
        return ""
    shown = report.arrivals[:MAX_TABLE_ROWS]
    items = "".join(f'<li id="arrival-{a.rank}-{a.step}" class="arrival" data-rank="{a.rank}" '
                    f'data-step="{a.step}" data-op="{esc(a.op_name)}">{esc(arrival_text(a))}</li>' for a in shown)
    more = len(report.arrivals) - len(shown)
    return (f'<section id="arrivals"><h2>Arrivals ({len(report.arrivals)})</h2><p class="note">A collective '
            "delivered a bad value to the rank (the first such collective of each rank's step).</p>"
            f'<ul>{items}</ul>' + (f'<p class="note">{more} more: see --format json.</p>' if more > 0 else "")
            + "</section>")


def _parameter_table(report: Report) -> str:
    """Per rank, the parameters whose gradient or value first went non-finite, and how (computed or received)."""
    if not report.parameters:
        return ""
    hits = report.parameters
    out = [f'<section id="parameters"><h2>Parameters hit ({len(hits)})</h2><div class="scroll"><table '
           'id="parameter-table"><thead><tr><th>rank</th><th>coordinates</th><th>step</th><th>parameter</th>'
           '<th>shape</th><th>how</th></tr></thead><tbody>']
    for h in hits[:MAX_TABLE_ROWS]:
        out.append(f'<tr><td class="num">{h.rank}</td><td>{esc(coords_phrase(h.coords) or "-")}</td>'
                   f'<td class="num">{h.step}</td><td><code>{esc(h.name)}</code></td>'
                   f'<td>{esc(shape_text(h.shape))}</td><td>{esc(h.how)}</td></tr>')
    out.append("</tbody></table></div>")
    if len(hits) > MAX_TABLE_ROWS:
        out.append(f'<p class="note">{len(hits) - MAX_TABLE_ROWS} more: see --format json.</p>')
    return "\n".join(out + ["</section>"])


def _plot_section(section_id: str, title: str, svg: Optional[str], note: str, more: str = "") -> str:
    """A plot, its note and what goes with it (`more`: the propagation's table); without a plot only `more`, or
    nothing at all (then the scan section says why the view is missing)."""
    if not svg and not more:
        return ""
    plot = f'<div class="plot">{svg}</div>' if svg else ""
    return f'<section id="{section_id}"><h2>{esc(title)}</h2>{plot}<p class="note">{esc(note)}</p>{more}</section>'


def _tensor_table(title: str, tensors: List[TensorSummary], links: Links) -> str:
    rows = []
    shown, left_out = tensors_shown(tensors, MAX_TENSOR_ROWS)
    for t in shown:
        s = t.stats
        dtype = (t.dtype or "?") + (f" ({t.payload_dtype} bytes)" if t.payload_dtype else "")
        bad = s is not None and s.bad
        producer = producer_text(t)
        rows.append(f'<tr><td class="num">{t.slot}</td><td>{esc(dtype)}</td><td>{esc(shape_text(t.shape))}</td>'
                    f'<td class="num{" bad" if bad else ""}">{esc(max_abs_text(s))}</td>'
                    f'<td class="num">{esc(range_used_text(t, 1))}</td>'
                    f'<td class="num">{esc(count_cell(s, "nan"))}</td><td class="num">{esc(count_cell(s, "posinf"))}'
                    f'</td><td class="num">{esc(count_cell(s, "neginf"))}</td><td>{esc(producer)}</td>'
                    f'<td>{links.file(t.file)}</td></tr>')
    notes = [n for n in (left_out, counts_note(shown)) if n]
    return (f"<table><caption style='text-align:left'>{esc(title)}</caption><thead><tr><th>slot</th><th>dtype</th>"
            "<th>shape</th><th>max |x|</th><th>range used</th><th>nan</th><th>+inf</th><th>-inf</th>"
            "<th>produced by</th><th>file</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
            + "".join(f'<p class="note">{esc(n)}</p>' for n in notes))


def _finding_block(f: Finding, index: int, links: Links, report: Optional[Report] = None) -> str:
    out = [f'<article id="{finding_id(index)}" class="finding"><h3>{"First origin" if index == 0 else "Origin"}: '
           f'{esc(op_label(f))} <span class="note">(rank {f.rank}, step {f.step}, graph {esc(f.graph)})</span>'
           "</h3>", f"<p>{esc(f.detail)}</p>",
           f'<p>op <code>{esc(f.full_name or f.op_name)}</code>'
           + (f" · saved graph {links.file(f.ir_file, None, f.ir_line)}" if f.ir_file else "")
           + (f" · source {links.file(f.source.file, f.source.file, f.source.line)}" if f.source else "") + "</p>"]
    if f.inputs:
        out.append(_tensor_table("inputs", f.inputs, links))
    if f.outputs:
        out.append(_tensor_table("outputs", f.outputs, links))
    if f.flags:
        out.append("<ul>" + "".join(
            f"<li>hardware overflow flag: {esc(r.unit)} status {r.status:#x} "
            f"({esc(', '.join(r.status_words) or 'overflow')}) from {links.file(r.source)}</li>" for r in f.flags)
            + "</ul>")
    if f.evidence:
        out.append("<ul>" + "".join(f"<li>{esc(item)}</li>" for item in f.evidence) + "</ul>")
    shown = cause_shown(report, f) if report is not None else None
    if shown is not None and (f.cause is None or shown[0] != f.cause.cause):
        out.append(f'<p><strong>cause: {esc(shown[0])}</strong> · {esc(shown[1])}</p>')
    if f.cause is not None:
        out.append(_cause_block(f.cause, recompute_only=shown is not None and shown[0] != f.cause.cause))
    fixes = fixes_shown(report, f) if report is not None else ([f.recommendation] if f.recommendation else [])
    out += [f"<p><strong>fix:</strong> {esc(fix)}</p>" for fix in fixes]
    out.append("</article>")
    return "\n".join(out)


def _cause_block(cause, recompute_only: bool = False) -> str:
    """The cause of an origin: what the recompute showed, per precision, and the bad values beside the recomputed
    ones. recompute_only: the report's conclusion names another cause (the op's recompute is shown as such)."""
    label = "op's recompute" if recompute_only else "cause"
    out = [f'<div class="cause"><p><strong>{label}: {esc(cause.cause)}</strong> · {esc(cause.reason)}</p>']
    if cause.recompute:
        rows = "".join("<tr>" + "".join(f"<td>{esc(cell)}</td>" for cell in row) + "</tr>"
                       for row in recompute_rows(cause))
        out.append(f"<table><caption style='text-align:left'>{esc(recompute_title(cause))}</caption><thead><tr>"
                   "<th>dtype</th><th>finite</th><th>max |x|</th><th>agrees with the dump</th></tr></thead><tbody>"
                   + rows + "</tbody></table>")
    items = sample_texts(cause) + ([cause_values_text(cause)] if cause_values_text(cause) else []) + cause.evidence
    if items:
        out.append("<ul>" + "".join(f"<li>{esc(item)}</li>" for item in items) + "</ul>")
    out.append("</div>")
    return "\n".join(out)


def _evidence(report: Report, top: int, links: Links) -> str:
    if not report.anomalies:
        return ""
    shown = report.anomalies[:top + 1]
    out = ['<section id="evidence"><h2>Evidence</h2>']
    out += [_finding_block(f, i, links, report) for i, f in enumerate(shown)]
    if len(report.anomalies) > len(shown):
        out.append(f'<p class="note">{len(report.anomalies) - len(shown)} more origins: listed below, '
                   "full evidence in --format json.</p>")
    out.append("</section>")
    return "\n".join(out)


def _origins_table(report: Report) -> str:
    if len(report.anomalies) < 2:
        return ""
    rows = []
    for i, f in enumerate(report.anomalies[:MAX_TABLE_ROWS]):
        rows.append(f'<tr><td class="num">{i + 1}</td><td class="num">{f.rank}</td><td class="num">{f.step}</td>'
                    f'<td>{esc(kind_shown(f))}</td><td><a href="#{finding_id(i)}">{esc(f.op_type)}</a></td>'
                    f'<td>{esc(f.cell or f.cell_type or "-")}</td><td>{esc(f.cause.cause if f.cause else "-")}</td>'
                    f'<td>{esc(f.detail)}</td></tr>')
    more = len(report.anomalies) - MAX_TABLE_ROWS
    return ('<section id="origins"><h2>All origins (time order per rank, ranks by step)</h2><table><thead><tr>'
            "<th>#</th><th>rank</th><th>step</th><th>kind</th><th>op</th><th>Cell</th><th>cause</th><th>what</th>"
            "</tr></thead>"
            "<tbody>" + "".join(rows) + "</tbody></table>"
            + (f'<p class="note">{more} more: see --format json.</p>' if more > 0 else "") + "</section>")


def _flagged_table(report: Report) -> str:
    flagged = getattr(report, "flagged", None) or []
    if not flagged:
        return ""
    rows = "".join(f'<tr><td class="num">{f.rank}</td><td class="num">{f.step}</td><td>{esc(op_label(f))}</td>'
                   f'<td>{esc(f.detail)}</td></tr>' for f in flagged[:MAX_TABLE_ROWS])
    more = len(flagged) - MAX_TABLE_ROWS
    return ('<section id="flagged"><h2>Flagged by the hardware, not decided</h2><p class="note">The inputs that '
            "would tell whether these ops created the bad value or received it were not dumped.</p><table><thead>"
            "<tr><th>rank</th><th>step</th><th>op</th><th>what</th></tr></thead><tbody>" + rows + "</tbody></table>"
            + (f'<p class="note">{more} more: see --format json.</p>' if more > 0 else "") + "</section>")


def _propagation_table(report: Report, graph_drawn: bool) -> str:
    """Every op the origin reached (evenly sampled past MAX_TABLE_ROWS); open when no graph was drawn."""
    if not report.propagation:
        return ""
    shown = sample(report.propagation, MAX_TABLE_ROWS)
    rows = "".join(f'<tr><td>{esc(p.op_type)}</td><td>{esc(p.cell or p.cell_type or "-")}</td><td>{esc(p.kind)}</td>'
                   f'<td><code>{esc(p.full_name or p.op_name)}</code></td></tr>' for p in shown)
    note = (f'<p class="note">{len(shown)} of {len(report.propagation)} ops shown (evenly sampled).</p>'
            if len(shown) < len(report.propagation) else "")
    return (f'<details id="propagation-list"{"" if graph_drawn else " open"}><summary>The {len(report.propagation)} '
            f"ops the first origin reached in its step</summary><table><thead><tr><th>op</th><th>Cell</th><th>kind</th><th>name</th></tr>"
            f"</thead><tbody>{rows}</tbody></table>{note}</details>")


def _scan_section(report: Report, not_drawn: List[Tuple[str, str]], links: Links) -> str:
    meta = report.extra.get("mindspore") or {}
    written_by = f", MindSpore {meta['version']} {meta.get('device_target') or ''}" if meta.get("version") else ""
    per_rank = "; ".join(f"rank {r}: {steps_text(v)}" for r, v in sorted(report.iterations.items())[:64])
    read = (f"{esc(read_text(report))} (hunt, no dump files)" if report.layout == "hunt" and not report.files else
            f"{report.files} files ({esc(report.layout or 'unknown')} layout{esc(written_by)}), "
            f"{report.tensors_read} tensors read")
    items = [read,
             f"ranks {esc(steps_text(report.ranks))}; steps present: {esc(per_rank)}",
             f'<span id="scanned-steps">{esc(scanned_text(report))}</span>',
             f"hardware overflow records: {len(report.overflow_records)}"]
    if not report.tail_clean:
        items.append("steps after the first origin were not scanned (--all scans every step)")
    items += [f'<span class="not-drawn" data-view="{view}">no {view} drawn: {esc(why)}</span>'
              for view, why in not_drawn]
    out = ['<section id="scan"><h2>What was scanned</h2><ul>'] + [f"<li>{i}</li>" for i in items] + ["</ul>"]
    if report.coverage:
        out.append('<div id="coverage"><h3>Coverage: what this dump could not show</h3><ul>'
                   + "".join(f"<li>{esc(c)}</li>" for c in report.coverage) + "</ul></div>")
    if report.inconclusive:
        out.append('<div id="inconclusive"><h3>Not understood or not read</h3><ul>'
                   + "".join(f"<li>{esc(c)}</li>" for c in report.inconclusive) + "</ul></div>")
    out.append(f'<p class="note">dump directory: {links.file(report.dump_dir, report.dump_dir, folder=True)}</p>')
    out.append(links.note() + "</section>")     # last: every section before it has made its links
    return "\n".join(out)


def _provenance(report: Report) -> str:
    text = provenance_text(report)
    return (f'<footer id="provenance" class="note"><p>Made by {esc(text)}</p></footer>' if text else "")


def _warnings(report: Report) -> str:
    if not report.warnings:
        return '<section id="warnings"><h2>Warnings</h2><p class="note">none</p></section>'
    shown = report.warnings[:MAX_WARNINGS]
    more = len(report.warnings) - len(shown)
    return (f'<section id="warnings"><h2>Warnings ({len(report.warnings)})</h2><details open><summary>show</summary>'
            '<ul class="warn">' + "".join(f"<li>{esc(w)}</li>" for w in shown) + "</ul>"
            + (f'<p class="note">{more} more: see --format json.</p>' if more > 0 else "") + "</details></section>")


def render_html(report: Report, top: int = 10, page_dir: Optional[str] = None) -> str:
    """The page; links to files under page_dir (the folder the page is written to; default: the current one) are
    relative, other files are named and the page says it could not link them."""
    links = Links(page_dir)
    title = "msoverflow: " + (f"{kind_shown(report.first)} in {report.first.op_type}" if report.first else report.verdict)
    not_drawn = []          # (view, why)
    with plot_settings():
        views = [("timeline", "Timeline", *timeline_svg(report, top))]
        if report.first is not None:
            views += [("propagation", "Propagation from the origin", *propagation_svg(report)),
                      ("headroom", "Headroom: max |x| against the dtype's limits", *headroom_svg(report))]
        if report.first is not None and report.first.history is not None:
            views.append(("history", "Since when", *history_svg(report)))
    sections = [verdict_card(report, links), _harmless(report, top, links), _rank_table(report),
                _parameter_table(report), _arrivals(report)]
    for section_id, heading, svg, note in views:
        more = _propagation_table(report, svg is not None) if section_id == "propagation" else ""
        if section_id == "history" and report.first is not None and report.first.history is not None:
            more = "<ul>" + "".join(f"<li>{esc(line)}</li>" for line in history_lines(report.first.history)) + "</ul>"
        sections.append(_plot_section(section_id, heading, svg, note, more))
        if not svg and not more:
            not_drawn.append((section_id, note))
    sections += [_evidence(report, top, links), _origins_table(report), _flagged_table(report), _warnings(report),
                 _scan_section(report, not_drawn, links), _provenance(report)]
    nav = " ".join(f'<a href="#{s}">{s}</a>' for s in re.findall(r'<section id="([a-z-]+)"', "".join(sections)))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>"
            f"<h1>msoverflow report</h1><p class=\"note\">{esc(report.dump_dir)}</p><nav>{nav}</nav>\n"
            + "\n".join(s for s in sections if s) + "\n</main></body></html>\n")
