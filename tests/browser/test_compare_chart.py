"""compare's error chart, read in chromium: every Cell is a series a reader can tell apart (its own colour and
marker pair, the same on every panel), tick labels are plain numbers, and no two labels overlap."""
import dataclasses

import pytest

from msoverflow.render.compare import render_compare_html

from .readable import legend_styles, number, overlapping_texts, probe, raw_mathtext, tick_labels
from .test_html_report import _open

pytestmark = pytest.mark.mindspore


def _chart(browser, artifacts, tmp_path, comparison, name):
    path = tmp_path / f"{name}.html"
    path.write_text(render_compare_html(comparison), encoding="utf-8")
    return probe(_open(browser, path, artifacts, name), "error-plot")


def _cells(comparison):
    return {p[3] for p in comparison.series}


def _check(found, cells):
    styles = legend_styles(found)
    assert len(styles) == len(cells) and None not in {s for pair in styles.values() for s in pair}, styles
    distinct = len(set(styles.values()))                          # no two series share colour and marker
    assert distinct == len(styles), f"{distinct} distinct (colour, marker) pairs for {len(styles)} Cells"
    assert raw_mathtext(found) == [] and overlapping_texts(found) == []
    assert all(number(t) is not None for t in tick_labels(found, "y")), tick_labels(found, "y")


def test_eleven_cells_of_a_real_pair_are_eleven_distinct_series(compare_pairs, browser, artifacts, tmp_path):
    import msoverflow
    result = msoverflow.compare(*compare_pairs["demo_fp16_vs_fp32"])
    assert len(_cells(result)) > 10                # more Cells than matplotlib's ten default colours
    _check(_chart(browser, artifacts, tmp_path, result, "compare_demo_fp16"), _cells(result))


def test_more_cells_than_the_chart_names_fold_into_other(compare_pairs, browser, artifacts, tmp_path):
    """The real pair's op runs spread over 13, then 20 Cells (by position): 13 distinct series; past the cap the
    rest is one '(other)' series that says how many Cells it holds."""
    import msoverflow
    from msoverflow.render.compare import MAX_PLOT_CELLS
    result = msoverflow.compare(*compare_pairs["softmax_fp16"])
    for n in (13, 20):
        spread = [(r, s, pos, f"network.block{pos % n}", e, role) for r, s, pos, _c, e, role in result.series]
        relabelled = dataclasses.replace(result, series=spread)
        found = _chart(browser, artifacts, tmp_path, relabelled, f"compare_{n}_cells")
        shown = min(n, MAX_PLOT_CELLS) + (1 if n > MAX_PLOT_CELLS else 0)
        _check(found, range(shown))
        if n > MAX_PLOT_CELLS:
            assert any(f"({n - MAX_PLOT_CELLS} more Cells)" in label for label in legend_styles(found))
