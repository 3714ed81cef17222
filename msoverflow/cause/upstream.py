"""The cause one op upstream: an origin whose input holds an exact 0 or inf that a low-precision producer made.

`log(softmax(z / T))` in float16: Softmax underflows a probability that float32 holds (5e-9) to exact 0, and
Log(0) = -inf. Recomputed from its own inputs, Log is right (-inf in every dtype): the value went wrong one op
earlier. So when an origin's low-precision input holds an exact 0 or an inf where the origin made its bad
values, the producer chain (up to a few ops, each recomputed from its own dumped inputs) is recomputed in float32;
the first producer that float32 makes non-zero (or finite) there underflowed (or overflowed) in its dtype. That
is evidence for the judgement (cause precision, the producer named); this module decides nothing else.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence

import numpy as np

from ..model import OpExecution
from .recompute import LOW_PRECISION, RecomputeError

HOPS = 3          # producers looked at, walking up from the origin's input


@dataclass(frozen=True)
class Upstream:
    """A low-precision producer that made the exact 0 (underflow) or inf (overflow) the origin read."""
    producer: str                   # op type
    producer_name: str              # full name in the saved graph
    dtype: str                      # the producer's dumped dtype (float16, bfloat16)
    event: str                      # "underflow" | "overflow"
    dumped: float                   # what the dump holds there (0, inf)
    wide: float                     # what float32 gives there
    consumer: str                   # the origin's op type
    made: str                       # what the origin then made ("-inf", "NaN", "+inf")
    source_code: str = ""

    @property
    def text(self) -> str:
        went = "underflowed to 0" if self.event == "underflow" else f"overflowed to {_word(self.dumped)}"
        return f"{self.producer} {went} in {self.dtype}; float32 gives {self.wide:.2g}; {self.consumer} then gave {self.made}"

    @property
    def advice(self) -> str:
        fused = " or a fused log_softmax (it never forms the 0)" if self.producer == "Softmax" else ""
        return (f"Compute {self.producer} and what reads it in float32{fused}: the value fits in float32 and "
                f"{self.dtype} {'flushes it to 0' if self.event == 'underflow' else 'cannot hold it'}.")


def _word(value: float) -> str:
    if np.isnan(value):
        return "NaN"
    if np.isinf(value):
        return "+inf" if value > 0 else "-inf"
    return f"{value:.4g}"


Reproduce = Callable[..., tuple]      # cause.reproduce


def find(ex: OpExecution, node, graph, step: Optional[Callable[[], Sequence[OpExecution]]], access,
         bad: np.ndarray, dumped_bad: np.ndarray, reproduce: Reproduce) -> Optional[Upstream]:
    """The producer that made an exact 0 or inf of a low-precision input at the origin's bad positions
    (None: no such input, or float32 does not hold the value either). bad: the origin's bad-output mask;
    dumped_bad: the origin's output there (for the words)."""
    if node is None or graph is None or step is None or not bad.any():
        return None
    made = _made(dumped_bad)
    for event in sorted(ex.inputs, key=lambda e: e.slot):
        if event.dtype not in LOW_PRECISION or event.slot >= len(node.inputs):
            continue
        values = access.array(event)
        if values is None:
            continue
        values = np.asarray(values)
        special = _special(values, event.dtype)
        at = _at(special, bad)
        if at is None or not at.any():
            continue
        found = _chain(node.inputs[event.slot], values, at, event.dtype, graph, step, access, reproduce)
        if found is not None:
            producer, run_dtype, kind, dumped, wide = found
            return Upstream(producer.op_type, producer.full_name, run_dtype, kind, dumped, wide, ex.op_type, made,
                            producer.source_code or "")
    return None


def _made(values: np.ndarray) -> str:
    values = np.asarray(values).reshape(-1)
    if values.dtype.kind == "c":
        values = np.concatenate([values.real, values.imag])
    values = values.astype(np.float64)
    if np.isnan(values).any():
        return "NaN"
    if np.isneginf(values).any():
        return "-inf"
    return "+inf" if np.isposinf(values).any() else "a value out of range"


def _special(values: np.ndarray, dtype: str) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return (values == 0) | np.isinf(values)


def _at(special: np.ndarray, bad: np.ndarray) -> Optional[np.ndarray]:
    """The special positions where the origin went bad (an input of another shape: any special position)."""
    if special.shape == bad.shape:
        return special & bad
    try:
        return special & np.broadcast_to(bad, special.shape) if bad.ndim <= special.ndim else None
    except ValueError:
        return special if special.any() else None


def _chain(full_name: str, values: np.ndarray, at: np.ndarray, dtype: str, graph, step, access,
           reproduce: Reproduce):
    for _hop in range(HOPS):
        producer = graph.by_full.get(full_name)
        if producer is None:
            return None
        run = next((r for r in step() if graph.find(r.op_name) is producer), None)
        if run is None or not run.outputs:
            return None
        out = min(run.outputs, key=lambda e: e.slot)
        try:
            results, _by, _gathered = reproduce(run, access, [dtype, "float32"], node=producer, step=step,
                                                out_slot=out.slot, out_shape=values.shape,
                                                out_dtypes=[e.dtype for e in sorted(run.outputs,
                                                                                   key=lambda e: e.slot)])
        except RecomputeError:
            return None
        low, wide = (np.asarray(results[p][out.slot]) for p in (dtype, "float32"))
        if wide.size != values.size or low.size != values.size:
            return None
        low, wide = low.reshape(values.shape), wide.reshape(values.shape)
        with np.errstate(invalid="ignore"):
            underflow = at & (values == 0) & (low == 0) & (wide != 0) & np.isfinite(wide)
            overflow = at & np.isinf(values) & np.isinf(low) & np.isfinite(wide)
        for kind, hit in (("underflow", underflow), ("overflow", overflow)):
            if hit.any():
                index = tuple(np.argwhere(hit)[0])
                return producer, dtype, kind, float(values[index]), float(wide[index])
        # float32 makes the same value here too: it came from further up, through this op's first input
        upstream = _first_input(run, producer, values.shape, access)
        if upstream is None:
            return None
        full_name, values, dtype = upstream
        at = at & _special(values, dtype)
        if not at.any():
            return None
    return None


def _first_input(run: OpExecution, producer, shape, access):
    event = next((e for e in run.inputs if e.slot == 0), None)
    if event is None or event.dtype not in LOW_PRECISION or not producer.inputs:
        return None
    values = access.array(event)
    if values is None or np.size(values) != int(np.prod(shape, dtype=np.int64)):
        return None
    return producer.inputs[0], np.asarray(values).reshape(shape), event.dtype


def evidence(found: Upstream) -> List[str]:
    code = f" ({found.source_code})" if found.source_code else ""
    return [f"its input came from {found.producer} {found.producer_name}{code}, recomputed from its own dumped "
            f"inputs: {found.dtype} gives {found.dumped:g} where float32 gives {found.wide:.3g}"]
