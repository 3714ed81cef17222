"""`msoverflow watch` and `analyze --history` as text, JSON and HTML (the headroom of the tracked tensors over
steps, with the events marked). The WatchReport itself is msoverflow/watcher/report.py's."""
from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..watcher.report import WatchReport

PLOTTED = 8


def render_text(report: WatchReport) -> str:
    lines = [f"{report.verdict}: {len(report.events)} event(s) over {report.steps_read} step(s) of "
             f"{len(report.store.tensors)} tracked tensor(s) ({report.source})"]
    for event in report.events:
        lines.append(f"  {event.line()}")
    cause = report.root_cause
    if cause is not None:
        lines.append(f"root cause: {cause.summary}")
        for item in cause.evidence:
            lines.append(f"  evidence: {item}")
        if cause.fix:
            lines.append(f"  fix ({cause.cause}): {cause.fix}")
    if report.first is not None and report.first.first is not None:
        f = report.first.first
        lines.append(f"origin (full dump of step {f.step}, {report.first_dump}): {f.op_type} {f.op_name}")
    elif report.first is not None:
        lines.append(f"full dump of the event step ({report.first_dump}): {report.first.verdict}")
    for note in report.notes:
        lines.append(f"note: {note}")
    cap = report.capture
    if cap:
        lines.append("capture: " + ", ".join(f"{k} {v}" for k, v in cap.items() if not isinstance(v, (dict, list))))
    return "\n".join(lines) + "\n"


def render_json(report: WatchReport) -> str:
    return json.dumps(report.to_dict(), indent=2, default=str) + "\n"


def render_html(report: WatchReport) -> str:
    from .html.plots import figure, inline_svg, plain_ticks, plot_settings
    body = [f"<h1>msoverflow watch: {html.escape(report.verdict)}</h1>",
            f"<p>{html.escape(render_text(report).splitlines()[0])}</p>"]
    series = report.headroom_series(PLOTTED)
    if series:
        with plot_settings():
            fig = figure(9.0, 4.2)
            ax = fig.add_subplot(1, 1, 1)
            for tracked, steps, room in series:
                ax.plot(steps, room, marker=".", linewidth=1.2, label=f"{tracked.label} ({tracked.dtype})")
            colours = {"nonfinite": "red", "spike": "orange", "divergence": "purple", "projected_overflow": "blue"}
            seen = set()
            for event in report.events:
                label = event.kind if event.kind not in seen else None
                seen.add(event.kind)
                ax.axvline(event.step, color=colours.get(event.kind, "grey"), linestyle="--", linewidth=1,
                           label=label)
            ax.axhline(0, color="black", linewidth=0.8)
            ax.set_xlabel("step")
            ax.set_ylabel("headroom: log10(dtype max / max |x|)")
            ax.legend(fontsize=7, loc="best")
            plain_ticks(fig)
            body.append(inline_svg(fig, "watch-headroom", "headroom of the tracked tensors over steps"))
    if report.events:
        body.append("<h2>Events</h2><table><tr><th>step</th><th>kind</th><th>tensor</th><th>op</th><th>cell</th>"
                    "<th>range used</th><th>growth/step</th><th>projected step</th><th>detail</th></tr>")
        for e in report.events:
            body.append("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in (
                e.step, e.kind, e.tensor, e.op, e.cell,
                "" if e.range_used is None else f"{e.range_used:.3g}",
                "" if e.growth is None else f"{e.growth * 100:+.1f}%",
                "" if e.projected_step is None else e.projected_step, e.detail)) + "</tr>")
        body.append("</table>")
    if report.root_cause is not None:
        c = report.root_cause
        body.append(f"<h2>Root cause: {html.escape(c.cause)}</h2><p>{html.escape(c.summary)}</p><ul>"
                    + "".join(f"<li>{html.escape(x)}</li>" for x in c.evidence)
                    + f"</ul><p>Fix: {html.escape(c.fix)}</p>")
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>msoverflow watch</title></head><body>"
            + "\n".join(body) + "</body></html>\n")


def render(report: WatchReport, fmt: str) -> str:
    return {"json": render_json, "html": render_html}.get(fmt, render_text)(report)
