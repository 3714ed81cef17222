"""What a recompute may run, and how much it may compute, decided before anything runs.

Analyzing a dump never runs code the dump (or the working directory) chooses: an op that takes code (Custom,
PyFunc, any op with a func/file attribute) is never recomputed. A recompute holds its inputs and, per precision,
the results it will compute: their size follows from the inputs' shapes and the op's arguments (a MatMul of
12000x16 by 16x12000 makes 12000x12000 whatever the dumped output says), and is counted before it runs.
"""
from __future__ import annotations

import re
from typing import Dict, Iterable, Optional, Sequence, Tuple

import numpy as np

# Inputs plus results of one recompute, in elements: beyond this the op is not recomputed (memory stays bounded).
MAX_ELEMENTS = 1 << 24

# Op types whose kernel is code the user (or the dump) supplies.
CODE_OPS = ("Custom", "PyFunc", "PyExecute", "PyInterpret", "ScriptOp")
# Attributes that name code or a file to load: func (Custom's function or `file.cc:Fn`), func_source_str, file...
_CODE_ATTRIBUTE = re.compile(r"^(func\w*|(\w+_)?file(_?path|_?name)?|script|source_code|so_path|lib_path|"
                             r"reg_info|(\w+_)?path)$", re.IGNORECASE)
_ATTRIBUTE_KEY = re.compile(r"(?:^|[{,]\s*)([A-Za-z_]\w*)\s*:")


def takes_code(op_type: str, attrs_text: str = "", attrs: Optional[Dict[str, object]] = None) -> Optional[str]:
    """Why the op's computation is code that a recompute would have to run ('' or None: it is not)."""
    base = op_type.split(".")[0]
    for name in CODE_OPS:
        if base == name or base.startswith(name + "_"):          # a dump names a Custom op `Custom_<func>_<hash>`
            return f"{base} runs code of its own (its function comes with the program or the dump)"
    keys = set(attrs or {}) | set(_ATTRIBUTE_KEY.findall(attrs_text or ""))
    named = sorted(k for k in keys if _CODE_ATTRIBUTE.match(k))
    if named:
        return f"{op_type} has the attribute{'s' if len(named) > 1 else ''} {', '.join(named)}, which names code"
    return None


def refusal(why: str) -> str:
    """The reason an op that takes code is not recomputed (Cause.reason adds 'not recomputed: ')."""
    return f"{why}; recomputing it would run that code"


# ---- the shapes a recompute produces ------------------------------------------------------------------------

def _size(shape: Iterable[int]) -> int:
    return int(np.prod(tuple(int(d) for d in shape), dtype=np.int64)) if shape is not None else 0


def _broadcast(shapes: Sequence[Tuple[int, ...]]) -> Optional[Tuple[int, ...]]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


def _ints(value) -> Optional[Tuple[int, ...]]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value),)
    if isinstance(value, (tuple, list)) and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                                for v in value):
        return tuple(int(v) for v in value)
    if isinstance(value, np.ndarray) and value.dtype.kind in "iu" and value.ndim <= 1:
        return tuple(int(v) for v in value.reshape(-1))
    return None


def produced_elements(op_type: str, shapes: Sequence[Optional[Tuple[int, ...]]], args: Dict[str, object],
                      pointwise: bool = False) -> Optional[int]:
    """Elements of the largest result the op computes from inputs of these shapes with these arguments (None:
    not known from them; the caller then counts what the dump and the saved graph claim, and the subprocess's
    memory limit bounds the rest). pointwise: the op's arithmetic broadcasts its tensors against each other (every
    numpy kernel but the matrix products does: a norm's gamma, a gradient's y and dy), so a result holds at least
    their broadcast shape."""
    known = [tuple(s) for s in shapes if s is not None]
    if op_type in ("MatMul", "BatchMatMul") and len(known) >= 2 and min(len(s) for s in known[:2]) >= 2:
        a, b = known[0], known[1]
        rows = a[-1] if args.get("transpose_a") else a[-2]
        cols = b[-2] if args.get("transpose_b") else b[-1]
        batch = _broadcast([a[:-2], b[:-2]]) or max(a[:-2], b[:-2], key=_size)
        # the product and the wide copies of both operands
        return _size(batch) * int(rows) * int(cols) + _size(a) + _size(b)
    if op_type == "Tile" and known:
        multiples = _ints(args.get("multiples", args.get("dims")))
        if multiples is not None:
            shape = (1,) * max(0, len(multiples) - len(known[0])) + known[0]
            factor = (1,) * max(0, len(shape) - len(multiples)) + multiples
            return _size(shape) * _size(factor)
    if op_type in ("BroadcastTo", "Fill", "Fills", "Zeros", "Ones", "StandardNormal", "UniformReal", "Empty"):
        given = _ints(args.get("shape", args.get("size")))
        if given is not None:
            return _size(given)
    if op_type == "BiasAdd" and len(known) >= 2 and known[0]:
        # the bias laid along the channel axis, then added: a (3000, 1) x and a (3000, 16) bias make 3000 x 48000
        x = known[0]
        axis = len(x) - 1 if args.get("data_format") in (1, "NHWC") else min(1, len(x) - 1)
        laid = tuple(_size(known[1]) if i == axis else 1 for i in range(len(x)))
        common = _broadcast([x, laid])
        return _size(common) if common is not None else _size(x)
    if pointwise and known:
        common = _broadcast(known)
        return _size(common) if common is not None else max(_size(s) for s in known)
    return None


def over_budget(what: str, inputs: int, results: int, copies: int, limit: int = MAX_ELEMENTS) -> Optional[str]:
    """The reason a recompute is too large (None: it fits): inputs plus `copies` results (one per precision)."""
    total = int(inputs) + int(results) * max(1, int(copies))
    if total > limit:
        return (f"{what} would compute {total:,} elements (inputs {int(inputs):,}, results {int(results):,} x "
                f"{max(1, int(copies))} precisions), more than the {limit:,} recomputed in memory")
    return None
