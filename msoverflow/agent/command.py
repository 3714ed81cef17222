"""`msoverflow mcp`: msoverflow's tools for coding agents, as a Model Context Protocol server over stdio.

Needs the `agent` extra (the official `mcp` SDK); without it the command says which extra to install (exit 2).
Nothing of the SDK is imported until the command runs, so `msoverflow --help` stays fast.
"""
from __future__ import annotations

import argparse
import importlib.util
import os


def register(subparsers):
    parser = subparsers.add_parser(
        "mcp", help="serve msoverflow's tools to coding agents (Model Context Protocol over stdio)",
        description="A Model Context Protocol server over stdio for coding agents: analyze, explain, events, "
                    "compare, config, check_config, patch_preview, repro, watch_status. Every path must lie under a "
                    "--root; nothing is written unless --allow-write DIR; no training is run. Each tool call that "
                    "reads runs in a child process stopped at --timeout and capped at --memory-mb. Needs the "
                    "'agent' extra: pip install 'msoverflow[agent]'. Exit codes: 0 the client closed the "
                    "connection, 2 bad usage or the extra is missing.")
    parser.add_argument("--root", action="append", metavar="DIR", default=None,
                        help="a directory the tools may read (repeatable; default: the current directory)")
    parser.add_argument("--allow-write", metavar="DIR",
                        help="the one directory tools may write into (repro's script and inputs); default: none")
    parser.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                        help="time limit of one tool call (default 300)")
    parser.add_argument("--memory-mb", type=int, default=4096, metavar="MB",
                        help="memory one tool call may map beyond the imported library (default 4096)")
    parser.add_argument("--print-skill", action="store_true",
                        help="print the SKILL.md for coding agents shipped in the package (no server; no extra needed)")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from ..errors import UserError
    if args.print_skill:
        from importlib import resources
        print(resources.files("msoverflow.agent").joinpath("SKILL.md").read_text("utf-8"), end="")
        return 0
    if importlib.util.find_spec("mcp") is None:
        raise UserError("msoverflow mcp needs the 'agent' extra: pip install 'msoverflow[agent]'")
    roots = args.root or [os.getcwd()]
    for root in roots + ([args.allow_write] if args.allow_write else []):
        if not os.path.isdir(root):
            raise UserError(f"{root}: not a directory")
    if not args.timeout > 0 or args.memory_mb < 1:
        raise UserError("--timeout must be above 0 and --memory-mb at least 1")
    from .confine import Roots
    from .server import Settings, serve
    serve(Settings(Roots.of(roots, args.allow_write), timeout=args.timeout, memory_mb=args.memory_mb))
    return 0
