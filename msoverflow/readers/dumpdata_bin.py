"""Ascend binary dump files: `[uint64 LE header length][DumpData protobuf][raw bytes of inputs, then outputs]`.

Field numbers (CANN dump_data.proto, see shared/reference/mindspore-dumps.md "Binary dump file"):
DumpData {version=1, dump_time=2, output=3, input=4, buffer=5, op_name=6, attr=7, space=8}
OpOutput {data_type=1, format=2, shape=3, original_op=4, data=5, size=6, original_shape=7, sub_format=8}
OpInput  {data_type=1, format=2, shape=3, data=4, size=5, original_shape=6, sub_format=7}
Shape    {dim=1 repeated uint64}

Only the header is parsed; tensors are handed out as memmap views, so reading events costs no tensor I/O.
"""
from __future__ import annotations

import functools
import mmap
import os
import struct
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

from .. import names, safeio
from ..dtypes import SUB_BYTE_BITS, UNDECODABLE, numpy_dtype
from ..errors import FormatError, TruncatedFile
from ..model import INPUT, OUTPUT, Status, TensorEvent
from . import _protobuf as pb
from .registry import Reader

# data_type enum -> canonical dtype name (msprobe resource/dump_data.proto and adump's AclDumpMsg.proto).
# numpy lacks bfloat16 and the packed sub-byte integers: their bytes are decoded by dtypes.decode_raw.
DATA_TYPES = {
    1: "float32", 2: "float16", 3: "int8", 4: "uint8", 5: "int16", 6: "uint16", 7: "int32", 8: "int64",
    9: "uint32", 10: "uint64", 11: "bool", 12: "float64", 16: "complex64", 17: "complex128",
    27: "bfloat16", 28: "int4", 29: "uint1", 30: "int2", 31: "uint2",
}
# Known numbers whose tensors are not read: they make a verdict inconclusive, never clean.
DATA_TYPE_NAMES = {0: "DT_UNDEFINED", 13: "DT_STRING", 14: "DT_DUAL_SUB_INT8", 15: "DT_DUAL_SUB_UINT8",
                   18: "DT_QINT8", 19: "DT_QINT16", 20: "DT_QINT32", 21: "DT_QUINT8", 22: "DT_QUINT16",
                   23: "DT_RESOURCE", 24: "DT_STRING_REF", 25: "DT_DUAL", 26: "DT_VARIANT",
                   32: "DT_COMPLEX32", 33: "DT_HIFLOAT8", 34: "DT_FLOAT8_E5M2", 35: "DT_FLOAT8_E4M3FN",
                   36: "DT_FLOAT8_E8M0", 37: "DT_FLOAT6_E3M2", 38: "DT_FLOAT6_E2M3", 39: "DT_FLOAT4_E2M1",
                   40: "DT_FLOAT4_E1M2", 41: "DT_HIFLOAT4"}

# format enum -> name used in MindSpore's npy file names.
FORMATS = {
    0: "NCHW", 1: "NHWC", 2: "ND", 3: "NC1HWC0", 4: "FRACTAL_Z", 12: "NC1HWC0_C04", 16: "HWCN", 27: "NDHWC",
    29: "FRACTAL_NZ", 30: "NCDHW", 31: "DHWCN", 32: "NDC1HWC0", 33: "FRACTAL_Z_3D", 34: "CN", 35: "NC",
    47: "NCL",
}
# Formats whose bytes are laid out like a plain C-order array of the shape.
PLAIN_FORMATS = {"NCHW", "NHWC", "ND", "HWCN", "NDHWC", "NCDHW", "DHWCN", "CN", "NC", "NCL"}

# Canonical dtype -> the DType word MindSpore 2.4+ puts in npy file names.
MINDSPORE_DTYPE_WORDS = {
    "float16": "Float16", "float32": "Float32", "float64": "Float64", "bfloat16": "BFloat16",
    "int8": "Int8", "int16": "Int16", "int32": "Int32", "int64": "Int64",
    "uint8": "UInt8", "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64", "bool": "Bool",
    "complex64": "Complex64", "complex128": "Complex128",
    "int4": "Int4", "uint1": "UInt1", "int2": "Int2", "uint2": "UInt2",
}

