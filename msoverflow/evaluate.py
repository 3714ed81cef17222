"""Lazy tensor evaluation: stats when the dump already has them, otherwise a memory-mapped, chunked read,
only of the tensors a rule asks about. Unreadable files are reported once and treated as unknown.

What is known of a tensor is kept by its place in the dump (file, input or output, slot, op, time stamp), never
by an object's id(): a step read again (the harmless stage, the diagnosis) makes new event objects of the same
files, and one access shared by every stage reads each file once."""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from . import stats as tensor_stats
from .dtypes import canonical
from .errors import READ_ERRORS, TruncatedFile
from .model import Status, TensorEvent, TensorStats
from .readers import npy

TensorKey = Tuple[str, str, int, str, int]
KEEP_ARRAYS = 64                    # tensors opened and kept (memory maps cost address space, not memory)
KEEP_LOADED_BYTES = 64 << 20        # decoded tensors (binary dumps) kept, in bytes


def tensor_key(event: TensorEvent) -> TensorKey:
    """A tensor's place in the dump: the same for every event object made of it."""
    return (event.source, event.io, event.slot, event.op_name, event.timestamp)


class TensorAccess:
    def __init__(self, warn: Callable[[str], None]):
        self.warn = warn
        self._scan: Dict[TensorKey, Tuple[Optional[bool], bool]] = {}
        self._stats: Dict[TensorKey, Optional[TensorStats]] = {}
        # key -> (npy header or None, array) of the last tensors opened
        self._arrays: "OrderedDict[TensorKey, Tuple[Any, Any]]" = OrderedDict()
        self._loaded_bytes = 0
        # tensors that could not be read: key -> (why, status); named once, whichever stage asks again
        self._failed: Dict[TensorKey, Tuple[str, Status]] = {}
        self.tensors_read = 0
        self.unreadable = 0

    # -- loading ---------------------------------------------------------------------------------------------
    def array(self, event: TensorEvent) -> Optional[np.ndarray]:
        """The tensor as a memory map (nothing read until touched); None when it cannot be read. A tensor is
        opened once: the last few are kept, and one that cannot be read is named once."""
        if event is None:
            return None
        key = tensor_key(event)
        failed = self._failed.get(key)
        if failed is not None:                 # unreadable: named when first met
            event.status, event.note = failed[1], f"unreadable: {failed[0]}"
            return None
        kept = self._arrays.get(key)
        if kept is not None:
            self._arrays.move_to_end(key)
            header, array = kept
            if header is not None:
                _take_header(event, header)
            return array
        try:
            if event.loader is not None:
                array = event.loader()
                self._keep(key, None, array, int(getattr(array, "nbytes", 0) or 0))
                return array
            if not event.source.endswith(".npy"):
                return None
            header, array = npy.load(event.source)
            _take_header(event, header)
            self._keep(key, header, array, 0)
            return array
        except READ_ERRORS as exc:
            status = Status.TRUNCATED if isinstance(exc, TruncatedFile) else Status.UNREADABLE
            self._failed[key] = (str(exc), status)
            self._unreadable(event, str(exc), status)
        return None

    def _keep(self, key: TensorKey, header, array, nbytes: int) -> None:
        if nbytes > KEEP_LOADED_BYTES:
            return
        self._arrays[key] = (header, array)
        self._loaded_bytes += nbytes
        while len(self._arrays) > KEEP_ARRAYS or self._loaded_bytes > KEEP_LOADED_BYTES:
            _old, (old_header, old) = self._arrays.popitem(last=False)
            if old_header is None:
                self._loaded_bytes -= int(getattr(old, "nbytes", 0) or 0)

    def seed(self, event: TensorEvent, header: "npy.NpyHeader", bad: bool, pinned: bool):
        """What a batch check already found for an npy tensor (msoverflow/walk.py), as array() and a scan would
        have recorded it. The caller counts the read."""
        _take_header(event, header)
        self._scan[tensor_key(event)] = (bad, pinned)

    def _unreadable(self, event: TensorEvent, why: str, status: Status):
        self.unreadable += 1
        event.status, event.note = status, f"unreadable: {why}"
        self.warn(f"{event.source}: {why}; skipped")

    # -- questions rules ask -----------------------------------------------------------------------------------
    def _scan_of(self, event: TensorEvent) -> Tuple[Optional[bool], bool]:
        key = tensor_key(event)
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
        key = tensor_key(event)
        if key not in self._stats:
            array = self.array(event)
            self._stats[key] = None if array is None else tensor_stats.compute(array, event.dtype)
        return self._stats[key]

    def adopt(self, other: "TensorAccess", events):
        """Take over another access's counts, the tensors it could not read (named: never again), and what it
        knows of `events`."""
        self.tensors_read += other.tensors_read
        self.unreadable += other.unreadable
        self._failed.update(other._failed)
        for event in events:
            key = tensor_key(event)
            if key in other._scan:
                self._scan[key] = other._scan[key]
            if key in other._stats:
                self._stats[key] = other._stats[key]

    def known(self, events) -> Dict[TensorKey, tuple]:
        """What this access found of `events` (key -> (scan or None, whether stats were computed, stats, (why,
        status) when it could not be read)), and every tensor it could not read, to hand to another process's
        access."""
        found: Dict[TensorKey, tuple] = {key: (None, False, None, failed) for key, failed in self._failed.items()}
        for event in events:
            key = tensor_key(event)
            if key in self._scan or key in self._stats:
                found[key] = (self._scan.get(key), key in self._stats, self._stats.get(key), self._failed.get(key))
        return found

    def learn(self, known: Dict[TensorKey, tuple]) -> None:
        """Take what another access found (known())."""
        for key, (scan, has_stats, stats, failed) in known.items():
            if scan is not None:
                self._scan[key] = scan
            if has_stats:
                self._stats[key] = stats
            if failed is not None:
                self._failed[key] = failed

    def forget(self, event: TensorEvent):
        """Drop cached results of a tensor nobody will ask about again (keeps memory flat on long scans)."""
        key = tensor_key(event)
        self._scan.pop(key, None)
        self._stats.pop(key, None)
        kept = self._arrays.pop(key, None)
        if kept is not None and kept[0] is None:
            self._loaded_bytes -= int(getattr(kept[1], "nbytes", 0) or 0)


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
