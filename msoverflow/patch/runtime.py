"""Runtime patch: compute a region of a live MindSpore network in float32 (or bfloat16), undoably.

`Cell.to_float` alone is not enough for the overflows we see: it casts a Cell's inputs, but not the Parameters
it reads nor the explicit `self.cast(x, self.compute_dtype)` inside `construct`, and a later
`amp.auto_mixed_precision` overrides it. Computing only the overflowing op (Sqrt) wider is not enough either: its
huge gradient is cast back to fp16 at the region's edge. So an island here is the owning Cell, with
  - its low-precision Parameters (and the optimizer states that mirror them) converted in place,
  - its low-precision Tensor constants and dtype attributes (compute_dtype, ...) switched,
  - its inputs widened and its outputs returned in the callers' dtype by a wrapper Cell,
  - its mixed-precision flags pinned, so amp applied before or after cannot push it back to fp16.
"""
from __future__ import annotations

import functools
import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Callable, List, Tuple, Union

from ..errors import UserError, require_mindspore
from .targets import NARROWER, Target, check_dtype, describe_candidates, path_matches

PRECISION_FLAGS = ("fp16", "fp32", "bf16")


class TargetNotFound(UserError):
    pass


@dataclass
class Change:
    kind: str        # parameter | optimizer-state | constant | dtype-attr | wrap | op-wrap | flags | note
    where: str
    before: str = ""
    after: str = ""

    def __str__(self) -> str:
        arrow = f": {self.before} -> {self.after}" if (self.before or self.after) else ""
        return f"{self.kind:<15} {self.where}{arrow}"


@dataclass
class PatchResult:
    target: Target
    dtype: str
    cells: List[str] = field(default_factory=list)      # paths of the islands built (or already there)
    changes: List[Change] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    _undo: List[Callable[[], None]] = field(default_factory=list, repr=False)
    _retyped: list = field(default_factory=list, repr=False)   # Parameters whose dtype this patch changed

    @property
    def changed(self) -> bool:
        return any(c.kind != "note" for c in self.changes)

    def undo(self) -> None:
        """Restore everything this patch changed, newest first. Parameters keep their trained values."""
        while self._undo:
            self._undo.pop()()

    def describe(self) -> str:
        lines = [f"runtime patch: {self.target.describe()} computed in {self.dtype}"]
        lines += [f"  island at {path}" for path in self.cells]
        lines += [f"  {c}" for c in self.changes]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"target": self.target.to_dict(), "dtype": self.dtype, "cells": self.cells,
                "changes": [vars(c) for c in self.changes], "warnings": self.warnings}


def _ms():
    ms = require_mindspore("the runtime precision patch")
    from mindspore import dtype as mstype
    from mindspore import nn, ops
    return ms, nn, ops, mstype


def _dtype_name(dtype) -> str:
    text = str(dtype).lower()
    return {"float16": "float16", "float32": "float32", "bfloat16": "bfloat16"}.get(text, text)


_ISLAND_CLASSES: dict = {}


def _island_classes():
    """The wrapper Cells, defined once MindSpore is importable (graph mode parses their construct source)."""
    if _ISLAND_CLASSES:
        return _ISLAND_CLASSES["cell"], _ISLAND_CLASSES["op"]
    ms, nn, ops, mstype = _ms()

    class PrecisionIsland(nn.Cell):
        """Runs `inner` with narrow float inputs widened; hands back outputs in the first narrow input's dtype."""

        def __init__(self, inner, dtype, narrow):
            super().__init__(auto_prefix=False)
            self.inner = inner
            self.island_dtype = dtype
            self.narrow = narrow          # dtypes that get widened, e.g. (float16, bfloat16)
            self.cast = ops.Cast()

        def _widen(self, x):
            if isinstance(x, ms.Tensor):
                if x.dtype in self.narrow:
                    return self.cast(x, self.island_dtype)
            return x

        def _back(self, x, dtype):
            if isinstance(x, ms.Tensor):
                if x.dtype == self.island_dtype:
                    return self.cast(x, dtype)
            return x

        def construct(self, *inputs):
            restore = None
            widened = ()
            for x in inputs:
                if isinstance(x, ms.Tensor):
                    if x.dtype in self.narrow:
                        if restore is None:
                            restore = x.dtype
                widened = widened + (self._widen(x),)
            out = self.inner(*widened)
            if restore is None:
                return out
            if isinstance(out, tuple):
                back = ()
                for y in out:
                    back = back + (self._back(y, restore),)
                return back
            return self._back(out, restore)

    class OpIsland(nn.Cell):
        """Runs one primitive in the island dtype; its output goes back to its first narrow input's dtype."""

        def __init__(self, prim, dtype, narrow):
            super().__init__(auto_prefix=False)
            self.prim = prim
            self.island_dtype = dtype
            self.narrow = narrow
            self.cast = ops.Cast()

        def _widen(self, x):
            if isinstance(x, ms.Tensor):
                if x.dtype in self.narrow:
                    return self.cast(x, self.island_dtype)
            return x

        def construct(self, *inputs):
            restore = None
            widened = ()
            for x in inputs:
                if isinstance(x, ms.Tensor):
                    if x.dtype in self.narrow:
                        if restore is None:
                            restore = x.dtype
                widened = widened + (self._widen(x),)
            out = self.prim(*widened)
            if restore is None:
                return out
            return self.cast(out, restore)

    _ISLAND_CLASSES["cell"], _ISLAND_CLASSES["op"] = PrecisionIsland, OpIsland
    return PrecisionIsland, OpIsland


