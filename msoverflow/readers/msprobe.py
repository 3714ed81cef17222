"""msprobe framework dumps (PrecisionDebugger, MindSpore PyNative / PyTorch): one directory per step and rank.

Layout (msprobe's MindSpore and PyTorch dump docs; observed with mindstudio-probe 26.2.0 + MindSpore 2.10 CPU):
  {dump_path}/[graph|pynative/]step{k}/rank{r}|proc{pid}/
      dump.json        {"task", "level", "framework": mindspore|pytorch, "dump_data_dir", "data": {entry: {...}}}
      stack.json       {"0": [[entry names], [frames, innermost first]], ...}  (older: {entry: [frames]})
      construct.json   {entry: parent Cell/Module entry or null}   (empty at L1)
      dump_tensor_data/{entry}.{input|output|parameters...}.{n}.npy   (task "tensor"; PyTorch writes .pt)
Entry names: API `{Prefix}.{api}.{n}.{forward|backward}` (Prefix: Functional, Tensor, Primitive.{attr}.{Class},
Mint, MintFunctional, Distributed, Torch, ...); Cell/Module `{Cell|Module}.{path}.{Class}.{forward|backward}.{n}`;
parameter gradients `{Cell|Module}.{path}.{Class}.parameters_grad.{n}`.
Forward entries hold input_args, input_kwargs, output (and parameters for Cells), backward entries input and
output; statistics Max/Min/Mean/Norm are written as non-strict JSON (Infinity, NaN).

Each entry becomes one op execution in dump.json order (the order msprobe recorded them), so the usual origin
rule applies: an entry whose inputs are finite and whose output is not. A Cell's parameter gradients join the
outputs of that Cell's backward entry. Each entry also gets a GraphNode: its Cell path (construct.json) as a
MindSpore-style scope, its forward entry (backward -> forward by name) and its source line (stack.json: the
first frame outside the framework).
"""
from __future__ import annotations

import json
import math
import os
import re
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from ..dtypes import canonical
from ..model import INPUT, OUTPUT, GraphNode, TensorEvent
from ..layout import LAYOUT_MSPROBE
from .registry import Reader
from .statistic_csv import stats_from_numbers

Warn = Callable[[str], None]

DUMP_JSON = "dump.json"
STACK_JSON = "stack.json"
CONSTRUCT_JSON = "construct.json"
TENSOR_DIR = "dump_tensor_data"
MAX_JSON_BYTES = 2 << 30     # refuse absurd files instead of exhausting memory

_CELL = re.compile(r"^(Cell|Module)\.(?:(.+)\.)?([A-Za-z_]\w*)\.(forward|backward)\.(\d+)$")
_PARAM_GRAD = re.compile(r"^(Cell|Module)\.(?:(.+)\.)?([A-Za-z_]\w*)\.parameters_grad(?:\.(\d+))?$")
_API = re.compile(r"^(.+)\.(\d+)\.(forward|backward)$")
_FRAME = re.compile(r"File (?P<file>.+?), line (?P<line>\d+), in (?P<func>[^,\n]+),?\s*\n?\s*(?P<code>.*)", re.S)
# Frames inside these packages are the framework, not the user's code.
_FRAMEWORK = re.compile(r"[/\\](?:site|dist)-packages[/\\](?:mindspore|msprobe|torch|torch_npu|msadapter)[/\\]"
                        r"|[/\\]mindspore[/\\]python[/\\]mindspore[/\\]")

# API words -> the MindSpore primitive that has the same input slots (so domain/division knowledge applies to
# forward entries). Backward entries never take these names: their inputs are gradients, not the op's inputs.
_PRIMITIVES = {
    "sqrt": "Sqrt", "rsqrt": "Rsqrt", "log": "Log", "log2": "Log2", "log10": "Log10", "log1p": "Log1p",
    "reciprocal": "Reciprocal", "exp": "Exp", "pow": "Pow", "__pow__": "Pow", "square": "Square",
    "div": "RealDiv", "divide": "RealDiv", "true_divide": "RealDiv", "__truediv__": "RealDiv",
    "__div__": "RealDiv", "floor_divide": "FloorDiv", "__floordiv__": "FloorDiv",
    "acos": "Acos", "asin": "Asin", "matmul": "MatMul", "__matmul__": "MatMul", "mm": "MatMul", "bmm": "BatchMatMul",
    "cast": "Cast", "softmax": "Softmax", "sum": "ReduceSum", "mean": "ReduceMean",
    "all_reduce": "AllReduce", "all_gather": "AllGather", "all_gather_into_tensor": "AllGather",
    "reduce_scatter": "ReduceScatter", "reduce_scatter_tensor": "ReduceScatter", "broadcast": "Broadcast",
    "send": "Send", "isend": "Send", "recv": "Receive", "irecv": "Receive", "all_to_all": "AlltoAll",
    "all_to_all_single": "AlltoAll", "reduce": "Reduce",
}


