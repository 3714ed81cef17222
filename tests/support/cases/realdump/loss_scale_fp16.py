"""fp16 training with a dynamic loss scale starting at 2^24, as TrainOneStepWithLossScaleCell with a
DynamicLossScaleUpdateCell runs it, checked for overflow on CPU.

TrainOneStepWithLossScaleCell reads the NPU's float status registers, which do not exist on CPU; this subclass
checks the gradients with the cell's own IsFinite path (the one it takes on Ascend in INFNAN mode), everything else
is the cell's code: the scaled sens, the unscaling, `if not overflow: optimizer(grads)` and the scale update.
The first steps' scaled gradients leave fp16's range, their updates are skipped and the scale halves, by design;
later steps train normally.

--forward-overflow-step N: the batch of step N holds one feature so large that the fp16 forward overflows (a real
fault in the forward, which no loss scale absorbs).
--data-parallel (under msrun): init() + ParallelMode.DATA_PARALLEL; the cell AllReduces the gradients and the
overflow status, so every rank skips a step some rank overflowed in.
--input-scale R:K[,R:K]: rank R's batches are K times larger, so its scaled gradients overflow for more steps than
the other ranks' (which then only receive the overflow through the gradient AllReduce).
"""
import argparse

import numpy as np
import mindspore as ms
from mindspore import nn, ops, Tensor
from mindspore import dtype as mstype
from mindspore.nn.wrap.loss_scale import _ascend_grad_overflow

BATCH, FEATURES, HIDDEN = 8, 16, 32


class Regressor(nn.Cell):
    def __init__(self):
        super().__init__()
        rs = np.random.RandomState(0)
        self.fc1 = nn.Dense(FEATURES, HIDDEN, weight_init=Tensor(rs.normal(0, 0.1, (HIDDEN, FEATURES)).astype(np.float32)))
        self.act = nn.ReLU()
        self.fc2 = nn.Dense(HIDDEN, 1, weight_init=Tensor(rs.normal(0, 0.1, (1, HIDDEN)).astype(np.float32)))

    def construct(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Fp32Loss(nn.Cell):
    """The fp16 network's output is cast to fp32 before the loss (mixed precision: the loss stays fp32)."""

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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--forward-overflow-step", type=int, default=None)
    parser.add_argument("--data-parallel", action="store_true")
    parser.add_argument("--input-scale", default="")
    args = parser.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    rank = 0
    if args.data_parallel:
        from mindspore.communication import init, get_rank
        init()
        rank = get_rank()
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    input_scale = {int(r): float(k) for r, k in (item.split(":") for item in filter(None, args.input_scale.split(",")))}
    ms.set_seed(0)
    net = Regressor()
    net.to_float(mstype.float16)
    manager = nn.DynamicLossScaleUpdateCell(loss_scale_value=2.0 ** 24, scale_factor=2, scale_window=1000)
    train_step = TrainOneStepWithCpuOverflowCheck(Fp32Loss(net), nn.SGD(net.trainable_params(), 0.01),
                                                  scale_sense=manager)
    rs = np.random.RandomState(1)
    for step in range(args.steps):
        x = rs.normal(0, 1, (BATCH, FEATURES)).astype(np.float32)
        y = 0.1 * rs.normal(0, 1, (BATCH, 1)).astype(np.float32)
        x = x * np.float32(input_scale.get(rank, 1.0))
        if step == args.forward_overflow_step:
            x[0, :] = 6.5e4      # within fp16's range (65504), but the first fp16 MatMul sums past it
        loss, overflow, scale = train_step(Tensor(x), Tensor(y))
        print(f"{f'rank {rank} ' if args.data_parallel else ''}step {step}: loss {float(loss.asnumpy()):.4f} overflow {bool(overflow.asnumpy())} "
              f"scale {float(scale.asnumpy()):.0f}", flush=True)


if __name__ == "__main__":
    main()
