"""The in-graph zero-token guard on a tiny LM (graph mode, CPU; one process or msrun data parallel).

    python train_guard_ingraph.py [--loss-scale] [--mismatch] [--steps N] [--unguarded] [--bench]

Each step prints one JSON line with what the test checks (read on the host AFTER the step, by this script,
not by the guard): loss, the guard's status and grad norm, a checksum of the weights, the optimizer's
global_step and the learning rate it would use next (and, with --loss-scale, the loss scale and the overflow
flag). Empty loss masks: rank 1 at step 1 (the global count is still > 0: an ordinary update), every rank at
step 2 (no signal: skipped). --mismatch: the loss averages over its own all-ones mask while the guard counts an
empty one (a reducer mismatch). --loss-scale: the train step is a loss-scale cell (TrainOneStepWithLossScaleCell
with a dynamic loss scale; its overflow check uses MindSpore's IsFinite path, as on Ascend in INFNAN mode, since
CPU has no float-status registers), so the guard folds into its overflow branch.
--bench [--first guarded] [--aa]: an unguarded and a guarded copy of the model run alternately, step by step
(A B B A A B ...), no empty masks; the per-pair times are printed at the end (benchmarks/bench_guard.py).
"""
import json
import os
import sys
import time

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops
from mindspore.nn.wrap.loss_scale import _ascend_grad_overflow

VOCAB, HIDDEN, BATCH, SEQ = 16, 8, 2, 4


class TinyLM(nn.Cell):
    def __init__(self, hidden=HIDDEN):
        super().__init__()
        rs = np.random.RandomState(0)
        self.embed = nn.Embedding(VOCAB, hidden,
                                  embedding_table=Tensor(rs.normal(0, 1, (VOCAB, hidden)).astype(np.float32)))
        self.mid = nn.Dense(hidden, hidden, weight_init=Tensor(rs.normal(0, 0.1, (hidden, hidden)).astype(np.float32)))
        self.head = nn.Dense(hidden, VOCAB, weight_init=Tensor(rs.normal(0, 0.1, (VOCAB, hidden)).astype(np.float32)),
                             bias_init="zeros")
        self.hidden = hidden

    def construct(self, ids):
        return self.head(ops.tanh(self.mid(self.embed(ids).reshape((-1, self.hidden)))))


class TokenAveragedLoss(nn.Cell):
    def __init__(self, backbone, mismatch=False):
        super().__init__(auto_prefix=False)
        self._backbone = backbone
        self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="none")
        self.mismatch = mismatch

    def construct(self, ids, labels, loss_mask):
        per_token = self.ce(self._backbone(ids), labels.reshape((-1,)))
        mask = loss_mask.reshape((-1,))
        if self.mismatch:
            mask = ops.ones_like(mask)          # the loss's own count: not the mask the guard counts
        return ops.reduce_sum(per_token * mask) / ops.maximum(ops.reduce_sum(mask), 1)


class CpuLossScaleCell(nn.TrainOneStepWithLossScaleCell):
    """The loss-scale cell with its INFNAN-mode overflow check (IsFinite on every gradient, all-reduced when
    distributed): everything else, `if not overflow: optimizer(grads)` included, is the cell's own code."""

    def get_overflow_status(self, status, compute_output):
        return self._get_distributed_overflow_status_on_infnan_mode(_ascend_grad_overflow, compute_output)


def train_step_for(net, optimizer, args):
    loss = TokenAveragedLoss(net, "--mismatch" in args)
    if "--loss-scale" in args:
        manager = nn.DynamicLossScaleUpdateCell(loss_scale_value=2.0 ** 10, scale_factor=2, scale_window=1000)
        return CpuLossScaleCell(loss, optimizer, scale_sense=manager)
    return nn.TrainOneStepCell(loss, optimizer)


