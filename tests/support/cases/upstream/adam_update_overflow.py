"""fp32 regressor with an offset trained by Adam at learning rate 3e38, two steps in graph mode.

The offset starts at 2e38 and enters the prediction scaled by 1e-37 (20), with a straight-through gradient (as
quantisation-aware training does), so the gradient is of normal size. Adam's first update is about
lr * sign(gradient) = +3e38: it writes 5e38 = +inf into the offset in place in step 0. MindSpore CPU's Adam
returns finite outputs; the inf is in its written input 0.
"""
import numpy as np
import mindspore as ms
from mindspore import nn, Tensor, Parameter


class StraightThroughScale(nn.Cell):
    def construct(self, w):
        return w * 1e-37

    def bprop(self, w, out, dout):
        return (dout,)


class OffsetRegressor(nn.Cell):
    def __init__(self):
        super().__init__()
        self.offset = Parameter(Tensor(np.full((1,), 2e38, np.float32)), name="offset")
        self.scale = StraightThroughScale()

    def construct(self, x):
        return x.sum(-1, keepdims=True) + self.scale(self.offset)


def main():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    net = OffsetRegressor()
    optimizer = nn.Adam([net.offset], learning_rate=3e38)
    train_step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), optimizer)
    x = Tensor(np.zeros((2, 4), np.float32))
    y = Tensor(np.full((2, 1), 100.0, np.float32))
    for step in range(2):
        print(f"step {step}: loss {float(train_step(x, y).asnumpy())}", flush=True)


if __name__ == "__main__":
    main()
