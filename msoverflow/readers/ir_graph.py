"""The graph MindSpore saves beside the dump (rank_N/graphs/ms_output_trace_code_graph_{g}.ir).

Per kernel node it gives the full scoped name, the producers of its inputs, inferred vs kernel dtype,
backend-inserted casts, the forward node of a gradient node, and the user's source line.
"""
from __future__ import annotations

import os
import re
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from .. import safeio
from ..model import GraphNode
from ..names import scope_to_file_name

_NODE = re.compile(r"^\s+%(\w+)\([^)]*\) = ([\w.]+)\(")
_PARAM = re.compile(r"^%(para\d+)_(\S+?):")
_PARAM_SHAPE = re.compile(r"Tensor\[\w+\]\], \(([\d, ]*)\)")     # a parameter line's `<Ref[Tensor[Float32]], (16, 32)`
_RETURN = re.compile(r"^\s+Return\(")
# `%12`, `%para3` (older dialects) or `%para3_fc.bias` (MindSpore 2.x names the parameter in every reference; its
# name may hold dots)
_REF = re.compile(r"%([\w.]+)")
_PARAM_REF = re.compile(r"(para\d+)(?:_|$)")
_DTYPE_OUT = re.compile(r"->\s*\(<(?:Ref\[)?Tensor\[(\w+)\]")
_KERNEL_OUT = re.compile(r"->\s*\(<(\w+?)x\w+")
_FULLNAME_PREFIX = "# Fullname with scope: "
_FULLNAME_OLD_PREFIX = ": full_name_with_scope: "          # older dialect (MindSpore dump tutorial)
# `# In file {path}:{line}[~{end}], {col}~{col}/{code}/`: found by scanning for the separator (linear), never by
# a leading `(.*)` that backtracks over a long line.
_SOURCE_PREFIX = "# In file "
_SOURCE_SEPARATOR = re.compile(r":(\d+)(~\d+)?, (\d{1,6})~(\d{1,6})/")
_SOURCE_OLD_SEPARATOR = re.compile(r"\((\d{1,9})\)/")        # older dialect: `# In file net.py(175)/  code/`
MAX_LINE_NUMBER_DIGITS = 9
# Appended to a source line that several nodes share: not the line that made this node, if another one exists.
SHARED_MARK = "<~~This line of code can be shared by multiple nodes, and may be duplicated."
_UNIQUE = re.compile(r'\bunique_id: "(\d+)"')
_FORWARD = re.compile(r'forward_node_name: "([^"]+)"(?:, forward_unique_id: "(\d+)")?')
_FRAMEWORK = re.compile(r"[/\\](?:site|dist)-packages[/\\]mindspore[/\\]|[/\\]mindspore[/\\]python[/\\]mindspore[/\\]")


def _full_name(stripped: str) -> Optional[str]:
    prefix = _FULLNAME_PREFIX if stripped.startswith(_FULLNAME_PREFIX) else _FULLNAME_OLD_PREFIX
    rest = stripped[len(prefix):].rstrip()
    if rest.startswith("(") and rest.endswith(")"):
        return rest[1:-1]
    return None


def _source(stripped: str):
    """(file, line, code, spans_lines, expression) of a `# In file` comment, or None. spans_lines: the frame is a
    range of lines (`:66~70`), an enclosing block (`def`, `if`, `for`), never the line that made the op.
    expression: the columns the frame names (`self._backbone` of `loss = self.ce(self._backbone(x), y)`)."""
    body = stripped[len(_SOURCE_PREFIX):].rstrip()
    if not body.endswith("/"):
        return None
    last = None
    for match in _SOURCE_SEPARATOR.finditer(body, 0, len(body) - 1):
        last = match
    if last is None:
        last = _SOURCE_OLD_SEPARATOR.search(body, 0, len(body) - 1)
    if last is None or last.start() == 0 or len(last.group(1)) > MAX_LINE_NUMBER_DIGITS:
        return None
    raw = body[last.end():-1]
    if last.re is _SOURCE_SEPARATOR:
        spans = last.group(2) is not None
        expression = raw[int(last.group(3)):int(last.group(4))]
    else:
        spans, expression = False, raw
    return body[:last.start()], int(last.group(1)), raw.strip(), spans, expression


