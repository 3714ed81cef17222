"""Headerless tensor files: the bytes of one tensor and nothing else, its dtype (and maybe shape) in the name.

msprobe's adump writes these for dtypes numpy lacks (`{dump file}.{io}.{slot}.{format}.{DTYPE}`, no suffix, e.g.
`....input.0.ND.BF16`); msaccucmp's bin output is `{dump file}.{io}.{slot}.{A_B_C}.{numpy dtype}.{format}.bin`.
bfloat16 is widened to float32 and packed int4/int2/uint1/uint2 unpacked (dtypes.decode_raw); any other dtype
numpy has no type for is marked undecodable, which keeps a verdict from being called clean.
"""
from __future__ import annotations

import math
import os
from typing import Optional, Tuple

import numpy as np

from ..dtypes import SUB_BYTE_BITS, UNDECODABLE, decode_raw, numpy_dtype
from ..model import INPUT, TensorEvent
from ..names import KIND_RAW
from .registry import Reader


def decodable(dtype: Optional[str]) -> bool:
    return dtype is not None and (numpy_dtype(dtype) is not None or dtype == "bfloat16" or dtype in SUB_BYTE_BITS)


def load_raw(path: str, dtype: str, shape: Optional[Tuple[int, ...]] = None) -> np.ndarray:
    """The tensor in a raw file: a memory map for numpy dtypes, a decoded copy for bf16 and packed ints."""
    size = os.path.getsize(path)
    native = numpy_dtype(dtype)
    if native is not None:
        count = size // native.itemsize
        flat = np.memmap(path, dtype=native.newbyteorder("<"), mode="r", shape=(count,)) if count else \
            np.empty(0, native)
    else:
        raw = np.memmap(path, dtype=np.uint8, mode="r", shape=(size,)) if size else np.empty(0, np.uint8)
        flat = decode_raw(raw, dtype)
        if shape is not None and dtype in SUB_BYTE_BITS:
            flat = flat[:math.prod(shape)]
    if shape is not None and math.prod(shape) == flat.size:
        return flat.reshape(shape)
    return flat


def raw_event(path: str, parsed, *, rank: int, graph: str, iteration: int) -> TensorEvent:
    """One TensorEvent for a raw tensor file (`parsed` is its names.ParsedName, kind raw)."""
    dtype = parsed.dtype or (parsed.dtype_word.lower() or None)
    event = TensorEvent(source=path, rank=rank, graph=str(graph), iteration=iteration, op_type=parsed.op_type,
                        op_name=parsed.op_name, task_id=parsed.task_id, stream_id=parsed.stream_id,
                        timestamp=parsed.timestamp, io=parsed.io or INPUT, slot=parsed.slot or 0, fmt=parsed.fmt,
                        dtype=dtype, shape=parsed.shape, context_id=parsed.context_id, thread_id=parsed.thread_id)
    if decodable(parsed.dtype):
        event.loader = lambda: load_raw(path, parsed.dtype, parsed.shape)
    else:
        event.note = (f"{UNDECODABLE}: dtype {parsed.dtype_word or '?'} of a headerless tensor file cannot be "
                      "decoded: not read")
    return event


def _read_dir_files(content, batch) -> None:
    """The registry's call: headerless tensor files [(file name, names.ParsedName)] of one directory."""
    d = content.d
    for name, parsed in batch:
        content.files += 1
        content.events.append(raw_event(content.path(name), parsed, rank=d.rank, graph=d.graph,
                                        iteration=d.iteration))


READER = Reader("raw", _read_dir_files, kinds=(KIND_RAW,))
