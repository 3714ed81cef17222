"""A physics-informed loss: the loss holds an inner gradient (ops.GradOperation of the field u(x) with respect to
its input, as a PINN's residual does), trained with a dynamic loss scale from 2^10 (TrainOneStepWithLossScaleCell
with a DynamicLossScaleUpdateCell, overflow checked with the cell's IsFinite path on CPU), SGD, three steps.

The field is u(x) = sum(h^2) with h = x W^T computed in float16 (h squared in float32). Step 1's batch holds a
row of 4000s: h stays within float16's range (~2.5e4), but the inner gradient du/dx = 2h W sums past 65504 in its
float16 MatMul. That MatMul runs under a `Gradients/` scope, yet it is part of the FORWARD: the loss is inf at
step 1. The loss scale skips that step and step 2 trains: a forward fault, never the loss scale calibrating.
"""
import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor
from mindspore import dtype as mstype

from loss_scaled import TrainOneStepWithCpuOverflowCheck     # the sibling script (its directory is on sys.path)

BATCH, FEATURES, HIDDEN = 4, 8, 8


class Field(nn.Cell):
    """u(x) = sum over the hidden units of h^2, h = x W^T in float16."""

    def __init__(self):
        super().__init__()
        rs = np.random.RandomState(0)
        weight = np.abs(rs.normal(0.8, 0.1, (HIDDEN, FEATURES))).astype(np.float32)
        self.dense = nn.Dense(FEATURES, HIDDEN, weight_init=Tensor(weight), has_bias=False).to_float(mstype.float16)

    def construct(self, x):
        h = ops.cast(self.dense(x), mstype.float32)
        return ops.sum(h * h, -1)


class PhysicsInformedLoss(nn.Cell):
    """mse(u, y) plus the residual mean((du/dx)^2): du/dx by an inner GradOperation, part of the loss."""

    def __init__(self, field):
        super().__init__(auto_prefix=False)
        self.field = field
        self.inner_grad = ops.GradOperation()

    def construct(self, x, y):
        u = self.field(x)
        du_dx = self.inner_grad(self.field)(x)
        return ops.mean((1e-6 * u - y) ** 2) + 1e-9 * ops.mean(du_dx * du_dx)


def main():
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)
    field = Field()
    manager = nn.DynamicLossScaleUpdateCell(loss_scale_value=2.0 ** 10, scale_factor=2, scale_window=1000)
    train_step = TrainOneStepWithCpuOverflowCheck(PhysicsInformedLoss(field),
                                                  nn.SGD(field.trainable_params(), 1e-3), scale_sense=manager)
    rs = np.random.RandomState(1)
    for step in range(3):
        x = np.abs(rs.normal(1, 0.2, (BATCH, FEATURES))).astype(np.float32)
        y = 0.1 * rs.normal(0, 1, (BATCH,)).astype(np.float32)
        if step == 1:
            x[0, :] = 4000.0     # h ~ 2.5e4 fits float16; the inner gradient's 2h W sum does not
        loss, overflow, scale = train_step(Tensor(x), Tensor(y))
        print(f"step {step}: loss {float(loss.asnumpy()):.4g} overflow {bool(overflow.asnumpy())} "
              f"scale {float(scale.asnumpy()):.0f}", flush=True)


if __name__ == "__main__":
    main()