def is_msprobe_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, DUMP_JSON))


def _load_json(path: str, warn: Warn):
    """Non-strict JSON (Infinity, NaN) as msprobe writes it; None with a warning when unreadable."""
    try:
        if not os.path.isfile(path):
            return None
        size = os.path.getsize(path)
        if size > MAX_JSON_BYTES:
            warn(f"{path}: {size} bytes, larger than the {MAX_JSON_BYTES} bytes msoverflow reads: skipped")
            return None
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        warn(f"{path}: cannot read msprobe file ({exc}); skipped")
        return None


# ---- entry names --------------------------------------------------------------------------------------------

def forward_of(name: str) -> Optional[str]:
    """The forward entry of a backward entry name (`X.3.backward` -> `X.3.forward`,
    `Cell.a.B.backward.0` -> `Cell.a.B.forward.0`); None for forward entries."""
    m = _CELL.match(name)
    if m:
        return name[: m.start(4)] + "forward" + name[m.end(4):] if m.group(4) == "backward" else None
    m = _API.match(name)
    if m and m.group(3) == "backward":
        return f"{m.group(1)}.{m.group(2)}.forward"
    return None


def entry_op_type(name: str) -> str:
    """A readable op type for an entry: the primitive for forward API entries whose slots match it
    (`Functional.sqrt.0.forward` -> Sqrt, `Primitive.sqrt.Sqrt.0.forward` -> Sqrt), the Cell class for Cells,
    `<that>.backward` for backward entries."""
    m = _CELL.match(name)
    if m:
        return m.group(3) + (".backward" if m.group(4) == "backward" else "")
    m = _API.match(name)
    if not m:
        return name
    api = m.group(1)
    parts = api.split(".")
    if parts[0] == "Primitive" and len(parts) >= 3:
        base = parts[-1]                          # Primitive.{attr}.{Class}
    else:
        word = parts[-1]
        base = _PRIMITIVES.get(word.lower()) or _PRIMITIVES.get(word) or api
    return base + (".backward" if m.group(3) == "backward" else "")


def cell_chain(entry: str, parents: Dict[str, Optional[str]]) -> List[Tuple[str, str]]:
    """[(attribute path relative to its parent, Class)] from the root Cell down, from construct.json."""
    chain: List[Tuple[str, str]] = []
    seen = set()
    node = parents.get(entry)
    while node and node not in seen:
        seen.add(node)
        m = _CELL.match(node)
        if m:
            chain.append((m.group(2) or "", m.group(3)))
        node = parents.get(node)
    chain.reverse()
    relative = []
    above = ""
    for path, cls in chain:
        rel = path[len(above) + 1:] if above and path.startswith(above + ".") else path
        relative.append((rel or cls, cls))
        above = path
    return relative


def user_frame(frames) -> Optional[Tuple[str, int, str]]:
    """(file, line, code) of the first frame outside the framework; frames are innermost first."""
    if isinstance(frames, str):
        frames = re.split(r"(?=File )", frames)
    for frame in frames or []:
        if not isinstance(frame, str):
            continue
        m = _FRAME.search(frame)
        if m and not _FRAMEWORK.search(m.group("file")):
            return m.group("file").strip(), int(m.group("line")), m.group("code").strip().splitlines()[0] \
                if m.group("code").strip() else ""
    return None


def stacks_by_entry(doc) -> Dict[str, object]:
    """stack.json in either form -> {entry: frames}."""
    result: Dict[str, object] = {}
    if not isinstance(doc, dict):
        return result
    for key, value in doc.items():
        if isinstance(value, list) and len(value) == 2 and isinstance(value[0], list):
            for name in value[0]:
                if isinstance(name, str):
                    result[name] = value[1]
        else:
            result[key] = value
    return result


