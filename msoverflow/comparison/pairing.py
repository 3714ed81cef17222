"""Pairing: which op run of the target is which op run of the baseline, per (rank, step)."""
from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, TypeVar

from ..model import NamedRun
from .names import api_of, family, framework_of

Run = TypeVar("Run", bound=NamedRun)     # an OpExecution or a walk.OpRun: match() pairs either
_OP_NUMBER = re.compile(r"-op\d+$")
_OP_NUMBER_INNER = re.compile(r"-op\d+(?=[_/])")
# The Cells amp wraps a network in (`_backbone-_OutputTo32`): a scope level one side has and the other not
_AMP_WRAPPER = re.compile(r"(?<=[_/])[A-Za-z0-9_]*?-_OutputTo(?:16|32)[_/]")


def match_key(ex: NamedRun) -> Tuple[str, str, str]:
    """What stays the same across compilations: graph, op type and the scope path without op numbers."""
    return ex.graph, ex.op_type, _without_op_numbers(ex.op_name)


@functools.lru_cache(maxsize=1 << 16)
def _without_op_numbers(op_name: str) -> str:
    """The same names recur on every rank and step."""
    return _AMP_WRAPPER.sub("", _OP_NUMBER_INNER.sub("", _OP_NUMBER.sub("", op_name)))


# optimizer kernels: one run per parameter under the optimizer's one scope, in an order each compilation chooses
_PER_PARAMETER = frozenset({"SGD", "ApplyMomentum", "Adam", "AdamWeightDecay", "ApplyAdam", "FusedAdam",
                            "FusedAdamWeightDecay", "Assign", "AssignAdd", "Lamb", "ApplyRMSProp", "ApplyAdagrad"})


def _keys(runs: List[Run], graphs) -> List[tuple]:
    """match_key() of each run; a backward op (`Gradients/...`) whose saved graph names its forward op is keyed
    by that forward op too (its key and occurrence), so backward ops pair through their forward op even when
    the backward runs in another order."""
    keys: List[tuple] = [match_key(ex) for ex in runs]
    if graphs is None:
        return keys
    from ..names import scope_to_file_name
    seen: Counter = Counter()
    forward_of_name: Dict[str, tuple] = {}
    for ex, key in zip(runs, keys, strict=True):
        if not ex.op_name.startswith("Gradients"):
            forward_of_name.setdefault(ex.op_name, key + (seen[key],))
            seen[key] += 1
    for i, ex in enumerate(runs):
        if ex.op_type in _PER_PARAMETER:     # one run per parameter, all in one scope: paired by the parameter
            node, _graph = graphs.node(ex)
            params = tuple(p for p in (node.inputs if node is not None else []) if p.startswith("param:"))
            keys[i] += params
        if ex.op_name.startswith("Gradients"):
            node, _graph = graphs.node(ex)
            if node is not None and node.forward_name:
                name = scope_to_file_name(node.forward_name)
                if name in forward_of_name:
                    keys[i] += ("of",) + forward_of_name[name]
                elif "/" in node.forward_name:    # a scoped forward op that was not dumped
                    keys[i] += ("of", _OP_NUMBER.sub("", name))
                # else an internal id ("Reshape_13522", renumbered by every compilation): no help
    return keys


def match(baseline: List[Run], target: List[Run], graphs=(None, None), name_map=None):
    """[(baseline run, target run)] in the baseline's order, and the runs of each side that found no partner.
    The two sequences of keys are aligned (difflib's longest matching blocks, an edit-distance alignment): ops one
    side inserted (the Casts amp or a precision patch adds, fused kernels) are gaps, and the runs around them keep
    their partners. What the alignment leaves is paired by key and occurrence (backward ops that ran in another
    order). graphs: the two sides' saved graphs (graphs.SavedGraphs) when both have them: backward ops then pair
    through their forward op. name_map: --map, whose entries replace the keys of the runs they name."""
    use = graphs if all(g is not None for g in graphs) else (None, None)
    base_keys, target_keys = _keys(baseline, use[0]), _keys(target, use[1])
    if name_map:
        for runs, keys, side in ((baseline, base_keys, "baseline"), (target, target_keys, "target")):
            for i, run in enumerate(runs):
                mapped = name_map.key_of((run.op_type, _without_op_numbers(run.op_name)), side)
                if mapped is not None:
                    keys[i] = (mapped,)
    return _align(baseline, base_keys, target, target_keys)


def _align(baseline: List[Run], base_keys: List[tuple], target: List[Run], target_keys: List[tuple]):
    """The alignment of two keyed sequences, then pairs by key and occurrence for what it leaves."""
    if base_keys == target_keys:        # the same graph: every run pairs with the run at its place
        return list(zip(baseline, target, strict=True)), [], []
    partner: Dict[int, int] = {}
    for block in _aligned_blocks(base_keys, target_keys):
        for k in range(block.size):
            partner[block.a + k] = block.b + k
    taken = set(partner.values())
    by_key: Dict[tuple, List[int]] = {}
    for j, key in enumerate(target_keys):
        if j not in taken:
            by_key.setdefault(key, []).append(j)
    used: Counter = Counter()
    for i, key in enumerate(base_keys):
        if i in partner:
            continue
        free = by_key.get(key, [])
        if used[key] < len(free):
            partner[i] = free[used[key]]
            used[key] += 1
    pairs = [(baseline[i], target[partner[i]]) for i in sorted(partner)]
    only_baseline = [ex for i, ex in enumerate(baseline) if i not in partner]
    paired = set(partner.values())
    only_target = [ex for j, ex in enumerate(target) if j not in paired]
    only_target.sort(key=lambda ex: (ex.time, ex.order if ex.order is not None else 1 << 30))
    return pairs, only_baseline, only_target


