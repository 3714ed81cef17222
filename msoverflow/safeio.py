"""The contract at the edges: every file msoverflow reads, every number it takes from one, every path it writes.

- Only regular files are opened. A FIFO, device or socket (or a symlink to one) is refused with NotRegularFile,
  an OSError, so the readers' `except OSError` turns it into a warning. Files are opened with O_NONBLOCK, so
  even a FIFO that appears between the check and the open never blocks.
- Sizes come from fstat or from a header that was range-checked, and are checked against the file size before
  anything is allocated: a tensor that claims more bytes than its file holds is corrupt.
- Memory is bounded: a file read whole (JSON, CSV, configs, reports, source) is at most MAX_READ_BYTES
  (256 MiB, MSOVERFLOW_MAX_READ_BYTES overrides it); a text line is cut at MAX_LINE_CHARS; tensors are never read
  whole (memory maps scanned in chunks, see stats.py).
- JSON nesting is at most MAX_JSON_DEPTH, integers in JSON at most MAX_INT_DIGITS digits, NaN/Infinity are
  not JSON. YAML nesting is at most MAX_YAML_DEPTH, and its aliases expand to at most MAX_YAML_NODES nodes
  (counted from the parser's events before anything is built). Tensor shapes have at most MAX_DIMS dimensions
  of non-negative integers; a DumpData header lists at most MAX_TENSOR_SLOTS inputs and outputs.
- Output paths are resolved (realpath, symlinks followed) and refused inside a dump, judged from the dump's
  ROOT (the directory holding rank_*/, time or step directories), not only the directory given: check_output is
  the one check every command's outputs go through (commands/_output.py) before anything is created. Reports
  are written through open_output (a FIFO or device without blocking), whole files through write_atomic.
"""
from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import stat
from typing import Any, Iterable, Iterator, Optional

from . import names

MAX_READ_BYTES = int(os.environ.get("MSOVERFLOW_MAX_READ_BYTES", 256 << 20))
MAX_LINE_CHARS = 1 << 20
MAX_JSON_DEPTH = 64
MAX_INT_DIGITS = 40          # more than any id, size or timestamp a dump holds (uint64 has 20 digits)
MAX_DIMS = 64                # numpy's own limit; MindSpore tensors have at most 8
MAX_TENSOR_SLOTS = 16384     # inputs + outputs of one op in a DumpData header
MAX_SOURCE_NESTING = 100     # brackets/indentation levels in Python source before a parser is trusted with it


class NotRegularFile(OSError):
    """A path that is not a regular file (FIFO, device, socket, directory), or a symlink to one."""


class TooLarge(OSError):
    """A file larger than the limit for a whole-file read."""


class BadNumber(ValueError):
    """A number out of range, or not a number, where a file promised one."""


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "a special file"


def _refuse(path, mode: int) -> NotRegularFile:
    return NotRegularFile(errno.EINVAL, f"{_kind(mode)}, not a regular file", os.fspath(path))


def regular_size(path) -> int:
    """The size of a regular file (symlinks followed); NotRegularFile for anything else."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, st.st_mode)
    return st.st_size


def is_regular(path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def open_regular(path, mode: str = "rb", *, encoding: Optional[str] = None, errors: Optional[str] = None,
                 newline: Optional[str] = None):
    """open() for reading that never blocks and only accepts a regular file (checked on the open descriptor)."""
    if any(c in mode for c in "wax+"):
        raise ValueError("open_regular is for reading")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, st.st_mode)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        if "b" in mode:
            return os.fdopen(fd, mode)
        return os.fdopen(fd, mode, encoding=encoding or "utf-8", errors=errors, newline=newline)
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path, limit: Optional[int] = None) -> bytes:
    limit = MAX_READ_BYTES if limit is None else limit
    with open_regular(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > limit:
            raise TooLarge(errno.EFBIG, f"{size} bytes, over the {limit}-byte limit for a file read whole",
                           os.fspath(path))
        data = fh.read(limit + 1)
    if len(data) > limit:   # grew while being read
        raise TooLarge(errno.EFBIG, f"over the {limit}-byte limit for a file read whole", os.fspath(path))
    return data


def read_text(path, limit: Optional[int] = None, *, encoding: str = "utf-8", errors: str = "strict") -> str:
    """A regular file's text, bounded; UnicodeDecodeError (a ValueError) when it is not `encoding`."""
    return read_bytes(path, limit).decode(encoding, errors)


