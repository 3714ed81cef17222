"""Source patch: rewrite the function that holds the culprit line (usually a Cell's `construct`) so its whole
region computes in float32 (or bfloat16). libcst keeps every other byte of the file as it was.

Inside that function:
  - reads of the Cell's Parameters and Tensor constants (`self.weight`, `self.eps`, found in `__init__`) are
    cast to the island dtype where they are used; the stored Parameter keeps its dtype, so checkpoints still load;
  - explicit casts to a low-precision dtype (`self.cast(x, self.compute_dtype)`, `ops.cast(x, mstype.float16)`,
    `.astype(mstype.float16)`) cast to the island dtype instead;
  - float16/bfloat16 arguments are widened on entry by a small helper added to the module.
A marker comment makes the patch idempotent: a second run reports "already patched" and changes nothing.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Optional, Set

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider, ParentNodeProvider

from ..errors import UserError
from .targets import NARROWER, check_dtype
from .textfile import unified_diff, write_atomic

MARKER = "# msoverflow: precision island"
_LOW_DTYPE_TEXT = re.compile(r"float16|bfloat16|\bfp16\b|\bbf16\b|\bhalf\b")
_DTYPE_ATTR = re.compile(r"(^|_)(dtype|compute_type|compute_dtype|param_init_type|type)$")
_CAST_NAMES = {"cast", "Cast"}


@dataclass
class SourcePatch:
    path: str
    line: int
    dtype: str
    function: str = ""
    original: str = ""
    patched: str = ""
    already: bool = False
    changes: List[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return not self.already and self.patched != self.original

    def diff(self) -> str:
        return unified_diff(self.path, self.original, self.patched) if self.changed else ""

    def describe(self) -> str:
        if self.already:
            return f"{self.path}: {self.function} is already patched (marker '{MARKER}'); nothing to change"
        lines = [f"source patch: {self.function} in {self.path} (culprit line {self.line}) computed in {self.dtype}"]
        lines += [f"  {c}" for c in self.changes]
        return "\n".join(lines)


def _dotted(node) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr.value}" if base else ""
    if isinstance(node, cst.Call):
        inner = _dotted(node.func)
        return f"{inner}()" if inner else ""
    return ""


def _code(node) -> str:
    return cst.Module(body=[]).code_for_node(node)


class _Locate(cst.CSTVisitor):
    """The innermost function around `line`, its class, and the mindspore import alias."""
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, line: int):
        self.line = line
        self.function: Optional[cst.FunctionDef] = None
        self.klass: Optional[cst.ClassDef] = None
        self._classes: List[cst.ClassDef] = []
        self.ms_alias: Optional[str] = None

    def visit_ClassDef(self, node):
        self._classes.append(node)

    def leave_ClassDef(self, node):
        self._classes.pop()

    def visit_FunctionDef(self, node):
        pos = self.get_metadata(PositionProvider, node)
        if pos.start.line <= self.line <= pos.end.line:
            self.function = node
            self.klass = self._classes[-1] if self._classes else None

    def visit_Import(self, node):
        for alias in node.names:
            if _dotted(alias.name) == "mindspore":
                self.ms_alias = alias.asname.name.value if alias.asname else "mindspore"


def _self_attrs_assigned(klass: Optional[cst.ClassDef]):
    """Names of `self.X = Parameter(...)` and `self.X = Tensor(..., dtype)` in the class's methods."""
    params, constants = set(), set()
    if klass is None:
        return params, constants

    class Collect(cst.CSTVisitor):
        def visit_Assign(self, node):
            if not isinstance(node.value, cst.Call):
                return
            callee = _dotted(node.value.func).split(".")[-1]
            for target in node.targets:
                t = target.target
                if isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self":
                    if callee == "Parameter":
                        params.add(t.attr.value)
                    elif callee == "Tensor" and (len(node.value.args) >= 2 or any(
                            a.keyword and a.keyword.value == "dtype" for a in node.value.args)):
                        constants.add(t.attr.value)

    klass.visit(Collect())
    return params, constants


