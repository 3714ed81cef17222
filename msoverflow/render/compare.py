"""Renderers of `msoverflow compare`: Comparison in, text out (text, markdown, JSON, HTML).

JSON schema: msoverflow/schema/compare.schema.json. The HTML page reuses the analyze report's safe helpers (every
string from a dump escaped; matplotlib SVG inline, no script).
"""
from __future__ import annotations

import json
import math
import os
from typing import List, Optional

from ..comparison import Comparison, OpDiff, TensorDiff, comparison_dict
from .common import parallel_text, provenance_text, rank_phrase
from .safe import md, md_code, plain, plot_label

MAX_UNMATCHED_SHOWN = 20
MAX_PLOT_PANELS = 4
MAX_PLOT_CELLS = 16
# Cells of the error plot: ten colours (matplotlib's tab10) and seven markers, cycled together, so that the first
# seventy Cells each get a pair no other has
SERIES_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
                 "#17becf")
SERIES_MARKERS = ("o", "s", "^", "D", "v", "P", "X")



def matched_text(c) -> str:
    """The matched op runs counted against both sides (a cut or filtered side shows in either count)."""
    return (f"Matched {c.matched_ops} of {c.baseline_ops} baseline op runs and {c.matched_ops} of {c.target_ops} "
            "target op runs")

def render_compare_json(c: Comparison) -> str:
    from ..safeio import json_safe
    return json.dumps(json_safe(comparison_dict(c)), indent=2, allow_nan=False) + "\n"


# ---- words shared by text and markdown -------------------------------------------------------------------------

def _g(x: Optional[float], digits: int = 4) -> str:
    if x is None:
        return "-"
    if x == math.inf:
        return "inf"
    return f"{x:.{digits}g}"


def cosine_text(x: Optional[float]) -> str:
    """Seven significant digits, or 1 - (1 - cosine) when those would round to 1 (0.9999999564 is `1 - 4.4e-08`,
    never `1`); "-" without one (a single value, statistics only)."""
    if x is None:
        return "-"
    text = f"{x:.7g}"
    if abs(float(text)) != 1.0 or abs(x) == 1.0:
        return text
    return f"1 - {1.0 - x:.2g}" if x > 0 else f"-1 + {1.0 + x:.2g}"


def error_text(error_ulps: Optional[float], ulp_dtype: Optional[str], max_abs: Optional[float],
               nonfinite_differ: int = 0) -> str:
    """The error in the compared dtype's ulps; "exact match" when every element is equal; a tensor compared
    exactly (integers, bool) by how far apart it is."""
    special = f"{nonfinite_differ} inf/NaN differ" if nonfinite_differ else ""
    if error_ulps is None:
        return special or "-"
    if max_abs == 0.0:
        return f"{special}; the rest an exact match" if special else "exact match"
    measured = f"{_g(error_ulps)} ulps of {ulp_dtype}" if ulp_dtype else f"differs by {_g(max_abs)} (compared exactly)"
    return f"{special}; {measured}" if special else measured


def _tensor_error(t: TensorDiff) -> str:
    return error_text(t.error_ulps, t.ulp_dtype, t.max_abs_error, t.nonfinite_differ)


def _op_error(op: OpDiff) -> str:
    return error_text(op.error_ulps, op.ulp_dtype, op.max_abs_error, op.nonfinite_differ)


WORST_ORDER = ("inf/NaN mismatches first, then where the runs part, then by the error for the values' size over "
               "what the op's inputs carry")


def headline(c: Comparison) -> str:
    if c.verdict == "diverged":
        f = c.first_divergence
        assert f is not None            # a diverged comparison names its first divergence
        return f"DIVERGED: first at {f.op_type}, {rank_phrase(f.rank, f.coords)}, step {f.step}"
    if c.verdict == "equivalent" and c.within_precision_ops:
        return (f"EQUIVALENT within precision: {c.matched_ops} matched op runs agree, {c.within_precision_ops} of "
                f"them within their rounding budget ({c.tensors_compared} tensors compared)")
    if c.verdict == "equivalent":
        return (f"EQUIVALENT: {c.matched_ops} matched op runs agree within {_g(c.tolerance_ulps)} ulps "
                f"({c.tensors_compared} tensors compared)")
    more = len(c.reasons) - 1
    return "INCONCLUSIVE: " + (c.reasons[0] if c.reasons else "") + (
        f" (and {more} more reason{'s' if more > 1 else ''} below)" if more > 0 else "")


