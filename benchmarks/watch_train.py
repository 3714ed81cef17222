"""The training loops whose watch cost docs/performance.md measures, plain or under `msoverflow watch` (graph mode,
CPU; paired whole-process runs, the per-step figures from what this script prints).

  --model demo   the demo TinyBaichuan (msoverflow/demo/model.py) with its NormHead in float32 (no overflow), SGD;
  --model mlp    an MLP 512 -> 1024 -> 512 -> 1 (1.05M parameters), batch 64, SGD.
Prints, at the end, `step_ms_median X` and `step_ms_mean Y` over the steps after the first (compilation): the
median is the typical step, the mean carries the occasional full capture and file write of the watch, and its
first full steps; `steady_ms_mean Z`: the mean over the steps after the watch's warm-up (capture.WARMUP_STEPS full
steps at the start, a cost paid once a run), the same steps on both sides.
"""
import argparse
import statistics
import sys
import time

WARMUP_STEPS = 10       # msoverflow.watcher.capture.WARMUP_STEPS (not imported: the plain side runs without it)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["demo", "mlp"], default="demo")
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args(argv)
    import mindspore as ms
    import numpy as np
    from mindspore import Tensor, nn
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    rs = np.random.RandomState(0)
    if args.model == "demo":
        from msoverflow.demo.model import CausalLMLoss, TinyBaichuan, batches
        net = TinyBaichuan(head_dtype=ms.float32)
        loss_net = CausalLMLoss(net, 1.0)
        data = list(batches(args.steps))
    else:
        net = nn.SequentialCell(nn.Dense(512, 1024), nn.ReLU(), nn.Dense(1024, 512), nn.ReLU(), nn.Dense(512, 1))
        loss_net = nn.WithLossCell(net, nn.MSELoss())
        data = [(Tensor(rs.normal(0, 1, (64, 512)).astype(np.float32)),
                 Tensor(rs.normal(0, 1, (64, 1)).astype(np.float32))) for _ in range(args.steps)]
    params = sum(int(np.prod(p.shape)) for p in net.trainable_params())
    train_step = nn.TrainOneStepCell(loss_net, nn.SGD(net.trainable_params(), learning_rate=0.001))
    times = []
    for batch in data:
        start = time.perf_counter()
        train_step(*batch).asnumpy()
        times.append(time.perf_counter() - start)
    steady = times[1 + WARMUP_STEPS:]
    print(f"parameters {params} steps {len(times)} step_ms_median {statistics.median(times[1:]) * 1e3:.3f} "
          f"step_ms_mean {statistics.fmean(times[1:]) * 1e3:.3f} steady_ms_mean {statistics.fmean(steady) * 1e3:.3f}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
