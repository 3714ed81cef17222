"""Train the tiny Baichuan2-like model on CPU in graph mode. Run as a script: `python -m msoverflow.demo.train`.

Dumping is controlled by MindSpore's own MINDSPORE_DUMP_CONFIG, so the same script serves the overflowing run,
the patched run and the verification run.
"""
import argparse
import json
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--loss-scale", default="64", help="one value, or comma-separated per step (e.g. 1,4,64)")
    parser.add_argument("--head-dtype", default="float16", choices=["float16", "float32", "bfloat16"])
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--mode", default="graph", choices=["graph", "pynative"])
    parser.add_argument("--report", help="write per-step loss and parameter finiteness as JSON here")
    args = parser.parse_args(argv)

    import numpy as np
    import mindspore as ms
    from mindspore import nn
    from msoverflow.demo.model import TinyBaichuan, CausalLMLoss, batches

    ms.set_context(mode=ms.GRAPH_MODE if args.mode == "graph" else ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    scales = [float(v) for v in str(args.loss_scale).split(",")]
    net = TinyBaichuan(head_dtype=getattr(ms, args.head_dtype))
    loss_net = CausalLMLoss(net, scales[0])
    train_step = nn.TrainOneStepCell(loss_net, nn.SGD(net.trainable_params(), learning_rate=args.lr))
    history = []
    for step, (ids, labels) in enumerate(batches(args.steps)):
        loss_net.set_loss_scale(scales[min(step, len(scales) - 1)])
        loss = float(train_step(ids, labels).asnumpy())
        params_finite = all(bool(np.isfinite(p.asnumpy().astype(np.float32)).all()) for p in net.trainable_params())
        history.append({"step": step, "loss": loss, "params_finite": params_finite})
        print(f"step {step}: loss {loss:.4f} params finite: {params_finite}", flush=True)
    if args.report:
        with open(args.report, "w") as fh:
            json.dump(history, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
