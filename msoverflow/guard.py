"""Zero-signal step guard: a fix for `invalid` origins at a masked mean (0/0 or x/0 whose denominator is a token
or mask count), where no dtype change helps.

Two parts, as in Megatron-style trainers:
  - the division: divide by max(count, 1), so a rank whose batch holds no loss token contributes a zero loss and
    zero gradients instead of NaN (source form: `msoverflow patch --how guard` writes that diff);
  - the step: when the GLOBAL token count is 0 there is no training signal at all, and the optimizer must not
    move (momentum, weight decay, `global_step` and the LR schedule would still change the model). Every rank
    has to take the same decision, or the collectives of the next step mismatch and hang:
      * the count is all-reduced over the data-parallel group (on the last pipeline stage, which holds the loss);
      * with pipeline parallelism the last stage broadcasts the decision within its pipeline group, naming the
        source by its GLOBAL rank (the group's last member), not by its stage index;
      * with pipeline size 1 every rank is a last stage: no broadcast (that group may not even exist).

`guard(step)` turns the train step, in place, into a guarded subclass of its own class. The decision runs INSIDE
the compiled step (graph ops, no `.asnumpy()`, no host round trip per step), where it costs least. A rank has
tokens when its mask has a non-zero entry: max |mask| > 0, summed over the ranks as the "signal".
  * nn.TrainOneStepCell: the signal is agreed on BEFORE the step, and one branch then runs the unchanged step
    (forward, backward, gradient all-reduce, optimizer) or, without tokens, the forward alone. The step stays
    one piece: a branch after the gradients, around the optimizer alone, split the compiled step there and cost
    ~8 ms a step on the 2-rank CPU benchmark (benchmarks/bench_guard.py).
  * nn.TrainOneStepWithLossScaleCell already all-reduces an overflow flag and branches around the optimizer: the
    signal joins the flag in that one all-reduce, and a step without tokens takes that branch's skip side. No
    second branch, no second collective; the loss scale sees only real overflows. (The signal reaches the
    branch as a value of the step: handing it over through a Parameter to the cell's own get_overflow_status
    cost 30-40 ms a step on the 1M-parameter benchmark model.) Its get_overflow_status and process_loss_scale
    may be the user's own; a construct of its own is refused, as for TrainOneStepCell.
A skipped step returns a zero loss; each step's signal goes into a ring of Parameters that `guard_state(step)`
reads on demand (status `skipped`, not "updated", grad norm 0.0), and each skipped step is printed once when
the process exits. A zero signal with a non-zero loss (the loss divides by another count than the guard's mask:
a reducer mismatch) raises inside the step, never a silent skip.
Pipeline topology comes from MindSpore's auto-parallel context (`pipeline_stages`, rank, group size).
MindSpore is imported only inside the functions that need it.
"""
from __future__ import annotations

import atexit
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

SKIP_LINE = "msoverflow guard: step {step} skipped on rank {rank}: global token count is 0 (no optimizer update)"
MISMATCH = ("msoverflow guard: the global token count is 0 but the loss is not: the loss divides by another "
            "count than the guard's mask input (reducer mismatch); check count_input")
HISTORY = 65536     # steps whose decision is kept (a ring: step s at s % HISTORY), for guard_state and the exit lines


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
    dp_ranks: Sequence[int] = ()          # global ranks all-reducing the count with this one (groups to create)


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


def collective_plan(topology: Topology) -> Tuple[bool, bool, Optional[int]]:
    """The rules, once: (all-reduce over data parallel?, zero the local count first?, broadcast source global
    rank or None). Used by `global_token_count` and by the compiled step alike."""
    reduce = topology.is_last_stage and topology.dp_size > 1
    source = None
    if topology.pp_size > 1:
        if not topology.pp_ranks:
            raise ValueError("pipeline size > 1 needs the pipeline group's global ranks (pp_ranks)")
        source = int(topology.pp_ranks[-1])       # the last stage, by its global rank
    return reduce, not topology.is_last_stage, source


def global_token_count(local, topology: Topology, comm: Collectives, zeros: Callable[[], object]):
    """The token count every rank agrees on (see the module docstring for the rules)."""
    reduce, zero_first, source = collective_plan(topology)
    count = zeros() if zero_first else local     # a non-last stage's count is filled by the broadcast
    if reduce:
        count = comm.all_reduce(local, topology.dp_group)
    if source is not None:
        count = comm.broadcast(count, source, topology.pp_group)
    return count


