"""Lazy tensor evaluation: stats when the dump already has them, otherwise a memory-mapped, chunked read,
only of the tensors a rule asks about. Unreadable files are reported once and treated as unknown."""
from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

import numpy as np

from . import stats as tensor_stats
from .dtypes import canonical
from .errors import READ_ERRORS, TruncatedFile
from .model import Status, TensorEvent, TensorStats
from .readers import npy


class TensorAccess:
    def __init__(self, warn: Callable[[str], None]):
        self.warn = warn
        self._scan: Dict[int, Tuple[Optional[bool], bool]] = {}
        self._stats: Dict[int, Optional[TensorStats]] = {}
        self.tensors_read = 0
        self.unreadable = 0

    # -- loading ---------------------------------------------------------------------------------------------
    def array(self, event: TensorEvent) -> Optional[np.ndarray]:
        """The tensor as a memory map (nothing read until touched); None when it cannot be read."""
        if event is None:
            return None
        try:
            if event.loader is not None:
                return event.loader()
            if not event.source.endswith(".npy"):
                return None
            header, array = npy.load(event.source)
            _take_header(event, header)
            return array
        except READ_ERRORS as exc:
            self._unreadable(event, str(exc), Status.TRUNCATED if isinstance(exc, TruncatedFile) else
                             Status.UNREADABLE)
        return None

    def seed(self, event: TensorEvent, header: "npy.NpyHeader", bad: bool, pinned: bool):
        """What a batch check already found for an npy tensor (msoverflow/walk.py), as array() and a scan would
        have recorded it. The caller counts the read."""
        _take_header(event, header)
        self._scan[id(event)] = (bad, pinned)

    def _unreadable(self, event: TensorEvent, why: str, status: Status):
        self.unreadable += 1
        event.status, event.note = status, f"unreadable: {why}"
        self.warn(f"{event.source}: {why}; skipped")

    # -- questions rules ask -----------------------------------------------------------------------------------
    def _scan_of(self, event: TensorEvent) -> Tuple[Optional[bool], bool]:
        key = id(event)
        if key not in self._scan:
            if event.stats is not None:       # statistic.csv: no tensor read
                self._scan[key] = (event.stats.bad, event.stats.at_max > 0)
            else:
                array = self.array(event)
                if array is None:
                    self._scan[key] = (None, False)
                else:
                    self.tensors_read += 1
                    self._scan[key] = tensor_stats.scan(array, event.dtype)
        return self._scan[key]

    def known_bad(self, event: TensorEvent) -> Optional[bool]:
        """What the dump's own statistics say, without reading the tensor; None when they say nothing."""
        return event.stats.bad if event.stats is not None else None

    def bad(self, event: TensorEvent) -> Optional[bool]:
        return self._scan_of(event)[0]

    def pinned(self, event: TensorEvent) -> bool:
        return self._scan_of(event)[1]

    def stats(self, event: Optional[TensorEvent]) -> Optional[TensorStats]:
        if event is None:
            return None
        if event.stats is not None:
            return event.stats
        key = id(event)
        if key not in self._stats:
            array = self.array(event)
            self._stats[key] = None if array is None else tensor_stats.compute(array, event.dtype)
        return self._stats[key]

    def adopt(self, other: "TensorAccess", events):
        """Take over another access's counts and what it knows of `events` (which stay alive with the caller:
        the caches are keyed by object id, and an id is only safe while its object lives)."""
        self.tensors_read += other.tensors_read
        self.unreadable += other.unreadable
        for event in events:
            key = id(event)
            if key in other._scan:
                self._scan[key] = other._scan[key]
            if key in other._stats:
                self._stats[key] = other._stats[key]

    def forget(self, event: TensorEvent):
        """Drop cached results of a tensor nobody will ask about again (keeps memory flat on long scans)."""
        self._scan.pop(id(event), None)
        self._stats.pop(id(event), None)


def _take_header(event: TensorEvent, header: "npy.NpyHeader") -> None:
    """What an npy header tells about its tensor: declared dtype (when the name did not), shape, and the dtype of
    the bytes when they differ from the declared one (MindSpore CPU writes fp32 bytes under fp16 names)."""
    if event.dtype is None:
        event.dtype = canonical(header.header_dtype.name)
    event.shape = header.shape
    if header.mismatch:
        event.payload_dtype = canonical(header.payload_dtype.name)
        if event.payload_dtype == event.dtype:
            event.payload_dtype = None
