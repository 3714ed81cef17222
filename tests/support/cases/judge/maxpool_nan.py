"""A NaN in the data batch that a max-pool drops: fp32 sequence classifier whose features are max-pooled over the
sequence (ops.max over the last axis: ArgMaxWithValue), then a Dense head, MSE loss, SGD, two steps.

Step 0's batch holds a NaN at row 1, channel 2, sequence position 3. MindSpore CPU's ArgMaxWithValue skips a NaN
that is not first in its window, so the pooled features, the loss, the gradients and the weights all stay finite.
The NaN is still bad data (NaN is no mask value): never 'contained'.
"""
import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor

BATCH, CHANNELS, LENGTH = 4, 4, 6


class PooledRegressor(nn.Cell):
    def __init__(self):
        super().__init__()
        rs = np.random.RandomState(0)
        self.head = nn.Dense(CHANNELS, 1, weight_init=Tensor(rs.normal(0, 0.3, (1, CHANNELS)).astype(np.float32)))

    def construct(self, x):
        pooled, _index = ops.max(x, axis=-1)
        return self.head(pooled)


def main():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)
    net = PooledRegressor()
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
    rs = np.random.RandomState(1)
    for step in range(2):
        x = rs.normal(0, 1, (BATCH, CHANNELS, LENGTH)).astype(np.float32)
        y = rs.normal(0, 1, (BATCH, 1)).astype(np.float32)
        if step == 0:
            x[1, 2, 3] = np.nan      # not first in its window: ArgMaxWithValue passes over it
        loss = train(Tensor(x), Tensor(y))
        print(f"step {step}: loss {float(loss.asnumpy()):.4g}", flush=True)
    print("weights finite:", all(np.isfinite(p.asnumpy()).all() for p in net.trainable_params()), flush=True)


if __name__ == "__main__":
    main()
