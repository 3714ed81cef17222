"""Reports of hostile dumps (issue 21's renderer classes): names a dump can carry never reach a reader unescaped,
never break a renderer, and large dumps give bounded reports that say what they left out.
- markdown: HTML in op names is text (a report pasted into an issue tracker renders nothing);
- text: control characters (ESC sequences, CR, bidi overrides) and rich markup are shown, never acted on;
- HTML: matplotlib mathtext in op names (`$...$`, deep braces) and non-UTF-8 names (surrogate escapes) draw fine;
- caps: 30,000 outputs, 100,000 rank rows, 20,000 arrivals."""
import json
import re

import pytest

from msoverflow.model import (
    OUTPUT,
    RANK_CLEAN,
    RANK_NOT_DUMPED,
    RANK_RECEIVED,
    Arrival,
    Finding,
    RankStatus,
    Report,
    TensorStats,
    TensorSummary,
)
from msoverflow.render import render
from msoverflow.render.safe import md, md_code, plain

HOSTILE = [
    "<img src=x onerror=alert(1)>",
    "<script>alert(1)</script>",
    "\x1b[2J\x1b[31mred\x1b]0;title\x07",
    "line\rover\x08\x7f\x9b",
    "\u202eevil\u200b",
    "[bold]x[/]",
    "[/]",
    "$\\frac{a}{b}$",
    "$" + "{" * 400 + "x" + "}" * 400 + "$",
    "$x^{$y$}$ \\\\ _ ^",
    "bad\udcff\udcfeutf8",
    "`code` ``two`` |pipe| *star* [link](javascript:alert(1))",
    "a\nb",
]


def _tensor(slot, bad=False, exact=True):
    stats = TensorStats(count=8, posinf=1 if bad else 0, max=1.0, min=-1.0, max_abs=1.0, counts_exact=exact)
    return TensorSummary(slot=slot, io=OUTPUT, dtype="float16", shape=(8,), stats=stats, file="/d/f.npy")


def _finding(name, rank=0, outputs=None):
    return Finding(rank=rank, graph="0", step=1, op_type=name, op_name=name, role="origin", kind="overflow",
                   detail=f"overflow in {name}", timestamp=1000, full_name=f"Default/{name}", forward_op=name,
                   cell=name, cell_type=name, inputs=[_tensor(0)], outputs=outputs or [_tensor(0, bad=True)],
                   recommendation=f"fix {name}", evidence=[f"seen {name}"], producers=[f"Default/{name}"])


def _report(name, **extra):
    first = _finding(name)
    spread = [_finding(f"{name}{i}") for i in range(3)]
    return Report(dump_dir="/dump", first=first, anomalies=[first, _finding(name, rank=1)], propagation=spread,
                  warnings=[f"{name}: cannot read"], ranks=[0, 1], steps={0: [0, 1], 1: [0, 1]}, files=4,
                  layout=name, rank_status=[RankStatus(0, "origin", 1, name, name),
                                            RankStatus(1, RANK_RECEIVED, 1, name, name, via=f"{name} {name}")],
                  coverage=[name], arrivals=[Arrival(1, 1, name, name, 5)], scanned_steps={0: [0, 1], 1: [0, 1]},
                  edges=[(f"Default/{name}", f"Default/{name}0")], step_times={0: {1: (0, 2000)}, 1: {1: (0, 2000)}},
                  provenance={"msoverflow_version": name, "command": ["msoverflow", "analyze", name], "host": name},
                  **extra)


def _outside_code(markdown):
    """The markdown with every code span removed (raw HTML inside a code span is shown, not rendered)."""
    out, i = [], 0
    while i < len(markdown):
        if markdown[i] == "\\":                              # an escaped character is text, not markup
            out.append(markdown[i:i + 2])
            i += 2
            continue
        if markdown[i] == "`":
            run = re.match(r"`+", markdown[i:]).group(0)
            end = markdown.find(run, i + len(run))
            assert end != -1, f"unclosed code span at {markdown[i:i + 60]!r}"
            i = end + len(run)
            continue
        out.append(markdown[i])
        i += 1
    return "".join(out)


@pytest.mark.parametrize("name", HOSTILE)
def test_markdown_never_renders_html_from_a_dump(name):
    markdown = render(_report(name), "markdown")
    prose = _outside_code(markdown)
    # `<` starts HTML; `>` is markup only where a line starts (a quote), and mid-line is shown as it is
    assert "<" not in prose and not re.search(r"^\s*>", prose, re.M)
    assert "](" not in prose.replace("\\](", "")          # no link a viewer would follow
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e\ud800-\udfff]", markdown)
    markdown.encode("utf-8")


