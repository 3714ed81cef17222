"""A small MLP for `msoverflow compare` across precisions: Dense -> ReLU -> Dense -> Square -> Dense, MSE loss, SGD,
trained under MindSpore's automatic mixed precision at --amp O0 (float32) or O2 (float16 network). Weights and
data come from fixed seeds, so an O0 run and an O2 run differ only in precision.

    python amp_net.py [--amp O0|O2] [--steps N] [--overflow]

--overflow: Energy computes square(x * 400) / (400 * 400): float32 holds every value; under O2 the constant
            400 * 400 = 160000 is inf in float16 (largest 65504), so the Div after the Square makes NaN: the planted
            fp16 overflow (on CPU MindSpore computes the Square's payload in float32, whatever its file says).
"""
import argparse

import numpy as np

HIDDEN, WIDE, BATCH = 16, 32, 8


def build(ms, nn, ops, scale):
    from mindspore import Tensor

    def weight(shape, seed):
        return Tensor(np.random.RandomState(seed).normal(0.0, 0.3, shape).astype(np.float32))

    class Feature(nn.Cell):
        def __init__(self):
            super().__init__()
            self.up = nn.Dense(HIDDEN, WIDE, weight_init=weight((WIDE, HIDDEN), 1), bias_init="zeros")
            self.relu = nn.ReLU()
            self.down = nn.Dense(WIDE, HIDDEN, weight_init=weight((HIDDEN, WIDE), 2), bias_init="zeros")

        def construct(self, x):
            return self.down(self.relu(self.up(x)))

    class Energy(nn.Cell):
        def __init__(self):
            super().__init__()
            self.square = ops.Square()
            self.scale = scale

        def construct(self, x):
            return self.square(x * self.scale) / (self.scale * self.scale)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.feature = Feature()
            self.energy = Energy()
            self.head = nn.Dense(HIDDEN, 1, weight_init=weight((1, HIDDEN), 3), bias_init="zeros")

        def construct(self, x):
            return self.head(self.energy(self.feature(x)))

    return Net()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--amp", default="O0", choices=["O0", "O2"])
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--overflow", action="store_true")
    args = parser.parse_args(argv)

    import mindspore as ms
    from mindspore import Tensor, nn, ops

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)
    net = build(ms, nn, ops, 400.0 if args.overflow else 1.0)
    if args.amp != "O0":
        net = ms.amp.auto_mixed_precision(net, args.amp)
    train_step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
    data = np.random.RandomState(5)
    for step in range(args.steps):
        x = Tensor(data.normal(0, 1, (BATCH, HIDDEN)).astype(np.float32))
        y = Tensor(data.normal(0, 1, (BATCH, 1)).astype(np.float32))
        loss = float(train_step(x, y).asnumpy())
        print(f"step {step}: loss {loss:.6f}", flush=True)


if __name__ == "__main__":
    main()
