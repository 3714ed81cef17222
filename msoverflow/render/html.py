"""HTML: one self-contained, offline page (no CDN, no script) with the verdict, the per-rank table and three plots.

Plots are matplotlib SVG embedded inline. Why matplotlib and not plotly: plotly needs its ~3.5 MB JS bundle inlined
in every report to work offline, and the page then renders by running that JS; matplotlib's SVG for these plots is
tens of KB (the demo's whole page: about 80 KB), appears as soon as the HTML is parsed, needs no script at all
(nothing to break, nothing blocked by a strict viewer), and keeps its text as text (searchable, copyable;
`svg.fonttype = none`). Rendering costs matplotlib's import and one draw per plot (a few seconds at most on a busy
2-core machine), bounded by the caps below whatever the dump's size. What interactivity the report needs is plain
SVG: markers and graph nodes link to their evidence and show a hover text; tensor files and .ir lines are links.

Large dumps stay usable: every table and plot is capped (the `MAX_*` numbers below) and says what it left out.
Renderers know only findings: Report in, text out.
"""
from __future__ import annotations

import html
import io
import os
import pathlib
import re
from typing import Dict, List, Optional, Sequence, Tuple

from ..dtypes import dtype_max
from ..model import (RANK_CLEAN, RANK_FLAGGED, RANK_INCOMPLETE, RANK_NOT_DUMPED, RANK_ORIGIN, RANK_RECEIVED,
                     Finding, Report, TensorSummary)
from .common import (arrival_text, cause_values_text, clean_text, coords_phrase, count_cell,
                     counts_note, parallel_text, producer_text, provenance_text, rank_where, ranks_shown,
                     recompute_rows, recompute_title, sample_texts, scanned_text, steps_text, tensors_shown)
from .safe import plain, plot_label
from .text import max_abs_text, op_label, range_used_text, shape_text

FP16_MAX = 65504.0
BF16_MAX = 3.3895313892515355e38

MAX_TIMELINE_STEPS = 6        # steps drawn as timeline panels (the ones holding events first)
MAX_TIMELINE_RANKS = 48       # ranks drawn as timeline rows (the ones holding events first)
MAX_TENSOR_ROWS = 32          # per input/output table of a finding (the bad tensors first)
MAX_MARKERS_PER_KIND = 400    # per panel and marker kind: more are sampled evenly
MAX_GRAPH_NODES = 32          # propagation graph: the origin and the first ops it reached
GRAPH_WIDTH = 6               # columns per band of the propagation graph
MAX_HEADROOM_BARS = 24
MAX_TABLE_ROWS = 200
MAX_WARNINGS = 300

STATUS_CLASS = {RANK_ORIGIN: "origin", RANK_RECEIVED: "received", RANK_FLAGGED: "flagged", RANK_CLEAN: "clean",
                RANK_NOT_DUMPED: "notdumped", RANK_INCOMPLETE: "incomplete"}