# ---- tensors ----------------------------------------------------------------------------------------------

def _tensors(value) -> Iterable[dict]:
    """Tensor records inside an argument structure (lists/tuples nest, kwargs are dicts of records)."""
    if isinstance(value, dict):
        kind = str(value.get("type", ""))
        if "dtype" in value and "shape" in value and ("Tensor" in kind or "Parameter" in kind):
            yield value
            return
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, list):
        for item in value:
            yield from _tensors(item)


def _number(value) -> Optional[float]:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value))
    except ValueError:
        return None


def _dtype(text) -> Optional[str]:
    word = str(text or "")
    for prefix in ("torch.", "mindspore.", "ms."):
        if word.startswith(prefix):
            word = word[len(prefix):]
    return canonical(word)


def _event(record: dict, *, entry: str, io: str, slot: int, order: int, d, tensor_dir: str,
           framework: str) -> TensorEvent:
    shape = tuple(int(x) for x in record.get("shape") or []) if isinstance(record.get("shape"), list) else None
    dtype = _dtype(record.get("dtype"))
    data_name = record.get("data_name")
    npy = os.path.join(tensor_dir, os.path.basename(data_name)) if isinstance(data_name, str) else None
    stats = None
    source = npy if npy and npy.endswith(".npy") and os.path.isfile(npy) else None
    if source is None:
        high, low = _number(record.get("Max")), _number(record.get("Min"))
        count = math.prod(shape) if shape is not None else 0
        if high is not None or low is not None:
            stats = stats_from_numbers(count, None, None, None, high, low, None, shape, dtype)
    note = "" if (source or stats) else "no statistics and no tensor file for this tensor"
    return TensorEvent(source=source or os.path.join(d.path, DUMP_JSON), rank=d.rank, graph=str(d.graph),
                       iteration=d.iteration, op_type=entry_op_type(entry), op_name=entry, task_id=0, stream_id=0,
                       timestamp=order, io=io, slot=slot, fmt="ND", dtype=dtype, shape=shape, stats=stats,
                       note=note)


def read_step_dir(d, warn: Warn) -> Tuple[List[TensorEvent], List[GraphNode], int, Optional[str]]:
    """(events, graph nodes, files read, why the step could not be read or None) of one msprobe rank/step
    directory (`d` is a layout.DumpDir)."""
    path = os.path.join(d.path, DUMP_JSON)
    problems: List[str] = []
    doc = _load_json(path, lambda message: (problems.append(message), warn(message)))
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), dict):
        if doc is not None:
            problems.append(f"{path}: no \"data\" object: not an msprobe dump.json; skipped")
            warn(problems[-1])
        return [], [], 1, problems[0] if problems else f"{path}: unreadable"
    framework = str(doc.get("framework") or "mindspore")
    tensor_dir = os.path.join(d.path, TENSOR_DIR)
    stacks = stacks_by_entry(_load_json(os.path.join(d.path, STACK_JSON), warn) or {})
    parents = _load_json(os.path.join(d.path, CONSTRUCT_JSON), warn) or {}
    if not isinstance(parents, dict):
        parents = {}
    events: List[TensorEvent] = []
    nodes: List[GraphNode] = []
    data = [(entry, body) for entry, body in doc["data"].items() if isinstance(body, dict)]
    grads_of = _parameter_grads_by_owner(data)
    for order, (entry, body) in enumerate(data):
        if _PARAM_GRAD.match(entry):
            if entry in grads_of.get(None, ()):   # no backward entry of that Cell: the gradients stand alone
                for i, record in enumerate(_tensors(body)):
                    events.append(_event(record, entry=entry, io=OUTPUT, slot=i, order=order, d=d,
                                         tensor_dir=tensor_dir, framework=framework))
                nodes.append(_node(entry, parents, stacks))
            continue
        forward_entry = forward_of(entry)
        if forward_entry is None:
            in_parts = [body.get("input_args"), body.get("input_kwargs"), body.get("parameters")]
        else:
            in_parts = [body.get("input")]
        ins = [r for part in in_parts for r in _tensors(part)]
        outs = list(_tensors(body.get("output")))
        # Parameter gradients come from the Cell's backward: they are more of its outputs.
        outs += [r for grad_entry in grads_of.get(entry, ()) for r in _tensors(doc["data"][grad_entry])]
        events.extend(_event(r, entry=entry, io=INPUT, slot=i, order=order, d=d, tensor_dir=tensor_dir,
                             framework=framework) for i, r in enumerate(ins))
        events.extend(_event(r, entry=entry, io=OUTPUT, slot=i, order=order, d=d, tensor_dir=tensor_dir,
                             framework=framework) for i, r in enumerate(outs))
        nodes.append(_node(entry, parents, stacks))
    return events, nodes, 1 + (1 if stacks else 0) + (1 if parents else 0), None


