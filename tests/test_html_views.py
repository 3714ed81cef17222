"""The HTML views without a browser: tick text, the propagation layout, which views a report gets, links."""
import re

import pytest

from msoverflow.render.html.plots import plain_number


@pytest.mark.parametrize("value, text", [(0, "0"), (0.001, "0.001"), (0.5, "0.5"), (250, "250"), (65504, "65504"),
                                         (1e5, "10⁵"), (2e5, "2×10⁵"), (1e-30, "10⁻³⁰"), (-1e6, "-10⁶"),
                                         (3e38, "3×10³⁸")])
def test_tick_values_are_written_plainly(value, text):
    assert plain_number(value) == text


def test_log_axes_keep_no_mathtext_in_any_svg():
    """Every axis of every figure drawn through inline_svg, log scales included, labels its ticks as text."""
    from msoverflow.render.html.plots import figure, inline_svg, plot_settings
    with plot_settings():
        fig = figure(4, 3)
        ax = fig.add_subplot()
        ax.barh([0, 1], [1e-6, 3e30])
        ax.set_xscale("log")
        ax.set_yscale("log")
        svg = inline_svg(fig, "t", "test")
    ticks = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert ticks and not [t for t in ticks if "$" in t or "mathdefault" in t]
    assert "10⁶" in ticks and "10⁻⁶" in ticks
