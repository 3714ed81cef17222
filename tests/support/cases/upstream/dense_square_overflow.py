"""fp32 Dense layer with a square 8x8 weight on an 8x8 batch, whose product overflows float32, one step.

Dense computes x @ W^T (MatMul transpose_b=True). x[0, 0] = 1e20 and W[3, 0] = 1e20 put 1e40 at output (0, 3):
+inf. Read with the other flags (x @ W, square shapes fit every combination) the product is finite, so guessing
the flags from the shapes calls a correct kernel a device fault.
"""
import numpy as np
import mindspore as ms
from mindspore import nn, Tensor

SIZE = 8


def main():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    rs = np.random.RandomState(0)
    weight = rs.normal(0, 0.1, (SIZE, SIZE)).astype(np.float32)
    weight[3, 0] = 1e20
    net = nn.Dense(SIZE, SIZE, weight_init=Tensor(weight), has_bias=False)
    train_step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
    x = rs.normal(0, 1, (SIZE, SIZE)).astype(np.float32)
    x[0, 0] = 1e20
    y = np.zeros((SIZE, SIZE), np.float32)
    print(f"step 0: loss {float(train_step(Tensor(x), Tensor(y)).asnumpy())}", flush=True)


if __name__ == "__main__":
    main()
