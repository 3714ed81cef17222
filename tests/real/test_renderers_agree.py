"""One truth for every report: each fixture (real MindSpore CPU runs, real `msrun` multi-rank runs, real msprobe
dumps, and the spec-built Ascend fixtures of tests/support/ascend_fixtures.py) is rendered as text, markdown, JSON and
HTML, and the same facts are PARSED BACK from each output: the origin (rank, step, op), every rank's status and
step, every arrival (rank, step, collective), the steps scanned per rank, and who made the report (provenance). The four must agree with each other
and with the Report; the HTML timeline must draw every arrival."""
import html as htmllib
import json
import re

import pytest

from msoverflow.api import analyze  # the public API: it also records the report's provenance
from msoverflow.render import render
from tests.support import gen_msprobe_dumps, gen_real_dumps
from tests.support.ascend_fixtures import WILD_FORMS, build_pp_seed_case, build_seed_scenario, build_wild_form

STATUSES = "origin|received|flagged|clean|not dumped|incomplete"


def parse_steps(text):
    """Inverse of render.common.steps_text for the short lists fixtures have: `0-2`, `0,1`, `-`."""
    text = text.strip()
    if text in ("", "-", "none"):
        return []
    steps = []
    for part in text.split(","):
        if "-" in part:
            low, high = part.split("-")
            steps += list(range(int(low), int(high) + 1))
        else:
            steps.append(int(part))
    return steps


def parse_scanned(line, ranks):
    """`steps scanned: 0-2 on every rank` or `steps scanned: rank 0: 0-2; rank 1: 0,1 (not scanned: 2)`."""
    body = line.split(":", 1)[1].strip().rstrip(".")
    if body == "none":
        return {}
    if body.endswith("on every rank"):
        steps = parse_steps(re.sub(r"\s*\(not scanned: [^)]*\)", "", body[: -len("on every rank")]))
        return {rank: steps for rank in ranks}
    found = {}
    for part in body.split("; "):
        m = re.fullmatch(r"rank (\d+): ([\d,\-]+)(?: \(not scanned: [^)]*\))?", part.strip())
        assert m, part
        found[int(m.group(1))] = parse_steps(m.group(2))
    return found


def facts_from_text(text):
    lines = text.splitlines()
    origin = None
    if lines[0].startswith("ANOMALY"):
        where = next(l for l in lines if l.startswith("  where : "))
        m = re.match(r"  where : rank (\d+)(?: \([^)]*\))?, step (\d+), graph ", where)   # coordinates optional
        op = next(l for l in lines if l.startswith("  op: "))[len("  op: "):]
        origin = (int(m.group(1)), int(m.group(2)), op)
    ranks = {}
    start = next((i for i, line in enumerate(lines) if line.strip() == "Ranks"), None)
    for line in lines[start + 2:] if start is not None else []:
        if not line.strip():
            break
        m = re.match(rf"^(\d+)\s+({STATUSES})\s+(\d+|-)(?:\s|$)", line)
        if m:
            ranks[int(m.group(1))] = (m.group(2), None if m.group(3) == "-" else int(m.group(3)))
    arrivals = []
    start = next((i for i, line in enumerate(lines) if line.startswith("Arrivals (")), None)
    for line in lines[start + 1:] if start is not None else []:
        m = re.match(r"^  rank (\d+), step (\d+): \S+ (\S+)", line)
        if not m:
            break
        arrivals.append((int(m.group(1)), int(m.group(2)), m.group(3)))
    scanned_line = next(l for l in lines if l.startswith("Steps scanned:"))
    return origin, ranks, arrivals, scanned_line


def _unmd(text):
    return re.sub(r"\\([\\`*_\[\]<>&|])", r"\1", text).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def facts_from_markdown(md):
    origin = None
    m = re.search(r"^\*\*Anomaly\*\* .* on rank (\d+)(?: \([^)]*\))?, step (\d+)", md, re.M)
    if m:
        op = re.search(r"^- op: (`+) ?(.*?) ?\1$", md, re.M).group(2)
        origin = (int(m.group(1)), int(m.group(2)), op)
    ranks = {int(m.group(1)): (m.group(2), None if m.group(3) == "-" else int(m.group(3)))
             for m in re.finditer(rf"^\| (\d+) \| ({STATUSES}) \| (\d+|-) \|", md, re.M)}
    arrivals = [(int(m.group(1)), int(m.group(2)), _unmd(m.group(3)))
                for m in re.finditer(r"^- rank (\d+), step (\d+): \S+ (\S+)", md, re.M)]
    scanned_line = _unmd(next(l for l in md.splitlines() if l.startswith("Steps scanned:")))
    return origin, ranks, arrivals, scanned_line


