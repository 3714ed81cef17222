"""The dump file-name grammar, every variant, parsed from the right (op names may contain dots in old dumps).

A dump file's own name (the "core"):
  {op_type}.{op_name}.{task}.{stream}.{ts}                        ACL/GE binary dump, MindSpore npy prefix
  {op_type}.{op_name}.{task}.{ts}                                 older CANN: no stream id (stream_id -1)
  {op_type}.{op_name}.{task}.{stream}.{ts}.{a}.{ctx}.{thread}.{b} FFTS+ (sub-task ids after the timestamp)
  op_name may end in `_lxslice{N}` (FFTS+ manual slicing): the slice is split off the op name.
Files made from a core:
  npy  <= 2.3   : {core}.{input|output}.{slot}.{format}.npy      (also msaccucmp's "msnpy" output)
  npy  2.4+     : {core}.{input|output}.{slot}.{format}.{DType}.npy  (msprobe adump too: FLOAT, BF16, INT4...)
  msaccucmp npy : {core}.{input|output}.{slot}[.{AxBxC}].npy
  msaccucmp bin : {core}.{input|output}.{slot}.{A_B_C}.{numpy dtype}.{format}.bin   (raw bytes, no header)
  msprobe raw   : {core}.{input|output}.{slot}.{format}.{DTYPE}  (no suffix: dtypes numpy lacks, raw bytes)
  per-op stats  : {core}.csv                                     (CANN device statistics, one file per op)
Opdebug         : Opdebug.Node_OpDebug.{task}[.{stream}].{ts}[.{a}.{ctx}.{thread}.{b}][.output.{n}.json|.npy]
Timestamps are microseconds (16 digits today); an FFTS+ core is told from a plain one by where that long
number sits.

The grammar also says what a dump file is (is_dump_file: the one predicate the listing, the readers and
completeness share) and names the directories of every layout (RANK_DIR, STEP_DIR, ... for msoverflow/layout.py,
ranks.py and safeio.py) and the metadata folders beside a rank's dump (METADATA_DIRS).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .dtypes import canonical

_DIGITS = re.compile(r"^[0-9]{1,20}$")   # ids and timestamps: uint64 at most, never a million digits
_SHAPE_X = re.compile(r"^[0-9]{1,12}(?:x[0-9]{1,12}){0,15}$")        # msaccucmp npy: 1x2x3
_SHAPE_UNDERSCORE = re.compile(r"^[0-9]{1,12}(?:_[0-9]{1,12}){0,15}$")  # msaccucmp bin: 1_2_3
_LXSLICE = re.compile(r"_lxslice([0-9]{1,9})$")
TIMESTAMP_MIN_DIGITS = 10   # a microsecond clock after 1970-04-26 has at least 10 digits; ids never reach that

# Directories (ASCII digits, bounded: a directory named with a million digits is not a step).
RANK_DIR = re.compile(r"^rank_([0-9]{1,9})$")                   # rank_{r}
STEP_DIR = re.compile(r"^[0-9]{1,18}$")                         # {iteration}, {graph}, {device}, {model_id}
TIME_DIR = re.compile(r"^[0-9]{14}$")                           # ACL/GE: YYYYMMDDhhmmss
KERNEL_STEP_DIR = re.compile(r"^step_([0-9]{1,18})$")           # msprobe adump: rank_{r}/{timestamp}/step_{k}
FRAMEWORK_STEP_DIR = re.compile(r"^step([0-9]{1,18})$")         # msprobe PrecisionDebugger: step{k}/rank{r}
FRAMEWORK_RANK_DIR = re.compile(r"^(?:rank([0-9]{1,9})|proc([0-9]{1,18}))$")
# Folders MindSpore writes beside a rank's dump (saved graphs, kernel order, versions and config): never steps.
METADATA_DIRS = ("graphs", "execution_order", ".dump_metadata")
# Folders whose files a reader finds itself (msprobe's tensors, named by its dump.json): not listed as steps.
READER_DIRS = ("dump_tensor_data",)
# Whole-file names a reader reads (one per directory), and files beside the tensors that hold none.
WHOLE_FILES = ("statistic.csv", "dump.json")
MAPPING_FILE = "mapping.csv"
# The name a dump writer gives a file whose own name is over 255 characters (mapping.csv holds the original)
SHORT_NAME = re.compile(r"^[0-9a-f]{24}(?:\.npy)?$")
# Files a training run writes that no dump writer does: a checkpoint or an exported model left in a step directory
# is named in a note, never "not understood" (it cannot hold a tensor of the dump)
TRAINING_FILES = {".ckpt": "a MindSpore checkpoint", ".safetensors": "a safetensors checkpoint",
                  ".mindir": "an exported MindIR model", ".meta": "a checkpoint's meta file"}
_NEVER_TENSORS = (".ir", ".pb", ".txt", ".log", *TRAINING_FILES)


def training_file(name: str) -> str:
    """What a file a training run writes (not a dump writer) is, "" for any other name."""
    return next((what for ext, what in TRAINING_FILES.items() if name.endswith(ext)), "")


def is_dump_file(name: str) -> bool:
    """Looks like a file a dump writer made: a tensor, statistics or overflow file. The one predicate: a directory
    holding one is a step; one the readers cannot place is reported as not understood, never skipped in silence
    (a checkpoint, `net.step.100.ckpt`, left in a step directory is no dump file: named in a note, see
    training_file)."""
    return (name.endswith(".npy") or name in WHOLE_FILES or name.startswith("Opdebug.")
            or (name.count(".") >= 3 and not name.endswith(_NEVER_TENSORS)) or SHORT_NAME.match(name) is not None)


def understood(name: str) -> bool:
    """A dump file whose name the grammar reads (`name` with mapping.csv applied). npy names are taken as the
    tensors they claim to be (the bulk parser of the walk names any it rejects); others are parsed."""
    return name.endswith(".npy") or name in WHOLE_FILES or parse(name) is not None


KIND_NPY = "npy"
KIND_BIN = "bin"            # binary DumpData file (header + payload)
KIND_RAW = "raw"            # headerless tensor bytes (msprobe raw, msaccucmp .bin)
KIND_OPCSV = "opcsv"        # per-op statistics csv
KIND_OPDEBUG = "opdebug"

IO_WORDS = ("input", "output")


@dataclass(frozen=True)
class ParsedName:
    kind: str                 # npy | bin | raw | opcsv | opdebug
    op_type: str
    op_name: str
    task_id: int
    stream_id: int            # -1: the name carries none (older CANN)
    timestamp: int
    io: Optional[str] = None  # None for bin/opcsv files (one file holds every input and output)
    slot: Optional[int] = None
    fmt: str = ""
    dtype: Optional[str] = None   # canonical dtype from the name (2.4+ `.DType`, msprobe words, msaccucmp bin)
    context_id: Optional[int] = None   # FFTS+
    thread_id: Optional[int] = None    # FFTS+
    lxslice: Optional[int] = None      # FFTS+ manual slice number split off the op name
    shape: Optional[Tuple[int, ...]] = None   # msaccucmp-converted names carry it
    dtype_word: str = ""               # the dtype as written (kept when canonical() does not know it)


@dataclass(frozen=True)
class _Core:
    op_type: str
    op_name: str
    task_id: int
    stream_id: int
    timestamp: int
    context_id: Optional[int] = None
    thread_id: Optional[int] = None
    lxslice: Optional[int] = None


def _is_ts(token: str) -> bool:
    return len(token) >= TIMESTAMP_MIN_DIGITS


def _trailing_digits(tokens: List[str]) -> int:
    count = 0
    for token in reversed(tokens):
        if not _DIGITS.match(token):
            break
        count += 1
    return count


def _core(tokens: List[str]) -> Optional[_Core]:
    """{op_type}.{op_name...}.{ids} -> _Core; None when the ids are not there."""
    n = len(tokens)
    run = min(_trailing_digits(tokens), n - 2)     # op_type and at least one op_name token stay
    context = thread = None
    if run >= 6 and not _is_ts(tokens[-1]) and _is_ts(tokens[-5]):       # FFTS+: ts.a.ctx.thread.b
        ts_at, context, thread = n - 5, int(tokens[-3]), int(tokens[-2])
    elif run >= 5 and not _is_ts(tokens[-1]) and _is_ts(tokens[-4]):     # FFTS+ without the last number
        ts_at, context, thread = n - 4, int(tokens[-2]), int(tokens[-1])
    elif run >= 2:
        ts_at = n - 1
    else:
        return None
    before = ts_at - (n - run)                      # digit tokens left of the timestamp
    if before >= 2:
        task, stream, name_end = int(tokens[ts_at - 2]), int(tokens[ts_at - 1]), ts_at - 2
    elif before == 1:
        task, stream, name_end = int(tokens[ts_at - 1]), -1, ts_at - 1
    else:
        return None
    op_type, op_name = tokens[0], ".".join(tokens[1:name_end])
    if not op_type or not op_name:
        return None
    lxslice = None
    m = _LXSLICE.search(op_name)
    if m:
        lxslice, op_name = int(m.group(1)), op_name[:m.start()]
    return _Core(op_type, op_name, task, stream, int(tokens[ts_at]), context, thread, lxslice)


def _named(kind: str, core: _Core, **fields) -> ParsedName:
    return ParsedName(kind, core.op_type, core.op_name, core.task_id, core.stream_id, core.timestamp,
                      context_id=core.context_id, thread_id=core.thread_id, lxslice=core.lxslice, **fields)


def parse(filename: str) -> Optional[ParsedName]:
    """Parse one dump file name; None when it is not a dump tensor/statistics/overflow file."""
    if filename.startswith("Opdebug."):
        return _parse_opdebug(filename)
    if filename.endswith(".npy"):
        return _parse_npy(filename[:-4])
    if filename.endswith(".bin"):
        return _parse_msaccucmp_bin(filename[:-4])
    if filename.endswith(".csv"):
        if filename in ("statistic.csv", "mapping.csv"):
            return None
        core = _core(filename[:-4].split("."))
        return _named(KIND_OPCSV, core) if core else None
    if "." in filename and not filename.endswith((".json", ".ir", ".pb", ".txt", ".log", ".dat")):
        return _parse_bin_or_raw(filename)
    return None


def _io_slot(tokens: List[str], at: int) -> bool:
    return len(tokens) > -at + 1 and tokens[at] in IO_WORDS and bool(_DIGITS.match(tokens[at + 1]))


def _parse_npy(stem: str) -> Optional[ParsedName]:
    tokens = stem.split(".")
    # {core}.{io}.{slot}.{format}.{DType}
    if len(tokens) >= 9 and _io_slot(tokens, -4) and canonical(tokens[-1]):
        core = _core(tokens[:-4])
        if core:
            return _named(KIND_NPY, core, io=tokens[-4], slot=int(tokens[-3]), fmt=tokens[-2],
                          dtype=canonical(tokens[-1]), dtype_word=tokens[-1])
    # {core}.{io}.{slot}
    if len(tokens) >= 6 and _io_slot(tokens, -2):
        core = _core(tokens[:-2])
        if core:
            return _named(KIND_NPY, core, io=tokens[-2], slot=int(tokens[-1]))
    # {core}.{io}.{slot}.{AxBxC}   (msaccucmp with the shape) -- before the format form: 3x4 is no format
    if len(tokens) >= 7 and _io_slot(tokens, -3) and _SHAPE_X.match(tokens[-1]):
        core = _core(tokens[:-3])
        if core:
            return _named(KIND_NPY, core, io=tokens[-3], slot=int(tokens[-2]),
                          shape=tuple(int(d) for d in tokens[-1].split("x")))
    # {core}.{io}.{slot}.{format}
    if len(tokens) >= 7 and _io_slot(tokens, -3):
        core = _core(tokens[:-3])
        if core:
            return _named(KIND_NPY, core, io=tokens[-3], slot=int(tokens[-2]), fmt=tokens[-1])
    return None


def _parse_msaccucmp_bin(stem: str) -> Optional[ParsedName]:
    """{core}.{io}.{slot}.{A_B_C}.{numpy dtype}.{format}.bin: raw bytes with shape and dtype in the name."""
    tokens = stem.split(".")
    if len(tokens) < 10 or not _io_slot(tokens, -5) or not _SHAPE_UNDERSCORE.match(tokens[-3]):
        return None
    core = _core(tokens[:-5])
    if core is None:
        return None
    return _named(KIND_RAW, core, io=tokens[-5], slot=int(tokens[-4]), fmt=tokens[-1],
                  dtype=canonical(tokens[-2]), dtype_word=tokens[-2],
                  shape=tuple(int(d) for d in tokens[-3].split("_")))


def _parse_bin_or_raw(name: str) -> Optional[ParsedName]:
    tokens = name.split(".")
    # msprobe raw: {core}.{io}.{slot}.{format}.{DTYPE}, the dtype word possibly one msoverflow does not know
    if len(tokens) >= 9 and _io_slot(tokens, -4) and not _DIGITS.match(tokens[-1]):
        core = _core(tokens[:-4])
        if core:
            return _named(KIND_RAW, core, io=tokens[-4], slot=int(tokens[-3]), fmt=tokens[-2],
                          dtype=canonical(tokens[-1]), dtype_word=tokens[-1])
    if len(tokens) < 4:
        return None
    core = _core(tokens)
    return _named(KIND_BIN, core) if core else None


def _parse_opdebug(name: str) -> Optional[ParsedName]:
    stem = name
    for suffix in (".json", ".npy"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    tokens = stem.split(".")
    if len(tokens) >= 6 and tokens[-2] == "output" and _DIGITS.match(tokens[-1]):
        tokens = tokens[:-2]
    core = _core(tokens)
    if core is None:
        return None
    return _named(KIND_OPDEBUG, _Core("Opdebug", core.op_name, core.task_id, core.stream_id, core.timestamp,
                                      core.context_id, core.thread_id, core.lxslice))


@dataclass
class NpyNames:
    """Many npy file names parsed at once, as columns (row i = names[rows[i]]). `prefix` is the
    `{op_type}.{op_name}.{task}.{stream}` part: it alone tells which op run a file belongs to. `odd` holds the
    ParsedName of the rows that were not of the plain form (FFTS+ ids, sliced op names, msaccucmp shapes)."""
    rows: list
    prefix: list
    timestamp: list
    io: list
    slot: list
    fmt: list
    dtype: list
    rejected: list            # indices of names that are not npy dump names
    odd: Dict[int, ParsedName] = field(default_factory=dict)   # row -> the full parse of a name of another form


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


def parse_many(filenames) -> NpyNames:
    """The bulk form of parse() for npy names, as columns. A dump's names share one form, so the columns come
    from one right split per name with each check made once per column; names of mixed or odd forms go one by
    one through parse(), so both always agree (tests/unit/test_names_layout.py)."""
    if filenames:
        for fields, with_dtype in ((5, True), (4, False)):
            columns = _columns_of_one_form(filenames, fields, with_dtype)
            if columns is not None:
                return columns
    out = NpyNames([], [], [], [], [], [], [], [])
    for i, name in enumerate(filenames):          # mixed or odd forms: one by one, through parse()
        parsed = parse(name)
        if parsed is None or parsed.kind != KIND_NPY:
            out.rejected.append(i)
            continue
        if parsed.context_id is not None or parsed.lxslice is not None or parsed.shape is not None:
            out.odd[len(out.rows)] = parsed
        out.rows.append(i)
        out.prefix.append(f"{parsed.op_type}.{parsed.op_name}.{parsed.task_id}.{parsed.stream_id}")
        out.timestamp.append(parsed.timestamp)
        out.io.append(parsed.io)
        out.slot.append(parsed.slot)
        out.fmt.append(parsed.fmt)
        out.dtype.append(parsed.dtype)
    return out


def split_prefix(prefix: str) -> Optional[tuple]:
    """`{op_type}.{op_name}.{task}.{stream}` (a parse_many() prefix) -> (op_type, op_name, task, stream); None when
    it is not one. The stream is -1 for names that carry none."""
    head, _, stream = prefix.rpartition(".")
    head, _, task = head.rpartition(".")
    op_type, _, op_name = head.partition(".")
    if not op_type or not op_name or not _SIGNED.match(task) or not _SIGNED.match(stream):
        return None
    return op_type, op_name, int(task), int(stream)


_SIGNED = re.compile(r"^-?[0-9]{1,20}$")


def scope_to_file_name(full_name: str) -> str:
    """How MindSpore 2.x writes a full scoped op name into a file name."""
    return re.sub(r"[/\\. ]", "_", full_name)
