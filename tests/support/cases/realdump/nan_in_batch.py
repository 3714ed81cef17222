"""fp32 sequence regressor whose data pipeline hands it a batch with NaN features: batch row 1, sequence
positions 1-4, every channel (a broken record, a division by zero in preprocessing). One step.

The first bad value is in the graph input itself: no op made it.
"""
import numpy as np
import mindspore as ms
from mindspore import nn, Tensor

BATCH, SEQ, CHANNELS = 4, 5, 3


class SequenceRegressor(nn.Cell):
    def __init__(self):
        super().__init__()
        rs = np.random.RandomState(0)
        self.fc = nn.Dense(CHANNELS, 1, weight_init=Tensor(rs.normal(0, 0.1, (1, CHANNELS)).astype(np.float32)))

    def construct(self, x):
        return self.fc(x).mean(axis=1)


def main():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)  # initialisers not given explicitly (e.g. nn.Dense bias) are random: keep runs identical
    net = SequenceRegressor()
    train_step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
    features = np.random.RandomState(1).normal(0, 1, (BATCH, SEQ, CHANNELS)).astype(np.float32)
    features[1, 1:, :] = np.nan
    y = Tensor(np.ones((BATCH, 1), np.float32))
    print(f"step 0: loss {float(train_step(Tensor(features), y).asnumpy()):.4f}", flush=True)


if __name__ == "__main__":
    main()