class _Island(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (ParentNodeProvider,)

    def __init__(self, function: cst.FunctionDef, reads: Set[str], ms: str, dtype: str, helper: str,
                 changes: List[str], line: int):
        self.function = function
        self.reads = reads
        self.ms = ms
        self.dtype = dtype
        self.helper = helper
        self.changes = changes
        self.line = line
        self.inside = 0

    def _island_dtype(self) -> cst.BaseExpression:
        return cst.parse_expression(f"{self.ms}.{self.dtype}")

    def visit_FunctionDef(self, node):
        if node is self.function:
            self.inside += 1

    def leave_Attribute(self, original, updated):
        if not self.inside:
            return updated
        if isinstance(original.value, cst.Name) and original.value.value == "self" \
                and original.attr.value in self.reads and not self._is_store(original):
            self.changes.append(f"self.{original.attr.value} read as {self.dtype}")
            return cst.parse_expression(f"{self.ms}.ops.cast(self.{original.attr.value}, {self.ms}.{self.dtype})")
        return updated

    def _is_store(self, node) -> bool:
        parent = self.get_metadata(ParentNodeProvider, node, None)
        if isinstance(parent, cst.AssignTarget) or (isinstance(parent, (cst.AugAssign, cst.AnnAssign))
                                                    and parent.target is node):
            return True
        # the callee of self.weight(...) or the object of self.weight.x is not a tensor read
        if isinstance(parent, cst.Call) and parent.func is node:
            return True
        if isinstance(parent, cst.Attribute) and parent.value is node:
            return True
        return False

    def leave_Call(self, original, updated):
        if not self.inside:
            return updated
        callee = _dotted(original.func)
        last = callee.split(".")[-1].rstrip("()") if callee else ""
        args = list(updated.args)
        index = None
        if last in _CAST_NAMES and len(args) >= 2:
            index = 1
        elif last == "astype" and len(args) >= 1:
            index = 0
        if index is None or args[index].keyword is not None and args[index].keyword.value not in ("dtype",):
            return updated
        dtype_code = _code(original.args[index].value)
        if not (_LOW_DTYPE_TEXT.search(dtype_code) or _DTYPE_ATTR.search(dtype_code.split(".")[-1])):
            return updated   # casts to int/bool/float32 are not part of the overflow
        if dtype_code == f"{self.ms}.{self.dtype}":
            return updated
        args[index] = args[index].with_changes(value=self._island_dtype())
        self.changes.append(f"{_code(original)} -> casts to {self.dtype}")
        return updated.with_changes(args=args)

    def leave_FunctionDef(self, original, updated):
        if original is not self.function:
            return updated
        self.inside -= 1
        names = [p.name.value for p in list(original.params.posonly_params) + list(original.params.params)
                 + list(original.params.kwonly_params) if p.name.value not in ("self", "cls")]
        widen = [cst.parse_statement(f"{n} = {self.helper}({n})") for n in names]
        if names:
            self.changes.append(f"arguments {', '.join(names)} widened to {self.dtype} on entry")
        body = list(updated.body.body)
        # Keep a docstring first.
        start = 1 if body and _is_docstring(body[0]) else 0
        marker = cst.EmptyLine(comment=cst.Comment(
            f"{MARKER}: computed in {self.dtype} (overflow at line {self.line}; see msoverflow patch)"))
        if widen:
            widen[0] = widen[0].with_changes(leading_lines=[marker])
        else:
            first = body[start]
            body[start] = first.with_changes(leading_lines=[marker] + list(first.leading_lines))
        new_stmts = widen
        body[start:start] = new_stmts
        return updated.with_changes(body=updated.body.with_changes(body=body))


def _is_docstring(stmt) -> bool:
    return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)
            and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))


