"""The report's plots: matplotlib figures drawn to inline SVG (text kept as text, ids unique per page)."""
from __future__ import annotations

import io
import re
from typing import Any, Dict, List, Optional, Tuple

from ...dtypes import LOW_PRECISION_FLOATS, dtype_max
from ...model import (
    FLAGGED,
    OVERFLOW,
    RANK_CLEAN,
    RANK_FLAGGED,
    RANK_NOT_DUMPED,
    SATURATION,
    Finding,
    Report,
    TensorSummary,
)
from ..common import steps_text
from ..safe import plot_label
from ..text import op_label
from .graph import MAX_LAYERS, MAX_ROWS, Node, layout
from .page import COLORS, esc, finding_id, sample

FP16_MAX = 65504.0
BF16_MAX = 3.3895313892515355e38

MAX_TIMELINE_STEPS = 6        # steps drawn as timeline panels (the ones holding events first)
MAX_TIMELINE_RANKS = 48       # ranks drawn as timeline rows (the ones holding events first)
MAX_MARKERS_PER_KIND = 400    # per panel and marker kind: more are sampled evenly
MAX_GRAPH_OPS = 200           # propagation graph: the first ops the origin reached that graph.py lays out
MAX_GRAPH_ROWS = 16           # taller than this (long edges take rows of their own), the table alone is shown
GRAPH_FONT = 8                # points
GRAPH_PAD = 0.35              # frame padding around a label, in font sizes
GRAPH_ROW = 0.62              # inches from one row to the next
GRAPH_GAP = 0.55              # inches between columns: where edges cross over
GRAPH_MARGIN = 0.1
GRAPH_CELL_COLORS = ("#e3f2fd", "#e8f5e9", "#fff3e0", "#f3e5f5", "#e0f7fa", "#fce4ec", "#f9fbe7", "#ede7f6",
                     "#fffde7", "#e0f2f1", "#efebe9", "#e8eaf6")
MAX_HEADROOM_BARS = 24
RANGE_KINDS = (OVERFLOW, SATURATION, FLAGGED)    # kinds of origin a headroom chart explains
MAX_TABLE_ROWS = 200          # links from markers point at table rows up to this many
MAX_HISTORY_SERIES = 6        # since-when plot: lines drawn (the history keeps the nearest parameters)


def _short_cell(cell: Optional[str], parts: int = 2) -> str:
    if not cell:
        return ""
    return ".".join(cell.split(".")[-parts:])


def _node_label(f: Finding) -> str:
    if f.op_type == "Parameter":
        return f"Parameter\n{plot_label(f.op_name.rsplit('.', 1)[-1], 28)}"
    cell = _short_cell(f.cell) or (f.cell_type or "")
    return plot_label(f.op_type, 30) + (f"\n{plot_label(cell, 30)}" if cell else "")


def figure(width: float, height: float):
    from matplotlib.figure import Figure  # no pyplot: no global figure state, no GUI backend
    return Figure(figsize=(width, height), dpi=100)


def plot_settings():
    """Settings every plot is built and drawn under: names from a dump are text, never mathtext (`$...$` with deep
    braces raised RecursionError/ValueError in matplotlib's parser), and never TeX."""
    import matplotlib
    return matplotlib.rc_context({"text.parse_math": False, "text.usetex": False})


_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def plain_number(x: float, digits: int = 1) -> str:
    """A number as people write it, in plain text: 0.01, 250, 65504; 10³⁰, 2×10⁻⁹ (ticks) or 5.7663×10⁵
    (`digits` significant digits) beyond that."""
    if x == 0 or 1e-3 <= abs(x) < 1e5:
        return f"{x:.{max(digits, 6)}g}"
    mantissa, exponent = f"{x:.{digits - 1}e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".") if "." in mantissa else mantissa
    power = "10" + str(int(exponent)).translate(_SUPERSCRIPT)
    return {"1": power, "-1": "-" + power}.get(mantissa, f"{mantissa}×{power}")


def _plain_log_formatter(major: bool):
    from matplotlib.ticker import LogFormatter

    class PlainLogFormatter(LogFormatter):
        def _num_to_string(self, x, vmin, vmax):
            return plain_number(x)

    return PlainLogFormatter(labelOnlyBase=major)


