"""Tiny fp16/fp32 regressors trained with a dynamic loss scale (TrainOneStepWithLossScaleCell + a
DynamicLossScaleUpdateCell starting at 2^10), each holding one fault no loss scale handles (issue 32):

--case look_backward   the first layer's Cell class is named LookBackward; step 0's batch makes its fp16 MatMul
                       sum past 65504 in the FORWARD (loss inf). Backward must be decided from the graph, not names.
--case sqrt_zero_row   the model takes sqrt of a row's sum of squares; step 0's batch holds an all-zero row, so
                       SqrtGrad divides by 0 in the backward (fp32: no dtype and no loss scale removes it).
--case log_clamp       maximum(log(x), -10) on a batch holding 0 and -1: log(0) = -inf is what the clamp is for,
                       log(-1) = NaN is a domain fault (MindSpore CPU's Maximum drops that NaN).
--case device_skip     a clean fp16 run whose overflow check is also told, at step 0 only, that the gradients are
                       not finite (as a device fault's NaN would make it): the cell skips step 0's update and halves
                       the scale, step 1 trains. The run itself has no bad value: the device fault's NaN is planted in
                       a copy of this dump (tests/real/test_judge_mechanisms_real.py), so the dump's loss-scale
                       evidence is the real cell's answer to that NaN.
"""
import argparse

import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor
from mindspore import dtype as mstype
from mindspore.nn.wrap.loss_scale import _ascend_grad_overflow

BATCH, FEATURES, HIDDEN = 4, 8, 8


def _weight(rs, rows, cols, scale=0.3):
    return Tensor(rs.normal(0, scale, (rows, cols)).astype(np.float32))


class LookBackward(nn.Cell):
    """A forward layer whose class name says Backward."""

    def __init__(self, rs):
        super().__init__()
        self.dense = nn.Dense(FEATURES, HIDDEN, weight_init=Tensor(np.abs(rs.normal(0, 1, (HIDDEN, FEATURES)))
                                                                   .astype(np.float32)))

    def construct(self, x):
        return self.dense(x)


class Net(nn.Cell):
    def __init__(self, case):
        super().__init__()
        rs = np.random.RandomState(0)
        self.case = case
        self.first = LookBackward(rs)
        self.head = nn.Dense(HIDDEN, 1, weight_init=_weight(rs, 1, HIDDEN))
        if case == "sqrt_zero_row":        # no bias: a zero row of the batch stays a zero row
            self.first.dense = nn.Dense(FEATURES, HIDDEN, weight_init=_weight(rs, HIDDEN, FEATURES), has_bias=False)

    def construct(self, x):
        h = self.first(x)
        if self.case == "sqrt_zero_row":
            h = h + ops.sqrt(ops.sum(h * h, -1, keepdim=True))
        elif self.case == "log_clamp":
            h = ops.maximum(ops.log(x[:, :HIDDEN]), -10.0) + h
        return self.head(h)


class Fp32Loss(nn.Cell):
    def __init__(self, backbone):
        super().__init__(auto_prefix=False)
        self._backbone = backbone
        self.loss_fn = nn.MSELoss()

    def construct(self, x, y):
        return self.loss_fn(ops.cast(self._backbone(x), mstype.float32), y)


class TrainOneStepWithCpuOverflowCheck(nn.TrainOneStepWithLossScaleCell):
    """The cell's overflow check without NPU status registers: IsFinite on every gradient (its INFNAN-mode path)."""

    def get_overflow_status(self, status, compute_output):
        return self._get_distributed_overflow_status_on_infnan_mode(_ascend_grad_overflow, compute_output)


class TrainOneStepSeeingDeviceFault(TrainOneStepWithCpuOverflowCheck):
    """The overflow check also answers True while `device_fault` is set: what it answers when a device fault puts a
    NaN in a gradient (the NaN itself is planted in a copy of the dump; a CPU makes no device fault)."""

    def __init__(self, network, optimizer, scale_sense):
        super().__init__(network, optimizer, scale_sense)
        self.device_fault = ms.Parameter(Tensor(False, mstype.bool_), name="device_fault", requires_grad=False)

    def get_overflow_status(self, status, compute_output):
        return ops.logical_or(super().get_overflow_status(status, compute_output), self.device_fault)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", required=True, choices=["look_backward", "sqrt_zero_row", "log_clamp", "static_scale", "device_skip"])
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)
    net = Net(args.case)
    if args.case in ("look_backward", "static_scale", "device_skip"):
        net.to_float(mstype.float16)
    if args.case == "static_scale":
        train = nn.TrainOneStepCell(Fp32Loss(net), nn.SGD(net.trainable_params(), 0.01), sens=2.0 ** 16)
        rs = np.random.RandomState(1)
        for step in range(args.steps):
            x = np.abs(rs.normal(1, 0.2, (BATCH, FEATURES))).astype(np.float32)
            y = 0.1 * rs.normal(0, 1, (BATCH, 1)).astype(np.float32)
            print(f"step {step}: loss {float(train(Tensor(x), Tensor(y)).asnumpy()):.4f}", flush=True)
        return
    manager = nn.DynamicLossScaleUpdateCell(loss_scale_value=2.0 ** 10, scale_factor=2, scale_window=1000)
    cell = TrainOneStepSeeingDeviceFault if args.case == "device_skip" else TrainOneStepWithCpuOverflowCheck
    train_step = cell(Fp32Loss(net), nn.SGD(net.trainable_params(), 0.01), scale_sense=manager)
    rs = np.random.RandomState(1)
    for step in range(args.steps):
        x = np.abs(rs.normal(1, 0.2, (BATCH, FEATURES))).astype(np.float32)
        y = 0.1 * rs.normal(0, 1, (BATCH, 1)).astype(np.float32)
        if step == 0 and args.case == "look_backward":
            x[0, :] = 6.0e4          # within fp16's range; the MatMul's sum is not
        if step == 0 and args.case == "sqrt_zero_row":
            x[1, :] = 0.0            # a row of zeros: sqrt(0) in the forward, SqrtGrad divides by it
        if step == 0 and args.case == "log_clamp":
            x[0, 0], x[1, 1] = 0.0, -1.0
        if args.case == "device_skip":
            train_step.device_fault.set_data(Tensor(step == 0, mstype.bool_))
        loss, overflow, scale = train_step(Tensor(x), Tensor(y))
        print(f"step {step}: loss {float(loss.asnumpy()):.4f} overflow {bool(overflow.asnumpy())} "
              f"scale {float(scale.asnumpy()):.0f}", flush=True)


if __name__ == "__main__":
    main()