def _is_user_code(path: str) -> bool:
    return not _FRAMEWORK.search(path)


_SELF_ATTR = re.compile(r"\s*self\.(\w+)\s*$")


def _frame_rank(frame, calls: bool) -> int:
    """Lower is better: user code before framework code, a single line before an enclosing block (a multi-line
    range), a line of its own before a shared one or a call site (calls: the next frame enters a function there)."""
    path, _line, code, spans, _expression, shared = frame
    return (0 if _is_user_code(path) else 4) + (2 if spans and _opens_block(code) else 0) + (1 if shared or calls else 0)


def _opens_block(code: str) -> bool:
    """A multi-line range that is a block (`if ...:`, `def`, a decorator), not one statement written over several
    lines (`success = self.hyper_map(...,` continued on the next line): the statement is the op's line."""
    text = code.strip()
    return text.endswith(":") or text.startswith(("@", "def ", "class ", "if ", "for ", "while ", "with ", "else",
                                                  "elif ", "try", "except"))


def _choose_source(frames):
    """The op's source: frames run from the outermost call to the innermost; the last of the best rank wins."""
    best, best_rank = None, 99
    for index, frame in enumerate(frames):
        calls = index + 1 < len(frames) and frames[index + 1][2].startswith(("def ", "@"))
        rank = _frame_rank(frame, calls)
        if rank <= best_rank:
            best, best_rank = frame, rank
    return best


def _trace_cell(frames):
    """(Cell path, (file, line) of its construct) from the call trace, for an op whose scope names no Cell (an
    expander's `Expand/_Muls/Mul-op0`): each `self.NAME(...)` frame followed by a `def construct(` frame entered
    the Cell attribute NAME. The path is the run of such calls that ends at the innermost construct; a call that
    is not `self.NAME(` (a loop's `layer(x)`) starts it again. None when the trace enters no Cell."""
    path: List[str] = []
    at = None
    for (_file, _line, _code, spans, expression, _shared), nxt in zip(frames, frames[1:], strict=False):
        if not nxt[2].startswith("def construct("):
            continue
        call = _SELF_ATTR.match(expression) if not spans else None
        if call is None:
            path = []
            at = (nxt[0], nxt[1])
            continue
        path.append(call.group(1))
        at = (nxt[0], nxt[1])
    return (".".join(path), at) if path else (None, None)


