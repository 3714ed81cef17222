"""What a page shows around its plots, in chromium: a live hunt's page without empty views, the colours of the
dark scheme (readable contrast) and the printed page (light, no navigation, nothing cut at the right edge, closed
lists printed open)."""
import re

import pytest

from msoverflow.analysis import analyze
from msoverflow.render import render

from .readable import overlapping_texts, probe, raw_mathtext
from .test_html_report import _check_links, _open

pytestmark = pytest.mark.mindspore


def _rgb(css: str):
    return [int(v) for v in re.findall(r"\d+", css)[:3]]


def _luminance(css: str) -> float:
    def channel(v):
        v /= 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4
    r, g, b = (channel(v) for v in _rgb(css))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _contrast(a: str, b: str) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def _style(page, selector, prop):
    return page.eval_on_selector(selector, f"e => getComputedStyle(e).{prop}")


def test_a_live_hunt_page_has_no_empty_views(hunt_runs, browser, artifacts, tmp_path):
    """The real PyNative hunt (SqrtGrad backward overflowing at step 2): the hunt records no time within a step and
    saves only the first bad op's tensors, so its page has no timeline (one star at 0 ms) and no propagation box
    (one lone node); it says so, and keeps the headroom chart of the fp16 overflow."""
    from msoverflow.hunt.session import build_report, load_records
    hunt_dir = hunt_runs["hunt_pynative_step2"] / "hunt"
    report = build_report(str(hunt_dir), load_records(str(hunt_dir)), 0, ["python", "normhead_train.py"])
    assert report.first is not None and report.first.op_type == "SqrtGrad" and not report.propagation
    path = tmp_path / "hunt.html"
    path.write_text(render(report, "html", page_dir=str(tmp_path)), encoding="utf-8")
    page = _open(browser, path, artifacts, "hunt_pynative_step2")
    assert "SqrtGrad (backward of Sqrt)" in page.locator("#verdict").inner_text()
    assert page.locator("#timeline").count() == 0 and page.locator("#propagation").count() == 0
    assert page.locator("svg#timeline-svg").count() == 0 and page.locator("svg#propagation-svg").count() == 0
    said = {s.get_attribute("data-view"): s.inner_text() for s in page.locator("#scan .not-drawn").all()}
    assert set(said) == {"timeline", "propagation"}, said
    assert "no time within a step" in said["timeline"]
    nav = page.locator("nav").inner_text()
    assert "timeline" not in nav and "propagation" not in nav and "headroom" in nav
    bars = probe(page, "headroom-svg")
    assert raw_mathtext(bars) == [] and overlapping_texts(bars) == []
    assert "float16 max 65504" in " ".join(t["text"] for t in bars["texts"])
    _check_links(page, path)


def test_dark_scheme_and_print(real_dumps, browser, artifacts, tmp_path):
    report = analyze(str(real_dumps["normhead_fp16_overflow"]), progress=False)
    path = tmp_path / "report.html"
    path.write_text(render(report, "html", page_dir=str(tmp_path)), encoding="utf-8")
    page = _open(browser, path, artifacts, "scheme_light")
    light_bg = _style(page, "body", "backgroundColor")
    assert _luminance(light_bg) > 0.8
    assert not page.locator("#propagation-list table").is_visible()          # a closed list on screen

    page.emulate_media(color_scheme="dark")
    page.screenshot(path=str(artifacts / "scheme_dark.png"), full_page=True)
    bg = _style(page, "body", "backgroundColor")
    assert _luminance(bg) < 0.05
    assert _contrast(_style(page, "body", "color"), bg) >= 7
    card = _style(page, "#verdict", "backgroundColor")
    assert _contrast(_style(page, "#verdict dd", "color"), card) >= 7
    assert _contrast(_style(page, "nav a", "color"), bg) >= 4.5
    assert _contrast(_style(page, "tr.origin td.status", "color"), _style(page, "#rank-table", "backgroundColor")) >= 4.5
    assert _contrast(_style(page, "p.note", "color"), bg) >= 4.5
    assert _luminance(_style(page, ".plot", "backgroundColor")) > 0.95     # the plots stay on the white they need

    page.emulate_media(media="print", color_scheme="dark")                  # paper is light whatever the screen
    page.screenshot(path=str(artifacts / "scheme_print.png"), full_page=True)
    assert _luminance(_style(page, "body", "backgroundColor")) > 0.95
    assert _luminance(_style(page, "body", "color")) < 0.01
    assert _style(page, "nav", "display") == "none"
    assert page.locator("#propagation-list table").is_visible()              # printed open
    overflow = page.evaluate("() => [...document.querySelectorAll('main *')].filter(e => "
                             "e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)"
                             ".map(e => e.tagName + '#' + e.id).slice(0, 5)")
    assert overflow == []                                                    # nothing cut at the right edge
