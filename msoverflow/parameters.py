"""The parameters that were hit: per rank, each parameter whose gradient or value first became non-finite.

Two kinds of evidence in a dump:
  - an optimizer (state-update) op of the rank's first bad step: input 0 is the parameter it writes; a bad
    input of the same shape is its gradient (or moment). The parameter's name comes from the op's node line in
    the saved graph (`SGD(%para4_head.weight, ...)`), else the op is named instead;
  - a `Parameter` file whose value is non-finite (the weight itself went bad);
  - a framework dump's parameter gradients (msprobe `{Cell}.parameters_grad`: the reader names each output slot
    that holds one, GraphNode.parameter_grads);
  - when the step ran no optimizer kernel (a loss-scale cell skips the update on overflow), a gradient
    collective's bad output: the gradient reducer hands its reduced gradients on in the order of the weights (the
    graph's output tuple), and the optimizer call takes them in the same order, so the k-th reduced gradient is
    the k-th optimizer call's parameter. Both orders come from the saved graphs (the optimizer may sit in a branch
    graph that did not run); the shapes must agree pair by pair, else the row says the parameter is not known.
How it was hit follows the rank's own story (the per-rank table): a rank where a bad value was created computed
it; a rank that received its first bad value through a collective got the gradient through that collective.
"""
from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional, Set, Tuple

from . import safeio
from .model import RANK_ORIGIN, RANK_RECEIVED, OpExecution, ParameterHit, RankStatus

MAX_HITS = 1000           # a table of 80,000 gradients helps nobody (and is quadratic to lay out)
_PARAM_ARG = re.compile(r"=\s*[\w.]+\(\s*%para\d+_([^,\s)]+)")


def parameter_hits(executions: Dict[int, List[OpExecution]], rank_status: List[RankStatus], stats_of: Callable,
                   node_of: Callable, is_state_update: Callable[[str], bool], is_collective: Callable[[str], bool],
                   warn: Callable[[str], None], bad_steps: Set[Tuple[int, int]],
                   graphs_of_rank: Callable[[int], List[object]] = lambda rank: []) -> List[ParameterHit]:
    """stats_of(event) -> TensorStats (lazy read); node_of(ex) -> (GraphNode or None, graph or None);
    bad_steps: the (rank, step)s where the scan judged any op bad (only those are looked at);
    graphs_of_rank(rank) -> the rank's saved graphs in graph-id order (where the optimizer calls are)."""
    hits: List[ParameterHit] = []
    lines = _NodeLines()
    gradients = _ReducedGradients(lines, is_collective, is_state_update, graphs_of_rank)
    seen: Set[Tuple[int, str]] = set()
    for row in rank_status:
        if row.step is None or (row.status not in (RANK_ORIGIN, RANK_RECEIVED) and not row.via):
            continue
        mine = executions.get(row.rank, [])
        # the first step in which a parameter went bad: a rank whose origin came later may have received bad
        # gradients before (row.note says so); steps after the rank's first bad one are not looked at
        for step_id in sorted({ex.step for ex in mine if ex.step <= row.step
                               and ((row.rank, ex.step) in bad_steps or ex.step == row.step)}):
            step = [ex for ex in mine if ex.step == step_id]
            computed_here = row.status == RANK_ORIGIN and step_id == row.step
            # optimizer ops first (they name the parameter and say how its gradient came); then Parameter files
            # of parameters not named yet (their file names spell dots as underscores)
            updates = [ex for ex in step if is_state_update(ex.op_type) and len(ex.inputs) > 1]
            # a graph input that is no weight (IsWeight: false, the data batch) is not a parameter
            values = [ex for ex in step if ex.is_parameter and not _is_data_input(ex.op_name, row.rank, graphs_of_rank)]
            found: int = 0
            for ex in updates + values:
                if len(hits) >= MAX_HITS:
                    warn(f"more than {MAX_HITS} parameters were hit: the table lists the first {MAX_HITS}")
                    return hits
                if ex.is_parameter:
                    hit = _value_hit(ex, row, stats_of)
                else:
                    hit = _update_hit(ex, row, stats_of, node_of, lines, is_collective, computed_here)
                found += _add(hit, row, hits, seen)
            for hit in _framework_grads(step, row, stats_of, node_of, computed_here):
                found += _add(hit, row, hits, seen)
            if not found:       # no optimizer kernel ran with a bad input: the gradients say which parameters
                for hit in gradients.hits(step, row, stats_of, node_of, computed_here):
                    found += _add(hit, row, hits, seen)
            if found:
                break
    return hits


def _is_data_input(name: str, rank: int, graphs_of_rank: Callable[[int], List[object]]) -> bool:
    """A Parameter file of a graph input that is no weight (the saved graph says `IsWeight: false`); file names
    spell dots as underscores."""
    spelled = name.replace(".", "_")
    return any(spelled in {d.replace(".", "_") for d in getattr(graph, "data_inputs", ())}
               for graph in graphs_of_rank(rank))


