"""Compare two runs (`msoverflow compare`, `msoverflow.compare()`; not named compare, which would shadow the lazy
`msoverflow.compare` function): the first operator where a TARGET dump parts from a BASELINE dump.

One-way, like analyze, in named stages:
- sides.py    discover both dumps once (layout.Dump, its plan, the walk's read of each (rank, step), the saved
              graphs, the parallel layout);
- pairing.py  pair each (rank, step)'s op runs by aligning the two sequences of (graph, op type, scope without
              op numbers or amp's wrapper Cells): ops one side inserted are gaps, not mis-pairs;
- metrics.py  the numbers of each tensor pair (max abs and rel error, cosine, ulps), small npy files read and
              stacked by readers/npy.py's batch reader, the one the walk uses;
- judge.py    each pair against the tolerance, or the rounding budget of the lower dtype and what its inputs
              carry: origin, received or propagator; a pair whose shapes differ becomes a gap;
- rank.py     the first divergence and the largest differences (error over what the inputs carry);
- assemble.py the verdict and its reasons into the Comparison;
- model.py    the Comparison model and its JSON answer, at the bottom.
"""
from __future__ import annotations

from typing import Callable, Optional

from ..evaluate import TensorAccess
from ..logs import Notes
from ..selection import Selection
from .assemble import assemble
from .judge import judge_units
from .metrics import Comparer, compare_arrays, compare_matrices, row_partials
from .model import (
    DEFAULT_ULPS,
    ROLE_ORIGIN,
    ROLE_PROPAGATOR,
    ROLE_RECEIVED,
    VERDICT_DIVERGED,
    VERDICT_EQUIVALENT,
    VERDICT_INCONCLUSIVE,
    Comparison,
    OpDiff,
    TensorDiff,
    UnmatchedOp,
    comparison_dict,
    op_dict,
)
from .names import load_map
from .pairing import match, match_key, pair_unit
from .sides import discover

__all__ = ["compare", "Comparison", "OpDiff", "TensorDiff", "UnmatchedOp", "comparison_dict", "op_dict",
           "compare_arrays", "compare_matrices", "row_partials", "match", "match_key", "DEFAULT_ULPS",
           "VERDICT_DIVERGED", "VERDICT_EQUIVALENT", "VERDICT_INCONCLUSIVE", "ROLE_ORIGIN", "ROLE_PROPAGATOR",
           "ROLE_RECEIVED"]


def compare(baseline: str, target: str, *, ranks: Optional[Selection] = None, steps: Optional[Selection] = None,
            tolerance_ulps: float = DEFAULT_ULPS, top: int = 10, warn: Optional[Callable[[str], None]] = None,
            parallel=None, name_map: Optional[str] = None) -> Comparison:
    """Compare two dumps; see the module docstring. ranks/steps: only these (a Selection, kept as ranges all the way
    to the plan; None: all). parallel: the layout as `--parallel` takes it (text or a parallel_layout.ParallelSpec;
    None: a YAML beside the baseline, else inferred pipeline stages, else unknown). name_map: `--map FILE` (our YAML
    or a mindstudio-probe mapping file): names that pair across modes or frameworks."""
    note = Notes(warn)
    mapping = load_map(name_map) if name_map else None
    sides = discover(baseline, target, ranks, steps, parallel, note)
    comparer = Comparer(TensorAccess(note), TensorAccess(note), tolerance_ulps)
    paired = (pair_unit(unit, mapping) for unit in sides.read_units(note))
    judged = judge_units(paired, comparer, sides.coords_of)
    return assemble(sides, comparer, judged, top, tolerance_ulps, note)