def later_reasons(c: Comparison) -> List[str]:
    """The reasons the headline does not give (it gives the first): each reason is said once."""
    return c.reasons[1:]


def _role_text(op: OpDiff) -> str:
    return {"origin": "its inputs from earlier ops agree, its outputs do not: the runs part here",
            "received": "a collective whose own inputs agree: the difference came from another rank",
            "propagator": "an input already differs"}.get(op.role or "", "")


def tensor_line(t: TensorDiff) -> str:
    dtypes = t.baseline_dtype if t.baseline_dtype == t.target_dtype else f"{t.baseline_dtype} -> {t.target_dtype}"
    state = {True: "agrees", False: "DIFFERS", None: "not compared"}[t.agree]
    metrics = "exact match" if t.exact else (
        f"max abs err {_g(t.max_abs_error)}, max rel err {_g(t.max_rel_error)}, "
        + (f"cosine {cosine_text(t.cosine)}, " if t.cosine is not None else "") + _tensor_error(t))
    extra = "; statistics only (min, max)" if t.statistics_only else ""
    return (f"{t.io} {t.slot} [{dtypes}] {state}: {metrics}{extra}" + (f"; {t.note}" if t.note else ""))


def _unmatched_lines(c: Comparison) -> List[str]:
    lines = []
    for side in ("baseline", "target"):
        n = c.unmatched_counts.get(side, 0)
        if n:
            ops = [u for u in c.unmatched if u.side == side]
            kinds: dict = {}
            for u in ops:
                kinds[u.op_type] = kinds.get(u.op_type, 0) + 1
            lines.append(f"{n} op run(s) only in the {side}: "
                         + ", ".join(f"{k} x{v}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])[:12]))
    return lines


def render_compare_text(c: Comparison) -> str:
    out = [headline(c), f"baseline: {c.baseline}", f"target:   {c.target}", ""]
    f = c.first_divergence
    if f is not None:
        out.append(f"First divergence: {f.op_type} {f.op_name}")
        out.append(f"  {rank_phrase(f.rank, f.coords)}, step {f.step}, graph {f.graph}, op {f.position + 1} "
                   "of the step in the baseline's order")
        if f.cell or f.cell_type:
            out.append(f"  Cell: {f.cell or '?'} ({f.cell_type or '?'})")
        if f.source:
            out.append(f"  source: {f.source.file}:{f.source.line}: {f.source.code}")
        if f.dtype_change:
            out.append(f"  dtype: {f.dtype_change}")
        out.append(f"  why: {_role_text(f)}" + (f" ({f.note})" if f.note else ""))
        for t in f.inputs + f.outputs:
            out.append("    " + tensor_line(t))
        files = [t for t in f.outputs if t.agree is False][:1]
        for t in files:
            out.append(f"  files: {t.baseline_file}")
            out.append(f"         {t.target_file}")
        out.append("")
    if c.worst:
        out.append(f"Largest differences ({len(c.worst)} of {c.diverged_ops} op runs that differ; {WORST_ORDER}):")
        out.append(f"  {'#':>3}  {'max abs err':>11}  {'max rel err':>11}  {'error':<26} {'role':<10} where, op")
        for i, op in enumerate(c.worst, 1):
            out.append(f"  {i:>3}  {_g(op.max_abs_error):>11}  {_g(op.max_rel_error):>11}  {_op_error(op):<26} "
                       f"{op.role:<10} {rank_phrase(op.rank, op.coords)} step {op.step}: {op.op_type} {op.op_name}")
        out.append("")
    unmatched = _unmatched_lines(c)
    if unmatched:
        out.append("Present on one side only (reported, not fatal):")
        out += ["  " + line for line in unmatched]
        out.append("")
    out.append(f"{matched_text(c)} in {len(c.units)} (rank, step) unit(s); {c.tensors_compared} tensors compared; "
               f"tolerance {_g(c.tolerance_ulps)} ulps.")
    if c.parallel:
        out.append(f"layout: {parallel_text(c.parallel)}")
    for line in c.caveats:
        out.append(f"caveat: {line}")
    for line in later_reasons(c):
        out.append(f"inconclusive: {line}")
    if c.warnings:
        out.append(f"{len(c.warnings)} warning(s) (--format json lists them)")
    if provenance_text(c):
        out.append(f"-- {provenance_text(c)}")
    return "\n".join(plain(line) for line in out) + "\n"     # names from a dump never drive the terminal


def render_compare_markdown(c: Comparison) -> str:
    out = [f"# msoverflow compare: {c.verdict}", "", f"**{md(headline(c))}**", "",
           f"- baseline: {md_code(c.baseline)}", f"- target: {md_code(c.target)}", ""]
    f = c.first_divergence
    if f is not None:
        out += ["## First divergence", "", "| | |", "|---|---|",
                f"| op | {md_code(f.op_type, True)} {md_code(f.op_name, True)} |",
                f"| where | {md(rank_phrase(f.rank, f.coords))}, step {f.step} |",
                f"| Cell | {md(f.cell)} ({md(f.cell_type)}) |"]
        if f.source:
            out.append(f"| source | {md_code(f'{f.source.file}:{f.source.line}', True)} {md_code(f.source.code, True)} |")
        if f.dtype_change:
            out.append(f"| dtype | {md(f.dtype_change)} |")
        out += [f"| why | {md(_role_text(f))} {md(f.note)} |", "",
                "| tensor | dtypes | agrees | max abs err | max rel err | cosine | error | file (target) |",
                "|---|---|---|---|---|---|---|---|"]
        for t in f.inputs + f.outputs:
            out.append(f"| {t.io} {t.slot} | {md(t.baseline_dtype)} / {md(t.target_dtype)} | "
                       f"{ {True: 'yes', False: '**no**', None: '-'}[t.agree]} | {_g(t.max_abs_error)} | "
                       f"{_g(t.max_rel_error)} | {cosine_text(t.cosine)} | {md(_tensor_error(t))} | "
                       f"{md_code(os.path.basename(t.target_file), True)} |")
        out.append("")
    if c.worst:
        out += [f"## Largest differences ({len(c.worst)} of {c.diverged_ops})", "", f"Ranked: {WORST_ORDER}.", "",
                "| # | max abs err | max rel err | error | role | rank | step | op |",
                "|---|---|---|---|---|---|---|---|"]
        out += [f"| {i} | {_g(op.max_abs_error)} | {_g(op.max_rel_error)} | {md(_op_error(op))} | {op.role} | "
                f"{md(rank_phrase(op.rank, op.coords))} | {op.step} | {md_code(op.op_type, True)} "
                f"{md_code(op.op_name, True)} |" for i, op in enumerate(c.worst, 1)]
        out.append("")
    unmatched = _unmatched_lines(c)
    if unmatched:
        out += ["## Present on one side only", ""] + [f"- {md(line)}" for line in unmatched] + [""]
    out += ["## Scope", "", scope_text(c), ""]
    if c.parallel:
        out += [f"Layout: {md(parallel_text(c.parallel))}.", ""]
    out += [f"- caveat: {md(x)}" for x in c.caveats] + [f"- inconclusive: {md(x)}" for x in later_reasons(c)]
    if provenance_text(c):
        out += ["", f"Made by {md(provenance_text(c))}."]
    return "\n".join(out) + "\n"


# ---- HTML --------------------------------------------------------------------------------------------------------

def error_svg(c: Comparison):
    """Error (ulps, log scale) of each matched op run along the baseline's execution order, one panel per
    (rank, step), one colour and marker per Cell; the first divergence marked."""
    from .html.plots import plot_settings
    with plot_settings():
        return _error_svg(c)


def _error_svg(c: Comparison):
    from .html.plots import figure, inline_svg
    units = sorted({(r, s) for r, s, *_ in c.series})
    if not units:
        return None, "nothing was compared"
    first = c.first_divergence
    chosen = [u for u in units if first is not None and u == (first.rank, first.step)]
    chosen += [u for u in units if u not in chosen][:MAX_PLOT_PANELS - len(chosen)]
    fig = figure(10, 2.4 * len(chosen))
    cells: dict = {}
    for cell in (p[3] for p in c.series):
        cells[cell] = cells.get(cell, 0) + 1
    named = [cell for cell, _n in sorted(cells.items(), key=lambda kv: -kv[1])[:MAX_PLOT_CELLS]]
    # one style per Cell on every panel, each a colour and a marker no other Cell has
    style = {cell: dict(color=SERIES_COLORS[k % len(SERIES_COLORS)], marker=SERIES_MARKERS[k % len(SERIES_MARKERS)])
             for k, cell in enumerate(named)}
    style["(other)"] = dict(color="#9e9e9e", marker=".")
    handles = {}
    floor = 1e-1
    for i, unit in enumerate(chosen):
        ax = fig.add_subplot(len(chosen), 1, i + 1)
        points = [p for p in c.series if (p[0], p[1]) == unit]
        for cell in named + ["(other)"]:
            mine = [p for p in points if (p[3] if p[3] in named else "(other)") == cell]
            if not mine:
                continue
            handles[cell] = ax.scatter([p[2] for p in mine], [max(p[4] or 0.0, floor) for p in mine], s=12,
                                       linewidths=0.4, edgecolors="white", **style[cell])
        if first is not None and unit == (first.rank, first.step):
            ax.axvline(first.position, color="#c62828", linewidth=1)
            ax.annotate(plot_label(f"first divergence: {first.op_type}"),
                        (first.position, max(first.error_ulps or 1, 1)), color="#c62828", fontsize=8,
                        xytext=(4, 4), textcoords="offset points",
                        bbox=dict(boxstyle="square,pad=0.15", fc="white", ec="none", alpha=0.85))
        ax.axhline(c.tolerance_ulps, color="#888", linestyle="--", linewidth=0.8)
        ax.set_yscale("log")       # tick labels in plain text: html.plots.inline_svg
        ax.set_ylabel("error (ulps)")
        ax.set_title(plot_label(f"{rank_phrase(unit[0], c.coords.get(unit[0]))}, step {unit[1]}"), fontsize=9)
        if i == len(chosen) - 1:
            ax.set_xlabel("op run in the baseline's execution order")
    fig.subplots_adjust(hspace=0.45)
    order = [cell for cell in named + ["(other)"] if cell in handles]
    fig.legend([handles[cell] for cell in order],
               [plot_label(cell or "(no Cell)", 40) + (f" ({len(cells) - len(named)} more Cells)"
                                                        if cell == "(other)" else "") for cell in order],
               fontsize=7, loc="upper left", bbox_to_anchor=(0.91, 0.89), markerscale=1.4, frameon=False)
    note = (f"{len(units)} (rank, step) unit(s), {len(chosen)} drawn; dashed line: the tolerance; errors below "
            f"{floor} ulps drawn at {floor}")
    return inline_svg(fig, "error-plot", "error along execution order"), note


def compare_card(c: Comparison, links, after: str = "") -> str:
    """The verdict card of a comparison (html.page.card): the page's first section and a notebook's display."""
    from .html.page import card, esc
    kind = {"diverged": "anomaly", "equivalent": "clean"}.get(c.verdict, "inconclusive")
    f = c.first_divergence
    items = [("baseline", links.file(c.baseline, c.baseline, folder=True)),
             ("target", links.file(c.target, c.target, folder=True))]
    if f is not None:
        items += [("op", f"<code>{esc(f.op_type)}</code> <code>{esc(f.op_name)}</code>"),
                  ("where", f"{esc(rank_phrase(f.rank, f.coords))}, step {f.step}"),
                  ("Cell", f"{esc(f.cell)} ({esc(f.cell_type)})")]
        if f.source:
            items.append(("source", f"{links.file(f.source.file, None, f.source.line)} "
                                    f"<code>{esc(f.source.code)}</code>"))
        if f.dtype_change:
            items.append(("dtype", esc(f.dtype_change)))
        items.append(("why", f"{esc(_role_text(f))} {esc(f.note)}"))
    return card(kind, c.verdict.upper(), items, lead=esc(headline(c).split(": ", 1)[-1]),  # the badge says the verdict
                after=after)


def scope_text(c: Comparison) -> str:
    return f"{matched_text(c)}; {c.tensors_compared} tensors compared; tolerance {_g(c.tolerance_ulps)} ulps."


def render_compare_html(c: Comparison, page_dir: Optional[str] = None) -> str:
    """The compare page; files under page_dir (default: the current directory) are linked relatively."""
    from .html.page import CSS, Links, esc
    links = Links(page_dir)
    f = c.first_divergence
    parts = [compare_card(c, links)]
    if f is not None:
        rows = "".join(
            f"<tr><td>{esc(t.io)} {t.slot}</td><td>{esc(t.baseline_dtype)} / {esc(t.target_dtype)}</td>"
            f"<td class=\"{'bad' if t.agree is False else ''}\">{ {True: 'yes', False: 'no', None: '-'}[t.agree]}</td>"
            f"<td class=num>{_g(t.max_abs_error)}</td><td class=num>{_g(t.max_rel_error)}</td>"
            f'<td class=num style="white-space:nowrap">{cosine_text(t.cosine)}</td>'
            f"<td class=num>{esc(_tensor_error(t))}</td>"
            f"<td>{links.file(t.baseline_file)}<br>{links.file(t.target_file)}</td></tr>" for t in f.inputs + f.outputs)
        parts.append('<section id="tensors"><h2>Tensors of the first divergence</h2><table><tr><th>tensor</th>'
                     "<th>dtypes (baseline / target)</th><th>agrees</th><th>max abs err</th><th>max rel err</th>"
                     f"<th>cosine</th><th>error</th><th>files (baseline, target)</th></tr>{rows}</table></section>")
    svg, note = error_svg(c)
    parts.append('<section id="errors"><h2>Error along execution order, per Cell</h2>'
                 + (f'<div class="plot">{svg}</div>' if svg else "") + f'<p class="note">{esc(note)}</p></section>')
    if c.worst:
        rows = "".join(f"<tr><td class=num>{i}</td><td class=num>{_g(op.max_abs_error)}</td>"
                       f"<td class=num>{_g(op.max_rel_error)}</td><td class=num>{esc(_op_error(op))}</td>"
                       f"<td>{esc(op.role)}</td><td>{esc(rank_phrase(op.rank, op.coords))}</td>"
                       f"<td>{op.step}</td><td><code>{esc(op.op_type)}</code> {esc(op.op_name)}</td></tr>"
                       for i, op in enumerate(c.worst, 1))
        parts.append(f'<section id="worst"><h2>Largest differences ({len(c.worst)} of {c.diverged_ops})</h2>'
                     f'<p class="note">Ranked: {esc(WORST_ORDER)}.</p>'
                     "<table><tr><th>#</th><th>max abs err</th><th>max rel err</th><th>error</th><th>role</th>"
                     f"<th>rank</th><th>step</th><th>op</th></tr>{rows}</table></section>")
    unmatched = _unmatched_lines(c)
    shown = c.unmatched[:MAX_UNMATCHED_SHOWN]
    parts.append('<section id="unmatched"><h2>Present on one side only</h2>'
                 + ("".join(f"<p>{esc(line)}</p>" for line in unmatched) or '<p class="note">none</p>')
                 + ("<table><tr><th>side</th><th>rank</th><th>step</th><th>op</th></tr>" + "".join(
                     f"<tr><td>{esc(u.side)}</td><td>{esc(rank_phrase(u.rank, u.coords))}</td><td>{u.step}</td>"
                     f"<td><code>{esc(u.op_type)}"
                     f"</code> {esc(u.op_name)}</td></tr>" for u in shown) + "</table>" if shown else "")
                 + "</section>")
    parts.append(f'<section id="scope"><h2>Scope</h2><p>{esc(scope_text(c))}</p>'
                 + (f"<p>layout: {esc(parallel_text(c.parallel))}</p>" if c.parallel else "")
                 + "".join(f"<p class=note>caveat: {esc(x)}</p>" for x in c.caveats)
                 + "".join(f"<p class=note>inconclusive: {esc(x)}</p>" for x in later_reasons(c))
                 + ("<ul class=warn>" + "".join(f"<li>{esc(w)}</li>" for w in c.warnings[:300]) + "</ul>"
                    if c.warnings else "") + links.note() + "</section>")    # last: every link is made
    if provenance_text(c):
        parts.append(f'<footer id="provenance" class="note"><p>Made by {esc(provenance_text(c))}</p></footer>')
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc('msoverflow compare: ' + c.verdict)}</title><style>{CSS}</style></head><body><main>"
            f"<h1>msoverflow compare</h1>\n" + "\n".join(parts) + "\n</main></body></html>\n")


def render_comparison(c: Comparison, fmt: str, page_dir: Optional[str] = None) -> str:
    if fmt == "html":
        return render_compare_html(c, page_dir)
    return {"json": render_compare_json, "markdown": render_compare_markdown}.get(fmt, render_compare_text)(c)