def _is_island(cell) -> bool:
    return type(cell).__name__ in ("PrecisionIsland", "OpIsland") and type(cell) in _ISLAND_CLASSES.values()


def _walk(network):
    """(path, cell, parent, attr) for every Cell under `network`, islands' inners reported under their own path."""
    stack = [("", network, None, None)]
    seen = set()
    while stack:
        path, cell, parent, attr = stack.pop(0)
        if id(cell) in seen:
            continue
        seen.add(id(cell))
        yield path, cell, parent, attr
        for name, child in cell.name_cells().items():
            if _is_island(child) and hasattr(child, "inner"):
                # The island stands in for its inner Cell: match the inner under the original path.
                yield (f"{path}.{name}" if path else name), child, cell, name
                seen.add(id(child))
                child_path = f"{path}.{name}" if path else name
                for sub, grand in child.inner.name_cells().items():
                    stack.append((f"{child_path}.{sub}", grand, child.inner, sub))
                continue
            stack.append((f"{path}.{name}" if path else name, child, cell, name))


def _class_names(cell) -> List[str]:
    return [k.__name__ for k in type(cell).__mro__]


def find_cells(network, target: Target) -> List[Tuple[str, Any, Any, str]]:
    """The Cells `target` names in `network`: by class name, or by the longest matching attribute-path suffix."""
    rows = [r for r in _walk(network) if r[2] is not None]   # the root itself cannot be wrapped in place
    if target.cell_is_type:
        hits = [r for r in rows if target.cell in _class_names(_inner(r[1]))]
        return hits
    best, hits = 0, []
    for row in rows:
        score = path_matches(target.cell, row[0]) if target.cell else 0     # (a target of cell_type alone)
        if score == 0:
            continue
        if target.cell_type and target.cell_type not in _class_names(_inner(row[1])):
            continue
        if score > best:
            best, hits = score, [row]
        elif score == best:
            hits.append(row)
    return hits


def _inner(cell):
    return cell.inner if _is_island(cell) and hasattr(cell, "inner") else cell


def _not_found(network, target: Target) -> TargetNotFound:
    paths = [f"{p} ({type(c).__name__})" for p, c, _, _ in _walk(network) if p]
    return TargetNotFound(f"{target.describe()} not found in {type(network).__name__}; its Cells are: "
                          f"{describe_candidates(paths)}")


def apply(network, target: Union[Target, str], dtype: str = "float32", *,
          optimizer_states: bool = True) -> PatchResult:
    """Build a `dtype` island around `target` inside `network` (a Cell; may be a TrainOneStepCell).

    Call it before the first step (graph mode compiles once). Works before or after
    `amp.auto_mixed_precision`. Returns what changed; `result.undo()` puts it back.
    Raises TargetNotFound (a UserError) when the network has no such Cell or op.
    """
    ms, nn, ops, mstype = _ms()
    check_dtype(dtype)
    if isinstance(target, str):
        target = Target(cell=target)
    island = getattr(mstype, dtype)
    narrow = tuple(getattr(mstype, n) for n in NARROWER[dtype])
    result = PatchResult(target=target, dtype=dtype)
    try:
        _apply_into(network, target, island, narrow, result, optimizer_states)
    except BaseException:
        result.undo()     # never leave a half-built island behind
        raise
    return result


