"""The dump file-name grammar, every variant, parsed from the right (op names may contain dots in old dumps).

npy  <= 2.3 : {op_type}.{op_name}.{task}.{stream}.{ts}.{input|output}.{slot}.{format}.npy
npy  2.4+   : {op_type}.{op_name}.{task}.{stream}.{ts}.{input|output}.{slot}.{format}.{DType}.npy
bin  (ACL)  : {op_type}.{op_name}.{task}.{stream}.{ts}
Opdebug     : Opdebug.Node_OpDebug.{task}.{stream}.{ts}[.output.0.json|.npy]
"""
from __future__ import annotations

import csv
import os
import re
from dataclasses import dataclass
from typing import Dict, Optional

from .dtypes import canonical

_DIGITS = re.compile(r"^[0-9]{1,20}$")   # ids and timestamps: uint64 at most, never a million digits

KIND_NPY = "npy"
KIND_BIN = "bin"
KIND_OPDEBUG = "opdebug"


@dataclass(frozen=True)
class ParsedName:
    kind: str                 # npy | bin | opdebug
    op_type: str
    op_name: str
    task_id: int
    stream_id: int
    timestamp: int
    io: Optional[str] = None  # None for bin files (one file holds every input and output)
    slot: Optional[int] = None
    fmt: str = ""
    dtype: Optional[str] = None   # canonical dtype from the 2.4+ `.DType` field


def _ids(tokens, at):
    task, stream, ts = tokens[at], tokens[at + 1], tokens[at + 2]
    if not (_DIGITS.match(task) and _DIGITS.match(stream) and _DIGITS.match(ts)):
        return None
    return int(task), int(stream), int(ts)


def parse(filename: str) -> Optional[ParsedName]:
    """Parse one dump file name; None when it is not a dump tensor/overflow file."""
    if filename.startswith("Opdebug."):
        return _parse_opdebug(filename)
    if filename.endswith(".npy"):
        return _parse_npy(filename[:-4])
    if "." in filename and not filename.endswith((".csv", ".json", ".ir", ".pb", ".txt", ".log", ".dat")):
        return _parse_bin(filename)
    return None


def _parse_npy(stem: str) -> Optional[ParsedName]:
    tokens = stem.split(".")
    dtype = None
    # 2.4+: the last token is a dtype and the io field sits 4 from the end
    if len(tokens) >= 9 and tokens[-4] in ("input", "output") and canonical(tokens[-1]):
        dtype = canonical(tokens[-1])
        tokens = tokens[:-1]
    if len(tokens) < 8 or tokens[-3] not in ("input", "output") or not _DIGITS.match(tokens[-2]):
        return None
    ids = _ids(tokens, len(tokens) - 6)
    if ids is None:
        return None
    op_name = ".".join(tokens[1:-6])
    if not op_name:
        return None
    return ParsedName(KIND_NPY, tokens[0], op_name, *ids, io=tokens[-3], slot=int(tokens[-2]),
                      fmt=tokens[-1], dtype=dtype)


def _parse_bin(name: str) -> Optional[ParsedName]:
    tokens = name.split(".")
    if len(tokens) < 5:
        return None
    ids = _ids(tokens, len(tokens) - 3)
    if ids is None or not tokens[0]:
        return None
    return ParsedName(KIND_BIN, tokens[0], ".".join(tokens[1:-3]), *ids)


def _parse_opdebug(name: str) -> Optional[ParsedName]:
    stem = name
    for suffix in (".json", ".npy"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    tokens = stem.split(".")
    if len(tokens) >= 7 and tokens[-2] == "output":
        tokens = tokens[:-2]
    if len(tokens) < 5:
        return None
    ids = _ids(tokens, len(tokens) - 3)
    if ids is None:
        return None
    return ParsedName(KIND_OPDEBUG, "Opdebug", ".".join(tokens[1:-3]), *ids)


def read_mapping(path: str, warn) -> Dict[str, str]:
    """mapping.csv: `{random name},{original name}` rows (names over 255 chars are replaced by a random one)."""
    from . import safeio
    mapping: Dict[str, str] = {}
    try:
        with safeio.open_regular(path, "r", newline="", encoding="utf-8", errors="replace") as fh:
            if os.fstat(fh.fileno()).st_size > safeio.MAX_READ_BYTES:
                raise safeio.TooLarge(0, f"over the {safeio.MAX_READ_BYTES}-byte limit", path)
            for lineno, row in enumerate(csv.reader(fh), 1):
                if len(row) < 2 or not row[0].strip():
                    if row:
                        warn(f"{path}:{lineno}: mapping row without an original name, ignored")
                    continue
                mapping[os.path.basename(row[0].strip())] = row[1].strip()
    except OSError as exc:
        warn(f"{path}: cannot read mapping file ({exc.strerror})")
    except csv.Error as exc:    # a NUL byte, a field over the csv module's limit: keep the rows read so far
        warn(f"{path}: mapping file is not readable CSV ({exc}); {len(mapping)} row(s) used")
    return mapping


def scope_to_file_name(full_name: str) -> str:
    """How MindSpore 2.x writes a full scoped op name into a file name."""
    return re.sub(r"[/\\. ]", "_", full_name)
