"""The graph MindSpore saves beside the dump (rank_N/graphs/ms_output_trace_code_graph_{g}.ir).

Per kernel node it gives the full scoped name, the producers of its inputs, inferred vs kernel dtype,
backend-inserted casts, the forward node of a gradient node, and the user's source line.

Names: a dump file names its kernel by scope, op type and a number (`.../Cast-op3`), and MindSpore numbers the
kernels of each scope and type in the graph's topological order from its output (inputs first, left to right).
The `Fullname with scope` the .ir prints carries numbers given earlier, before later passes removed and added
nodes. Seen on MindSpore 2.10 CPU (the demo's fp16 NormHead, graph mode, one and two ranks, with a loss-scale
cell): 28-34 of ~170 dumped kernel names are not in the .ir at all, and 33-69 of its data-flow edges joined files
that do not hold the same tensor (an AllReduce-op0 file held the gradient the .ir calls AllReduce-op5's). Numbered
again in topological order, every dumped name is a node and at most one edge disagrees (an optimizer's in-place
input, which the dump reads after the kernel wrote it). So when the graph has its `Return`, its nodes are named
that way; a graph without one keeps the printed names.
"""
from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from .. import safeio
from ..model import GraphNode
from ..names import scope_to_file_name

_NODE = re.compile(r"^\s+%(\w+)\([^)]*\) = ([\w.]+)\(")
_RETURN = re.compile(r"^\s+Return\(")
_OP_NUMBER = re.compile(r"^(.*)-op\d+$")
MAX_WRAPPED_LINES = 4096     # continuation lines of one node call (a constant tensor printed in full) kept
_PARAM = re.compile(r"^%(para\d+)_(\S+?):")
_PARAM_SHAPE = re.compile(r"Tensor\[\w+\]\], \(([\d, ]*)\)")     # a parameter line's `<Ref[Tensor[Float32]], (16, 32)`
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
_SOURCE_SEPARATOR = re.compile(r":(\d+)(?:~\d+)?, \d+~\d+/")
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
    """(file, line, code) of a `# In file` comment, or None."""
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
    return body[:last.start()], int(last.group(1)), body[last.end():-1].strip()


def _is_user_code(path: str) -> bool:
    return not _FRAMEWORK.search(path)


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


class GraphIndex:
    """Nodes of one saved graph, looked up by full name or by the name as written in dump files."""

    def __init__(self, nodes: List[GraphNode], path: Optional[str] = None, returns: Optional[List[str]] = None,
                 parameter_shapes: Optional[Dict[str, Tuple[int, ...]]] = None):
        self.nodes = nodes
        self.path = path
        self.returns = returns or []          # full names of what the graph's Return hands out (a MakeTuple, ...)
        self.parameter_shapes = parameter_shapes or {}     # weight name -> shape (the .ir's parameter lines)
        self.by_full: Dict[str, GraphNode] = {n.full_name: n for n in nodes}
        self.by_file: Dict[str, GraphNode] = {scope_to_file_name(n.full_name): n for n in nodes}
        short: Dict[str, List[GraphNode]] = {}
        for n in nodes:
            short.setdefault(n.full_name.rsplit("/", 1)[-1], []).append(n)
        self.by_short = {k: v[0] for k, v in short.items() if len(v) == 1}

    def find(self, op_name: str) -> Optional[GraphNode]:
        """The node of a dump file's op name: full-scope (2.x) or short (`Conv2D-op12`, older versions)."""
        return self.by_file.get(op_name) or self.by_full.get(op_name) or self.by_short.get(op_name)

    def consumers(self, full_name: str) -> List[GraphNode]:
        return [n for n in self.nodes if full_name in n.inputs]


def _call_closes(line: str, start: int) -> bool:
    """The node call opened just before `start` closes on this text."""
    depth = 1
    for ch in line[start:]:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return True
    return False


