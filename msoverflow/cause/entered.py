"""Where a corrupted but finite value entered: the op that read it from a weight, upstream of the op it overflowed.

A stomp can write finite garbage (|x| up to 1e38) into a weight. Where it is read (a Gather of an embedding table)
it is no bad value; an op downstream overflows on it and is the walk's origin, `domain` by its own recompute. When
the origin's largest input stands out from its others by orders of magnitude (rules/corruption.stands_out; only
then is the step read again), the value is followed back through ops whose outputs carry it unchanged (Reshape, Gather, Transpose ...)
to the op that read it from a Parameter. That weight as this step read it is compared with its dump after the step
before (what the optimizer left; cause/between.py): rules/corruption.py says whether a few values turned absurd
for the weight (changed in memory) or the weight was set as a whole (host code). This module finds and compares;
the judgement table decides (rule `corrupted_weight`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from ..dataflow import PARAM, Flow
from ..model import OpExecution, TensorEvent
from ..rules.corruption import CHUNK, Change, judge_change, stands_out
from ..rules.knowledge import OpKnowledge
from . import between

HOPS = 6           # ops followed back from the origin's input


@dataclass
class Entered:
    reader: OpExecution            # the op that read the value from the weight
    slot: int                      # its input holding the weight
    parameter: str                 # the weight's graph name
    value: float                   # the largest |x| followed back
    path: List[str] = field(default_factory=list)     # op types from the reader to the origin
    stored: bool = False                              # the dump holds the weight as the step before left it
    change: Optional[Change] = None                   # how it changed since (None: not at all, or not stored)
    written: bool = False                             # a kernel of this step wrote the weight before the read


def find(ex: OpExecution, graph, runs: Callable[[], Sequence[OpExecution]], access, kn: OpKnowledge,
         stored_before: Optional[between.StoredBefore]) -> Optional[Entered]:
    """The weight reader upstream of origin `ex` whose read carries the origin's largest input value unchanged;
    None when that value does not stand out from the input's others (rules/corruption.stands_out) or does not come
    unchanged from a weight."""
    if graph is None or kn.updates_weights(ex.op_type):
        return None
    flow = Flow(graph, kn)
    start = _largest_input(ex, access)
    if start is None:
        return None
    event, value = start
    array = access.array(event)
    if array is None or not stands_out(np.asarray(array)):
        return None           # nothing absurd beside the rest: no step is read again to follow it
    current, path = ex, [ex.op_type]
    for _hop in range(HOPS):
        node = graph.find(current.op_name)
        if node is None:
            return None
        name = between.parameter_read(node, graph, event.slot, kn)
        if name is not None:
            found = Entered(current, event.slot, name, value, path[::-1])
            if between.written_before(name, current, graph, runs(), kn):
                found.written = True
                return found
            found.stored, found.change = _compare(name, event, stored_before, access)
            return found
        producer = flow.producer(node, event.slot)
        if not producer or producer.startswith(PARAM) or producer == "const":
            return None
        run = _run_of(producer, current, graph, runs())
        if run is None or not any(_holds(access, e, value) for e in run.outputs):
            return None
        event = next((e for e in sorted(run.inputs, key=lambda e: e.slot) if _holds(access, e, value)), None)
        if event is None:
            return None
        current = run
        path.append(run.op_type)
    return None


def _largest_input(ex: OpExecution, access):
    best = None
    for event in ex.inputs:
        if not (event.dtype is None or event.is_float):
            continue
        stats = access.stats(event)
        if stats is None or stats.max_abs is None or stats.nonfinite:
            continue
        if best is None or stats.max_abs > best[1]:
            best = (event, float(stats.max_abs))
    return best


def _holds(access, event: TensorEvent, value: float) -> bool:
    """The tensor holds |x| == value somewhere (the same value carried, not a new one of that size)."""
    if not (event.dtype is None or event.is_float):
        return False
    stats = access.stats(event)
    if stats is None or stats.max_abs is None or stats.max_abs < value * (1 - 1e-6):
        return False
    array = access.array(event)
    if array is None:
        return False
    flat = np.asarray(array).reshape(-1)
    for start in range(0, flat.size, CHUNK):       # in chunks: a large table stays a memory map
        magnitudes = np.abs(np.asarray(flat[start:start + CHUNK], dtype=np.float64))
        if np.any(np.abs(magnitudes - value) <= 1e-6 * value):
            return True
    return False


def _run_of(full_name: str, consumer: OpExecution, graph, runs: Sequence[OpExecution]) -> Optional[OpExecution]:
    """The run of a producer in the consumer's graph and step, the last before the consumer."""
    node = graph.by_full.get(full_name)
    if node is None:
        return None
    file_name = graph.file_name(node.full_name)
    found = [r for r in runs if r.graph == consumer.graph and r.op_name == file_name and r.time <= consumer.time
             and not r.is_parameter]
    return max(found, key=lambda r: r.time) if found else None


def _compare(name: str, event: TensorEvent, stored_before: Optional[between.StoredBefore],
             access) -> Tuple[bool, Optional[Change]]:
    """(the stored copy was read, the change from it to the read)."""
    stored_event = stored_before(name) if stored_before is not None else None
    if stored_event is None:
        return False, None
    read, stored = access.array(event), access.array(stored_event)
    if read is None or stored is None:
        return False, None
    return True, judge_change(np.asarray(read), np.asarray(stored))