def facts_from_json(doc):
    first = doc["first"]
    origin = (first["rank"], first["iteration"], first["full_name"] or first["op_name"]) if first else None
    ranks = {r["rank"]: (r["status"], r["iteration"]) for r in doc["ranks"]}
    arrivals = [(a["rank"], a["iteration"], a["op_name"]) for a in doc["arrivals"]]
    scanned = {int(rank): steps for rank, steps in doc["scanned_steps"].items()}
    return origin, ranks, arrivals, scanned


def facts_from_html(page):
    origin = None
    card = re.search(r'<section id="verdict".*?</section>', page, re.S).group(0)
    where = re.search(r"<dt>where</dt><dd>rank (\d+)(?: \([^)]*\))?, step (\d+), graph", card)
    if where and 'badge anomaly' in card:
        op = re.search(r"<dt>op</dt><dd><code>(.*?)</code>", card).group(1)
        origin = (int(where.group(1)), int(where.group(2)), htmllib.unescape(op))
    ranks = {}
    for m in re.finditer(r'<tr id="rank-(\d+)" class="[^"]*" data-rank="\d+">.*?<td class="status">([^<]*)</td>'
                         r'<td class="num">([^<]*)</td>', page):
        ranks[int(m.group(1))] = (m.group(2), None if m.group(3) == "-" else int(m.group(3)))
    arrivals = [(int(m.group(1)), int(m.group(2)), htmllib.unescape(m.group(3)))
                for m in re.finditer(r'<li id="arrival-\d+-\d+" class="arrival" data-rank="(\d+)" '
                                     r'data-step="(\d+)" data-op="([^"]*)"', page)]
    # the timeline draws every arrival: its hover text names the rank and the step
    drawn = {(int(m.group(2)), int(m.group(3))) for m in re.finditer(
        r"<title>arrived via \S+ (\S+) \(rank (\d+), step (\d+)", page)}
    scanned_line = htmllib.unescape(re.search(r'<span id="scanned-steps">([^<]*)</span>', page).group(1))
    return origin, ranks, arrivals, scanned_line, drawn


def check_agreement(report):
    """Render in all four forms, parse each, compare. Returns the facts (for fixture-specific checks)."""
    outputs = {fmt: render(report, fmt) for fmt in ("text", "markdown", "json", "html")}
    o_text, r_text, a_text, s_text = facts_from_text(outputs["text"])
    o_md, r_md, a_md, s_md = facts_from_markdown(outputs["markdown"])
    o_json, r_json, a_json, s_json = facts_from_json(json.loads(outputs["json"]))
    o_html, r_html, a_html, s_html, drawn = facts_from_html(outputs["html"])

    expected_origin = ((report.first.rank, report.first.iteration, report.first.full_name or report.first.op_name)
                       if report.first else None)
    assert o_text == o_md == o_json == o_html == expected_origin
    expected_ranks = {r.rank: (r.status, r.iteration) for r in report.rank_status}
    assert r_text == r_md == r_json == r_html == expected_ranks
    expected_arrivals = [(a.rank, a.iteration, a.op_name) for a in report.arrivals]
    assert a_text == a_md == a_json == a_html == expected_arrivals
    assert drawn == {(a.rank, a.iteration) for a in report.arrivals}
    scanned = dict(report.scanned_steps)
    for line in (s_text, s_md, s_html):
        assert parse_scanned(line, sorted(scanned)) == scanned, line
    assert s_json == scanned
    # who made it: a footer in text, a line in markdown, a block in HTML, `provenance` in JSON
    version = report.provenance.get("msoverflow_version")
    assert version
    assert f"-- msoverflow {version}" in outputs["text"]
    assert f"Made by msoverflow {version}" in outputs["markdown"]
    assert re.search(rf'<footer id="provenance"[^>]*><p>Made by msoverflow {re.escape(version)}', outputs["html"])
    assert json.loads(outputs["json"])["provenance"]["msoverflow_version"] == version
    # never claims a step that was skipped: what is scanned is a subset of what is present
    for rank, steps in scanned.items():
        if rank in report.iterations:        # (a rank holding only Opdebug records has no op-run steps)
            assert set(steps) <= set(report.iterations[rank])
    return report