def _node_start(m: "re.Match", line: str, line_number: int) -> dict:
    """What a node line says: its id, op type, input references ("const" for literals), attributes."""
    op = m.group(2)
    op_type = op[len("PrimFunc_"):] if op.startswith("PrimFunc_") else op
    args = [a[1:] if _REF.fullmatch(a) else "const" for a in _args(line, m.end())]
    current = {"id": m.group(1), "op_type": op_type, "inputs": args, "line": line_number,
               "backend_cast": "is_backend_cast: Bool(1)" in line, "types": 0,
               "open": line.count("{") - line.count("}")}
    u = _UNIQUE.search(line.split("cnode_primal_attrs", 1)[-1]) if "cnode_primal_attrs" in line else None
    f = _FORWARD.search(line)
    if f:
        current["forward"] = (f.group(1), f.group(2))
    elif u:
        current["unique"] = u.group(1)
    return current


def parse_ir(lines: Iterable[str], numbered_before: Optional[Mapping[str, int]] = None) -> GraphIndex:
    """numbered_before: per scope and type (`Default/Cast`), how many kernels the rank's earlier graphs numbered
    (the count runs on across a process's graphs: graph 2's first Default/Cast is op6 when graph 0 has six)."""
    params: Dict[str, str] = {}
    shapes: Dict[str, Tuple[int, ...]] = {}
    ids: Dict[str, int] = {}            # %113 -> index of its node (filled once the node's Fullname line is seen)
    unique: Dict[str, int] = {}         # unique_id -> index of its node
    nodes: List[GraphNode] = []
    pending_forward: Dict[int, Tuple[str, str]] = {}
    returns: List[str] = []             # what each subgraph's Return hands out (%ids)
    current: Optional[dict] = None
    # (match, text so far, continuation lines, line number) of a wrapped call
    wrapped: Optional[Tuple["re.Match[str]", str, List[str], int]] = None

    def finish():
        if current and current.get("full_name"):
            node = GraphNode(full_name=current["full_name"], op_type=current["op_type"], ir_id=current["id"],
                             inputs=current["inputs"], is_backend_cast=current["backend_cast"],
                             inferred_out=current.get("inferred"), kernel_out=current.get("kernel"),
                             ir_line=current.get("line"))
            src = current.get("source")
            if src:
                node.source_file, node.source_line, node.source_code = src
            ids[current["id"]] = len(nodes)
            if current.get("unique"):
                unique[current["unique"]] = len(nodes)
            if current.get("forward"):
                pending_forward[len(nodes)] = current["forward"]
            nodes.append(node)

    for line_number, line in enumerate(lines, 1):
        if _RETURN.match(line):
            finish()
            current = None
            returns.extend(a[1:] for a in _args(line, line.index("(") + 1) if _REF.fullmatch(a))
            continue
        if wrapped is not None:         # a node call whose arguments run on (a constant tensor's values)
            wrapped[2].append(line.strip())
            text = wrapped[1] + " " + " ".join(wrapped[2])
            if _call_closes(text, wrapped[0].end()) or len(wrapped[2]) >= MAX_WRAPPED_LINES:
                current = _node_start(wrapped[0], text, wrapped[3])
                wrapped = None
            continue
        m = _NODE.match(line)
        if m:
            finish()
            if not _call_closes(line, m.end()):
                current, wrapped = None, (m, line.rstrip("\n"), [], line_number)
                continue
            current = _node_start(m, line, line_number)
            continue
        if current is None:
            p = _PARAM.match(line)
            if p:
                params[p.group(1)] = p.group(2)
                shape = _PARAM_SHAPE.search(line, p.end())
                if shape and "is_parameter" in line:
                    shapes[p.group(2)] = tuple(int(d) for d in shape.group(1).replace(" ", "").split(",") if d)
            continue
        stripped = line.strip()
        if stripped.startswith(": ("):
            current["types"] += 1
            if current["types"] == 1:
                d = _DTYPE_OUT.search(stripped)
                current["inferred"] = d.group(1) if d else None
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
                # Lines run from the outermost call to the innermost: the last of the best kind wins.
                # Best: user code not marked shared; then shared user code; then framework code.
                rank = (0 if _is_user_code(src[0]) else 2) + (1 if shared else 0)
                if rank <= current.get("source_rank", 99):
                    current["source"] = src
                    current["source_rank"] = rank
        elif current.get("open", 0) > 0:      # attributes of the node line wrapped onto this line
            current["open"] += stripped.count("{") - stripped.count("}")
        elif not stripped.startswith("#") and not stripped.startswith(":") and stripped and current:
            finish()
            current = None
    finish()
    if returns:
        _name_as_dumped(nodes, ids, returns, numbered_before or {})

    def resolved(ref: str) -> str:
        if ref == "const":
            return ref
        if ref in ids:
            return nodes[ids[ref]].full_name
        m = _PARAM_REF.match(ref)
        if m and m.group(1) in params and ref in (m.group(1), f"{m.group(1)}_{params[m.group(1)]}"):
            return f"param:{params[m.group(1)]}"
        return f"%{ref}"

    for node in nodes:
        node.inputs = [resolved(i) for i in node.inputs]
    for index, (fwd_name, fwd_unique) in pending_forward.items():
        node = nodes[index]
        found = unique.get(fwd_unique or "")
        node.forward_name = nodes[found].full_name if found is not None else fwd_name
    return GraphIndex(nodes, returns=[nodes[ids[r]].full_name for r in returns if r in ids], parameter_shapes=shapes)


