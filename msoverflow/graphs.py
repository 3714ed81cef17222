"""Where an executed op lives in the code: its node in the saved graph (.ir, or the graph a reader built from a
framework dump), its Cell, its source line and, for a backward op, its forward op. analyze (findings.py) and
compare (comparison.py) both ask here.

Saved graphs are parsed on first need only: most runs need one graph for one finding.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from .model import GraphNode, NamedRun, OpExecution, Source
from .scope import cell_of, forward_in_scope, is_backward

# Graph attributes only PyNative's grad sets on the graphs it compiles (MindSpore's pynative grad executor)
PYNATIVE_GRAPH_ATTRS = frozenset({"bprop_value_node_ref_count", "value_node_forward_output_flags"})
_HEAD_BYTES = 4096


def _head(path: str) -> Optional[str]:
    """The first bytes of a saved graph (its header and graph attributes), None when it cannot be read."""
    from . import safeio
    try:
        with safeio.open_regular(path, "rb") as fh:
            return fh.read(_HEAD_BYTES).decode("utf-8", "replace")
    except OSError:
        return None


@dataclass(frozen=True)
class Place:
    """An executed op's place in the code, as far as the saved graph and its scope name tell."""
    full_name: Optional[str]       # Default/network-.../Sqrt-op0 (None: no saved graph names the op)
    cell: Optional[str]            # the Cell's path ("lm_head") ...
    cell_type: Optional[str]       # ... and class ("NormHead")
    source: Optional[Source]       # the op's source line, else its forward op's
    forward_op: Optional[str]      # the forward op of a backward op (None: not known)
    # where the Cell's construct is, when the Cell came from the call trace (the scope names none)
    cell_source: Optional[Source] = None