# ---- real MindSpore CPU runs ---------------------------------------------------------------------------------

@pytest.mark.mindspore
@pytest.mark.parametrize("name", [case.name for case in gen_real_dumps.CASES])
def test_real_cpu_dumps_agree(real_dumps, name):
    check_agreement(analyze(str(real_dumps[name]), progress=False))


@pytest.mark.mindspore
@pytest.mark.parametrize("name", [case.name for case in gen_real_dumps.MULTI_RANK_CASES])
def test_real_msrun_dumps_agree(multirank_dumps, name):
    check_agreement(analyze(str(multirank_dumps[name]), progress=False))
    check_agreement(analyze(str(multirank_dumps[name]), progress=False, scan_all=True))


@pytest.mark.mindspore
def test_four_rank_timeline_shows_rank_3_arriving_at_step_1(multirank_dumps):
    """The real dp4 run: rank 3 receives NaN gradients at step 1 and creates its own at step 2; its rank row says
    `origin 2`, and the arrival at step 1 is in every report and on the timeline."""
    report = check_agreement(analyze(str(multirank_dumps["dp4_two_origins"]), progress=False))
    assert (3, 1) in {(a.rank, a.iteration) for a in report.arrivals}
    row = next(r for r in report.rank_status if r.rank == 3)
    assert (row.status, row.iteration) == ("origin", 2)
    # rank 1's walk stopped after its origin's step: step 2 is present but not claimed as scanned
    assert 2 in report.iterations[1] and report.scanned_steps[1] == [0, 1]


@pytest.mark.mindspore
@pytest.mark.parametrize("name", [case.name for case in gen_msprobe_dumps.CASES])
def test_real_msprobe_dumps_agree(msprobe_dumps, name):
    root = msprobe_dumps[name]
    check_agreement(analyze(str(root / "dump" if (root / "dump").is_dir() else root), progress=False))


# ---- spec-built Ascend fixtures (tests/support/ascend_fixtures.py, from vendor parser code and docs) ------------------

@pytest.mark.parametrize("options", [{}, {"formats": ("statistic",)}, {"formats": ("opdebug", "bin"),
                                                                     "overflow_only": True}],
                         ids=["opdebug+bin+statistic", "statistic", "overflow-only"])
def test_spec_built_seed_scenarios_agree(tmp_path, options):
    root = build_seed_scenario(str(tmp_path / "dump"), **options)["root"]
    check_agreement(analyze(root, progress=False))


@pytest.mark.parametrize("overflow_only", [False, True])
def test_spec_built_pipeline_case_agrees(tmp_path, overflow_only):
    report = check_agreement(analyze(build_pp_seed_case(str(tmp_path / "dump"), overflow_only=overflow_only)["root"],
                                     progress=False))
    assert len(report.rank_status) == 8


@pytest.mark.parametrize("form", WILD_FORMS)
def test_spec_built_wild_forms_agree(tmp_path, form):
    check_agreement(analyze(build_wild_form(str(tmp_path / "dump"), form)["root"], progress=False))


def test_markdown_of_a_real_dump_keeps_its_code_spans_and_writes_gt_as_is(real_dumps):
    """Issue 33 ("Markdown shows escaped backticks and &gt;"), on the real fp16 NormHead overflow: the fix line's
    command stays a code span, `x > 65504` and the spread's `->` are written as they are; names are still escaped."""
    markdown = render(analyze(str(real_dumps["normhead_fp16_overflow"]), progress=False), "markdown")
    assert "(`msoverflow patch --from report.json`)" in markdown
    assert "\\`" not in markdown and "&gt;" not in markdown
    assert "> 65504" in markdown and "` -> `" in markdown
    assert "lm\\_head" in markdown          # a name's markup characters are still escaped outside code
