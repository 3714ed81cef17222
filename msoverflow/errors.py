"""Errors and exit codes: the contract every command follows.

0 clean, 1 anomaly found, 2 bad input or usage (one line naming the file and the problem), 3 inconclusive
(nothing wrong was seen, but what could hold an origin was not understood or not read), 4 internal error
(one line naming the file being read; the traceback only with --debug).

The exception hierarchy:

* UserError (exit 2, one line): input the user can fix.
    SelectionError (selection.py: a --steps/--ranks that does not follow the grammar), MindSporeMissing,
    ConfigRefused (config/model.py); a dump with no dump file, a path that is not a directory.
* FormatError(ValueError): a file inside a dump that is not what its name says. Never fatal: the walk calls the
  file unreadable (a warning) and the verdict says it could not be read.
    TruncatedFile: the file stops short of what its header says (a killed writer): completeness calls its step
    incomplete. Readers raise it (npy.TruncatedNpy, dumpdata_bin.TruncatedDump) or mark what they read with it.
    NpyError, DumpFormatError, OpdebugFormatError, ProtobufError, StrategyError: one per format.

READ_ERRORS is what reading one file of a dump may raise: the file system's OSError, and ValueError (every
FormatError, and the value errors numpy raises on bytes that do not match what a header claims).
"""
from __future__ import annotations

import contextlib
from typing import Iterator, List

EXIT_CLEAN = 0
EXIT_ANOMALY = 1
EXIT_USAGE = 2
EXIT_INCONCLUSIVE = 3
EXIT_INTERNAL = 4

EXIT_CODES_HELP = ("Exit codes: 0 clean, 1 anomaly found, 2 bad input or usage, 3 inconclusive "
                   "(not everything that could hold an origin was understood and read), 4 internal error.")


class UserError(Exception):
    """Bad input the user can fix: printed as one line, exit code 2, no traceback."""


class FormatError(ValueError):
    """A file inside a dump that is not what its name says (the message names the problem): a warning, never
    fatal."""


class TruncatedFile(FormatError):
    """A file that stops short of what its header says: a writer that was killed or is still at work."""


READ_ERRORS = (OSError, ValueError)


class MindSporeMissing(UserError):
    def __init__(self, what: str):
        super().__init__(f"{what} needs MindSpore, which is not installed here "
                         "(pip install 'msoverflow[mindspore]', or run ./scripts/bootstrap.sh)")


def require_mindspore(what: str):
    """Import mindspore lazily; only patch/verify/tracing code calls this."""
    try:
        import mindspore  # noqa: F401
    except ImportError as exc:
        raise MindSporeMissing(what) from exc
    return mindspore


# The files being read right now (innermost last), so that an internal error can name the file that caused it.
_reading: List[str] = []


@contextlib.contextmanager
def reading(path: str) -> Iterator[None]:
    """Mark `path` as the file being read: an unexpected exception inside names it (exit 4)."""
    _reading.append(str(path))
    try:
        yield
    except BaseException as exc:
        if not getattr(exc, "msoverflow_file", None):
            try:
                exc.msoverflow_file = str(path)  # type: ignore[attr-defined]  # most exceptions take one
            except (AttributeError, TypeError):
                pass
        raise
    finally:
        _reading.pop()


def file_of(exc: BaseException) -> str:
    """The file an exception was raised while reading, or the innermost file still open for reading."""
    return getattr(exc, "msoverflow_file", None) or (_reading[-1] if _reading else "")
