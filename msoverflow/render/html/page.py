"""The page around a report: its CSS, escaping, links to files, and the verdict card (reused by every HTML view)."""
from __future__ import annotations

import html
import itertools
import os
import re
import urllib.parse
from typing import Dict, Optional, Sequence, Tuple

from ...model import RANK_CLEAN, RANK_FLAGGED, RANK_INCOMPLETE, RANK_NOT_DUMPED, RANK_ORIGIN, RANK_RECEIVED, Report
from ..common import (
    bad_value_phrase,
    cause_shown,
    cause_values_text,
    clean_text,
    fixes_shown,
    kind_shown,
    made_shown,
    rank_where,
)
from ..safe import plain
from ..text import op_label

STATUS_CLASS = {RANK_ORIGIN: "origin", RANK_RECEIVED: "received", RANK_FLAGGED: "flagged", RANK_CLEAN: "clean",
                RANK_NOT_DUMPED: "notdumped", RANK_INCOMPLETE: "incomplete"}
COLORS = {"origin": "#c62828", "arrival": "#ef6c00", "flag": "#6a1b9a", "clean": "#2e7d32", "spread": "#78909c",
          "span": "#e0e0e0"}

# Colours are variables: light by default, dark when the reader's system asks for it, light and flat on paper.
# The plots stay drawn on white in both schemes (their colours were chosen for white).
_VARIABLES = """
:root{color-scheme:light dark;--bg:#fafafa;--fg:#212121;--panel:#fff;--line:#ddd;--head:#f0f0f0;--muted:#616161;
--label:#555;--code:#f3f3f3;--link:#1a4fa0;--bad:#c62828;--recv:#d84315;--flag:#6a1b9a;--ok:#2e7d32;--grey:#757575;
--incomplete:#9a5b00;--warn:#f9a825}
@media (prefers-color-scheme: dark){:root{--bg:#121212;--fg:#e6e6e6;--panel:#1d1d1d;--line:#3c3c3c;--head:#262626;
--muted:#b0b0b0;--label:#c4c4c4;--code:#2b2b2b;--link:#8ab4f8;--bad:#ff8a80;--recv:#ffb74d;--flag:#ce93d8;
--ok:#81c784;--grey:#a8a8a8;--incomplete:#ffcc80;--warn:#fdd835}}
"""
# The verdict card and what it holds: the page's rules, and a notebook's display (scoped there, see notebook()).
_CARD = """
a{color:var(--link)}
.card{background:var(--panel);border:1px solid var(--line);border-left:8px solid var(--grey);border-radius:6px;
padding:12px 18px}
.card.anomaly{border-left-color:var(--bad)}.card.clean{border-left-color:var(--ok)}
.card.inconclusive{border-left-color:var(--warn)}
.card h2{border:0;margin:0;font-size:1.2em}
.card dl{display:grid;grid-template-columns:max-content 1fr;gap:4px 16px;margin:8px 0}
.card dt{font-weight:600;color:var(--label)}.card dd{margin:0}
.badge{display:inline-block;padding:2px 10px;border-radius:12px;color:#fff;font-weight:600;font-size:.9em}
.badge.anomaly{background:#c62828}.badge.clean{background:#2e7d32}.badge.inconclusive{background:#f9a825;color:#000}
code{background:var(--code);padding:1px 4px;border-radius:3px;font-size:.92em;word-break:break-all}
.note{color:var(--muted);font-size:.9em}
"""
CSS = _VARIABLES + """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;background:var(--bg);color:var(--fg)}
main{max-width:1200px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:1.5em;margin:.4em 0}
h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid var(--line);padding-bottom:4px}
""" + _CARD + """table{border-collapse:collapse;background:var(--panel);font-size:.88em;margin:6px 0}
th,td{border:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top}
th{background:var(--head)} td.num{text-align:right;font-variant-numeric:tabular-nums}
td.bad{color:var(--bad);font-weight:600}
tr.origin td:nth-child(2){color:var(--bad);font-weight:600}
tr.received td:nth-child(2){color:var(--recv);font-weight:600}
tr.flagged td:nth-child(2){color:var(--flag);font-weight:600} tr.clean td:nth-child(2){color:var(--ok)}
tr.notdumped td:nth-child(2){color:var(--grey);font-style:italic}
tr.incomplete td:nth-child(2){color:var(--incomplete);font-weight:bold}
.plot{background:#fff;color-scheme:light;border:1px solid var(--line);border-radius:6px;padding:6px;overflow-x:auto}
.plot svg{max-width:100%;height:auto} .scroll{max-height:30em;overflow-y:auto;display:inline-block}
.warn li{margin:2px 0}
nav a{margin-right:12px}
@media print{
:root{color-scheme:light;--bg:#fff;--fg:#000;--panel:#fff;--line:#bbb;--head:#eee;--muted:#444;--label:#333;
--code:#f3f3f3;--link:#000;--bad:#b71c1c;--recv:#bf360c;--flag:#4a148c;--ok:#1b5e20;--grey:#555;--incomplete:#6d4c00}
nav{display:none} main{max-width:none;padding:0} a{text-decoration:none}
.plot{border:0;padding:0;overflow:visible} .plot svg{max-width:100%!important;min-width:0!important;height:auto}
.scroll{max-height:none;overflow:visible;display:block}
section,article,.card,.plot,tr{break-inside:avoid} h2,h3{break-after:avoid}
details::details-content{content-visibility:visible;display:contents} details>summary{list-style:none}
}
"""
# In a notebook the card sits in a page that is not ours: its rules apply inside .msoverflow only, and its colours
# follow the notebook's theme (JupyterLab's variables) where it has one.
NOTEBOOK_SCOPE = "msoverflow"
_NOTEBOOK_VARIABLES = (f".{NOTEBOOK_SCOPE}{{--panel:var(--jp-layout-color1,transparent);"
                       "--line:var(--jp-border-color2,#ccc);--label:var(--jp-ui-font-color2,#666);"
                       "--muted:var(--jp-ui-font-color2,#666);--code:var(--jp-layout-color2,rgba(127,127,127,.15));"
                       "--link:var(--jp-content-link-color,#1a4fa0);--bad:#c62828;--ok:#2e7d32;--warn:#f9a825;"
                       "--grey:#757575}")


