"""Where the propagation graph puts its nodes: a layered left-to-right drawing (Sugiyama's method, small).

Input: the origin (node 0) and the ops it reached in time order, with producer -> consumer edges (from the saved
graph; an edge always runs from an earlier op to a later one). Output: columns (layers) of rows, every edge from
one column to the next (long edges pass through empty slots of the columns between), ordered to avoid crossings.

- An op the Report gives no producer for follows the latest earlier op that has one (or the origin): a dashed
  edge that only says "after".
- A chain of MIN_CHAIN or more ops in one Cell, each the only consumer of the one before, becomes one node.
- A column holds at most MAX_ROWS nodes: the rest of that column become one "more" node; columns past MAX_LAYERS
  are not drawn. The page's table lists every op either way.

Pure: no matplotlib, no Report; unit-tested on its own (tests/test_html_views.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

MIN_CHAIN = 3
MAX_ROWS = 8
MAX_LAYERS = 12
SWEEPS = 12


@dataclass
class Node:
    members: List[int]                  # the input ops this node stands for (one; a chain; or the "more" of a column)
    cell: Optional[str]
    kind: str = "op"                    # op | chain | more
    layer: int = 0
    row: float = 0.0                    # vertical position, in rows (0 at the top)


@dataclass
class Edge:
    source: int                         # node indices
    target: int
    from_graph: bool                    # False: dashed, time order only
    rows: List[float] = field(default_factory=list)   # the edge's row in each column from source to target


@dataclass
class Layout:
    nodes: List[Node]
    edges: List[Edge]
    layers: int
    not_drawn: List[int]                # input ops in no node (past MAX_LAYERS)
    folded: int                         # input ops folded into "more" nodes

    def crossings(self) -> int:
        """Pairs of edges that cross between two adjacent columns (their order swaps)."""
        total = 0
        segments: Dict[int, List[Tuple[float, float]]] = {}
        for e in self.edges:
            first = self.nodes[e.source].layer
            for k in range(len(e.rows) - 1):
                segments.setdefault(first + k, []).append((e.rows[k], e.rows[k + 1]))
        for pairs in segments.values():
            for i, (a0, a1) in enumerate(pairs):
                for b0, b1 in pairs[i + 1:]:
                    if (a0 - b0) * (a1 - b1) < 0:
                        total += 1
        return total


def layout(cells: Sequence[Optional[str]], edges: Sequence[Tuple[int, int]]) -> Layout:
    """cells[i]: the Cell of input op i (0 = the origin, the rest in time order); edges: (producer, consumer)."""
    n = len(cells)
    solid = sorted({(j, i) for j, i in edges if 0 <= j < i < n})
    fed = {i for _, i in solid}
    all_edges = [(j, i, True) for j, i in solid]
    anchor = 0
    for i in range(1, n):
        if i not in fed:
            all_edges.append((anchor, i, False))
        else:
            anchor = i
    nodes, node_edges = _collapse_chains(cells, all_edges)
    _assign_layers(nodes, node_edges)
    nodes, node_edges, not_drawn = _drop_deep(nodes, node_edges)
    nodes, node_edges, folded = _fold_wide(nodes, node_edges)
    result = Layout(nodes, node_edges, 1 + max((v.layer for v in nodes), default=0), not_drawn, folded)
    _order_and_place(result)
    return result


def _collapse_chains(cells, edges) -> Tuple[List[Node], List[Edge]]:
    outs: Dict[int, List[Tuple[int, bool]]] = {}
    ins: Dict[int, List[Tuple[int, bool]]] = {}
    for j, i, solid in edges:
        outs.setdefault(j, []).append((i, solid))
        ins.setdefault(i, []).append((j, solid))

    def links_on(j: int) -> Optional[int]:
        """The next op of a chain through j: j's only consumer, which has no other producer, in j's Cell."""
        if j == 0 or len(outs.get(j, [])) != 1:
            return None
        i, solid = outs[j][0]
        if not solid or len(ins.get(i, [])) != 1 or cells[i] != cells[j]:
            return None
        return i

    node_of: Dict[int, int] = {}
    nodes: List[Node] = []
    starts_chain = {j for j in range(len(cells)) if links_on(j) is not None}
    continues = {links_on(j) for j in starts_chain}
    for i in range(len(cells)):
        if i in node_of:
            continue
        chain = [i]
        if i in starts_chain and i not in continues:
            link = links_on(i)
            while link is not None:
                chain.append(link)
                link = links_on(link)
        if len(chain) < MIN_CHAIN:
            chain = [i]
        for member in chain:
            node_of[member] = len(nodes)
        nodes.append(Node(chain, cells[i], "chain" if len(chain) > 1 else "op"))
    out: Dict[Tuple[int, int], bool] = {}
    for j, i, solid in edges:
        a, b = node_of[j], node_of[i]
        if a != b:
            out[(a, b)] = out.get((a, b), False) or solid
    return nodes, [Edge(a, b, solid) for (a, b), solid in sorted(out.items())]


def _assign_layers(nodes: List[Node], edges: List[Edge]) -> None:
    """Longest path from the origin: a node sits one column right of its latest producer."""
    for v in nodes:
        v.layer = 0
    # node indices follow time order (every edge goes from a lower index to a higher one)
    for e in sorted(edges, key=lambda e: e.target):
        nodes[e.target].layer = max(nodes[e.target].layer, nodes[e.source].layer + 1)


def _drop_deep(nodes, edges) -> Tuple[List[Node], List[Edge], List[int]]:
    keep = [k for k, v in enumerate(nodes) if v.layer < MAX_LAYERS]
    dropped = sorted(m for v in nodes if v.layer >= MAX_LAYERS for m in v.members)
    return (*_subgraph(nodes, edges, keep), dropped)


def _subgraph(nodes, edges, keep) -> Tuple[List[Node], List[Edge]]:
    index = {old: new for new, old in enumerate(keep)}
    return ([nodes[k] for k in keep],
            [Edge(index[e.source], index[e.target], e.from_graph) for e in edges
             if e.source in index and e.target in index])


def _fold_wide(nodes, edges) -> Tuple[List[Node], List[Edge], int]:
    """A column of more than MAX_ROWS nodes keeps its first MAX_ROWS - 1 (in time) and folds the rest into one."""
    by_layer: Dict[int, List[int]] = {}
    for k, v in enumerate(nodes):
        by_layer.setdefault(v.layer, []).append(k)
    into: Dict[int, int] = {}
    extra: List[Node] = []
    for layer, members in sorted(by_layer.items()):
        if len(members) <= MAX_ROWS:
            continue
        fold = len(nodes) + len(extra)
        rest = members[MAX_ROWS - 1:]
        extra.append(Node(sorted(m for k in rest for m in nodes[k].members), None, "more", layer))
        into.update({k: fold for k in rest})
    if not extra:
        return nodes, edges, 0
    merged: Dict[Tuple[int, int], bool] = {}
    for e in edges:
        a, b = into.get(e.source, e.source), into.get(e.target, e.target)
        if a != b:
            merged[(a, b)] = merged.get((a, b), False) or e.from_graph
    all_nodes = nodes + extra
    keep = sorted((k for k in range(len(all_nodes)) if k not in into), key=lambda k: min(all_nodes[k].members))
    folded = sum(len(v.members) for v in extra)
    # a fold node keeps its column; every edge still runs from a column to a later one
    return (*_subgraph(all_nodes, [Edge(a, b, s) for (a, b), s in merged.items()], keep), folded)


def _order_and_place(lay: Layout) -> None:
    """Order each column to avoid crossings (barycentre sweeps over the columns, long edges through dummy slots,
    the best order kept), then place rows: each slot at the mean row of its producers, one row apart at least, each
    column centred on where its slots want to be."""
    nodes, edges = lay.nodes, lay.edges
    slots: List[List[Tuple[str, int]]] = [[] for _ in range(lay.layers)]   # ("n", node) or ("d", edge)
    paths: List[List[Tuple[str, int]]] = []
    for k, v in sorted(enumerate(nodes), key=lambda kv: (kv[1].cell or "", min(kv[1].members))):
        slots[v.layer].append(("n", k))
    for k, e in enumerate(edges):
        a, b = nodes[e.source].layer, nodes[e.target].layer
        path = [("n", e.source)] + [("d", k)] * (b - a - 1) + [("n", e.target)]
        for layer in range(a + 1, b):
            slots[layer].append(("d", k))
        paths.append(path)
    # neighbours of each slot in the previous and the next column
    up: Dict[Tuple[int, Tuple[str, int]], List[Tuple[str, int]]] = {}
    down: Dict[Tuple[int, Tuple[str, int]], List[Tuple[str, int]]] = {}
    for k, e in enumerate(edges):
        a = nodes[e.source].layer
        for step in range(len(paths[k]) - 1):
            left, right = paths[k][step], paths[k][step + 1]
            down.setdefault((a + step, left), []).append(right)
            up.setdefault((a + step + 1, right), []).append(left)

    def count(order) -> int:
        total = 0
        for layer in range(len(order) - 1):
            pos_next = {s: p for p, s in enumerate(order[layer + 1])}
            pairs = [(p, pos_next[t]) for p, s in enumerate(order[layer]) for t in down.get((layer, s), [])]
            total += sum(1 for i, (a0, a1) in enumerate(pairs) for b0, b1 in pairs[i + 1:] if (a0 - b0) * (a1 - b1) < 0)
        return total

    def sweep(order, layers, neighbours, ref_step):
        for layer in layers:
            ref = {s: p for p, s in enumerate(order[layer + ref_step])}
            current = {s: p for p, s in enumerate(order[layer])}

            def key(s, ref=ref, current=current, layer=layer):     # sorted() below, within this iteration
                linked = [ref[t] for t in neighbours.get((layer, s), []) if t in ref]
                return (sum(linked) / len(linked) if linked else current[s], current[s])
            order[layer] = sorted(order[layer], key=key)

    order = [list(col) for col in slots]
    best, best_count = [list(col) for col in order], count(order)
    for i in range(SWEEPS):
        if best_count == 0:
            break
        if i % 2 == 0:
            sweep(order, range(1, len(order)), up, -1)
        else:
            sweep(order, range(len(order) - 2, -1, -1), down, +1)
        c = count(order)
        if c < best_count:
            best, best_count = [list(col) for col in order], c
    # rows: each slot at the mean row of its neighbours in the previous column, kept in order, one row apart
    row_of: Dict[Tuple[int, Tuple[str, int]], float] = {}
    for layer, col in enumerate(best):
        wanted = []
        for p, s in enumerate(col):
            linked = [row_of[(layer - 1, t)] for t in up.get((layer, s), []) if (layer - 1, t) in row_of]
            wanted.append(sum(linked) / len(linked) if linked else float(p))
        rows: List[float] = []
        for w in wanted:
            rows.append(max(w, rows[-1] + 1) if rows else w)
        # packing pushed slots down from where they wanted to be: centre the column on its wishes
        shift = sum(r - w for r, w in zip(rows, wanted, strict=True)) / len(rows)
        for s, r in zip(col, rows, strict=True):
            row_of[(layer, s)] = r - shift
    top = min(row_of.values(), default=0.0)
    row_of = {key: r - top for key, r in row_of.items()}
    for k, v in enumerate(nodes):
        v.row = row_of[(v.layer, ("n", k))]
    for k, e in enumerate(edges):
        a = nodes[e.source].layer
        e.rows = [row_of[(a + step, s)] for step, s in enumerate(paths[k])]
