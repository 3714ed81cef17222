"""Zero-signal step guard: a fix for `invalid` origins at a masked mean (0/0 or x/0 whose denominator is a token
or mask count), where no dtype change helps.

Two parts, as in Megatron-style trainers:
  - the division: divide by max(count, 1), so a rank whose batch holds no loss token contributes a zero loss and
    zero gradients instead of NaN (source form: `msoverflow patch --how guard` writes that diff);
  - the step: when the GLOBAL token count is 0 there is no training signal at all, and the optimizer must not
    move (momentum, weight decay and the LR schedule would still change the model). Every rank has to take the
    same decision, or the collectives of the next step mismatch and hang:
      * the count is all-reduced over the data-parallel group (on the last pipeline stage, which holds the loss);
      * with pipeline parallelism the last stage broadcasts the decision within its pipeline group, naming the
        source by its GLOBAL rank (the group's last member), not by its stage index;
      * with pipeline size 1 every rank is a last stage: no broadcast (that group may not even exist).

Runtime form: `GuardedTrainOneStepCell(train_step, count_input=2)` (or `guard(train_step, ...)`) wraps a
`nn.TrainOneStepCell`; `msoverflow patch --verify` injects it into an unmodified script. MindSpore is imported
only inside the functions that need it.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence

SKIP_LINE = "msoverflow guard: step {step} skipped on rank {rank}: global token count is 0 (no optimizer update)"


@dataclass
class Topology:
    """Where this rank sits. Group names are MindSpore communication groups; None means the world group (data
    parallel) or no pipeline (pipeline)."""
    dp_group: Optional[str] = None
    dp_size: int = 1
    pp_group: Optional[str] = None
    pp_size: int = 1
    pp_ranks: Sequence[int] = ()          # global ranks of this rank's pipeline group, stage order
    is_last_stage: bool = True


class Collectives:
    """The two collectives the decision needs (MindSpore's, PyNative-style, called outside any graph)."""

    def all_reduce(self, value, group):
        try:
            from mindspore.ops.communication import all_reduce
        except ImportError:  # older releases
            from mindspore.communication.comm_func import all_reduce
        out = all_reduce(value, "sum", group) if group else all_reduce(value, "sum")
        return _result(out, value)

    def broadcast(self, value, src: int, group):
        try:
            from mindspore.ops.communication import broadcast
        except ImportError:
            from mindspore.communication.comm_func import broadcast
        out = broadcast(value, src, group)
        return _result(out, value)


def _result(out, value):
    """Functional collectives return the tensor, (tensor, handle), or only a handle when they work in place."""
    if isinstance(out, tuple):
        return out[0]
    return out if hasattr(out, "asnumpy") else value


def global_token_count(local, topology: Topology, comm: Collectives, zeros: Callable[[], object]):
    """The token count every rank agrees on (see the module docstring for the rules)."""
    count = local
    if topology.is_last_stage:
        if topology.dp_size > 1:
            count = comm.all_reduce(local, topology.dp_group)
    else:
        count = zeros()        # filled by the last stage's broadcast
    if topology.pp_size > 1:
        if not topology.pp_ranks:
            raise ValueError("pipeline size > 1 needs the pipeline group's global ranks (pp_ranks)")
        source = int(topology.pp_ranks[-1])       # the last stage, by its global rank
        count = comm.broadcast(count, source, topology.pp_group)
    return count


def topology_from_context() -> Topology:
    """Data parallel over the world group, no pipeline: what `init()` + DATA_PARALLEL gives."""
    from mindspore import context
    from mindspore.communication import get_group_size
    try:
        size = get_group_size()
    except Exception:  # communication not initialised: a single process
        size = 1
    stages = int(context.get_auto_parallel_context("pipeline_stages") or 1)
    if stages > 1:
        raise ValueError("pipeline parallel: give Topology(dp_group=..., dp_size=..., pp_group=..., pp_size=..., "
                         "pp_ranks=..., is_last_stage=...) explicitly")
    return Topology(dp_size=size)


@dataclass
class GuardLog:
    skipped: List[int] = field(default_factory=list)
    steps: int = 0


def _rank() -> int:
    try:
        from mindspore.communication import get_rank
        return int(get_rank())
    except Exception:
        return 0


def guard(train_step, count_input: int = -1, count_fn: Optional[Callable] = None,
          topology: Optional[Topology] = None, comm: Optional[Collectives] = None, log: Optional[GuardLog] = None):
    """Make `train_step` (a TrainOneStepCell or any Cell returning the loss) skip steps whose global token count
    is 0, the same way on every rank. The count is `count_fn(*inputs)` or the number of non-zero entries of input
    `count_input` (the loss mask). Works in graph and PyNative mode: the decision runs before the compiled step.
    Returns the same object (its class is swapped for a guarded subclass)."""
    cls = type(train_step)
    if getattr(cls, "_msoverflow_guarded", False):
        return train_step
    guarded = type(f"Guarded{cls.__name__}", (cls,), {"_msoverflow_guarded": True, "__call__": _guarded_call})
    train_step.__class__ = guarded
    object.__setattr__(train_step, "_msoverflow_guard", {
        "count_input": count_input, "count_fn": count_fn, "topology": topology, "comm": comm or Collectives(),
        "log": log or GuardLog()})
    return train_step


def GuardedTrainOneStepCell(network, optimizer, sens=1.0, count_input: int = -1, **kwargs):  # noqa: N802
    """nn.TrainOneStepCell(network, optimizer, sens), guarded (see `guard`)."""
    from mindspore import nn
    return guard(nn.TrainOneStepCell(network, optimizer, sens), count_input=count_input, **kwargs)


def _guarded_call(self, *inputs, **kwargs):
    import numpy as np
    from mindspore import Tensor, ops
    from mindspore import dtype as mstype
    state = self.__dict__["_msoverflow_guard"] if "_msoverflow_guard" in self.__dict__ else \
        object.__getattribute__(self, "_msoverflow_guard")
    if state["topology"] is None:
        state["topology"] = topology_from_context()
    step = state["log"].steps
    state["log"].steps += 1
    if state["count_fn"] is not None:
        local = state["count_fn"](*inputs)
    else:
        mask = inputs[state["count_input"]]
        local = ops.cast(ops.not_equal(mask, 0), mstype.float32).sum()
    local = ops.cast(local, mstype.float32).reshape((1,))
    count = global_token_count(local, state["topology"], state["comm"], lambda: Tensor(np.zeros(1, np.float32)))
    if float(count.asnumpy().reshape(-1)[0]) <= 0:
        state["log"].skipped.append(step)
        print(SKIP_LINE.format(step=step, rank=_rank()), file=sys.stderr, flush=True)
        return Tensor(np.float32(0.0))   # no forward, no backward, no optimizer update: no signal to learn from
    return super(type(self), self).__call__(*inputs, **kwargs)
