"""Showing and writing a patched text file: a unified diff by default, an atomic write with a backup on request."""
from __future__ import annotations

import difflib
import os
import shutil
import tempfile


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
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".msoverflow-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return backup
