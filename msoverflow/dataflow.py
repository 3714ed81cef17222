"""The dump's data flow as the diagnosis reads it: which kernels consume a value and which one produced an input,
from the saved graph (looking through the nodes that run no kernel: Load, Depend, MakeTuple ...), and which op runs
one (rank, step) of the dump holds."""
from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Optional, Tuple

from .model import GraphNode, OpExecution
from .names import scope_to_file_name
from .rules.knowledge import OpKnowledge

if TYPE_CHECKING:
    from .rules import Verdict

PARAM = "param:"
CONST = "const"
Judged = Tuple[OpExecution, "Verdict"]     # an op run the walk judged not clean, and its verdict


class Flow:
    """One saved graph's edges, both ways. A value is named as GraphNode.inputs name it: a node's full name,
    `param:NAME` or `const`."""

    def __init__(self, graph, kn: OpKnowledge):
        self.graph = graph
        self.kn = kn
        self._readers: Dict[str, List[Tuple[GraphNode, int]]] = {}
        for node in graph.nodes:
            for slot, ref in enumerate(node.inputs):
                self._readers.setdefault(ref, []).append((node, slot))
        self._written: Dict[bool, frozenset] = {}
        self._params: Optional[Dict[str, str]] = None
        self._forward: Optional[frozenset] = None

    def node(self, op_name: str) -> Optional[GraphNode]:
        return self.graph.find(op_name)

    def value_of(self, ex: OpExecution) -> Optional[str]:
        """How the graph names the value an op run outputs: its node's full name, or `param:NAME` for a dumped
        Parameter (files name it `fc1_weight` for fc1.weight); None when the graph does not hold it."""
        if ex.is_parameter:
            if self._params is None:
                self._params = {scope_to_file_name(ref[len(PARAM):]): ref
                                for ref in self._readers if ref.startswith(PARAM)}
            return self._params.get(ex.op_name)
        node = self.graph.find(ex.op_name)
        return node.full_name if node is not None else None

    def consumers(self, ref: str) -> Tuple[List[Tuple[GraphNode, int]], bool]:
        """The kernels that read the value `ref` (with the input slot they read it in), through the graph's
        plumbing; and whether the value leaves the graph (reaches Return)."""
        plumbing = self.kn.plumbing
        found: List[Tuple[GraphNode, int]] = []
        leaves, seen, todo = False, {ref}, [ref]
        while todo:
            for node, slot in self._readers.get(todo.pop(), ()):
                kind = node.op_type
                if kind in plumbing["graph_output"]:
                    leaves = True
                elif kind in plumbing["no_value"] or (kind in plumbing["pass_first"] and slot != 0):
                    continue
                elif kind in plumbing["pass_first"] or kind in plumbing["pass_all"]:
                    if node.full_name not in seen:
                        seen.add(node.full_name)
                        todo.append(node.full_name)
                else:
                    found.append((node, slot))
        return found, leaves

    def producer(self, node: GraphNode, slot: int) -> Optional[str]:
        """The kernel (full name), `param:NAME` or `const` that feeds input `slot` of `node`, through the graph's
        plumbing; None when the graph does not say."""
        ref = node.inputs[slot] if slot < len(node.inputs) else None
        for _ in range(64):             # plumbing chains are short; a cycle in a broken graph must not hang
            if ref is None or ref.startswith((PARAM, "%")) or ref == CONST:
                return ref
            upstream = self.graph.by_full.get(ref)
            if upstream is None or not self.kn.is_plumbing(upstream.op_type):
                return ref
            ref = upstream.inputs[0] if upstream.inputs else None
        return None

    def written_parameters(self, updates_only: bool = False) -> frozenset:
        """Parameters some kernel writes in place (Assign targets too); updates_only: those an optimizer update
        writes (weights and optimizer state)."""
        if updates_only not in self._written:
            written = set()
            for node in self.graph.nodes:
                if updates_only and not self.kn.updates_weights(node.op_type):
                    continue
                for slot in self.kn.written_inputs(node.op_type):
                    ref = self.producer(node, slot)
                    if ref and ref.startswith(PARAM):
                        written.add(ref[len(PARAM):])
            self._written[updates_only] = frozenset(written)
        return self._written[updates_only]

    def is_backward(self, node: GraphNode) -> bool:
        """A node of the backward pass, from the graph's structure, never from names: the graph records the forward
        node it differentiates (MindSpore's forward_node_name; msprobe's backward entries), and it feeds no node that
        is differentiated (an inner gradient that feeds the loss, as physics-informed losses take, is forward)."""
        return bool(node.forward_name) and node.full_name not in self.feeds_forward()

    def feeds_forward(self) -> frozenset:
        """Full names of the nodes upstream of a differentiated node (the forward pass and what feeds it)."""
        if self._forward is None:
            by_full = self.graph.by_full
            todo = [n.forward_name for n in self.graph.nodes if n.forward_name and n.forward_name in by_full]
            seen = set(todo)
            while todo:
                node = by_full.get(todo.pop())
                for ref in node.inputs if node is not None else ():
                    if ref in by_full and ref not in seen:
                        seen.add(ref)
                        todo.append(ref)
            self._forward = frozenset(seen)
        return self._forward


