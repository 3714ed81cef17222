"""-v/--verbose, -q/--quiet and --log-file, the same on every command.

Messages about the run (where a report was written, each warning as it is met, timings) go to the `msoverflow`
logger, never into the report. On stderr: errors only with -q, notes by default, details with -v. --log-file FILE
appends every detail with a timestamp, whatever -v/-q say: keep it for long runs (analysis of a large dump,
`run`, `patch --verify`) to see afterwards what was read, skipped and written, and how long it took. The file
is created only once the command is past its usage checks (a refused command, exit 2, leaves none), and from the
start of a training run (`started`) it is written as things happen.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import logging.handlers
import sys
import time
from typing import Callable, Iterator, Optional

log = logging.getLogger("msoverflow")


def add_options(parser: argparse.ArgumentParser, top_level: bool = False) -> None:
    """Add the shared options, skipping any a command already defines (e.g. convert's own -q)."""
    # Sub-command copies default to SUPPRESS so that `msoverflow -v analyze` keeps the top-level value.
    default = {} if top_level else {"default": argparse.SUPPRESS}
    taken = set(parser._option_string_actions)
    group = parser.add_argument_group("output and logging") if not top_level else parser
    if not taken & {"-v", "--verbose"}:
        group.add_argument("-v", "--verbose", action="count", help="say more on stderr: each warning as it is met, timings",
                           **({"default": 0} if top_level else default))
    if not taken & {"-q", "--quiet"}:
        group.add_argument("-q", "--quiet", action="store_true", help="say only errors and the result",
                           **({"default": False} if top_level else default))
    if "--log-file" not in taken:
        group.add_argument("--log-file", metavar="FILE",
                           help="append a timestamped log of the run (what was read, skipped, written; timings)",
                           **({"default": None} if top_level else default))


class _Stderr(logging.StreamHandler):
    """Looks up sys.stderr on each message (pytest and callers swap it)."""

    def __init__(self):
        super().__init__()

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


_depth = 0
_held: "Optional[_Held]" = None


@contextlib.contextmanager
def session(args: argparse.Namespace, argv=None):
    """Configure logging for one command. A command run inside another (patch --dump runs analyze) keeps the
    outer command's settings: its -q or --log-file still hold. The --log-file is created only once the command
    is past its usage checks (see `started`): a command refused with exit 2 leaves none behind."""
    global _depth
    from .errors import UserError
    if _depth == 0:
        setup(args, argv)
    _depth += 1
    refused = False
    try:
        yield
    except UserError:
        refused = True
        raise
    finally:
        _depth -= 1
        if _depth == 0:
            _finish(keep=not refused)


def started() -> None:
    """The command's arguments were accepted and its long work begins (a training run): what the --log-file holds
    so far is written, and every later record goes straight to it, for `tail -f`."""
    if _held is not None:
        _held.write_through()


def _finish(keep: bool) -> None:
    global _held
    if _held is None:
        return
    if keep or _held.writing:
        _held.flush()
    _held.buffer.clear()
    log.removeHandler(_held)
    _held.close()
    if _held.target is not None:
        _held.target.close()
    _held = None


def setup(args: argparse.Namespace, argv=None) -> None:
    global _held
    verbose = getattr(args, "verbose", 0) or 0
    quiet = bool(getattr(args, "quiet", False))
    log_file = getattr(args, "log_file", None)
    for handler in list(log.handlers):
        log.removeHandler(handler)
        handler.close()
    _held = None
    log.propagate = False
    log.setLevel(logging.DEBUG)
    stderr = _Stderr()
    stderr.setLevel(logging.ERROR if quiet else logging.DEBUG if verbose else logging.INFO)
    stderr.setFormatter(logging.Formatter("msoverflow: %(message)s"))
    log.addHandler(stderr)
    if log_file:
        _check_log_file(log_file)
        target = _LogFile(log_file, encoding="utf-8", delay=True)    # the file is opened at the first write
        target.setLevel(logging.DEBUG)
        target.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        _held = _Held(target)
        log.addHandler(_held)
        from .version import __version__
        log.debug("msoverflow %s: %s", __version__, " ".join(sys.argv[1:] if argv is None else argv))


class _Held(logging.handlers.MemoryHandler):
    """Holds the --log-file's records until the command is past its usage checks (or has ended without a usage
    error); many records are written early anyway, so memory stays bounded."""

    CAPACITY = 5000

    def __init__(self, target: logging.Handler):
        super().__init__(self.CAPACITY, flushLevel=logging.CRITICAL + 1, target=target, flushOnClose=False)
        self.writing = False

    def write_through(self) -> None:
        self.writing = True
        self.capacity = 1
        self.flush()

    def shouldFlush(self, record) -> bool:
        if len(self.buffer) >= self.capacity:
            self.writing = True
            return True
        return False


class _LogFile(logging.FileHandler):
    """A log file whose first failure (disk full, a race with the checks) is said once on stderr, after which
    logging to it stops, instead of logging's traceback per message."""

    def handleError(self, record) -> None:
        exc = sys.exc_info()[1]
        if getattr(self, "failed", None) is None:
            self.failed = getattr(exc, "strerror", None) or str(exc)
            print(f"msoverflow: {self.baseFilename}: cannot write the log file ({self.failed}); "
                  "logging to it stopped", file=sys.stderr)
            if _held is not None:
                log.removeHandler(_held)


def _check_log_file(path: str) -> None:
    """Appending to `path` can work: a regular file (or /dev/null) that may be written, or a new name in a
    directory that may be written. Checked without creating anything: a FIFO would block, a device like /dev/full
    fails every write."""
    import errno
    import os
    import stat

    from .errors import UserError
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, None):
            raise UserError(f"{path}: cannot open the log file ({exc.strerror or exc})") from None
        mode = None
    if mode is not None:
        if not stat.S_ISREG(mode) and os.path.realpath(path) != os.devnull:
            raise UserError(f"{path}: cannot use as the log file (not a regular file)")
        if not os.access(path, os.W_OK):
            raise UserError(f"{path}: cannot open the log file (permission denied)")
        return
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UserError(f"{path}: cannot open the log file ({parent} is not a directory)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{path}: cannot open the log file (permission denied in {parent})")


class Notes(list):
    """The warnings of one analysis or comparison: kept for its report, and handed to `warn` as they are met."""

    def __init__(self, warn: Optional[Callable[[str], None]] = None):
        super().__init__()
        self._warn = warn

    def __call__(self, message: str) -> None:
        self.append(message)
        if self._warn is not None:
            self._warn(message)


@contextlib.contextmanager
def timed(stage: str) -> Iterator[None]:
    """Time one stage of a command (discover, plan, walk, decide, settle, assemble, render): shown with -v and kept
    by --log-file, never in the report."""
    started = time.perf_counter()
    try:
        yield
    finally:
        log.debug("timing: %s %.3f s", stage, time.perf_counter() - started)
