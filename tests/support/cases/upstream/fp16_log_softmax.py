"""fp16 classifier whose loss is log(softmax(z / T)) at temperature T = 0.05, one step in graph mode (--steps N: N).

The label's logit sits 0.95 below the largest, so z / T puts it 19 below: its probability is about 5.6e-9, which
float32 holds and float16 (smallest subnormal 6e-8) rounds to exact 0. Log(0) = -inf; the loss is inf.
"""
import argparse

import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor

CLASSES, FEATURES = 4, 4
TEMPERATURE = 0.05


class TemperatureClassifier(nn.Cell):
    def __init__(self):
        super().__init__()
        weight = np.zeros((CLASSES, FEATURES), np.float32)
        weight[:, 0] = [0.95, 0.0, 0.5, 0.3]          # logits of the batch's one-hot feature 0
        self.head = nn.Dense(FEATURES, CLASSES, weight_init=Tensor(weight), has_bias=False).to_float(ms.float16)
        self.temperature = Tensor(TEMPERATURE, ms.float16)

    def construct(self, x):
        z = self.head(ops.cast(x, ms.float16))
        return ops.log(ops.softmax(z / self.temperature, -1))


class NegativeLogLikelihood(nn.Cell):
    def __init__(self, net):
        super().__init__(auto_prefix=False)
        self.net = net

    def construct(self, x, onehot):
        return -ops.reduce_sum(ops.cast(self.net(x), ms.float32) * onehot)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1)
    args = parser.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    net = TemperatureClassifier()
    train_step = nn.TrainOneStepCell(NegativeLogLikelihood(net), nn.SGD(net.trainable_params(), 0.01))
    x = Tensor(np.array([[1, 0, 0, 0]], np.float32))
    onehot = Tensor(np.array([[0, 1, 0, 0]], np.float32))          # the label: class 1
    for step in range(args.steps):
        print(f"step {step}: loss {float(train_step(x, onehot).asnumpy())}", flush=True)


if __name__ == "__main__":
    main()
