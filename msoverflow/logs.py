"""-v/--verbose, -q/--quiet and --log-file, the same on every command.

Messages about the run (where a report was written, each warning as it is met, timings) go to the `msoverflow`
logger, never into the report. On stderr: errors only with -q, notes by default, details with -v. --log-file FILE
appends every detail with a timestamp, whatever -v/-q say: keep it for long runs (analysis of a large dump,
`run`, `patch --verify`) to see afterwards what was read, skipped and written, and how long it took.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
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


@contextlib.contextmanager
def session(args: argparse.Namespace, argv=None):
    """Configure logging for one command. A command run inside another (patch --dump runs analyze) keeps the
    outer command's settings: its -q or --log-file still hold."""
    global _depth
    if _depth == 0:
        setup(args, argv)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1


def setup(args: argparse.Namespace, argv=None) -> None:
    verbose = getattr(args, "verbose", 0) or 0
    quiet = bool(getattr(args, "quiet", False))
    log_file = getattr(args, "log_file", None)
    for handler in list(log.handlers):
        log.removeHandler(handler)
        handler.close()
    log.propagate = False
    log.setLevel(logging.DEBUG)
    stderr = _Stderr()
    stderr.setLevel(logging.ERROR if quiet else logging.DEBUG if verbose else logging.INFO)
    stderr.setFormatter(logging.Formatter("msoverflow: %(message)s"))
    log.addHandler(stderr)
    if log_file:
        dump_dir = getattr(args, "dump_dir", None)
        if dump_dir and _inside(log_file, dump_dir):
            from .errors import UserError
            raise UserError(f"{log_file}: refusing to write the log into the dump directory {dump_dir}")
        handler = _open_log_file(log_file)
        handler.setLevel(logging.DEBUG)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        from .version import __version__
        log.debug("msoverflow %s: %s", __version__, " ".join(sys.argv[1:] if argv is None else argv))
        handler.check()


class _LogFile(logging.FileHandler):
    """A log file that fails loudly once: the first write is checked (exit 2, one line); a later failure (disk
    full) drops the handler with one line on stderr instead of logging's traceback per message."""

    def check(self) -> None:
        from .errors import UserError
        try:
            self.flush()
            if self.stream is not None:
                self.stream.flush()
        except OSError as exc:
            log.removeHandler(self)
            raise UserError(f"{self.baseFilename}: cannot write the log file ({exc.strerror or exc})") from None
        if getattr(self, "failed", None):
            log.removeHandler(self)
            raise UserError(f"{self.baseFilename}: cannot write the log file ({self.failed})")

    def handleError(self, record) -> None:
        exc = sys.exc_info()[1]
        if getattr(self, "failed", None) is None:
            self.failed = getattr(exc, "strerror", None) or str(exc)
            if _depth:     # after the start-up check: say it once, stop logging to the file
                print(f"msoverflow: {self.baseFilename}: cannot write the log file ({self.failed}); "
                      "logging to it stopped", file=sys.stderr)
                log.removeHandler(self)


def _open_log_file(path: str) -> _LogFile:
    """Append to a regular file (or /dev/null): a FIFO would block, a device like /dev/full fails every write."""
    import os
    import stat
    from .errors import UserError
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode) and os.path.realpath(path) != os.devnull:
        raise UserError(f"{path}: cannot use as the log file (not a regular file)")
    try:
        return _LogFile(path, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot open the log file ({exc.strerror or exc})") from None


def _inside(path: str, directory: str) -> bool:
    import os
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return path.startswith(directory.rstrip(os.sep) + os.sep)


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
