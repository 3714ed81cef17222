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


# ---- the propagation graph's layout (render/html/graph.py) ------------------------------------------------------

def _columns_are_spaced(lay):
    """Every slot of a column (nodes, and edges passing through) at least one row from the next."""
    rows = {}
    for v in lay.nodes:
        rows.setdefault(v.layer, []).append(v.row)
    for e in lay.edges:
        first = lay.nodes[e.source].layer
        for step, r in enumerate(e.rows[1:-1], start=1):
            rows.setdefault(first + step, []).append(r)
    for col in rows.values():
        col.sort()
        assert all(b - a >= 1 - 1e-9 for a, b in zip(col, col[1:], strict=False)), col


def test_a_chain_in_one_cell_becomes_one_node_and_the_origin_stays_alone():
    from msoverflow.render.html.graph import layout
    cells = ["loss", "loss", "loss", "loss", "head", "head"]
    lay = layout(cells, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)])
    assert [v.members for v in lay.nodes] == [[0], [1, 2, 3], [4], [5]]     # 4 -> 5: two ops, not a long chain
    assert [v.kind for v in lay.nodes] == ["op", "chain", "op", "op"]
    assert [v.layer for v in lay.nodes] == [0, 1, 2, 3] and lay.layers == 4
    assert all(e.from_graph for e in lay.edges)


def test_a_branch_that_would_cross_is_reordered_and_long_edges_pass_through_empty_slots():
    from msoverflow.render.html.graph import layout
    # 0 feeds 1 and 2; 1 feeds 4, 2 feeds 3 (3 comes first in time, so a naive order crosses); 0 also feeds 4
    # directly, across a column
    cells = ["a", "b", "c", "d", "e"]
    lay = layout(cells, [(0, 1), (0, 2), (2, 3), (1, 4), (0, 4)])
    assert lay.crossings() == 0
    _columns_are_spaced(lay)
    long = next(e for e in lay.edges if (e.source, e.target) == (0, 4))
    assert len(long.rows) == 3                         # the origin's column, a slot in column 1, node 4's column
    for e in lay.edges:
        assert lay.nodes[e.target].layer > lay.nodes[e.source].layer
        assert len(e.rows) == lay.nodes[e.target].layer - lay.nodes[e.source].layer + 1


def test_ops_without_a_known_producer_follow_the_latest_op_that_has_one():
    from msoverflow.render.html.graph import layout
    # 0 -> 1 -> 2 known; 3 and 4 have no producer in the Report (e.g. parameters an optimizer wrote)
    lay = layout(["x", "y", "z", None, None], [(0, 1), (1, 2)])
    dashed = [(lay.nodes[e.source].members, lay.nodes[e.target].members) for e in lay.edges if not e.from_graph]
    assert dashed == [([2], [3]), ([2], [4])]
    assert lay.nodes[3].layer == lay.nodes[4].layer == 3


def test_a_wide_column_folds_and_deep_columns_are_not_drawn():
    from msoverflow.render.html import graph
    fan = 20
    lay = graph.layout(["o"] + [f"c{i}" for i in range(fan)], [(0, i) for i in range(1, fan + 1)])
    assert sum(1 for v in lay.nodes if v.layer == 1) == graph.MAX_ROWS
    more = [v for v in lay.nodes if v.kind == "more"]
    assert len(more) == 1 and len(more[0].members) == lay.folded == fan - (graph.MAX_ROWS - 1)
    assert sorted(m for v in lay.nodes for m in v.members) == list(range(fan + 1))    # every op in some node
    _columns_are_spaced(lay)
    deep = graph.MAX_LAYERS + 5
    chain = graph.layout([f"c{i}" for i in range(deep)], [(i, i + 1) for i in range(deep - 1)])
    assert chain.layers == graph.MAX_LAYERS and chain.not_drawn == list(range(graph.MAX_LAYERS, deep))


# ---- which views a report gets ----------------------------------------------------------------------------------

def _views(page):
    shown = set(re.findall(r'<section id="(timeline|propagation|headroom)"', page))
    missing = dict(re.findall(r'class="not-drawn" data-view="(\w+)">([^<]*)<', page))
    return shown, missing