class Flows:
    """The saved graphs of a dump as Flows, parsed on first need: `flows(rank, graph)`; and the parameters any
    graph of a rank writes (an optimizer often runs as a graph of its own)."""

    def __init__(self, load: Callable[[int, str], object], graph_ids: Callable[[], Dict[int, List[str]]],
                 kn: OpKnowledge):
        """load(rank, graph): its GraphIndex (None: not known, or not yet); graph_ids(): rank -> its graphs."""
        self.load, self.graph_ids, self.kn = load, graph_ids, kn
        self._flows: Dict[Tuple[int, str], Flow] = {}
        self._written: Dict[tuple, frozenset] = {}

    def __call__(self, rank: int, graph: str) -> Optional[Flow]:
        key = (rank, graph)
        if key not in self._flows:
            index = self.load(rank, graph)
            if index is None:
                return None
            self._flows[key] = Flow(index, self.kn)
        return self._flows[key]

    def written(self, rank: int, updates_only: bool = False) -> frozenset:
        """The parameters any graph of the rank writes (updates_only: an optimizer update writes)."""
        graphs = tuple(self.graph_ids().get(rank, ()))
        key = (rank, updates_only, graphs)
        if key not in self._written:
            written: set = set()
            for graph in graphs:
                flow = self(rank, graph)
                if flow is not None:
                    written |= flow.written_parameters(updates_only)
            self._written[key] = frozenset(written)
        return self._written[key]


def is_backward(name: str, forward_name: Optional[str] = None) -> bool:
    """A node of the backward pass: MindSpore names it under `Gradients/` (file names `Gradients_`), records the
    forward node it differentiates, or expands it in a `..Backward` scope (Expand/_SoftmaxBackward); msprobe names
    its backward entries `....backward.N`."""
    if forward_name:
        return True
    if name.startswith(("Gradients/", "Gradients_")) or ".backward." in name:
        return True
    return any(segment.endswith("Backward") for segment in name.replace("_", "/").split("/")[:-1])


def parameter_name(op_name: str) -> str:
    """A parameter as a dump file names it (`fc1_weight` for fc1.weight)."""
    return scope_to_file_name(op_name)