HEADER_LENGTH_BYTES = 8
MAX_TENSOR_FIELDS = 256    # an OpInput/OpOutput has 8 fields; more is a corrupt header


class DumpFormatError(FormatError):
    """The file is not a readable binary dump (the message names the file)."""


class TruncatedDump(DumpFormatError, TruncatedFile):
    """A binary dump file that ends before its header does."""


@dataclass
class TensorSlot:
    """One input or output described by the header, with where its bytes sit in the file."""
    io: str
    slot: int
    data_type: int
    dtype: Optional[str]                 # canonical numpy name, None when the enum is unknown
    format: int
    format_name: str
    shape: Tuple[int, ...]
    size: int                            # bytes, as the header says
    offset: Optional[int] = None         # absolute file offset of the bytes (None: not in the file)
    original_shape: Optional[Tuple[int, ...]] = None
    inline: bool = False                 # bytes stored in the protobuf `data` field, not the payload
    problem: str = ""                    # why the tensor cannot be read ("" = readable)
    declared: Optional[str] = None       # dtype name of an enum value known but not decodable (hifloat8, ...)
    cut: bool = False                    # its bytes run past the end of the file (truncated payload)

    @property
    def readable(self) -> bool:
        return not self.problem and self.offset is not None and self.dtype is not None

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass
class DumpHeader:
    path: str
    header_length: int
    file_size: int
    version: str = ""
    op_name: str = ""
    dump_time: int = 0
    inputs: List[TensorSlot] = field(default_factory=list)
    outputs: List[TensorSlot] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)   # every per-slot problem, already phrased

    @property
    def cut(self) -> Optional[str]:
        """Why the payload stops short of what the header says; None when every tensor's bytes are there."""
        return next((slot.problem for slot in self.slots() if slot.cut), None)

    @property
    def payload_offset(self) -> int:
        return HEADER_LENGTH_BYTES + self.header_length

    def slots(self) -> List[TensorSlot]:
        return self.inputs + self.outputs

    def slot(self, io: str, index: int) -> TensorSlot:
        group = self.inputs if io == INPUT else self.outputs
        if not 0 <= index < len(group):
            raise DumpFormatError(f"{self.path}: no {io} {index} (the header lists {len(group)})")
        return group[index]


def _shape(buf, span: Tuple[int, int]) -> Tuple[int, ...]:
    dims: List[int] = []
    for number, wire, value in pb.iter_fields(buf, *span, max_fields=safeio.MAX_DIMS + 16):
        if number != 1:
            continue
        if wire == pb.LEN:          # proto3 packs repeated uint64
            dims.extend(pb.packed_varints(buf, value, limit=safeio.MAX_DIMS + 1))
        elif wire == pb.VARINT:
            dims.append(value)
        if len(dims) > safeio.MAX_DIMS:
            raise pb.ProtobufError(f"a shape with more than {safeio.MAX_DIMS} dimensions")
    return tuple(dims)


