"""fp32 regressor whose feature weights are a zero-initialised Parameter normalised by its own sum, one step.

weights / sum(weights) is 0 / 0 = NaN in every element: a weight is not a mask count, and no batch fixes it.
"""
import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor, Parameter


class NormalisedMix(nn.Cell):
    def __init__(self):
        super().__init__()
        self.mix = Parameter(Tensor(np.zeros((4,), np.float32)), name="mix")

    def construct(self, x):
        share = self.mix / ops.reduce_sum(self.mix)
        return ops.reduce_sum(x * share, -1)


def main():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    net = NormalisedMix()
    train_step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
    rs = np.random.RandomState(1)
    x = Tensor(rs.normal(0, 1, (2, 4)).astype(np.float32))
    y = Tensor(np.ones((2,), np.float32))
    print(f"step 0: loss {float(train_step(x, y).asnumpy())}", flush=True)


if __name__ == "__main__":
    main()