def _scoped(rules: str, scope: str) -> str:
    """Each selector of `rules` (one rule per block, no nesting) prefixed with `scope`."""
    def prefix(match):
        selectors = ",".join(f"{scope} {sel.strip()}" for sel in match.group(1).split(","))
        return selectors + "{"
    return re.sub(r"([^{}]+)\{", prefix, rules.strip())


_NOTEBOOK_DISPLAYS = itertools.count(1)
_ID = re.compile(r'\b(id="|href="#)([\w-]+)"')


def notebook(body: str) -> str:
    """A notebook's display (_repr_html_): `body` (a card, a line) with the card's rules scoped to it. One notebook
    page holds many displays: each display's ids get its own number (`verdict-3`), so no two elements of the page
    share an id."""
    number = next(_NOTEBOOK_DISPLAYS)
    body = _ID.sub(lambda m: f'{m.group(1)}{m.group(2)}-{number}"', body)   # a link to the card follows it
    return (f'<div class="{NOTEBOOK_SCOPE}"><style>{_NOTEBOOK_VARIABLES}'
            f'{_scoped(_CARD, "." + NOTEBOOK_SCOPE)}</style>{body}</div>')


def esc(value) -> str:
    """Everything from the dump is escaped: HTML, and characters a page cannot carry (render/safe.py)."""
    return html.escape(plain(value))


MAX_UNREACHABLE_SHOWN = 6


class Links:
    """Links from one page to files. A file under the page's own folder gets a relative link (it still opens when
    the folder is moved, zipped or served); a file elsewhere is named, not linked (an absolute file:// link breaks
    on any other machine and from a served page), and the page says which folders it could not reach (note())."""

    def __init__(self, page_dir: Optional[str] = None):
        self.base = os.path.abspath(page_dir or os.getcwd())
        self.unreachable: Dict[str, int] = {}      # folder -> files named there, not linked

    def href(self, path: str) -> Optional[str]:
        try:
            relative = os.path.relpath(os.path.abspath(path), self.base)
        except ValueError:          # another drive
            return None
        if relative == os.pardir or relative.startswith(os.pardir + os.sep) or os.path.isabs(relative):
            return None
        # bytes: a name that is not UTF-8 (surrogate-escaped by Python) is quoted byte for byte, as the file is named
        return urllib.parse.quote(os.fsencode(relative.replace(os.sep, "/")))

    def file(self, path: Optional[str], label: Optional[str] = None, line: Optional[int] = None,
             folder: bool = False) -> str:
        """The file (or folder) as a relative link, or its name with the full path as hover text; "-" without one."""
        if not path:
            return "-"
        text = (label or os.path.basename(path)) + (f":{line}" if line else "")
        href = self.href(path)
        if href is None:
            where = os.path.abspath(path) if folder else os.path.dirname(os.path.abspath(path))
            self.unreachable[where] = self.unreachable.get(where, 0) + 1
            return f'<code class="file unlinked" title="{esc(path)}">{esc(text)}</code>'
        return f'<a class="file" href="{esc(href)}" title="{esc(path)}">{esc(text)}</a>'

    def note(self) -> str:
        """What this page names but cannot link, or ""."""
        if not self.unreachable:
            return ""
        by_root: Dict[str, int] = {}
        for folder, n in self.unreachable.items():       # one line per top folder, not per step directory
            root = _common_root(folder, by_root)
            by_root[root] = by_root.get(root, 0) + n
        shown = sorted(by_root.items())[:MAX_UNREACHABLE_SHOWN]
        more = len(by_root) - len(shown)
        items = "".join(f"<li><code>{esc(folder)}</code> ({n} file{'s' if n > 1 else ''})</li>" for folder, n in shown)
        return (f'<div id="unlinked"><p class="note">Not linked from this page: files outside its folder '
                f"<code>{esc(self.base)}</code> (a link there would break once the page is moved or served; write "
                "the page into a folder that holds them to link them). Their names are shown; the full path is the "
                f"hover text.</p><ul class=\"note\">{items}</ul>"
                + (f'<p class="note">{more} more folders.</p>' if more > 0 else "") + "</div>")


