"""Source form of the zero-signal guard (see msoverflow/guard.py): for an `invalid` origin at a masked mean.

In the file holding the culprit line:
  - the division on that line divides by max(count, 1): `a / count` -> `a / mindspore.ops.maximum(count, 1)`
    (also `ops.div(a, count)`, `RealDiv()(a, count)`, `self.div(a, count)`): an empty mask now gives 0, not NaN;
  - every `TrainOneStepCell(...)` built in that file is wrapped by `_msoverflow_guard(..., count_input=N)`, a
    helper written into the file: it builds msoverflow's in-graph guarded step (the optimizer update is skipped,
    the same way on every rank, when the global token count is 0) and, when msoverflow is not installed, says
    so once and returns the step unguarded, so the script keeps running.
The helper and any import go above their first use. The source is read and parsed through the same safe-I/O
contract as the source patch (regular file, bounded size, nesting measured, forked probe parse).
Each changed line carries a comment saying why; a marker makes it idempotent. Nothing is written here.
"""
from __future__ import annotations

import re
from typing import List

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ..errors import UserError
from ..rules.knowledge import knowledge
from .source_patch import (
    SourcePatch,
    _code,
    _dotted,
    _insert_module_parts,
    _relocate,
    _with_comment,
    parse_source,
    read_source,
)

MARKER = "# msoverflow: zero-token guard"
HELPER = "_msoverflow_guard"
_HELPER_SOURCE = f'''def {HELPER}(train_step, **options):
    """msoverflow zero-token guard: skip the optimizer update when the global token count is 0 (decided in the
    compiled step). Without msoverflow installed the step runs unguarded, and this says so once."""
    try:
        from msoverflow.guard import guard
    except ImportError:
        import sys
        print("msoverflow is not installed: the zero-token guard is off (pip install msoverflow)", file=sys.stderr)
        return train_step
    return guard(train_step, **options)
'''
_IMPORTS_MINDSPORE = re.compile(r"^import mindspore\s*(#.*)?$", re.MULTILINE)


class _Guard(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, line: int, count_input: int, changes: List[str], division_attrs=frozenset()):
        self.line = line
        self.division_attrs = division_attrs      # `self.divide1 = P.RealDiv()` -> "divide1"
        self.count_input = count_input
        self.changes = changes
        self.in_culprit = False
        self.divided = False
        self.statement_line = 0

    def visit_SimpleStatementLine(self, node):
        pos = self.get_metadata(PositionProvider, node)
        self.in_culprit = pos.start.line <= self.line <= pos.end.line
        self.statement_line = pos.start.line

    def leave_BinaryOperation(self, original, updated):
        if self.in_culprit and not self.divided and isinstance(original.operator, cst.Divide):
            self.divided = True
            self.changes.append(f"line {self.statement_line}: divides by max({_code(original.right)}, 1)")
            return updated.with_changes(right=cst.parse_expression(
                f"mindspore.ops.maximum({_code(updated.right)}, 1)"))
        return updated

    def leave_Call(self, original, updated):
        dotted = _dotted(original.func)
        callee = dotted.split(".")[-1].rstrip("()")
        is_division = callee in knowledge().division_calls or (
            dotted.startswith("self.") and callee in self.division_attrs)
        if self.in_culprit and not self.divided and is_division and len(updated.args) >= 2:
            self.divided = True
            args = list(updated.args)
            self.changes.append(f"line {self.statement_line}: divides by max({_code(args[1].value)}, 1)")
            args[1] = args[1].with_changes(value=cst.parse_expression(
                f"mindspore.ops.maximum({_code(args[1].value)}, 1)"))
            return updated.with_changes(args=args)
        if callee == "TrainOneStepCell":
            self.changes.append(f"line {self.statement_line}: {_code(original.func)}(...) skips the optimizer "
                                f"update when the global token count is 0 (input {self.count_input} is the mask)")
            return cst.parse_expression(f"{HELPER}({_code(updated)}, count_input={self.count_input})")
        return updated

    def leave_SimpleStatementLine(self, original, updated):
        if updated is original or updated.deep_equals(original):
            return updated
        why = ("an empty loss mask gives 0, not 0/0" if self.in_culprit else
               "no optimizer update on a step without loss tokens, decided alike on every rank")
        return _with_comment(updated, f"{MARKER}: {why}")


def plan(path: str, line: int, code: str = "", count_input: int = -1) -> SourcePatch:
    original = read_source(path)
    result = SourcePatch(path=path, line=line, dtype="guard", original=original, patched=original,
                         function="zero-token guard")
    if MARKER in original:
        result.already = True
        return result
    module = parse_source(original, path)
    line = _relocate(original, line, code, path)
    result.line = line
    changes: List[str] = []
    primitives = "|".join(sorted(c for c in knowledge().division_calls if c[:1].isupper()))
    division_attrs = frozenset(re.findall(rf"self\.(\w+)\s*=\s*(?:[\w.]+\.)?(?:{primitives})\(", original))
    transformer = _Guard(line, count_input, changes, division_attrs)
    patched = MetadataWrapper(module).visit(transformer)
    if not transformer.divided:
        raise UserError(f"{path}:{line} holds no division to guard (`{code.strip() or 'this line'}`); the zero-token "
                        f"guard fixes a masked mean, x / count")
    need_import = not _IMPORTS_MINDSPORE.search(original)
    helpers = [_HELPER_SOURCE] if any("TrainOneStepCell" in c for c in changes) and \
        f"def {HELPER}(" not in original else []
    patched = _insert_module_parts(patched, need_import, helpers,
                                   uses=(["mindspore"] if need_import else []) + [HELPER])
    changes += ["import mindspore added"] * need_import
    changes += [f"helper {HELPER}() added above its first use (msoverflow optional)"] * bool(helpers)
    result.patched = patched.code
    result.changes = changes
    cst.parse_module(result.patched)
    return result


def describe(patch: SourcePatch) -> str:
    if patch.already:
        return f"{patch.path}: the zero-token guard is already in place (marker '{MARKER}'); nothing to change"
    lines = [f"zero-token guard for {patch.path} (culprit line {patch.line}): divide by max(count, 1) and skip "
             f"the optimizer when the global token count is 0"]
    return "\n".join(lines + [f"  {c}" for c in patch.changes])


