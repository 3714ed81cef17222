"""A 2-rank data-parallel MLP regression (msrun, MindSpore CPU, graph mode) for `msoverflow watch` across ranks:
rank 1's batch at step --bad-step has its targets in the wrong unit (x10), or with --bad-value nan a NaN target;
the all-reduced gradients carry it to both ranks' weights in that step, while the loss shows it on rank 1 alone."""
import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--bad-step", type=int, default=20)
    parser.add_argument("--bad-value", choices=("x10", "nan"), default="x10")
    args = parser.parse_args(argv)
    import numpy as np
    import mindspore as ms
    from mindspore import nn, Tensor
    from mindspore.communication import get_rank, init

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    rank = get_rank()
    ms.set_seed(0)
    rs = np.random.RandomState(100 + rank)
    true_w = np.random.RandomState(0).normal(0, 1, (16, 1)).astype(np.float32)
    net = nn.SequentialCell(nn.Dense(16, 32), nn.ReLU(), nn.Dense(32, 1))
    train_step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()),
                                     nn.SGD(net.trainable_params(), learning_rate=0.01))
    for step in range(args.steps):
        xb = rs.normal(0, 1, (32, 16)).astype(np.float32)
        yb = xb @ true_w + rs.normal(0, 0.1, (32, 1)).astype(np.float32)
        if rank == 1 and step == args.bad_step:
            yb = yb * 10.0 if args.bad_value == "x10" else np.full_like(yb, np.nan)
        loss = float(train_step(Tensor(xb), Tensor(yb)).asnumpy())
        print(f"rank {rank} step {step}: loss {loss:.6g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
