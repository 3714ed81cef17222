"""The subcommands; each module registers its parser and its `run(args)`."""
from __future__ import annotations


def training_command(args) -> list:
    """The command given after '--' (argparse.REMAINDER keeps the separator itself)."""
    command = list(args.command or [])
    return command[1:] if command and command[0] == "--" else command