def _name_as_dumped(nodes: List[GraphNode], ids: Dict[str, int], returns: List[str],
                    numbered_before: Mapping[str, int]) -> None:
    """Number each scope's kernels of one type as the dump files do (module docstring): in topological order
    from the graph's Return, a node after its inputs, inputs left to right. Nodes the Return does not reach keep
    counting after them. Iterative: a graph of 10^5 kernels is no recursion."""
    order: List[int] = []
    seen = set()
    for root in returns:
        if root not in ids or ids[root] in seen:
            continue
        seen.add(ids[root])
        stack = [(ids[root], 0)]
        while stack:
            index, position = stack[-1]
            inputs = nodes[index].inputs
            while position < len(inputs) and (inputs[position] not in ids or ids[inputs[position]] in seen):
                position += 1
            if position < len(inputs):
                child = ids[inputs[position]]
                seen.add(child)
                stack[-1] = (index, position + 1)
                stack.append((child, 0))
            else:
                stack.pop()
                order.append(index)
    order += [i for i in range(len(nodes)) if i not in seen]
    counters: Dict[str, int] = dict(numbered_before)
    for index in order:
        numbered = _OP_NUMBER.match(nodes[index].full_name)
        if numbered:
            prefix = numbered.group(1)
            nodes[index].full_name = f"{prefix}-op{counters.get(prefix, 0)}"
            counters[prefix] = counters.get(prefix, 0) + 1


def load_ir(path: str, numbered_before: Optional[Mapping[str, int]] = None) -> GraphIndex:
    with safeio.open_regular(path, "r", encoding="utf-8", errors="replace") as fh:
        graph = parse_ir(safeio.bounded_lines(fh), numbered_before)
    graph.path = path
    return graph


def numbered_before(rank_root: str, graph: str) -> Dict[str, int]:
    """Per scope and type, the numbered kernels of the rank's saved graphs with a lower id than `graph` (what
    MindSpore counted before it numbered this graph's kernels). Each graph file is scanned once per version."""
    if not graph.isdigit():
        return {}
    totals: Dict[str, int] = {}
    for earlier in range(int(graph)):
        for path in graph_files(rank_root, str(earlier))[:1]:
            try:
                info = os.stat(path)
            except OSError:
                continue
            for prefix, count in _numbered_counts(path, (info.st_mtime_ns, info.st_size)).items():
                totals[prefix] = totals.get(prefix, 0) + count
    return totals


@lru_cache(maxsize=64)
def _numbered_counts(path: str, _version) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    try:
        with safeio.open_regular(path, "r", encoding="utf-8", errors="replace") as fh:
            for line in safeio.bounded_lines(fh):
                stripped = line.strip()
                if stripped.startswith(_FULLNAME_PREFIX):
                    numbered = _OP_NUMBER.match(_full_name(stripped) or "")
                    if numbered:
                        counts[numbered.group(1)] = counts.get(numbered.group(1), 0) + 1
    except OSError:
        return {}
    return counts


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