def _helper_source(ms: str, dtype: str, name: str) -> str:
    narrow = ", ".join(f"{ms}.{d}" for d in NARROWER[dtype])
    return (f"def {name}(x):\n"
            f"    \"\"\"msoverflow precision patch: widen narrower float tensors to {dtype}, leave other values alone.\"\"\"\n"
            f"    if isinstance(x, {ms}.Tensor) and x.dtype in ({narrow},):\n"
            f"        return {ms}.ops.cast(x, {ms}.{dtype})\n"
            f"    return x\n")


def _insert_module_parts(module: cst.Module, need_import: bool, helper_code: Optional[str]) -> cst.Module:
    body = list(module.body)
    last_import = -1
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.SimpleStatementLine) and any(isinstance(s, (cst.Import, cst.ImportFrom))
                                                             for s in stmt.body):
            last_import = i
        elif i > 0 and not _is_docstring(stmt) and last_import >= 0:
            break
    insert_at = last_import + 1 if last_import >= 0 else (1 if body and _is_docstring(body[0]) else 0)
    new = []
    if need_import:
        new.append(cst.parse_statement("import mindspore"))
    if helper_code:
        helper = cst.parse_statement(helper_code)
        helper = helper.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
        new.append(helper)
    body[insert_at:insert_at] = new
    return module.with_changes(body=body)


MAX_SOURCE_BYTES = 4 << 20
PARSE_TIMEOUT = 60.0     # seconds for the probe parse in a child process


def read_source(path: str) -> str:
    """A model source file: regular (never a FIFO or /dev/zero), bounded, UTF-8, newlines kept."""
    from ..safeio import read_bytes
    try:
        data = read_bytes(path, MAX_SOURCE_BYTES)
    except OSError as exc:
        raise UserError(f"{path}: cannot read the model source ({exc.strerror})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a UTF-8 Python source file")


MAX_SYNTAX_DEPTH = 100   # syntax-tree depth libcst is trusted with (real model code stays under 40)


def syntax_depth(tree) -> int:
    """The depth of a Python syntax tree, walked without recursion."""
    import ast
    deepest = 0
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def parse_source(text: str, path: str) -> cst.Module:
    """libcst's native parser recurses on nesting: deep enough source crashes the process (SIGSEGV: 20000 unary
    minus signs) or takes minutes and gigabytes (4000). CPython's own parser, which has stack guards, measures
    the nesting first; then a forked child parses once, so any crash left becomes a clear error."""
    import ast
    try:
        depth = syntax_depth(ast.parse(text))
    except SyntaxError as exc:
        raise UserError(f"{path}: cannot parse it as Python (line {exc.lineno}: {exc.msg}); refusing to patch")
    except (RecursionError, MemoryError):
        raise UserError(f"{path}: nested too deeply for a Python parser; refusing to patch")
    except ValueError as exc:   # null bytes
        raise UserError(f"{path}: not Python source ({exc}); refusing to patch")
    if depth > MAX_SYNTAX_DEPTH:
        raise UserError(f"{path}: its syntax nests {depth} levels deep (at most {MAX_SYNTAX_DEPTH} are parsed "
                        f"safely); refusing to patch")
    _probe_parse(text, path)
    try:
        return cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        raise UserError(f"{path}: cannot parse it as Python (line {exc.raw_line}: {exc.message}); refusing to patch")
    except (RecursionError, MemoryError, ValueError) as exc:
        raise UserError(f"{path}: cannot parse it as Python ({type(exc).__name__}); refusing to patch")