class SavedGraphs:
    """The saved graphs of a dump: (rank, graph) -> the graph a reader built (msprobe) or, on first need, the .ir
    under that rank's directory. Every saved graph of a rank is read at once: dump files number a kernel's `-opN`
    across the rank's graphs (readers/ir_graph.py, GraphIndex.number_as_dumped). Where the graphs are can be learnt
    as the walk goes (`learn`): the harmless diagnosis reads them while the walk still runs."""

    def __init__(self, built: Mapping[Tuple[int, str], object], rank_roots: Mapping[Tuple[int, str], Optional[str]],
                 warn: Callable[[str], None]):
        self.built: Dict[Tuple[int, str], object] = dict(built)
        self.rank_roots: Dict[Tuple[int, str], Optional[str]] = dict(rank_roots)
        self.warn = warn
        self._cache: Dict[Tuple[int, str], object] = {}
        self._loaded: Dict[str, Mapping[str, object]] = {}   # rank root -> graph id -> GraphIndex
        self._ids: Optional[Tuple[Tuple[int, int], Dict[int, List[str]]]] = None

    def learn(self, rank_roots: Mapping[Tuple[int, str], Optional[str]],
              built: Optional[Mapping[Tuple[int, str], object]] = None) -> None:
        """More of where the graphs are: a unit's rank roots, the graphs a reader built (from the reduce)."""
        for key, root in rank_roots.items():
            self.rank_roots.setdefault(key, root)
        self.built.update(built or {})
        # a graph asked for before it was known is asked again (a reader's graph wins over a saved .ir)
        self._cache = {key: graph for key, graph in self._cache.items() if graph is not None and key not in self.built}

    def compiled_by_pynative(self) -> Optional[bool]:
        """Whether the dumped graphs were compiled from a PyNative run (@jit functions, the optimizer, amp checks):
        PyNative's grad marks every graph it compiles with its own attributes (`bprop_value_node_ref_count`,
        `value_node_forward_output_flags` under `# Attrs:`); a graph-mode graph has none. Read from the head of
        one saved graph per rank, whatever the number of ops; None when no saved graph is there."""
        from .readers.ir_graph import saved_graph_ids
        seen = None
        for root in sorted({root for root in self.rank_roots.values() if root}):
            for graph in saved_graph_ids(root)[:1]:
                head = _head(os.path.join(root, "graphs", f"ms_output_trace_code_graph_{graph}.ir"))
                if head is None:
                    head = _head(os.path.join(root, "graphs", f"trace_code_graph_{graph}.ir"))
                if head is None:
                    continue
                attrs = head.split("# Attrs:", 1)[1].split("\n\n", 1)[0] if "# Attrs:" in head else ""
                if any(line.split(":", 1)[0].strip() in PYNATIVE_GRAPH_ATTRS for line in attrs.splitlines()):
                    return True
                seen = False
        return seen

    def ids(self) -> Dict[int, List[str]]:
        """rank -> its graph ids: those dumped, and those whose saved graph is beside them (a graph whose files
        were filtered out, or that never ran, still tells what it writes)."""
        from .readers.ir_graph import saved_graph_ids
        known = (len(self.rank_roots), len(self.built))
        if self._ids is None or self._ids[0] != known:
            keys = set(self.rank_roots) | set(self.built)
            for rank, root in {(rank, root) for (rank, _graph), root in self.rank_roots.items() if root}:
                keys |= {(rank, graph) for graph in saved_graph_ids(root)}
            found: Dict[int, List[str]] = {}
            for rank, graph in sorted(keys):
                found.setdefault(rank, []).append(graph)
            self._ids = (known, found)
        return self._ids[1]

    def graph(self, rank: int, graph: str):
        """The GraphIndex of (rank, graph), or None when no saved graph could be read."""
        key = (rank, graph)
        if key not in self._cache:
            found = self.built.get(key)
            # a graph with no dumped files (filtered out, or it never ran) has its saved graph in the rank's root
            root = self.rank_roots.get(key) or next((r for (k, _g), r in self.rank_roots.items() if k == rank and r),
                                                    None)
            if found is None:
                if not root:
                    return None             # not known (yet): asked again once the walk has said where it is
                if root not in self._loaded:
                    from .readers.ir_graph import load_saved_graphs
                    from .rules.knowledge import knowledge
                    plumbing = knowledge().is_plumbing
                    self._loaded[root] = load_saved_graphs(root, lambda op_type: not plumbing(op_type), self.warn)
                found = self._loaded[root].get(graph) or self._other_names(root, graph)
            self._cache[key] = found
        return self._cache[key]

    def of_rank(self, rank: int) -> list:
        """The rank's saved graphs that could be read, in graph-id order (a branch graph that did not run in a step
        is among them when it ran in another)."""
        ids = sorted(self.ids().get(rank, []), key=lambda g: (not g.isdigit(), int(g) if g.isdigit() else 0, g))
        found = [self.graph(rank, g) for g in ids]
        return [g for g in found if g is not None]

    def _other_names(self, root: str, graph: str):
        """A saved graph named otherwise than trace_code_graph_N.ir (numbered as its own file has it)."""
        from .readers.ir_graph import graph_files, load_ir
        for path in graph_files(root, graph):
            try:
                return load_ir(path)
            except OSError as exc:
                self.warn(f"{path}: cannot read saved graph ({exc.strerror})")
        return None

    def node(self, ex: NamedRun):
        """(the op's GraphNode or None, its graph or None)."""
        graph = self.graph(ex.rank, ex.graph)
        return (graph.find(ex.op_name) if graph else None), graph

    def place(self, ex: OpExecution, node: Optional[GraphNode] = None, graph=None, op_type: Optional[str] = None,
              forward_of: Callable[[str], Optional[str]] = lambda op_type: None) -> Place:
        """Where `ex` lives; `node`/`graph`/`op_type` name another op to place instead (an inputs-only dump names
        the producer of a bad input). forward_of(op_type): the op knowledge's forward op when the graph does not
        say."""
        if node is None:
            node, graph = self.node(ex)
        op_type = op_type or ex.op_type
        full_name = node.full_name if node is not None else None
        forward_name = node.forward_name if node is not None else None
        forward_node = graph.by_full.get(forward_name) if (graph is not None and forward_name) else None
        if forward_node is not None:
            forward_op = forward_node.op_type
        elif forward_name:
            forward_op = forward_name.rsplit("/", 1)[-1].rsplit("_", 1)[0]
        else:
            forward_op = forward_of(op_type)
        scope_name = full_name or ex.op_name
        cell, cell_type = cell_of(scope_name, from_file_name=full_name is None)
        if forward_op is None:      # a backward op's scope names its forward op (Grad_Div); a forward op is its own
            forward_op = forward_in_scope(full_name) if is_backward(scope_name) else op_type
        src = node if (node is not None and node.source_file) else forward_node
        source = Source(src.source_file, src.source_line or 0, src.source_code or "") \
            if src is not None and src.source_file else None
        cell_source = None
        if cell is None:    # an expander's op (Expand/_Muls/Mul-op0): the call trace names the Cell it ran in
            traced = next((n for n in (node, forward_node) if n is not None and n.trace_cell), None)
            if traced is not None and traced.trace_cell_at is not None:
                cell = traced.trace_cell
                cell_source = Source(traced.trace_cell_at[0], traced.trace_cell_at[1], "")
        return Place(full_name, cell, cell_type, source, forward_op, cell_source)

