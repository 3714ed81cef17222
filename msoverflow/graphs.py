"""Where an executed op lives in the code: its node in the saved graph (.ir, or the graph a reader built from a
framework dump), its Cell, its source line and, for a backward op, its forward op. analyze (findings.py) and
compare (comparison.py) both ask here.

Saved graphs are parsed on first need only: most runs need one graph for one finding.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Mapping, Optional, Tuple

from .model import GraphNode, NamedRun, OpExecution, Source
from .scope import cell_of, forward_in_scope, is_backward


@dataclass(frozen=True)
class Place:
    """An executed op's place in the code, as far as the saved graph and its scope name tell."""
    full_name: Optional[str]       # Default/network-.../Sqrt-op0 (None: no saved graph names the op)
    cell: Optional[str]            # the Cell's path ("lm_head") ...
    cell_type: Optional[str]       # ... and class ("NormHead")
    source: Optional[Source]       # the op's source line, else its forward op's
    forward_op: Optional[str]      # the forward op of a backward op (None: not known)


class SavedGraphs:
    """The saved graphs of a dump: (rank, graph) -> the graph a reader built (msprobe) or, on first need, the .ir
    under that rank's directory."""

    def __init__(self, built: Mapping[Tuple[int, str], object], rank_roots: Mapping[Tuple[int, str], Optional[str]],
                 warn: Callable[[str], None]):
        self.built, self.rank_roots, self.warn = built, rank_roots, warn
        self._cache: Dict[Tuple[int, str], object] = {}

    def graph(self, rank: int, graph: str):
        """The GraphIndex of (rank, graph), or None when no saved graph could be read."""
        key = (rank, graph)
        if key not in self._cache:
            self._cache[key] = self.built.get(key)
            root = self.rank_roots.get(key)
            if root and self._cache[key] is None:
                from .readers.ir_graph import graph_files, load_ir
                for path in graph_files(root, graph):
                    try:
                        self._cache[key] = load_ir(path)
                        break
                    except OSError as exc:
                        self.warn(f"{path}: cannot read saved graph ({exc.strerror})")
        return self._cache[key]

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
        return Place(full_name, cell, cell_type, source, forward_op)

