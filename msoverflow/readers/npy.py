"""npy tensor files, read lazily through a memory map.

Real CPU quirk (MindSpore 2.10): ops without an fp16 CPU kernel run in fp32 and their files say float16 in the
name AND the npy header while holding fp32 bytes. The payload size tells the truth; we recover the real dtype.
"""
from __future__ import annotations

import ast
import functools
import math
import os
import re
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import numpy as np

from .. import safeio
from ..dtypes import canonical
from ..errors import FormatError, TruncatedFile
from ..names import KIND_NPY
from .reader import Reader


class NpyError(FormatError):
    """A file that is not a readable npy tensor; the message names the problem."""


class TruncatedNpy(NpyError, TruncatedFile):
    """An npy file that stops short of what its header says (or is empty)."""


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


SMALL = 1 << 20   # files up to this size are read in one go; larger ones are memory-mapped
MAX_HEADER = 1 << 20

_MAGIC = b"\x93NUMPY"
_FAST_HEADER = re.compile(r"^\{'descr': '([<>|=][a-zA-Z]\d+|\|b1)', 'fortran_order': (True|False), "
                          r"'shape': \(([\d, ]*)\), \}\s*$")


@functools.lru_cache(maxsize=1024)
def _parse_header_dict(text: str):
    """Cached: the tensors of one dump share a handful of header texts."""
    try:
        m = _FAST_HEADER.match(text)
        if m:  # the exact form numpy (and MindSpore) write: no need for a Python-literal parser
            shape = tuple(safeio.int_text(d, "shape dimension") for d in m.group(3).replace(" ", "").split(",")
                          if d)
            return safeio.check_shape(shape), m.group(2) == "True", np.dtype(m.group(1))
        if len(text) > 65535 or safeio.source_nesting(text) > 8:
            raise ValueError("header too long or too deeply nested")
        d = ast.literal_eval(text)
        if not isinstance(d, dict):
            raise TypeError("header is not a dict")
        return (safeio.check_shape(d["shape"]), bool(d["fortran_order"]),
                np.lib.format.descr_to_dtype(d["descr"]))
    except (ValueError, SyntaxError, KeyError, TypeError, OverflowError, MemoryError, RecursionError) as exc:
        raise NpyError(f"not a valid npy file (bad header: {str(exc)[:60]})") from None


def _parse_prefix(prefix: bytes, size: int):
    if len(prefix) < 10 and _MAGIC.startswith(prefix[:6]):
        raise TruncatedNpy("truncated inside the npy header" if prefix else "empty file")
    if not prefix.startswith(_MAGIC):
        raise NpyError("not a valid npy file (no NUMPY magic)")
    major = prefix[6]
    if major == 1:
        length, start = int.from_bytes(prefix[8:10], "little"), 10
    elif major in (2, 3):
        length, start = int.from_bytes(prefix[8:12], "little"), 12
    else:
        raise NpyError(f"not a valid npy file (format version {major})")
    if start + length > size:
        raise TruncatedNpy("truncated inside the npy header")
    if length > MAX_HEADER:
        raise NpyError(f"npy header of {length} bytes (at most {MAX_HEADER} for a tensor)")
    encoding = "utf8" if major == 3 else "latin1"
    if start + length > len(prefix):
        return None, start, start + length, encoding
    return prefix[start:start + length].decode(encoding), start, start + length, encoding


