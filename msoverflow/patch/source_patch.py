"""Source patch: compute the smallest region around the culprit line in float32 (or bfloat16), keeping the
program's semantics. libcst keeps every other byte of the file as it was.

The island, inside the function that holds the culprit line (usually a Cell's `construct`), is
  - the culprit statement,
  - the statements that compute its operands, back to the Cell's Parameters, Tensor constants and arguments,
  - the statements that directly consume its result (their gradient is the culprit's backward input).
In those statements only:
  - reads of Parameters, Tensor constants (found in `__init__`) and arguments are widened where they are used,
    by a helper that casts only narrower float dtypes; the stored Parameter keeps its dtype, so checkpoints load;
  - explicit casts to a low-precision dtype cast to the island dtype instead;
  - the target of a write (Assign/AssignAdd/AssignSub/Scatter* first argument, ops.assign, set_data,
    assign_value) is never cast: writing into a cast copy would silently never update the Parameter; the value
    written is cast to the target's dtype instead.
Values leaving the island are cast back to the dtype they had before, so boundary ops (e.g. the final MatMul and
the exit cast) keep their dtype. Every changed line carries a comment saying why. A marker comment makes the
patch idempotent: a second run reports "already patched" and changes nothing.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Set, Union

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

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


@dataclass
class MindSporeNames:
    """How a script spells MindSpore: the names its own top-level imports bind (None: not imported that way).
    Code the patches add uses these names, and `import mindspore` is added only when one is missing."""
    module: Optional[str] = None      # import mindspore [as ms]
    tensor: Optional[str] = None      # from mindspore import Tensor [as T]
    ops: Optional[str] = None         # from mindspore import ops; import mindspore.ops as ops
    dtype: Optional[str] = None       # import mindspore.common.dtype as mstype; from mindspore import dtype as ...

    def need_import(self, *, tensor: bool = False, ops: bool = False, dtype: bool = False) -> bool:
        """Whether code using these kinds of names needs `import mindspore` added (some are not imported)."""
        return self.module is None and ((tensor and not self.tensor) or (ops and not self.ops)
                                        or (dtype and not self.dtype))

    @property
    def root(self) -> str:
        return self.module or "mindspore"

    def tensor_class(self) -> str:
        return self.tensor or f"{self.root}.Tensor"

    def op(self, name: str) -> str:
        """`ops.cast`, `ms.ops.maximum`: an op of mindspore.ops in the script's spelling."""
        return f"{self.ops}.{name}" if self.ops else f"{self.root}.ops.{name}"

    def dtype_of(self, name: str) -> str:
        return f"{self.dtype}.{name}" if self.dtype else f"{self.root}.{name}"


_DTYPE_MODULES = {"mindspore.common.dtype", "mindspore.dtype"}


def mindspore_names(module: cst.Module) -> MindSporeNames:
    """The MindSpore names bound by the module's top-level import lines (imports inside functions or
    try/except blocks are not relied on)."""
    names = MindSporeNames()
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    dotted = _dotted(alias.name)
                    bound = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) \
                        else None
                    if dotted == "mindspore":
                        names.module = names.module or bound or "mindspore"
                    elif bound and dotted == "mindspore.ops":
                        names.ops = names.ops or bound
                    elif bound and dotted in _DTYPE_MODULES:
                        names.dtype = names.dtype or bound
            elif isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None \
                    and not isinstance(small.names, cst.ImportStar):
                source = _dotted(small.module)
                for alias in small.names:
                    imported = _dotted(alias.name)
                    bound = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) \
                        else imported
                    if source == "mindspore" and imported == "Tensor":
                        names.tensor = names.tensor or bound
                    elif source == "mindspore" and imported == "ops":
                        names.ops = names.ops or bound
                    elif (source, imported) in (("mindspore", "dtype"), ("mindspore.common", "dtype")):
                        names.dtype = names.dtype or bound
    return names


