"""Renderers know nothing but findings: Report in, text out."""
from __future__ import annotations

FORMATS = ("text", "json", "markdown", "html")


def render(report, fmt: str, top: int = 10) -> str:
    if fmt == "json":
        from .json_report import render_json
        return render_json(report)
    if fmt == "html":
        from .html import render_html
        return render_html(report, top)
    if fmt == "markdown":
        from .markdown import render_markdown
        return render_markdown(report, top)
    from .text import render_text
    return render_text(report, top)
