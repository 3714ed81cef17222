"""Source form of the zero-signal guard (see msoverflow/guard.py): for an `invalid` origin at a masked mean.

In the file holding the culprit line:
  - the division on that line divides by max(count, 1): `a / count` -> `a / mindspore.ops.maximum(count, 1)`
    (also `ops.div(a, count)`, `RealDiv()(a, count)`, `self.div(a, count)`): an empty mask now gives 0, not NaN;
  - every `TrainOneStepCell(...)` built in that file is wrapped by `msoverflow.guard.guard(..., count_input=N)`,
    which skips the optimizer update, the same way on every rank, when the global token count is 0.
Each changed line carries a comment saying why; a marker makes it idempotent. Nothing is written here.
"""
from __future__ import annotations

import re
from typing import List

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ..errors import UserError
from ..rules.knowledge import knowledge
from .source_patch import SourcePatch, _code, _dotted, _relocate, _with_comment

MARKER = "# msoverflow: zero-token guard"


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
            return cst.parse_expression(f"msoverflow.guard.guard({_code(updated)}, count_input={self.count_input})")
        return updated

    def leave_SimpleStatementLine(self, original, updated):
        if updated is original or updated.deep_equals(original):
            return updated
        why = ("an empty loss mask gives 0, not 0/0" if self.in_culprit else
               "no optimizer update on a step without loss tokens, decided alike on every rank")
        return _with_comment(updated, f"{MARKER}: {why}")


def plan(path: str, line: int, code: str = "", count_input: int = -1) -> SourcePatch:
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            original = fh.read()
    except OSError as exc:
        raise UserError(f"{path}: cannot read the model source ({exc.strerror})")
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a UTF-8 Python source file")
    result = SourcePatch(path=path, line=line, dtype="guard", original=original, patched=original,
                         function="zero-token guard")
    if MARKER in original:
        result.already = True
        return result
    try:
        module = cst.parse_module(original)
    except cst.ParserSyntaxError as exc:
        raise UserError(f"{path}: cannot parse it as Python (line {exc.raw_line}: {exc.message}); refusing to patch")
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
    imports = []
    if "import mindspore\n" not in original:
        imports.append("import mindspore")
    if any("TrainOneStepCell" in c for c in changes) and "import msoverflow.guard" not in original:
        imports.append("import msoverflow.guard")
    if imports:
        patched = _insert_imports(patched, imports)
        changes += [f"{i} added" for i in imports]
    result.patched = patched.code
    result.changes = changes
    cst.parse_module(result.patched)
    return result


def _insert_imports(module: cst.Module, imports: List[str]) -> cst.Module:
    body = list(module.body)
    last = max((i for i, s in enumerate(body) if isinstance(s, cst.SimpleStatementLine)
                and any(isinstance(x, (cst.Import, cst.ImportFrom)) for x in s.body)), default=-1)
    body[last + 1:last + 1] = [cst.parse_statement(i) for i in imports]
    return module.with_changes(body=body)


def describe(patch: SourcePatch) -> str:
    if patch.already:
        return f"{patch.path}: the zero-token guard is already in place (marker '{MARKER}'); nothing to change"
    lines = [f"zero-token guard for {patch.path} (culprit line {patch.line}): divide by max(count, 1) and skip "
             f"the optimizer when the global token count is 0"]
    return "\n".join(lines + [f"  {c}" for c in patch.changes])


