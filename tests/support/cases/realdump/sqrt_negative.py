"""fp32 head that predicts a variance without constraining it to be positive and takes its square root.

Some predicted variances are negative, so Sqrt creates NaN from finite inputs in the forward pass of step 0.
"""
import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor


class StdHead(nn.Cell):
    def __init__(self):
        super().__init__()
        rs = np.random.RandomState(0)
        self.variance = nn.Dense(8, 4, weight_init=Tensor(rs.normal(0, 0.5, (4, 8)).astype(np.float32)))

    def construct(self, x):
        return ops.sqrt(self.variance(x))


def main():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)  # initialisers not given explicitly (e.g. nn.Dense bias) are random: keep runs identical
    net = StdHead()
    train_step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
    rs = np.random.RandomState(1)
    x = Tensor(rs.normal(0, 1, (4, 8)).astype(np.float32))
    y = Tensor(np.ones((4, 4), np.float32))
    print(f"step 0: loss {float(train_step(x, y).asnumpy()):.4f}", flush=True)


if __name__ == "__main__":
    main()
