"""MindSpore strategy checkpoints: which pipeline stage a rank's graph belongs to, and how many devices a stage has.

MindSpore writes one when `strategy_ckpt_config={"save_file": ...}` (or the older `strategy_ckpt_save_file`) is
set; MindFormers saves them as `output/strategy/ckpt_strategy_rank_N.ckpt`. Two encodings, the same content
(mindspore/ccsrc/frontend/parallel/strategy_checkpoint/strategy_checkpoint_info.cc, node_strategy.proto):

- protobuf `ParallelStrategyMap` (proto2): 1 current_stage (a save counter, not a pipeline stage),
  2 parallel_strategy_item {1 node_name, 2 parallel_strategys {1 stage, 2 parallel_strategy {1 dim}}},
  3 parallel_layout_item {1 param_name, 2 parallel_layouts {1 dev_matrix {1 dim}, 2 tensor_map {1 dim}, ...}};
- JSON (a `.json` save file): {"current_stage", "parallel_strategy_item": {node: {"stage", "parallel_strategy"}},
  "parallel_layout_item": {param: {"dev_matrix", "tensor_map", "tensor_shape", ...}}}.

What the layout needs from it: the pipeline stage of each op (`stage`) and the devices of one stage (the product of
a parameter layout's device matrix; MindSpore computes a rank's stage as `rank // stage_device_num`). Data and
tensor parallel sizes are not recorded as such (each op has its own device matrix), so they are not guessed.
The protobuf is decoded by the project's one wire-format decoder (readers/_protobuf.py, also DumpData's), without
MindSpore or protobuf installed.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterator, List, Optional, Tuple

from . import safeio
from .errors import FormatError
from .readers import _protobuf as pb

MAX_FILE_BYTES = 256 << 20      # a large model's strategy file is a few MB
MAX_JSON_BYTES = 32 << 20       # JSON is parsed whole into objects (~10x its size in memory)
MAX_STAGE = 1 << 16
MAX_DEVICES = 1 << 20
MAX_DIMS = 64                   # a device matrix or tensor map has a handful of dimensions
MAX_ITEMS = 1 << 17             # operators or parameters in one file (a 70B-parameter model has ~10^4)
MAX_INPUTS = 1 << 12            # fields of one operator's strategy: its stage and one strategy per input
MAX_LAYOUT_FIELDS = 1 << 14     # fields of one parameter's layouts (device matrix, tensor map, split shapes, ...)
_RANK_IN_NAME = re.compile(r"rank_?([0-9]{1,6})(?![0-9])")


class StrategyError(FormatError):
    """Not a strategy checkpoint, or a broken one."""


@dataclass
class StrategyFacts:
    path: str
    stages: FrozenSet[int]                   # pipeline stages of the ops this file lists
    stage_devices: Optional[int]             # devices in one stage (largest device-matrix product); None: no layouts
    rank: Optional[int] = None               # the rank in the file's name (ckpt_strategy_rank_3.ckpt), if any
    device_counts: FrozenSet[int] = field(default_factory=frozenset)   # every device-matrix product seen


# ---- protobuf (the project's one wire-format decoder: readers/_protobuf.py) ----------------------------------

def _dims(buf: bytes, span: Tuple[int, int]) -> List[int]:
    """A repeated uint32 `dim` (field 1), packed or not."""
    dims: List[int] = []
    for number, wire, value in pb.iter_fields(buf, *span, max_fields=MAX_DIMS):
        if number != 1:
            continue
        if wire == pb.VARINT:
            dims.append(value)
        elif wire == pb.LEN:
            dims += pb.packed_varints(buf, value, limit=MAX_DIMS)
    return dims


def _product(dims: List[int]) -> Optional[int]:
    total = 1
    for dim in dims:
        if not 1 <= dim <= MAX_DEVICES:
            return None
        total *= dim
        if total > MAX_DEVICES:
            return None
    return total if dims else None


def _messages(buf: bytes, span: Tuple[int, int], number: int, max_fields: int) -> Iterator[Tuple[int, int]]:
    """The spans of the length-delimited fields `number` of the message at `span` (at most max_fields fields)."""
    for n, wire, value in pb.iter_fields(buf, *span, max_fields=max_fields):
        if n == number and wire == pb.LEN:
            yield value


def _from_protobuf(data: bytes) -> Tuple[set, set]:
    """Every field count is bounded and every stage range-checked as it is decoded: a file of 20 million stage
    varints is refused after a few thousand, never collected."""
    stages, devices = set(), set()
    try:
        for number, wire, item in pb.iter_fields(data, max_fields=2 * MAX_ITEMS + 16):
            if wire != pb.LEN:
                continue
            if number == 2:                                            # ParallelStrategyItem
                for strategys in _messages(data, item, 2, max_fields=16):                  # ParallelStrategys
                    for n, w, stage in pb.iter_fields(data, *strategys, max_fields=MAX_INPUTS):
                        if n == 1 and w == pb.VARINT:
                            if stage > MAX_STAGE:
                                raise StrategyError(f"a pipeline stage beyond {MAX_STAGE}")
                            stages.add(stage)
            elif number == 3:                                          # ParallelLayoutItem
                for layouts in _messages(data, item, 2, max_fields=16):                    # ParallelLayouts
                    for matrix in _messages(data, layouts, 1, max_fields=MAX_LAYOUT_FIELDS):    # DevMatrix
                        count = _product(_dims(data, matrix))
                        if count:
                            devices.add(count)
    except pb.ProtobufError as exc:
        raise StrategyError(str(exc)) from None
    return stages, devices


def _from_json(doc: object) -> Tuple[set, set]:
    if not isinstance(doc, dict) or not ({"parallel_strategy_item", "parallel_layout_item"} & set(doc)):
        raise StrategyError("no parallel_strategy_item or parallel_layout_item: not a strategy checkpoint")
    stages, devices = set(), set()
    items = doc.get("parallel_strategy_item") or {}
    layouts = doc.get("parallel_layout_item") or {}
    if not isinstance(items, dict) or not isinstance(layouts, dict):
        raise StrategyError("parallel_strategy_item and parallel_layout_item must be objects")
    if len(items) > MAX_ITEMS or len(layouts) > MAX_ITEMS:
        raise StrategyError(f"more than {MAX_ITEMS} operators or parameters")
    for entry in items.values():
        stage = entry.get("stage") if isinstance(entry, dict) else None
        if isinstance(stage, int) and not isinstance(stage, bool):
            if not 0 <= stage <= MAX_STAGE:
                raise StrategyError(f"a pipeline stage of {safeio.brief(stage)}, not 0 to {MAX_STAGE}")
            stages.add(stage)
    for entry in layouts.values():
        matrix = entry.get("dev_matrix") if isinstance(entry, dict) else None
        if isinstance(matrix, list) and len(matrix) <= MAX_DIMS \
                and all(isinstance(d, int) and not isinstance(d, bool) for d in matrix):
            count = _product(matrix)
            if count:
                devices.add(count)
    return stages, devices


def read_strategy(path: str) -> StrategyFacts:
    """The facts of one strategy checkpoint; StrategyError (or OSError) when it cannot be read as one."""
    json_file = path.lower().endswith(".json")
    try:
        data = safeio.read_bytes(path, MAX_JSON_BYTES if json_file else MAX_FILE_BYTES)
    except safeio.TooLarge as exc:
        raise StrategyError(exc.strerror) from None
    if json_file:
        try:
            doc = safeio.loads_json(data.decode("utf-8", errors="replace"))
        except (ValueError, RecursionError) as exc:
            raise StrategyError(f"not valid JSON ({type(exc).__name__})") from None
        stages, devices = _from_json(doc)
    else:
        stages, devices = _from_protobuf(data)
    if not stages and not devices:
        raise StrategyError("no operator strategies and no parameter layouts in it")
    match = _RANK_IN_NAME.search(os.path.basename(path))
    return StrategyFacts(path=path, stages=frozenset(stages), stage_devices=max(devices) if devices else None,
                         rank=int(match.group(1)) if match else None, device_counts=frozenset(devices))


def is_strategy_name(name: str) -> bool:
    """`ckpt_strategy_rank_3.ckpt`, `strategy.json`: the name says strategy (a model's weights are .ckpt too)."""
    lower = name.lower()
    return "strateg" in lower and lower.endswith((".ckpt", ".json"))


def strategy_files(folder: str, limit: int = 4096) -> List[str]:
    """The strategy checkpoints in a folder, by name, sorted."""
    try:
        names = sorted(n for n in os.listdir(folder) if is_strategy_name(n))[:limit]
    except OSError:
        return []
    return [p for p in (os.path.join(folder, n) for n in names) if safeio.is_regular(p)]


def rank_stages(facts: List[StrategyFacts]) -> Dict[int, int]:
    """rank -> its pipeline stage, from files that name their rank and hold the ops of one stage."""
    return {f.rank: next(iter(f.stages)) for f in facts if f.rank is not None and len(f.stages) == 1}


__all__ = ["StrategyFacts", "StrategyError", "read_strategy", "strategy_files", "rank_stages",
           "is_strategy_name"]
