"""The page around a report: its CSS, escaping, links to files, and the verdict card (reused by every HTML view)."""
from __future__ import annotations

import html
import os
import pathlib
from typing import Optional, Sequence

from ...model import (RANK_CLEAN, RANK_FLAGGED, RANK_INCOMPLETE, RANK_NOT_DUMPED, RANK_ORIGIN, RANK_RECEIVED,
                      Report)
from ..common import clean_text, rank_where
from ..safe import plain
from ..text import op_label

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


def esc(value) -> str:
    """Everything from the dump is escaped: HTML, and characters a page cannot carry (render/safe.py)."""
    return html.escape(plain(value))


def file_uri(path: Optional[str]) -> Optional[str]:
    if not path:
        return None
    try:
        return pathlib.Path(os.path.abspath(path)).as_uri()
    except ValueError:
        return None


def file_link(path: Optional[str], label: Optional[str] = None, line: Optional[int] = None) -> str:
    uri = file_uri(path)
    if uri is None:
        return "-"
    text = (label or os.path.basename(path)) + (f":{line}" if line else "")
    return f'<a class="file" href="{esc(uri)}" title="{esc(path)}">{esc(text)}</a>'


def sample(items: Sequence, limit: int) -> list:
    """At most `limit` items, evenly spread (first and last kept)."""
    if len(items) <= limit:
        return list(items)
    step = (len(items) - 1) / (limit - 1)
    return [items[round(i * step)] for i in range(limit)]


def finding_id(index: int) -> str:
    return f"finding-{index}"


def verdict_card(report: Report) -> str:
    verdict = report.verdict
    f = report.first
    out = [f'<section id="verdict" class="card {verdict}">',
           f'<h2 style="border:0;margin:0">Verdict <span class="badge {verdict}">{esc(verdict.upper())}</span></h2>']
    if f is not None:
        # A finding that only the hardware flag names (its inputs were not dumped) is not called the origin.
        role = {"flagged": "flagged (not proven)", "propagator": "first seen in"}.get(f.role, "origin")
        items = [(role, f"<strong>{esc(op_label(f))}</strong>"),
                 ("kind", esc(f.kind)),
                 ("where", f"{esc(rank_where(f.rank, report))}, step {f.iteration}, graph {esc(f.graph)}"),
                 ("what", esc(f.detail)),
                 ("Cell", esc(f"{f.cell or '-'}" + (f" ({f.cell_type})" if f.cell_type else ""))),
                 ("source", (f"{file_link(f.source.file, f.source.file, f.source.line)} "
                             f"<code>{esc(f.source.code)}</code>") if f.source else "not known (no saved graph)"),
                 ("op", f"<code>{esc(f.full_name or f.op_name)}</code>"
                        + (f" ({file_link(f.ir_file, None, f.ir_line)})" if f.ir_file else "")),
                 ("fix", esc(f.recommendation) or "-")]
    elif verdict == "inconclusive":
        items = [("why", "<ul>" + "".join(f"<li>{esc(r)}</li>" for r in report.inconclusive) + "</ul>")]
    else:
        items = [("result", esc(clean_text(report)))]
    out.append("<dl>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items) + "</dl>")
    if f is not None and report.inconclusive:
        out.append('<p class="note">Also not understood: ' + "; ".join(esc(r) for r in report.inconclusive) + "</p>")
    out.append("</section>")
    return "\n".join(out)
