"""fp32 net that log-transforms its input features, some of which are zero or negative (e.g. padding as 0 / -1).

Log creates -inf (log 0) and NaN (log of a negative) from finite inputs in the forward pass of step 0.
"""
import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor


class LogFeatures(nn.Cell):
    def construct(self, x):
        return ops.log(x)


class Regressor(nn.Cell):
    def __init__(self):
        super().__init__()
        rs = np.random.RandomState(0)
        self.features = LogFeatures()
        self.fc = nn.Dense(8, 1, weight_init=Tensor(rs.normal(0, 0.1, (1, 8)).astype(np.float32)))

    def construct(self, x):
        return self.fc(self.features(x))


def main():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)  # initialisers not given explicitly (e.g. nn.Dense bias) are random: keep runs identical
    net = Regressor()
    train_step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
    counts = np.random.RandomState(1).uniform(1, 10, (4, 8)).astype(np.float32)
    counts[0, 0] = 0.0   # an empty count
    counts[1, 2] = -1.0  # padding marker
    y = Tensor(np.ones((4, 1), np.float32))
    print(f"step 0: loss {float(train_step(Tensor(counts), y).asnumpy()):.4f}", flush=True)


if __name__ == "__main__":
    main()
