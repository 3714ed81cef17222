"""Path confinement: an agent names files; the server reads only under the --root directories it was started with.

A path is resolved (relative paths against the first root, `..` collapsed, every symlink followed) before it is
judged, so `root/../etc`, a symlink inside a root that points out of it and an absolute path elsewhere are all
refused with the same one line naming the roots.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Tuple


class ToolError(Exception):
    """A tool call the agent can fix: one line, returned as the tool's error result (never a traceback)."""


@dataclass(frozen=True)
class Roots:
    """The directories the server may read (`--root`) and the one it may write (`--allow-write`, or None)."""
    read: Tuple[str, ...]
    write: Optional[str] = None

    @classmethod
    def of(cls, roots, write: Optional[str] = None) -> "Roots":
        resolved = tuple(os.path.realpath(r) for r in roots)
        return cls(resolved, os.path.realpath(write) if write else None)

    def names(self) -> str:
        return ", ".join(self.read) or "(none)"

    def path(self, value, argument: str) -> str:
        """`value` resolved and checked to lie under a root; ToolError naming the roots otherwise."""
        if not isinstance(value, str) or not value or "\0" in value:
            raise ToolError(f"{argument} must be a non-empty path string, not {type(value).__name__}")
        joined = value if os.path.isabs(value) else os.path.join(self.read[0] if self.read else os.getcwd(), value)
        resolved = os.path.realpath(joined)
        if not any(_under(resolved, root) for root in self.read):
            raise ToolError(f"{argument} {value!r} resolves to {resolved}, outside the server's roots "
                            f"({self.names()}); give a path under one of them (symlinks and '..' are followed "
                            "before this check)")
        if not os.path.exists(resolved):
            raise ToolError(f"{argument} {value!r}: no such file or directory (under the roots {self.names()})")
        return resolved

    def output_dir(self, what: str) -> str:
        """The directory a writing tool writes into; ToolError when the server was not started with --allow-write."""
        if not self.write:
            raise ToolError(f"{what} writes files and this server was started without --allow-write DIR: "
                            "nothing was written (restart it with --allow-write DIR to let it write there)")
        return self.write


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)
