"""What a format's reader module declares: `READER = Reader(...)` (msoverflow/readers/registry.py lists the
modules and hands each leaf directory's files to the reader that recognises them).

Kept apart from the registry so a reader module imports only this, and the registry may name the readers' own
types (statistic.csv's StatTable) without an import circle.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Tuple


@dataclass(frozen=True)
class Reader:
    name: str
    # read(content, files): adds what the files hold to content (a registry.DirContent); files are the names it
    # recognised ([] for a reader of whole layouts)
    read: Callable[[Any, list], None]
    kinds: Tuple[str, ...] = ()          # names.KIND_* of the files it reads
    file_names: Tuple[str, ...] = ()     # exact file names it reads (statistic.csv)
    layouts: Tuple[str, ...] = ()        # it reads whole directories of these layouts (msprobe)
    ignores: Tuple[str, ...] = ()        # name prefixes that belong to it but hold no tensor (acl_dump*.json)
