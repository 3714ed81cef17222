"""One reading tool call in its own process: `python -m msoverflow.agent.worker` reads the request as JSON on
stdin and writes `{"ok": answer}` or `{"error": "one line"}` on stdout. The server kills it at --timeout; its
address space may grow --memory-mb past what the imported library holds (RLIMIT_AS), so a hostile dump costs one call, never the server.
"""
from __future__ import annotations

import contextlib
import errno
import json
import sys
from typing import Any, Dict


def _limit_memory(megabytes: int) -> None:
    """The call may map `megabytes` more than the interpreter and the library hold once imported (the fixed cost
    of imports is not the call's to pay; a hostile dump's allocations are)."""
    try:
        import resource
        with open("/proc/self/status", encoding="ascii") as fh:
            size_kb = next(int(line.split()[1]) for line in fh if line.startswith("VmSize:"))
        limit = (size_kb << 10) + (megabytes << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError, StopIteration):   # not on this platform: the time limit still holds
        pass


def out_of_memory(exc: BaseException) -> bool:
    """Whether a failure is the memory limit: MemoryError; SystemError "error return without exception set" (a C
    extension whose allocation failed); an OSError ENOMEM (the system refused a mapping or a directory read under
    the limit: seen while an import listed a package, "Cannot allocate memory")."""
    return isinstance(exc, (MemoryError, SystemError)) or (isinstance(exc, OSError) and exc.errno == errno.ENOMEM)


def _failure(exc: BaseException, memory_mb) -> str:
    if out_of_memory(exc):
        return (f"ran out of the server's memory limit ({memory_mb} MB, --memory-mb); narrow the call with "
                f"ranks/steps ({type(exc).__name__})")
    from ..errors import file_of
    where = file_of(exc)
    return (f"internal error{f' while reading {where!r}' if where else ''}: {type(exc).__name__}: "
            f"{_one_line(exc)}")


def _one_line(text: object) -> str:
    return " ".join(str(text).split())[:600]


def main() -> int:
    request = json.loads(sys.stdin.read())
    import numpy  # noqa: F401 - imported before the memory limit: the library's fixed cost
    import pandas  # noqa: F401

    from .. import api  # noqa: F401
    from ..errors import UserError
    from .confine import Roots, ToolError
    from .tools import dumps, heavy
    _limit_memory(int(request.get("memory_mb") or 0) or 4096)
    roots = Roots(tuple(request["roots"]), request.get("write"))
    answer: Dict[str, Any]
    try:
        # stdout carries the answer alone: whatever the library prints (patch's "note: ...") goes to stderr
        with contextlib.redirect_stdout(sys.stderr):
            answer = {"ok": heavy(request["tool"], request["args"], request.get("report"), roots)}
    except (UserError, ToolError, TypeError, ValueError) as exc:
        answer = {"error": _one_line(exc)}
    except Exception as exc:  # noqa: BLE001 - the contract: one line, never a traceback
        answer = {"error": _failure(exc, request.get("memory_mb"))}
    sys.stdout.write(dumps(answer))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
