"""The stdio MCP server on the official SDK (`pip install 'msoverflow[agent]'`): the only module importing `mcp`.

Tool calls that read dumps, configs or sources run in a worker process (worker.py) with the --timeout and
--memory-mb limits; explain and watch_status answer from what the server holds. Reports are kept by id (r1, c1,
...) so explain, patch_preview and repro never read a dump again. Every failure is one line in an error result.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from ..version import __version__
from . import catalog, tools
from .confine import Roots, ToolError

KEPT_REPORTS = 32

INSTRUCTIONS = ("msoverflow finds the operator that first made an inf/NaN/out-of-range value in a MindSpore dump. "
                "Start with analyze(path); follow each answer's `next` calls. Paths must lie under the server's "
                "roots; nothing is written unless the server was started with --allow-write.")


@dataclass
class Settings:
    roots: Roots
    timeout: float = 300.0
    memory_mb: int = 4096


@dataclass
class State:
    settings: Settings
    reports: "OrderedDict[str, dict]" = field(default_factory=OrderedDict)
    counter: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def keep(self, prefix: str, report: dict) -> str:
        with self.lock:          # calls run in worker threads: ids stay unique when a client sends several at once
            self.counter += 1
            key = f"{prefix}{self.counter}"
            self.reports[key] = report
            while len(self.reports) > KEPT_REPORTS:
                self.reports.popitem(last=False)
            return key

    def report(self, ref: str) -> tuple:
        """A kept report by id, or a JSON report file under the roots: (id, dict)."""
        if ref in self.reports:
            return ref, self.reports[ref]
        if ref[:1] in ("r", "c") and ref[1:].isdigit():
            held = ", ".join(self.reports) or "none yet (call analyze or compare first)"
            raise ToolError(f"no report {ref!r} in this server; it holds: {held}")
        path = self.settings.roots.path(ref, "report")
        from ..errors import UserError
        from ..patch.targets import load_report
        try:
            loaded = load_report(path)
        except UserError as exc:
            raise ToolError(str(exc)) from None
        return self.keep("r", loaded), loaded


def _worker(state: State, name: str, args: Dict[str, Any], report: Optional[dict] = None) -> dict:
    """One heavy call in a child process: its answer, or ToolError with its one line (and at the time limit)."""
    settings = state.settings
    request = {"tool": name, "args": args, "report": report, "roots": list(settings.roots.read),
               "write": settings.roots.write, "memory_mb": settings.memory_mb}
    # One thread per BLAS: a thread pool's stacks would spend the memory limit before any work.
    env = dict(os.environ, MSOVERFLOW_REPORT_JSON="", PYTHONUNBUFFERED="1", OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    try:
        done = subprocess.run([sys.executable, "-m", "msoverflow.agent.worker"], input=tools.dumps(request),
                              capture_output=True, text=True, timeout=settings.timeout, env=env,
                              cwd=settings.roots.read[0])
    except subprocess.TimeoutExpired:
        raise ToolError(f"{name} took longer than the server's time limit ({settings.timeout:g} s, --timeout) and "
                        "was stopped; narrow it with ranks/steps") from None
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        tail = " ".join(done.stderr.strip().splitlines()[-1:])[:300]
        killed = done.returncode < 0 or "MemoryError" in done.stderr
        raise ToolError(f"{name} stopped without an answer (exit {done.returncode}"
                        f"{', past the memory limit --memory-mb ' + str(settings.memory_mb) if killed else ''})"
                        f"{': ' + tail if tail else ''}") from None
    if "error" in answer:
        raise ToolError(answer["error"])
    return answer["ok"]


def call_tool(state: State, name: str, arguments: Any) -> dict:
    """One tool call, synchronously: the compact answer, or ToolError."""
    table = catalog.by_name()
    if name not in table:
        raise ToolError(f"no tool {name!r}; the tools are {', '.join(table)}")
    tool = table[name]
    args = catalog.check_arguments(tool, arguments)
    shown = dict(args)                          # the paths as the agent gave them, for the next calls
    for key in tool.paths:
        if key in args:
            args[key] = state.settings.roots.path(args[key], key)
    if name == "analyze":
        result = _worker(state, name, args)
        report = result["report"]
        return tools.analyze_answer(report, state.keep("r", report), shown["path"])
    if name == "compare":
        result = _worker(state, name, args)
        return tools.compare_answer(result["report"], state.keep("c", result["report"]))
    if name == "events":
        return tools.events_answer(_worker(state, name, args), {**shown, **{k: v for k, v in args.items()
                                                                            if k not in tool.paths}})
    if name == "config":
        if args.get("dump_path"):
            args["dump_path"] = _dump_path(state, args["dump_path"])
        return tools.config_answer(_worker(state, name, args))
    if name == "check_config":
        return tools.check_config_answer(_worker(state, name, args))
    if name == "explain":
        report_id, report = state.report(args["report"])
        return tools.explain(report, report_id, args["part"], int(args.get("page", 1)), int(args.get("per_page", 20)))
    if name in ("patch_preview", "repro"):
        report_id, report = state.report(args["report"])
        if "first_divergence" in report:
            raise ToolError(f"{args['report']} is a comparison; {name} takes an analysis report (from analyze)")
        if name == "repro" and args.get("dump"):
            args["dump"] = state.settings.roots.path(args["dump"], "dump")
        result = _worker(state, name, args, report)
        return (tools.patch_answer if name == "patch_preview" else tools.repro_answer)(result, report_id)
    if name == "watch_status":
        return _worker(state, name, args)
    raise ToolError(f"no tool {name!r}")       # pragma: no cover - the catalog and this table list the same tools


def _dump_path(state: State, value: str) -> str:
    """Where MindSpore is told to dump: an absolute path under a root (it need not exist yet)."""
    parent = os.path.dirname(os.path.abspath(value)) or "/"
    state.settings.roots.path(parent, "dump_path's parent")
    return os.path.join(os.path.realpath(parent), os.path.basename(value))


def build(settings: Settings) -> Server:
    state = State(settings)

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=t.name, description=t.description, input_schema=t.input_schema,
                       output_schema=t.output_schema,
                       annotations=types.ToolAnnotations(read_only_hint=not (t.name == "repro" and
                                                                             settings.roots.write),
                                                         destructive_hint=False, open_world_hint=False))
            for t in catalog.tools()])

    async def handle_call(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            answer = await anyio.to_thread.run_sync(call_tool, state, params.name, params.arguments)
        except ToolError as exc:
            return _error(str(exc))
        except Exception as exc:  # noqa: BLE001 - one line, never a traceback
            return _error(f"internal error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
        return types.CallToolResult(content=[types.TextContent(text=tools.dumps(answer))],
                                    structured_content=answer)

    return Server("msoverflow", version=__version__, instructions=INSTRUCTIONS, on_list_tools=list_tools,
                  on_call_tool=handle_call)


def _error(line: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=f"msoverflow: error: {line}")], is_error=True)


def serve(settings: Settings) -> None:
    server = build(settings)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)
