"""What a reader sees in a plot, measured in the browser: the text elements of an inline SVG with their boxes on
screen, the tick labels of each axis, the edges of a node-link drawing, a legend's entries. The checks then read
that geometry: labels that overlap, edges that run through a label or cross each other, tick text that is not a
number as people write it (raw mathtext such as `$\\mathdefault{10^{4}}$`).

Everything is generic over matplotlib's SVG (text groups `text_N`, tick groups `xtick_N`/`ytick_N`, legend
`legend_N`): the same checks read any version of the report, so they can fail on an old one.
"""
from __future__ import annotations

import math
import re
from typing import Dict, List, Optional, Tuple

# In the page: every <text> of the SVG with its box in CSS px, the tick group (x/y) and axes it belongs to; every
# stroked, unfilled path outside a text group (edges, grid lines, spines) sampled as a polyline in CSS px; the
# legend's entries (label, marker shape, fill colour).
_PROBE = r"""(svgId) => {
  const svg = document.getElementById(svgId);
  if (!svg) return null;
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const texts = [...svg.querySelectorAll('text')].map(t => {
    const tick = t.closest('g[id*="xtick_"]') ? 'x' : t.closest('g[id*="ytick_"]') ? 'y' : null;
    const group = t.closest('g[id*="text_"]');
    const legend = t.closest('g[id*="legend_"]');
    const patch = group ? group.querySelector('g[id*="patch_"] path') : null;
    const axes = t.closest('g[id*="axes_"]');
    return {text: t.textContent, box: box(t), tick, legend: !!legend, group: group ? group.id : null,
            axes: axes ? axes.id : null, frame: patch ? box(patch) : null};
  });
  const edges = [...svg.querySelectorAll('path')].filter(p => !p.closest('g[id*="text_"]') && !p.closest('defs')
      && !p.closest('g[id*="legend_"]') && getComputedStyle(p).fill === 'none'
      && getComputedStyle(p).stroke !== 'none' && p.getTotalLength() > 0).map(p => {
    const m = p.getScreenCTM(), n = 48, length = p.getTotalLength(), points = [];
    for (let k = 0; k <= n; k++) {
      const q = p.getPointAtLength(length * k / n);
      points.push([m.a * q.x + m.c * q.y + m.e, m.b * q.x + m.d * q.y + m.f]);
    }
    return {points, grid: !!p.closest('g[id*="tick_"]'), dashed: getComputedStyle(p).strokeDasharray !== 'none'};
  });
  const legend = [];
  for (const g of svg.querySelectorAll('g[id*="legend_"]')) {
    for (const t of g.querySelectorAll('text')) {
      // the handle drawn just before the entry's text: a marker (<use> of a <path> in <defs>) with its fill
      let el = t.closest('g[id*="text_"]'), use = null;
      while (el && !use) { el = el.previousElementSibling; use = el ? el.querySelector('use') : null; }
      const shape = use ? document.querySelector(use.getAttribute('xlink:href') || use.getAttribute('href')) : null;
      legend.push({text: t.textContent, shape: shape ? shape.getAttribute('d').replace(/\s+/g, ' ') : null,
                   fill: use ? getComputedStyle(use).fill : null});
    }
  }
  return {texts, edges, legend};
}"""

MATHTEXT = re.compile(r"\$|\\mathdefault|\\times|\^\{")
_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")


def probe(page, svg_id: str) -> dict:
    found = page.evaluate(_PROBE, svg_id)
    assert found is not None, f"no <svg id={svg_id!r}> in the page"
    return found


def tick_labels(found: dict, axis: str) -> List[str]:
    return [t["text"] for t in found["texts"] if t["tick"] == axis and t["text"].strip()]


def raw_mathtext(found: dict) -> List[str]:
    """Text a reader would see as TeX source: `$...$`, `\\mathdefault`, `^{...}`."""
    return [t["text"] for t in found["texts"] if MATHTEXT.search(t["text"])]


def number(label: str) -> Optional[float]:
    """A tick label as people write numbers (0.5, 1e+04, 10⁴, 2×10⁴, 65504, −3 with U+2212, 1,000); else None."""
    text = label.strip().replace("\u2212", "-").replace(",", "")
    m = re.fullmatch(r"(?:([-+]?\d+(?:\.\d+)?)\s*[×x]\s*)?10([⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+)", text)
    if m:
        return float(m.group(1) or 1) * 10.0 ** int(m.group(2).translate(_SUPERSCRIPT))
    try:
        return float(text)
    except ValueError:
        return None