def read_header(path: str, prefix: Optional[bytes] = None, size: Optional[int] = None) -> NpyHeader:
    try:
        if prefix is None:
            with safeio.open_regular(path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size if size is None else size
                prefix = fh.read(4096)
        size = safeio.regular_size(path) if size is None else size
        text, start, offset, encoding = _parse_prefix(prefix, size)
        if text is None:  # a header longer than the first read
            with safeio.open_regular(path, "rb") as fh:
                text = fh.read(offset)[start:].decode(encoding)
    except OSError as exc:
        raise NpyError(f"cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise NpyError("not a valid npy file (header is not text)") from None
    shape, fortran, dtype = _parse_header_dict(text)
    payload = size - offset
    if dtype.itemsize == 0 or dtype.hasobject or dtype.subdtype is not None or dtype.fields is not None:
        # object, structured and sub-array dtypes ('(2,2)f4' holds 4 values per element) are not tensors
        raise NpyError(f"dtype {dtype} is not a tensor dtype")
    try:   # the claimed size is checked against the file before anything is computed from it
        count = safeio.tensor_bytes(shape, 1, max(payload, 0), "npy header") if shape else 1
    except safeio.BadNumber:
        raise TruncatedNpy(f"truncated: header says {shape[:8]} {dtype}, more than the file's {payload} "
                       f"payload bytes") from None
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
            raise TruncatedNpy(f"truncated: header says {shape} {dtype} ({expected} bytes), payload has {payload}")
        else:
            raise NpyError(f"payload of {payload} bytes does not match header {shape} {dtype} ({expected} bytes)")
    elif payload < expected:
        raise TruncatedNpy(f"truncated: header says {shape} {dtype} ({expected} bytes), payload has {payload}")
    return NpyHeader(shape, dtype, payload_dtype, bool(fortran), offset)


def open_array(path: str, header: Optional[NpyHeader] = None) -> np.ndarray:
    """A read-only memory map of the payload in its real dtype (nothing is read until it is touched)."""
    header = header or read_header(path)
    if header.payload_dtype.hasobject:
        raise NpyError("object arrays are not tensors")
    count = math.prod(header.shape) if header.shape else 1
    if count == 0:
        return np.zeros(header.shape, header.payload_dtype)
    return np.memmap(path, dtype=header.payload_dtype, mode="r", offset=header.offset, shape=header.shape,
                     order="F" if header.fortran else "C")


FIRST_READ = 1 << 16


def read_start(path: str) -> Tuple[bytes, bool]:
    """The file's bytes up to SMALL + 1 with plain reads (one open, no stat): (bytes, True) when that is the
    whole file, (first bytes, False) for a larger one. Opened non-blocking, so a FIFO or device never hangs
    the scan; what is not a regular npy file then fails to parse, and load() (safeio) says why."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        blob = os.read(fd, FIRST_READ)
        if len(blob) < FIRST_READ:
            return blob, True
        parts = [blob]
        total = len(blob)
        while total <= SMALL:
            more = os.read(fd, SMALL + 1 - total)
            if not more:
                break
            parts.append(more)
            total += len(more)
        return b"".join(parts), total <= SMALL
    finally:
        os.close(fd)


_HEADERS: dict = {}


def header_of_bytes(path: str, blob: bytes) -> NpyHeader:
    """read_header() of a whole small file in memory, remembered by its header bytes and size: the files of a
    dump share a handful of headers, so most files cost one dictionary look-up."""
    if blob[:6] != _MAGIC or len(blob) < 10 or blob[6] != 1:
        return read_header(path, blob, len(blob))
    key = (blob[:10 + int.from_bytes(blob[8:10], "little")], len(blob))
    header = _HEADERS.get(key)
    if header is None:
        header = read_header(path, blob, len(blob))
        if len(_HEADERS) < 4096:
            _HEADERS[key] = header
    return header


_NONBLOCKING = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)


class SmallReader:
    """The batch reader's first half, for files read one after another (a step's outputs: walk.py's scan;
    the outputs of matched op runs, one reader per side: comparison/metrics.py): each file read with one open and
    one read (non-blocking: a FIFO or device never hangs the scan); a file whose size and header bytes are those
    of the whole file read before takes that file's header without parsing it (a step's files mostly share one)."""
    __slots__ = ("_last",)

    def __init__(self):
        self._last: Optional[Tuple[bytes, int, NpyHeader]] = None   # header bytes, file size, header

    def read(self, path: str) -> Tuple[bytes, NpyHeader, bool]:
        """(bytes, header, whole): the whole file (up to SMALL) and its header, or the first bytes and header of a
        larger one (whole False: open_array() reads it). READ_ERRORS when it cannot be read or parsed."""
        fd = os.open(path, _NONBLOCKING)
        try:
            blob = os.read(fd, FIRST_READ)
        finally:
            os.close(fd)
        last = self._last
        if last is not None and len(blob) == last[1] and blob.startswith(last[0]):
            return blob, last[2], True
        if len(blob) < FIRST_READ:
            whole = True
        else:
            blob, whole = read_start(path)
        if not whole:
            return blob, read_header(path, blob[:4096], os.path.getsize(path)), False
        header = header_of_bytes(path, blob)
        if len(blob) < FIRST_READ:       # a file of this size is known whole from its first read alone
            self._last = (blob[:header.offset], len(blob), header)
        return blob, header, True


def stack_payloads(blobs: Sequence[bytes], header: NpyHeader) -> np.ndarray:
    """The batch reader's second half: the payloads of small files of one header and one size as the rows of one
    matrix of header.payload_dtype (one join; no array per file)."""
    count = math.prod(header.shape) if header.shape else 1
    matrix = np.frombuffer(b"".join(blobs), dtype=np.uint8).reshape(len(blobs), len(blobs[0]))
    return matrix[:, header.offset:header.offset + count * header.payload_dtype.itemsize].view(header.payload_dtype)


def load(path: str) -> Tuple[NpyHeader, np.ndarray]:
    """Header and data; small files in one read, large ones memory-mapped so memory stays flat."""
    try:
        with safeio.open_regular(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > SMALL:
                header = read_header(path, size=size)
                return header, open_array(path, header)
            blob = fh.read(SMALL + 1)
    except OSError as exc:
        raise NpyError(f"cannot read ({exc.strerror})") from None
    header = read_header(path, blob, len(blob))
    if header.payload_dtype.hasobject:
        raise NpyError("object arrays are not tensors")
    count = math.prod(header.shape) if header.shape else 1
    array = np.frombuffer(blob, dtype=header.payload_dtype, count=count, offset=header.offset)
    return header, array.reshape(header.shape, order="F" if header.fortran else "C")


def header_dtype_name(header: NpyHeader) -> Optional[str]:
    return canonical(header.header_dtype.name)


def save(path: str, tensor) -> None:
    """An npy file of `tensor` without a copy of it in memory: a memory-mapped tensor's bytes are copied from its
    file in chunks (plain reads, so neither a copy nor the map's pages stay resident), a tensor decoded on demand
    (readers.raw.DecodedTensor: bf16, packed ints) is decoded chunk by chunk; anything else goes to np.save."""
    chunk_bytes = 8 << 20
    if isinstance(tensor, np.memmap) and tensor.filename and tensor.flags.c_contiguous:
        with open(path, "wb") as out, safeio.open_regular(tensor.filename, "rb") as src:
            np.lib.format.write_array_header_1_0(out, np.lib.format.header_data_from_array_1_0(tensor))
            src.seek(tensor.offset)
            remaining = tensor.nbytes
            while remaining > 0:
                data = src.read(min(chunk_bytes, remaining))
                if not data:
                    raise OSError(f"{tensor.filename}: shorter than its tensor")
                out.write(data)
                remaining -= len(data)
        return
    if not hasattr(tensor, "chunks"):
        np.save(path, tensor)
        return
    with open(path, "wb") as out:
        header = {"descr": np.lib.format.dtype_to_descr(tensor.dtype), "fortran_order": False,
                  "shape": tuple(tensor.shape)}
        np.lib.format.write_array_header_1_0(out, header)
        for chunk in tensor.chunks(chunk_bytes // max(tensor.dtype.itemsize, 1)):
            out.write(np.ascontiguousarray(chunk).tobytes())


def _read_dir_files(content, batch) -> None:
    """The registry's call: a directory's npy files and their names as columns (names.parse_many)."""
    files, columns = batch
    if content.table_covers_npy:      # statistic.csv has a row for each: neither the name nor the tensor is needed
        content.files += len(files)
        return
    for i in columns.rejected:
        content.warn(f"{content.path(files[i])}: file name not understood, skipped")
        content.unknown.append(content.path(files[i]))
    content.npy_files, content.npy = files, columns
    content.files += len(columns.rows)


READER = Reader("npy", _read_dir_files, kinds=(KIND_NPY,))
