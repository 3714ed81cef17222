"""Token-averaged LM loss where step 1's loss mask is all zero (a batch holding only prompt or padding tokens).

--formula loss_division: loss = sum(ce * mask) / token_count. The forward division is 0/0 -> NaN, but the
  backward of that division (dloss / token_count = 1/0 -> inf) does not wait for it and runs first.
--formula token_weights: loss = sum(ce * (mask / token_count)). The mask needs no gradient, so the forward
  0/0 -> NaN is the first non-finite value.
Step 0 is clean in both.
"""
import argparse

import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor

VOCAB, HIDDEN, BATCH, SEQ = 16, 8, 2, 4


class TinyLM(nn.Cell):
    def __init__(self):
        super().__init__()
        rs = np.random.RandomState(0)
        self.embed = nn.Embedding(VOCAB, HIDDEN, embedding_table=Tensor(rs.normal(0, 1, (VOCAB, HIDDEN)).astype(np.float32)))
        self.head = nn.Dense(HIDDEN, VOCAB, weight_init=Tensor(rs.normal(0, 0.1, (VOCAB, HIDDEN)).astype(np.float32)))

    def construct(self, ids):
        return self.head(self.embed(ids).reshape((-1, HIDDEN)))


class TokenAveragedLoss(nn.Cell):
    def __init__(self, backbone, formula):
        super().__init__(auto_prefix=False)
        self._backbone = backbone
        self.weights_per_token = formula == "token_weights"
        self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="none")

    def construct(self, ids, labels, loss_mask):
        per_token = self.ce(self._backbone(ids), labels.reshape((-1,)))
        mask = loss_mask.reshape((-1,))
        token_count = ops.reduce_sum(mask)
        if self.weights_per_token:
            return ops.reduce_sum(per_token * (mask / token_count))
        return ops.reduce_sum(per_token * mask) / token_count


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--formula", choices=["loss_division", "token_weights"], default="loss_division")
    args = parser.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)  # initialisers not given explicitly (e.g. nn.Dense bias) are random: keep runs identical
    net = TinyLM()
    train_step = nn.TrainOneStepCell(TokenAveragedLoss(net, args.formula), nn.SGD(net.trainable_params(), 0.01))
    rs = np.random.RandomState(1)
    for step in range(2):
        ids = Tensor(rs.randint(0, VOCAB, (BATCH, SEQ)).astype(np.int32))
        labels = Tensor(rs.randint(0, VOCAB, (BATCH, SEQ)).astype(np.int32))
        mask = np.ones((BATCH, SEQ), np.float32) if step == 0 else np.zeros((BATCH, SEQ), np.float32)
        print(f"step {step}: tokens {int(mask.sum())} loss {float(train_step(ids, labels, Tensor(mask)).asnumpy()):.4f}",
              flush=True)


if __name__ == "__main__":
    main()