class _Locate(cst.CSTVisitor):
    """The innermost function around `line` and its class."""
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, line: int):
        self.line = line
        self.function: Optional[cst.FunctionDef] = None
        self.klass: Optional[cst.ClassDef] = None
        self._classes: List[cst.ClassDef] = []

    def visit_ClassDef(self, node):
        self._classes.append(node)

    def leave_ClassDef(self, node):
        self._classes.pop()

    def visit_FunctionDef(self, node):
        pos = self.get_metadata(PositionProvider, node)
        if pos.start.line <= self.line <= pos.end.line:
            self.function = node
            self.klass = self._classes[-1] if self._classes else None


def _self_attrs_assigned(klass: Optional[cst.ClassDef]):
    """Names of `self.X = Parameter(...)` and `self.X = Tensor(..., dtype)` in the class's methods."""
    params: Set[str] = set()
    constants: Set[str] = set()
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


# Ops that write into their first argument (a Parameter): that argument is never cast.
_WRITE_OPS = re.compile(r"^(Assign|AssignAdd|AssignSub|assign|assign_add|assign_sub|"
                        r"Scatter(?!Nd$)\w+|scatter_(?!nd$)\w+)$")
_WRITE_METHODS = {"set_data", "assign_value"}


def _primitives_in_init(klass: Optional[cst.ClassDef]) -> dict:
    """`self.assign = P.Assign()` -> {"assign": "Assign"}: which primitive each `self.X` op attribute holds."""
    found: dict = {}
    if klass is None:
        return found

    class Collect(cst.CSTVisitor):
        def visit_Assign(self, node):
            if isinstance(node.value, cst.Call):
                callee = _dotted(node.value.func).split(".")[-1].rstrip("()")
                for target in node.targets:
                    t = target.target
                    if isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value == "self":
                        found[t.attr.value] = callee

    klass.visit(Collect())
    return found


def _is_write_call(call: cst.Call, primitives: dict) -> bool:
    callee = _dotted(call.func)
    if not callee:
        return False
    last = callee.split(".")[-1].rstrip("()")
    if callee.startswith("self.") and callee.count(".") == 1:
        last = primitives.get(last, last)
    return bool(_WRITE_OPS.match(last))


class _Names(cst.CSTVisitor):
    """Local names an expression reads (not attribute names, keyword names or lambda parameters)."""

    def __init__(self):
        self.names: Set[str] = set()

    def visit_Attribute(self, node):
        node.value.visit(self)
        return False

    def visit_Arg(self, node):
        node.value.visit(self)
        return False

    def visit_Name(self, node):
        self.names.add(node.value)


def _reads(node) -> Set[str]:
    visitor = _Names()
    node.visit(visitor)
    return visitor.names


def _target_names(node) -> Set[str]:
    if isinstance(node, cst.Name):
        return {node.value}
    if isinstance(node, (cst.Tuple, cst.List)):
        return set().union(*[_target_names(e.value) for e in node.elements]) if node.elements else set()
    return set()


def _reads_writes(stmt: cst.SimpleStatementLine):
    reads, writes = set(), set()
    for small in stmt.body:
        if isinstance(small, cst.Assign):
            reads |= _reads(small.value)
            for target in small.targets:
                names = _target_names(target.target)
                writes |= names
                if not names:
                    reads |= _reads(target.target)
        elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
            if small.value is not None:
                reads |= _reads(small.value)
            names = _target_names(small.target)
            writes |= names
            if isinstance(small, cst.AugAssign):
                reads |= names
        else:
            reads |= _reads(small)
    return reads, writes


