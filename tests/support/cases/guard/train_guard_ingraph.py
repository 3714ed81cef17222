"""The in-graph zero-token guard on a tiny LM (graph mode, CPU; one process or msrun data parallel).

    python train_guard_ingraph.py [--mismatch] [--steps N] [--bench] [--unguarded]
Each step prints one JSON line with what the test checks (read on the host AFTER the step, by this script,
not by the guard): loss, the guard's status and grad norm, a checksum of the weights, the optimizer's
global_step and the learning rate it would use next. Empty loss masks: rank 1 at step 1 (the global count is
still > 0: an ordinary update), every rank at step 2 (no signal: skipped). --mismatch: the loss averages over its
own all-ones mask while the guard counts an empty one (a reducer mismatch: the step must fail). --bench: no
per-step printing, no empty masks; the median step time is printed at the end (benchmarks/bench_guard.py).
"""
import json
import os
import sys
import time

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops

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


def main():
    args = sys.argv[1:]
    steps = int(args[args.index("--steps") + 1]) if "--steps" in args else 4
    bench = "--bench" in args
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    rank, size = 0, 1
    if "MS_WORKER_NUM" in os.environ or "RANK_ID" in os.environ:
        from mindspore.communication import get_group_size, get_rank, init
        init()
        rank, size = get_rank(), get_group_size()
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    hidden = int(os.environ.get("GUARD_BENCH_HIDDEN", HIDDEN))
    net = TinyLM(hidden)
    schedule = [0.1 / (1 + i) for i in range(steps + 2)]          # the LR moves with global_step
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=schedule, momentum=0.9)
    train_step = nn.TrainOneStepCell(TokenAveragedLoss(net, "--mismatch" in args), optimizer)
    if "--unguarded" not in args:
        from msoverflow.guard import guard, guard_state
        train_step = guard(train_step, count_input=2, grad_norm=os.environ.get("GUARD_BENCH_NORM", "1") == "1")
    rs = np.random.RandomState(1 + rank)
    batch = int(os.environ.get("GUARD_BENCH_BATCH", BATCH * 8)) if bench else BATCH
    times = []
    for step in range(steps):
        ids = Tensor(rs.randint(0, VOCAB, (batch, SEQ)).astype(np.int32))
        labels = Tensor(rs.randint(0, VOCAB, (batch, SEQ)).astype(np.int32))
        empty = not bench and (((step == 1 and rank == 1) or step == 2) or "--mismatch" in args)
        mask = Tensor(np.zeros((batch, SEQ), np.float32) if empty else np.ones((batch, SEQ), np.float32))
        started = time.perf_counter()
        loss = train_step(ids, labels, mask)
        if bench:
            loss.asnumpy()        # the benchmark's own wait for the step (the same in both runs)
            times.append(time.perf_counter() - started)
            continue
        state = guard_state(train_step) if "--unguarded" not in args else {}
        weights = float(sum(np.abs(p.asnumpy()).sum() for p in net.trainable_params()))
        global_step = int(optimizer.global_step.asnumpy().reshape(-1)[0])
        print(json.dumps({"rank": rank, "size": size, "step": step, "tokens": int(mask.asnumpy().sum()),
                          "loss": float(loss.asnumpy()), "status": state.get("status"),
                          "grad_norm": state.get("grad_norm"), "weights": weights, "global_step": global_step,
                          "next_lr": float(optimizer.learning_rate.learning_rate.asnumpy()[global_step])}), flush=True)
    if bench:
        warm = sorted(times[len(times) // 5:])
        print(json.dumps({"rank": rank, "median_step_s": warm[len(warm) // 2], "steps": len(times)}), flush=True)


if __name__ == "__main__":
    main()