def _probe_parse(text: str, path: str) -> None:
    """Parse once in a forked child: a native crash (libcst segfaults on e.g. 20000 unary minus signs, which
    no bracket count sees) or a parse that never ends becomes a UserError instead of killing msoverflow."""
    import os
    import signal
    import time
    if not hasattr(os, "fork"):
        return
    pid = os.fork()
    if pid == 0:   # child: parse, report by exit status only, never run the parent's cleanup
        code = 0
        try:
            import faulthandler
            import resource
            faulthandler.disable()                              # the parent reports the crash, in one line
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))   # a crash writes no core file (slow, litter)
        except (ImportError, ValueError, OSError):
            pass
        try:
            cst.parse_module(text)
        except BaseException:   # noqa: BLE001 - any Python-level error is reported by the parent's own parse
            code = 0
        os._exit(code)
    deadline = time.monotonic() + PARSE_TIMEOUT
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise UserError(f"{path}: the Python parser did not finish in {PARSE_TIMEOUT:.0f} s; refusing to patch")
        time.sleep(0.01)
    if os.WIFSIGNALED(status):
        raise UserError(f"{path}: the Python parser crashed on this file (signal {os.WTERMSIG(status)}: nesting too "
                        "deep for it); refusing to patch")


def _relocate(text: str, line: int, code: str, path: str) -> int:
    """The report's line may be stale (the file was edited): find the line holding `code` if it moved."""
    lines = text.splitlines()
    wanted = " ".join(code.split())
    if not wanted or (0 < line <= len(lines) and " ".join(lines[line - 1].split()) == wanted):
        return line
    hits = [i + 1 for i, l in enumerate(lines) if " ".join(l.split()) == wanted]
    if not hits:
        raise UserError(f"{path}:{line} does not hold `{code.strip()}`, nor does any other line: not the file the "
                        f"analysis saw, or it changed since (re-run msoverflow analyze, or give --line)")
    return min(hits, key=lambda h: abs(h - line))


def plan(path: str, line: int, dtype: str = "float32", code: str = "") -> SourcePatch:
    """Work out the patch for the function around `path:line` (`code`: the line's text from the report, used
    to find the line again if the file moved); nothing is written."""
    check_dtype(dtype)
    original = read_source(path)
    module = parse_source(original, path)
    if f"{MARKER}: computed in {dtype} (overflow at line {line};" in original:
        return SourcePatch(path=path, line=line, dtype=dtype, original=original, patched=original, already=True,
                           function=f"the function around the original line {line}")
    line = _relocate(original, line, code, path)
    wrapper = MetadataWrapper(module)
    locate = _Locate(line)
    wrapper.visit(locate)
    if locate.function is None:
        raise UserError(f"{path}:{line} is not inside a function; nothing to patch there")
    if locate.function.name.value == "__init__":
        raise UserError(f"{path}:{line} is in __init__, which builds the Cell rather than computes it; "
                        f"point at a line of construct (or the function that computes)")
    result = SourcePatch(path=path, line=line, dtype=dtype, original=original,
                         function=(f"{locate.klass.name.value}." if locate.klass else "") + locate.function.name.value)
    if MARKER in _code(locate.function):
        result.already = True
        result.patched = original
        return result
    params, constants = _self_attrs_assigned(locate.klass)
    ms = locate.ms_alias or "mindspore"
    helper = f"_msoverflow_widen_{dtype}"
    changes: List[str] = []
    patched_module = wrapper.visit(_Island(locate.function, params | constants, ms, dtype, helper, changes, line))
    helper_code = None if f"def {helper}(" in original else _helper_source(ms, dtype, helper)
    patched_module = _insert_module_parts(patched_module, locate.ms_alias is None, helper_code)
    if locate.ms_alias is None:
        changes.append("import mindspore added")
    if helper_code:
        changes.append(f"helper {helper}() added after the imports")
    result.patched = patched_module.code
    result.changes = changes
    cst.parse_module(result.patched)   # the patch itself must be valid Python
    return result


def write(patch: SourcePatch) -> Optional[str]:
    """Write the patched file (atomic, with a `.orig` backup); returns the backup's path, None if unchanged."""
    if not patch.changed:
        return None
    return write_atomic(patch.path, patch.patched)
