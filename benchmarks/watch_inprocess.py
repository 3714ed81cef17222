"""The watch capture's cost per step inside one training process, paired: steps go through the capture's wrapper
(A) and around it (B, the same Cell called unwrapped) in turn, so the machine's load falls on both sides alike.

  --block 1 (default): single steps in turn; the median of the per-pair differences (us) and ratios: the typical
      step's cost. (The capture's own step timing then spans an A and a B step, so it samples full steps about
      twice as often as in a real run: the mean here overstates.)
  --block N: N steps of A, then N of B, in turn; the median over the block pairs of the ratio of their mean steps:
      the cost of the mean step, full steps at their real rate included (the capture times its own steps inside a
      block; the one step after a B block is an outlier its median ignores).
Also prints the sampling's figures (watch_tensors.json). Their capture_share reads about half the real one here:
the capture counts the time between two of its steps, the B steps between them included, as the training's own.

    python benchmarks/watch_inprocess.py --model demo --pairs 2000
    python benchmarks/watch_inprocess.py --model demo --pairs 60 --block 50

No watcher process: its cost shows in the whole-process A/B (docs/performance.md), not here.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["demo", "mlp"], default="demo")
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--block", type=int, default=1)
    args = parser.parse_args(argv)
    import mindspore as ms
    import numpy as np
    from mindspore import Tensor, nn
    from mindspore.nn import cell as cell_module

    from msoverflow.watcher import capture
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    out = tempfile.mkdtemp(prefix="msoverflow_watch_inprocess_")
    capture.make_control_seq(out)          # as the watcher makes it: the step path maps it
    capture._wrap_cells(cell_module, {"out_dir": out, "keep": None})
    rs = np.random.RandomState(0)
    steps = 2 * args.pairs * args.block + 1
    if args.model == "demo":
        from msoverflow.demo.model import CausalLMLoss, TinyBaichuan, batches
        net = TinyBaichuan(head_dtype=ms.float32)
        loss_net = CausalLMLoss(net, 1.0)
        data = list(batches(steps))
    else:
        net = nn.SequentialCell(nn.Dense(512, 1024), nn.ReLU(), nn.Dense(1024, 512), nn.ReLU(), nn.Dense(512, 1))
        loss_net = nn.WithLossCell(net, nn.MSELoss())
        data = [(Tensor(rs.normal(0, 1, (64, 512)).astype(np.float32)),
                 Tensor(rs.normal(0, 1, (64, 1)).astype(np.float32))) for _ in range(steps)]
    train_step = nn.TrainOneStepCell(loss_net, nn.SGD(net.trainable_params(), learning_rate=0.001))
    unwrapped = type(train_step).__call__.__wrapped__
    train_step(*data[0]).asnumpy()          # compiles, and makes the Watch

    def timed(call, batch):
        start = time.perf_counter()
        call(*batch).asnumpy()
        return time.perf_counter() - start

    diffs, ratios = [], []
    plain = lambda *x: unwrapped(train_step, *x)       # noqa: E731
    for k in range(args.pairs):
        first = 1 + 2 * k * args.block
        a_batches, b_batches = data[first:first + args.block], data[first + args.block:first + 2 * args.block]
        order = [(plain, b_batches, "b"), (train_step, a_batches, "a")] if k % 2 else \
            [(train_step, a_batches, "a"), (plain, b_batches, "b")]
        means = {}
        for call, batches, side in order:
            means[side] = statistics.fmean(timed(call, batch) for batch in batches)
        diffs.append(means["a"] - means["b"])
        ratios.append(means["a"] / means["b"])
    watch = capture._watch
    watch.flush()
    try:
        with open(os.path.join(out, f"rank_{watch.rank}", capture.META), encoding="utf-8") as fh:
            sampling = json.load(fh)["sampling"]
    except OSError:
        sampling = None
    print(f"model {args.model} pairs {args.pairs} block {args.block} added_us_median {statistics.median(diffs) * 1e6:.1f} "
          f"ratio_median {statistics.median(ratios):.4f} added_us_mean {statistics.fmean(diffs) * 1e6:.1f} "
          f"sampling {json.dumps(sampling)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