# ---- words every renderer shares: backward ops, the minimum that caused an overflow ------------------------------

def _finding(i, cell):
    from msoverflow.model import Finding
    return Finding(rank=0, graph="0", step=1, op_type=f"Op{i}", op_name=f"Default_{cell}-C_Op{i}-op{i}",
                   role="propagator" if i else "origin", kind="overflow", detail="d", timestamp=i,
                   full_name=f"Default/{cell}-C/Op{i}-op{i}", cell=cell)


def test_a_graph_too_tall_to_read_becomes_the_open_table():
    """Each of 14 ops feeds every later one: the edges passing columns would need far more rows than a reader can
    follow, so the page lists the ops (open) instead of drawing them, and says why."""
    from msoverflow.model import Report
    from msoverflow.render import render
    ops = [_finding(i, f"c{i}") for i in range(14)]
    edges = [(a.full_name, b.full_name) for i, a in enumerate(ops) for b in ops[i + 1:]]
    report = Report(dump_dir="/d", first=ops[0], anomalies=[ops[0]], propagation=ops[1:], warnings=[], ranks=[0],
                    steps={0: [1]}, edges=edges, scanned_steps={0: [1]})
    page = render(report, "html")
    assert '<svg id="propagation-svg"' not in page
    assert '<details id="propagation-list" open>' in page and "so they are listed below" in page
    report.edges = [(a.full_name, b.full_name) for a, b in zip(ops, ops[1:], strict=False)]       # a plain chain: drawn
    page = render(report, "html")
    assert '<svg id="propagation-svg"' in page and '<details id="propagation-list">' in page


# ---- links ---------------------------------------------------------------------------------------------------------

def _synthetic_dump(root):
    import numpy as np

    from tests.support.synth_dump import SynthDump
    d = SynthDump(str(root))
    d.op(0, "Mul", "Default_a-A_Mul-op0", [np.ones(4, np.float32)], [np.ones(4, np.float32)])
    d.op(0, "RealDiv", "Default_a-A_RealDiv-op0", [np.ones(4, np.float32), np.zeros(4, np.float32)],
         [np.full(4, np.inf, np.float32)])
    return root


def test_analyze_o_links_files_under_the_page_folder_relatively_and_names_the_others(tmp_path, monkeypatch):
    from urllib.parse import unquote

    from msoverflow.cli import main
    monkeypatch.chdir(tmp_path)
    dump = _synthetic_dump(tmp_path / "job" / "dump")
    beside = tmp_path / "job" / "report.html"
    assert main(["analyze", str(dump), "-o", str(beside), "--no-save"]) == 1
    page = beside.read_text()
    files = [h for h in re.findall(r'<a class="file" href="([^"]+)"', page)]
    assert any(h.endswith(".npy") for h in files) and 'id="unlinked"' not in page
    for href in files:
        assert not href.startswith(("/", "file:")) and (beside.parent / unquote(href)).exists(), href
    elsewhere = tmp_path / "reports" / "report.html"
    elsewhere.parent.mkdir()
    assert main(["analyze", str(dump), "-o", str(elsewhere), "--no-save"]) == 1
    page = elsewhere.read_text()
    assert "file://" not in page and not re.findall(r'<a class="file"', page)
    unlinked = re.search(r'<div id="unlinked">.*?</div>', page, re.S).group(0)
    assert f"<code>{dump}</code>" in unlinked and str(elsewhere.parent) in unlinked


def test_a_file_name_that_is_not_utf8_is_linked_byte_for_byte(tmp_path):
    import os
    from urllib.parse import unquote_to_bytes

    from msoverflow.render.html.page import Links
    name = os.fsdecode(b"Mat\xffMul.npy")                  # as Python lists such a file (surrogate-escaped)
    href = Links(str(tmp_path)).href(str(tmp_path / "dump" / name))
    assert href == "dump/Mat%FFMul.npy" and unquote_to_bytes(href) == b"dump/Mat\xffMul.npy"
