"""msprobe framework dumps (PrecisionDebugger, MindSpore PyNative / PyTorch): one directory per step and rank.

Layout (msprobe's MindSpore and PyTorch dump docs; observed with mindstudio-probe 26.2.0 + MindSpore 2.10 CPU):
  {dump_path}/[graph|pynative/]step{k}/rank{r}|proc{pid}/
      dump.json        {"task", "level", "framework": mindspore|pytorch, "dump_data_dir", "data": {entry: {...}}}
      stack.json       {"0": [[entry names], [frames, innermost first]], ...}  (older: {entry: [frames]})
      construct.json   {entry: parent Cell/Module entry or null}   (empty at L1)
      dump_tensor_data/{entry}.{input|output|parameters...}.{n}.npy   (task "tensor"; PyTorch writes .pt:
                       torch.save files, read without torch by readers/torch_pt.py)
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

import bisect
import functools
import math
import os
import re
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

from .. import safeio
from ..dtypes import canonical
from ..layout import LAYOUT_MSPROBE
from ..model import INPUT, OUTPUT, GraphNode, TensorEvent
from . import torch_pt
from .reader import Reader
from .statistic_csv import stats_from_numbers

Warn = Callable[[str], None]

DUMP_JSON = "dump.json"
STACK_JSON = "stack.json"
CONSTRUCT_JSON = "construct.json"
TENSOR_DIR = "dump_tensor_data"
# dump.json is read whole (JSON has no streaming reader in the standard library): the safe-I/O bound applies
# (256 MiB by default, MSOVERFLOW_MAX_READ_BYTES); msprobe writes one file per step and rank, far below it.
MAX_JSON_BYTES = safeio.MAX_READ_BYTES
MAX_NAME_CHARS = 1024        # entry names longer than this are not matched against the name patterns (linear)
MAX_CELL_DEPTH = 64          # construct.json parents followed per entry (a loop or a 10,000-deep chain stays cheap)
MAX_FRAMES = 128             # stack frames looked at per entry, each cut at MAX_FRAME_CHARS
MAX_FRAME_CHARS = 2048
# Keys of an entry body that hold argument structures; anything else holding data was not understood.
_BODY_KEYS = ("input_args", "input_kwargs", "output", "input", "parameters")
# Keys that only a tensor record has: a dict with one of them that is not a complete record was not understood.
_TENSOR_KEYS = ("Max", "Min", "Mean", "Norm", "dtype", "shape", "data_name", "md5")

_CELL = re.compile(r"^(Cell|Module)\.(?:(.+)\.)?([A-Za-z_]\w*)\.(forward|backward)\.(\d+)$")
_PARAM_GRAD = re.compile(r"^(Cell|Module)\.(?:(.+)\.)?([A-Za-z_]\w*)\.parameters_grad(?:\.(\d+))?$")
_API = re.compile(r"^(.+)\.(\d+)\.(forward|backward)$")
_FRAME = re.compile(r"File (?P<file>.+?), line (?P<line>\d+), in (?P<func>[^,\n]+),?\s*\n?\s*(?P<code>.*)", re.S)
# Frames inside these packages are the framework, not the user's code. msprobe's own frames are skipped wherever
# it is installed (a source checkout: `.../accuracy_tools/msprobe/mindspore/dump/hook_cell/hook_cell.py`), by its
# package's own subpackages: a user's folder that happens to be called msprobe/ holds user code.
_FRAMEWORK = re.compile(r"[/\\](?:site|dist)-packages[/\\](?:mindspore|msprobe|torch|torch_npu|msadapter)[/\\]"
                        r"|[/\\]mindspore[/\\]python[/\\]mindspore[/\\]"
                        r"|(?:^|[/\\])msprobe[/\\](?:core|mindspore|pytorch|msaccucmp|infer|overflow_check|visualization)[/\\]")

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
    """Non-strict JSON (Infinity, NaN) as msprobe writes it, through the safe-I/O contract (regular file, size,
    nesting, digits); None with a warning when unreadable."""
    if not os.path.lexists(path):
        return None
    try:
        return safeio.load_json(path, limit=MAX_JSON_BYTES, allow_nan=True)
    except (OSError, ValueError) as exc:
        warn(f"{path}: cannot read msprobe file ({exc}); skipped")
        return None


def _match(pattern: "re.Pattern", name) -> Optional["re.Match"]:
    """A name pattern on a plausible entry name only: overlong or non-string names match nothing."""
    if not isinstance(name, str) or len(name) > MAX_NAME_CHARS:
        return None
    return pattern.match(name)


# ---- entry names --------------------------------------------------------------------------------------------

def forward_of(name: str) -> Optional[str]:
    """The forward entry of a backward entry name (`X.3.backward` -> `X.3.forward`,
    `Cell.a.B.backward.0` -> `Cell.a.B.forward.0`); None for forward entries."""
    m = _match(_CELL, name)
    if m:
        return name[: m.start(4)] + "forward" + name[m.end(4):] if m.group(4) == "backward" else None
    m = _match(_API, name)
    if m and m.group(3) == "backward":
        return f"{m.group(1)}.{m.group(2)}.forward"
    return None


def entry_op_type(name: str) -> str:
    """A readable op type for an entry: the primitive for forward API entries whose slots match it
    (`Functional.sqrt.0.forward` -> Sqrt, `Primitive.sqrt.Sqrt.0.forward` -> Sqrt), the Cell class for Cells,
    `<that>.backward` for backward entries."""
    m = _match(_CELL, name)
    if m:
        return m.group(3) + (".backward" if m.group(4) == "backward" else "")
    m = _match(_API, name)
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
    """[(attribute path relative to its parent, Class)] from the root Cell down, from construct.json.

    A parent whose path does not contain its child's is not an ancestor: msprobe's PyTorch writer keeps a Module's
    backward on its stack until that Module's backward hook fires, which it never does for a Module whose inputs
    need no gradient, so later backward entries name such a sibling as their parent (construct.json chains like
    `layer4.2.relu` -> ... -> `layer2.2.conv3`). Names carry the full attribute path, so siblings are dropped."""
    chain: List[Tuple[str, str]] = []
    seen: Set[str] = set()
    node = parents.get(entry) if isinstance(entry, str) else None
    while isinstance(node, str) and node and node not in seen and len(seen) < MAX_CELL_DEPTH:
        seen.add(node)
        m = _match(_CELL, node)
        if m:
            path = m.group(2) or ""
            inner = chain[-1][0] if chain else None
            if inner is None or not path or inner.startswith(path + "."):
                chain.append((path, m.group(3)))
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
        frames = re.split(r"(?=File )", frames[:MAX_FRAMES * MAX_FRAME_CHARS])
    if not isinstance(frames, list):
        return None
    for frame in frames[:MAX_FRAMES]:
        if not isinstance(frame, str):
            continue
        m = _FRAME.match(frame[:MAX_FRAME_CHARS].lstrip())     # anchored: linear in the frame's length
        if not m or _FRAMEWORK.search(m.group("file")):
            continue
        try:
            line = safeio.int_text(m.group("line"), "line number", max_digits=9)
        except ValueError:
            continue
        code = m.group("code").strip()
        return m.group("file").strip(), line, code.splitlines()[0] if code else ""
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

class _Unread:
    """What in one dump.json could hold a tensor but was not understood (one count, a few examples)."""

    def __init__(self):
        self.count = 0
        self.examples: List[str] = []

    def add(self, where: str, why: str) -> None:
        self.count += 1
        if len(self.examples) < 3:
            self.examples.append(f"{where[:200]}: {why}")


def _tensors(value, where: str = "", unread: Optional[_Unread] = None) -> Iterable[dict]:
    """Tensor records inside an argument structure (lists/tuples nest, kwargs are dicts of records). Anything
    else that is not a plain value record ({"type": "int", "value": 3}) or null goes to `unread`."""
    unread = unread if unread is not None else _Unread()
    if isinstance(value, dict):
        kind = value.get("type")
        kind = kind if isinstance(kind, str) else ""
        if "Tensor" in kind or "Parameter" in kind or (not kind and any(k in value for k in _TENSOR_KEYS)):
            yield value     # _event decides whether it is complete
            return
        if kind and "value" in value:
            return          # a non-tensor argument (int, float, bool, str, slice, dtype ...)
        if "type" in value:
            unread.add(where, f"a record of type {str(value.get('type'))[:40]!r} that is neither a tensor nor a value")
            return
        for key, item in value.items():
            yield from _tensors(item, f"{where}.{key}", unread)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _tensors(item, f"{where}[{i}]", unread)
    elif value is not None:
        unread.add(where, f"{type(value).__name__} where a tensor record was expected")


def _number(value) -> Optional[float]:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)     # ints are at most 40 digits (safeio)
    if isinstance(value, str) and len(value) <= 40:
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _dtype(text) -> Optional[str]:
    word = text if isinstance(text, str) and len(text) <= 64 else ""
    for prefix in ("torch.", "mindspore.", "ms."):
        if word.startswith(prefix):
            word = word[len(prefix):]
    return canonical(word) if word else None


def _shape(value) -> Optional[tuple]:
    try:
        return safeio.check_shape(value) if value is not None else None
    except ValueError:
        return None


def _event(record: dict, *, entry: str, io: str, slot: int, order: int, d, tensor_dir: str,
           unread: _Unread, where: str) -> TensorEvent:
    shape = _shape(record.get("shape"))
    dtype = _dtype(record.get("dtype"))
    data_name = record.get("data_name")
    npy = os.path.join(tensor_dir, os.path.basename(data_name)) \
        if isinstance(data_name, str) and 0 < len(data_name) <= 4096 and "\0" not in data_name else None
    stats = None
    source = npy if npy and npy.endswith(".npy") and os.path.isfile(npy) else None
    # PyTorch's tensors are torch.save files: read without torch when their values are asked for (compare);
    # their statistics in dump.json answer the rest, as for a dump without files
    saved = npy if source is None and npy and npy.endswith(".pt") and os.path.isfile(npy) else None
    missing = [k for k, ok in (("type", "type" in record), ("dtype", dtype is not None),
                               ("shape", shape is not None)) if not ok]
    if source is None:
        high, low = _number(record.get("Max")), _number(record.get("Min"))
        empty = shape is not None and 0 in shape
        if high is not None and low is not None:
            stats = stats_from_numbers(math.prod(shape) if shape is not None else 0, None, None, None, high, low,
                                       None, shape, dtype)
        elif not empty and not (dtype == "bool" and isinstance(record.get("Max"), bool)):
            # A tensor whose extremes are not both numbers could hold the bad value: not understood.
            missing.append("Max/Min")
    if missing:
        unread.add(where, f"a tensor record without a readable {', '.join(missing)}")
    note = "" if (source or stats) else "no statistics and no tensor file for this tensor"
    return TensorEvent(source=source or saved or os.path.join(d.path, DUMP_JSON), rank=d.rank,
                       graph=str(d.graph), step=d.step, op_type=entry_op_type(entry), op_name=entry, task_id=0,
                       stream_id=0, timestamp=order, io=io, slot=slot, fmt="ND", dtype=dtype, shape=shape,
                       stats=stats, note=note, loader=functools.partial(torch_pt.load, saved) if saved else None)


def read_step_dir(d, warn: Warn) -> Tuple[List[TensorEvent], List[GraphNode], int, Optional[str]]:
    """(events, graph nodes, files read, why the step cannot be trusted or None) of one msprobe rank/step
    directory (`d` is a layout.DumpDir). The reason is set when dump.json is unreadable, and also when some of
    its records could hold a tensor but were not understood: the verdict is then never clean."""
    path = os.path.join(d.path, DUMP_JSON)
    problems: List[str] = []

    def note(message: str) -> None:
        problems.append(message)
        warn(message)
    doc = _load_json(path, note)
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), dict):
        if doc is not None:
            problems.append(f"{path}: no \"data\" object: not an msprobe dump.json; skipped")
            warn(problems[-1])
        return [], [], 1, problems[0] if problems else f"{path}: unreadable"
    tensor_dir = os.path.join(d.path, TENSOR_DIR)
    stacks = stacks_by_entry(_load_json(os.path.join(d.path, STACK_JSON), warn) or {})
    parents = _load_json(os.path.join(d.path, CONSTRUCT_JSON), warn) or {}
    if not isinstance(parents, dict):
        parents = {}
    unread = _Unread()
    events: List[TensorEvent] = []
    nodes: List[GraphNode] = []
    data = []
    for entry, body in doc["data"].items():
        if isinstance(body, dict):
            data.append((entry, body))
        elif body is not None:
            unread.add(entry, f"an entry body that is a {type(body).__name__}, not an object")

    def make(records, entry, io, order):
        return [_event(r, entry=entry, io=io, slot=i, order=order, d=d, tensor_dir=tensor_dir, unread=unread,
                       where=f"{entry} {io} {i}") for i, r in enumerate(records)]

    grads_of = _parameter_grads_by_owner(data)
    orphans = set(grads_of.get(None, ()))       # a set: 80,000 gradients are one look-up each, not a list scan
    for order, (entry, body) in enumerate(data):
        if _match(_PARAM_GRAD, entry):
            if entry in orphans:   # no backward entry of that Cell: the gradients stand alone
                records, names = _named_grads([entry], doc["data"], 0, unread)
                events.extend(make(records, entry, OUTPUT, order))
                nodes.append(_node(entry, parents, stacks))
                nodes[-1].parameter_grads = names or None
            continue
        forward_entry = forward_of(entry)
        in_keys = ("input_args", "input_kwargs", "parameters") if forward_entry is None else ("input",)
        for key, value in body.items():
            if key not in _BODY_KEYS and isinstance(value, (dict, list, str)):
                unread.add(entry, f"an unknown key {str(key)[:40]!r} holding data")
        ins = [r for key in in_keys for r in _tensors(body.get(key), f"{entry}.{key}", unread)]
        outs = list(_tensors(body.get("output"), f"{entry}.output", unread))
        # Parameter gradients come from the Cell's backward: they are more of its outputs.
        grads, names = _named_grads(grads_of.get(entry, ()), doc["data"], len(outs), unread)
        outs += grads
        events.extend(make(ins, entry, INPUT, order))
        events.extend(make(outs, entry, OUTPUT, order))
        nodes.append(_node(entry, parents, stacks))
        nodes[-1].parameter_grads = names or None
    why = None
    if unread.count:
        why = (f"{path}: {unread.count} record(s) could hold a tensor but were not understood (e.g. "
               f"{'; '.join(unread.examples)}); they could hold the origin")
        warn(why)
    return events, nodes, 1 + (1 if stacks else 0) + (1 if parents else 0), why


def _named_grads(grad_entries, data, first_slot: int, unread) -> Tuple[List[dict], Dict[int, str]]:
    """The tensor records of parameters_grad entries and, per output slot (from first_slot), the parameter each
    is the gradient of: `Cell.lm_head.NormHead.parameters_grad.0: {"weight": [...]}` -> lm_head.weight."""
    records: List[dict] = []
    names: Dict[int, str] = {}
    for grad_entry in grad_entries:
        body = data[grad_entry]
        m = _match(_PARAM_GRAD, grad_entry)
        prefix = (m.group(2) + ".") if m and m.group(2) else ""
        items = body.items() if isinstance(body, dict) and "type" not in body else [(None, body)]
        for key, item in items:
            for record in _tensors(item, f"{grad_entry}.{key}" if key is not None else grad_entry, unread):
                if key is not None:
                    names[first_slot + len(records)] = f"{prefix}{key}"
                records.append(record)
    return records, names


def _parameter_grads_by_owner(data) -> Dict[Optional[str], List[str]]:
    """parameters_grad entry -> the backward entry of the same Cell nearest after it (msprobe writes the
    gradients just before the Cell's backward), else the nearest before; None collects orphans."""
    backward_at: Dict[Tuple[str, str], List[int]] = {}
    for i, (entry, _) in enumerate(data):
        m = _match(_CELL, entry)
        if m and m.group(4) == "backward":
            backward_at.setdefault((m.group(2) or "", m.group(3)), []).append(i)
    owners: Dict[Optional[str], List[str]] = {}
    for i, (entry, _) in enumerate(data):
        m = _match(_PARAM_GRAD, entry)
        if not m:
            continue
        positions = backward_at.get((m.group(2) or "", m.group(3)), [])   # ascending: binary search
        after = bisect.bisect_right(positions, i)
        owner = data[positions[after]][0] if after < len(positions) else (data[positions[-1]][0] if positions
                                                                             else None)
        owners.setdefault(owner, []).append(entry)
    return owners


def _node(entry: str, parents: Dict[str, Optional[str]], stacks: Dict[str, object]) -> GraphNode:
    forward_entry = forward_of(entry)
    # A backward entry runs in the Cell of its forward entry: the forward chain is the one msprobe recorded while
    # the Cells were entered in order (the backward chain is only what was left on its stack).
    anchor = forward_entry if forward_entry is not None and forward_entry in parents else entry
    chain = cell_chain(anchor, parents)
    cell = _match(_CELL, entry)
    if cell:       # a Cell entry is its own innermost scope segment
        own = (cell.group(2) or cell.group(3), cell.group(3))
        if chain and own[0].startswith(_full_path(chain) + "."):
            own = (own[0][len(_full_path(chain)) + 1:], own[1])
        chain = chain + [own]
    root = "Gradients/Default" if forward_entry else "Default"
    scope = "/".join([root] + [f"{attr}-{cls}" for attr, cls in chain] + [entry])
    node = GraphNode(full_name=scope, op_type=entry_op_type(entry),
                     wraps_scope=scope.rsplit("/", 1)[0] if cell else None)
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
    if unread:     # dump.json unreadable, or records in it not understood: never a clean verdict
        content.not_read(os.path.join(d.path, DUMP_JSON))


READER = Reader("msprobe", _read_dir, layouts=(LAYOUT_MSPROBE,))
