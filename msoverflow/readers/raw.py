"""Headerless tensor files: the bytes of one tensor and nothing else, its dtype (and maybe shape) in the name.

msprobe's adump writes these for dtypes numpy lacks (`{dump file}.{io}.{slot}.{format}.{DTYPE}`, no suffix, e.g.
`....input.0.ND.BF16`); msaccucmp's bin output is `{dump file}.{io}.{slot}.{A_B_C}.{numpy dtype}.{format}.bin`.
bfloat16 is widened to float32 and packed int4/int2/uint1/uint2 unpacked (dtypes.decode_raw); any other dtype
numpy has no type for is marked undecodable, which keeps a verdict from being called clean.
"""
from __future__ import annotations

import functools
import math
import os
from typing import Optional, Tuple, TypeGuard

import numpy as np

from ..dtypes import SUB_BYTE_BITS, UNDECODABLE, decode_raw, numpy_dtype
from ..model import INPUT, Status, TensorEvent
from ..names import KIND_RAW
from .registry import Reader


def decodable(dtype: Optional[str]) -> TypeGuard[str]:
    return dtype is not None and (numpy_dtype(dtype) is not None or dtype == "bfloat16" or dtype in SUB_BYTE_BITS)


class DecodedTensor:
    """A tensor stored in a dtype numpy lacks (bfloat16, packed int4/int2/uint1/uint2), decoded on demand.
    Statistics read it chunk by chunk (stats._chunks calls `chunks`), so memory does not grow with the tensor;
    np.asarray() decodes it whole (repro and convert's explicit copies)."""

    def __init__(self, path: str, dtype: str, offset: int, nbytes: int, numel: Optional[int] = None,
                 shape: Optional[Tuple[int, ...]] = None):
        self.path, self.name, self.offset, self.nbytes = path, dtype, offset, nbytes
        bits = SUB_BYTE_BITS.get(dtype)
        self.per_byte = 8 // bits if bits else None
        decoded = nbytes // 2 if self.per_byte is None else nbytes * self.per_byte
        self.size = decoded if numel is None else min(decoded, numel)
        self.dtype = np.dtype("<f4") if dtype == "bfloat16" else np.dtype(np.int8 if dtype.startswith("int")
                                                                          else np.uint8)
        self.shape = tuple(shape) if shape is not None and math.prod(shape) == self.size else (self.size,)
        self.ndim = len(self.shape)

    class flags:      # what chunk readers ask of an array's layout (stats, comparison): flat, C order
        c_contiguous, f_contiguous = True, False

    def chunks(self, elements: int):
        """Decoded flat chunks of about `elements` values, read from the file through safeio."""
        from ..safeio import open_regular
        step = max(1, elements // self.per_byte) if self.per_byte else max(2, elements * 2)
        remaining_bytes = self.nbytes - (self.nbytes % 2 if self.per_byte is None else 0)
        remaining = self.size
        with open_regular(self.path, "rb") as fh:
            fh.seek(self.offset)
            while remaining > 0 and remaining_bytes > 0:
                data = fh.read(min(step, remaining_bytes))
                if not data:
                    return
                remaining_bytes -= len(data)
                decoded = decode_raw(np.frombuffer(data, dtype=np.uint8), self.name)
                assert decoded is not None          # bfloat16 or a packed integer: what this class holds
                chunk = decoded[:remaining]
                remaining -= chunk.size
                yield chunk

    def __array__(self, dtype=None, copy=None):
        parts = list(self.chunks(1 << 20))
        whole = np.concatenate(parts) if parts else np.empty(0, self.dtype)
        whole = whole.reshape(self.shape) if whole.size == self.size else whole
        return whole.astype(dtype) if dtype is not None else whole


def load_raw(path: str, dtype: str, shape: Optional[Tuple[int, ...]] = None):
    """The tensor in a raw file: a memory map for numpy dtypes, a DecodedTensor for bf16 and packed ints."""
    size = os.path.getsize(path)
    native = numpy_dtype(dtype)
    if native is None:
        return DecodedTensor(path, dtype, 0, size, math.prod(shape) if shape is not None else None, shape)
    count = size // native.itemsize
    flat = np.memmap(path, dtype=native.newbyteorder("<"), mode="r", shape=(count,)) if count else \
        np.empty(0, native)
    if shape is not None and math.prod(shape) == flat.size:
        return flat.reshape(shape)
    return flat


def raw_event(path: str, parsed, *, rank: int, graph: str, iteration: int) -> TensorEvent:
    """One TensorEvent for a raw tensor file (`parsed` is its names.ParsedName, kind raw)."""
    dtype = parsed.dtype or (parsed.dtype_word.lower() or None)
    event = TensorEvent(source=path, rank=rank, graph=str(graph), step=iteration, op_type=parsed.op_type,
                        op_name=parsed.op_name, task_id=parsed.task_id, stream_id=parsed.stream_id,
                        timestamp=parsed.timestamp, io=parsed.io or INPUT, slot=parsed.slot or 0, fmt=parsed.fmt,
                        dtype=dtype, shape=parsed.shape, context_id=parsed.context_id, thread_id=parsed.thread_id)
    if decodable(parsed.dtype):
        # a partial, not a closure: events travel between processes (analyze --jobs/--scheduler) by pickle
        event.loader = functools.partial(load_raw, path, parsed.dtype, parsed.shape)
    else:
        event.status = Status.UNDECODABLE
        event.note = (f"{UNDECODABLE}: dtype {parsed.dtype_word or '?'} of a headerless tensor file cannot be "
                      "decoded: not read")
    return event


def _read_dir_files(content, batch) -> None:
    """The registry's call: headerless tensor files [(file name, names.ParsedName)] of one directory."""
    d = content.d
    for name, parsed in batch:
        content.files += 1
        content.events.append(raw_event(content.path(name), parsed, rank=d.rank, graph=d.graph,
                                        iteration=d.step))


READER = Reader("raw", _read_dir_files, kinds=(KIND_RAW,))
