"""Clean fp32 regression net trained for two steps: nothing in the dump may be non-finite or out of range."""
import numpy as np
import mindspore as ms
from mindspore import nn, Tensor


class Regressor(nn.Cell):
    def __init__(self):
        super().__init__()
        rs = np.random.RandomState(0)
        self.fc1 = nn.Dense(8, 16, weight_init=Tensor(rs.normal(0, 0.1, (16, 8)).astype(np.float32)))
        self.act = nn.ReLU()
        self.fc2 = nn.Dense(16, 1, weight_init=Tensor(rs.normal(0, 0.1, (1, 16)).astype(np.float32)))

    def construct(self, x):
        return self.fc2(self.act(self.fc1(x)))


def main():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)  # initialisers not given explicitly (e.g. nn.Dense bias) are random: keep runs identical
    net = Regressor()
    train_step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
    rs = np.random.RandomState(1)
    for step in range(2):
        x = Tensor(rs.normal(0, 1, (4, 8)).astype(np.float32))
        y = Tensor(rs.normal(0, 1, (4, 1)).astype(np.float32))
        print(f"step {step}: loss {float(train_step(x, y).asnumpy()):.4f}", flush=True)


if __name__ == "__main__":
    main()