class _Statements(cst.CSTVisitor):
    """The simple statements of one function in source order (not those of nested functions or classes)."""
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, function: cst.FunctionDef):
        self.function = function
        self.found: List[cst.SimpleStatementLine] = []
        self.lines: List[int] = []
        self.end_lines: List[int] = []

        self.depth = 0

    def visit_FunctionDef(self, node):
        if node is self.function:
            self.depth += 1
            return True
        return self.depth == 0      # nested functions inside the target are not its statements

    def leave_FunctionDef(self, node):
        if node is self.function:
            self.depth -= 1

    def visit_ClassDef(self, node):
        return self.depth == 0

    def visit_Lambda(self, node):
        return False

    def visit_SimpleStatementLine(self, node):
        if not self.depth:
            return False
        pos = self.get_metadata(PositionProvider, node)
        self.found.append(node)
        self.lines.append(pos.start.line)
        self.end_lines.append(pos.end.line)
        return False


@dataclass
class _Region:
    """Which statements form the island, why each is in it, and which values leave it."""
    members: dict                     # statement -> reason
    exits: dict                       # statement -> [(name, reference expression code)]
    first: Optional[cst.SimpleStatementLine] = None
    returns: dict = field(default_factory=dict)    # island return statement -> reference expression code
    args: dict = field(default_factory=dict)       # island statement -> arguments not rebound before it


def _region(statements: List[cst.SimpleStatementLine], lines: List[int], culprit: int, args: List[str],
            reads_self: Set[str], line: int) -> _Region:
    flow = [_reads_writes(s) for s in statements]
    members = {culprit: f"culprit line {line}: computed in the island dtype"}
    # Backwards: the statements that compute the culprit's operands.
    work = [(culprit, name) for name in flow[culprit][0]]
    seen = set()
    while work:
        index, name = work.pop()
        if (index, name) in seen:
            continue
        seen.add((index, name))
        source = next((j for j in range(index - 1, -1, -1) if name in flow[j][1]), None)
        if source is None:
            continue
        if source not in members:
            members[source] = f"computes an operand of the culprit (line {line})"
        work += [(source, n) for n in flow[source][0]]
    # Forwards, one level: the culprit's direct consumers (their gradient is its backward input).
    produced = flow[culprit][1]
    for j in range(culprit + 1, len(statements)):
        if produced & flow[j][0] and j not in members:
            members[j] = f"consumes the culprit's result (line {line}); its gradient feeds the culprit's backward"
        produced = produced - flow[j][1]
        if not produced:
            break
    # Values leaving the island: read after it by statements outside it.
    exits: dict = {}
    last_writer = {}
    for index in sorted(members):
        for name in flow[index][1]:
            last_writer[name] = index
    for name, index in last_writer.items():
        if any(name in flow[j][0] for j in range(index + 1, len(statements)) if j not in members):
            ref = _reference(index, flow, members, statements, args, reads_self, set())
            if ref:
                exits.setdefault(index, []).append((name, ref))
    returns = {}
    for index in members:
        if any(isinstance(small, cst.Return) and small.value is not None for small in statements[index].body):
            ref = _reference(index, flow, members, statements, args, reads_self, set())
            if ref:
                returns[statements[index]] = ref
    bound = {statements[i]: {a for a in args if not any(a in flow[j][1] for j in range(i))} for i in members}
    ordered = {statements[i]: members[i] for i in sorted(members)}
    return _Region(members=ordered, exits={statements[i]: v for i, v in exits.items()},
                   first=statements[min(members)], returns=returns, args=bound)


def _reference(index, flow, members, statements, args, reads_self, visiting) -> Optional[str]:
    """An expression whose dtype is what the value made at `index` had before the patch: the first Parameter,
    constant or argument the statement (or the island statements feeding it) reads."""
    if index in visiting:
        return None
    visiting.add(index)
    stmt = statements[index]
    if _casts_to_a_fixed_dtype(stmt):
        return None     # an explicit cast to float32/int/... decides the value's dtype, with or without the island
    for attr in _self_reads_in_order(stmt):
        if attr in reads_self:
            return f"self.{attr}"
    reads = flow[index][0]
    for name in args:
        if name in reads and not any(name in flow[j][1] for j in range(index)):
            return name
    for name in sorted(reads):
        source = next((j for j in range(index - 1, -1, -1) if name in flow[j][1]), None)
        if source is not None and source in members:
            ref = _reference(source, flow, members, statements, args, reads_self, visiting)
            if ref:
                return ref
    return None


