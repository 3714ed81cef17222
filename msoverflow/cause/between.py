"""A weight that changed between two steps with no op writing it: the device's memory (or host code) changed it.

An op's input that is already bad and comes from a Parameter (through Load) has no dumped producer. The dump can
still say where it went bad: the Parameter's own file dumped after the step before holds what the last writer (the
optimizer) left. When the step's first read holds a bad value where that file holds a finite one, and no kernel of
this step wrote the Parameter before the read, nothing in the program made it: the bytes changed in memory between
the steps (a bit flip, a stomp), or host code set it (Parameter.set_data). The reader is where the value appeared.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from ..dataflow import PARAM, Flow
from ..model import GraphNode, OpExecution, TensorEvent
from ..rules.knowledge import OpKnowledge
from ..values import bad_mask

# The Parameter of a graph name as dumped after the step before (None: that step or that file is not in the dump)
StoredBefore = Callable[[str], Optional[TensorEvent]]


@dataclass
class Changed:
    parameter: str          # the graph's name: embed_tokens.embedding_table
    read: np.ndarray        # as the op read it in this step
    stored: np.ndarray      # as dumped after the step before
    changed: np.ndarray     # bool mask: positions whose value differs
    bad: np.ndarray         # bool mask: bad where read, finite where stored


def parameter_read(node: Optional[GraphNode], graph, slot: int, kn: OpKnowledge) -> Optional[str]:
    """The Parameter (graph name) that input `slot` of the node reads, through Load and the other plumbing."""
    if node is None or graph is None:
        return None
    ref = Flow(graph, kn).producer(node, slot)
    if not ref or not ref.startswith(PARAM):
        return None
    name = ref[len(PARAM):]
    return None if name in getattr(graph, "data_inputs", ()) else name


def written_before(name: str, ex: OpExecution, graph, runs: Sequence[OpExecution], kn: OpKnowledge) -> bool:
    """A kernel of this step wrote the Parameter in place before `ex` read it (then the step, not memory, made it)."""
    flow = Flow(graph, kn)
    writers = set()
    for node in graph.nodes:
        for slot in kn.written_inputs(node.op_type):
            if flow.producer(node, slot) == PARAM + name:
                writers.add(graph.file_name(node.full_name))
    return any(run.op_name in writers and run.graph == ex.graph and run.time < ex.time for run in runs)


def compare(name: str, event: TensorEvent, stored_before: StoredBefore, access) -> Optional[Changed]:
    """The read against the stored copy; None when they cannot be compared or the stored copy explains the read
    (it is bad there too)."""
    stored_event = stored_before(name)
    if stored_event is None:
        return None
    read, stored = access.array(event), access.array(stored_event)
    if read is None or stored is None:
        return None
    read, stored = np.asarray(read), np.asarray(stored)
    if read.shape != stored.shape or read.dtype.kind != "f" or stored.dtype.kind != "f":
        return None
    bad = bad_mask(read, event.dtype) & np.isfinite(stored) & ~bad_mask(stored, stored_event.dtype)
    if not bad.any():
        return None
    with np.errstate(invalid="ignore"):
        changed = ~((read == stored) | (np.isnan(read) & np.isnan(stored)))
    return Changed(parameter=name, read=read, stored=stored, changed=changed, bad=bad)
