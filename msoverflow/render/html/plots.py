"""The report's plots: matplotlib figures drawn to inline SVG (text kept as text, ids unique per page)."""
from __future__ import annotations

import io
import re
from typing import Dict, List, Optional, Tuple

from ...dtypes import dtype_max
from ...model import RANK_CLEAN, RANK_FLAGGED, RANK_NOT_DUMPED, Finding, Report, TensorSummary
from ..common import steps_text
from ..safe import plot_label
from ..text import op_label
from .page import COLORS, esc, finding_id, sample

FP16_MAX = 65504.0
BF16_MAX = 3.3895313892515355e38

MAX_TIMELINE_STEPS = 6        # steps drawn as timeline panels (the ones holding events first)
MAX_TIMELINE_RANKS = 48       # ranks drawn as timeline rows (the ones holding events first)
MAX_MARKERS_PER_KIND = 400    # per panel and marker kind: more are sampled evenly
MAX_GRAPH_NODES = 32          # propagation graph: the origin and the first ops it reached
GRAPH_WIDTH = 6               # columns per band of the propagation graph
MAX_HEADROOM_BARS = 24
MAX_TABLE_ROWS = 200          # links from markers point at table rows up to this many


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
    from matplotlib.figure import Figure     # no pyplot: no global figure state, no GUI backend
    return Figure(figsize=(width, height), dpi=100)


def plot_settings():
    """Settings every plot is built and drawn under: names from a dump are text, never mathtext (`$...$` with deep
    braces raised RecursionError/ValueError in matplotlib's parser), and never TeX."""
    import matplotlib
    return matplotlib.rc_context({"text.parse_math": False, "text.usetex": False})


_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def plain_number(x: float) -> str:
    """A tick value as people write it, in plain text: 0.01, 250, 65504; 10³⁰ and 2×10⁻⁹ beyond that."""
    if x == 0 or 1e-3 <= abs(x) < 1e5:
        return f"{x:g}"
    mantissa, exponent = f"{x:.0e}".split("e")
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


def inline_svg(fig, element_id: str, label: str) -> str:
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
    return svg.replace("<svg ", f'<svg id="{element_id}" role="img" aria-label="{esc(label)}" ', 1)


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
                       f"#{finding_id(i)}" if i <= top else "#origins"))
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
    steps = event_steps[:MAX_TIMELINE_STEPS] if event_steps else sample(all_steps, min(MAX_TIMELINE_STEPS, 3))
    if not steps:
        return None, "no steps"
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
    for ax, step in zip(axes, steps):
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
                hollow = {**style[kind], "facecolors": "none", "edgecolors": style[kind]["c"], "linewidths": 1.4}
                hollow.pop("c")
                hollow["label"] += " (time not recorded: drawn at 0)"
                legend[kind + "?"] = ax.scatter([0.0] * len(unknown), [rank_pos.get(e[0], 0) for e in unknown],
                                                **hollow)
                legend[kind + "?"].set_urls([_marker_url(e) for e in unknown])
                style[kind + "?"] = hollow
        first = report.first
        if first is not None and first.iteration == step:
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
    fig = figure(1.0 + 2.1 * width, min(0.6 + 0.75 * ((bands - 1) * (nrows + 0.8) + nrows), 18))
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
        label.set_url(f"#{finding_id(0)}|{hover}" if is_origin else f"#propagation-list|{hover}")
    ax.set_xlim(-0.6, ncols - 0.4)
    ax.set_ylim(min(y for _, y in pos.values()) - 0.6, 0.6)
    dashed = sum(1 for e in edges if not e[2])
    note = (f"rank {report.first.rank}, step {report.first.iteration}: {len(report.propagation)} ops reached after "
            f"the origin. Arrows: producer -> consumer from the saved graph"
            + (f"; {dashed} dashed arrow(s) only follow time order (no graph edge known)" if dashed else "")
            + (f". {left_out} later op(s) not drawn (see the table below)." if left_out else "."))
    return inline_svg(fig, "propagation-svg", "propagation graph from the origin"), note


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
    return inline_svg(fig, "headroom-svg", "max |x| against the dtype limits"), note