def _add(hit: Optional[ParameterHit], row: RankStatus, hits: List[ParameterHit], seen: Set[Tuple[int, str]]) -> int:
    """Adds a hit not seen on its rank yet (names compared with dots as underscores); 1 when added."""
    if hit is None:
        return 0
    key = (row.rank, hit.name.replace(".", "_"))
    if key in seen or len(hits) >= MAX_HITS:
        return 0
    seen.add(key)
    hits.append(hit)
    return 1


def _framework_grads(step: List[OpExecution], row: RankStatus, stats_of, node_of,
                     computed_here: bool) -> List[ParameterHit]:
    """The bad parameter gradients a framework dump names (msprobe parameters_grad, GraphNode.parameter_grads)."""
    found = []
    for ex in step:
        node, _graph = node_of(ex)
        names = getattr(node, "parameter_grads", None)
        if not names:
            continue
        for event in ex.outputs:
            if event.slot in names and _bad(event, stats_of):
                if computed_here:
                    how = "gradient computed on this rank"
                elif row.via:
                    how = f"gradient non-finite after the rank received via {row.via}"
                else:
                    how = "gradient non-finite; no dumped op on this rank made it"
                found.append(ParameterHit(name=names[event.slot], rank=ex.rank, step=ex.step, shape=event.shape,
                                          how=how + f" (msprobe parameters_grad of {ex.op_name})",
                                          op_name=ex.op_name, coords=row.coords))
    return found


def _bad(event, stats_of) -> bool:
    stats = event.stats if event.stats is not None else stats_of(event)
    return stats is not None and stats.nonfinite > 0


def _value_hit(ex: OpExecution, row: RankStatus, stats_of) -> Optional[ParameterHit]:
    bad = [e for e in ex.outputs if _bad(e, stats_of)]
    if not bad:
        return None
    return ParameterHit(name=ex.op_name, rank=ex.rank, step=ex.step, shape=bad[0].shape,
                        how="value non-finite (its Parameter file)", op_name=ex.op_name, coords=row.coords)


def _update_hit(ex: OpExecution, row: RankStatus, stats_of, node_of, lines, is_collective,
                computed_here: bool) -> Optional[ParameterHit]:
    by_slot = {e.slot: e for e in ex.inputs}
    param = by_slot.get(0)
    shape = param.shape if param is not None else None
    gradient = next((e for slot, e in sorted(by_slot.items()) if slot > 0 and (shape is None or e.shape == shape)
                     and _bad(e, stats_of)), None)
    value_bad = param is not None and _bad(param, stats_of)
    if gradient is None and not value_bad:
        return None
    node, graph = node_of(ex)
    name = _parameter_name(node, graph, lines) or f"input 0 of {ex.op_type} {ex.op_name}"
    what = "gradient" if ex.op_type not in _PLAIN_WRITES else "value written"
    if gradient is None:
        how = f"value non-finite (input 0 of {ex.op_type})"
    elif computed_here:
        through = _collective_before(node, gradient.slot, graph, is_collective)
        how = f"{what} computed on this rank" + (f", then through {through}" if through else "")
    elif row.via or row.status == RANK_ORIGIN:
        through = _collective_before(node, gradient.slot, graph, is_collective)
        how = f"{what} received via {through or row.via or 'a collective (before this rank made its own)'}"
    else:
        how = f"{what} non-finite (input {gradient.slot} of {ex.op_type}); no dumped op on this rank made it"
    return ParameterHit(name=name, rank=ex.rank, step=ex.step, shape=shape, how=how,
                        op_name=ex.op_name, coords=row.coords)


_PLAIN_WRITES = {"Assign", "AssignAdd", "AssignSub", "ScatterUpdate"}


def _parameter_name(node, graph, lines, hops: int = 3) -> Optional[str]:
    """The parameter input 0 of an update op writes: a `param:` input, the node's line in the saved graph, or
    the same through a producer of input 0 (a Cast of an fp16 weight)."""
    for _ in range(hops):
        if node is None or not node.inputs:
            return None
        if node.inputs[0].startswith("param:"):
            return node.inputs[0][len("param:"):]
        if graph is not None and node.ir_line:
            name = lines.parameter_of(getattr(graph, "path", None), node.ir_line)
            if name:
                return name
        node = graph.by_full.get(node.inputs[0]) if graph is not None else None
    return None


def _collective_before(node, slot: int, graph, is_collective, depth: int = 4) -> Optional[str]:
    """The collective that carried a gradient into an update op (grad_reducer: AllReduce, then a Mul by 1/n)."""
    if node is None or graph is None or slot >= len(node.inputs):
        return None
    frontier = [node.inputs[slot]]
    for _ in range(depth):
        following = []
        for name in frontier:
            producer = graph.by_full.get(name)
            if producer is None:
                continue
            if is_collective(producer.op_type):
                return f"{producer.op_type} {producer.full_name.replace('/', '_')}"
            following += [i for i in producer.inputs if i and not i.startswith(("param:", "%")) and i != "const"]
        frontier = following[:16]
    return None