def _apply_into(network, target: Target, island, narrow, result: PatchResult, optimizer_states: bool) -> None:
    mirror_sources: list = []
    if target.scope == "op":
        _apply_op(network, target, island, narrow, result)
    else:
        hits = find_cells(network, target)
        if not hits:
            raise _not_found(network, target)
        for path, cell, parent, attr in hits:
            if _is_island(cell):
                result.cells.append(path)
                result.changes.append(Change("note", path, "already an island"))
                mirror_sources.extend(p for p in cell.inner.get_parameters() if p.dtype == island)
                continue
            _build_island(path, cell, parent, attr, island, narrow, result)
    if optimizer_states:
        _convert_mirrors(network, result, mirror_sources + result._retyped)


def _build_island(path, cell, parent, attr, island, narrow, result: PatchResult) -> None:
    ms, nn, ops, mstype = _ms()
    PrecisionIsland, _ = _island_classes()
    island_name = _dtype_name(island)
    result.cells.append(path)
    subtree = [(p, c) for p, c in cell.cells_and_names()]

    for name, param in cell.parameters_and_names():
        if param.dtype in narrow:
            _retype_parameter(param, island, f"{path}.{name}", result)

    for sub_path, sub in subtree:
        where = f"{path}.{sub_path}" if sub_path else path
        for attr_name, value in list(vars(sub).items()):
            if isinstance(value, ms.Parameter) or attr_name.startswith("__"):
                continue
            if isinstance(value, ms.Tensor) and value.dtype in narrow:
                _set_attr(sub, attr_name, ops.cast(value, island), f"{where}.{attr_name}", "constant", result,
                          before=_dtype_name(value.dtype), after=island_name)
            elif isinstance(value, type(mstype.float16)) and value in narrow:
                _set_attr(sub, attr_name, island, f"{where}.{attr_name}", "dtype-attr", result,
                          before=_dtype_name(value), after=island_name)
        _warn_literal_casts(sub, where, result)

    wrapper = PrecisionIsland(cell, island, narrow)
    _swap_child(parent, attr, cell, wrapper)
    result._undo.append(lambda: _swap_child(parent, attr, wrapper, cell))
    result.changes.append(Change("wrap", path, type(cell).__name__, f"PrecisionIsland({type(cell).__name__})"))

    for _sub_path, sub in [("", wrapper)] + subtree:
        _pin_precision(sub, island, result)
    result.changes.append(Change("flags", path, "", f"mixed precision pinned to {island_name} (amp cannot override)"))


def _retype_parameter(param, dtype, where, result: PatchResult, kind="parameter") -> None:
    ms, nn, ops, mstype = _ms()
    old = param.dtype
    param.assign_value(ops.cast(param, dtype))
    result.changes.append(Change(kind, where, _dtype_name(old), _dtype_name(dtype)))
    result._retyped.append(param)
    result._undo.append(lambda: param.assign_value(ops.cast(param, old)))


def _set_attr(obj, name, value, where, kind, result: PatchResult, before="", after="") -> None:
    old = vars(obj)[name]
    object.__setattr__(obj, name, value)
    result.changes.append(Change(kind, where, before, after))
    result._undo.append(lambda: object.__setattr__(obj, name, old))


def _swap_child(parent, attr, old, new) -> None:
    # Cell.__setattr__ refuses to replace a registered sub-cell by name; amp does the same via _cells.
    parent._cells[attr] = new
    if attr in vars(parent):
        object.__setattr__(parent, attr, new)
    if hasattr(parent, "cell_list") and isinstance(parent.cell_list, list):
        parent.cell_list = list(parent.cells())


def _pin_precision(cell, island, result: PatchResult) -> None:
    """Set the island's mixed-precision flag and ignore precision flags set later (amp's to_float)."""
    flag = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}[_dtype_name(island)]
    before_type = cell.mixed_precision_type
    before_flags = dict(getattr(cell, "_func_graph_flags", {}) or {})
    had_override = "add_flags" in vars(cell)
    original_add_flags = type(cell).add_flags.__get__(cell)
    original_add_flags(**{k: (k == flag) for k in PRECISION_FLAGS})

    def add_flags(**flags):
        kept = {k: v for k, v in flags.items() if k not in PRECISION_FLAGS}
        return original_add_flags(**kept)

    object.__setattr__(cell, "add_flags", add_flags)

    def undo():
        if not had_override and "add_flags" in vars(cell):
            object.__delattr__(cell, "add_flags")
        for k in PRECISION_FLAGS:
            cell._func_graph_flags.pop(k, None)
            vars(cell).pop(k, None)
        restore = {k: before_flags[k] for k in PRECISION_FLAGS if k in before_flags}
        if restore:
            original_add_flags(**restore)
        if before_type is None:
            from mindspore._c_expression import Cell_, MixedPrecisionType
            cell.mixed_precision_type = None
            Cell_.set_mixed_precision_type(cell, MixedPrecisionType.NOTSET)

    result._undo.append(undo)


