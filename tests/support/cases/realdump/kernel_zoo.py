"""A clean fp32 training step through many kinds of op, to check msoverflow's reference kernels against
MindSpore's own results: MatMul and BatchMatMul with each transpose flag, LayerNorm and its grad, Softmax,
LogSoftmax, the elementwise math (Sqrt, Rsqrt, Exp, Log, Abs, Neg, Square, Reciprocal, Sigmoid, Tanh, Maximum,
Minimum, Pow, Div) with their grads, ReduceMax/Mean/Sum, and a Cast to float16 and back.

MindSpore 2.10 has no RmsNorm kernel on CPU, so it is not here.
"""
import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor, Parameter


class KernelZoo(nn.Cell):
    def __init__(self):
        super().__init__()
        rs = np.random.RandomState(0)
        self.w = Parameter(Tensor(rs.normal(0, 0.3, (8, 8)).astype(np.float32)), name="w")
        self.ln = nn.LayerNorm((8,), epsilon=1e-5)
        self.bmm = ops.BatchMatMul(transpose_b=True)
        self.mm_ta = ops.MatMul(transpose_a=True)

    def construct(self, x):
        x = ops.matmul(x, self.w)
        h = self.ln(x)
        s = self.bmm(h.reshape(2, 4, 8), h.reshape(2, 4, 8))
        p = ops.softmax(s, -1)
        lp = ops.log_softmax(s, -1)
        a = ops.sqrt(ops.abs(h) + 1.0) + ops.rsqrt(ops.square(h) + 1.0) + ops.exp(ops.neg(ops.abs(h)))
        b = ops.log(ops.abs(h) + 1.0) + ops.reciprocal(ops.abs(h) + 2.0) + ops.sigmoid(h) + ops.tanh(h)
        c = ops.maximum(a, b) - ops.minimum(a, b) + ops.pow(ops.abs(h) + 1.0, 1.5) + ops.div(a, b + 3.0)
        d = self.mm_ta(c, c)
        red = ops.reduce_max(c, -1) + ops.reduce_mean(c, -1) + ops.reduce_sum(d, 0)[:4].sum()
        half = ops.cast(c, ms.float16).astype(ms.float32)
        return p.sum() + lp.mean() + red.sum() + half.mean()


def main():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)
    net = KernelZoo()
    step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 1e-4))
    rs = np.random.RandomState(1)
    x = Tensor(rs.normal(0, 1, (8, 8)).astype(np.float32))
    print(f"step 0: loss {float(step(x, Tensor(0.0, ms.float32)).asnumpy()):.4f}", flush=True)


if __name__ == "__main__":
    main()
