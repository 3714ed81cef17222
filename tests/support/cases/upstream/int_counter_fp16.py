"""fp32 regressor scaled by a step counter: an int32 counter (69998) cast to float16, one step in graph mode.

float16's largest value is 65504: the Cast gives +inf where float32 holds 69998 exactly.
"""
import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor, Parameter


class CounterScaled(nn.Cell):
    def __init__(self):
        super().__init__()
        rs = np.random.RandomState(0)
        self.fc = nn.Dense(4, 1, weight_init=Tensor(rs.normal(0, 0.5, (1, 4)).astype(np.float32)), has_bias=False)
        self.counter = Parameter(Tensor(69998, ms.int32), name="counter", requires_grad=False)

    def construct(self, x):
        progress = ops.cast(self.counter, ms.float16)
        return self.fc(x) * ops.cast(progress, ms.float32) / 70000.0


def main():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    net = CounterScaled()
    train_step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
    rs = np.random.RandomState(1)
    x = Tensor(rs.normal(0, 1, (2, 4)).astype(np.float32))
    y = Tensor(np.ones((2, 1), np.float32))
    print(f"step 0: loss {float(train_step(x, y).asnumpy())}", flush=True)


if __name__ == "__main__":
    main()