def _args(line: str, start: int) -> List[str]:
    """Top-level arguments of a node call: `%12` references, or literals (kept so slots stay aligned)."""
    depth, i = 1, start
    args: List[str] = []
    current: List[str] = []
    while i < len(line):
        ch = line[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                break
        if ch == "," and depth == 1:
            args.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
        i += 1
    args.append("".join(current).strip())
    return [a for a in args if a]


_ATTRS = "primitive_attrs: {"
_SCALAR = re.compile(r"^(Bool|I8|I16|I32|I64|U8|U16|U32|U64|F16|BF16|F32|F64)\((.*)\)$")
_NUMBER = re.compile(r"^-?(\d+\.?\d*(e[-+]?\d+)?|inf|nan)$", re.IGNORECASE)
_TENSOR_VALUE = re.compile(r"\bvalue=(\[[^\]]*\]|[^,)\s]+)")


def _attrs_text(line: str) -> str:
    """The text inside a node line's `primitive_attrs: {...}` (empty when it has none)."""
    start = line.find(_ATTRS)
    if start < 0:
        return ""
    start += len(_ATTRS)
    depth = 1
    for i in range(start, len(line)):
        depth += {"{": 1, "}": -1}.get(line[i], 0)
        if depth == 0:
            return line[start:i]
    return ""


def _split_top(text: str) -> List[str]:
    """Comma-separated items at the top nesting level."""
    items: List[str] = []
    current: List[str] = []
    depth = 0
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            items.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    items.append("".join(current).strip())
    return [item for item in items if item]


def literal(text: str):
    """A literal as the .ir writes it -> a Python value: `Bool(1)` True, `I64(-1)` -1, `F32(1e-05)` 1e-05,
    `(I64(0), I64(1))` (0, 1), `"NCHW"` 'NCHW', `Tensor(shape=[], dtype=Float32, value=16)` 16.0. Raises
    ValueError for anything else (a reference, a monad, a form not known here)."""
    text = text.strip()
    m = _SCALAR.match(text)
    if m:
        kind, value = m.groups()
        if kind == "Bool":
            return value.strip().lower() in ("1", "true")
        return float(value) if kind.startswith(("F", "BF")) else int(value)
    if text[:1] in "([" and text[-1:] in ")]":
        return tuple(literal(item) for item in _split_top(text[1:-1]))
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    if text == "None":
        return None
    if _NUMBER.match(text):
        return float(text) if any(c in text for c in ".eE") or "inf" in text or "nan" in text else int(text)
    if text.startswith("Tensor(") and "dtype=" in text:
        m = _TENSOR_VALUE.search(text)
        if m:
            value = m.group(1)
            kind = int if re.search(r"dtype=U?Int", text) else float
            numbers = [kind(float(v)) for v in value.strip("[]").replace(",", " ").split()]
            return tuple(numbers) if value.startswith("[") else numbers[0]
    raise ValueError(f"not a literal: {text[:40]}")


def attributes(node: GraphNode) -> Dict[str, object]:
    """The node's primitive attributes whose values are literals (`transpose_a: Bool(1)` -> {'transpose_a': True})."""
    found: Dict[str, object] = {}
    for item in _split_top(node.attrs_text):
        key, sep, value = item.partition(":")
        if sep:
            try:
                found[key.strip()] = literal(value)
            except ValueError:
                continue
    return found


_TYPE_ITEM = re.compile(r"<(?:Ref\[)?Tensor\[\w+\]\]?, \(([\d, ]*)\)|<[^<>]*>")


def shapes(node: GraphNode):
    """(input shapes by slot, output shapes) the front end inferred for the node; None for a slot that is not a
    tensor of known shape. Empty lists when the graph has no types line."""
    text = node.types_text
    arrow = text.find(") -> (")
    if arrow < 0:
        return [], []

    def parse(part: str):
        found: List[Optional[Tuple[int, ...]]] = []
        for m in _TYPE_ITEM.finditer(part):
            if m.group(1) is None:
                found.append(None)
            else:
                found.append(tuple(int(d) for d in m.group(1).replace(" ", "").split(",") if d))
        return found
    return parse(text[:arrow + 1]), parse(text[arrow + len(") -> "):])


# A node's call and attributes span a few lines; in a broken file the joining stops here (memory stays flat).
MAX_JOINED_CHARS = 1 << 20
_OPENING, _CLOSING = "([{", ")]}"


def _depth(text: str) -> int:
    return sum(text.count(c) for c in _OPENING) - sum(text.count(c) for c in _CLOSING)


def _logical_lines(lines: Iterable[str]):
    """(number of the first line, text): a node line whose brackets stay open is joined with the lines they run
    on to (a tensor constant printed over several lines, attributes wrapped by older versions), so its arguments
    and the comment lines after it are read as one node."""
    pending, depth, start, size = None, 0, 0, 0
    for number, line in enumerate(lines, 1):
        if pending is not None:
            pending.append(line.strip())
            depth += _depth(line)
            size += len(line)
            if depth <= 0 or size >= MAX_JOINED_CHARS:
                yield start, " ".join(pending)
                pending = None
            continue
        if _NODE.match(line) and _depth(line) > 0:
            pending, depth, start, size = [line.rstrip("\n")], _depth(line), number, len(line)
            continue
        yield number, line
    if pending is not None:
        yield start, " ".join(pending)


_OP_NUMBER = re.compile(r"^(.*)-op(\d+)$")


class GraphIndex:
    """Nodes of one saved graph, looked up by full name or by the name as written in dump files."""

    def __init__(self, nodes: List[GraphNode], path: Optional[str] = None, returns: Optional[List[str]] = None,
                 parameter_shapes: Optional[Dict[str, Tuple[int, ...]]] = None, data_inputs: Iterable[str] = ()):
        self.nodes = nodes
        self.path = path
        self.returns = returns or []          # full names of what the graph's Return hands out (a MakeTuple, ...)
        self.parameter_shapes = parameter_shapes or {}     # weight name -> shape (the .ir's parameter lines)
        # the graph's parameters that are not weights (`IsWeight: false`, no Ref): the data batch it is fed
        self.data_inputs = frozenset(data_inputs)
        self.by_full: Dict[str, GraphNode] = {n.full_name: n for n in nodes}
        self.by_file: Dict[str, GraphNode] = {scope_to_file_name(n.full_name): n for n in nodes}
        self.dumped_as: Dict[str, str] = {}     # full name -> its name in dump files, where that differs
        self._by_dumped: Dict[str, GraphNode] = {}
        short: Dict[str, List[GraphNode]] = {}
        for n in nodes:
            short.setdefault(n.full_name.rsplit("/", 1)[-1], []).append(n)
        self.by_short = {k: v[0] for k, v in short.items() if len(v) == 1}

    def number_as_dumped(self, counts: Dict[str, int], runs_kernel: Callable[[str], bool]) -> None:
        """MindSpore 2.x dump files number a kernel's `-opN` per scope and op type, from 0, in kernel order across
        the session's graphs (graph-id order); the saved graph keeps the numbers its compile passes left (gaps, and
        another order), so `fc1-Dense/Cast-op3` in the .ir can be `fc1-Dense_Cast-op1` in the files (seen on real
        MindSpore 2.10 CPU dumps, checked there by every tensor's shape). counts: kernels of each scope and type in
        the earlier graphs (updated); runs_kernel(op_type): the node runs a kernel (Load, Depend ... do not)."""
        for node in self.nodes:
            match = _OP_NUMBER.match(node.full_name)
            if match is None or not runs_kernel(node.op_type):
                continue
            number = counts.get(match.group(1), 0)
            counts[match.group(1)] = number + 1
            dumped = scope_to_file_name(f"{match.group(1)}-op{number}")
            self._by_dumped[dumped] = node
            if dumped != scope_to_file_name(node.full_name):
                self.dumped_as[node.full_name] = dumped

    def file_name(self, full_name: str) -> str:
        """How dump files name the node of this full name."""
        return self.dumped_as.get(full_name) or scope_to_file_name(full_name)

    def find(self, op_name: str) -> Optional[GraphNode]:
        """The node of a dump file's op name: full-scope (2.x, numbered as dumped) or short (`Conv2D-op12`, older
        versions)."""
        return (self._by_dumped.get(op_name) or self.by_file.get(op_name) or self.by_full.get(op_name)
                or self.by_short.get(op_name))

    def consumers(self, full_name: str) -> List[GraphNode]:
        return [n for n in self.nodes if full_name in n.inputs]


def parse_ir(lines: Iterable[str]) -> GraphIndex:
    params: Dict[str, str] = {}
    shapes: Dict[str, Tuple[int, ...]] = {}
    returns: List[str] = []             # what each subgraph's Return hands out (%ids)
    data_inputs: List[str] = []
    ids: Dict[str, str] = {}            # %113 -> full name (filled once the node's Fullname line is seen)
    unique: Dict[str, str] = {}         # unique_id -> full name
    nodes: List[GraphNode] = []
    pending_forward: Dict[int, Tuple[str, str]] = {}
    current: Optional[dict] = None

    def finish():
        if current and current.get("full_name"):
            node = GraphNode(full_name=current["full_name"], op_type=current["op_type"], ir_id=current["id"],
                             inputs=current["inputs"], is_backend_cast=current["backend_cast"],
                             inferred_out=current.get("inferred"), kernel_out=current.get("kernel"),
                             ir_line=current.get("line"), literals=current["literals"], attrs_text=current["attrs"],
                             types_text=current.get("types_text", ""))
            frames = current.get("frames") or []
            src = _choose_source(frames)
            if src:
                node.source_file, node.source_line, node.source_code = src[:3]
            node.trace_cell, node.trace_cell_at = _trace_cell(frames)
            ids[current["id"]] = node.full_name
            if current.get("unique"):
                unique[current["unique"]] = node.full_name
            if current.get("forward"):
                pending_forward[len(nodes)] = current["forward"]
            nodes.append(node)

    for line_number, line in _logical_lines(lines):
        if _RETURN.match(line):
            finish()
            current = None
            returns.extend(a[1:] for a in _args(line, line.index("(") + 1) if _REF.fullmatch(a))
            continue
        m = _NODE.match(line)
        if m:
            finish()
            op = m.group(2)
            op_type = op[len("PrimFunc_"):] if op.startswith("PrimFunc_") else op
            texts = _args(line, m.end())
            args = [a[1:] if _REF.fullmatch(a) else "const" for a in texts]
            current = {"id": m.group(1), "op_type": op_type, "inputs": args, "line": line_number,
                       "backend_cast": "is_backend_cast: Bool(1)" in line, "types": 0,
                       "open": line.count("{") - line.count("}"),
                       "literals": {slot: text for slot, (text, arg) in enumerate(zip(texts, args, strict=True)) if arg == "const"},
                       "attrs": _attrs_text(line)}
            u = _UNIQUE.search(line.split("cnode_primal_attrs", 1)[-1]) if "cnode_primal_attrs" in line else None
            f = _FORWARD.search(line)
            if f:
                current["forward"] = (f.group(1), f.group(2))
            elif u:
                current["unique"] = u.group(1)
            continue
        if current is None:
            p = _PARAM.match(line)
            if p:
                params[p.group(1)] = p.group(2)
                shape = _PARAM_SHAPE.search(line, p.end())
                if shape and "is_parameter" in line:
                    shapes[p.group(2)] = tuple(int(d) for d in shape.group(1).replace(" ", "").split(",") if d)
                if "IsWeight: false" in line or ("<Tensor[" in line and "Ref[" not in line):
                    data_inputs.append(p.group(2))
            continue
        stripped = line.strip()
        if stripped.startswith(": ("):
            current["types"] += 1
            if current["types"] == 1:
                d = _DTYPE_OUT.search(stripped)
                current["inferred"] = d.group(1) if d else None
                current["types_text"] = stripped[1:].strip()
            elif current["types"] == 2:
                d = _KERNEL_OUT.search(stripped)
                current["kernel"] = d.group(1) if d else None
        elif stripped.startswith(_FULLNAME_PREFIX) or stripped.startswith(_FULLNAME_OLD_PREFIX):
            full = _full_name(stripped)
            if full:
                current["full_name"] = full
        elif stripped.startswith(_SOURCE_PREFIX):
            shared = SHARED_MARK in stripped
            text = stripped.replace(SHARED_MARK, "").rstrip()
            if shared and not text.endswith("/"):
                text += "/"
            src = _source(text)
            if src:
                current.setdefault("frames", []).append((*src, shared))
        elif not stripped.startswith("#") and not stripped.startswith(":") and stripped and current:
            finish()
            current = None
    finish()

    def resolved(ref: str) -> str:
        if ref == "const":
            return ref
        if ref in ids:
            return ids[ref]
        m = _PARAM_REF.match(ref)
        if m and m.group(1) in params and ref in (m.group(1), f"{m.group(1)}_{params[m.group(1)]}"):
            return f"param:{params[m.group(1)]}"
        return f"%{ref}"

    for node in nodes:
        node.inputs = [resolved(i) for i in node.inputs]
    for index, (fwd_name, fwd_unique) in pending_forward.items():
        node = nodes[index]
        node.forward_name = unique.get(fwd_unique or "") or fwd_name
    return GraphIndex(nodes, returns=[ids[r] for r in returns if r in ids], parameter_shapes=shapes,
                      data_inputs=data_inputs)


def load_ir(path: str) -> GraphIndex:
    with safeio.open_regular(path, "r", encoding="utf-8", errors="replace") as fh:
        graph = parse_ir(safeio.bounded_lines(fh))
    graph.path = path
    return graph


def graph_files(rank_root: str, graph: str) -> List[str]:
    """Saved graphs for one graph id, best first."""
    folder = os.path.join(rank_root, "graphs")
    names = [f"ms_output_trace_code_graph_{graph}.ir", f"trace_code_graph_{graph}.ir"]
    found = [os.path.join(folder, n) for n in names if os.path.isfile(os.path.join(folder, n))]
    if not found and os.path.isdir(folder):
        found = sorted(os.path.join(folder, n) for n in os.listdir(folder)
                       if n.endswith(f"_graph_{graph}.ir") and safeio.is_regular(os.path.join(folder, n)))
    return found


_COLLECTIVE_NODE = re.compile(r"^\s+%\w+\([^)]*\) = (?:PrimFunc_)?(AllReduce|AllGather|ReduceScatter|Broadcast|"
                              r"AlltoAll|AllToAll|AlltoAllV)\(")
_GROUP = re.compile(r'\bgroup: "([^"\n]{1,256})"')
MAX_GRAPH_FILES = 16


def collective_groups(rank_root: str) -> Dict[str, str]:
    """Communication group -> the first collective (op type) seen in it, in a rank's saved graphs (`group:` of
    its primitive attributes, e.g. "mccl_world_group": every rank of the job). Streamed, bounded lines."""
    folder = os.path.join(rank_root, "graphs")
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".ir"))[:MAX_GRAPH_FILES]
    except OSError:
        return {}
    found: Dict[str, str] = {}
    for name in names:
        try:
            with safeio.open_regular(os.path.join(folder, name), "r", encoding="utf-8", errors="replace") as fh:
                pending: Optional[str] = None      # a collective whose attributes may wrap onto the next line
                for line in safeio.bounded_lines(fh):
                    node = _COLLECTIVE_NODE.match(line)
                    if node or pending:
                        group = _GROUP.search(line)
                        owner = node.group(1) if node else pending
                        if group and owner is not None:     # (node or pending: an owner)
                            found.setdefault(group.group(1), owner)
                        pending = node.group(1) if node and not group else None
        except OSError:
            continue
    return found


