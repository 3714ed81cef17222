"""The plots of real reports, read as a person reads them in chromium: tick labels are numbers written plainly (no
raw mathtext), no two labels overlap, and the propagation graph of a dump whose bad value branches keeps every
label clear of the others and of the edges, with edges that run left to right and do not cross.

The geometry is measured in the page (tests/browser/readable.py), not taken from the renderer's own layout."""
import pytest

from msoverflow.analysis import analyze
from msoverflow.render import render

from .readable import (
    edge_crossings,
    edges_through_labels,
    number,
    overlapping_texts,
    probe,
    raw_mathtext,
    texts_outside_frames,
    tick_labels,
)
from .test_html_report import _open

pytestmark = pytest.mark.mindspore

# single rank fp16 overflow (log-scale headroom, timeline); the zero-token dumps whose propagation branches into
# the optimizer; a real 4-rank msrun job (timeline of four ranks, arrivals)
CASES = {"normhead_fp16_overflow": "real_dumps", "zero_token_loss_division": "real_dumps",
         "zero_token_mask_weights": "real_dumps", "dp4_two_origins": "multirank_dumps"}


@pytest.fixture(params=sorted(CASES))
def page_of(request, browser, artifacts, tmp_path):
    name = request.param
    dumps = request.getfixturevalue(CASES[name])
    report = analyze(str(dumps[name]), progress=False)
    path = tmp_path / f"{name}.html"
    path.write_text(render(report, "html"), encoding="utf-8")
    page = _open(browser, path, artifacts, f"plots_{name}")
    svg_ids = page.eval_on_selector_all("main svg[id]", "els => els.map(e => e.id)")
    assert svg_ids
    return name, report, page, {svg_id: probe(page, svg_id) for svg_id in svg_ids}


def test_tick_labels_are_plain_numbers(page_of):
    name, report, page, plots = page_of
    for svg_id, found in plots.items():
        assert raw_mathtext(found) == [], (name, svg_id)
    numeric = {"timeline-svg": "x", "headroom-svg": "x"}
    for svg_id, axis in numeric.items():
        if svg_id not in plots:
            continue
        ticks = [t for t in plots[svg_id]["texts"] if t["tick"] == axis and t["text"].strip()]
        assert len(ticks) >= 2, (name, svg_id, tick_labels(plots[svg_id], axis))
        values = [number(t["text"]) for t in ticks]
        assert None not in values, (name, svg_id, [t["text"] for t in ticks])
        # on each axes (a timeline has one per step panel) the numbers grow left to right
        for axes in {t["axes"] for t in ticks}:
            mine = sorted((t["box"][0], number(t["text"])) for t in ticks if t["axes"] == axes)
            assert [v for _, v in mine] == sorted({v for _, v in mine}), (name, svg_id, mine)


def test_no_two_labels_overlap_in_any_plot(page_of):
    name, report, page, plots = page_of
    for svg_id, found in plots.items():
        assert overlapping_texts(found) == [], (name, svg_id)


def test_propagation_graph_stays_readable_when_it_branches(page_of):
    name, report, page, plots = page_of
    if not name.startswith("zero_token"):
        pytest.skip("the propagation of this dump does not branch")
    found = plots["propagation-svg"]
    labels = " ".join(t["text"] for t in found["texts"])
    # the ops the origin reached, named as the report names them (op types and their Cells)
    for f in [report.first] + report.propagation[:8]:
        assert f.op_type in labels, f.op_type
    assert "_backbone.head" in labels and "optimizer" in labels
    assert overlapping_texts(found) == []
    assert texts_outside_frames(found) == []
    assert edges_through_labels(found) == []
    assert edge_crossings(found) == []
    edges = [e["points"] for e in found["edges"] if not e["grid"]]
    assert edges
    assert all(e[-1][0] > e[0][0] for e in edges)          # layered left to right: every edge moves right
