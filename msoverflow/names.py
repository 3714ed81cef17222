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


@dataclass
class NpyNames:
    """Many npy file names parsed at once, as columns (row i = names[rows[i]]). `prefix` is the
    `{op_type}.{op_name}.{task}.{stream}` part: it alone tells which op run a file belongs to."""
    rows: list
    prefix: list
    timestamp: list
    io: list
    slot: list
    fmt: list
    dtype: list
    rejected: list            # indices of names that are not npy dump names


_IO = frozenset(("input", "output"))


_DIGIT_LINES = re.compile(r"[0-9]+(?:\n[0-9]+)*")
_SHAPE_LIKE = re.compile(r"^[0-9]+(?:[x_][0-9]+)*$")
# {op_type}.{op_name}.{task}.{stream}, one per line, the op name's last dotted token not a bare number
_PLAIN_PREFIX = r"[^.\n]*\.(?:[^\n]*\.)?[^.\n]*[^.\n\d][^.\n]*\.[0-9]+\.[0-9]+"
_PLAIN_PREFIX_LINES = re.compile(f"{_PLAIN_PREFIX}(?:\n{_PLAIN_PREFIX})*")


def _columns_of_one_form(filenames, fields: int, with_dtype: bool) -> Optional[NpyNames]:
    """Every name in one form (2.4+ with `.DType`, or the older one): columns from one right split per name,
    each check made once per column (a set, one regex over the joined digits). None when any name differs."""
    if not all(name.endswith(".npy") for name in filenames) or any("\n" in name for name in filenames):
        return None                      # (the checks below join columns with newlines)
    parts = [name[:-4].rsplit(".", fields) for name in filenames]
    if not all(len(p) == fields + 1 for p in parts) or not {p[2] for p in parts} <= _IO:
        return None
    stamps, slots = [p[1] for p in parts], [p[3] for p in parts]
    if not (_DIGIT_LINES.fullmatch("\n".join(stamps)) and _DIGIT_LINES.fullmatch("\n".join(slots))):
        return None
    prefixes = [p[0] for p in parts]
    # Only the plain form: an op name whose last dotted token is a number (sub-task ids after the timestamp,
    # a name without a stream id), a sliced op name or a shape in the format field are read by parse() alone.
    joined = "\n".join(set(prefixes))
    if "_lxslice" in joined or not _PLAIN_PREFIX_LINES.fullmatch(joined) \
            or any(_SHAPE_LIKE.match(f) for f in {p[4] for p in parts}):
        return None
    if with_dtype:
        dtypes = {token: canonical(token) for token in {p[5] for p in parts}}
        if None in dtypes.values():
            return None
        dtype = [dtypes[p[5]] for p in parts]
    else:
        dtype = [None] * len(parts)
    return NpyNames(list(range(len(parts))), prefixes, list(map(int, stamps)), [p[2] for p in parts],
                    list(map(int, slots)), [p[4] for p in parts], dtype, [])


def parse_uniform(filenames) -> Optional[NpyNames]:
    """parse_many() when every name has the plain npy form (one right split each, checks once per column);
    None otherwise, and the caller reads the names one by one."""
    if not filenames:
        return None
    for fields, with_dtype in ((5, True), (4, False)):
        columns = _columns_of_one_form(filenames, fields, with_dtype)
        if columns is not None:
            return columns
    return None


def parse_many(filenames) -> NpyNames:
    """Bulk form of parse() for npy names, as columns. A dump's names share one form, so the columns come
    from one right split per name; names of mixed or odd forms go one by one through the same splits, and
    what those cannot settle through parse(), so both always agree."""
    columns = parse_uniform(filenames)
    if columns is not None:
        return columns
    out = NpyNames([], [], [], [], [], [], [], [])
    dtype_of: Dict[str, Optional[str]] = {}
    for i, name in enumerate(filenames):
        parts = name[:-4].rsplit(".", 5) if name.endswith(".npy") else ()
        if len(parts) == 6 and parts[2] in _IO:
            dtype = dtype_of.get(parts[5], "")
            if dtype == "":
                dtype = dtype_of[parts[5]] = canonical(parts[5])
            if dtype is None or parts[0].count(".") < 3:   # no dtype field, or too short for one: let parse() say
                parts = ()
            else:
                parts = parts[:5]
        elif len(parts) >= 5:
            parts = name[:-4].rsplit(".", 4)
            dtype = None
            if parts[2] not in _IO or parts[0].count(".") < 3:
                parts = ()
        else:
            parts = ()
        if not parts or not (parts[1].isdigit() and parts[1].isascii() and parts[3].isdigit()
                             and parts[3].isascii()):
            parsed = parse(name)
            if parsed is None or parsed.kind != KIND_NPY:
                out.rejected.append(i)
                continue
            parts = (f"{parsed.op_type}.{parsed.op_name}.{parsed.task_id}.{parsed.stream_id}",
                     str(parsed.timestamp), parsed.io, str(parsed.slot), parsed.fmt)
            dtype = parsed.dtype
        out.rows.append(i)
        out.prefix.append(parts[0])
        out.timestamp.append(int(parts[1]))
        out.io.append(parts[2])
        out.slot.append(int(parts[3]))
        out.fmt.append(parts[4])
        out.dtype.append(dtype)
    return out


def split_plain_prefix(prefix: str) -> tuple:
    """split_prefix() of a prefix parse_uniform() accepted (two splits, no checks left to make)."""
    head, task, stream = prefix.rsplit(".", 2)
    op_type, op_name = head.split(".", 1)
    return op_type, op_name, int(task), int(stream)


def split_prefixes(prefixes) -> list:
    """split_prefix() of many prefixes: right splits and one regex per column when all are well formed."""
    parts = [p.rsplit(".", 2) for p in prefixes]
    if parts and all(len(x) == 3 for x in parts) \
            and _DIGIT_LINES.fullmatch("\n".join(x[1] for x in parts)) \
            and _DIGIT_LINES.fullmatch("\n".join(x[2] for x in parts)):
        heads = [x[0].split(".", 1) for x in parts]
        if all(len(h) == 2 and h[1] for h in heads):
            return [(h[0], h[1], int(x[1]), int(x[2])) for h, x in zip(heads, parts)]
    return [split_prefix(p) for p in prefixes]


def split_prefix(prefix: str) -> Optional[tuple]:
    """`{op_type}.{op_name}.{task}.{stream}` -> (op_type, op_name, task, stream); None when it is not one."""
    tokens = prefix.split(".")
    if len(tokens) < 4 or not all(_DIGITS.match(t) for t in tokens[-2:]):
        return None
    op_name = ".".join(tokens[1:-2])
    if not op_name:
        return None
    return tokens[0], op_name, int(tokens[-2]), int(tokens[-1])


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
