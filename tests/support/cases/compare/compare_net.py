"""A small fp32 net for `msoverflow compare` fixtures: Dense -> LayerNorm -> one attention Cell (Softmax) -> Dense,
MSE loss, SGD. Weights and data come from fixed seeds, so two runs differ only in what the options change.

    python compare_net.py [--steps N] [--softmax-dtype float16] [--ln-eps 1e-2] [--distributed [--change-rank R]]
                          [--msprobe CONFIG.json]

--softmax-dtype: the attention's Softmax computed in this dtype (cast in, cast back to float32 after), as an amp
                 list or a hand-made "speed-up" would.
--ln-eps       : the LayerNorm's epsilon (default 1e-5).
--distributed  : data parallel under msrun (MCCL on CPU); the changes apply on --change-rank only.
--msprobe      : PyNative under mindstudio-probe's PrecisionDebugger with this config (graph mode otherwise).
"""
import argparse

import numpy as np

HIDDEN, SEQ, BATCH = 16, 8, 2


def build(ms, nn, ops, softmax_dtype, ln_eps):
    from mindspore import Tensor

    def weight(shape, seed):
        return Tensor(np.random.RandomState(seed).normal(0.0, 0.3, shape).astype(np.float32))

    class Attention(nn.Cell):
        def __init__(self):
            super().__init__()
            self.query = nn.Dense(HIDDEN, HIDDEN, weight_init=weight((HIDDEN, HIDDEN), 2), has_bias=False)
            self.key = nn.Dense(HIDDEN, HIDDEN, weight_init=weight((HIDDEN, HIDDEN), 3), has_bias=False)
            self.softmax = ops.Softmax(-1)
            self.batch_matmul = ops.BatchMatMul(transpose_b=True)
            self.apply = ops.BatchMatMul()
            self.compute_dtype = softmax_dtype

        def construct(self, x):
            scores = self.batch_matmul(self.query(x), self.key(x)) * 0.25
            probs = self.softmax(scores.astype(self.compute_dtype)).astype(ms.float32)
            return self.apply(probs, x)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.embed = nn.Dense(HIDDEN, HIDDEN, weight_init=weight((HIDDEN, HIDDEN), 1), has_bias=False)
            self.norm = nn.LayerNorm((HIDDEN,), epsilon=ln_eps)
            self.attention = Attention()
            self.out = nn.Dense(HIDDEN, 1, weight_init=weight((1, HIDDEN), 4), has_bias=False)

        def construct(self, x):
            return self.out(self.attention(self.norm(self.embed(x))))

    return Net()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--softmax-dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--ln-eps", type=float, default=1e-5)
    parser.add_argument("--distributed", action="store_true")
    parser.add_argument("--change-rank", type=int, default=1)
    parser.add_argument("--msprobe", help="msprobe config.json: PyNative under PrecisionDebugger")
    args = parser.parse_args(argv)

    import mindspore as ms
    from mindspore import Tensor, nn, ops

    ms.set_context(mode=ms.PYNATIVE_MODE if args.msprobe else ms.GRAPH_MODE)
    ms.set_device("CPU")
    rank = 0
    if args.distributed:
        from mindspore.communication import get_rank, init
        init()
        rank = get_rank()
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    ms.set_seed(0)
    changed = not args.distributed or rank == args.change_rank
    net = build(ms, nn, ops, getattr(ms, args.softmax_dtype) if changed else ms.float32,
                args.ln_eps if changed else 1e-5)
    debugger = None
    if args.msprobe:
        from mindspore import mint

        def _norm(x, *unused, **unused_kw):   # no LinalgVectorNorm CPU kernel in MindSpore 2.10
            return ops.sqrt(ops.sum(ops.square(x.astype(ms.float32))))

        mint.norm = _norm
        from msprobe.mindspore import PrecisionDebugger
        debugger = PrecisionDebugger(config_path=args.msprobe)
    train_step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
    data = np.random.RandomState(5 + rank)
    for step in range(args.steps):
        x = Tensor(data.normal(0, 1, (BATCH, SEQ, HIDDEN)).astype(np.float32))
        y = Tensor(data.normal(0, 1, (BATCH, SEQ, 1)).astype(np.float32))
        if debugger:
            debugger.start(net)
        loss = float(train_step(x, y).asnumpy())
        if debugger:
            debugger.stop()
            debugger.step()
        print(f"rank {rank} step {step}: loss {loss:.6f}", flush=True)


if __name__ == "__main__":
    main()
