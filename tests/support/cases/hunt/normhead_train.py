"""The demo TinyBaichuan (fp16 NormHead lm head) trained on CPU for the hunt and two-pass fixtures.

    python normhead_train.py [--mode graph|pynative] [--steps N] [--overflow-at K] [--batch B] [--seq S]

The loss scale is 1 until step K, where it jumps to 16384 and Sqrt's backward in NormHead leaves fp16's range
(steps before K stay finite). Without --overflow-at the run stays clean. Larger --batch/--seq make activations
(not weights) the bulk of a full dump, as in real models. Plain MindSpore: no msoverflow code runs in it unless
`msoverflow hunt` or a dump config puts it there.
"""
import argparse
import os
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mode", default="pynative", choices=["graph", "pynative"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--overflow-at", type=int, default=None)
    parser.add_argument("--scale", type=float, default=16384.0)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--first-run-only", metavar="MARKER",
                        help="overflow only when MARKER does not exist yet (and create it): a run that is not "
                             "deterministic, for `run --two-pass`'s reproduction check")
    parser.add_argument("--distributed", action="store_true",
                        help="data parallel under msrun: only the last rank's loss scale jumps at --overflow-at")
    args = parser.parse_args(argv)

    if args.first_run_only:
        if os.path.exists(args.first_run_only):
            args.overflow_at = None
        else:
            open(args.first_run_only, "w").close()

    import numpy as np
    import mindspore as ms
    from mindspore import nn
    from msoverflow.demo.model import CausalLMLoss, TinyBaichuan, batches

    ms.set_context(mode=ms.GRAPH_MODE if args.mode == "graph" else ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    rank, ranks = 0, 1
    if args.distributed:
        from mindspore.communication import get_group_size, get_rank, init
        init()
        rank, ranks = get_rank(), get_group_size()
    net = TinyBaichuan(hidden=args.hidden, layers=args.layers)
    loss_net = CausalLMLoss(net, 1.0)
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.01)
    if args.distributed:
        from mindspore.context import ParallelMode
        ms.set_auto_parallel_context(parallel_mode=ParallelMode.DATA_PARALLEL, gradients_mean=True)
    train_step = nn.TrainOneStepCell(loss_net, optimizer)
    import time
    started = time.perf_counter()
    for step, (ids, labels) in enumerate(batches(args.steps, batch=args.batch, seq=args.seq)):
        jump = args.overflow_at is not None and step >= args.overflow_at and rank == ranks - 1
        loss_net.set_loss_scale(args.scale if jump else 1.0)
        loss = float(train_step(ids, labels).asnumpy())
        finite = all(bool(np.isfinite(p.asnumpy().astype(np.float32)).all()) for p in net.trainable_params())
        print(f"rank {rank} step {step}: loss {loss:.4f} params finite: {finite}", flush=True)
    print(f"rank {rank}: trained {args.steps} steps in {time.perf_counter() - started:.3f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
