"""Cell paths from MindSpore scope names.

Full name : Gradients/Default/network-CausalLMLoss/_backbone-TinyBaichuan/lm_head-NormHead/Grad_Sqrt/SqrtGrad-op0
File name : the same with '/', '\\', '.', ' ' turned into '_' (ambiguous: attribute names hold '_' too).
Each `attr-Class` segment is one Cell; the path is the attributes from the graph's root Cell down.
"""
from __future__ import annotations

import re
from typing import List, Optional, Tuple

MAX_SOURCE_BYTES = 16 << 20
_ROOTS = ("Gradients", "Default", "recompute_Default", "Expand")
_CLASS_THEN_ATTR = re.compile(r"^(_?[A-Za-z0-9]+)_(.+)$")


def is_backward(name: Optional[str]) -> bool:
    """An op of the backward pass: its scope (full or file-name form) starts with `Gradients`."""
    return name is not None and name.startswith("Gradients")


def forward_in_scope(full_name: Optional[str]) -> Optional[str]:
    """The forward op a backward op's full name says it differentiates: `.../Grad_Div/Div-op0` -> `Div`."""
    if full_name is None or not is_backward(full_name) or "/" not in full_name:
        return None
    for segment in reversed(full_name.split("/")[:-1]):
        if segment.startswith("Grad_") and "-" not in segment:
            return segment[len("Grad_"):] or None
    return None


def cells_in_scope(full_name: str) -> List[Tuple[str, str]]:
    """[(attribute, class)] for each Cell segment of a full scoped name."""
    cells = []
    for segment in full_name.split("/")[:-1]:
        if "-" in segment and not segment.startswith(("Grad_", "grad")):
            attr, cls = segment.split("-", 1)
            cells.append((attr, cls))
    return cells


def cells_in_file_name(op_name: str) -> List[Tuple[str, str]]:
    """Best effort on a file-name op name, assuming Cell class names hold no '_' (true of nearly all)."""
    pieces = op_name.split("-")
    if len(pieces) < 3:
        return []
    attr = pieces[0]
    for root in _ROOTS:
        attr = attr.replace(root + "_", "")
    cells = []
    for piece in pieces[1:-1]:
        m = _CLASS_THEN_ATTR.match(piece)
        if not m:
            break
        cells.append((attr, m.group(1)))
        attr = m.group(2)
    return cells


def cell_of(name: str, from_file_name: bool = False) -> Tuple[Optional[str], Optional[str]]:
    """('network._backbone.lm_head', 'NormHead') or (None, None) outside any Cell."""
    cells = cells_in_file_name(name) if from_file_name else cells_in_scope(name)
    if not cells:
        return None, None
    return ".".join(attr for attr, _ in cells), cells[-1][1]


def enclosing_class(path: str, line: int) -> Optional[str]:
    """The class whose body holds `line` of a Python source file (the Cell when the scope name lost it,
    as in @jit functions); None when the file is not here or not parseable."""
    import ast

    from . import safeio
    try:   # the path comes from the dump's graph: a regular file of bounded size and nesting only
        text = safeio.read_text(path, MAX_SOURCE_BYTES)
        if safeio.source_nesting(text) > safeio.MAX_SOURCE_NESTING:
            return None
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    best = None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if best is None or node.lineno > best.lineno:
                best = node
    return best.name if best else None