def plain_ticks(fig) -> None:
    """Every axis labels its ticks in plain text. matplotlib's log axes write `$\\mathdefault{10^{4}}$`, which
    stays raw in an SVG whose text is kept as text (and mathtext is off for names from a dump): each log axis gets
    the same labels (decades, and values between them on short axes) written by plain_number."""
    from matplotlib.ticker import LogFormatterMathtext, ScalarFormatter
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if isinstance(axis.get_major_formatter(), LogFormatterMathtext):
                axis.set_major_formatter(_plain_log_formatter(major=True))
            if isinstance(axis.get_minor_formatter(), LogFormatterMathtext):
                axis.set_minor_formatter(_plain_log_formatter(major=False))
            if isinstance(axis.get_major_formatter(), ScalarFormatter):
                axis.get_major_formatter().set_useMathText(False)


def inline_svg(fig, element_id: str, label: str, min_scale: Optional[float] = None) -> str:
    """The figure as an SVG element for the page. min_scale: the page may shrink it to fit, down to this share of
    its drawn size (then it scrolls sideways), so that its labels stay readable."""
    import matplotlib
    plain_ticks(fig)
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
    style = ""
    if min_scale is not None:
        width = re.search(r'<svg [^>]*width="([0-9.]+)pt"', svg)
        style = f' style="min-width:{float(width.group(1)) * min_scale:.0f}pt"' if width else ""
    return svg.replace("<svg ", f'<svg id="{element_id}" role="img" aria-label="{esc(label)}"{style} ', 1)


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
        events.append((f.rank, f.step, rel(f.rank, f.step, f.timestamp), "origin", op_label(f),
                       f"#{finding_id(i)}" if i <= top else "#origins"))
    for p in report.propagation:
        events.append((p.rank, p.step, rel(p.rank, p.step, p.timestamp), "spread", p.op_type,
                       "#propagation-list"))
    for rec in report.overflow_records:
        try:
            step = int(rec.step)
        except (TypeError, ValueError):
            continue
        events.append((rec.rank, step, rel(rec.rank, step, rec.timestamp), "flag", rec.matched_op or rec.unit,
                       "#scan"))
    for i, a in enumerate(report.arrivals):
        events.append((a.rank, a.step, None if a.offset_us is None else max(0.0, a.offset_us / 1000.0),
                       "arrival", f"{a.op_type} {a.op_name}",
                       f"#arrival-{a.rank}-{a.step}" if i < MAX_TABLE_ROWS else "#arrivals"))
    for status in report.rank_status:
        if status.status == RANK_FLAGGED and status.step is not None and not report.overflow_records:
            events.append((status.rank, status.step, rel(status.rank, status.step, status.time),
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
    steps = event_steps[:MAX_TIMELINE_STEPS] if event_steps else sample(all_steps, min(MAX_TIMELINE_STEPS, 3))
    if not steps:
        return None, "no steps"
    if not any(end > start for times in report.step_times.values() for start, end in times.values()) \
            and not any(e[2] for e in events):
        # every marker would sit at 0 ms (a live hunt records no time within a step): a timeline says nothing
        return None, "the report holds no time within a step (the rank table gives each rank's first bad step)"
    left_out = [s for s in (event_steps or all_steps) if s not in steps]
    clean_ranks = {s.rank for s in report.rank_status if s.status == RANK_CLEAN}
    if not report.rank_status and report.verdict == "clean":
        clean_ranks = set(report.ranks)
    not_dumped = {s.rank for s in report.rank_status if s.status == RANK_NOT_DUMPED}
    rank_pos = {r: i for i, r in enumerate(ranks)}
    height = min(0.9 + 0.32 * len(ranks), 14)
    fig = figure(min(max(3.4 * len(steps), 7.5) + 1.6, 18), height)
    axes = fig.subplots(1, len(steps), sharey=True, squeeze=False)[0]
    legend = {}
    style = {"origin": dict(marker="*", s=180, c=COLORS["origin"], zorder=5, label="origin (created here)"),
             "arrival": dict(marker=">", s=80, c=COLORS["arrival"], zorder=4, label="arrival via a collective"),
             "flag": dict(marker="X", s=60, c=COLORS["flag"], zorder=4, label="hardware overflow flag"),
             "spread": dict(marker="o", s=10, c=COLORS["spread"], zorder=3, label="spread (first origin's rank)"),
             "clean": dict(marker="o", s=60, facecolors="none", edgecolors=COLORS["clean"], linewidths=1.6,
                           zorder=3, label="clean rank")}
    for ax, step in zip(axes, steps, strict=True):
        spans = [(rank_pos[r], (report.step_times[r][step][1] - report.step_times[r][step][0]) / 1000.0)
                 for r in ranks if step in report.step_times.get(r, {})]
        span_max = max((length for _, length in spans), default=0.0)
        if spans:   # one call for all ranks: a bar per call costs ~10 ms each on large jobs
            ax.barh([y for y, _ in spans], [max(length, 1e-3) for _, length in spans], left=0, height=0.5,
                    color=COLORS["span"], zorder=1)
        for kind in ("spread", "flag", "arrival", "origin"):
            pts = [e for e in events if e[1] == step and e[3] == kind]
            pts = sample(pts, MAX_MARKERS_PER_KIND)
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
                hollow: Dict[str, Any] = {**style[kind], "facecolors": "none", "edgecolors": style[kind]["c"], "linewidths": 1.4}
                hollow.pop("c")
                hollow["label"] += " (time not recorded: drawn at 0)"
                legend[kind + "?"] = ax.scatter([0.0] * len(unknown), [rank_pos.get(e[0], 0) for e in unknown],
                                                **hollow)
                legend[kind + "?"].set_urls([_marker_url(e) for e in unknown])
                style[kind + "?"] = hollow
        first = report.first
        if first is not None and first.step == step:
            x = next((e[2] for e in events if e[5] == f"#{finding_id(0)}"), None)
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
    return inline_svg(fig, "timeline-svg", "timeline of the first bad values per rank and step"), note


def _timeline_ranks(ranks: List[int], events) -> Tuple[List[int], int]:
    """At most MAX_TIMELINE_RANKS rows: the ranks holding events first, then the rest evenly sampled."""
    if len(ranks) <= MAX_TIMELINE_RANKS:
        return ranks, 0
    busy = sorted({e[0] for e in events})[:MAX_TIMELINE_RANKS]
    rest = [r for r in ranks if r not in set(busy)]
    chosen = sorted(set(busy) | set(sample(rest, MAX_TIMELINE_RANKS - len(busy)) if len(busy) < MAX_TIMELINE_RANKS
                                     else []))
    return chosen, len(ranks) - len(chosen)


def _graph_input(report: Report) -> Tuple[List[Finding], List[Tuple[int, int]], int]:
    """The origin and the first MAX_GRAPH_OPS ops it reached (time order), and the Report's producer -> consumer
    edges between them as indices."""
    first = report.first
    assert first is not None            # the caller drew no graph without an origin
    ops = [first] + list(report.propagation[:MAX_GRAPH_OPS])
    index_of: Dict[str, int] = {}
    for i, f in enumerate(ops):
        index_of.setdefault(f.full_name or f.op_name, i)
    edges = [(index_of[producer], index_of[consumer]) for producer, consumer in report.edges
             if producer in index_of and consumer in index_of]
    return ops, edges, max(0, len(report.propagation) - MAX_GRAPH_OPS)


def _chain_text(ops: List[Finding]) -> str:
    names = [plot_label(f.op_type, 24) for f in ops]
    joined = " → ".join(names)
    return joined if len(names) <= 3 and len(joined) <= 34 else f"{names[0]} → … → {names[-1]} ({len(ops)} ops)"


def _graph_text(node: Node, ops: List[Finding]) -> Tuple[str, str]:
    """(label, hover text) of a node of the propagation graph."""
    members = [ops[m] for m in node.members]
    if node.kind == "more":
        types = sorted({f.op_type for f in members})
        return (f"+{len(members)} more ops\n(the table lists them)",
                f"{len(members)} more ops in this column: " + plot_label(", ".join(types), 200))
    head = members[0]
    cell = _short_cell(head.cell) or (head.cell_type or "")
    if node.kind == "chain":
        hover = " → ".join(plot_label(f.full_name or f.op_name, 80) for f in members)
        return _chain_text(members) + (f"\n{plot_label(cell, 30)}" if cell else ""), plot_label(hover, 600)
    where = f" in {plot_label(head.cell, 80)}" if head.cell else ""
    hover = f"{plot_label(head.op_type, 60)}{where}: {plot_label(head.full_name or head.op_name, 200)}"
    return _node_label(head), hover


def _text_size(text: str, size: float, bold: bool) -> Tuple[float, float]:
    """(width, height) in inches of a (multi-line) label as matplotlib lays it out (DejaVu Sans metrics)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath
    prop = FontProperties(size=size, weight="bold" if bold else "normal")
    lines = text.split("\n")
    widths = [TextToPath().get_text_width_height_descent(line, prop, ismath=False)[0] for line in lines]
    return max(widths) / 72.0, len(lines) * size * 1.2 / 72.0


def _ports(lay, boxes) -> List[Tuple[float, float]]:
    """Where each edge leaves its source and enters its target, as offsets from the frame's middle (inches): a node's
    edges spread over its height in the order of the rows they come from or go to, so that edges fanning out of
    (or into) one node neither overlap nor cross."""
    out: Dict[int, List[int]] = {}
    into: Dict[int, List[int]] = {}
    for k, e in enumerate(lay.edges):
        out.setdefault(e.source, []).append(k)
        into.setdefault(e.target, []).append(k)
    ports = [[0.0, 0.0] for _ in lay.edges]
    for side, groups, next_row in ((0, out, 1), (1, into, -2)):
        for node, edges in groups.items():
            if len(edges) < 2:
                continue
            edges.sort(key=lambda k: (lay.edges[k].rows[next_row], k))
            span = boxes[node][1] * 0.6
            for i, k in enumerate(edges):
                ports[k][side] = -span / 2 + span * i / (len(edges) - 1)
    return [(a, b) for a, b in ports]


def propagation_svg(report: Report) -> Tuple[Optional[str], str]:
    """A layered left-to-right graph (graph.py): the origin at the left, each op one column right of its latest
    producer, one colour per Cell. Edges live in the gaps between columns and in empty slots of the columns they
    pass, so they never run over a label."""
    from matplotlib.patches import FancyArrowPatch, Patch
    from matplotlib.path import Path
    if report.first is None or not report.propagation:
        return None, "the report holds no op that the origin's value reached"
    ops, edges, beyond_cap = _graph_input(report)
    lay = layout([f.cell for f in ops], edges)
    rows = 1 + max([v.row for v in lay.nodes] + [r for e in lay.edges for r in e.rows])
    if rows > MAX_GRAPH_ROWS:       # edges passing many columns each need a free row: too tall to read
        return None, (f"{len(report.propagation)} ops reached after the origin; a graph that keeps its edges clear "
                      f"of each other would need {rows:.0f} rows, so they are listed below")
    texts = [_graph_text(v, ops) for v in lay.nodes]
    is_origin = [0 in v.members for v in lay.nodes]
    boxes = []          # (width, height) of each node's frame, inches
    for (label, _), origin in zip(texts, is_origin, strict=True):
        w, h = _text_size(label, GRAPH_FONT + (1 if origin else 0), origin)
        pad = 2 * GRAPH_PAD * (GRAPH_FONT + 1) / 72.0
        boxes.append((w + pad, h + pad))
    columns = [max((boxes[k][0] for k, v in enumerate(lay.nodes) if v.layer == c), default=0.2)
               for c in range(lay.layers)]
    left = [GRAPH_MARGIN + sum(columns[:c]) + c * GRAPH_GAP for c in range(lay.layers)]
    right = [x + w for x, w in zip(left, columns, strict=True)]
    height = GRAPH_MARGIN * 2 + GRAPH_ROW * (rows - 1) + max(h for _, h in boxes)     # edges' rows included

    def y_of(row: float) -> float:
        return GRAPH_MARGIN + max(h for _, h in boxes) / 2 + GRAPH_ROW * row

    def centre(k: int) -> Tuple[float, float]:
        v = lay.nodes[k]
        return (left[v.layer] + right[v.layer]) / 2, y_of(v.row)

    width = right[-1] + GRAPH_MARGIN
    fig = figure(width, height)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.set_axis_off()
    cells = [v.cell for v in lay.nodes if v.kind != "more" and v.cell]
    palette = {cell: GRAPH_CELL_COLORS[i % len(GRAPH_CELL_COLORS)]
               for i, cell in enumerate(dict.fromkeys(cells))}
    ports = _ports(lay, boxes)
    for k, e in enumerate(lay.edges):
        a, b = lay.nodes[e.source], lay.nodes[e.target]
        (xa, _), (xb, _) = centre(e.source), centre(e.target)
        ys = [y_of(r) for r in e.rows]
        ys[0] += ports[k][0]
        ys[-1] += ports[k][1]
        points, codes = [(xa + boxes[e.source][0] / 2, ys[0]), (right[a.layer], ys[0])], [Path.MOVETO, Path.LINETO]
        for step in range(len(ys) - 1):
            layer = a.layer + step
            y0, y1 = ys[step], ys[step + 1]
            last = layer + 1 == b.layer
            # into the target's own frame (the arrowhead needs the curve's end), else across the next column
            end = xb - boxes[e.target][0] / 2 - 0.01 if last else left[layer + 1]
            half = (end - right[layer]) / 2
            points += [(right[layer] + half, y0), (end - half, y1), (end, y1)]
            codes += [Path.CURVE4] * 3
            if not last:     # through an empty slot of the column between
                points.append((right[layer + 1], y1))
                codes.append(Path.LINETO)
        ax.add_patch(FancyArrowPatch(path=Path(points, codes), arrowstyle="-|>", mutation_scale=9,
                                     color="#546e7a", lw=1.0, linestyle="-" if e.from_graph else (0, (3, 2))))
    for k, v in enumerate(lay.nodes):
        (label, hover), origin = texts[k], is_origin[k]
        face = "#ffebee" if origin else "#fafafa" if v.kind == "more" else palette.get(v.cell or "", "#eceff1")
        x, y = centre(k)
        text = ax.text(x, y, label, ha="center", va="center", fontsize=GRAPH_FONT + (1 if origin else 0),
                       fontweight="bold" if origin else "normal", color="#b71c1c" if origin else "#263238",
                       linespacing=1.2,
                       bbox=dict(boxstyle=f"round,pad={GRAPH_PAD}", fc=face, ec=COLORS["origin"] if origin else
                                 "#90a4ae", lw=1.4 if origin else 0.8, ls="--" if v.kind == "more" else "-"))
        text.set_url(f"#{finding_id(0)}|{hover}" if origin else f"#propagation-list|{hover}")
    if len(palette) > 1:
        handles = [Patch(facecolor=color, edgecolor="#90a4ae", label=plot_label(cell, 60))
                   for cell, color in palette.items()]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(0, 0), ncol=min(3, len(handles)),
                  fontsize=7, frameon=False, title="Cells", title_fontsize=7)
    drawn = sum(len(v.members) for v in lay.nodes if v.kind != "more") - 1
    dashed = sum(1 for e in lay.edges if not e.from_graph)
    not_drawn = len(lay.not_drawn) + beyond_cap
    note = (f"rank {report.first.rank}, step {report.first.step}: {len(report.propagation)} ops reached after "
            f"the origin ({drawn} drawn). Arrows: producer -> consumer from the saved graph; each op sits one column "
            "right of its latest producer"
            + (f"; {dashed} dashed arrow(s): no producer known, drawn after the latest earlier op that has one"
               if dashed else "")
            + ("; a box 'A → B → C' is a chain of ops in one Cell" if any(v.kind == "chain" for v in lay.nodes)
               else "")
            + (f"; {lay.folded} op(s) folded into '+N more' boxes (more than {MAX_ROWS} in a column)"
               if lay.folded else "")
            + (f"; {not_drawn} later op(s) not drawn (past the {MAX_LAYERS}th column or the first {MAX_GRAPH_OPS})"
               if not_drawn else "") + ". The table below lists every op.")
    return inline_svg(fig, "propagation-svg", "propagation graph from the origin", min_scale=0.8), note


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
    """Only where a low-precision range is the question: the first origin overflowed (or saturated, or the
    hardware flagged it) with a float16/bfloat16 tensor; an fp32 1/0 or a NaN gets no headroom chart."""
    first = report.first
    if first is None or first.kind not in RANGE_KINDS:
        return None, (f"the first origin is {first.kind if first else 'missing'}, not a value beyond a low-precision "
                      "dtype's range")
    dtypes = sorted({t.dtype or "?" for t in first.inputs + first.outputs})
    if not set(dtypes) & set(LOW_PRECISION_FLOATS):
        return None, (f"the first origin's tensors are {', '.join(dtypes) or 'not dumped'}: no float16 or bfloat16 "
                      "limit to compare against")
    rows = _headroom_rows(report)
    if not rows:
        return None, "no tensor statistics around the origin"
    values, colors, texts = [], [], []
    finite = [t.stats.max_abs for _, t, _ in rows if t.stats and t.stats.max_abs]
    top = max(finite + [FP16_MAX]) * 30
    for _label, t, _ in rows:
        s = t.stats
        assert s is not None            # _headroom_rows keeps tensors with statistics
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
            texts.append(plain_number(s.max_abs, 5) + (f"  ({used:.0%} of {t.dtype} max)" if used is not None else ""))
    fig = figure(10, 0.9 + 0.32 * len(rows))
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
    for y, value, text in zip(ys, values, texts, strict=True):     # on a light backing: limit lines and grid pass behind
        ax.text(max(value, low), y, text, va="center", fontsize=8,
                bbox=dict(boxstyle="square,pad=0.15", fc="white", ec="none", alpha=0.85))
    ax.set_yticks(ys)
    ax.set_yticklabels([label for label, _, _ in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.4, -1.2)
    ax.set_xlabel("max |x| (log scale)", fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(axis="x", color="#eeeeee")
    note = ("max |x| of the inputs and outputs of the origin(s) and the first ops they reached, against the fp16 "
            "limit" + (" and the bf16 limit" if BF16_MAX < xmax else " (bf16's max, 3.39e38, is off this scale)")
            + "; a bar at the right edge is inf.")
    return inline_svg(fig, "headroom-svg", "max |x| against the dtype limits"), note


def history_svg(report: Report) -> Tuple[Optional[str], str]:
    """Since when: max |x| of the first origin's inputs and of the parameters feeding it, per dumped step."""
    h = report.first.history if report.first is not None else None
    if h is None:
        return None, "fewer than two dumped steps up to the origin's: no history"
    series = [one for one in h.series if any(v for v in one.max_abs)][:MAX_HISTORY_SERIES]
    if not series:
        return None, "no value of the origin's inputs or parameters in the dumped steps"
    fig = figure(10, 3.2)
    ax = fig.add_subplot()
    for k, one in enumerate(series):
        points = [(step, value) for step, value in zip(one.steps, one.max_abs, strict=True) if value]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="os^Dvx"[k % 6], ms=4, lw=1.4,
                label=plot_label(f"{one.name} ({one.kind})", 48))
    ax.axvline(h.step, color=COLORS["origin"], ls="--", lw=1.2)
    ax.text(h.step, 1.0, f" step {h.step}", color=COLORS["origin"], fontsize=8, va="bottom",
            transform=ax.get_xaxis_transform())
    ax.set_yscale("log")
    ax.set_xlabel("step", fontsize=9)
    ax.set_ylabel("max |x| (log scale)", fontsize=9)
    ax.tick_params(labelsize=8)
    ax.grid(color="#eeeeee")
    ax.legend(fontsize=8, loc="upper left", frameon=False)
    return inline_svg(fig, "history-svg", "history of the origin's inputs and parameters per step"), h.summary
