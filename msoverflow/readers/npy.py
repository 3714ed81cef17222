"""npy tensor files, read lazily through a memory map.

Real CPU quirk (MindSpore 2.10): ops without an fp16 CPU kernel run in fp32 and their files say float16 in the
name AND the npy header while holding fp32 bytes. The payload size tells the truth; we recover the real dtype.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from ..dtypes import canonical


class NpyError(Exception):
    """A file that is not a readable npy tensor; the message names the problem."""


@dataclass(frozen=True)
class NpyHeader:
    shape: Tuple[int, ...]
    header_dtype: np.dtype
    payload_dtype: np.dtype     # what the bytes really are
    fortran: bool
    offset: int

    @property
    def mismatch(self) -> bool:
        return self.header_dtype != self.payload_dtype


def read_header(path: str) -> NpyHeader:
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
            else:
                shape, fortran, dtype = np.lib.format._read_array_header(fh, version)  # 3.0
            offset = fh.tell()
    except OSError as exc:
        raise NpyError(f"cannot read ({exc.strerror})") from None
    except (ValueError, EOFError, SyntaxError) as exc:
        raise NpyError(f"not a valid npy file ({str(exc).splitlines()[0][:80]})") from None
    shape = tuple(int(d) for d in shape)
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    payload = size - offset
    expected = count * dtype.itemsize
    payload_dtype = dtype
    if payload != expected and count > 0 and dtype.kind in "fc":
        if payload % count == 0:
            itemsize = payload // count
            guess = {2: np.float16, 4: np.float32, 8: np.float64}.get(itemsize)
            if guess is None:
                raise NpyError(f"payload of {payload} bytes does not fit shape {shape} of any float dtype")
            payload_dtype = np.dtype(guess).newbyteorder(dtype.byteorder if dtype.byteorder in "<>" else "=")
        elif payload < expected:
            raise NpyError(f"truncated: header says {shape} {dtype} ({expected} bytes), payload has {payload}")
        else:
            raise NpyError(f"payload of {payload} bytes does not match header {shape} {dtype} ({expected} bytes)")
    elif payload < expected:
        raise NpyError(f"truncated: header says {shape} {dtype} ({expected} bytes), payload has {payload}")
    return NpyHeader(shape, dtype, payload_dtype, bool(fortran), offset)


def open_array(path: str, header: Optional[NpyHeader] = None) -> np.ndarray:
    """A read-only memory map of the payload in its real dtype (nothing is read until it is touched)."""
    header = header or read_header(path)
    if header.payload_dtype.hasobject:
        raise NpyError("object arrays are not tensors")
    count = int(np.prod(header.shape, dtype=np.int64)) if header.shape else 1
    if count == 0:
        return np.zeros(header.shape, header.payload_dtype)
    return np.memmap(path, dtype=header.payload_dtype, mode="r", offset=header.offset, shape=header.shape,
                     order="F" if header.fortran else "C")


def header_dtype_name(header: NpyHeader) -> Optional[str]:
    return canonical(header.header_dtype.name)
