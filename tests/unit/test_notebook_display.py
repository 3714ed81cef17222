"""What a notebook shows of a Report or a Comparison (issue 27, item 2): a one-line repr and the verdict card as
HTML, not the object's fields (19 KB and 53 KB on real runs before); Comparison.frame(). Synthetic dumps here; the
real notebook run through a kernel is tests/real/test_notebook.py."""
import re

import numpy as np
import pytest

import msoverflow
from msoverflow.render.html.page import NOTEBOOK_SCOPE
from tests.cli.test_compare_numbers import _pair
from tests.support.synth_dump import SynthDump, same_run_pair

MAX_HTML = 4000        # the card and its scoped style: about 3 KB on the real runs
MAX_REPR = 500
KIND = {"ANOMALY": "anomaly", "DIVERGED": "anomaly", "CLEAN": "clean", "EQUIVALENT": "clean"}


def _overflow(root):
    SynthDump(str(root), rank=0).op(1, "Mul", "Default_network-Net_Mul-op1", [np.ones(2, np.float32)],
                                    [np.array([1e5, 1.0], np.float32)], declared="float16")
    return msoverflow.analyze(str(root))


def _rules_stay_in_the_card(page: str):
    """Every selector of the displayed <style> is scoped to the card's div: the notebook's own page is untouched."""
    assert page.startswith(f'<div class="{NOTEBOOK_SCOPE}">') and page.endswith("</div>")
    css = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
    selectors = [s.strip() for group in re.findall(r"([^{}]+)\{", css) for s in group.split(",")]
    assert selectors and all(s.startswith(f".{NOTEBOOK_SCOPE}") for s in selectors), selectors


def assert_displayed(page: str, text: str, badge: str, starts: str):
    """What a notebook shows: the verdict card as short HTML whose rules stay in the card, and one line of text
    starting with `starts`; none of the objects' fields."""
    assert len(page) < MAX_HTML and f'<span class="badge {KIND[badge]}">{badge}</span>' in page
    _rules_stay_in_the_card(page)
    assert "\n" not in text and len(text) < MAX_REPR and text.startswith(starts)
    for field in ("Finding(", "RankStatus(", "OpDiff(", "TensorDiff("):
        assert field not in page + text


def test_a_report_shows_one_line_and_its_verdict_card(tmp_path):
    report = _overflow(tmp_path / "bad")
    page, text = report._repr_html_(), repr(report)
    assert_displayed(page, text, "ANOMALY", "<Report ANOMALY: overflow first created by Mul")
    assert "rank 0, step 1" in text and str(tmp_path / "bad") in text
    assert "Mul" in page and "rank 0, step 1" in page

    a, _b = same_run_pair(str(tmp_path / "pair"))
    clean = msoverflow.analyze(a)
    assert repr(clean).startswith("<Report CLEAN: no inf, NaN or out-of-range value") and ".;" not in repr(clean)
    assert '<span class="badge clean">CLEAN</span>' in clean._repr_html_()


def test_a_comparison_shows_one_line_and_its_verdict_card(tmp_path):
    c = msoverflow.compare(*_pair(tmp_path))
    assert_displayed(c._repr_html_(), repr(c), "DIVERGED",
                     "<Comparison DIVERGED: first at Mul, rank 0, step 0; 3 of 3 matched op runs differ")
    assert "Default_net-Net_Mul-op0" in c._repr_html_()

    same = msoverflow.compare(*same_run_pair(str(tmp_path / "same")))
    assert repr(same).startswith("<Comparison EQUIVALENT: 1 matched op runs agree")
    assert '<span class="badge clean">EQUIVALENT</span>' in same._repr_html_()


def test_frame_holds_every_op_run_that_differs_in_execution_order(tmp_path):
    c = msoverflow.compare(*_pair(tmp_path))
    frame = c.frame()
    assert len(frame) == c.diverged_ops == 3
    assert list(frame.op_type) == ["Mul", "Softmax", "Exp"]            # the baseline's order, not the ranking
    assert list(frame["first"]) == [True, False, False]
    assert list(frame.role) == ["origin"] * 3
    mul, softmax, exp = (frame.iloc[i] for i in range(3))
    assert 1 - 1e-6 < mul.cosine < 1 and mul.ulp_dtype == "float32" and mul.error_ulps > 1000
    assert softmax.ulp_dtype == "float16" and softmax.max_rel_error == pytest.approx(0.05, rel=0.05)
    assert exp.nonfinite_differ == 1
    assert frame.max_abs_error.dtype == "float64" and frame.nonfinite_differ.dtype == "int64"
    assert "differences" not in c.to_dict()                             # the JSON answer is unchanged

    same = msoverflow.compare(*same_run_pair(str(tmp_path / "same"))).frame()
    assert same.empty and list(same.columns) == list(frame.columns)
    assert dict(same.dtypes) == dict(frame.dtypes)


def test_cards_in_one_notebook_page_share_no_id(tmp_path):
    """A notebook page holds every cell's output: two reports and a comparison displayed in one page carry no id
    twice (each display numbers its ids: verdict-1, verdict-2, ...)."""
    bad = _overflow(tmp_path / "bad")
    a, b = same_run_pair(str(tmp_path / "pair"))
    page = bad._repr_html_() + msoverflow.analyze(a)._repr_html_() + msoverflow.compare(a, b)._repr_html_() \
        + bad._repr_html_()
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) >= 4 and len(ids) == len(set(ids)), ids
    assert all(i.startswith("verdict-") for i in ids if "verdict" in i)
