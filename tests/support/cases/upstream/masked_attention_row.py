"""Causal self-attention with float16 scores over a left-padded batch, two steps in graph mode.

Row 1 of the batch starts with two padding tokens. The mask is causal | key-is-padding, filled with -inf by
ops.masked_fill: queries 0 and 1 of row 1 may attend only to keys that are padding, so their whole score rows are
-inf and the float16 Softmax gives NaN (MindSpore CPU's float32 Softmax writes 0 for such a row). The -inf is the
program's own fill constant; the NaN is made by Softmax.
"""
import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor

BATCH, SEQ, HIDDEN = 2, 4, 8


def _weight(rs, rows, cols):
    return Tensor(rs.normal(0, 0.3, (rows, cols)).astype(np.float32))


class PaddedCausalAttention(nn.Cell):
    def __init__(self):
        super().__init__()
        rs = np.random.RandomState(0)
        self.query = nn.Dense(HIDDEN, HIDDEN, weight_init=_weight(rs, HIDDEN, HIDDEN), has_bias=False)
        self.key = nn.Dense(HIDDEN, HIDDEN, weight_init=_weight(rs, HIDDEN, HIDDEN), has_bias=False)
        self.value = nn.Dense(HIDDEN, HIDDEN, weight_init=_weight(rs, HIDDEN, HIDDEN), has_bias=False)
        self.causal = Tensor(np.triu(np.ones((SEQ, SEQ), np.bool_), k=1))
        self.scale = 1.0 / float(np.sqrt(HIDDEN))

    def construct(self, x, padding):
        q, k, v = self.query(x), self.key(x), self.value(x)
        scores = ops.cast(ops.bmm(q, k.transpose(0, 2, 1)) * self.scale, ms.float16)
        masked = ops.logical_or(self.causal.expand_dims(0), padding.expand_dims(1))
        scores = ops.masked_fill(scores, masked, float("-inf"))
        return ops.bmm(ops.cast(ops.softmax(scores, -1), ms.float32), v)


class TinyDecoder(nn.Cell):
    def __init__(self):
        super().__init__()
        self.attn = PaddedCausalAttention()
        self.head = nn.Dense(HIDDEN, 1, weight_init=_weight(np.random.RandomState(1), 1, HIDDEN), has_bias=False)

    def construct(self, x, padding):
        return self.head(self.attn(x, padding))


class Loss(nn.Cell):
    def __init__(self, net):
        super().__init__(auto_prefix=False)
        self.net = net

    def construct(self, x, padding, y):
        return ops.reduce_mean(ops.square(self.net(x, padding) - y))


def main():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    net = TinyDecoder()
    train_step = nn.TrainOneStepCell(Loss(net), nn.SGD(net.trainable_params(), 0.01))
    rs = np.random.RandomState(2)
    padding = np.zeros((BATCH, SEQ), np.bool_)
    padding[1, :2] = True                            # row 1 is left-padded by two tokens
    for step in range(2):
        x = Tensor(rs.normal(0, 1, (BATCH, SEQ, HIDDEN)).astype(np.float32))
        y = Tensor(rs.normal(0, 1, (BATCH, SEQ, 1)).astype(np.float32))
        print(f"step {step}: loss {float(train_step(x, Tensor(padding), y).asnumpy())}", flush=True)


if __name__ == "__main__":
    main()
