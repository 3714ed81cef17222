"""Two data-parallel ranks (msrun, MCCL on CPU) training a tiny LM with a token-averaged loss.

Step 1: rank 1's loss mask is empty (its batch holds only prompt/padding tokens); step 2: every rank's is.
The loss divides by the local token count, so step 1 gives 0/0 on rank 1 and the all-reduced gradients carry
the NaN to every rank. Run: msrun --worker_num=2 --local_worker_num=2 --master_port=P --join=True
--log_dir=D train_zero_token_dp.py
"""
import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor
from mindspore.communication import init, get_rank, get_group_size

VOCAB, HIDDEN, BATCH, SEQ, STEPS = 16, 8, 2, 4, 4


class TinyLM(nn.Cell):
    def __init__(self):
        super().__init__()
        rs = np.random.RandomState(0)
        self.embed = nn.Embedding(VOCAB, HIDDEN,
                                  embedding_table=Tensor(rs.normal(0, 1, (VOCAB, HIDDEN)).astype(np.float32)))
        self.head = nn.Dense(HIDDEN, VOCAB, weight_init=Tensor(rs.normal(0, 0.1, (VOCAB, HIDDEN)).astype(np.float32)),
                             bias_init="zeros")

    def construct(self, ids):
        return self.head(self.embed(ids).reshape((-1, HIDDEN)))


class TokenAveragedLoss(nn.Cell):
    def __init__(self, backbone):
        super().__init__(auto_prefix=False)
        self._backbone = backbone
        self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="none")

    def construct(self, ids, labels, loss_mask):
        per_token = self.ce(self._backbone(ids), labels.reshape((-1,)))
        mask = loss_mask.reshape((-1,))
        token_count = ops.reduce_sum(mask)
        return ops.reduce_sum(per_token * mask) / token_count


def main():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    init()
    rank, size = get_rank(), get_group_size()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    net = TinyLM()
    train_step = nn.TrainOneStepCell(TokenAveragedLoss(net), nn.SGD(net.trainable_params(), 0.01))
    rs = np.random.RandomState(1 + rank)
    for step in range(STEPS):
        ids = Tensor(rs.randint(0, VOCAB, (BATCH, SEQ)).astype(np.int32))
        labels = Tensor(rs.randint(0, VOCAB, (BATCH, SEQ)).astype(np.int32))
        empty = (step == 1 and rank == 1) or step == 2
        mask = np.zeros((BATCH, SEQ), np.float32) if empty else np.ones((BATCH, SEQ), np.float32)
        loss = float(train_step(ids, labels, Tensor(mask)).asnumpy())
        finite = all(bool(np.isfinite(p.asnumpy()).all()) for p in net.trainable_params())
        print(f"rank {rank} step {step}: tokens {int(mask.sum())} loss {loss:.4f} params finite: {finite}", flush=True)


if __name__ == "__main__":
    main()