def _common_root(folder: str, roots: Dict[str, int]) -> str:
    """The folder already listed that holds `folder` or is held by it (then the shorter one), else `folder`."""
    for root in list(roots):
        if folder == root or folder.startswith(root.rstrip(os.sep) + os.sep):
            return root
        if root.startswith(folder.rstrip(os.sep) + os.sep):
            roots[folder] = roots.pop(root)
            return folder
    return folder


def sample(items: Sequence, limit: int) -> list:
    """At most `limit` items, evenly spread (first and last kept)."""
    if len(items) <= limit:
        return list(items)
    step = (len(items) - 1) / (limit - 1)
    return [items[round(i * step)] for i in range(limit)]


def finding_id(index: int) -> str:
    return f"finding-{index}"


def card(kind: str, badge: str, items: Sequence[Tuple[str, str]], lead: str = "", after: str = "") -> str:
    """The verdict card every HTML view starts with (analyze, hunt, compare, a notebook's display): the badge
    (kind: anomaly, clean or inconclusive), a line, then (term, HTML) items. lead, items and after are HTML."""
    return "\n".join([f'<section id="verdict" class="card {kind}">',
                      f'<h2>Verdict <span class="badge {kind}">{esc(badge)}</span></h2>',
                      f"<p>{lead}</p>" if lead else "",
                      "<dl>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items) + "</dl>", after,
                      "</section>"])


def verdict_card(report: Report, links: Optional[Links] = None, after: str = "") -> str:
    """The verdict at a glance: its badge, the origin, where, what, its cause, the Cell and source line, the fix."""
    links = links or Links()
    verdict = report.verdict
    f = report.first
    if f is not None:
        # A finding that only the hardware flag names (its inputs were not dumped) is not called the origin.
        role = "flagged (not proven)" if f.role == "flagged" else \
            "first seen in" if made_shown(f) == "first seen in" else "origin"
        items = [(role, f"<strong>{esc(op_label(f))}</strong>"),
                 ("kind", esc(kind_shown(f))),
                 ("where", f"{esc(rank_where(f.rank, report))}, step {f.step}, graph {esc(f.graph)}"),
                 ("what", esc(f.detail)),
                 *((("cause", f'<strong class="cause">{esc(shown[0])}</strong>: {esc(shown[1])}'),)
                   if (shown := cause_shown(report, f)) is not None else ()),
                 *((("values", esc(cause_values_text(f.cause))),) if f.cause is not None and cause_values_text(f.cause)
                   else ()),
                 ("Cell", esc(f"{f.cell or '-'}" + (f" ({f.cell_type})" if f.cell_type else ""))),
                 ("source", (f"{links.file(f.source.file, f.source.file, f.source.line)} "
                             f"<code>{esc(f.source.code)}</code>") if f.source else "not known (no saved graph)"),
                 ("op", f"<code>{esc(f.full_name or f.op_name)}</code>"
                        + (f" ({links.file(f.ir_file, None, f.ir_line)})" if f.ir_file else "")),
                 ("fix", "<br>".join(esc(fix) for fix in fixes_shown(report, f)) or "-")]
    elif verdict == "inconclusive":
        seen = bad_value_phrase(report)
        items = ([("bad values", esc(seen))] if seen else []) + [
            ("why", "<ul>" + "".join(f"<li>{esc(r)}</li>" for r in report.inconclusive) + "</ul>")]
    else:
        items = [("result", esc(clean_text(report)))]
    if f is not None and report.inconclusive:
        after = '<p class="note">Also not understood: ' + "; ".join(esc(r) for r in report.inconclusive) + \
            "</p>" + after
    return card(verdict, verdict.upper(), items, after=after)
