"""An fp32 head whose square root sits inside a multi-line `if` block, called from the network as `self.head(...)`.

Some predicted variances are negative, so Sqrt creates NaN from finite inputs in the forward pass of step 0. The
saved graph gives Sqrt's source as a chain of frames: the network's `self.head(x)` call, the enclosing `if`
block (a multi-line range) and, innermost, the single line `norm = self.sqrt(variance)`.

--form scale: the head instead scales the variances by 3e38 (`x * 3e38`, which MindSpore expands into an op of
scope `Expand/_Muls/Mul-op0`: the scope names no Cell, the call trace does) and float32 overflows.
"""
import argparse

import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor


class BranchHead(nn.Cell):
    def __init__(self, form):
        super().__init__()
        self.scale = form == "scale"
        rs = np.random.RandomState(0)
        self.variance = nn.Dense(8, 4, weight_init=Tensor(rs.normal(0, 0.5, (4, 8)).astype(np.float32)))
        self.sqrt = ops.Sqrt()
        self.compute_dtype = ms.float32

    def construct(self, x):
        variance = self.variance(x)
        if self.compute_dtype is not None:
            variance = ops.cast(variance, self.compute_dtype)
            if self.scale:
                return variance * 3e38
            norm = self.sqrt(variance)
            return norm * 2.0
        return variance


class Net(nn.Cell):
    def __init__(self, form):
        super().__init__()
        self.head = BranchHead(form)

    def construct(self, x):
        return self.head(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--form", choices=("sqrt", "scale"), default="sqrt")
    args = parser.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)
    net = Net(args.form)
    train_step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
    rs = np.random.RandomState(1)
    x = Tensor(rs.normal(0, 1, (4, 8)).astype(np.float32))
    y = Tensor(np.ones((4, 4), np.float32))
    print(f"step 0: loss {float(train_step(x, y).asnumpy()):.4f}", flush=True)


if __name__ == "__main__":
    main()
