"""watch_status(dir): what a `msoverflow watch` directory holds, read through the watch package's own reader.

`msoverflow watch` is being built on another branch; this msoverflow has no watch package, so the tool says so
plainly instead of guessing a file layout it cannot check.
"""
from __future__ import annotations

import importlib
import importlib.util

from .confine import ToolError
from .tools import call, fit


def watch_status(directory: str) -> dict:
    if importlib.util.find_spec("msoverflow.watch") is None:
        return {"found": False, "dir": directory,
                "reason": "no watch found: this msoverflow has no `msoverflow watch` (no watch package), so nothing "
                          "in this directory can be read as a watch",
                "next": [call("analyze", "find the origin in the run's dump instead", path=directory)]}
    module = importlib.import_module("msoverflow.watch")
    status = getattr(module, "status", None)
    if status is None:
        raise ToolError("no watch found: this msoverflow's watch package offers no status reader")
    answer = {"found": True, "dir": directory, "status": status(directory)}
    answer["next"] = [call("analyze", "find the origin in the watched run's dump", path=directory)]
    return fit(answer)
