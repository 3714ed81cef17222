"""msoverflow watch: a training run watched step by step (early warnings, the root cause of a finite blow-up).

The public functions below are `msoverflow.watch` and `msoverflow.watch_history`; they live here rather than in
msoverflow/api.py because the watch re-runs a command through config/runner.py, which itself ends in the API.
"""
from __future__ import annotations

import os
from typing import Callable, Optional, Sequence, Union


def watch(command: Sequence[str], dump_dir: Union[None, str, "os.PathLike[str]"] = None, *, keep: int = 20,
          warn_ahead: int = 10, on_event: str = "dump", full_every: Optional[int] = None,
          device: Optional[str] = None, say: Optional[Callable[[str], None]] = None):
    """Run a training command watched (`msoverflow watch`); its WatchReport (events, root_cause, first). say: each
    warning as it happens (default: the msoverflow logger). full_every: a full step every N steps (default: as
    the cost budget allows)."""
    from .session import watch as run_watch
    return run_watch(list(command), None if dump_dir is None else os.fspath(dump_dir), keep=keep,
                     warn_ahead=warn_ahead, on_event=on_event, full_every=full_every, device=device, say=say).report


def watch_history(path: Union[str, "os.PathLike[str]"], *, warn_ahead: int = 10):
    """The watch's detectors and root cause over a finished statistics dump (statistic.csv per step): the
    WatchReport `analyze --history` prints."""
    from ..api import _path
    from .session import from_dump
    return from_dump(_path("path", path), warn_ahead)
