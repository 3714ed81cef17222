"""HTML reports made from real fixtures, opened in a real chromium: they render without console errors, load
nothing from the network, show the plots and tables with the right content, and their links resolve.
Screenshots: test-artifacts/browser/*.png."""
import os
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from msoverflow.analysis import analyze
from msoverflow.model import RANK_CLEAN
from msoverflow.render import render


def _write(report, tmp_path, name):
    """The page as `analyze -o tmp_path/NAME.html` writes it (links relative to tmp_path)."""
    path = tmp_path / f"{name}.html"
    path.write_text(render(report, "html", page_dir=str(tmp_path)), encoding="utf-8")
    return path


def _open(browser, path, artifacts, name):
    page = browser.new_page()
    problems, requests = [], []
    page.on("console", lambda msg: problems.append(f"console {msg.type}: {msg.text}")
            if msg.type in ("error", "warning") else None)
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("requestfailed", lambda req: problems.append(f"request failed: {req.url}"))
    page.on("request", lambda req: requests.append(req.url))
    page.goto(path.as_uri(), wait_until="load")
    page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)
    assert problems == []
    # Self-contained: the page itself and nothing else (no CDN, no fonts, no scripts from anywhere).
    assert requests == [path.as_uri()]
    # Several inline SVGs on one page: every element id stays unique (anchors and clip paths resolve).
    assert page.evaluate("() => { const ids = [...document.querySelectorAll('[id]')].map(e => e.id);"
                         " return ids.length - new Set(ids).size; }") == 0
    return page


def _check_links(page, page_path):
    """Every link resolves: in-page anchors to one element, file links relative to the page's folder (never an
    absolute file:// link, which breaks once the page is moved or served). A file outside that folder is named,
    not linked, and the page lists its folder."""
    hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
    # markers in the plots link to their evidence (SVG anchors use xlink:href)
    hrefs += page.eval_on_selector_all("svg a", "els => els.map(e => e.getAttribute('xlink:href')"
                                                " || e.getAttribute('href')).filter(h => h)")
    assert hrefs
    for href in hrefs:
        if href.startswith("#"):
            assert page.locator(f"[id='{href[1:]}']").count() == 1, href
        else:
            url = urlparse(href)
            assert not url.scheme and not url.path.startswith("/"), href
            assert (page_path.parent / unquote(url.path)).exists(), href
    unlinked = page.eval_on_selector_all("code.unlinked", "els => els.map(e => e.getAttribute('title'))")
    if unlinked:
        listed = page.locator("#unlinked").inner_text()
        for path in unlinked:
            assert not Path(path).resolve().is_relative_to(page_path.parent.resolve()), path
            assert any(line.split(" (")[0] in path for line in listed.splitlines()[1:] if line.strip()), path
    return hrefs


def _copy_dump(dump, tmp_path):
    """The dump copied beside the page (a page links only files under its own folder)."""
    copy = tmp_path / "dump"
    shutil.copytree(dump, copy)
    return copy


def _plot(page, element_id):
    svg = page.locator(f"svg#{element_id}")
    assert svg.count() == 1, element_id
    box = svg.bounding_box()
    assert box and box["width"] > 200 and box["height"] > 80, (element_id, box)   # drawn, not collapsed
    return svg.inner_html()


def _click_origin_marker(page):
    """The first origin's star on the timeline is a link to its evidence: clicking it goes there."""
    index = page.evaluate("() => [...document.querySelectorAll('#timeline-svg a')]"
                          ".findIndex(a => a.getAttribute('xlink:href') === '#finding-0')")
    assert index >= 0
    marker = page.locator("#timeline-svg a").nth(index)
    assert marker.locator("title").text_content().startswith("origin SqrtGrad (backward of Sqrt)")   # hover text
    marker.click()
    assert page.evaluate("() => location.hash") == "#finding-0"


def _rank_rows(page, report):
    """The rank table shows each rank's status as the report has it (or says it carries none)."""
    if not report.rank_status:
        assert "carries no per-rank status" in page.locator("#ranks").inner_text()
        return
    rows = page.locator("#rank-table tbody tr")
    assert rows.count() == len(report.rank_status)
    shown = {int(rows.nth(i).get_attribute("data-rank")): rows.nth(i).locator("td.status").inner_text()
             for i in range(rows.count())}
    assert shown == {s.rank: s.status for s in report.rank_status}


@pytest.mark.mindspore
def test_single_rank_real_overflow(real_dumps, browser, artifacts, tmp_path):
    report = analyze(str(_copy_dump(real_dumps["normhead_fp16_overflow"], tmp_path)), progress=False)
    first = report.first
    assert first is not None and first.op_type == "SqrtGrad"
    path = _write(report, tmp_path, "single_rank")
    page = _open(browser, path, artifacts, "single_rank_overflow")
    card = page.locator("#verdict").inner_text()
    assert "ANOMALY" in card and "SqrtGrad" in card and "NormHead" in card
    assert f"{os.path.basename(first.source.file)}:{first.source.line}" in card
    assert first.recommendation[:40] in card
    assert "SqrtGrad" in _plot(page, "timeline-svg")
    _click_origin_marker(page)
    graph = _plot(page, "propagation-svg")
    assert "SqrtGrad" in graph and "lm_head" in graph             # op -> consumer labelled by Cell
    assert "Cast" in graph                                         # the consumer that turned it into inf
    bars = _plot(page, "headroom-svg")
    assert "float16 max 65504" in bars and "SqrtGrad in1" in bars
    evidence = page.locator("#finding-0").inner_text()
    assert "range used" in evidence and "float16" in evidence
    hrefs = _check_links(page, path)
    assert any(h.endswith(".npy") for h in hrefs)                  # tensor files
    assert any(".ir" in h for h in hrefs)                          # the saved graph
    assert first.source.file in page.locator("#unlinked").inner_text() or \
        str(Path(first.source.file).parent) in page.locator("#unlinked").inner_text()   # the source: elsewhere
    _rank_rows(page, report)