def bounded_lines(fh, max_chars: int = MAX_LINE_CHARS) -> Iterator[str]:
    """Lines of a text file, each cut at `max_chars` (the rest of an overlong line is skipped, memory stays flat)."""
    while True:
        line = fh.readline(max_chars)
        if not line:
            return
        if len(line) >= max_chars and not line.endswith("\n"):
            while True:              # drop the rest of this line
                rest = fh.readline(max_chars)
                if not rest or rest.endswith("\n"):
                    break
        yield line


# ---- JSON ---------------------------------------------------------------------------------------------------

class JsonError(ValueError):
    """Text that is not JSON msoverflow accepts (syntax, nesting, a huge integer, NaN)."""


_JSON_TOKENS = re.compile(r'[\[\]{}"\\]')


def json_depth(text: str) -> int:
    """The deepest [ / { nesting of JSON text, in one linear pass (brackets inside strings ignored). Only the
    characters that matter are visited (a regex scan), so a 100 MB file of numbers costs little."""
    depth = deepest = 0
    in_string = False
    skip = -1
    for match in _JSON_TOKENS.finditer(text):
        at = match.start()
        if at == skip:            # the character after a backslash inside a string
            continue
        ch = match.group()
        if in_string:
            if ch == "\\":
                skip = at + 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif ch in "]}":
            depth -= 1
    return deepest


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise JsonError(f"an integer of {len(text)} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonError(f"{text[:40]} is out of range for a number (not finite)")
    return value


def _no_constant(name: str):
    raise JsonError(f"{name} is not JSON")


def loads_json(text: str, *, max_depth: int = MAX_JSON_DEPTH, allow_nan: bool = False) -> Any:
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8")
    depth = json_depth(text)
    if depth > max_depth:
        raise JsonError(f"nested {depth} levels deep (at most {max_depth})")
    try:
        return json.loads(text, parse_int=_parse_int, parse_float=(float if allow_nan else _finite_float),
                          parse_constant=(float if allow_nan else _no_constant))
    except JsonError:
        raise
    except json.JSONDecodeError as exc:
        raise JsonError(f"line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:
        raise JsonError(str(exc)[:200]) from None


def load_json(path, *, limit: Optional[int] = None, max_depth: int = MAX_JSON_DEPTH, allow_nan: bool = False) -> Any:
    """A JSON file: regular, bounded in size and nesting. OSError for the file, JsonError (ValueError) for the
    text, UnicodeDecodeError (ValueError) for bytes that are not UTF-8."""
    return loads_json(read_text(path, limit), max_depth=max_depth, allow_nan=allow_nan)


# ---- YAML ---------------------------------------------------------------------------------------------------

MAX_YAML_NODES = 1 << 17     # nodes of a document with every alias expanded (a MindFormers config has ~2,000)
MAX_YAML_DEPTH = 64


class YamlError(ValueError):
    """Text that is not YAML msoverflow accepts (syntax, nesting, aliases that expand past the bound)."""


def yaml_nodes(text: str, *, max_depth: int = MAX_YAML_DEPTH, max_nodes: int = MAX_YAML_NODES) -> int:
    """The nodes of the text's documents with every alias expanded, counted from the parser's events in one pass
    (nothing is built): a 600-byte alias bomb expands to 10**9 nodes, and anything that walks or prints it
    (str(), a tree search) never ends. YamlError when the count or the nesting passes its bound."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError
    from ruamel.yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, ScalarEvent
    expanded: dict = {}         # anchor -> nodes of the anchored node, aliases inside it expanded
    open_nodes: list = []       # [nodes so far, anchor] of each collection being read
    total = 0
    try:
        for event in YAML(typ="safe", pure=True).parse(text):
            if isinstance(event, CollectionStartEvent):
                open_nodes.append([1, event.anchor])
                if len(open_nodes) > max_depth:
                    raise YamlError(f"nested more than {max_depth} levels deep")
                continue
            if isinstance(event, CollectionEndEvent):
                count, anchor = open_nodes.pop()
            elif isinstance(event, ScalarEvent):
                count, anchor = 1, event.anchor
            elif isinstance(event, AliasEvent):
                count, anchor = expanded.get(event.anchor, 1), None
            else:
                continue
            if anchor is not None:
                expanded[anchor] = count
            if open_nodes:
                open_nodes[-1][0] += count
                count = open_nodes[-1][0]
            else:
                total += count
                count = total
            if count > max_nodes:
                raise YamlError(f"its aliases expand to more than {max_nodes} nodes (an alias bomb?)")
    except YAMLError as exc:
        raise YamlError(_yaml_problem(exc)) from None
    return total


def _yaml_problem(exc: Exception) -> str:
    """ruamel.yaml's error in one short line: what is wrong, and where ("line 3: found duplicate key ...")."""
    problem = getattr(exc, "problem", None) or str(exc).strip().splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    line = getattr(mark, "line", None)
    where = f"line {line + 1}: " if line is not None else ""
    return (where + " ".join(str(problem).split()))[:200]


def loads_yaml(text: str, *, typ: str = "safe", max_depth: int = MAX_YAML_DEPTH,
               max_nodes: int = MAX_YAML_NODES) -> Any:
    """YAML text, bounded in nesting and in the nodes its aliases expand to (yaml_nodes), then loaded by
    ruamel.yaml (`typ` "safe", or "rt" to keep comments for a patch). YamlError (a ValueError) when refused."""
    import warnings

    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError
    yaml_nodes(text, max_depth=max_depth, max_nodes=max_nodes)
    try:
        with warnings.catch_warnings():     # e.g. one ReusedAnchorWarning per repeated anchor, on stderr
            warnings.simplefilter("ignore")
            return YAML(typ=typ).load(text)
    except YAMLError as exc:
        raise YamlError(_yaml_problem(exc)) from None
    except (ValueError, RecursionError) as exc:       # e.g. an integer of more digits than Python converts
        raise YamlError(f"{type(exc).__name__}: {str(exc)[:200]}") from None


def brief(value: Any, width: int = 40) -> str:
    """A value from a user's file in a few characters, for a message. Never str() of the whole: a YAML alias
    bomb is a small object that prints as gigabytes, and an int of 5,000 digits does not convert."""
    if value is None or isinstance(value, (bool, float)):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if value.bit_length() <= 128 else f"an integer of {value.bit_length()} bits"
    if isinstance(value, str):
        return repr(value[:width]) + ("..." if len(value) > width else "")
    if isinstance(value, dict):
        return f"a mapping of {len(value)} key(s)"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} item(s)"
    return f"a {type(value).__name__}"


def json_safe(value: Any) -> Any:
    """NaN/inf floats -> None, recursively, so a report always serialises (allow_nan=False)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


# ---- numbers ------------------------------------------------------------------------------------------------

_DIGITS = re.compile(r"[+-]?\d{1,%d}" % MAX_INT_DIGITS)


def int_text(text: str, what: str = "number", max_digits: int = 18) -> int:
    """Decimal text -> int, refusing more than `max_digits` digits (no million-digit conversions)."""
    body = str(text).strip()
    digits = body.lstrip("+-")
    if not digits.isdigit() or not digits.isascii():
        raise BadNumber(f"{what} {body[:40]!r} is not an integer")
    if len(digits) > max_digits:
        raise BadNumber(f"{what} has {len(digits)} digits (at most {max_digits})")
    return int(body)


def check_int(value: Any, what: str, low: int = 0, high: int = (1 << 63) - 1) -> int:
    """An int from a file (JSON/header): a real int (not bool/float/None/complex) within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadNumber(f"{what} is {type(value).__name__} {str(value)[:40]}, not an integer")
    if not low <= value <= high:
        raise BadNumber(f"{what} {str(value)[:40]} is out of range ({low}..{high})")
    return value


def check_shape(shape: Any, what: str = "shape") -> tuple:
    """A tensor shape: at most MAX_DIMS non-negative ints, each below 2**63."""
    if not isinstance(shape, (tuple, list)):
        raise BadNumber(f"{what} is {type(shape).__name__}, not a list of dimensions")
    if len(shape) > MAX_DIMS:
        raise BadNumber(f"{what} has {len(shape)} dimensions (at most {MAX_DIMS})")
    return tuple(check_int(d, f"{what} dimension") for d in shape)


def tensor_bytes(shape: Iterable[int], itemsize: int, available: int, what: str = "tensor") -> int:
    """Bytes a tensor of `shape` needs; BadNumber when that exceeds the `available` bytes of its file.
    Multiplies with an early exit, so a shape of huge dims never builds a huge integer."""
    count = 1
    zero = False
    limit = max(available, 0) // max(itemsize, 1)
    for d in shape:
        if d == 0:
            zero = True
        elif not zero:
            count *= d
            if count > limit:
                raise BadNumber(f"{what} claims more than {available} bytes, more than its file holds: corrupt")
    return 0 if zero else count * itemsize


# ---- Python source ------------------------------------------------------------------------------------------

def source_nesting(text: str) -> int:
    """An upper bound on the bracket nesting of Python source (strings and comments are not excluded, which
    only errs towards refusing), plus indentation depth in 4-column steps. Linear."""
    depth = deepest = 0
    for ch in text:
        if ch in "([{":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif ch in ")]}":
            depth = max(0, depth - 1)
    indent = 0
    for line in text.splitlines():
        stripped = line.lstrip(" \t")
        if stripped and not stripped.startswith("#"):
            width = len(line.expandtabs(8)) - len(stripped)
            indent = max(indent, width // 4)
    return max(deepest, indent)


# ---- text shown to people -----------------------------------------------------------------------------------

def printable(text: Any) -> str:
    """Text that any UTF-8 stream accepts: undecodable bytes of file names (surrogate escapes) as \\xNN."""
    text = str(text)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace") \
            if _only_escapes(text) else text.encode("utf-8", "backslashreplace").decode("utf-8")


def _only_escapes(text: str) -> bool:
    try:
        text.encode("utf-8", "surrogateescape")
        return True
    except UnicodeEncodeError:
        return False


# ---- where outputs may go -----------------------------------------------------------------------------------

# Directory names that only occur inside a dump (the grammar's: msoverflow/names.py); the dump's root is the parent
# of the outermost one (2 levels for an ACL step directory: {root}/{step}/{time}/...).
_ROOT_CHILDREN = (names.RANK_DIR, names.FRAMEWORK_RANK_DIR, names.FRAMEWORK_STEP_DIR)


def dump_root(path) -> str:
    """The real path of the root of the dump that `path` (a directory or file inside it) belongs to: the
    parent of the outermost rank_N / stepN directory, or of the time directory of an ACL/GE dump (and its step
    directory). A path inside no known layout is its own root."""
    real = os.path.realpath(path)
    parts = real.split(os.sep)
    root_index = None
    for i, name in enumerate(parts):
        if any(pattern.match(name) for pattern in _ROOT_CHILDREN):
            root_index = i
            break
        if names.TIME_DIR.match(name):
            root_index = i - 1 if i >= 2 and names.STEP_DIR.match(parts[i - 1]) else i
            break
    if root_index is None or root_index < 1:
        return real
    root = os.sep.join(parts[:root_index]) or os.sep
    return root


def inside(path, directory) -> bool:
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def refuse_output_inside(output, *protected, what: str = "the dump directory") -> str:
    """The real path of `output`; UserError when it lies inside any of `protected` (each widened to its dump
    root). Symlinks are followed, so a link pointing into the dump is refused too."""
    from .errors import UserError
    real = os.path.realpath(output)
    for directory in protected:
        if not directory:
            continue
        for guarded in {os.path.realpath(directory), dump_root(directory)}:
            if inside(real, guarded):
                raise UserError(f"{printable(output)}: refusing to write inside {what} {printable(guarded)} "
                                f"(msoverflow never writes into a dump); choose a path outside it")
    return real


def check_output(output, protected=(), *, what: str, directory: bool = False) -> str:
    """The one check every path a command writes goes through (-o, --save, --log-file, --workdir, --out-dir ...),
    before anything is created: its real path, or UserError (exit 2, one line) when it lies inside one of the
    `protected` input dumps (each widened to its dump root, symlinks followed), or is the wrong kind of thing:
    a directory where a file is written, a file where a directory is made. `what` says what the path is for
    ("the report (-o)").
    A FIFO or device is accepted for a file (open_output writes to it without blocking on open)."""
    from .errors import UserError
    real = refuse_output_inside(output, *protected)
    try:
        mode = os.stat(real).st_mode
    except OSError:
        mode = None
    shown = printable(output)
    if directory and mode is not None and not stat.S_ISDIR(mode):
        raise UserError(f"{shown}: cannot use as {what}: it is {'a file' if stat.S_ISREG(mode) else _kind(mode)}, "
                        "not a directory")
    if not directory and mode is not None and stat.S_ISDIR(mode):
        raise UserError(f"{shown}: cannot write {what} here: it is a directory; give a file name")
    above = os.path.dirname(real)
    while mode is None and above and not os.path.exists(above) and os.path.dirname(above) != above:
        above = os.path.dirname(above)
    if mode is None and above and not os.path.isdir(above):
        raise UserError(f"{shown}: cannot create {what}: {printable(above)} is not a directory")
    return real


def open_output(path, *, what: str = "the report"):
    """A text file opened for writing (created or truncated). A FIFO or device is opened without blocking: a FIFO
    nobody reads is refused at once (UserError), never waited on."""
    from .errors import UserError
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise UserError(f"{printable(path)}: cannot write {what}: a FIFO that nothing is reading") from None
        raise UserError(f"{printable(path)}: cannot write {what} ({exc.strerror or exc})") from None
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)      # a reader is there: write at its pace
    return os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace")


def write_atomic(path, text: str, *, what: str = "the file", newline: Optional[str] = None) -> None:
    """`text` into a regular file through a temporary file beside it and a rename: a reader never sees half of
    it, and a file that was there keeps its mode. UserError (one line) when `path` exists and is not a regular
    file (the rename would replace a FIFO or device) or cannot be written."""
    import tempfile

    from .errors import UserError
    real = os.path.realpath(path)
    if os.path.lexists(real) and not is_regular(real):
        raise UserError(f"{printable(path)}: cannot write {what} there (not a regular file)")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".msoverflow-", suffix=".tmp", dir=os.path.dirname(real))
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace", newline=newline) as fh:
            fh.write(text)
        if os.path.exists(real):
            os.chmod(tmp, stat.S_IMODE(os.stat(real).st_mode))
        else:       # mkstemp makes 0600 files: a new file gets the usual 0666 less the umask
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, real)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise UserError(f"{printable(path)}: cannot write {what} ({exc.strerror or exc})") from None
