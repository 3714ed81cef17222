"""Showing and writing a patched text file: a unified diff by default, an atomic write with a backup on request."""
from __future__ import annotations

import difflib
import os
import shutil


def unified_diff(path: str, original: str, patched: str) -> str:
    return "".join(difflib.unified_diff(original.splitlines(True), patched.splitlines(True),
                                        fromfile=path, tofile=f"{path} (patched)"))


def write_atomic(path: str, text: str) -> str:
    """Replace `path` by `text` atomically (temp file in the same directory + os.replace), keeping its mode,
    after copying the original to `path.orig` (`.orig.1`, ... if that exists). Returns the backup's path."""
    backup = path + ".orig"
    n = 1
    while os.path.exists(backup):
        backup = f"{path}.orig.{n}"
        n += 1
    shutil.copy2(path, backup)
    from ..safeio import write_atomic as write_whole
    write_whole(path, text, what="the patched file", newline="")
    return backup
