"""PyNative training without @jit: the forward and backward run op by op (ms.value_and_grad called eagerly), and
only nn.SGD's update is a compiled graph. One step of a Dense(4, 1): the dump holds the optimizer's graph alone,
three ops (an SGD per parameter and the step counter's AssignAdd). Clean."""
import numpy as np
import mindspore as ms
from mindspore import nn, Tensor


def main():
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)
    net = nn.Dense(4, 1)
    loss_fn = nn.MSELoss()
    optimizer = nn.SGD(net.trainable_params(), learning_rate=1e-2)

    def forward(x, y):
        return loss_fn(net(x), y)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((8, 4)).astype(np.float32))
    y = Tensor(rng.standard_normal((8, 1)).astype(np.float32))
    loss, grads = grad_fn(x, y)
    optimizer(grads)
    print(f"step 0: loss {float(loss.asnumpy()):.4f}", flush=True)


if __name__ == "__main__":
    main()