def _casts_to_a_fixed_dtype(node) -> bool:
    found = []

    class Visit(cst.CSTVisitor):
        def visit_Call(self, call):
            last = _dotted(call.func).split(".")[-1].rstrip("()")
            index = 1 if last in _CAST_NAMES else 0 if last == "astype" else None
            if index is not None and len(call.args) > index:
                text = _code(call.args[index].value)
                if not (_LOW_DTYPE_TEXT.search(text) or _DTYPE_ATTR.search(text.split(".")[-1])):
                    found.append(text)

    node.visit(Visit())
    return bool(found)


def _self_reads_in_order(node) -> List[str]:
    found = []

    class Visit(cst.CSTVisitor):
        def visit_Attribute(self, n):
            if isinstance(n.value, cst.Name) and n.value.value == "self":
                found.append(n.attr.value)

    node.visit(Visit())
    return found


class _Island(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (ParentNodeProvider, PositionProvider)

    def __init__(self, region: _Region, reads: Set[str], args: dict, primitives: dict, ms: MindSporeNames,
                 dtype: str, widen: str, like: str, changes: List[str], line: int):
        self.region = region
        self.reads = reads
        self.args = args
        self.primitives = primitives
        self.ms = ms
        self.dtype = dtype
        self.widen = widen
        self.like = like
        self.changes = changes
        self.line = line
        self.current: Optional[cst.SimpleStatementLine] = None
        self.notes: List[str] = []
        self.used_like = False
        self.used_dtype = False

    def _island_dtype(self) -> cst.BaseExpression:
        self.used_dtype = True
        return cst.parse_expression(self.ms.dtype_of(self.dtype))

    def visit_SimpleStatementLine(self, node):
        if node in self.region.members:
            self.current = node
            self.notes = []

    def _parent(self, node):
        return self.get_metadata(ParentNodeProvider, node, None)

    def _is_cast_operand(self, node) -> bool:
        """x in cast(x, dtype): the cast already says which dtype it wants (a low one is rewritten)."""
        arg = self._parent(node)
        if not isinstance(arg, cst.Arg) or arg.value is not node:
            return False
        call = self._parent(arg)
        if not isinstance(call, cst.Call) or not call.args or call.args[0] is not arg:
            return False
        return _dotted(call.func).split(".")[-1].rstrip("()") in _CAST_NAMES

    def _is_write_target(self, node) -> bool:
        arg = self._parent(node)
        if not isinstance(arg, cst.Arg) or arg.value is not node:
            return False
        call = self._parent(arg)
        return isinstance(call, cst.Call) and bool(call.args) and call.args[0] is arg and _is_write_call(
            call, self.primitives)

    def _is_store(self, node) -> bool:
        parent = self._parent(node)
        if isinstance(parent, cst.AssignTarget) or (isinstance(parent, (cst.AugAssign, cst.AnnAssign))
                                                    and parent.target is node):
            return True
        # the callee of self.weight(...) or the object of self.weight.set_data(...) is not a tensor read
        if isinstance(parent, cst.Call) and parent.func is node:
            return True
        # self.weight.set_data(...), self.weight.dtype, self.weight.astype(...): not a read to widen (set_data and
        # assign_value are writes; astype already says which dtype it wants)
        if isinstance(parent, cst.Attribute) and parent.value is node:
            return True
        return False

    def leave_Attribute(self, original, updated):
        if self.current is None:
            return updated
        if isinstance(original.value, cst.Name) and original.value.value == "self" \
                and original.attr.value in self.reads and not self._is_store(original) \
                and not self._is_cast_operand(original):
            if self._is_write_target(original):
                self.notes.append(f"self.{original.attr.value} is written here: left as it is")
                return updated
            self.notes.append(f"self.{original.attr.value} read in {self.dtype}")
            return cst.parse_expression(f"{self.widen}(self.{original.attr.value})")
        return updated

    def leave_Name(self, original, updated):
        if self.current is None or original.value not in self.args.get(self.current, ()):
            return updated
        parent = self._parent(original)
        load = (isinstance(parent, cst.Arg) and parent.value is original and parent.keyword is None) \
            or isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation)) \
            or (isinstance(parent, cst.Attribute) and parent.value is original)
        if not load or self._is_write_target(original) or self._is_cast_operand(original):
            return updated
        self.notes.append(f"argument {original.value} read in {self.dtype}")
        return cst.parse_expression(f"{self.widen}({original.value})")

    def leave_Call(self, original, updated):
        if self.current is None:
            return updated
        args = list(updated.args)
        write_method = isinstance(original.func, cst.Attribute) and original.func.attr.value in _WRITE_METHODS
        if (write_method and args) or (_is_write_call(original, self.primitives) and len(args) >= 2):
            if write_method:
                target, slot = _code(original.func.value), 0
            else:
                # Assign*(target, value); Scatter*(target, indices, updates): the value is the last positional
                target = _code(original.args[0].value)
                slot = max(i for i, a in enumerate(args) if a.keyword is None)
            value = args[slot]
            args[slot] = value.with_changes(value=cst.parse_expression(
                f"{self.like}({_code(value.value)}, {target})"))
            self.used_like = True
            self.notes.append(f"the value written into {target} is cast to {target}'s own dtype")
            return updated.with_changes(args=args)
        callee = _dotted(original.func)
        last = callee.split(".")[-1].rstrip("()") if callee else ""
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
        if dtype_code.rsplit(".", 1)[-1] == self.dtype:
            return updated     # already the island dtype, however the script spells it
        args[index] = args[index].with_changes(value=self._island_dtype())
        self.notes.append(f"cast to {dtype_code} -> {self.dtype}")
        return updated.with_changes(args=args)

    def leave_SimpleStatementLine(self, original, updated):
        if original is not self.current:
            return updated
        self.current = None
        reason = self.region.members[original]
        line = self.get_metadata(PositionProvider, original).start.line
        comment = f"# msoverflow: {reason}"
        if self.notes:
            self.changes.append(f"line {line}: {'; '.join(dict.fromkeys(self.notes))} ({reason})")
            updated = _with_comment(updated, comment)
        if original is self.region.first:
            marker = cst.EmptyLine(comment=cst.Comment(
                f"{MARKER}: computed in {self.dtype} (overflow at line {self.line}; see msoverflow patch)"))
            updated = updated.with_changes(leading_lines=list(updated.leading_lines) + [marker])
        returns = [small for small in updated.body if isinstance(small, cst.Return) and small.value is not None]
        ref = self.region.returns.get(original)
        if returns and ref:
            body = [small.with_changes(value=cst.parse_expression(f"{self.like}({_code(small.value)}, {ref})"))
                    if isinstance(small, cst.Return) and small.value is not None else small for small in updated.body]
            updated = updated.with_changes(body=body)
            self.used_like = True
            self.changes.append(f"line {line}: the value returned goes back to the dtype of {ref}, so the caller "
                                f"keeps its precision")
            if not self.notes:
                updated = _with_comment(updated, f"# msoverflow: {reason}")
        exits = self.region.exits.get(original, [])
        if not exits:
            return updated
        out = [updated]
        for name, ref in exits:
            self.used_like = True
            statement = cst.parse_statement(f"{name} = {self.like}({name}, {ref})")
            out.append(_with_comment(statement, f"# msoverflow: {name} leaves the island: back to {ref}'s dtype, "
                                                f"so the code after it keeps its precision"))
            self.changes.append(f"after line {line}: {name} cast back to the dtype of {ref} for the code after "
                                f"the island")
        return cst.FlattenSentinel(out)


