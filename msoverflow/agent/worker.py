"""One reading tool call in its own process: `python -m msoverflow.agent.worker` reads the request as JSON on
stdin and writes `{"ok": answer}` or `{"error": "one line"}` on stdout. The server kills it at --timeout; its
address space is capped at --memory-mb (RLIMIT_AS), so a hostile dump costs one call, never the server.
"""
from __future__ import annotations

import json
import sys
from typing import Any, Dict


def _limit_memory(megabytes: int) -> None:
    try:
        import resource
        limit = megabytes << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):      # not on this platform: the time limit still holds
        pass


def _one_line(text: object) -> str:
    return " ".join(str(text).split())[:600]


def main() -> int:
    request = json.loads(sys.stdin.read())
    _limit_memory(int(request.get("memory_mb") or 0) or 4096)
    from ..errors import UserError
    from .confine import Roots, ToolError
    from .tools import dumps, heavy
    roots = Roots(tuple(request["roots"]), request.get("write"))
    answer: Dict[str, Any]
    try:
        answer = {"ok": heavy(request["tool"], request["args"], request.get("report"), roots)}
    except (UserError, ToolError, TypeError, ValueError) as exc:
        answer = {"error": _one_line(exc)}
    except MemoryError:
        answer = {"error": f"ran out of the server's memory limit ({request.get('memory_mb')} MB, --memory-mb); "
                           "narrow the call with ranks/steps"}
    except Exception as exc:  # noqa: BLE001 - the contract: one line, never a traceback
        from ..errors import file_of
        where = file_of(exc)
        answer = {"error": f"internal error{f' while reading {where!r}' if where else ''}: "
                           f"{type(exc).__name__}: {_one_line(exc)}"}
    sys.stdout.write(dumps(answer))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