def test_multi_rank_seed_scenario(browser, artifacts, tmp_path):
    """8 ranks, 2 pipeline stages, Opdebug + binary + statistic.csv (documented formats, not a device recording)."""
    from tests.support.ascend_fixtures import build_seed_scenario
    scenario = build_seed_scenario(str(tmp_path / "dump"))
    report = analyze(str(tmp_path / "dump"), progress=False)
    assert report.first is not None and report.first.rank == scenario["true_earliest"]["rank"]
    path = _write(report, tmp_path, "multi_rank")
    page = _open(browser, path, artifacts, "multi_rank_seed")
    assert "SqrtGrad" in page.locator("#verdict").inner_text()
    timeline = _plot(page, "timeline-svg")
    assert "hardware overflow flag" in timeline and "SqrtGrad" in timeline
    for rank in report.ranks:
        assert f"rank {rank}" in timeline
    _click_origin_marker(page)
    assert "AllReduce" in _plot(page, "propagation-svg")
    _plot(page, "headroom-svg")
    _rank_rows(page, report)
    assert len(report.overflow_records) > 1
    assert f"hardware overflow records: {len(report.overflow_records)}" in page.locator("#scan").inner_text()
    _check_links(page, path)


@pytest.mark.mindspore
def test_clean_real_dump(real_dumps, browser, artifacts, tmp_path):
    report = analyze(str(real_dumps["clean_fp32"]), progress=False)
    assert report.verdict == "clean"
    path = _write(report, tmp_path, "clean")
    page = _open(browser, path, artifacts, "clean")
    assert "CLEAN" in page.locator("#verdict").inner_text()
    assert "clean rank" in _plot(page, "timeline-svg")
    assert page.locator("#propagation").count() == 0 and page.locator("#headroom").count() == 0
    _rank_rows(page, report)
    for status in report.rank_status:
        assert status.status == RANK_CLEAN
    _check_links(page, path)
    assert "dump" in page.locator("#unlinked").inner_text()      # the dump is elsewhere: named, not linked


@pytest.mark.mindspore
def test_inconclusive_real_dump(real_dumps, browser, artifacts, tmp_path):
    """A real clean dump whose step-1 tensor files were cut short: what they hold is unknown, so not clean."""
    dump = tmp_path / "dump"
    shutil.copytree(real_dumps["clean_fp32"], dump)
    cut = sorted(p for p in dump.rglob("*.npy") if p.parent.name == "1")
    assert cut
    for path in cut:
        path.write_bytes(path.read_bytes()[:60])        # the npy header is cut: unreadable
    report = analyze(str(dump), progress=False)
    if report.verdict != "inconclusive":
        # The analysis does not (yet) call this inconclusive: the renderer is still shown the reason it would give.
        report.inconclusive.append(f"{len(cut)} tensor files of step 1 could not be read")
    path = _write(report, tmp_path, "inconclusive")
    page = _open(browser, path, artifacts, "inconclusive")
    card = page.locator("#verdict").inner_text()
    assert "INCONCLUSIVE" in card
    for reason in report.inconclusive:
        assert reason in card and reason in page.locator("#inconclusive").inner_text()
    assert page.locator("#warnings li").count() == min(len(report.warnings), 300) > 0
    _plot(page, "timeline-svg")
    _check_links(page, path)


@pytest.mark.mindspore
def test_four_rank_timeline_shows_every_arrival(multirank_dumps, browser, artifacts, tmp_path):
    """The real dp4 run: rank 3 receives NaN gradients through the AllReduce at step 1, then creates its own at
    step 2. Its rank row says `origin 2`; its arrival at step 1 is a marker on the timeline (hover text), an entry
    in the arrivals list, and the marker links there."""
    report = analyze(str(multirank_dumps["dp4_two_origins"]), progress=False)
    assert (3, 1) in {(a.rank, a.iteration) for a in report.arrivals}
    path = _write(report, tmp_path, "dp4")
    page = _open(browser, path, artifacts, "dp4_two_origins")
    titles = page.eval_on_selector_all("#timeline-svg a title", "els => els.map(e => e.textContent)")
    for a in report.arrivals:
        assert any(t.startswith("arrived via") and f"(rank {a.rank}, step {a.iteration}" in t for t in titles), a
    assert page.locator("#arrival-3-1").count() == 1
    marker = page.locator("#timeline-svg a[*|href='#arrival-3-1']")
    assert marker.count() == 1
    marker.click()
    assert page.evaluate("() => location.hash") == "#arrival-3-1"
    assert "rank 1: 0,1 (not scanned: 2)" in page.locator("#scanned-steps").inner_text()
    _rank_rows(page, report)
    _check_links(page, path)