class StepIndex:
    """The op runs of one (rank, step): every graph's files of that step, by (graph, op name) and by type. Its
    tensors are read through `access` (the dump's one access when a StepReads made it)."""

    def __init__(self, runs: Iterable, warn: Callable[[str], None] = lambda message: None, access=None):
        from .evaluate import TensorAccess
        self.access = access if access is not None else TensorAccess(warn)
        self.runs = list(runs)
        self._named: Optional[Dict[str, list]] = None
        self.by_name: Dict[Tuple[str, str], object] = {}
        for run in self.runs:
            self.by_name.setdefault((run.graph, run.op_name), run)

    @classmethod
    def of_unit(cls, unit, warn: Callable[[str], None] = lambda message: None,
                ops: Optional[Callable[[str], bool]] = None, access=None) -> "StepIndex":
        """ops(op name as in file names): only those ops' runs (walk.read_unit_runs)."""
        from .walk import read_unit_runs
        runs, _read = read_unit_runs(unit, warn, ops)
        return cls(runs, warn, access)

    def named(self, op_name: str) -> list:
        """Every run of one op name, any graph (a step may hold a graph run twice)."""
        if self._named is None:
            self._named = {}
            for run in self.runs:
                self._named.setdefault(run.op_name, []).append(run)
        return self._named.get(op_name, [])

    def run(self, graph: str, op_name: str):
        return self.by_name.get((graph, op_name))

    def execution(self, graph: str, op_name: str) -> Optional[OpExecution]:
        run = self.run(graph, op_name)
        return run.execution() if run is not None else None

    def of_types(self, wanted: Callable[[str], bool]) -> List[object]:
        return [run for run in self.runs if wanted(run.op_type)]

    def parameter(self, name: str):
        """The Parameter run of a parameter (`fc1.weight` or its file form `fc1_weight`), any graph."""
        file_name = parameter_name(name)
        return next((run for run in self.runs if run.is_parameter and run.op_name == file_name), None)


KEEP_STEPS = 8          # steps' op-run indexes kept in memory at once


class StepReads:
    """The dump's one cache of steps read again after the walk (layout.Dump.step_reads): (rank, step) -> its op
    runs (StepIndex), each read once whoever asks (the harmless stage, the diagnosis, the replicas), the last
    `keep` kept (the stages go through a rank's steps in order, so memory stays flat on long dumps). Every tensor
    is read through the dump's one access. A step the walk read is read again quietly (the walk said what was
    wrong with its files); any other step says it."""

    def __init__(self, dump, access, warn: Callable[[str], None], keep: int = KEEP_STEPS):
        self.dump, self.access, self.warn, self.keep = dump, access, warn, keep
        self.scanned: Optional[Dict[int, List[int]]] = None     # rank -> steps the walk read, once it is done
        self._units: Optional[Dict[Tuple[int, int], object]] = None
        self._cache: "OrderedDict[Tuple[int, int], Optional[StepIndex]]" = OrderedDict()

    def unit(self, rank: int, step: int):
        if self._units is None:
            self._units = {(u.rank, u.step): u for u in self.dump.plan().units}
        return self._units.get((rank, step))

    def _warn_of(self, rank: int, step: int) -> Callable[[str], None]:
        if self.scanned is None or step in self.scanned.get(rank, ()):
            return lambda message: None
        return self.warn

    def __call__(self, rank: int, step: int) -> Optional[StepIndex]:
        key = (rank, step)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        unit = self.unit(rank, step)
        index = StepIndex.of_unit(unit, self._warn_of(rank, step), access=self.access) if unit is not None else None
        self._cache[key] = index
        if len(self._cache) > self.keep:
            self._cache.popitem(last=False)
        return index

    def ops_of(self, rank: int, step: int, ops: Callable[[str], bool]) -> Optional[StepIndex]:
        """The runs of (rank, step) that ops(op name) takes: from the cache when the step is there, else read for
        this question only (a whole step of a 50,000-row statistic.csv costs seconds; a few ops cost little)."""
        cached = self._cache.get((rank, step))
        if cached is not None:
            return StepIndex([run for run in cached.runs if ops(run.op_name)], access=self.access)
        unit = self.unit(rank, step)
        return StepIndex.of_unit(unit, lambda message: None, ops, access=self.access) if unit is not None else None
