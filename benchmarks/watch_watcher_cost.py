"""The watcher process's cost to the training, measured inside one watched run so that both sides share the
machine's state (docs/performance.md): blocks of steps of the 1.05M-parameter MLP (benchmarks/watch_train.py --model
mlp) alternate, in the order ABBA, between the watcher running and the watcher stopped (SIGSTOP to this process's
parent, `msoverflow watch`; the capture writes its files throughout, read when the watcher runs again), and the
ratio of each adjacent pair of block means is taken. (The capture's own cost, the same way without a watcher:
benchmarks/watch_inprocess.py --block N.) Run it under the watch:

    msoverflow watch --on-event continue --keep 20 -- python benchmarks/watch_watcher_cost.py

Prints the median of the per-pair ratios (running/stopped) with its quartiles, and the mean and median step of
each side.
"""
import argparse
import os
import signal
import statistics
import sys
import time


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=8000)
    parser.add_argument("--block", type=int, default=25)
    args = parser.parse_args(argv)
    import mindspore as ms
    import numpy as np
    from mindspore import Tensor, nn
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    rs = np.random.RandomState(0)
    net = nn.SequentialCell(nn.Dense(512, 1024), nn.ReLU(), nn.Dense(1024, 512), nn.ReLU(), nn.Dense(512, 1))
    loss_net = nn.WithLossCell(net, nn.MSELoss())
    data = [(Tensor(rs.normal(0, 1, (64, 512)).astype(np.float32)),
             Tensor(rs.normal(0, 1, (64, 1)).astype(np.float32))) for _ in range(200)]
    train_step = nn.TrainOneStepCell(loss_net, nn.SGD(net.trainable_params(), learning_rate=0.001))
    if getattr(nn.Cell.__call__, "__wrapped__", None) is None:
        print("not under `msoverflow watch`: the capture's hook is not installed", file=sys.stderr)
        return 2
    watcher = os.getppid()
    times, on = np.zeros(args.steps), np.zeros(args.steps, dtype=bool)
    try:
        for i in range(args.steps):
            block = i // args.block
            condition = (block % 2 == 0) == ((block // 2) % 2 == 0)      # ABBA: the order's drift cancels
            if i % args.block == 0:
                os.kill(watcher, signal.SIGCONT if condition else signal.SIGSTOP)
            batch = data[i % len(data)]
            start = time.perf_counter()
            train_step(*batch).asnumpy()
            times[i], on[i] = time.perf_counter() - start, condition
    finally:
        os.kill(watcher, signal.SIGCONT)
    ratios = []
    for block in range(2, args.steps // args.block - 1, 2):      # the first two blocks: compilation, warm-up
        a = times[block * args.block:(block + 1) * args.block].mean()
        b = times[(block + 1) * args.block:(block + 2) * args.block].mean()
        ratios.append(a / b if on[block * args.block] else b / a)
    ratios.sort()
    kept = slice(2 * args.block, None)
    t, o = times[kept], on[kept]
    print(f"pairs {len(ratios)} running/stopped median {statistics.median(ratios):.4f} "
          f"q25 {ratios[len(ratios) // 4]:.4f} q75 {ratios[3 * len(ratios) // 4]:.4f} "
          f"mean_running {t[o].mean() * 1e3:.3f} mean_stopped {t[~o].mean() * 1e3:.3f} "
          f"median_running {np.median(t[o]) * 1e3:.3f} median_stopped {np.median(t[~o]) * 1e3:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
