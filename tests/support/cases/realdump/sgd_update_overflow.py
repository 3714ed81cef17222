"""fp32 regressor trained by SGD with a learning rate so large that the update itself overflows float32.

Weights, gradients (about 50) and the learning rate (3e38) are finite; SGD writes weight - lr * grad = -inf into
the weights in place in step 0. A dump reads SGD's inputs after it ran, so its input 0 (the weight it wrote)
already holds the inf: the op that made it is SGD, not the weight's producer. Step 1's forward reads the inf
weights.
"""
import numpy as np
import mindspore as ms
from mindspore import nn, Tensor


class Regressor(nn.Cell):
    def __init__(self):
        super().__init__()
        rs = np.random.RandomState(0)
        self.fc = nn.Dense(8, 4, weight_init=Tensor(rs.normal(0, 0.5, (4, 8)).astype(np.float32)),
                           bias_init="zeros")

    def construct(self, x):
        return self.fc(x)


def main():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    net = Regressor()
    optimizer = nn.SGD(net.trainable_params(), learning_rate=3e38)
    train_step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), optimizer)
    rs = np.random.RandomState(1)
    x = Tensor(rs.normal(0, 1, (4, 8)).astype(np.float32))
    y = Tensor(np.full((4, 4), 100.0, np.float32))
    for step in range(2):
        print(f"step {step}: loss {float(train_step(x, y).asnumpy()):.4f}", flush=True)


if __name__ == "__main__":
    main()
