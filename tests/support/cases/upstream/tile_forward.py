"""A Tile of a 2x2 float32 tensor by multiples (2, 2), forward only in graph mode: every value finite.

The tests edit copies of this real dump (labelled): the Tile's output given an inf (an op with no numpy reference
kernel, recomputed by MindSpore in a subprocess), and its multiples in the saved graph made (4000, 4000).
"""
import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor


class Tiled(nn.Cell):
    def construct(self, x):
        return ops.reduce_sum(ops.tile(x, (2, 2)) * 2.0)


def main():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    x = Tensor(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32))
    print(f"sum: {float(Tiled()(x).asnumpy())}", flush=True)


if __name__ == "__main__":
    main()