def _parameter_grads_by_owner(data) -> Dict[Optional[str], List[str]]:
    """parameters_grad entry -> the backward entry of the same Cell nearest after it (msprobe writes the
    gradients just before the Cell's backward), else the nearest before; None collects orphans."""
    backward_at: Dict[Tuple[str, str], List[int]] = {}
    for i, (entry, _) in enumerate(data):
        m = _CELL.match(entry)
        if m and m.group(4) == "backward":
            backward_at.setdefault((m.group(2) or "", m.group(3)), []).append(i)
    owners: Dict[Optional[str], List[str]] = {}
    for i, (entry, _) in enumerate(data):
        m = _PARAM_GRAD.match(entry)
        if not m:
            continue
        positions = backward_at.get((m.group(2) or "", m.group(3)), [])
        after = [p for p in positions if p > i]
        owner = data[after[0]][0] if after else (data[positions[-1]][0] if positions else None)
        owners.setdefault(owner, []).append(entry)
    return owners


def _node(entry: str, parents: Dict[str, Optional[str]], stacks: Dict[str, object]) -> GraphNode:
    forward_entry = forward_of(entry)
    anchor = entry if entry in parents or forward_entry is None else forward_entry
    chain = cell_chain(anchor, parents)
    cell = _CELL.match(entry)
    if cell:       # a Cell entry is its own innermost scope segment
        own = (cell.group(2) or cell.group(3), cell.group(3))
        if chain and own[0].startswith(_full_path(chain) + "."):
            own = (own[0][len(_full_path(chain)) + 1:], own[1])
        chain = chain + [own]
    root = "Gradients/Default" if forward_entry else "Default"
    scope = "/".join([root] + [f"{attr}-{cls}" for attr, cls in chain] + [entry])
    node = GraphNode(full_name=scope, op_type=entry_op_type(entry))
    frame = user_frame(stacks.get(entry)) or (user_frame(stacks.get(forward_entry)) if forward_entry else None)
    if frame:
        node.source_file, node.source_line, node.source_code = frame
    if forward_entry:
        fwd_chain = cell_chain(forward_entry, parents)
        node.forward_name = "/".join(["Default"] + [f"{a}-{c}" for a, c in fwd_chain] + [forward_entry])
    return node


def _full_path(chain: List[Tuple[str, str]]) -> str:
    return ".".join(attr for attr, _ in chain)


def forward_nodes(nodes: List[GraphNode]) -> List[GraphNode]:
    """Forward entries a backward node names but which were not dumped (data_mode backward): keep the link."""
    have = {n.full_name for n in nodes}
    extra = []
    for n in nodes:
        if n.forward_name and n.forward_name not in have:
            fwd = n.forward_name.rsplit("/", 1)[-1]
            extra.append(GraphNode(full_name=n.forward_name, op_type=entry_op_type(fwd),
                                   source_file=n.source_file, source_line=n.source_line,
                                   source_code=n.source_code))
            have.add(n.forward_name)
    return extra


def _read_dir(content, _files) -> None:
    """The registry's call: one msprobe rank/step directory, read whole (dump.json, stack.json, construct.json)."""
    d = content.d
    events, nodes, files, unread = read_step_dir(d, content.warn)
    content.files += files
    content.events.extend(events)
    content.nodes.extend(nodes)
    if unread:     # a step whose dump.json cannot be read: never a clean verdict
        content.unreadable.append(os.path.join(d.path, DUMP_JSON))


READER = Reader("msprobe", _read_dir, layouts=(LAYOUT_MSPROBE,))