def _with_comment(stmt: cst.SimpleStatementLine, comment: str) -> cst.SimpleStatementLine:
    trailing = stmt.trailing_whitespace
    if trailing.comment is not None:
        comment = f"{trailing.comment.value}  {comment}"
    return stmt.with_changes(trailing_whitespace=cst.TrailingWhitespace(
        whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment(comment), newline=trailing.newline))


def _is_docstring(stmt) -> bool:
    return (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)
            and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))


def _helper_source(ms: MindSporeNames, dtype: str, name: str) -> str:
    narrow = ", ".join(ms.dtype_of(d) for d in NARROWER[dtype])
    return (f"def {name}(x):\n"
            f"    \"\"\"msoverflow precision patch: widen narrower float tensors to {dtype}, leave other values alone.\"\"\"\n"
            f"    if isinstance(x, {ms.tensor_class()}) and x.dtype in ({narrow},):\n"
            f"        return {ms.op('cast')}(x, {ms.dtype_of(dtype)})\n"
            f"    return x\n")


def _like_source(ms: MindSporeNames, name: str) -> str:
    return (f"def {name}(x, ref):\n"
            f"    \"\"\"msoverflow precision patch: x in ref's dtype (the dtype it had before the island).\"\"\"\n"
            f"    if isinstance(x, {ms.tensor_class()}) and isinstance(ref, {ms.tensor_class()}):\n"
            f"        return {ms.op('cast')}(x, ref.dtype)\n"
            f"    return x\n")


