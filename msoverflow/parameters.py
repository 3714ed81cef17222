"""The parameters that were hit: per rank, each parameter whose gradient or value first became non-finite.

Two kinds of evidence in a dump:
  - an optimizer (state-update) op of the rank's first bad step: input 0 is the parameter it writes; a bad
    input of the same shape is its gradient (or moment). The parameter's name comes from the op's node line in
    the saved graph (`SGD(%para4_head.weight, ...)`), else the op is named instead;
  - a `Parameter` file whose value is non-finite (the weight itself went bad).
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
                   warn: Callable[[str], None], bad_steps: Set[Tuple[int, int]]) -> List[ParameterHit]:
    """stats_of(event) -> TensorStats (lazy read); node_of(ex) -> (GraphNode or None, graph or None);
    bad_steps: the (rank, step)s where the scan judged any op bad (only those are looked at)."""
    hits: List[ParameterHit] = []
    lines = _NodeLines()
    seen = set()
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
            values = [ex for ex in step if ex.is_parameter]
            found = 0
            for ex in updates + values:
                if len(hits) >= MAX_HITS:
                    warn(f"more than {MAX_HITS} parameters were hit: the table lists the first {MAX_HITS}")
                    return hits
                if ex.is_parameter:
                    hit = _value_hit(ex, row, stats_of)
                else:
                    hit = _update_hit(ex, row, stats_of, node_of, lines, is_collective, computed_here)
                key = (row.rank, hit.name.replace(".", "_")) if hit is not None else None
                if hit is not None and key not in seen:
                    seen.add(key)
                    hits.append(hit)
                    found += 1
            if found:
                break
    return hits


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
