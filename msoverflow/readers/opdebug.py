"""Ascend overflow records (`Opdebug.Node_OpDebug.{task}.{stream}.{ts}[.output.0.json]`).

Three encodings (shared/reference/mindspore-dumps.md "Overflow (Opdebug) files"):
- old JSON: {"DHA Atomic Add": {...}, "L2 Atomic Add": {...}, "AI Core": {..., "status"}};
- new JSON: {"magic", "version", "acc_list": {"valid", "acc_type": AIC|AIV|AICPU|SDMA, "data": {...}}};
- binary: a DumpData file whose output[0] bytes hold the raw record, old 2048-byte layout or the new one
  starting with magic 0x5A5A5A5A.
The task/stream ids INSIDE a record name the overflowing op; the ones in the file name belong to the
OpDebug node itself and are only a fallback.
"""
from __future__ import annotations

import os
import re
import struct
from typing import Callable, List, Optional, Sequence, Tuple, TypeVar

from .. import safeio
from ..errors import FormatError
from ..model import OverflowRecord
from ..names import KIND_OPDEBUG
from . import dumpdata_bin
from .registry import Reader

MAGIC = 0x5A5A5A5A
OLD_RECORD_BYTES = 2048
MAX_JSON_BYTES = 16 << 20     # an Opdebug record is a few hundred bytes
AI_CORE_UNITS = {"AI Core", "AIC", "AIV"}
ACC_TYPES = {0: "AIC", 1: "AIV", 2: "AICPU", 3: "SDMA"}
# uint64 fields of one acc_list entry, per accelerator type (new binary layout).
ACC_FIELDS = {
    "AIC": ("model_id", "stream_id", "task_id", "task_type", "context_id", "thread_id", "pc_start",
            "para_base", "core_id", "block_id", "status"),
    "AICPU": ("model_id", "stream_id", "task_id", "task_type", "context_id", "cpu_id", "thread_id", "status"),
    "SDMA": ("model_id", "stream_id", "task_id", "task_type", "context_id", "thread_id", "src_addr", "dst_addr",
             "channel_id", "status"),
}
ACC_FIELDS["AIV"] = ACC_FIELDS["AIC"]
INFO_FIELDS = ("model_id", "stream_id", "task_id", "task_type", "pc_start", "para_base")

AI_CORE_STATUS_BITS = (
    (0x08, "sign flip of the minimum integer"),
    (0x10, "integer overflow"),
    (0x20, "float overflow"),
    (0x80, "negative value converted to unsigned"),
    (0x100, "fp32/int32 to fp16 conversion overflow"),
    (0x400, "cube accumulation overflow"),
)

FILE_NAME = re.compile(r"^Opdebug\.Node_OpDebug\.(?P<task>\d+)\.(?P<stream>\d+)\.(?P<ts>\d+)")


class OpdebugFormatError(FormatError):
    """The file is not a readable Opdebug record (the message names the file)."""


def decode_status(unit: str, status: int) -> List[str]:
    """Status number -> words. AI Core/AIC/AIV status is a bit field; any other unit's status > 0 = overflow."""
    status = int(status)
    if status == 0:
        return []
    if unit in AI_CORE_UNITS:
        words = [word for bit, word in AI_CORE_STATUS_BITS if status & bit]
        rest = status & ~sum(bit for bit, _ in AI_CORE_STATUS_BITS)
        if rest:
            words.append(f"unknown status bits 0x{rest:x}")
        return words
    if "Atomic" in unit:
        return ["atomic add overflow"]
    return [f"{unit} overflow (status {status})"]


def file_name_ids(path: str) -> Optional[Tuple[int, int, int]]:
    """(task, stream, timestamp) from an Opdebug file name: the OpDebug node's ids, not the op's. The stream
    is -1 for names without one (older CANN); FFTS+ names carry four more numbers after the timestamp."""
    from ..names import KIND_OPDEBUG, parse
    parsed = parse(os.path.basename(path))
    if parsed is None or parsed.kind != KIND_OPDEBUG:
        return None
    return parsed.task_id, parsed.stream_id, parsed.timestamp


