"""The subcommands; each module registers its parser and its `run(args)`."""
from __future__ import annotations


def add_training_command(parser) -> None:
    """The one positional argument of run, hunt and patch --verify: the training command after '--'."""
    import argparse
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the training command, after '--'")


def training_command(args) -> list:
    """The command given after '--' (argparse.REMAINDER keeps the separator itself)."""
    command = list(args.command or [])
    return command[1:] if command and command[0] == "--" else command
