"""The `msoverflow compare` HTML page of a real run pair (the Softmax computed in float16), opened in a real
chromium: no console errors, nothing from the network, unique ids, the error plot drawn, links resolve."""
import shutil

import pytest

from msoverflow.render.compare import render_compare_html

from .test_html_report import _check_links, _open, _plot


@pytest.mark.mindspore
def test_compare_page_of_a_real_pair(compare_pairs, browser, artifacts, tmp_path):
    import msoverflow
    # both dumps beside the page, as `compare a b -o report.html` run in their parent folder
    pair = [shutil.copytree(dump, tmp_path / side) for dump, side in zip(compare_pairs["softmax_fp16"],
                                                                           ("baseline", "target"), strict=True)]
    result = msoverflow.compare(*map(str, pair))
    path = tmp_path / "compare.html"
    path.write_text(render_compare_html(result, page_dir=str(tmp_path)), encoding="utf-8")
    page = _open(browser, path, artifacts, "compare_softmax_fp16")
    card = page.locator("#verdict").inner_text()
    assert "DIVERGED" in card and "Softmax" in card and "Attention" in card
    assert "target computed Softmax in float16 (baseline float32)" in card
    plot = _plot(page, "error-plot")
    assert "first divergence: Softmax" in plot and "network._backbone.attention" in plot
    assert "mathdefault" not in plot                 # tick labels are plain text
    rows = page.locator("#tensors tr")
    assert rows.count() == 1 + len(result.first_divergence.inputs) + len(result.first_divergence.outputs)
    hrefs = _check_links(page, path)
    assert sum(h.endswith(".npy") for h in hrefs) >= 2      # the baseline's and the target's tensor files
    assert "Cast" in page.locator("#unmatched").inner_text()