def derive_topology(rank: int, size: int, stages: int) -> Topology:
    """Where `rank` sits when `size` ranks run `stages` pipeline stages, numbered as MindSpore does
    (stage = rank // (size // stages); msoverflow/parallel_layout.py cites the source): its stage's ranks
    all-reduce the count (tensor-parallel copies only multiply it, and the decision is count > 0), and its
    pipeline group is the ranks at the same place in every stage, stage order."""
    stages = max(1, int(stages or 1))
    if size % stages:
        raise ValueError(f"{size} ranks do not split into {stages} pipeline stages")
    per_stage = size // stages
    stage = rank // per_stage
    dp_ranks = tuple(range(stage * per_stage, (stage + 1) * per_stage))
    pp_ranks = tuple(rank % per_stage + s * per_stage for s in range(stages))
    return Topology(dp_group=None if stages == 1 else "msoverflow_guard_stage_" + "_".join(map(str, dp_ranks)),
                    dp_size=per_stage, dp_ranks=dp_ranks,
                    pp_group=None if stages == 1 else "msoverflow_guard_pipe_" + "_".join(map(str, pp_ranks)),
                    pp_size=stages, pp_ranks=pp_ranks if stages > 1 else (), is_last_stage=stage == stages - 1)


def topology_from_context(context_value: Optional[Callable[[str], Any]] = None,
                          rank: Optional[int] = None, size: Optional[int] = None) -> Topology:
    """This rank's topology from MindSpore's auto-parallel context (`pipeline_stages`) and communication
    (rank, group size); the arguments stand in for them in tests."""
    if context_value is None:
        from mindspore import context
        context_value = context.get_auto_parallel_context
    if rank is None or size is None:
        try:
            from mindspore.communication import get_group_size, get_rank
            rank, size = int(get_rank()), int(get_group_size())
        except Exception:  # communication not initialised: a single process
            rank, size = 0, 1
    return derive_topology(rank, size, int(context_value("pipeline_stages") or 1))


def guard(train_step, count_input: int = -1, topology: Optional[Topology] = None):
    """Guard `train_step` in place and return it: its class becomes a guarded subclass of its own, whose compiled
    step skips the optimizer update, the same way on every rank, when no rank's input `count_input` (the loss
    mask) has a non-zero entry. Raises TypeError for a step with a construct of its own (see the module
    docstring)."""
    if getattr(train_step, "_msoverflow_guarded", False):
        return train_step
    from mindspore import nn
    cls = type(train_step)
    kind = ("fold" if isinstance(train_step, nn.TrainOneStepWithLossScaleCell) else
            "branch" if isinstance(train_step, nn.TrainOneStepCell) else None)
    if kind == "fold" and cls.construct is not nn.TrainOneStepWithLossScaleCell.construct:
        raise TypeError(f"msoverflow guard: {cls.__name__} has its own construct, which the guarded loss-scale step "
                        "would replace (it keeps your get_overflow_status and process_loss_scale): fold the token "
                        "signal into your step's own overflow branch instead")
    if kind == "branch" and cls.construct is not nn.TrainOneStepCell.construct:
        raise TypeError(f"msoverflow guard: {cls.__name__} has its own construct, so the guard cannot tell what a "
                        "skipped step of it returns: fold the token signal into your step's own branch instead")
    if kind is None:
        raise TypeError(f"msoverflow guard: {cls.__name__} is not a train step (nn.TrainOneStepCell or a subclass)")
    if cls not in _GUARDED:
        _GUARDED[cls] = _guarded_class(cls, kind)
    train_step.__class__ = _GUARDED[cls]
    train_step.guard_setup(count_input, topology or topology_from_context())
    _LIVE.append(train_step)
    return train_step


def guard_state(step_cell) -> Dict[str, Any]:
    """What the guard decided over the last HISTORY steps (reads its Parameters: one host synchronisation, only
    when asked). A step is skipped when the global token signal (the all-reduced max |mask|) is 0; a skipped
    step's grad norm is 0.0 (the guard does not measure it on other steps: None)."""
    steps = int(step_cell.guard_steps.asnumpy().reshape(-1)[0])
    signals = step_cell.guard_signals.asnumpy()
    skipped = [s for s in range(max(0, steps - HISTORY), steps) if signals[s % HISTORY] <= 0]
    last_skipped = bool(skipped) and skipped[-1] == steps - 1
    return {"steps": steps, "skipped": skipped, "grad_norm": 0.0 if last_skipped else None,
            "status": "not run" if not steps else "skipped" if last_skipped else "updated"}


_LIVE: List[Any] = []        # the guarded step Cells
_GUARDED: Dict[type, type] = {}


@atexit.register
def _report_skips() -> None:
    """Each skipped step, once, when the process ends (patch --verify reads these lines)."""
    for cell in _LIVE:
        try:
            state = guard_state(cell)
        except Exception:   # noqa: BLE001 - the runtime is already torn down: nothing to report
            continue
        for step in state["skipped"]:
            print(SKIP_LINE.format(step=step, rank=cell.guard_rank), file=sys.stderr, flush=True)


def _rank() -> int:
    try:
        from mindspore.communication import get_rank
        return int(get_rank())
    except Exception:
        return 0


