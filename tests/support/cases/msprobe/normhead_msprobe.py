"""The demo TinyBaichuan (fp16 NormHead lm head) trained in PyNative on CPU under msprobe's PrecisionDebugger.

    python normhead_msprobe.py [--config CONFIG.json] [--steps N] [--loss-scale 1,1,64]

Without --config it reads $MSOVERFLOW_MSPROBE_CONFIG (what `msoverflow run --mode pynative` sets).

msprobe's statistics call mindspore.mint.norm, which has no CPU kernel in MindSpore 2.10 ("LinalgVectorNorm
unregistered"): it is replaced by sqrt(sum(x*x)) in float32 before the debugger is created.
"""
import argparse
import json
import os
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", default=os.environ.get("MSOVERFLOW_MSPROBE_CONFIG"),
                        help="msprobe config.json (default: $MSOVERFLOW_MSPROBE_CONFIG)")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--loss-scale", default="64", help="one value, or comma-separated per step")
    parser.add_argument("--level-model", default="net", choices=["net", "loss"],
                        help="Cell handed to debugger.start (L0/mix hook Cells below it)")
    parser.add_argument("--distributed", action="store_true",
                        help="data parallel under msrun (MCCL on CPU): --loss-scale applies to the last rank only, "
                             "the others keep 1, so one rank creates the overflow and AllReduce spreads it")
    args = parser.parse_args(argv)
    if not args.config:
        parser.error("give --config or set MSOVERFLOW_MSPROBE_CONFIG")

    import numpy as np
    import mindspore as ms
    from mindspore import mint, nn, ops

    def _norm(x, *unused, **unused_kw):
        return ops.sqrt(ops.sum(ops.square(x.astype(ms.float32))))

    mint.norm = _norm   # no LinalgVectorNorm CPU kernel in 2.10

    from msprobe.mindspore import PrecisionDebugger
    from msoverflow.demo.model import TinyBaichuan, CausalLMLoss, batches

    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    rank, ranks = 0, 1
    if args.distributed:
        from mindspore.communication import get_group_size, get_rank, init
        init()
        rank, ranks = get_rank(), get_group_size()
    debugger = PrecisionDebugger(config_path=args.config)
    scales = [float(v) for v in str(args.loss_scale).split(",")]
    if rank != ranks - 1:
        scales = [1.0] * len(scales)
    net = TinyBaichuan()
    loss_net = CausalLMLoss(net, scales[0])
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.01)
    train_step = nn.TrainOneStepCell(loss_net, optimizer)
    if args.distributed:
        # Gradients averaged eagerly with the AllReduce primitive: under msprobe's API wrapping the jit-compiled
        # DistributedGradReducer fails ("Unsupported statement 'Try'") and comm_func.all_reduce crashed on CPU
        # (observed, mindstudio-probe 26.2.0 + MindSpore 2.10).
        grad_fn = ms.value_and_grad(loss_net, None, optimizer.parameters)
        allreduce = ops.AllReduce()

        def train_step(ids, labels):
            loss, grads = grad_fn(ids, labels)
            optimizer(tuple(allreduce(g) / ranks for g in grads))
            return loss
    history = []
    for step, (ids, labels) in enumerate(batches(args.steps)):
        loss_net.set_loss_scale(scales[min(step, len(scales) - 1)])
        debugger.start(net if args.level_model == "net" else loss_net)
        loss = float(train_step(ids, labels).asnumpy())
        debugger.stop()
        debugger.step()
        finite = all(bool(np.isfinite(p.asnumpy().astype(np.float32)).all()) for p in net.trainable_params())
        history.append({"step": step, "loss": loss, "params_finite": finite})
        print(f"step {step}: loss {loss:.4f} params finite: {finite}", flush=True)
    print(json.dumps(history))
    return 0


if __name__ == "__main__":
    sys.exit(main())
