"""Find the dump's leaf directories and what each one is (rank, graph, iteration), for every known layout.

O0/O1, CPU, GPU, 2.2 async : {path}/rank_{r}/{net}/{graph}/{iteration}/
2.2 async overflow files   : {path}/rank_{r}/debug_files/{iteration}/
O2 ACL dump (2.3-2.5)      : {path}/{step}/{time}/{device}/{model_name}/{model_id}/{iteration}/
GE dump                    : {path}/{time}/{device}/{model_name}/{model_id}/{iteration}/
msprobe kernel dump (O2 2.5+ through adump): {path}/rank_{r}/{timestamp}/step_{k}/ (+ {path}/acl_dump_{device}.json);
                             step_{k} is the iteration
msprobe framework dump     : {path}/[graph|pynative/]step{k}/rank{r}|proc{pid}/ with dump.json, stack.json,
                             construct.json, dump_tensor_data/ (read by readers/msprobe.py)
The path given may point at any level inside a dump; leaf directories are interpreted by their absolute path.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable, List, Optional

from .errors import UserError

# ASCII digits, bounded: a directory named with a million digits is not an iteration.
_RANK = re.compile(r"^rank_([0-9]{1,9})$")
_DIGITS = re.compile(r"^[0-9]{1,18}$")
_TIME = re.compile(r"^[0-9]{14}$")   # ACL/GE time directory: YYYYMMDDhhmmss
_KERNEL_STEP = re.compile(r"^step_([0-9]{1,18})$")        # msprobe adump: rank_{r}/{timestamp}/step_{k}
_FRAMEWORK_STEP = re.compile(r"^step([0-9]{1,18})$")      # msprobe PrecisionDebugger: step{k}/rank{r}
_FRAMEWORK_RANK = re.compile(r"^(?:rank([0-9]{1,9})|proc([0-9]{1,18}))$")

LAYOUT_MS = "mindspore"       # rank_{r}/{net}/{graph}/{iter}
LAYOUT_DEBUG = "debug_files"  # rank_{r}/debug_files/{iter}
LAYOUT_ACL = "acl"            # {step}/{time}/{device}/{model}/{model_id}/{iter}
LAYOUT_GE = "ge"              # {time}/{device}/{model}/{model_id}/{iter}
LAYOUT_MSPROBE_KERNEL = "msprobe-kernel"   # rank_{r}/{timestamp}/step_{k}
LAYOUT_MSPROBE = "msprobe"    # step{k}/rank{r}/dump.json
LAYOUT_UNKNOWN = "unknown"


@dataclass(frozen=True)
class DumpDir:
    path: str
    layout: str
    rank: int
    graph: str
    iteration: int
    net: str = ""
    rank_root: Optional[str] = None   # rank_{r} directory: graphs/, execution_order/, .dump_metadata/
    step: Optional[int] = None        # ACL: the step directory


def _is_dump_file(name: str) -> bool:
    return name.endswith(".npy") or name in ("statistic.csv", "dump.json") or name.startswith("Opdebug.") or (
        name.count(".") >= 3 and not name.endswith((".json", ".ir", ".pb", ".txt", ".log")))


def _not_regular(path: str) -> str:
    import stat
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "a dangling link"
    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return word
    return "special file"


def interpret(path: str) -> DumpDir:
    """What a directory holding dump files is, from its absolute path."""
    parts = os.path.abspath(path).split(os.sep)

    def at(i):
        return parts[i] if len(parts) >= -i else ""

    last = at(-1)
    if _DIGITS.match(last):
        iteration = int(last)
        if at(-2) == "debug_files" and _RANK.match(at(-3)):
            root = os.sep.join(parts[:-2])
            return DumpDir(path, LAYOUT_DEBUG, int(_RANK.match(at(-3)).group(1)), "debug", iteration,
                           rank_root=root)
        if _DIGITS.match(at(-2)) and _RANK.match(at(-4)):
            root = os.sep.join(parts[:-3])
            return DumpDir(path, LAYOUT_MS, int(_RANK.match(at(-4)).group(1)), at(-2), iteration, net=at(-3),
                           rank_root=root)
        if _DIGITS.match(at(-2)) and _DIGITS.match(at(-4)) and _TIME.match(at(-5)):
            step = int(at(-6)) if _DIGITS.match(at(-6)) else None
            layout = LAYOUT_ACL if step is not None else LAYOUT_GE
            return DumpDir(path, layout, int(at(-4)), at(-2), iteration, net=at(-3), step=step)
    step = _KERNEL_STEP.match(last)
    if step and _RANK.match(at(-3)):
        return DumpDir(path, LAYOUT_MSPROBE_KERNEL, int(_RANK.match(at(-3)).group(1)), "0", int(step.group(1)),
                       net=at(-2), step=int(step.group(1)))
    framework_rank = _FRAMEWORK_RANK.match(last)
    framework_step = _FRAMEWORK_STEP.match(at(-2))
    if framework_rank and framework_step:
        rank = int(framework_rank.group(1)) if framework_rank.group(1) is not None else 0
        graph = at(-3) if at(-3) in ("graph", "pynative") else "pynative"
        return DumpDir(path, LAYOUT_MSPROBE, rank, graph, int(framework_step.group(1)), net=last,
                       step=int(framework_step.group(1)))
    rank = next((int(m.group(1)) for m in map(_RANK.match, reversed(parts)) if m), 0)
    iteration = int(last) if _DIGITS.match(last) else 0
    return DumpDir(path, LAYOUT_UNKNOWN, rank, "?", iteration)


def discover(path: str, warn: Callable[[str], None]) -> List[DumpDir]:
    """Every directory under `path` that holds dump files, in a stable order. Follows symlinks once (no loops)."""
    if not os.path.exists(path):
        raise UserError(f"{path}: no such file or directory")
    if not os.path.isdir(path):
        raise UserError(f"{path}: not a directory (give the dump directory, or any directory inside it)")
    if not os.access(path, os.R_OK | os.X_OK):
        raise UserError(f"{path}: directory is not readable")
    found: List[DumpDir] = []
    seen = set()
    stack = [os.path.abspath(path)]
    while stack:
        current = stack.pop()
        real = os.path.realpath(current)
        if real in seen:
            warn(f"{current}: directory visited twice (symlink loop or duplicate link), skipped")
            continue
        seen.add(real)
        try:
            entries = list(os.scandir(current))
        except OSError as exc:
            warn(f"{current}: cannot list directory ({exc.strerror})")
            continue
        subdirs = []
        has_files = False
        for entry in entries:
            try:
                if entry.is_dir():
                    if entry.name not in ("graphs", "execution_order", ".dump_metadata", "dump_tensor_data"):
                        subdirs.append(entry.path)
                elif not entry.is_file():   # regular files only (symlinks followed): never a FIFO or device
                    warn(f"{entry.path}: {_not_regular(entry.path)}, not a regular file: skipped")
                elif _is_dump_file(entry.name):
                    has_files = True
            except OSError:
                warn(f"{entry.path}: cannot stat, skipped")
        if has_files:
            found.append(interpret(current))
        stack.extend(sorted(subdirs, reverse=True))
    found.sort(key=lambda d: (d.rank, d.iteration, d.graph, d.path))
    return found