def _is_future_import(stmt) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and any(
        isinstance(s, cst.ImportFrom) and isinstance(s.module, cst.Name) and s.module.value == "__future__"
        for s in stmt.body)


def _is_import_block(stmt) -> bool:
    """An import line, or a module-level try/if whose branches hold only imports (and pass), like MindFormers'
    `try: from mindspore._checkparam import Validator / except ImportError: import ... as Validator`."""
    if isinstance(stmt, cst.SimpleStatementLine):
        return any(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body) and all(
            isinstance(s, (cst.Import, cst.ImportFrom, cst.Pass)) for s in stmt.body)
    blocks = []
    if isinstance(stmt, cst.Try):
        blocks = [stmt.body] + [h.body for h in stmt.handlers] + [b.body for b in (stmt.orelse, stmt.finalbody) if b]
    elif isinstance(stmt, cst.If):
        branch: Union[cst.If, cst.Else, None] = stmt
        while isinstance(branch, cst.If):
            blocks.append(branch.body)
            branch = branch.orelse
        if branch is not None:
            blocks.append(branch.body)
    else:
        return False
    lines = [line for block in blocks for line in getattr(block, "body", ())]
    return bool(lines) and all(isinstance(line, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom, cst.Pass)) for s in line.body) for line in lines)


def insertion_point(module: cst.Module, names: Sequence[str]) -> int:
    """Where new imports and helpers go: after the script's own imports (the last import line, or import-only
    try/if block, before its first def or class), never above the docstring or a `from __future__` import,
    and never below the first top-level statement other than an import that uses one of `names` (a late
    import after `TrainOneStepCell(...)` must not push a helper below its first use)."""
    body = list(module.body)
    earliest = 1 if body and _is_docstring(body[0]) else 0
    while earliest < len(body) and _is_future_import(body[earliest]):
        earliest += 1
    insert_at = earliest
    for i, stmt in enumerate(body):
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            break
        if i >= earliest and _is_import_block(stmt):
            insert_at = i + 1
    if names:
        used = re.compile(r"\b(?:" + "|".join(re.escape(n) for n in names) + r")\b")
        for i in range(earliest, insert_at):
            if not _is_import_block(body[i]) and used.search(module.code_for_node(body[i])):
                return i
    return insert_at