class _ReducedGradients:
    """Parameters hit through the gradient collectives of a step that ran no optimizer kernel (module docstring)."""

    def __init__(self, lines: "_NodeLines", is_collective, is_state_update, graphs_of_rank):
        self.lines, self.is_collective, self.is_state_update = lines, is_collective, is_state_update
        self.graphs_of_rank = graphs_of_rank
        self._calls: Dict[int, List[Tuple[Optional[str], Optional[Tuple[int, ...]]]]] = {}

    def hits(self, step: List[OpExecution], row: RankStatus, stats_of, node_of,
             computed_here: bool) -> List[ParameterHit]:
        found = []
        for ex in step:
            if not self.is_collective(ex.op_type):
                continue
            bad = next((e for e in ex.outputs if _bad(e, stats_of)), None)
            if bad is None:
                continue
            node, graph = node_of(ex)
            name, why = self._parameter(ex.rank, node, graph, bad.shape)
            through = f"{ex.op_type} {ex.op_name}"
            if computed_here:
                how = f"gradient computed on this rank, then through {through}"
            else:
                how = f"gradient received via {through}"
            how += ("; no optimizer ran (update skipped): named by the saved graph's optimizer call" if name
                    else f"; no optimizer ran (update skipped) and the parameter is not known: {why}")
            found.append(ParameterHit(name=name or f"? (the gradient {ex.op_type} {ex.op_name} reduced)",
                                      rank=ex.rank, step=ex.step, shape=bad.shape, how=how, op_name=ex.op_name,
                                      coords=row.coords))
        return found

    def _parameter(self, rank: int, node, graph, shape) -> Tuple[Optional[str], str]:
        """(the parameter whose gradient `node` reduced, or None and why not)."""
        if node is None or graph is None:
            return None, "no saved graph names this collective"
        reduced = _reduced_in_order(graph, self.is_collective)
        if node.full_name not in reduced:
            return None, "the collective's output is not one of the graph's outputs (no gradient tuple)"
        calls = self._optimizer_calls(rank)
        if not calls:
            return None, "no saved graph of this rank holds an optimizer call"
        if len(calls) != len(reduced):
            return None, (f"the graph hands on {len(reduced)} reduced gradients, the optimizer calls take "
                          f"{len(calls)}")
        index = reduced.index(node.full_name)
        param, param_shape = calls[index]
        if param is None:
            return None, f"the optimizer call for gradient {index + 1} does not name its parameter"
        if param_shape is not None and shape is not None and tuple(param_shape) != tuple(shape):
            return None, (f"gradient {index + 1} has shape {tuple(shape)}, the optimizer call's parameter {param} "
                          f"{tuple(param_shape)}")
        return param, ""

    def _optimizer_calls(self, rank: int) -> List[Tuple[Optional[str], Optional[Tuple[int, ...]]]]:
        if rank not in self._calls:
            calls = []
            for graph in self.graphs_of_rank(rank):
                for node in getattr(graph, "nodes", ()):
                    if self.is_state_update(node.op_type) and node.op_type not in _PLAIN_WRITES:
                        name = _parameter_name(node, graph, self.lines)
                        calls.append((name, graph.parameter_shapes.get(name) if name else None))
            self._calls[rank] = calls
        return self._calls[rank]


def _reduced_in_order(graph, is_collective, hops: int = 3) -> List[str]:
    """The collectives whose outputs (through a Mul by 1/n, a Cast: at most `hops` ops) are elements of the graph's
    output tuple, in the tuple's order: the reduced gradients as the gradient reducer hands them on."""
    cached = getattr(graph, "_reduced_gradients", None)
    if cached is not None:
        return cached
    elements: List[str] = []
    for name in getattr(graph, "returns", ()):
        node = graph.by_full.get(name)
        elements += node.inputs if node is not None and node.op_type == "MakeTuple" else [name]
    reduced = []
    for element in elements:
        node = graph.by_full.get(element)
        for _ in range(hops + 1):
            if node is None or is_collective(node.op_type):
                break
            producers = [i for i in node.inputs if i in graph.by_full]
            node = graph.by_full[producers[0]] if len(producers) == 1 else None
        if node is not None and is_collective(node.op_type):
            reduced.append(node.full_name)
    graph._reduced_gradients = reduced
    return reduced


class _NodeLines:
    """The parameter an optimizer node writes, from its line in the saved graph (files read once, bounded)."""

    def __init__(self):
        self.files: Dict[str, Dict[int, str]] = {}

    def parameter_of(self, path: Optional[str], line: int) -> Optional[str]:
        if not path:
            return None
        if path not in self.files:
            self.files[path] = self._names(path)
        return self.files[path].get(line)

    @staticmethod
    def _names(path: str) -> Dict[int, str]:
        found: Dict[int, str] = {}
        try:
            with safeio.open_regular(path, "r", encoding="utf-8", errors="replace") as fh:
                for number, text in enumerate(safeio.bounded_lines(fh, 1 << 14), start=1):
                    if "%para" in text:
                        match = _PARAM_ARG.search(text)
                        if match:
                            found[number] = match.group(1)
        except OSError:
            pass
        return found


__all__ = ["parameter_hits", "MAX_HITS"]