def _guarded_class(cls, kind: str):
    """The guarded subclass of `cls`, built on first use (MindSpore is imported only then). MindSpore's compiler
    reads `super()` as the parent of the object's own class, so the methods that call it are defined here, in the
    class the object gets; what both forms share comes from a base placed before `cls`."""
    import numpy as np
    from mindspore import Parameter, Tensor, ops
    from mindspore import dtype as mstype

    class _Guarded:
        _msoverflow_guarded = True

        def guard_setup(self, count_input, topology):
            self.guard_count_input = count_input
            self.guard_rank = _rank()
            # shape (1,): no Reshape kernel around it (MindSpore leaves such no-op kernels out of the dump, and a
            # step would look incomplete)
            self.guard_steps = Parameter(Tensor(np.zeros(1, np.int32)), name="msoverflow_guard_steps",
                                         requires_grad=False)
            self.guard_signals = Parameter(Tensor(np.ones(HISTORY, np.float32)), name="msoverflow_guard_signals",
                                           requires_grad=False)
            self.guard_topology(topology)

        def guard_signal(self, inputs):
            """Whether this rank's loss mask holds a token: max |mask| (> 0 iff some entry is not 0), shape ().
            A non-last pipeline stage has none of its own (the last stage, which holds the loss, decides)."""
            mask = inputs[self.guard_count_input]
            if mask.dtype != mstype.float32:
                mask = ops.cast(mask, mstype.float32)
            if self.guard_zero_first:
                return ops.zeros((), mstype.float32)
            return ops.reduce_max(ops.abs(mask))

        def guard_record(self, signal):
            """The decision of this step into the ring (two kernels and the step count)."""
            index = self.guard_steps % HISTORY
            ops.scatter_update(self.guard_signals, index, signal.reshape((1,)))
            self.guard_steps += 1
            return index

    if kind == "branch":
        class GuardedBranch(_Guarded, cls):
            """nn.TrainOneStepCell: decide first, then run the whole step or the forward alone."""

            def guard_topology(self, topology):
                reduce, zero_first, source = collective_plan(topology)
                self.guard_reduce, self.guard_zero_first = reduce, zero_first
                self.guard_broadcast = source is not None
                if topology.pp_size > 1:
                    from mindspore.communication import create_group
                    create_group(topology.dp_group, list(topology.dp_ranks))
                    create_group(topology.pp_group, list(topology.pp_ranks))
                self.guard_all_reduce = ops.AllReduce(group=topology.dp_group) if topology.dp_group else ops.AllReduce()
                if source is not None:
                    self.guard_broadcast_op = ops.Broadcast(source, group=topology.pp_group)

            def construct(self, *inputs):
                signal = self.guard_signal(inputs)
                if self.guard_reduce:
                    signal = self.guard_all_reduce(signal)
                if self.guard_broadcast:
                    signal = self.guard_broadcast_op((signal,))[0]
                if signal > 0:
                    loss = super().construct(*inputs)
                else:
                    loss = self.network(*inputs)
                    if ops.abs(loss).sum() > 0:     # NaN compares false: 0/0 is the no-signal case, not a mismatch
                        raise ValueError(MISMATCH)
                    loss = ops.zeros_like(loss)
                self.guard_record(signal)
                return loss

        guarded: type = GuardedBranch
    else:
        from mindspore.nn.wrap.loss_scale import _grad_scale

        class GuardedFold(_Guarded, cls):
            """nn.TrainOneStepWithLossScaleCell's step with the signal joined to its overflow flag: one all-reduce
            carries both, and its one branch skips the update on an overflow or on a step without tokens."""

            def guard_topology(self, topology):
                self.guard_zero_first = not topology.is_last_stage
                # the cell's own overflow all-reduce (world group) carries the signal too; its check stays local
                self.guard_reduce = bool(self.is_distributed)
                self.is_distributed = False
                self.guard_all_reduce = ops.AllReduce()

            def construct(self, *inputs):
                signal = self.guard_signal(inputs)
                loss = self.network(*inputs)
                scaling_sens = self.scale_sense
                status = Tensor([0] * 8, mstype.int32)
                scaling_sens_filled = ops.ones_like(loss) * ops.cast(scaling_sens, ops.dtype(loss))
                grads = self.grad(self.network, self.weights)(*inputs, scaling_sens_filled)
                grads = self.hyper_map(ops.partial(_grad_scale, scaling_sens), grads)
                grads = self.grad_reducer(grads)
                flag_and_signal = ops.stack((ops.cast(self.get_overflow_status(status, grads), mstype.float32)
                                             .reshape(()), signal))
                if self.guard_reduce:
                    flag_and_signal = self.guard_all_reduce(flag_and_signal)
                cond = flag_and_signal[0] > 0
                signal = flag_and_signal[1]
                overflow = self.process_loss_scale(cond)      # the loss scale sees real overflows only
                if ops.logical_or(overflow, signal <= 0):
                    if ops.logical_and(signal <= 0, ops.abs(loss) > 0):   # NaN compares false: 0/0 is no signal
                        raise ValueError(MISMATCH)
                    loss = ops.select(signal <= 0, ops.zeros_like(loss), loss)
                else:
                    loss = ops.depend(loss, self.optimizer(grads))
                self.guard_record(signal)
                return loss, cond, scaling_sens

        guarded = GuardedFold
    guarded.__name__ = guarded.__qualname__ = f"Guarded{cls.__name__}"
    guarded.__module__ = cls.__module__
    return guarded
