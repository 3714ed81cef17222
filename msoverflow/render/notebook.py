"""What a notebook shows of a Report or a Comparison: a one-line repr, and the verdict card as HTML
(`_repr_html_`), never the object's fields (a Report's dataclass repr runs to tens of KB).

The card is the HTML report's own (html/page.py card, verdict_card; compare.py compare_card) with a line on what
was read and where to look next; its rules are scoped so that they style the card and nothing else of the
notebook's page.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .common import read_text, scanned_text, steps_text
from .safe import plain

if TYPE_CHECKING:
    from ..comparison import Comparison
    from ..model import Report

MAX_REPR_HEADLINE = 160


def _one_line(text: str, limit: int = MAX_REPR_HEADLINE) -> str:
    text = " ".join(plain(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def report_repr(report: Report) -> str:
    """`<Report ANOMALY: overflow first created by SqrtGrad (backward of Sqrt) in ...; rank 1, step 1; DUMP>`"""
    from .text import headline
    f = report.first
    where = f"; rank {f.rank}, step {f.step}" if f is not None else ""
    return f"<Report {_one_line(headline(report)).rstrip('.')}{where}; {_one_line(report.dump_dir, 200)}>"


def report_html(report: Report) -> str:
    from .html.page import Links, esc, notebook, verdict_card
    warned = len(report.warnings)
    note = (esc(f"Read {read_text(report)}; ranks {steps_text(report.ranks)}; {scanned_text(report)}")
            + (f"; {warned} warning{'s' if warned != 1 else ''} (<code>.warnings</code>)" if warned else "")
            + ". <code>.events()</code>: every tensor read; <code>.to_dict()</code>: the JSON report.")
    return notebook(verdict_card(report, Links(), after=f'<p class="note">{note}</p>'))


def comparison_repr(c: Comparison) -> str:
    """`<Comparison DIVERGED: first at Softmax, rank 0, step 0; 106 of 156 matched op runs differ>`"""
    from .compare import headline
    differ = f"; {c.diverged_ops} of {c.matched_ops} matched op runs differ" if c.diverged_ops else ""
    return f"<Comparison {_one_line(headline(c))}{differ}; {_one_line(c.baseline, 120)} -> {_one_line(c.target, 120)}>"


def comparison_html(c: Comparison) -> str:
    from .compare import compare_card, scope_text
    from .html.page import Links, esc, notebook
    note = (f'<p class="note">{esc(scope_text(c))} <code>.frame()</code>: the {c.diverged_ops} op runs that '
            "differ, one row each; <code>.to_dict()</code>: the JSON answer.</p>")
    return notebook(compare_card(c, Links(), after=note))
