"""Command line: argument parsing only. Every command module imports its heavy parts inside `run`."""
from __future__ import annotations

import argparse
import importlib
import sys

from .errors import EXIT_CODES_HELP, EXIT_INTERNAL, EXIT_USAGE, UserError, file_of
from .logs import add_options as add_logging_options
from .version import __version__

# Command name -> one-line help. Only the command being run is imported (msoverflow/commands/NAME.py defines
# register(subparsers) -> parser with set_defaults(run=...)); the others appear in --help from this table alone,
# so `--help` and `analyze` import no other command's code (config pulls in the dump-config tables, patch libcst).
COMMANDS = {
    "analyze": "find the first op that created inf/NaN/out-of-range values in a dump",
    "compare": "compare two dumps: the first op where a target run parts from a baseline run",
    "convert": "convert Ascend binary dump files to npy (writes only into OUTDIR)",
    "config": "write or check a MindSpore dump config",
    "run": "run a training command under a dump, then analyze it",
    "watch": "watch a training run step by step: early warnings, and the root cause of a blow-up",
    "hunt": "watch a PyNative training run live and name the op that made the first bad value",
    "patch": "patch the precision where the overflow was born, and verify by re-running",
    "repro": "write a standalone script that re-runs the origin op alone, from its dumped inputs",
    "mcp": "serve msoverflow's tools to coding agents (Model Context Protocol over stdio)",
    "demo": "overflow -> dump -> analyze -> patch -> verify, on a tiny real MindSpore model",
}
# where a command's module lives when not in commands/ (the MCP server sits above the commands it serves)
MODULES = {"mcp": ".agent.command"}
ALIASES = {"analyse": "analyze"}      # other spellings a command answers to (its module registers them too)


def _command_in(argv) -> str:
    """The command named on the line (the first word that is one), before any `--`."""
    for word in argv:
        if word == "--":
            break
        if word in COMMANDS or word in ALIASES:
            return ALIASES.get(word, word)
    return ""


def build_parser(argv=None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="msoverflow",
        description="Find the first MindSpore operator that overflowed (which op, Cell, source line, rank, step), "
                    "explain it, and patch the precision. " + EXIT_CODES_HELP)
    parser.add_argument("--version", action="version", version=f"msoverflow {__version__}")
    parser.add_argument("--debug", action="store_true", help="print the traceback of an internal error (exit 4)")
    add_logging_options(parser, top_level=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = _command_in(argv or [])
    for name, help_text in COMMANDS.items():
        if name == chosen:
            module = MODULES.get(name, f".commands.{name}")
            try:
                add_logging_options(importlib.import_module(module, __package__).register(sub))
                continue
            except ModuleNotFoundError as exc:
                if exc.name != f"{__package__}{module}":
                    raise
        sub.add_parser(name, help=help_text, add_help=False,
                       aliases=[alias for alias, command in ALIASES.items() if command == name])
    return parser


def _split_debug(argv):
    """--debug is accepted anywhere before a `--` (which passes the rest to a user's command)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    debug = "--debug" in argv[:cut]
    return [a for a in argv[:cut] if a != "--debug"] + argv[cut:], debug


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _tolerant_streams() -> None:
    """File names with bytes that are not UTF-8 (surrogate escapes) print as \\xNN instead of crashing."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]  # else AttributeError
        except (AttributeError, ValueError):
            pass


def main(argv=None) -> int:
    _tolerant_streams()
    argv, debug = _split_debug(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return EXIT_USAGE
    args.command_line = argv     # reports record what produced them (msoverflow.provenance)
    try:
        from .commands._output import check_paths
        from .logs import session as logging_session
        check_paths(args)     # every path the command writes, against every dump it reads: before anything exists
        with logging_session(args, argv):
            return int(args.run(args) or 0)
    except UserError as exc:
        print(f"msoverflow: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("msoverflow: interrupted", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - the contract: one line and exit 4, never a bare traceback
        if debug:
            import traceback
            traceback.print_exc()
        where = file_of(exc)
        where = f" while reading {where!r}" if where else ""
        print(f"msoverflow: internal error{where}: {type(exc).__name__}: {_one_line(exc)[:300]}"
              + ("" if debug else " (--debug shows the traceback)"), file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