_LITERAL_CAST = re.compile(r"\bcast\s*\([^()]*?(float16|bfloat16)\s*\)", re.IGNORECASE)


def _warn_literal_casts(cell, where, result: PatchResult) -> None:
    """`ops.cast(x, mstype.float16)` with a literal dtype cannot be redirected at run time: say so."""
    try:
        source = inspect.getsource(type(cell).construct)
    except (OSError, TypeError):
        return
    for match in _LITERAL_CAST.finditer(source):
        result.warnings.append(f"{where}: construct casts to a literal {match.group(1)} "
                               f"({match.group(0).strip()}); the runtime patch cannot change it: "
                               f"use the source patch (msoverflow patch --how source)")


def _apply_op(network, target: Target, island, narrow, result: PatchResult) -> None:
    """Wrap every primitive attribute of type `target.op` (in the named Cell when one is given)."""
    _, OpIsland = _island_classes()
    owners = find_cells(network, Target(cell=target.cell)) if target.cell else list(_walk(network))
    found = False
    for path, cell, _, _ in owners:
        if type(cell).__name__ == "OpIsland" and _is_island(cell):
            continue      # its `prim` is the primitive already wrapped
        cell = _inner(cell)
        # primitives live in __dict__, an OpIsland that replaced one in _cells
        for name, value in list(vars(cell).items()) + list(cell._cells.items()):
            if _is_island(value) and getattr(value, "prim", None) is not None and value.prim.name == target.op:
                found = True
                result.cells.append(f"{path}.{name}" if path else name)
                result.changes.append(Change("note", f"{path}.{name}", "already an island"))
                continue
            if type(value).__module__.startswith("mindspore") and getattr(value, "name", None) == target.op \
                    and name in getattr(cell, "_primitives", {}):
                found = True
                where = f"{path}.{name}" if path else name
                wrapper = OpIsland(value, island, narrow)
                _swap_primitive(cell, name, value, wrapper)
                result._undo.append(functools.partial(_unswap_primitive, cell, name, wrapper, value))
                result.cells.append(where)
                result.changes.append(Change("op-wrap", where, f"{target.op} primitive",
                                             f"OpIsland({target.op}) in {_dtype_name(island)}"))
    if not found:
        assert target.op is not None    # scope "op": neither cell nor cell_type, so the target names an op
        raise TargetNotFound(f"{target.describe()}: no Cell of {type(network).__name__} holds a {target.op} "
                             f"primitive as an attribute (functional calls like ops.{target.op.lower()}(x) cannot "
                             f"be wrapped at run time; patch the owning Cell with --cell)")
    result.warnings.append(f"only {target.op} is widened: its inputs and gradient still cross fp16 at the island's "
                           f"edge; if verify still sees the overflow, widen to the owning Cell")


def _swap_primitive(cell, name, prim, wrapper) -> None:
    cell._primitives.pop(name, None)
    object.__delattr__(cell, name)
    setattr(cell, name, wrapper)


def _unswap_primitive(cell, name, wrapper, prim) -> None:
    cell._cells.pop(name, None)
    vars(cell).pop(name, None)
    setattr(cell, name, prim)


def _convert_mirrors(network, result: PatchResult, retyped) -> None:
    """Optimizer states cloned from a retyped Parameter (moments.X, accum.X, ...) must follow its dtype."""
    if not retyped:
        return
    ms, nn, ops, mstype = _ms()
    params = {p.name: p for p in network.get_parameters(expand=True)}
    for p in retyped:
        for name, other in params.items():
            if other is p or not name.endswith("." + p.name):
                continue
            if tuple(other.shape) == tuple(p.shape) and other.dtype != p.dtype and other.dtype in (
                    mstype.float16, mstype.bfloat16, mstype.float32):
                _retype_parameter(other, p.dtype, name, result, kind="optimizer-state")
