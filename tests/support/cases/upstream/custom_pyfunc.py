"""A Custom op (func_type pyfunc) that divides by a zero denominator, forward only in graph mode.

The saved graph names the Python function the Custom op runs: recomputing the op would run code the dump names.
"""
import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor


def divide(x, y):
    return x / y


class CustomDivide(nn.Cell):
    def __init__(self):
        super().__init__()
        self.divide = ops.Custom(divide, out_shape=lambda x, _y: x, out_dtype=lambda x, _y: x, func_type="pyfunc")

    def construct(self, x, y):
        return ops.reduce_sum(self.divide(x, y) * 2.0)


def main():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    x = Tensor(np.array([1.0, 2.0, 3.0], np.float32))
    y = Tensor(np.array([1.0, 0.0, 3.0], np.float32))
    with np.errstate(all="ignore"):
        print(f"sum: {float(CustomDivide()(x, y).asnumpy())}", flush=True)


if __name__ == "__main__":
    main()
