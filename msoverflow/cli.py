"""Command line: argument parsing only. Every command module imports its heavy parts inside `run`."""
from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__
from .errors import UserError

# Each module in msoverflow/commands defines register(subparsers) -> parser with set_defaults(run=...).
COMMANDS = ["analyze", "convert", "config", "run", "patch", "demo"]

EXIT_CLEAN, EXIT_ANOMALY, EXIT_ERROR = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="msoverflow",
        description="Find the first MindSpore operator that overflowed (which op, Cell, source line, rank, step), "
                    "explain it, and patch the precision. Exit codes: 0 clean, 1 anomaly found, 2 error.")
    parser.add_argument("--version", action="version", version=f"msoverflow {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f".commands.{name}", __package__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.commands.{name}":
                raise
            continue
        module.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return EXIT_ERROR
    try:
        return int(args.run(args) or 0)
    except UserError as exc:
        print(f"msoverflow: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("msoverflow: interrupted", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