def _tensor(buf, span: Tuple[int, int], io: str, index: int, path: str) -> TensorSlot:
    # OpOutput and OpInput share 1-3; data/size/original_shape move up by one in OpOutput (original_op=4).
    data_no, size_no, orig_no = (5, 6, 7) if io == OUTPUT else (4, 5, 6)
    data_type = fmt = size = 0
    shape: Tuple[int, ...] = ()
    original_shape = None
    data_span = None
    for number, wire, value in pb.iter_fields(buf, *span, max_fields=MAX_TENSOR_FIELDS):
        if number == 1 and wire == pb.VARINT:
            data_type = value
        elif number == 2 and wire == pb.VARINT:
            fmt = value
        elif number == 3 and wire == pb.LEN:
            shape = _shape(buf, value)
        elif number == data_no and wire == pb.LEN:
            data_span = value
        elif number == size_no and wire == pb.VARINT:
            size = value
        elif number == orig_no and wire == pb.LEN:
            original_shape = _shape(buf, value)
    dtype = DATA_TYPES.get(data_type)
    slot = TensorSlot(io=io, slot=index, data_type=data_type, dtype=dtype, format=fmt,
                      format_name=FORMATS.get(fmt, f"FORMAT_{fmt}"), shape=shape, size=size,
                      original_shape=original_shape or None)
    if dtype is None:
        name = DATA_TYPE_NAMES.get(data_type, "not in the documented enum")
        slot.problem = f"{UNDECODABLE}: data_type {data_type} ({name}) for {io} {index} cannot be decoded: not read"
        if name != "not in the documented enum":
            slot.declared = name[3:].lower()
    if data_span is not None and data_span[1] > data_span[0]:
        slot.inline = True
        slot.offset = data_span[0]          # spans are offsets into the whole file
        slot.size = data_span[1] - data_span[0]
    return slot


def read_dump_header(path: str) -> DumpHeader:
    """Parse the header of a binary dump file without touching the tensor bytes.

    Raises DumpFormatError for a file whose header cannot be read; per-tensor problems (unknown data_type,
    payload shorter than the sizes) are listed in `DumpHeader.problems` and on the slots.
    """
    path = os.fspath(path)
    try:
        with safeio.open_regular(path, "rb") as fh:
            file_size = os.fstat(fh.fileno()).st_size
            head = fh.read(HEADER_LENGTH_BYTES)
            if len(head) < HEADER_LENGTH_BYTES:
                raise TruncatedDump(f"{path}: {file_size} bytes, too short for the 8-byte header length")
            (header_length,) = struct.unpack("<Q", head)
            if HEADER_LENGTH_BYTES + header_length > file_size:
                raise TruncatedDump(f"{path}: header length {header_length} runs past the end of the file "
                                    f"({file_size} bytes): truncated or not a binary dump")
            if header_length == 0:
                raise DumpFormatError(f"{path}: header length is 0: not a binary dump")
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                header = _parse_header(buf, path, header_length, file_size)
    except OSError as exc:
        raise DumpFormatError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return header


