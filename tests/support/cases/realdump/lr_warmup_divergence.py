"""fp16 regressor trained by SGD whose learning rate warms up linearly (0.03 per step) past what the problem
tolerates: from about step 10 the weights grow every step, and once they are large enough the fp16 computation
overflows. The cause is the training dynamics (the learning-rate schedule), long before the step that overflows.
"""
import argparse

import numpy as np
import mindspore as ms
from mindspore import nn, Tensor
from mindspore import dtype as mstype

from loss_scale_fp16 import Fp32Loss      # the same fp16 network / fp32 loss split (this script's directory)

BATCH, FEATURES = 16, 16


class Regressor(nn.Cell):
    def __init__(self):
        super().__init__()
        rs = np.random.RandomState(0)
        self.fc = nn.Dense(FEATURES, 1, weight_init=Tensor(rs.normal(0, 0.1, (1, FEATURES)).astype(np.float32)))

    def construct(self, x):
        return self.fc(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=38)
    args = parser.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)
    net = Regressor()
    net.to_float(mstype.float16)
    warmup = [0.03 * (step + 1) for step in range(args.steps)]
    train_step = nn.TrainOneStepCell(Fp32Loss(net), nn.SGD(net.trainable_params(), warmup))
    rs = np.random.RandomState(1)
    for step in range(args.steps):
        x = Tensor(rs.normal(0, 1, (BATCH, FEATURES)).astype(np.float32))
        y = Tensor(rs.normal(0, 1, (BATCH, 1)).astype(np.float32))
        loss = float(train_step(x, y).asnumpy())
        print(f"step {step}: lr {warmup[step]:.2f} loss {loss:.4g} max |w| "
              f"{float(np.abs(net.fc.weight.asnumpy()).max()):.4g}", flush=True)


if __name__ == "__main__":
    main()