def _as_int(value) -> Optional[int]:
    """JSON values come as numbers, decimal strings or hex strings ("0x1f")."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    if len(text) > 24:       # no id or status has more digits; refuse before converting
        return None
    try:
        return int(text, 0) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


# ---- decoding into plain entries: {"unit", "task_id", "stream_id", "status", "context_id"?, "thread_id"?} --

def _entry(unit: str, data: dict) -> dict:
    entry = {"unit": unit, "status": _as_int(data.get("status")) or 0,
             "task_id": _as_int(data.get("task_id")), "stream_id": _as_int(data.get("stream_id"))}
    for key in ("context_id", "thread_id", "model_id", "block_idx", "block_id", "core_id"):
        if key in data:
            entry[key] = _as_int(data.get(key))
    return entry


def entries_from_json(doc) -> List[dict]:
    """Both JSON styles -> entries (status 0 included)."""
    if not isinstance(doc, dict):
        raise ValueError("top level is not a JSON object")
    if "acc_list" in doc or "magic" in doc:
        acc = doc.get("acc_list")
        items = acc if isinstance(acc, list) else [acc] if isinstance(acc, dict) else []
        entries = []
        for item in items:
            if not isinstance(item, dict):
                continue
            if "valid" in item and not _as_int(item.get("valid")):
                continue
            acc_type = item.get("acc_type")
            acc_code = _as_int(acc_type)
            unit = ACC_TYPES.get(acc_code, str(acc_type)) if acc_code is not None else str(acc_type or "unknown")
            data = item.get("data")
            if not isinstance(data, dict):
                data = item
            entries.append(_entry(unit, data))
        return entries
    entries = []
    for unit, data in doc.items():
        if isinstance(data, dict):
            entries.append(_entry(unit, data))
    if not entries:
        raise ValueError("no 'AI Core', 'DHA Atomic Add', 'L2 Atomic Add' or 'acc_list' entry")
    return entries


def entries_from_raw(raw: bytes) -> List[dict]:
    """The record bytes held in a binary Opdebug file's output[0] -> entries."""
    if len(raw) >= 8 and struct.unpack_from("<I", raw, 0)[0] == MAGIC:
        return _entries_new_layout(raw)
    if len(raw) < OLD_RECORD_BYTES:
        raise ValueError(f"record is {len(raw)} bytes: neither the 2048-byte layout nor magic 0x5A5A5A5A")

    def info(offset):
        return dict(zip(INFO_FIELDS, struct.unpack_from("<6Q", raw, offset), strict=True))
    dha, l2, core = info(0), info(128), info(256)
    dha["status"] = struct.unpack_from("<Q", raw, 512)[0]
    l2["status"] = struct.unpack_from("<Q", raw, 768)[0]
    core["kernel_code"], core["block_idx"], core["status"] = struct.unpack_from("<3Q", raw, 1024)
    return [_entry("DHA Atomic Add", dha), _entry("L2 Atomic Add", l2), _entry("AI Core", core)]


