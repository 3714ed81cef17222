"""Data-parallel replicas as evidence of a device fault.

The ranks of one data-parallel group hold the same values after the gradient AllReduce and the same updated
weights and optimizer state at the end of a step. A rank whose copy differs from its peers' is the suspect
device; peers that agree (all finite, or all bad alike) say the value was made before the AllReduce, or on every
rank. The dp groups come from the parallel layout (msoverflow/parallel_layout.py: `--parallel`, a MindFormers
YAML, a rank table, ...); without dp and tp coordinates there is nothing to compare.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from ..model import OpExecution, TensorEvent
from .recompute import TOLERANCE

MAX_TENSORS = 256        # replicated tensors compared per step at most (largest first would cost more to find)


@dataclass
class Difference:
    name: str                  # "AllReduce Default/.../AllReduce-op0 output 0", "weight head.weight"
    odd: List[int]             # ranks whose copy differs from the majority ([] when no majority decides)
    groups: List[List[int]]    # ranks holding the same copy, largest first
    detail: str                # "1 of 16 values: NaN where the peers hold 0.0537"


@dataclass
class ReplicaCheck:
    rank: int
    group: List[int]
    compared: int = 0
    differences: List[Difference] = field(default_factory=list)

    @property
    def suspect(self) -> bool:
        """The rank under question holds a copy its peers do not."""
        return any(self.rank in d.odd for d in self.differences)

    @property
    def text(self) -> str:
        peers = ", ".join(str(r) for r in self.group if r != self.rank)
        if not self.compared:
            return f"replicas: no tensor both rank {self.rank} and its data-parallel peers ({peers}) dumped to compare"
        if not self.differences:
            return (f"replicas: rank {self.rank} and its data-parallel peers ({peers}) agree on all {self.compared} "
                    "replicated tensors (AllReduce results, weights, optimizer state)")
        first = self.differences[0]
        if self.rank in first.odd:
            return (f"replicas: rank {self.rank}'s {first.name} differs from its data-parallel peers ({peers}), which "
                    f"agree ({first.detail}): rank {self.rank} is the suspect device")
        if first.odd:
            return (f"replicas: rank {', '.join(map(str, first.odd))}'s {first.name} differs from the other "
                    f"data-parallel replicas ({first.detail})")
        return (f"replicas: ranks {' vs '.join(','.join(map(str, g)) for g in first.groups)} hold different "
                f"{first.name} ({first.detail}); with no majority the odd one cannot be told")


def dp_group(rank: int, coords: Dict[int, Optional[Dict[str, int]]]) -> List[int]:
    """The ranks sharing `rank`'s tensor- and pipeline-parallel coordinates: its data-parallel replicas (empty
    when the layout does not give dp and tp coordinates)."""
    own = coords.get(rank)
    if not own or "dp" not in own or "tp" not in own:
        return []
    return sorted(r for r, c in coords.items() if c and c.get("tp") == own["tp"] and c.get("pp") == own.get("pp")
                  and "dp" in c)


def _replicated(runs: Sequence[OpExecution], kn, data_inputs) -> Dict[str, TensorEvent]:
    """name -> tensor of a rank's step that every replica holds alike: collectives' outputs, what optimizer
    updates write, and parameters that are not the batch (weights, optimizer state after the update)."""
    found: Dict[str, TensorEvent] = {}
    for ex in runs:
        if kn.is_collective(ex.op_type) or ex.op_type in kn.state_updates:
            for e in ex.outputs:
                found[f"{ex.op_type} {ex.op_name} output {e.slot}"] = e
        elif ex.is_parameter and ex.op_name not in data_inputs:
            for e in ex.outputs:
                found[f"weight {ex.op_name}"] = e
    return found


def _op_of(name: str) -> str:
    """The op name inside a replicated tensor's name."""
    parts = name.split(" ")
    return parts[1]


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        return False
    if a.dtype.kind != "f" or b.dtype.kind != "f":
        return bool(np.array_equal(a, b))
    with np.errstate(invalid="ignore"):
        both = np.isfinite(a) & np.isfinite(b)
        if not np.array_equal(np.where(both, 0, a), np.where(both, 0, b), equal_nan=True):
            return False
        if not both.any():
            return True
        scale = float(np.max(np.abs(a[both])))
        return bool(np.all(np.abs(a[both].astype(np.float64) - b[both]) <= TOLERANCE["float32"] * scale))


def _detail(odd: np.ndarray, majority: np.ndarray) -> str:
    if odd.shape != majority.shape or odd.dtype.kind != "f":
        return f"shape {odd.shape} vs {majority.shape}"
    with np.errstate(invalid="ignore"):
        differ = ~((odd == majority) | (np.isnan(odd) & np.isnan(majority)))
    n = int(differ.sum())
    i = int(np.flatnonzero(differ.reshape(-1))[0]) if n else 0
    return (f"{n} of {odd.size} values; e.g. {float(odd.reshape(-1)[i]):.6g} where the others hold "
            f"{float(majority.reshape(-1)[i]):.6g}")


def compare(rank: int, group: Sequence[int], runs_of: Callable[[int], Sequence[OpExecution]], access, kn,
            data_inputs=frozenset(),
            only: Optional[Sequence[str]] = None) -> ReplicaCheck:
    """Compare the replicated tensors of one step across the data-parallel `group` holding `rank`. runs_of: the
    op runs of that step on a rank (read only when asked); only: op names to compare (None: every replicated
    tensor; the diagnose stage passes the origin and the ops its value reached, so a step's weights are not all
    read)."""
    check = ReplicaCheck(rank=rank, group=list(group))
    if len(group) < 2 or rank not in group:
        return check
    tensors = {r: _replicated(runs_of(r), kn, data_inputs) for r in group}
    wanted = None if only is None else set(only)
    names = [n for n in tensors[rank] if sum(n in tensors[r] for r in group) >= 2
             and (wanted is None or _op_of(n) in wanted)][:MAX_TENSORS]
    for name in names:
        holders = [r for r in group if name in tensors[r]]
        arrays = {}
        for r in holders:
            array = access.array(tensors[r][name])
            if array is not None:
                arrays[r] = np.asarray(array)
        if len(arrays) < 2:
            continue
        check.compared += 1
        groups: List[List[int]] = []
        for r, array in arrays.items():
            for g in groups:
                if _same(arrays[g[0]], array):
                    g.append(r)
                    break
            else:
                groups.append([r])
        if len(groups) == 1:
            continue
        groups.sort(key=len, reverse=True)
        if len(groups[0]) > len(groups[1]) or len(arrays) == 2:
            majority = groups[0] if len(groups[0]) > len(groups[1]) else _finite_one(groups, arrays)
            odd = sorted(r for g in groups if g is not majority for r in g) if majority else []
        else:
            majority, odd = None, []
        reference = arrays[majority[0]] if majority else arrays[groups[0][0]]
        shown = arrays[odd[0]] if odd else arrays[groups[1][0]]
        check.differences.append(Difference(name=name, odd=odd, groups=groups, detail=_detail(shown, reference)))
    check.differences.sort(key=lambda d: rank not in d.odd)
    return check


def _finite_one(groups: List[List[int]], arrays: Dict[int, np.ndarray]) -> Optional[List[int]]:
    """With two replicas that differ, the one holding only finite values is taken as the sound one."""
    finite = [g for g in groups if arrays[g[0]].dtype.kind != "f" or bool(np.all(np.isfinite(arrays[g[0]])))]
    return finite[0] if len(finite) == 1 else None
