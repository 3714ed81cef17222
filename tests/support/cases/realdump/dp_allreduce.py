"""Data-parallel training on N CPU ranks (started by `msrun`; MCCL collectives), where chosen ranks go bad at
chosen steps. `init()` + ParallelMode.DATA_PARALLEL make nn.TrainOneStepCell insert the gradient AllReduce, so a
bad gradient made on one rank reaches every rank in that step.

--model tokens  : tiny LM, per-token weights = mask / sum(mask); a bad (rank, step) gets an all-zero loss mask,
                  so its forward Div is 0/0 -> NaN.
--model normhead: the demo TinyBaichuan (fp16 NormHead); a bad (rank, step) trains with loss scale --bad-scale (its batch
                  is the one whose gradient leaves fp16's range), the others with 1, so SqrtGrad overflows on that
                  rank only.
--bad R:S[,R:S]  : the (rank, step) pairs that go bad.
--rollback       : after a step that left non-finite weights, restore the weights from before it (a skipped
                   step, as a loss-scale manager does), so a later origin is independent of the earlier one.
--skip-on-overflow: train with a loss-scale-style cell (SkipOnOverflowCell): the optimizer runs inside a branch
                   taken only when every reduced gradient is finite, so a bad step runs no optimizer kernel at all
                   (what nn.TrainOneStepWithLossScaleCell does; its own overflow check needs Ascend status ops).
"""
import argparse

import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor
from mindspore.communication import init, get_rank, get_group_size

VOCAB, HIDDEN, BATCH, SEQ = 16, 8, 2, 4


class TinyLM(nn.Cell):
    def __init__(self):
        super().__init__()
        rs = np.random.RandomState(0)
        self.embed = nn.Embedding(VOCAB, HIDDEN, embedding_table=Tensor(rs.normal(0, 1, (VOCAB, HIDDEN)).astype(np.float32)))
        self.head = nn.Dense(HIDDEN, VOCAB, weight_init=Tensor(rs.normal(0, 0.1, (VOCAB, HIDDEN)).astype(np.float32)))

    def construct(self, ids):
        return self.head(self.embed(ids).reshape((-1, HIDDEN)))


class TokenWeightedLoss(nn.Cell):
    def __init__(self, backbone):
        super().__init__(auto_prefix=False)
        self._backbone = backbone
        self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="none")

    def construct(self, ids, labels, loss_mask):
        per_token = self.ce(self._backbone(ids), labels.reshape((-1,)))
        mask = loss_mask.reshape((-1,))
        token_count = ops.reduce_sum(mask)
        return ops.reduce_sum(per_token * (mask / token_count))


class SkipOnOverflowCell(nn.Cell):
    """Gradients, the data-parallel gradient reducer (one AllReduce per gradient), then the optimizer only when
    every reduced gradient is finite: `if finite: loss = depend(loss, optimizer(grads))`."""

    def __init__(self, network, optimizer):
        super().__init__(auto_prefix=False)
        self.network = network
        self.optimizer = optimizer
        self.weights = optimizer.parameters
        self.grad = ops.GradOperation(get_by_list=True)
        self.grad_reducer = nn.DistributedGradReducer(self.weights, mean=True, degree=get_group_size())

    def construct(self, *inputs):
        loss = self.network(*inputs)
        grads = self.grad(self.network, self.weights)(*inputs)
        grads = self.grad_reducer(grads)
        finite = ops.stack([ops.isfinite(g).all().astype(ms.float32) for g in grads]).min()
        if finite > 0.5:
            loss = ops.depend(loss, self.optimizer(grads))
        return loss


def _bad_pairs(text):
    pairs = set()
    for item in filter(None, (text or "").split(",")):
        rank, step = item.split(":")
        pairs.add((int(rank), int(step)))
    return pairs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["tokens", "normhead"], default="tokens")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--bad", default="1:1")
    parser.add_argument("--rollback", action="store_true")
    parser.add_argument("--skip-on-overflow", action="store_true")
    parser.add_argument("--bad-scale", type=float, default=256.0, help="normhead: the bad rank's loss scale")
    args = parser.parse_args()
    bad = _bad_pairs(args.bad)

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    init()
    rank, size = get_rank(), get_group_size()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    ms.set_seed(0)

    if args.model == "tokens":
        net = TinyLM()
        loss_net = TokenWeightedLoss(net)
    else:
        from msoverflow.demo.model import TinyBaichuan, CausalLMLoss
        net = TinyBaichuan()
        loss_net = CausalLMLoss(net, 1.0)
    optimizer = nn.SGD(net.trainable_params(), 1e-4 if args.model == "normhead" else 0.01)
    train_step = (SkipOnOverflowCell if args.skip_on_overflow else nn.TrainOneStepCell)(loss_net, optimizer)
    rs = np.random.RandomState(1 + rank)
    for step in range(args.steps):
        saved = {p.name: p.asnumpy().copy() for p in net.trainable_params()} if args.rollback else None
        if args.model == "tokens":
            ids = Tensor(rs.randint(0, VOCAB, (BATCH, SEQ)).astype(np.int32))
            labels = Tensor(rs.randint(0, VOCAB, (BATCH, SEQ)).astype(np.int32))
            mask = np.zeros((BATCH, SEQ), np.float32) if (rank, step) in bad else np.ones((BATCH, SEQ), np.float32)
            loss = train_step(ids, labels, Tensor(mask))
        else:
            from msoverflow.demo.model import batches
            ids, labels = next(iter(batches(1, seed=1 + step)))
            loss_net.set_loss_scale(args.bad_scale if (rank, step) in bad else 1.0)
            loss = train_step(ids, labels)
        finite = all(bool(np.isfinite(p.asnumpy().astype(np.float32)).all()) for p in net.trainable_params())
        if not finite and saved is not None:
            for p in net.trainable_params():
                p.set_data(Tensor(saved[p.name], p.dtype))
        print(f"rank {rank}/{size} step {step}: loss {float(loss.asnumpy()):.4f} weights finite: {finite}"
              + (" (rolled back)" if not finite and saved is not None else ""), flush=True)


if __name__ == "__main__":
    main()