COLORS = {"origin": "#c62828", "arrival": "#ef6c00", "flag": "#6a1b9a", "clean": "#2e7d32", "spread": "#78909c",
          "span": "#e0e0e0"}

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;background:#fafafa;color:#212121}
main{max-width:1200px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:1.5em;margin:.4em 0} h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:4px}
.card{background:#fff;border:1px solid #ddd;border-left:8px solid #888;border-radius:6px;padding:12px 18px}
.card.anomaly{border-left-color:#c62828}.card.clean{border-left-color:#2e7d32}.card.inconclusive{border-left-color:#f9a825}
.card dl{display:grid;grid-template-columns:max-content 1fr;gap:4px 16px;margin:8px 0}
.card dt{font-weight:600;color:#555}.card dd{margin:0}
.badge{display:inline-block;padding:2px 10px;border-radius:12px;color:#fff;font-weight:600;font-size:.9em}
.badge.anomaly{background:#c62828}.badge.clean{background:#2e7d32}.badge.inconclusive{background:#f9a825;color:#000}
table{border-collapse:collapse;background:#fff;font-size:.88em;margin:6px 0}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f0f0f0} td.num{text-align:right;font-variant-numeric:tabular-nums}
td.bad{color:#c62828;font-weight:600}
tr.origin td:nth-child(2){color:#c62828;font-weight:600} tr.received td:nth-child(2){color:#ef6c00;font-weight:600}
tr.flagged td:nth-child(2){color:#6a1b9a;font-weight:600} tr.clean td:nth-child(2){color:#2e7d32}
tr.notdumped td:nth-child(2){color:#757575;font-style:italic}
tr.incomplete td:nth-child(2){color:#b26a00;font-weight:bold}
code{background:#f3f3f3;padding:1px 4px;border-radius:3px;font-size:.92em;word-break:break-all}
.plot{background:#fff;border:1px solid #ddd;border-radius:6px;padding:6px;overflow-x:auto}
.plot svg{max-width:100%;height:auto} .scroll{max-height:30em;overflow-y:auto;display:inline-block}
.note{color:#616161;font-size:.9em} .warn li{margin:2px 0}
nav a{margin-right:12px}
"""


# ---- small helpers ---------------------------------------------------------------------------------------------

def _e(value) -> str:
    """Everything from the dump is escaped: HTML, and characters a page cannot carry (render/safe.py)."""
    return html.escape(plain(value))


def _uri(path: Optional[str]) -> Optional[str]:
    if not path:
        return None
    try:
        return pathlib.Path(os.path.abspath(path)).as_uri()
    except ValueError:
        return None


def _file_link(path: Optional[str], label: Optional[str] = None, line: Optional[int] = None) -> str:
    uri = _uri(path)
    if uri is None:
        return "-"
    text = (label or os.path.basename(path)) + (f":{line}" if line else "")
    return f'<a class="file" href="{_e(uri)}" title="{_e(path)}">{_e(text)}</a>'


def _short_cell(cell: Optional[str], parts: int = 2) -> str:
    if not cell:
        return ""
    return ".".join(cell.split(".")[-parts:])


def _node_label(f: Finding) -> str:
    if f.op_type == "Parameter":
        return f"Parameter\n{plot_label(f.op_name.rsplit('.', 1)[-1], 28)}"
    cell = _short_cell(f.cell) or (f.cell_type or "")
    return plot_label(f.op_type, 30) + (f"\n{plot_label(cell, 30)}" if cell else "")


def _sample(items: Sequence, limit: int) -> list:
    """At most `limit` items, evenly spread (first and last kept)."""
    if len(items) <= limit:
        return list(items)
    step = (len(items) - 1) / (limit - 1)
    return [items[round(i * step)] for i in range(limit)]


def _finding_id(index: int) -> str:
    return f"finding-{index}"


# ---- plots -----------------------------------------------------------------------------------------------------

def _figure(width: float, height: float):
    from matplotlib.figure import Figure     # no pyplot: no global figure state, no GUI backend
    return Figure(figsize=(width, height), dpi=100)


def _plot_settings():
    """Settings every plot is built and drawn under: names from a dump are text, never mathtext (`$...$` with deep
    braces raised RecursionError/ValueError in matplotlib's parser), and never TeX."""
    import matplotlib
    return matplotlib.rc_context({"text.parse_math": False, "text.usetex": False})


def _svg(fig, element_id: str, label: str) -> str:
    import matplotlib
    out = io.StringIO()
    # Text stays text (small, searchable); ids are salted per plot so several SVGs share one page without
    # clashing, and stable so the same report gives the same file. rc_context leaves a caller's settings alone.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": element_id, "text.parse_math": False}):
        fig.savefig(out, format="svg", bbox_inches="tight", metadata={"Date": None})
    svg = out.getvalue()
    svg = svg[svg.index("<svg"):]
    # matplotlib numbers its element ids per figure (figure_1, axes_1 ...): prefix them so that the page's ids
    # stay unique with several plots inline.
    # In-page links open in place; text after "|" in a link is the marker's hover text (an SVG <title>).
    svg = re.sub(r'<a xlink:href="(#[^"|]*)(?:\|([^"]*))?"(?: target="_blank")?>',
                 lambda m: f'<a xlink:href="{m.group(1)}">' + (f"<title>{m.group(2)}</title>" if m.group(2) else ""),
                 svg)
    own = set(re.findall(r'id="([^"]+)"', svg))     # links out of the plot (#finding-0 ...) stay as they are
    svg = re.sub(r'(id="|url\(#|href="#)([^"#)]+)',
                 lambda m: f"{m.group(1)}{element_id}-{m.group(2)}" if m.group(2) in own else m.group(0), svg)
    return svg.replace("<svg ", f'<svg id="{element_id}" role="img" aria-label="{_e(label)}" ', 1)


def _timeline_events(report: Report, top: int):
    """(rank, step, time since that rank's step began in ms or None, kind, label, link) for every marker; the
    link is where the page tells more (markers are clickable in the SVG). Arrivals are the Report's, with their
    own offsets; other markers are placed by their timestamps against the step spans the Report carries."""
    starts = {(r, s): span[0] for r, steps in report.step_times.items() for s, span in steps.items()}
    events = []

    def rel(rank, step, ts):
        start = starts.get((rank, step))
        return None if ts is None or start is None else max(0.0, (ts - start) / 1000.0)

    for i, f in enumerate(report.anomalies):
        if f.kind == "cross-rank":      # drawn as the arrival it is (report.arrivals)
            continue
        events.append((f.rank, f.iteration, rel(f.rank, f.iteration, f.timestamp), "origin", op_label(f),
                       f"#{_finding_id(i)}" if i <= top else "#origins"))
    for p in report.propagation:
        events.append((p.rank, p.iteration, rel(p.rank, p.iteration, p.timestamp), "spread", p.op_type,
                       "#propagation-list"))
    for rec in report.overflow_records:
        try:
            step = int(rec.iteration)
        except (TypeError, ValueError):
            continue
        events.append((rec.rank, step, rel(rec.rank, step, rec.timestamp), "flag", rec.matched_op or rec.unit,
                       "#scan"))
    for i, a in enumerate(report.arrivals):
        events.append((a.rank, a.iteration, None if a.offset_us is None else max(0.0, a.offset_us / 1000.0),
                       "arrival", f"{a.op_type} {a.op_name}",
                       f"#arrival-{a.rank}-{a.iteration}" if i < MAX_TABLE_ROWS else "#arrivals"))
    for status in report.rank_status:
        if status.status == RANK_FLAGGED and status.iteration is not None and not report.overflow_records:
            events.append((status.rank, status.iteration, rel(status.rank, status.iteration, status.time),
                           "flag", status.op_type or "", f"#rank-{status.rank}"))
    return events


_MARKER_WORDS = {"origin": "origin", "arrival": "arrived via", "flag": "hardware flag on", "spread": "spread to"}


def _marker_url(event) -> str:
    """The marker's link, with its hover text after a "|" (_svg turns it into an SVG <title>)."""
    rank, step, t, kind, label, link = event
    when = f", {t:.3f} ms into the step" if t is not None else ""
    return (f"{link or '#timeline'}|{_MARKER_WORDS.get(kind, kind)} {plot_label(label, 120)} "
            f"(rank {rank}, step {step}{when})")


def timeline_svg(report: Report, top: int = 10) -> Tuple[Optional[str], str]:
    """One panel per step: x = ms since that rank's own step began (ranks' clocks are never compared),
    y = rank. Grey bars: the span of the rank's dumped ops in that step."""
    ranks = sorted(set(report.ranks) | {s.rank for s in report.rank_status})
    if not ranks:
        return None, "no ranks"
    events = _timeline_events(report, top)
    ranks, ranks_left_out = _timeline_ranks(ranks, events)
    drawn = set(ranks)
    events = [e for e in events if e[0] in drawn]
    event_steps = sorted({e[1] for e in events})
    all_steps = sorted({s for steps in report.iterations.values() for s in steps})
    steps = event_steps[:MAX_TIMELINE_STEPS] if event_steps else _sample(all_steps, min(MAX_TIMELINE_STEPS, 3))
    if not steps:
        return None, "no steps"
    left_out = [s for s in (event_steps or all_steps) if s not in steps]
    clean_ranks = {s.rank for s in report.rank_status if s.status == RANK_CLEAN}
    if not report.rank_status and report.verdict == "clean":
        clean_ranks = set(report.ranks)
    not_dumped = {s.rank for s in report.rank_status if s.status == RANK_NOT_DUMPED}
    rank_pos = {r: i for i, r in enumerate(ranks)}
    height = min(0.9 + 0.32 * len(ranks), 14)
    fig = _figure(min(max(3.4 * len(steps), 7.5) + 1.6, 18), height)
    axes = fig.subplots(1, len(steps), sharey=True, squeeze=False)[0]
    legend = {}
    style = {"origin": dict(marker="*", s=180, c=COLORS["origin"], zorder=5, label="origin (created here)"),
             "arrival": dict(marker=">", s=80, c=COLORS["arrival"], zorder=4, label="arrival via a collective"),
             "flag": dict(marker="X", s=60, c=COLORS["flag"], zorder=4, label="hardware overflow flag"),
             "spread": dict(marker="o", s=10, c=COLORS["spread"], zorder=3, label="spread (first origin's rank)"),
             "clean": dict(marker="o", s=60, facecolors="none", edgecolors=COLORS["clean"], linewidths=1.6,
                           zorder=3, label="clean rank")}
    for ax, step in zip(axes, steps):
        spans = [(rank_pos[r], (report.step_times[r][step][1] - report.step_times[r][step][0]) / 1000.0)
                 for r in ranks if step in report.step_times.get(r, {})]
        span_max = max((length for _, length in spans), default=0.0)
        if spans:   # one call for all ranks: a bar per call costs ~10 ms each on large jobs
            ax.barh([y for y, _ in spans], [max(length, 1e-3) for _, length in spans], left=0, height=0.5,
                    color=COLORS["span"], zorder=1)
        for kind in ("spread", "flag", "arrival", "origin"):
            pts = [e for e in events if e[1] == step and e[3] == kind]
            pts = _sample(pts, MAX_MARKERS_PER_KIND)
            if not pts:
                continue
            known = [e for e in pts if e[2] is not None]
            if known:
                xs = [e[2] for e in known]
                legend[kind] = ax.scatter(xs, [rank_pos.get(e[0], 0) for e in known], **style[kind])
                legend[kind].set_urls([_marker_url(e) for e in known])
                span_max = max(span_max, max(xs))
            unknown = [e for e in pts if e[2] is None]
            if unknown:     # the report does not say when: drawn hollow at the step's start, and said so
                hollow = {**style[kind], "facecolors": "none", "edgecolors": style[kind]["c"], "linewidths": 1.4}
                hollow.pop("c")
                hollow["label"] += " (time not recorded: drawn at 0)"
                legend[kind + "?"] = ax.scatter([0.0] * len(unknown), [rank_pos.get(e[0], 0) for e in unknown],
                                                **hollow)
                legend[kind + "?"].set_urls([_marker_url(e) for e in unknown])
                style[kind + "?"] = hollow
        first = report.first
        if first is not None and first.iteration == step:
            x = next((e[2] for e in events if e[5] == f"#{_finding_id(0)}"), None)
            if first.rank in rank_pos:
                ax.annotate(plot_label(first.op_type, 40), (x or 0.0, rank_pos[first.rank]), xytext=(6, 8),
                            textcoords="offset points", color=COLORS["origin"], fontsize=9, fontweight="bold")
        clean_here = [r for r in ranks if r in clean_ranks and step in report.iterations.get(r, [])]
        if clean_here:
            xs = [(report.step_times.get(r, {}).get(step, (0, 0))[1]
                   - report.step_times.get(r, {}).get(step, (0, 0))[0]) / 1000.0 for r in clean_here]
            legend["clean"] = ax.scatter(xs, [rank_pos[r] for r in clean_here], **style["clean"])
        for rank in not_dumped & drawn:
            ax.text(0, rank_pos[rank], " not dumped", va="center", fontsize=8, color="#757575", style="italic")
        ax.set_title(f"step {step}", fontsize=10)
        ax.set_xlabel("ms since the rank's step began", fontsize=8)
        ax.set_xlim(-0.03 * (span_max or 1), (span_max or 1) * 1.08)
        ax.grid(axis="x", color="#eeeeee")
        ax.tick_params(labelsize=8)
    every = max(1, -(-len(ranks) // 32))      # at most 32 labelled ticks: ticks dominate the drawing time
    labelled = ranks[::every]
    axes[0].set_yticks([rank_pos[r] for r in labelled])
    axes[0].set_yticklabels([f"rank {r}" if every == 1 else str(r) for r in labelled])
    axes[0].set_ylim(len(ranks) - 0.5, -0.5)
    if legend:
        order = [k for k in ("origin", "origin?", "arrival", "arrival?", "flag", "flag?", "spread", "clean")
                 if k in legend]
        fig.legend([legend[k] for k in order], [style[k]["label"] for k in order], loc="center left",
                   fontsize=8, frameon=False, bbox_to_anchor=(1.0, 0.5))
    note = ("Each rank's time is measured from its own step start: clocks of different ranks are never compared."
            + (f" Steps not drawn: {steps_text(left_out)}." if left_out else "")
            + (f" {ranks_left_out} rank(s) without events not drawn (the rank table lists them)."
               if ranks_left_out else ""))
    return _svg(fig, "timeline-svg", "timeline of the first bad values per rank and step"), note


def _timeline_ranks(ranks: List[int], events) -> Tuple[List[int], int]:
    """At most MAX_TIMELINE_RANKS rows: the ranks holding events first, then the rest evenly sampled."""
    if len(ranks) <= MAX_TIMELINE_RANKS:
        return ranks, 0
    busy = sorted({e[0] for e in events})[:MAX_TIMELINE_RANKS]
    rest = [r for r in ranks if r not in set(busy)]
    chosen = sorted(set(busy) | set(_sample(rest, MAX_TIMELINE_RANKS - len(busy)) if len(busy) < MAX_TIMELINE_RANKS
                                     else []))
    return chosen, len(ranks) - len(chosen)


def _graph_nodes(report: Report) -> Tuple[List[Finding], List[Tuple[int, int, bool]], int]:
    """Nodes (origin first, then propagation in time order, capped) and the Report's edges between them
    (producer, consumer, from_graph); a node the Report gives no edge into follows the one before it in time,
    drawn dashed."""
    first = report.first
    nodes = [first] + list(report.propagation[:MAX_GRAPH_NODES - 1])
    left_out = max(0, len(report.propagation) - (MAX_GRAPH_NODES - 1))
    index_of = {}
    for i, f in enumerate(nodes):
        index_of.setdefault(f.full_name or f.op_name, i)
    edges = []
    for producer, consumer in report.edges:
        j, i = index_of.get(producer), index_of.get(consumer)
        if j is not None and i is not None and j != i:
            edges.append((j, i, True))
    fed = {i for _, i, _ in edges}
    edges += [(i - 1, i, False) for i in range(1, len(nodes)) if i not in fed]
    return nodes, edges, left_out


def propagation_svg(report: Report) -> Tuple[Optional[str], str]:
    if report.first is None:
        return None, "nothing to draw: no origin"
    nodes, edges, left_out = _graph_nodes(report)
    depth = {0: 0}
    for j, i, _ in sorted(edges, key=lambda e: e[1]):
        depth[i] = max(depth.get(i, 0), depth.get(j, 0) + 1)
    columns: Dict[int, List[int]] = {}
    for i in range(len(nodes)):
        columns.setdefault(depth.get(i, 0), []).append(i)
    # Long chains wrap into bands of GRAPH_WIDTH columns (read left to right, then the next band) so labels
    # keep a readable size on a page.
    width = min(len(columns), GRAPH_WIDTH)
    nrows = max(len(v) for v in columns.values())
    bands = (len(columns) + GRAPH_WIDTH - 1) // GRAPH_WIDTH
    pos = {}
    for col, members in columns.items():
        band, x = divmod(col, GRAPH_WIDTH)
        for row, i in enumerate(members):
            pos[i] = (x, -band * (nrows + 0.8) - row)
    ncols = width
    fig = _figure(1.0 + 2.1 * width, min(0.6 + 0.75 * ((bands - 1) * (nrows + 0.8) + nrows), 18))
    ax = fig.add_subplot()
    ax.set_axis_off()
    for j, i, from_graph in edges:
        (x0, y0), (x1, y1) = pos[j], pos[i]
        if x1 > x0:     # same band: side to side
            start, end = (x0 + 0.42, y0), (x1 - 0.42, y1)
        else:           # into the next band (or a lower row): bottom to top, clear of the boxes
            start, end = (x0, y0 - 0.28), (x1, y1 + 0.28)
        ax.annotate("", xy=end, xytext=start,
                    arrowprops=dict(arrowstyle="-|>", color="#546e7a", lw=1.1,
                                    linestyle="-" if from_graph else (0, (3, 3)), shrinkA=0, shrinkB=0))
    for i, f in enumerate(nodes):
        x, y = pos[i]
        is_origin = i == 0
        label = ax.text(x, y, _node_label(f), ha="center", va="center", fontsize=8 if not is_origin else 9,
                        fontweight="bold" if is_origin else "normal", color="#b71c1c" if is_origin else "#263238",
                        bbox=dict(boxstyle="round,pad=0.35", fc="#ffebee" if is_origin else "#eceff1",
                                  ec=COLORS["origin"] if is_origin else "#90a4ae", lw=1.4 if is_origin else 0.8))
        where = f" in {plot_label(f.cell, 80)}" if f.cell else ""
        hover = f"{plot_label(f.op_type, 60)}{where}: {plot_label(f.full_name or f.op_name, 200)}"
        label.set_url(f"#{_finding_id(0)}|{hover}" if is_origin else f"#propagation-list|{hover}")
    ax.set_xlim(-0.6, ncols - 0.4)
    ax.set_ylim(min(y for _, y in pos.values()) - 0.6, 0.6)
    dashed = sum(1 for e in edges if not e[2])
    note = (f"rank {report.first.rank}, step {report.first.iteration}: {len(report.propagation)} ops reached after "
            f"the origin. Arrows: producer -> consumer from the saved graph"
            + (f"; {dashed} dashed arrow(s) only follow time order (no graph edge known)" if dashed else "")
            + (f". {left_out} later op(s) not drawn (see the table below)." if left_out else "."))
    return _svg(fig, "propagation-svg", "propagation graph from the origin"), note


def _headroom_rows(report: Report) -> List[Tuple[str, TensorSummary, str]]:
    rows = []
    findings = list(report.anomalies[:4]) + list(report.propagation[:8])
    for f in findings:
        for t in list(f.inputs) + list(f.outputs):
            if t.stats is None or not t.dtype or "float" not in t.dtype:
                continue
            io_name = "in" if t.io == "input" else "out"
            producer = (t.producer or "").rsplit("/", 1)[-1]
            label = (f"{plot_label(f.op_type, 40)} {io_name}{t.slot}"
                     + (f" <- {plot_label(producer, 24)}" if producer and t.io == "input" else ""))
            rows.append((label, t, f.op_type))
    return rows[:MAX_HEADROOM_BARS]


def headroom_svg(report: Report) -> Tuple[Optional[str], str]:
    rows = _headroom_rows(report)
    if not rows:
        return None, "no tensor statistics around an origin"
    values, colors, texts = [], [], []
    finite = [t.stats.max_abs for _, t, _ in rows if t.stats.max_abs]
    top = max(finite + [FP16_MAX]) * 30
    for label, t, _ in rows:
        s = t.stats
        limit = dtype_max(t.dtype)
        if s.posinf or s.neginf:
            values.append(top)
            colors.append(COLORS["origin"])
            texts.append("inf")
        elif s.max_abs is None:
            values.append(0)
            colors.append("#bdbdbd")
            texts.append("nan only" if s.nan else "no finite value")
        else:
            used = s.max_abs / limit if limit else None
            values.append(max(s.max_abs, 1e-30))
            colors.append(COLORS["origin"] if (used or 0) > 1 else "#ef6c00" if (used or 0) > 0.5 else "#1565c0")
            texts.append(f"{s.max_abs:.5g}" + (f"  ({used:.0%} of {t.dtype} max)" if used is not None else ""))
    fig = _figure(10, 0.9 + 0.32 * len(rows))
    ax = fig.add_subplot()
    ys = list(range(len(rows)))
    ax.barh(ys, values, color=colors, height=0.6)
    ax.set_xscale("log")
    positive = [v for v in values if v > 0]
    low = max(min(positive) / 10 if positive else 1e-3, 1e-12)
    ax.set_xlim(low, max(top * 3, BF16_MAX * 30) if any(t.dtype == "bfloat16" for _, t, _ in rows) else top * 3)
    ax.axvline(FP16_MAX, color=COLORS["origin"], ls="--", lw=1.2)
    ax.text(FP16_MAX, -0.9, " float16 max 65504", color=COLORS["origin"], fontsize=8, va="bottom")
    xmax = ax.get_xlim()[1]
    if BF16_MAX < xmax:
        ax.axvline(BF16_MAX, color=COLORS["flag"], ls="--", lw=1.2)
        ax.text(BF16_MAX, -0.9, " bfloat16 max 3.39e38", color=COLORS["flag"], fontsize=8, va="bottom")
    for y, value, text in zip(ys, values, texts):
        ax.text(max(value, low), y, "  " + text, va="center", fontsize=8)
    ax.set_yticks(ys)
    ax.set_yticklabels([label for label, _, _ in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.4, -1.2)
    ax.set_xlabel("max |x| (log scale)", fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", color="#eeeeee")
    note = ("max |x| of the inputs and outputs of the origin(s) and the first ops they reached, against the fp16 "
            "limit" + (" and the bf16 limit" if BF16_MAX < xmax else " (bf16's max, 3.39e38, is off this scale)")
            + "; a bar at the right edge is inf.")
    return _svg(fig, "headroom-svg", "max |x| against the dtype limits"), note


# ---- HTML sections ---------------------------------------------------------------------------------------------

def _verdict_card(report: Report) -> str:
    verdict = report.verdict
    f = report.first
    out = [f'<section id="verdict" class="card {verdict}">',
           f'<h2 style="border:0;margin:0">Verdict <span class="badge {verdict}">{_e(verdict.upper())}</span></h2>']
    if f is not None:
        # A finding that only the hardware flag names (its inputs were not dumped) is not called the origin.
        role = {"flagged": "flagged (not proven)", "propagator": "first seen in"}.get(f.role, "origin")
        items = [(role, f"<strong>{_e(op_label(f))}</strong>"),
                 ("kind", _e(f.kind)),
                 ("where", f"{_e(rank_where(f.rank, report))}, step {f.iteration}, graph {_e(f.graph)}"),
                 ("what", _e(f.detail)),
                 *((("cause", f'<strong class="cause">{_e(f.cause.cause)}</strong>: {_e(f.cause.reason)}'),)
                   if f.cause is not None else ()),
                 *((("values", _e(cause_values_text(f.cause))),) if f.cause is not None and cause_values_text(f.cause)
                   else ()),
                 ("Cell", _e(f"{f.cell or '-'}" + (f" ({f.cell_type})" if f.cell_type else ""))),
                 ("source", (f"{_file_link(f.source.file, f.source.file, f.source.line)} "
                             f"<code>{_e(f.source.code)}</code>") if f.source else "not known (no saved graph)"),
                 ("op", f"<code>{_e(f.full_name or f.op_name)}</code>"
                        + (f" ({_file_link(f.ir_file, None, f.ir_line)})" if f.ir_file else "")),
                 ("fix", _e(f.recommendation) or "-")]
    elif verdict == "inconclusive":
        items = [("why", "<ul>" + "".join(f"<li>{_e(r)}</li>" for r in report.inconclusive) + "</ul>")]
    else:
        items = [("result", _e(clean_text(report)))]
    out.append("<dl>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items) + "</dl>")
    if f is not None and report.inconclusive:
        out.append('<p class="note">Also not understood: ' + "; ".join(_e(r) for r in report.inconclusive) + "</p>")
    out.append("</section>")
    return "\n".join(out)


def _rank_table(report: Report) -> str:
    out = ['<section id="ranks"><h2>Ranks</h2>']
    if not report.rank_status:
        out.append('<p class="note">This report carries no per-rank status; ranks seen: '
                   f'{_e(steps_text(report.ranks))}.</p>')
        return "\n".join(out + ["</section>"])
    with_coords = any(s.coords for s in report.rank_status)
    out.append('<div class="scroll"><table id="rank-table"><thead><tr><th>rank</th><th>status</th><th>first bad step</th>'
               + ("<th>coords</th>" if with_coords else "")
               + '<th>first bad op</th><th>carried by (collective)</th><th>note</th></tr></thead><tbody>')
    shown, left_out = ranks_shown(report.rank_status, MAX_TABLE_ROWS * 4)
    for label, s in shown:
        op = f"{_e(s.op_type or '')} <code>{_e(s.op_name)}</code>" if s.op_name else _e(s.op_type or "-")
        out.append(f'<tr id="rank-{s.rank}" class="{STATUS_CLASS.get(s.status, "")}" data-rank="{s.rank}"'
                   + (f' data-ranks="{_e(label)}">' if label != str(s.rank) else ">")
                   + f'<td class="num">{_e(label)}</td>'
                   f'<td class="status">{_e(s.status)}</td>'
                   f'<td class="num">{"-" if s.iteration is None else s.iteration}</td>'
                   + (f'<td class="coords">{_e(coords_phrase(s.coords))}</td>' if with_coords else "")
                   + f'<td>{op}</td><td>{_e(s.via or "-")}</td><td>{_e(s.note)}</td></tr>')
    out.append("</tbody></table></div>")
    if left_out:
        out.append(f'<p class="note">{_e(left_out)}.</p>')
    if report.parallel:
        out.append(f'<p class="note">Layout: {_e(parallel_text(report.parallel))}.</p>')
    counts: Dict[str, int] = {}
    for s in report.rank_status:
        counts[s.status] = counts.get(s.status, 0) + 1
    out.append('<p class="note">' + ", ".join(f"{n} {_e(k)}" for k, n in counts.items()) + "</p></section>")
    return "\n".join(out)


def _arrivals(report: Report) -> str:
    """Every arrival the Report carries (the timeline draws them; links from its markers land here)."""
    if not report.arrivals:
        return ""
    shown = report.arrivals[:MAX_TABLE_ROWS]
    items = "".join(f'<li id="arrival-{a.rank}-{a.iteration}" class="arrival" data-rank="{a.rank}" '
                    f'data-step="{a.iteration}" data-op="{_e(a.op_name)}">{_e(arrival_text(a))}</li>' for a in shown)
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
        out.append(f'<tr><td class="num">{h.rank}</td><td>{_e(coords_phrase(h.coords) or "-")}</td>'
                   f'<td class="num">{h.iteration}</td><td><code>{_e(h.name)}</code></td>'
                   f'<td>{_e(shape_text(h.shape))}</td><td>{_e(h.how)}</td></tr>')
    out.append("</tbody></table></div>")
    if len(hits) > MAX_TABLE_ROWS:
        out.append(f'<p class="note">{len(hits) - MAX_TABLE_ROWS} more: see --format json.</p>')
    return "\n".join(out + ["</section>"])


def _plot_section(section_id: str, title: str, svg: Optional[str], note: str) -> str:
    body = f'<div class="plot">{svg}</div>' if svg else f'<p class="note">{_e(note)}</p>'
    return (f'<section id="{section_id}"><h2>{_e(title)}</h2>{body}'
            + (f'<p class="note">{_e(note)}</p>' if svg else "") + "</section>")


def _tensor_table(title: str, tensors: List[TensorSummary]) -> str:
    rows = []
    shown, left_out = tensors_shown(tensors, MAX_TENSOR_ROWS)
    for t in shown:
        s = t.stats
        dtype = (t.dtype or "?") + (f" ({t.payload_dtype} bytes)" if t.payload_dtype else "")
        bad = s is not None and s.bad
        producer = producer_text(t)
        rows.append(f'<tr><td class="num">{t.slot}</td><td>{_e(dtype)}</td><td>{_e(shape_text(t.shape))}</td>'
                    f'<td class="num{" bad" if bad else ""}">{_e(max_abs_text(s))}</td>'
                    f'<td class="num">{_e(range_used_text(t, 1))}</td>'
                    f'<td class="num">{_e(count_cell(s, "nan"))}</td><td class="num">{_e(count_cell(s, "posinf"))}'
                    f'</td><td class="num">{_e(count_cell(s, "neginf"))}</td><td>{_e(producer)}</td>'
                    f'<td>{_file_link(t.file)}</td></tr>')
    notes = [n for n in (left_out, counts_note(shown)) if n]
    return (f"<table><caption style='text-align:left'>{_e(title)}</caption><thead><tr><th>slot</th><th>dtype</th>"
            "<th>shape</th><th>max |x|</th><th>range used</th><th>nan</th><th>+inf</th><th>-inf</th>"
            "<th>produced by</th><th>file</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
            + "".join(f'<p class="note">{_e(n)}</p>' for n in notes))


def _finding_block(f: Finding, index: int) -> str:
    out = [f'<article id="{_finding_id(index)}" class="finding"><h3>{"First origin" if index == 0 else "Origin"}: '
           f'{_e(op_label(f))} <span class="note">(rank {f.rank}, step {f.iteration}, graph {_e(f.graph)})</span>'
           "</h3>", f"<p>{_e(f.detail)}</p>",
           f'<p>op <code>{_e(f.full_name or f.op_name)}</code>'
           + (f" · saved graph {_file_link(f.ir_file, None, f.ir_line)}" if f.ir_file else "")
           + (f" · source {_file_link(f.source.file, f.source.file, f.source.line)}" if f.source else "") + "</p>"]
    if f.inputs:
        out.append(_tensor_table("inputs", f.inputs))
    if f.outputs:
        out.append(_tensor_table("outputs", f.outputs))
    if f.flags:
        out.append("<ul>" + "".join(
            f"<li>hardware overflow flag: {_e(r.unit)} status {r.status:#x} "
            f"({_e(', '.join(r.status_words) or 'overflow')}) from {_file_link(r.source)}</li>" for r in f.flags)
            + "</ul>")
    if f.evidence:
        out.append("<ul>" + "".join(f"<li>{_e(item)}</li>" for item in f.evidence) + "</ul>")
    if f.cause is not None:
        out.append(_cause_block(f.cause))
    if f.recommendation:
        out.append(f"<p><strong>fix:</strong> {_e(f.recommendation)}</p>")
    out.append("</article>")
    return "\n".join(out)


def _cause_block(cause) -> str:
    """The cause of an origin: what the recompute showed, per precision, and the bad values beside the recomputed
    ones."""
    out = [f'<div class="cause"><p><strong>cause: {_e(cause.cause)}</strong> · {_e(cause.reason)}</p>']
    if cause.recompute:
        rows = "".join("<tr>" + "".join(f"<td>{_e(cell)}</td>" for cell in row) + "</tr>"
                       for row in recompute_rows(cause))
        out.append(f"<table><caption style='text-align:left'>{_e(recompute_title(cause))}</caption><thead><tr>"
                   "<th>dtype</th><th>finite</th><th>max |x|</th><th>agrees with the dump</th></tr></thead><tbody>"
                   + rows + "</tbody></table>")
    items = sample_texts(cause) + ([cause_values_text(cause)] if cause_values_text(cause) else []) + cause.evidence
    if items:
        out.append("<ul>" + "".join(f"<li>{_e(item)}</li>" for item in items) + "</ul>")
    out.append("</div>")
    return "\n".join(out)


def _evidence(report: Report, top: int) -> str:
    if not report.anomalies:
        return ""
    shown = report.anomalies[:top + 1]
    out = ['<section id="evidence"><h2>Evidence</h2>']
    out += [_finding_block(f, i) for i, f in enumerate(shown)]
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
        rows.append(f'<tr><td class="num">{i + 1}</td><td class="num">{f.rank}</td><td class="num">{f.iteration}</td>'
                    f'<td>{_e(f.kind)}</td><td><a href="#{_finding_id(i)}">{_e(f.op_type)}</a></td>'
                    f'<td>{_e(f.cell or f.cell_type or "-")}</td><td>{_e(f.cause.cause if f.cause else "-")}</td>'
                    f'<td>{_e(f.detail)}</td></tr>')
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
    rows = "".join(f'<tr><td class="num">{f.rank}</td><td class="num">{f.iteration}</td><td>{_e(op_label(f))}</td>'
                   f'<td>{_e(f.detail)}</td></tr>' for f in flagged[:MAX_TABLE_ROWS])
    more = len(flagged) - MAX_TABLE_ROWS
    return ('<section id="flagged"><h2>Flagged by the hardware, not decided</h2><p class="note">The inputs that '
            "would tell whether these ops created the bad value or received it were not dumped.</p><table><thead>"
            "<tr><th>rank</th><th>step</th><th>op</th><th>what</th></tr></thead><tbody>" + rows + "</tbody></table>"
            + (f'<p class="note">{more} more: see --format json.</p>' if more > 0 else "") + "</section>")


def _propagation_table(report: Report) -> str:
    if not report.propagation:
        return ""
    shown = _sample(report.propagation, MAX_TABLE_ROWS)
    rows = "".join(f'<tr><td>{_e(p.op_type)}</td><td>{_e(p.cell or p.cell_type or "-")}</td><td>{_e(p.kind)}</td>'
                   f'<td><code>{_e(p.full_name or p.op_name)}</code></td></tr>' for p in shown)
    note = (f'<p class="note">{len(shown)} of {len(report.propagation)} ops shown (evenly sampled).</p>'
            if len(shown) < len(report.propagation) else "")
    return (f'<details id="propagation-list"><summary>The {len(report.propagation)} ops the first origin reached '
            f"in its step</summary><table><thead><tr><th>op</th><th>Cell</th><th>kind</th><th>name</th></tr>"
            f"</thead><tbody>{rows}</tbody></table>{note}</details>")


def _scan_section(report: Report) -> str:
    meta = report.extra.get("mindspore") or {}
    written_by = f", MindSpore {meta['version']} {meta.get('device_target') or ''}" if meta.get("version") else ""
    per_rank = "; ".join(f"rank {r}: {steps_text(v)}" for r, v in sorted(report.iterations.items())[:64])
    items = [f"{report.files} files ({_e(report.layout or 'unknown')} layout{_e(written_by)}), "
             f"{report.tensors_read} tensors read",
             f"ranks {_e(steps_text(report.ranks))}; steps present: {_e(per_rank)}",
             f'<span id="scanned-steps">{_e(scanned_text(report))}</span>',
             f"hardware overflow records: {len(report.overflow_records)}"]
    if not report.tail_clean:
        items.append("steps after the first origin were not scanned (--all scans every step)")
    out = ['<section id="scan"><h2>What was scanned</h2><ul>'] + [f"<li>{i}</li>" for i in items] + ["</ul>"]
    if report.coverage:
        out.append('<div id="coverage"><h3>Coverage: what this dump could not show</h3><ul>'
                   + "".join(f"<li>{_e(c)}</li>" for c in report.coverage) + "</ul></div>")
    if report.inconclusive:
        out.append('<div id="inconclusive"><h3>Not understood or not read</h3><ul>'
                   + "".join(f"<li>{_e(c)}</li>" for c in report.inconclusive) + "</ul></div>")
    out.append(f'<p class="note">dump directory: {_file_link(report.dump_dir, report.dump_dir)}</p></section>')
    return "\n".join(out)


def _provenance(report: Report) -> str:
    text = provenance_text(report)
    return (f'<footer id="provenance" class="note"><p>Made by {_e(text)}</p></footer>' if text else "")


def _warnings(report: Report) -> str:
    if not report.warnings:
        return '<section id="warnings"><h2>Warnings</h2><p class="note">none</p></section>'
    shown = report.warnings[:MAX_WARNINGS]
    more = len(report.warnings) - len(shown)
    return (f'<section id="warnings"><h2>Warnings ({len(report.warnings)})</h2><details open><summary>show</summary>'
            '<ul class="warn">' + "".join(f"<li>{_e(w)}</li>" for w in shown) + "</ul>"
            + (f'<p class="note">{more} more: see --format json.</p>' if more > 0 else "") + "</details></section>")


def render_html(report: Report, top: int = 10) -> str:
    title = "msoverflow: " + (f"{report.first.kind} in {report.first.op_type}" if report.first else report.verdict)
    with _plot_settings():
        timeline, timeline_note = timeline_svg(report, top)
        sections = [_verdict_card(report), _rank_table(report), _parameter_table(report), _arrivals(report),
                    _plot_section("timeline", "Timeline", timeline, timeline_note)]
        if report.first is not None:
            graph, graph_note = propagation_svg(report)
            sections.append(_plot_section("propagation", "Propagation from the origin", graph, graph_note)
                            .replace("</section>", _propagation_table(report) + "</section>"))
            bars, bars_note = headroom_svg(report)
            sections.append(_plot_section("headroom", "Headroom: max |x| against the dtype's limits", bars,
                                          bars_note))
    sections += [_evidence(report, top), _origins_table(report), _flagged_table(report), _warnings(report),
                 _scan_section(report), _provenance(report)]
    nav = " ".join(f'<a href="#{s}">{s}</a>' for s in re.findall(r'<section id="([a-z-]+)"', "".join(sections)))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(title)}</title><style>{CSS}</style></head><body><main>"
            f"<h1>msoverflow report</h1><p class=\"note\">{_e(report.dump_dir)}</p><nav>{nav}</nav>\n"
            + "\n".join(s for s in sections if s) + "\n</main></body></html>\n")
