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

The decision runs INSIDE the compiled step (`GuardedTrainOneStepCell.construct`): the count's all-reduce (and
broadcast), the branch that calls the optimizer or not, and the skip bookkeeping are graph ops, so no host
synchronisation is added per step (no `.asnumpy()`). A skipped step returns a zero loss, records status
`skipped` (not "updated") and a grad norm of 0.0 in graph Parameters; `guard_state(step)` reads them on demand,
and each skipped step is printed once when the process exits. A zero count with a non-zero loss (the loss
divides by another count than the guard's: a reducer mismatch) raises inside the step, never a silent skip.
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
UPDATED, SKIPPED = 1, 2
STATUS_NAMES = {0: "not run", UPDATED: "updated", SKIPPED: "skipped"}
SKIP_CAPACITY = 4096        # skipped steps remembered (their step numbers) for the exit summary


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


def guard(train_step, count_input: int = -1, topology: Optional[Topology] = None, grad_norm: bool = True):
    """The in-graph guarded form of `train_step` (an nn.TrainOneStepCell): a new Cell with the same network,
    optimizer and sens whose compiled step skips the optimizer update, the same way on every rank, when the
    global token count is 0. The count is the number of non-zero entries of input `count_input` (the mask)."""
    if getattr(train_step, "_msoverflow_guarded", False):
        return train_step
    sens = train_step.sens if getattr(train_step, "sense_flag", True) else None
    return GuardedTrainOneStepCell(train_step.network, train_step.optimizer, sens, count_input=count_input,
                                   topology=topology, grad_norm=grad_norm)


def GuardedTrainOneStepCell(network, optimizer, sens=None, count_input: int = -1,  # noqa: N802
                            topology: Optional[Topology] = None, grad_norm: bool = True):
    """nn.TrainOneStepCell(network, optimizer, sens) with the zero-token decision inside its graph."""
    cell = _guarded_class()(network, optimizer, sens, count_input, topology or topology_from_context(), grad_norm)
    _LIVE.append(cell)
    return cell


def guard_state(step_cell) -> Dict[str, Any]:
    """What the guard decided (reads its Parameters: one host synchronisation, only when asked)."""
    steps = int(step_cell.guard_steps.asnumpy().reshape(-1)[0])
    count = int(step_cell.guard_skipped_count.asnumpy().reshape(-1)[0])
    recorded = step_cell.guard_skipped_steps.asnumpy().tolist()[:min(count, SKIP_CAPACITY)]
    return {"steps": steps, "skipped": sorted(int(s) for s in recorded), "skipped_count": count,
            "status": STATUS_NAMES.get(int(step_cell.guard_status.asnumpy()), "?"),
            "grad_norm": float(step_cell.guard_grad_norm.asnumpy())}


_LIVE: List[Any] = []        # the guarded step Cells


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


_CLASS: list = []


def _guarded_class():
    """The Cell class, built on first use (MindSpore is imported only then)."""
    if _CLASS:
        return _CLASS[0]
    import numpy as np
    from mindspore import Parameter, Tensor, nn, ops
    from mindspore import dtype as mstype

    class _GuardedTrainOneStepCell(nn.TrainOneStepCell):
        _msoverflow_guarded = True

        def __init__(self, network, optimizer, sens, count_input, topology, grad_norm):
            super().__init__(network, optimizer, sens)
            self.count_input = count_input
            self.guard_rank = _rank()
            self.with_norm = grad_norm
            reduce, zero_first, source = collective_plan(topology)
            self.reduce_count, self.zero_first, self.broadcast_count = reduce, zero_first, source is not None
            self._make_groups(topology)
            self.count_all_reduce = ops.AllReduce(group=topology.dp_group) if topology.dp_group else ops.AllReduce()
            if source is not None:
                self.count_broadcast = ops.Broadcast(source, group=topology.pp_group)
            # shape (1,) counters: the skip branch then needs no Reshape (MindSpore leaves such no-op kernels out
            # of the dump, and a step would look incomplete)
            self.guard_steps = Parameter(Tensor(np.zeros(1, np.int32)), name="msoverflow_guard_steps",
                                         requires_grad=False)
            self.guard_status = Parameter(Tensor(0, mstype.int32), name="msoverflow_guard_status",
                                          requires_grad=False)
            self.guard_grad_norm = Parameter(Tensor(0.0, mstype.float32), name="msoverflow_guard_grad_norm",
                                             requires_grad=False)
            self.guard_skipped_count = Parameter(Tensor(np.zeros(1, np.int32)), name="msoverflow_guard_skipped_count",
                                                 requires_grad=False)
            self.guard_skipped_steps = Parameter(Tensor(np.full(SKIP_CAPACITY, -1, np.int32)),
                                                 name="msoverflow_guard_skipped_steps", requires_grad=False)

        @staticmethod
        def _make_groups(topology):
            if topology.pp_size <= 1:
                return
            from mindspore.communication import create_group
            create_group(topology.dp_group, list(topology.dp_ranks))
            create_group(topology.pp_group, list(topology.pp_ranks))

        def construct(self, *inputs):
            loss = self.network(*inputs)
            sens = ops.fill(loss.dtype, loss.shape, self.sens)
            grads = self.grad(self.network, self.weights)(*inputs, sens)
            grads = self.grad_reducer(grads)
            mask = inputs[self.count_input]
            count = ops.cast(ops.not_equal(mask, 0), mstype.float32).sum().reshape((1,))
            if self.zero_first:
                count = ops.zeros_like(count)
            if self.reduce_count:
                count = self.count_all_reduce(count)
            if self.broadcast_count:
                count = self.count_broadcast((count,))[0]
            step = self.guard_steps + 0
            if count[0] > 0:
                loss = ops.depend(loss, self.optimizer(grads))
                self.guard_status = UPDATED
                if self.with_norm:
                    self.guard_grad_norm = ops.sqrt(ops.addn([ops.reduce_sum(ops.square(
                        ops.cast(g, mstype.float32))) for g in grads]))
            else:
                if ops.abs(loss).sum() > 0:     # NaN compares false: 0/0 is the no-signal case, not a mismatch
                    raise ValueError(MISMATCH)
                ops.scatter_update(self.guard_skipped_steps, self.guard_skipped_count % SKIP_CAPACITY, step)
                self.guard_skipped_count += 1
                self.guard_status = SKIPPED
                self.guard_grad_norm = 0.0
                loss = ops.zeros_like(loss)
            self.guard_steps += 1
            return loss

    _CLASS.append(_GuardedTrainOneStepCell)
    return _GuardedTrainOneStepCell