def _entries_new_layout(raw: bytes) -> List[dict]:
    pos = 8  # magic, version
    entries = []
    while pos + 16 <= len(raw):
        valid, acc_type, _rsv, data_len = struct.unpack_from("<4I", raw, pos)
        pos += 16
        if data_len == 0 or pos + data_len > len(raw):
            break
        unit = ACC_TYPES.get(acc_type)
        if valid and unit:
            names = ACC_FIELDS[unit][:data_len // 8]
            entries.append(_entry(unit, dict(zip(names, struct.unpack_from(f"<{len(names)}Q", raw, pos), strict=True))))
        pos += data_len
    if not entries and pos == 8:
        raise ValueError("magic 0x5A5A5A5A but no acc_list entry")
    return entries


def read_entries(path: str) -> List[dict]:
    """All entries of one Opdebug file, JSON or binary. Raises OpdebugFormatError naming the file."""
    path = os.fspath(path)
    try:
        with safeio.open_regular(path, "rb") as fh:
            head = fh.read(64)
    except OSError as exc:
        raise OpdebugFormatError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if path.endswith(".json") or head.lstrip()[:1] == b"{":
        try:
            return entries_from_json(safeio.load_json(path, limit=MAX_JSON_BYTES))
        except OSError as exc:
            raise OpdebugFormatError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        except (ValueError, UnicodeDecodeError) as exc:
            raise OpdebugFormatError(f"{path}: bad Opdebug JSON: {exc}") from exc
    if head[:8] == b"\0" * 8:
        return _entries_zero_header(path)
    try:
        header = dumpdata_bin.read_dump_header(path)
        if not header.outputs:
            raise OpdebugFormatError(f"{path}: binary Opdebug file has no output[0] record")
        slot = header.outputs[0]
        if slot.offset is None:
            raise OpdebugFormatError(f"{path}: {slot.problem or 'output 0 is not in the file'}")
        with safeio.open_regular(path, "rb") as fh:
            fh.seek(slot.offset)
            raw = fh.read(slot.size)
        return entries_from_raw(raw)
    except dumpdata_bin.DumpFormatError as exc:
        raise OpdebugFormatError(str(exc)) from exc
    except OSError as exc:
        raise OpdebugFormatError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise OpdebugFormatError(f"{path}: bad Opdebug record: {exc}") from exc


# MindSpore's own Opdebug test fixtures (debug_services.cc CheckOpOverflow, tests/st/debugger): header length 0,
# and the overflowing op's ids at fixed offsets of the file.
ZERO_HEADER_RECORD_OFFSET = 321
ZERO_HEADER_STREAM_AT = 16
ZERO_HEADER_TASK_AT = 24
ZERO_HEADER_UNIT = "AI Core"


def _entries_zero_header(path: str) -> List[dict]:
    """A file whose header length is 0: the record MindSpore's debugger reads at offset 321 (stream id at +16,
    task id at +24, little-endian uint64). The file holds no status: its existence is the overflow flag."""
    need = ZERO_HEADER_RECORD_OFFSET + ZERO_HEADER_TASK_AT + 8
    try:
        with open(path, "rb") as fh:
            fh.seek(ZERO_HEADER_RECORD_OFFSET)
            record = fh.read(ZERO_HEADER_TASK_AT + 8)
    except OSError as exc:
        raise OpdebugFormatError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if len(record) < ZERO_HEADER_TASK_AT + 8:
        raise OpdebugFormatError(f"{path}: header length is 0 and the file is shorter than {need} bytes: "
                                 "neither a DumpData file nor MindSpore's fixed-offset Opdebug record")
    stream, = struct.unpack_from("<Q", record, ZERO_HEADER_STREAM_AT)
    task, = struct.unpack_from("<Q", record, ZERO_HEADER_TASK_AT)
    return [{"unit": ZERO_HEADER_UNIT, "status": 1, "task_id": task, "stream_id": stream,
             "status_recorded": False}]


def read_opdebug(path: str, *, rank: int, graph: str, iteration: int, file_timestamp: Optional[int] = None,
                 file_task_id: Optional[int] = None, file_stream_id: Optional[int] = None,
                 warn: Callable[[str], None] = lambda message: None) -> List[OverflowRecord]:
    """OverflowRecords for the entries with status != 0. An unreadable file or one with no flagged entry
    gives a warning and []. The record's timestamp is the file's (`file_timestamp`, else from the name).
    Entries without ids of their own take `file_task_id`/`file_stream_id` when given, else -1 (match_records
    then falls back to the ids in the file name); ids inside the entry always win."""
    path = os.fspath(path)
    try:
        entries = read_entries(path)
    except OpdebugFormatError as exc:
        warn(str(exc))
        return []
    if file_timestamp is None:
        ids = file_name_ids(path)
        file_timestamp = ids[2] if ids else 0
    records = []
    for entry in entries:
        if not entry["status"]:
            continue
        records.append(OverflowRecord(
            source=path, rank=rank, graph=str(graph), step=iteration, timestamp=file_timestamp,
            unit=entry["unit"],
            task_id=_first(entry["task_id"], file_task_id, -1),
            stream_id=_first(entry["stream_id"], file_stream_id, -1),
            status=entry["status"],
            status_words=decode_status(entry["unit"], entry["status"]) if entry.get("status_recorded", True)
            else ["overflow (flagged by the file itself; no status recorded)"],
            context_id=entry.get("context_id"), thread_id=entry.get("thread_id")))
    if not records:
        warn(f"{path}: no overflow flagged (status 0 in every entry)")
    return records


def _first(*values):
    return next(v for v in values if v is not None)


# ---- matching records to dump files ------------------------------------------------------------------

_CANDIDATE_FIELDS = ("op_type", "op_name", "task_id", "stream_id", "timestamp", "context_id", "thread_id")


def _get(candidate, name: str):
    if isinstance(candidate, dict):
        return candidate.get(name)
    if isinstance(candidate, (tuple, list)) and not hasattr(candidate, name):
        index = _CANDIDATE_FIELDS.index(name)
        return candidate[index] if index < len(candidate) else None
    return getattr(candidate, name, None)


Candidate = TypeVar("Candidate")


def match_records(records: Sequence[OverflowRecord],
                  candidates: Sequence[Candidate]) -> List[Tuple[OverflowRecord, Optional[Candidate]]]:
    """Pair each record with the dump file (candidate) of the op it names: same task and stream id (and
    context/thread id when both sides have one), earliest timestamp first. Candidates are
    (op_type, op_name, task_id, stream_id, timestamp[, context_id, thread_id]) tuples, dicts or objects with
    those attributes (a TensorEvent works), from the record's directory.
    A record without ids of its own falls back to the ids in its file name. Unmatched records come back
    paired with None. Matched records get `matched_op` set."""
    ordered = sorted(candidates, key=lambda c: (_get(c, "timestamp") is None, _get(c, "timestamp") or 0))
    result: List[Tuple[OverflowRecord, Optional[Candidate]]] = []
    for record in records:
        task: Optional[int] = record.task_id
        stream: Optional[int] = record.stream_id
        if task is None or task < 0 or stream is None or stream < 0:
            ids = file_name_ids(record.source)
            task, stream = (ids[0], ids[1]) if ids else (None, None)
        found: Optional[Candidate] = None
        if task is not None:
            for candidate in ordered:
                if _get(candidate, "task_id") != task or not _same_stream(stream, _get(candidate, "stream_id")):
                    continue
                if not _same_optional(record.context_id, _get(candidate, "context_id")):
                    continue
                if not _same_optional(record.thread_id, _get(candidate, "thread_id")):
                    continue
                found = candidate
                break
        if found is not None:
            record.matched_op = _get(found, "op_name")
        result.append((record, found))
    return result


def _same_stream(mine, theirs) -> bool:
    """-1 = a name without a stream id (older CANN): matches any stream."""
    return mine == theirs or mine == -1 or theirs == -1


def _same_optional(mine, theirs) -> bool:
    return mine is None or theirs is None or mine == theirs


def is_opdebug_file(path: str) -> bool:
    return os.path.basename(path).startswith("Opdebug.Node_OpDebug.")


def opdebug_as_json(path: str) -> dict:
    """An Opdebug file's entries as new-style JSON (what `convert` writes for binary Opdebug files)."""
    entries = read_entries(path)
    return {"source": os.path.basename(path),
            "acc_list": [{"valid": 1, "acc_type": e["unit"], "data": {k: v for k, v in e.items() if k != "unit"}}
                         for e in entries]}


__all__ = ["read_opdebug", "decode_status", "match_records", "read_entries", "entries_from_json",
           "entries_from_raw", "file_name_ids", "is_opdebug_file", "opdebug_as_json", "OpdebugFormatError",
           "MAGIC"]


def _read_dir_files(content, batch) -> None:
    """The registry's call: Opdebug files [(file name, names.ParsedName)] of one directory."""
    d = content.d
    for name, parsed in batch:
        path = content.path(name)
        content.files += 1
        try:
            read_entries(path)
        except OpdebugFormatError:
            content.not_read(path)
        content.records.extend(read_opdebug(
            path, rank=d.rank, graph=d.graph, iteration=d.step, file_timestamp=parsed.timestamp,
            file_task_id=parsed.task_id, file_stream_id=parsed.stream_id, warn=content.warn))


READER = Reader("opdebug", _read_dir_files, kinds=(KIND_OPDEBUG,))