def _parse_header(buf, path: str, header_length: int, file_size: int) -> DumpHeader:
    start, end = HEADER_LENGTH_BYTES, HEADER_LENGTH_BYTES + header_length
    header = DumpHeader(path=path, header_length=header_length, file_size=file_size)
    try:
        for number, wire, value in pb.iter_fields(buf, start, end, max_fields=4 * safeio.MAX_TENSOR_SLOTS):
            if number == 1 and wire == pb.LEN:
                header.version = bytes(buf[value[0]:value[1]]).decode("utf-8", "replace")
            elif number == 2 and wire == pb.VARINT:
                header.dump_time = value
            elif number in (3, 4) and len(header.inputs) + len(header.outputs) >= safeio.MAX_TENSOR_SLOTS:
                raise pb.ProtobufError(f"more than {safeio.MAX_TENSOR_SLOTS} inputs and outputs")
            elif number == 3 and wire == pb.LEN:
                header.outputs.append(_tensor(buf, value, OUTPUT, len(header.outputs), path))
            elif number == 4 and wire == pb.LEN:
                header.inputs.append(_tensor(buf, value, INPUT, len(header.inputs), path))
            elif number == 6 and wire == pb.LEN:
                header.op_name = bytes(buf[value[0]:value[1]]).decode("utf-8", "replace")
    except pb.ProtobufError as exc:
        raise DumpFormatError(f"{path}: header is not a DumpData message: {exc}") from exc
    if not header.inputs and not header.outputs and not header.op_name:
        raise DumpFormatError(f"{path}: header holds no op name and no tensors: not a binary dump")
    # Payload: inputs then outputs, each `size` bytes, skipping tensors whose bytes sit inline.
    cursor = end
    for slot in header.slots():
        if slot.inline:
            continue
        if slot.dtype is not None and slot.size == 0 and slot.shape:
            try:    # checked against the file before any product is trusted
                if slot.dtype in SUB_BYTE_BITS:     # packed: several values per byte
                    per_byte = 8 // SUB_BYTE_BITS[slot.dtype]
                    count = safeio.tensor_bytes(slot.shape, 1, (file_size - cursor) * per_byte)
                    slot.size = -(-count // per_byte)
                else:
                    slot.size = safeio.tensor_bytes(slot.shape, int(_itemsize(slot.dtype)), file_size - cursor)
            except safeio.BadNumber:
                slot.size = file_size + 1   # reported as truncated just below
            header.problems.append(f"{path}: {slot.io} {slot.slot} has no size; assumed shape x itemsize")
        if cursor + slot.size > file_size:
            slot.cut = True
            slot.problem = slot.problem or (
                f"{slot.io} {slot.slot} needs {slot.size} bytes at offset {cursor} but the file ends at "
                f"{file_size}: payload truncated")
        else:
            slot.offset = cursor
        cursor += slot.size
    for slot in header.slots():
        if slot.problem:
            header.problems.append(f"{path}: {slot.problem}")
    return header


def _itemsize(dtype: str) -> float:
    """Bytes per element; a fraction for packed sub-byte integers (int4: 0.5)."""
    if dtype in SUB_BYTE_BITS:
        return SUB_BYTE_BITS[dtype] / 8
    if dtype == "bfloat16":
        return 2
    found = numpy_dtype(dtype)
    assert found is not None, dtype         # a decodable dtype (an undecodable one is never sized)
    return found.itemsize


def tensor_view(path: str, slot: TensorSlot):
    """A read-only numpy memmap view of one tensor, shaped when the layout allows (else flat, see `note`)."""
    import numpy as np
    if not slot.readable:
        raise DumpFormatError(f"{path}: {slot.problem or f'{slot.io} {slot.slot} is not in the file'}")
    assert slot.dtype is not None and slot.offset is not None     # readable
    if numpy_dtype(slot.dtype) is None:
        # bfloat16 -> float32, packed int4/int2/uint1/uint2 -> one int8/uint8 per element, decoded in chunks
        from .raw import DecodedTensor
        tensor = DecodedTensor(path, slot.dtype, slot.offset, slot.size,
                               slot.numel if slot.dtype in SUB_BYTE_BITS else None)
        if _shape_fits(slot, tensor.size):
            tensor.shape, tensor.ndim = tuple(slot.shape), len(slot.shape)
        return tensor
    dtype = np.dtype(slot.dtype)
    count = slot.size // dtype.itemsize
    if count == 0:
        flat = np.empty(0, dtype=dtype)
    else:
        flat = np.memmap(path, dtype=dtype, mode="r", offset=slot.offset, shape=(count,))
    if _shape_fits(slot, count):
        return flat.reshape(slot.shape)
    return flat


def _shape_fits(slot: TensorSlot, count: int) -> bool:
    return slot.format_name in PLAIN_FORMATS and count == slot.numel


def layout_note(slot: TensorSlot) -> str:
    """Why a view comes back flat, or ""."""
    if not slot.readable:
        return slot.problem
    assert slot.dtype is not None           # readable
    if slot.dtype in SUB_BYTE_BITS:
        return "" if slot.size * 8 >= slot.numel * SUB_BYTE_BITS[slot.dtype] else \
            f"{slot.size} bytes is too short for {slot.numel} {slot.dtype} values; read flat"
    count = int(slot.size // _itemsize(slot.dtype))
    if _shape_fits(slot, count):
        return ""
    if slot.size % _itemsize(slot.dtype):
        return f"{slot.size} bytes is not a whole number of {slot.dtype} values; read flat"
    if slot.format_name in PLAIN_FORMATS:
        return (f"size {slot.size} bytes holds {count} {slot.dtype} values but shape {list(slot.shape)} has "
                f"{slot.numel}; read flat")
    return (f"stored as {slot.format_name} ({count} values for shape {list(slot.shape)}); "
            "read flat, device layout not restored")


def read_tensor(path: str, io: str, slot: int, header: Optional[DumpHeader] = None):
    """The tensor `io` (INPUT/OUTPUT) number `slot` of a binary dump file, as a memmap view."""
    header = header or read_dump_header(path)
    return tensor_view(header.path, header.slot(io, slot))


def tensor_events(path: str, parsed=None, *, rank: int, graph: str, iteration: int,
                  op_type: Optional[str] = None, op_name: Optional[str] = None,
                  task_id: Optional[int] = None, stream_id: Optional[int] = None,
                  timestamp: Optional[int] = None,
                  warn: Callable[[str], None] = lambda message: None,
                  header: Optional[DumpHeader] = None) -> List[TensorEvent]:
    """One TensorEvent per input/output of a binary dump file, each with a lazy memmap `loader`.

    Name fields: explicit keywords win, then `parsed` (a msoverflow.names.ParsedName of the file name with
    mapping.csv restored), then names.parse of the file name, then the header (op_name, dump_time). Unreadable
    tensors get an event with no loader and the reason in `note`; problems are also passed to `warn`.
    An unreadable header -> warn, [].
    """
    path = os.fspath(path)
    if header is None:
        try:
            header = read_dump_header(path)
        except DumpFormatError as exc:
            warn(str(exc))
            return []
    for problem in header.problems:
        warn(problem)
    parsed = parsed or names.parse(os.path.basename(path))
    if parsed:
        op_type = parsed.op_type if op_type is None else op_type
        op_name = parsed.op_name if op_name is None else op_name
        task_id = parsed.task_id if task_id is None else task_id
        stream_id = parsed.stream_id if stream_id is None else stream_id
        timestamp = parsed.timestamp if timestamp is None else timestamp
    if op_name is None and header.op_name:
        op_name = names.scope_to_file_name(header.op_name)
    if op_type is None and header.op_name:
        # "…/Grad_MatMul/MatMul-op5" -> "MatMul"
        op_type = header.op_name.rsplit("/", 1)[-1].split("-op")[0]
    events = []
    for slot in header.slots():
        loader = None
        if slot.readable:
            loader = _make_loader(path, slot)
        events.append(TensorEvent(
            source=path, rank=rank, graph=str(graph), step=iteration,
            op_type=op_type or "", op_name=op_name or "",
            task_id=task_id if task_id is not None else -1,
            stream_id=stream_id if stream_id is not None else -1,
            timestamp=timestamp if timestamp is not None else header.dump_time,
            io=slot.io, slot=slot.slot, fmt=slot.format_name, dtype=slot.dtype or slot.declared,
            shape=tuple(slot.original_shape or slot.shape), loader=loader, note=layout_note(slot),
            status=Status.UNDECODABLE if slot.dtype is None else Status.TRUNCATED if slot.cut else Status.OK,
            context_id=getattr(parsed, "context_id", None), thread_id=getattr(parsed, "thread_id", None)))
    return events


def _make_loader(path: str, slot: TensorSlot):
    # a partial, not a closure: events travel between processes (analyze --jobs/--scheduler) by pickle
    return functools.partial(tensor_view, path, slot)


def _read_dir_files(content, batch) -> None:
    """The registry's call: binary DumpData files [(file name, names.ParsedName)] of one directory."""
    d = content.d
    for name, parsed in batch:
        path = content.path(name)
        content.files += 1
        try:
            header = read_dump_header(path)
        except DumpFormatError as exc:
            content.not_read(path, Status.TRUNCATED if isinstance(exc, TruncatedFile) else Status.UNREADABLE,
                             str(exc))
            continue
        found = tensor_events(path, parsed, rank=d.rank, graph=d.graph, iteration=d.step, warn=content.warn,
                              header=header)
        if not found:
            content.not_read(path)
        content.events.extend(found)


# acl_dump_{device}.json beside ACL dumps is the dump's config, not a tensor
READER = Reader("dumpdata_bin", _read_dir_files, kinds=(names.KIND_BIN,), ignores=("acl_dump",))