def _intersect(a, b, margin: float) -> bool:
    return (min(a[2], b[2]) - max(a[0], b[0]) > margin) and (min(a[3], b[3]) - max(a[1], b[1]) > margin)


def labels(found: dict) -> List[dict]:
    """One entry per label: the lines of one matplotlib Text (one `text_N` group) are one label, its box their union."""
    merged: Dict[str, dict] = {}
    out = []
    for t in found["texts"]:
        b = t["box"]
        if b[2] <= b[0] or b[3] <= b[1]:
            continue
        if t["group"] is None:
            out.append(dict(t))
        elif t["group"] not in merged:
            merged[t["group"]] = dict(t)
            out.append(merged[t["group"]])
        else:
            m = merged[t["group"]]
            m["text"] += "\n" + t["text"]
            m["box"] = [min(m["box"][0], b[0]), min(m["box"][1], b[1]), max(m["box"][2], b[2]), max(m["box"][3], b[3])]
    return out


def overlapping_texts(found: dict, margin: float = 0.5) -> List[Tuple[str, str]]:
    """Pairs of labels whose boxes on screen intersect (by more than `margin` px each way)."""
    boxes = labels(found)
    return [(a["text"], b["text"]) for i, a in enumerate(boxes) for b in boxes[i + 1:]
            if _intersect(a["box"], b["box"], margin)]


def texts_outside_frames(found: dict, slack: float = 0.5) -> List[str]:
    """Text that spills out of the box drawn around it (a node label wider than its node)."""
    out = []
    for t in found["texts"]:
        f, b = t["frame"], t["box"]
        if f and (b[0] < f[0] - slack or b[2] > f[2] + slack or b[1] < f[1] - slack or b[3] > f[3] + slack):
            out.append(t["text"])
    return out


def _inside(point, rect, margin: float = 1.0) -> bool:
    x, y = point
    return rect[0] + margin < x < rect[2] - margin and rect[1] + margin < y < rect[3] - margin


def edges_through_labels(found: dict) -> List[Tuple[int, str]]:
    """(edge, label) where a drawn edge (not a grid line) passes over the text of a label: the label's box, and
    the frame around it when it has one (an edge may touch a frame's border, not cross into it)."""
    hits = []
    for i, edge in enumerate(e for e in found["edges"] if not e["grid"]):
        for t in found["texts"]:
            areas = [t["box"]] + ([t["frame"]] if t["frame"] else [])
            if any(_inside(p, area, 1.5) for p in edge["points"][1:-1] for area in areas):
                hits.append((i, t["text"]))
    return hits


def _cross(p1, p2, p3, p4) -> bool:
    def side(a, b, c):
        return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
    return side(p1, p2, p3) * side(p1, p2, p4) < 0 and side(p3, p4, p1) * side(p3, p4, p2) < 0


def edge_crossings(found: dict, near: float = 3.0) -> List[Tuple[int, int]]:
    """Pairs of drawn edges that cross (not merely meet at a shared end: points within `near` px are ignored)."""
    edges = [e["points"] for e in found["edges"] if not e["grid"]]
    pairs = []
    for i in range(len(edges)):
        for j in range(i + 1, len(edges)):
            a, b = edges[i], edges[j]
            ends = [a[0], a[-1], b[0], b[-1]]
            found_cross = False
            for k in range(len(a) - 1):
                if any(math.dist(a[k], q) < near or math.dist(a[k + 1], q) < near for q in ends):
                    continue
                for m in range(len(b) - 1):
                    if any(math.dist(b[m], q) < near or math.dist(b[m + 1], q) < near for q in ends):
                        continue
                    if _cross(a[k], a[k + 1], b[m], b[m + 1]):
                        found_cross = True
                        break
                if found_cross:
                    break
            if found_cross:
                pairs.append((i, j))
    return pairs


def legend_styles(found: dict) -> Dict[str, Tuple[Optional[str], Optional[str]]]:
    """Legend entry -> (marker shape, fill colour)."""
    return {entry["text"]: (entry["shape"], entry["fill"]) for entry in found["legend"]}