def _insert_module_parts(module: cst.Module, need_import: bool, helpers: List[str],
                         uses: Sequence[str] = ()) -> cst.Module:
    """`import mindspore` (when needed) and helper definitions, placed before the first use of `uses`."""
    body = list(module.body)
    insert_at = insertion_point(module, uses)
    new = []
    if need_import:
        new.append(cst.parse_statement("import mindspore"))
    for helper_code in helpers:
        helper = cst.parse_statement(helper_code)
        helper = helper.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
        new.append(helper)
    if helpers and insert_at < len(body):      # two blank lines after a definition, as around any other
        after = body[insert_at]
        blank = next((i for i, line in enumerate(after.leading_lines) if line.comment is not None),
                     len(after.leading_lines))
        if blank < 2:
            body[insert_at] = after.with_changes(leading_lines=[cst.EmptyLine()] * (2 - blank)
                                                 + list(after.leading_lines))
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
        raise UserError(f"{path}: cannot read the model source ({exc.strerror})") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a UTF-8 Python source file") from None


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
        raise UserError(f"{path}: cannot parse it as Python (line {exc.lineno}: {exc.msg}); refusing to patch") from exc
    except (RecursionError, MemoryError):
        raise UserError(f"{path}: nested too deeply for a Python parser; refusing to patch") from None
    except ValueError as exc:   # null bytes
        raise UserError(f"{path}: not Python source ({exc}); refusing to patch") from exc
    if depth > MAX_SYNTAX_DEPTH:
        raise UserError(f"{path}: its syntax nests {depth} levels deep (at most {MAX_SYNTAX_DEPTH} are parsed "
                        f"safely); refusing to patch")
    _probe_parse(text, path)
    try:
        return cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        raise UserError(f"{path}: cannot parse it as Python (line {exc.raw_line}: {exc.message}); refusing to patch") from exc
    except (RecursionError, MemoryError, ValueError) as exc:
        raise UserError(f"{path}: cannot parse it as Python ({type(exc).__name__}); refusing to patch") from exc


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
    ms = mindspore_names(module)
    statements = _Statements(locate.function)
    wrapper.visit(statements)
    culprit = next((i for i, (a, b) in enumerate(zip(statements.lines, statements.end_lines, strict=True)) if a <= line <= b),
                   None)
    if culprit is None:
        raise UserError(f"{path}:{line} is not a simple statement of {result.function} (a compound statement's "
                        f"header?); point at the line that computes the culprit")
    fn = locate.function
    args = [p.name.value for p in list(fn.params.posonly_params) + list(fn.params.params)
            + list(fn.params.kwonly_params) if p.name.value not in ("self", "cls")]
    region = _region(statements.found, statements.lines, culprit, args, params | constants, line)
    widen, like = f"_msoverflow_widen_{dtype}", "_msoverflow_like"
    changes: List[str] = []
    island = _Island(region, params | constants, region.args, _primitives_in_init(locate.klass), ms, dtype, widen,
                     like, changes, line)
    patched_module = wrapper.visit(island)
    helpers = []
    if f"def {widen}(" not in original and widen + "(" in patched_module.code:
        helpers.append(_helper_source(ms, dtype, widen))
        changes.append(f"helper {widen}() added after the imports: casts only narrower float dtypes")
    if island.used_like and f"def {like}(" not in original:
        helpers.append(_like_source(ms, like))
        changes.append(f"helper {like}() added after the imports: casts a value back to a reference's dtype")
    need_import = ms.need_import(tensor=bool(helpers), ops=bool(helpers), dtype=bool(helpers) or island.used_dtype)
    patched_module = _insert_module_parts(patched_module, need_import, helpers,
                                          uses=(["mindspore"] if need_import else []) + [widen, like])
    if need_import:
        changes.append("import mindspore added (the script imports no mindspore name the patch can use)")
    result.patched = patched_module.code
    result.changes = changes
    cst.parse_module(result.patched)   # the patch itself must be valid Python
    return result


def write(patch: SourcePatch) -> Optional[str]:
    """Write the patched file (atomic, with a `.orig` backup); returns the backup's path, None if unchanged."""
    if not patch.changed:
        return None
    return write_atomic(patch.path, patch.patched)
