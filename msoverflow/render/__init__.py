"""Renderers know nothing but findings: Report in, text out."""
from __future__ import annotations

FORMATS = ("text", "json", "markdown", "html")


def render(report, fmt: str, top: int = 10, page_dir=None) -> str:
    """The report in one format. page_dir: the folder an HTML page is written to (its links to files under it are
    relative); default: the current directory."""
    if fmt == "json":
        from .json_report import render_json
        return render_json(report)
    if fmt == "html":
        from .html import render_html
        return render_html(report, top, page_dir)
    if fmt == "markdown":
        from .markdown import render_markdown
        return render_markdown(report, top)
    from .text import render_text
    return render_text(report, top)
