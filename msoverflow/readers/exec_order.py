"""execution_order/ms_execution_order_graph_{g}.csv and .dump_metadata/ beside a rank's dump.

The csv is the graph's kernel order; real CPU runs show it can differ from the run order, so it only breaks ties
(the walk), counts the kernels a step should have (completeness) and tells ranks that run different graphs apart
(the parallel layout). It is read once per version of the file, streamed and bounded: past MAX_KERNELS kernels or
MAX_ORDER_CHARS characters of names are not kept (a warning), but still counted for completeness.
"""
from __future__ import annotations

import os
import stat
from functools import lru_cache
from typing import Dict, Mapping, Optional, Tuple

from .. import safeio
from ..names import scope_to_file_name

MAX_KERNELS = 1 << 19            # kernels of one graph whose order is kept (a large model's stage has ~10^5)
MAX_NAME_CHARS = 4096            # one scoped kernel name (real ones are a few hundred characters)
MAX_ORDER_CHARS = 64 << 20       # characters of names kept for one graph
MAX_COUNT_CHARS = 1 << 30        # past the names kept, lines are only counted, up to this much of the file


class KernelOrder(Mapping):
    """A graph's execution order, read-only and shared: file-style kernel name -> position, and `listed`, how
    many kernels the csv lists. Past MAX_KERNELS kernels (or MAX_ORDER_CHARS of names) the names are not kept
    (no order), but `listed` still counts them (a lower bound when `cut`: the file went on past MAX_COUNT_CHARS),
    so a step is still measured against what its graph says it holds."""
    __slots__ = ("_positions", "listed", "cut")

    def __init__(self, positions: Dict[str, int], listed: int, cut: bool = False):
        self._positions = positions
        self.listed = listed
        self.cut = cut

    def __getitem__(self, name: str) -> int:
        return self._positions[name]

    def __iter__(self):
        return iter(self._positions)

    def __len__(self) -> int:
        return len(self._positions)


_EMPTY = KernelOrder({}, 0)


def order_path(rank_root: str, graph: str) -> str:
    return os.path.join(rank_root, "execution_order", f"ms_execution_order_graph_{graph}.csv")


def execution_order(rank_root: str, graph: str, warn) -> KernelOrder:
    """The graph's KernelOrder (empty when the csv is missing or unreadable); `warn` hears, on every call, why
    it could not be read or why its names were not kept."""
    path = order_path(rank_root, graph)
    try:
        info = os.stat(path)
    except OSError:
        return _EMPTY
    if not stat.S_ISREG(info.st_mode):
        return _EMPTY
    order, problem = _read_order(path, (info.st_mtime_ns, info.st_size, info.st_ino))
    if problem:
        warn(problem)
    return order


@lru_cache(maxsize=64)
def _read_order(path: str, _version) -> Tuple[KernelOrder, Optional[str]]:
    order: Optional[Dict[str, int]] = {}
    listed = chars = 0
    try:
        with safeio.open_regular(path, "r", encoding="utf-8", errors="replace") as fh:
            for position, line in enumerate(safeio.bounded_lines(fh, MAX_NAME_CHARS)):
                chars += len(line)
                name = line.strip()
                if not name or name.startswith("NodeExecutionOrder"):
                    continue
                listed += 1
                if order is not None and (listed > MAX_KERNELS or chars > MAX_ORDER_CHARS):
                    order = None             # too many to keep: from here on only counted
                if order is not None:
                    order.setdefault(scope_to_file_name(name), position)
                elif chars > MAX_COUNT_CHARS:
                    return KernelOrder({}, listed, cut=True), (
                        f"{path}: more than {listed} kernels (counting stopped after {MAX_COUNT_CHARS >> 20} MiB); "
                        "their order is not used")
    except OSError as exc:
        return _EMPTY, f"{path}: cannot read ({exc.strerror or exc})"
    if order is None:
        return KernelOrder({}, listed), (f"{path}: {listed} kernels, more than the {MAX_KERNELS} whose order is "
                                         "kept; their order is not used (their number is)")
    return KernelOrder(order, listed), None


def dump_metadata(rank_root: str, warn) -> Dict[str, object]:
    """device_target, ms_version and the user's dump config, from rank_N/.dump_metadata/ (layout.py parses it: the
    Dump holds it, parsed once)."""
    from ..layout import read_dump_metadata
    return read_dump_metadata(rank_root, warn)
