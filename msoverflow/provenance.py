"""What produced a report, so a report attached to an issue weeks later can be traced: msoverflow's version, the
command line, when, on which host, and the MindSpore version that wrote the dump (its .dump_metadata, when present).
Filled in one place, by msoverflow.api.analyze (and api.compare for a Comparison); the renderers only show it."""
from __future__ import annotations

import datetime
import shlex
import socket
from typing import Optional, Sequence, Union

from .model import Report
from .version import __version__


def command_line(argv: Union[None, str, Sequence[str]]) -> Optional[str]:
    """The command as a user could paste it again (`msoverflow analyze dump --steps 2`)."""
    if argv is None or isinstance(argv, str):
        return argv
    return " ".join(shlex.quote(str(word)) for word in ["msoverflow", *argv])


def collect(report: Report, command: Union[None, str, Sequence[str]] = None) -> dict:
    meta = report.extra.get("mindspore")
    if not isinstance(meta, dict):
        meta = {}
    version = meta.get("version")
    # None when the dump holds no .dump_metadata (msprobe, ACL, hand-copied files): never guessed
    return stamp(command, str(version) if isinstance(version, (str, int, float)) and version == version else None)


def stamp(command: Union[None, str, Sequence[str]] = None, mindspore_version: Optional[str] = None) -> dict:
    """msoverflow's version, the command, when and where (a Report's or a Comparison's provenance)."""
    return {
        "msoverflow_version": __version__,
        "command": command_line(command),
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "mindspore_version": mindspore_version,
    }