def _aligned_blocks(base_keys: List[tuple], target_keys: List[tuple]):
    """The matching blocks of the two key sequences. Keys are interned as small integers (hashing tuples once);
    the common head and tail are taken first, so a long step with a few inserted ops aligns only its middle."""
    import difflib
    from types import SimpleNamespace
    codes: Dict[tuple, int] = {}
    a = [codes.setdefault(k, len(codes)) for k in base_keys]
    b = [codes.setdefault(k, len(codes)) for k in target_keys]
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    blocks = [SimpleNamespace(a=0, b=0, size=head)]
    matcher = difflib.SequenceMatcher(None, a[head:len(a) - tail], b[head:len(b) - tail], autojunk=False)
    blocks += [SimpleNamespace(a=m.a + head, b=m.b + head, size=m.size) for m in matcher.get_matching_blocks()]
    blocks.append(SimpleNamespace(a=len(a) - tail, b=len(b) - tail, size=tail))
    return blocks


@dataclass
class UnitPairs:
    """One (rank, step) paired: the baseline's runs in order, the pairs, and each side's runs without a partner.
    comparable: across modes (jit against PyNative), how many runs of each side could pair at all (the forward
    ops that compute a tensor); None when every run could."""
    unit: "object"              # sides.UnitRead
    pairs: list
    only_baseline: list
    only_target: list
    comparable: Optional[Tuple[int, int]] = None
    frameworks: Optional[Tuple[str, str]] = None    # (baseline's, target's) when they differ: other kernels


def pair_unit(unit, name_map=None) -> UnitPairs:
    """match() on one (rank, step) of both sides (a sides.UnitRead), through the saved graphs when both have them;
    across modes (one side a graph-mode dump, the other API calls of a mindstudio-probe dump) and across frameworks
    (MindSpore's API calls against PyTorch's) match_across()."""
    frameworks = _frameworks(unit.base_runs, unit.target_runs)
    if _names_api(unit.base_runs) != _names_api(unit.target_runs) or frameworks is not None:
        pairs, only_base, only_target, comparable = match_across(unit.base_runs, unit.target_runs, name_map)
        return UnitPairs(unit, pairs, only_base, only_target, comparable, frameworks)
    has_graph = [any(g.node(ex)[1] is not None for ex in runs[:1]) if runs else False
                 for g, runs in ((unit.base_graphs, unit.base_runs), (unit.target_graphs, unit.target_runs))]
    pairs, only_base, only_target = match(unit.base_runs, unit.target_runs, (unit.base_graphs, unit.target_graphs)
                                          if all(has_graph) else (None, None), name_map)
    return UnitPairs(unit, pairs, only_base, only_target)


def _names_api(runs) -> bool:
    """The side names API calls (mindstudio-probe: `Functional.softmax.0.forward`), not graph kernels."""
    sample = runs[:64]
    return bool(sample) and sum(1 for r in sample if api_of(r.op_name)) * 2 > len(sample)


def _frameworks(base_runs, target_runs) -> Optional[Tuple[str, str]]:
    """(baseline's, target's) when both sides are mindstudio-probe dumps of different frameworks (MindSpore against
    PyTorch: no shared names, and every op another implementation); else None."""
    base, target = (framework_of(run.op_name for run in runs[:256]) for runs in (base_runs, target_runs))
    return (base, target) if base is not None and target is not None and base != target else None


def cross_key(run, side: str, name_map=None) -> Optional[tuple]:
    """What a run pairs by across modes: the user's --map entry it matches, else its op family (names.family);
    None for a run that has no partner in another mode (backward kernels and backward API records, parameters,
    the optimizer, APIs that compute no tensor)."""
    api = api_of(run.op_name)
    if api is not None:
        if api[1] == "backward" or not run.n_outputs:
            return None
        names: Tuple[str, ...] = (api[0], run.op_type)
    else:
        if run.op_name.startswith("Gradients") or run.is_parameter or "optimizer" in run.op_name \
                or not run.n_outputs:
            return None
        names = (run.op_type, _without_op_numbers(run.op_name))
    kind = (name_map.family_of(names, side) if name_map else None) or family(run.op_type, run.op_name)
    return ("op", kind) if kind and kind not in _VIEWS else None


# ops that only re-view a tensor: each mode (and each compilation) keeps a different number of them (graph mode
# shares one Reshape between two Dense layers, PyNative reshapes for each): across modes they are left out
_VIEWS = frozenset({"Reshape", "ExpandDims", "Squeeze", "Flatten", "Identity", "Depend", "Load", "TupleGetItem"})


def match_across(baseline: List[Run], target: List[Run], name_map=None):
    """Pairs across modes: each side's forward op runs keyed by cross_key() and aligned as two sequences (the
    order of the forward pass is the model's, whichever mode ran it); what the alignment leaves pairs by key and
    occurrence. Returns (pairs, baseline runs without a partner, target runs without one, (baseline, target)
    runs that could pair)."""
    base_keyed = [(run, cross_key(run, "baseline", name_map)) for run in baseline]
    target_keyed = [(run, cross_key(run, "target", name_map)) for run in target]
    base_runs = [run for run, key in base_keyed if key is not None]
    target_runs = [run for run, key in target_keyed if key is not None]
    pairs, only_base, only_target = _align(base_runs, [k for _r, k in base_keyed if k is not None],
                                           target_runs, [k for _r, k in target_keyed if k is not None])
    paired_base = {r.key for r, _t in pairs}
    paired_target = {t.key for _r, t in pairs}
    only_base = [r for r in baseline if r.key not in paired_base]
    only_target = [t for t in target if t.key not in paired_target]
    return pairs, only_base, only_target, (len(base_runs), len(target_runs))


