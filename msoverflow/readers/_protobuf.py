"""Just enough of the protobuf wire format to read and write CANN's DumpData header: no protoc, no generated code.

Wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 (3/4, the old groups, are rejected).
Messages are decoded flat (no recursion): nesting is as deep as the caller's schema, never the input's.
The decoder works on any indexable buffer (bytes or an mmap) and reports length-delimited fields as
(start, end) offsets, so a tensor stored inline in the header is never copied.
"""
from __future__ import annotations

import struct
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from ..errors import FormatError

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5


class ProtobufError(FormatError):
    """The bytes are not a well-formed protobuf message."""


def read_varint(buf, pos: int, end: int) -> Tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise ProtobufError("varint runs past the end of the message")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ProtobufError("varint longer than 10 bytes")


def iter_fields(buf, start: int = 0, end: Optional[int] = None, max_fields: Optional[int] = None
                ) -> Iterator[Tuple[int, int, Any]]:
    """Yield (field_number, wire_type, value); value is an int, or (start, end) offsets for LEN fields (Any: its
    type follows the wire type, which the callers test and a type checker cannot tie to it).
    More than `max_fields` fields is an error (a corrupt message can hold millions of tiny ones)."""
    pos = start
    end = len(buf) if end is None else end
    count = 0
    value: Any
    while pos < end:
        count += 1
        if max_fields is not None and count > max_fields:
            raise ProtobufError(f"more than {max_fields} fields in one message")
        key, pos = read_varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtobufError(f"field number 0 at offset {pos}")
        if wire == VARINT:
            value, pos = read_varint(buf, pos, end)
        elif wire == FIXED64:
            if pos + 8 > end:
                raise ProtobufError("fixed64 runs past the end of the message")
            value = struct.unpack("<Q", bytes(buf[pos:pos + 8]))[0]
            pos += 8
        elif wire == FIXED32:
            if pos + 4 > end:
                raise ProtobufError("fixed32 runs past the end of the message")
            value = struct.unpack("<I", bytes(buf[pos:pos + 4]))[0]
            pos += 4
        elif wire == LEN:
            length, pos = read_varint(buf, pos, end)
            if pos + length > end:
                raise ProtobufError(f"field {number} says {length} bytes but the message ends first")
            value = (pos, pos + length)
            pos += length
        else:
            raise ProtobufError(f"unsupported wire type {wire} for field {number}")
        yield number, wire, value


def parse(buf, start: int = 0, end: Optional[int] = None) -> Dict[int, List[Tuple[int, object]]]:
    """Group a message's fields by number: {number: [(wire_type, value), ...]} in wire order."""
    fields: Dict[int, List[Tuple[int, object]]] = {}
    for number, wire, value in iter_fields(buf, start, end):
        fields.setdefault(number, []).append((wire, value))
    return fields


def packed_varints(buf, span: Tuple[int, int], limit: Optional[int] = None) -> List[int]:
    """A proto3 packed repeated varint field (at most `limit` values are decoded)."""
    pos, end = span
    values: List[int] = []
    while pos < end and (limit is None or len(values) < limit):
        value, pos = read_varint(buf, pos, end)
        values.append(value)
    return values


# --- encoder (used by the fixture writers and `convert` tests) ---------------------------------------------

def encode_varint(value: int) -> bytes:
    if value < 0:
        value &= (1 << 64) - 1  # int64 negatives are ten-byte two's complement on the wire
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return encode_varint((number << 3) | wire)


def field_varint(number: int, value: int) -> bytes:
    return _key(number, VARINT) + encode_varint(int(value))


def field_bytes(number: int, value: Union[bytes, str]) -> bytes:
    if isinstance(value, str):
        value = value.encode("utf-8")
    return _key(number, LEN) + encode_varint(len(value)) + bytes(value)


def field_packed_varints(number: int, values) -> bytes:
    return field_bytes(number, b"".join(encode_varint(int(v)) for v in values))
