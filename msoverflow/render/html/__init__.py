"""HTML: one self-contained, offline page (no CDN, no script) with the verdict, the per-rank table and three plots.

Plots are matplotlib SVG embedded inline. Why matplotlib and not plotly: plotly needs its ~3.5 MB JS bundle inlined
in every report to work offline, and the page then renders by running that JS; matplotlib's SVG for these plots is
tens of KB (the demo's whole page: about 80 KB), appears as soon as the HTML is parsed, needs no script at all
(nothing to break, nothing blocked by a strict viewer), and keeps its text as text (searchable, copyable;
`svg.fonttype = none`). Rendering costs matplotlib's import and one draw per plot (a few seconds at most on a busy
2-core machine), bounded by the caps whatever the dump's size. What interactivity the report needs is plain
SVG: markers and graph nodes link to their evidence and show a hover text; tensor files and .ir lines are links.

- page.py: CSS, escaping, file links, the verdict card (shared by every HTML view);
- plots.py: the figures and their SVG;
- report.py: the analyze/hunt page.
"""
from .report import render_html

__all__ = ["render_html"]