_SAVED_GRAPH = re.compile(r"^(?:ms_output_)?trace_code_graph_(\w+)\.ir$")


def saved_graph_ids(rank_root: str) -> List[str]:
    """The graph ids whose saved graph is in the rank's graphs/ folder (numeric ids in number order)."""
    try:
        names = os.listdir(os.path.join(rank_root, "graphs"))
    except OSError:
        return []
    ids = {m.group(1) for m in map(_SAVED_GRAPH.match, names) if m}
    return sorted(ids, key=lambda graph: (not graph.isdigit(), int(graph) if graph.isdigit() else 0, graph))


def load_saved_graphs(rank_root: str, runs_kernel: Callable[[str], bool],
                      warn: Callable[[str], None]) -> Dict[str, GraphIndex]:
    """graph id -> GraphIndex of every saved graph of a rank, numbered as its dump files name the kernels
    (GraphIndex.number_as_dumped: the numbering runs on across the graphs)."""
    graphs: Dict[str, GraphIndex] = {}
    counts: Dict[str, int] = {}
    for graph in saved_graph_ids(rank_root):
        for path in graph_files(rank_root, graph):
            try:
                graphs[graph] = load_ir(path)
            except OSError as exc:
                warn(f"{path}: cannot read saved graph ({exc.strerror})")
                continue
            graphs[graph].number_as_dumped(counts, runs_kernel)
            break
    return graphs