@pytest.mark.parametrize("name", HOSTILE)
def test_text_never_sends_control_characters_to_the_terminal(name):
    text = render(_report(name), "text")
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b\u202e\ud800-\udfff]", text)
    text.encode("utf-8")
    if "\x1b" in name:
        assert "\\x1b[31mred" in text                       # shown, escaped, where the name stands
    if "[bold]" in name:
        assert "[bold]x[/]" in text                          # rich markup shown as written


@pytest.mark.parametrize("name", HOSTILE)
def test_html_escapes_and_draws_every_name(name):
    page = render(_report(name), "html")
    page.encode("utf-8")                                    # a surrogate would raise here
    assert "<img src=x" not in page and "<script>alert" not in page
    assert page.count('<svg id="timeline-svg"') == 1 and page.count('<svg id="propagation-svg"') == 1
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]", page)


def test_mathtext_stays_text_in_the_plots():
    name = "$\\frac{a}{b}$"
    page = render(_report(name), "html")
    svg = re.search(r'<svg id="propagation-svg".*?</svg>', page, re.S).group(0)
    assert "$\\frac{a}{b}$"[:8] in svg                       # drawn as written, not typeset


def test_json_keeps_names_as_data():
    for name in HOSTILE:
        doc = json.loads(render(_report(name), "json"))
        assert doc["first"]["op_type"] == name.encode("utf-8", "surrogatepass").decode("utf-8", "replace") \
            or doc["first"]["op_type"] == name


def test_safe_helpers():
    assert plain("a\x1bb\u202ec\udcff") == "a\\x1bb\\u202ec\\udcff"
    assert md("<b>&x|y*") == "&lt;b>&amp;x\\|y\\*" and md(">a") == "\\>a"
    # msoverflow's own prose quotes commands as code spans: kept as such, nothing escaped inside
    assert md("run `msoverflow patch --from report.json` (x > 1)") == \
        "run `msoverflow patch --from report.json` (x > 1)"
    assert md_code("a`b") == "``a`b``" and md_code("`a") == "`` `a ``" and md_code("x|y", table=True) == "`x\\|y`"


# ---- caps -------------------------------------------------------------------------------------------------------

def test_thirty_thousand_outputs_make_bounded_tables_that_say_what_they_left_out():
    outputs = [_tensor(i, bad=(i == 29_999)) for i in range(30_000)]
    first = _finding("Split", outputs=outputs)
    report = Report(dump_dir="/d", first=first, anomalies=[first], propagation=[], warnings=[], ranks=[0],
                    steps={0: [1]}, files=30_001, scanned_steps={0: [1]})
    text = render(report, "text")
    assert len(text) < 20_000 and "29984 more not shown (0 of them bad)" in text
    assert re.search(r"^29999\s", text, re.M)              # the bad one is shown first, whatever its slot
    markdown = render(report, "markdown")
    assert len(markdown) < 20_000 and "29984 more not shown" in markdown
    page = render(report, "html")
    assert len(page) < 400_000 and "29968 more not shown" in page


def test_a_hundred_thousand_rank_rows_fold_and_stop():
    rows = [RankStatus(0, "origin", 1, "Div", "Div"), RankStatus(1, RANK_CLEAN)]
    rows += [RankStatus(r, RANK_NOT_DUMPED, note="missing") for r in range(2, 100_000, 2)]
    rows += [RankStatus(r, RANK_RECEIVED, 1, "AllReduce", "AllReduce", via="AllReduce x") for r in range(3, 100_000, 2)]
    arrivals = [Arrival(r, 1, "AllReduce", "AllReduce-op0", 10) for r in range(3, 40_000, 2)]
    first = _finding("Div")
    report = Report(dump_dir="/d", first=first, anomalies=[first], propagation=[], warnings=[], ranks=[0, 1],
                    steps={0: [1], 1: [1]}, files=2, rank_status=rows, arrivals=arrivals,
                    scanned_steps={r: [1] for r in range(0, 100_000)})
    text = render(report, "text")
    assert len(text) < 40_000 and "more rank(s) not shown; --format json lists every rank" in text
    assert "19935 more arrival(s)" in text
    markdown = render(report, "markdown")
    assert len(markdown) < 40_000 and "more rank(s) not shown" in markdown
    page = render(report, "html")
    assert len(page) < 2_000_000 and "more rank(s) not shown" in page and "rank(s) without events not drawn" in page


def test_runs_of_not_dumped_ranks_fold_into_one_row():
    rows = [RankStatus(0, "origin", 1, "Div", "Div")] + [RankStatus(r, RANK_NOT_DUMPED, note=f"rank {r} missing")
                                                        for r in range(1, 100_000)]
    first = _finding("Div")
    report = Report(dump_dir="/d", first=first, anomalies=[first], propagation=[], warnings=[], ranks=[0],
                    steps={0: [1]}, files=2, rank_status=rows, scanned_steps={0: [1]})
    text = render(report, "text")
    assert re.search(r"^1-99999\s+not dumped", text, re.M) and "folded into one row" in text
