"""Inside the training process: the ranks of a job whose steps wait for each other decide together when to stop.

A rank that stops on its own leaves the others waiting in their next all-reduce (seen: a NaN batch on rank 1 of a
data-parallel job; rank 1 stopped at the end of that step, rank 0 went into the next step and failed 35 s later
with "Ring ReduceScatter wait receiving ... failed"). A stop step chosen by the watcher does not help: a rank that
reads it after it has passed it (the watcher reads the files behind the job) cannot know whether the others
stopped. So no rank stops alone: before agreed steps every rank adds what it wants into one all-reduce (a sum,
the one reduction every backend has), and all stop there when any of them wants to. The same sum carries each
rank's proposal for the next agreed step (in its own slot); all take the smallest, so the next agreed step is
agreed too. A rank that reads the watcher's request late only delays the stop to the next agreed step.

The spacing keeps the agreement's cost at AGREE_BUDGET of the step time (its own measured time, which includes
waiting for the slowest rank: the training's all-reduce would wait for it anyway) and at most AGREE_SECONDS apart:
the delay from a request to the stop. The collective is given as a callable (all_reduce_sum) so the protocol is
tested without MindSpore; mindspore_sum builds it from MindSpore's AllReduce.
"""
from __future__ import annotations

import math
import time
from collections import deque
from typing import Callable, List, Optional, Sequence

AGREE_FIRST = 2            # the first agreed step (step 0 compiles, step 1 gives a first step time)
AGREE_BUDGET = 0.002       # the agreement's share of the training's step time
AGREE_SECONDS = 0.5        # and at most this long between two agreed steps

ReduceSum = Callable[[List[float]], Sequence[float]]


class Agreement:
    def __init__(self, rank: int, size: int, all_reduce_sum: ReduceSum):
        if not 0 <= rank < size:
            raise ValueError(f"rank {rank} is not in a group of {size}")
        self.rank, self.size, self.all_reduce_sum = rank, size, all_reduce_sum
        self.next_at = AGREE_FIRST
        self.costs: deque = deque(maxlen=5)
        self.agreed = 0
        self.every = 1

    def due(self, step: int) -> bool:
        return step >= self.next_at

    def proposal(self, step_seconds: Optional[float]) -> int:
        """The steps to the next agreed step this rank would take: the budget's spacing, within AGREE_SECONDS."""
        if not self.costs or not step_seconds or step_seconds <= 0:
            return 1
        cost = sorted(self.costs)[len(self.costs) // 2]
        wanted = math.ceil(cost / (AGREE_BUDGET * step_seconds))
        return max(1, min(wanted, int(AGREE_SECONDS / step_seconds)))

    def agree(self, step: int, want_stop: bool, step_seconds: Optional[float]) -> bool:
        """At an agreed step, before it: whether every rank stops here (any one wanted to); the next agreed step."""
        vector = [0.0] * (self.size + 1)
        vector[0] = 1.0 if want_stop else 0.0
        vector[1 + self.rank] = float(self.proposal(step_seconds))
        started = time.perf_counter()
        total = self.all_reduce_sum(vector)
        self.costs.append(time.perf_counter() - started)
        self.agreed += 1
        proposals = [int(v) for v in total[1:] if v >= 1]
        self.every = min(proposals) if proposals else 1
        self.next_at = step + self.every
        return total[0] > 0

    def describe(self) -> dict:
        cost = sorted(self.costs)[len(self.costs) // 2] if self.costs else None
        return {"ranks": self.size, "agreements": self.agreed, "every": self.every,
                "ms": None if cost is None else round(cost * 1e3, 3)}


def steps_wait_for_each_other(step_cell) -> bool:
    """Whether the job's steps hold a collective every rank joins: a parallel mode other than stand-alone, or a
    step Cell that reduces its gradients across ranks (nn.TrainOneStepCell's reducer_flag). Ranks of a job that
    only shares a launcher stop on their own (an agreement there could wait for a rank that finished)."""
    import mindspore as ms
    try:
        mode = str(ms.get_auto_parallel_context("parallel_mode"))
    except Exception:
        mode = "stand_alone"
    return mode not in ("stand_alone", "") or bool(getattr(step_cell, "reducer_flag", False))


def mindspore_sum() -> ReduceSum:
    """The sum over every rank of the job (MindSpore's AllReduce in the world group, run as one op)."""
    import numpy as np
    from mindspore import Tensor, ops
    op = ops.AllReduce()

    def all_reduce_sum(values: List[float]) -> Sequence[float]:
        return op(Tensor(np.asarray(values, dtype=np.float32))).asnumpy().tolist()
    return all_reduce_sum


def of_job(step_cell) -> Optional[Agreement]:
    """The agreement of this process's job, or None: one process, or ranks that do not wait for each other."""
    try:
        from mindspore.communication import get_group_size, get_rank
        rank, size = int(get_rank()), int(get_group_size())
    except Exception:           # communication not initialised: one process
        return None
    if size < 2 or not steps_wait_for_each_other(step_cell):
        return None
    return Agreement(rank, size, mindspore_sum())
