"""fp32 single-head causal self-attention trained for two steps: the standard causal mask.

`ops.masked_fill(scores, causal, float("-inf"))` writes -inf above the diagonal before Softmax, which turns it
into exact zeros. The loss, every gradient and every weight stay finite: the -inf is contained, not a fault.
"""
import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor

BATCH, SEQ, HIDDEN = 2, 4, 8


def _weight(rs, rows, cols):
    return Tensor(rs.normal(0, 0.3, (rows, cols)).astype(np.float32))


class CausalSelfAttention(nn.Cell):
    def __init__(self):
        super().__init__()
        rs = np.random.RandomState(0)
        self.query = nn.Dense(HIDDEN, HIDDEN, weight_init=_weight(rs, HIDDEN, HIDDEN), has_bias=False)
        self.key = nn.Dense(HIDDEN, HIDDEN, weight_init=_weight(rs, HIDDEN, HIDDEN), has_bias=False)
        self.value = nn.Dense(HIDDEN, HIDDEN, weight_init=_weight(rs, HIDDEN, HIDDEN), has_bias=False)
        self.causal = Tensor(np.triu(np.ones((SEQ, SEQ), np.bool_), k=1))
        self.scale = 1.0 / float(np.sqrt(HIDDEN))

    def construct(self, x):
        q, k, v = self.query(x), self.key(x), self.value(x)
        scores = ops.bmm(q, k.transpose(0, 2, 1)) * self.scale
        scores = ops.masked_fill(scores, self.causal, float("-inf"))
        return ops.bmm(ops.softmax(scores, -1), v)


class TinyDecoder(nn.Cell):
    def __init__(self):
        super().__init__()
        self.attn = CausalSelfAttention()
        self.head = nn.Dense(HIDDEN, 1, weight_init=_weight(np.random.RandomState(1), 1, HIDDEN), has_bias=False)

    def construct(self, x):
        return self.head(self.attn(x))


def main():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)
    net = TinyDecoder()
    train_step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
    rs = np.random.RandomState(2)
    for step in range(2):
        x = Tensor(rs.normal(0, 1, (BATCH, SEQ, HIDDEN)).astype(np.float32))
        y = Tensor(rs.normal(0, 1, (BATCH, SEQ, 1)).astype(np.float32))
        print(f"step {step}: loss {float(train_step(x, y).asnumpy()):.4f}", flush=True)


if __name__ == "__main__":
    main()