def main():
    args = sys.argv[1:]
    steps = int(args[args.index("--steps") + 1]) if "--steps" in args else 4
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)      # nn.Dense's default bias init is random
    rank, size = 0, 1
    if "MS_WORKER_NUM" in os.environ or "RANK_ID" in os.environ:
        from mindspore.communication import get_group_size, get_rank, init
        init()
        rank, size = get_rank(), get_group_size()
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    from msoverflow.guard import guard, guard_state
    if "--bench" in args:
        return bench(args, steps, rank, guard)
    net = TinyLM()
    schedule = [0.1 / (1 + i) for i in range(steps + 2)]          # the LR moves with global_step
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=schedule, momentum=0.9)
    train_step = train_step_for(net, optimizer, args)
    if "--unguarded" not in args:
        train_step = guard(train_step, count_input=2)
    rs = np.random.RandomState(1 + rank)
    for step in range(steps):
        ids = Tensor(rs.randint(0, VOCAB, (BATCH, SEQ)).astype(np.int32))
        labels = Tensor(rs.randint(0, VOCAB, (BATCH, SEQ)).astype(np.int32))
        empty = ((step == 1 and rank == 1) or step == 2) or "--mismatch" in args
        mask = Tensor(np.zeros((BATCH, SEQ), np.float32) if empty else np.ones((BATCH, SEQ), np.float32))
        out = train_step(ids, labels, mask)
        loss = out[0] if isinstance(out, tuple) else out
        state = guard_state(train_step) if "--unguarded" not in args else {}
        weights = float(sum(np.abs(p.asnumpy()).sum() for p in net.trainable_params()))
        global_step = int(optimizer.global_step.asnumpy().reshape(-1)[0])
        row = {"rank": rank, "size": size, "step": step, "tokens": int(mask.asnumpy().sum()),
               "loss": float(loss.asnumpy()), "status": state.get("status"), "grad_norm": state.get("grad_norm"),
               "weights": weights, "global_step": global_step,
               "next_lr": float(optimizer.learning_rate.learning_rate.asnumpy()[global_step])}
        if isinstance(out, tuple):
            row.update(overflow=bool(out[1].asnumpy()), scale=float(train_step.scale_sense.asnumpy().reshape(-1)[0]))
        print(json.dumps(row), flush=True)
    return 0


def bench(args, steps, rank, guard):
    """Two copies of the model, one unguarded and one guarded, built in the order --first names, alternating step
    by step; the order flips every pair (A B, B A, ...) so neither side always runs second. They share no
    Parameter (a Parameter shared by two compiled steps slowed the second one by ~20 ms a step). --aa builds both
    unguarded: the noise floor of the comparison."""
    hidden = int(os.environ.get("GUARD_BENCH_HIDDEN", HIDDEN))
    batch = int(os.environ.get("GUARD_BENCH_BATCH", BATCH * 8))
    first = args[args.index("--first") + 1] if "--first" in args else "unguarded"
    cells, params = {}, 0
    for name in (("unguarded", "guarded") if first == "unguarded" else ("guarded", "unguarded")):
        net = TinyLM(hidden)
        optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
        cells[name] = train_step_for(net, optimizer, args)
        if name == "guarded" and "--aa" not in args:
            cells[name] = guard(cells[name], count_input=2)
        params = sum(int(np.prod(p.shape)) for p in net.trainable_params())
    rs = np.random.RandomState(1 + rank)
    times = {"unguarded": [], "guarded": []}
    for step in range(steps):
        ids = Tensor(rs.randint(0, VOCAB, (batch, SEQ)).astype(np.int32))
        labels = Tensor(rs.randint(0, VOCAB, (batch, SEQ)).astype(np.int32))
        mask = Tensor(np.ones((batch, SEQ), np.float32))
        order = ("unguarded", "guarded") if step % 2 == 0 else ("guarded", "unguarded")
        for name in order:
            started = time.perf_counter()
            out = cells[name](ids, labels, mask)
            (out[0] if isinstance(out, tuple) else out).asnumpy()   # the benchmark's own wait, the same for both
            times[name].append(time.perf_counter() - started)
    print(json.dumps({"rank": rank, "bench": times, "params": params}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
