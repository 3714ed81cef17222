"""Small real training runs for `msoverflow watch` (MindSpore CPU, graph mode). One script, one case each:

  fp16_growth    y = x @ W with W float16; the learning rate warms up past SGD's stability bound, so W and its
                 updates grow by a constant factor a step until float16 overflows (dynamics, in a low precision);
  data_spike     a float32 MLP regression; the batch of step --bad-step is corrupted (targets x 10): a finite loss spike;
  lr_divergence  the same MLP in float32; the learning rate grows each step from --onset until training diverges
                 (finite: float32 does not overflow within the run);
  healthy        the same MLP, a constant small learning rate;
  noisy          the same MLP on targets that are pure noise, 8 a batch: nothing to learn, so the loss (a mean of 8
                 squares) only wanders, by about half of itself from batch to batch; a healthy run all the same;
  attention      one float16 self-attention layer (PyNative: the watch sees its softmax input, the QK logits); from
                 --onset its q/k scale (a temperature schedule gone wrong) grows 1.5x a step, so the logits grow
                 until float16 overflows in them while the weights stay in their range;
  optimizer      a float32 regression with a side input of 4 features (its own weight, `side`), trained by Adam
                 with beta2 = 0.5 < beta1^2: the side features are off (0) in the batches from --onset for --gap
                 steps (the data sorted by source), so the side weight's gradient is 0; its second moment v
                 halves each step while its first moment m keeps 0.9 of itself, so the step m / sqrt(v) grows 1.27x
                 a step with no gradient and the weight drifts away; when the features come back, the loss spikes.
The learning rate lives in the optimizer's `learning_rate` Parameter, set before each step (no recompilation).
"""
import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", required=True, choices=["fp16_growth", "data_spike", "lr_divergence", "healthy",
                                                            "noisy", "attention", "optimizer"])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--bad-step", type=int, default=30)
    parser.add_argument("--onset", type=int, default=15)
    parser.add_argument("--gap", type=int, default=40)
    parser.add_argument("--hidden", type=int, default=32)
    args = parser.parse_args(argv)

    import numpy as np
    import mindspore as ms
    from mindspore import nn, ops, Parameter, Tensor

    ms.set_context(mode=ms.PYNATIVE_MODE if args.case == "attention" else ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)
    rs = np.random.RandomState(0)

    if args.case == "fp16_growth":
        class Linear16(nn.Cell):
            def __init__(self):
                super().__init__()
                self.weight = Parameter(Tensor(rs.normal(0, 0.1, (8, 8)).astype(np.float16)), name="weight")
                self.matmul = ops.MatMul()

            def construct(self, x):
                return self.matmul(x, self.weight)

        class Loss(nn.Cell):
            def __init__(self, net):
                super().__init__()
                self.net = net

            def construct(self, x, t):
                y = ops.cast(self.net(x), ms.float32)
                return ops.reduce_sum(ops.square(y - t))

        net = Linear16()
        loss_net = Loss(net)
        optimizer = nn.SGD(net.trainable_params(), learning_rate=0.05)
        x = Tensor(np.eye(8, dtype=np.float16))

        def lr_at(step):     # warm-up to 1.25: past 1.0 every error mode is multiplied by |1 - 2 lr| a step
            return min(1.25, 0.05 * (step + 1))

        def batch(step):
            return x, Tensor(rs.normal(0, 0.1, (8, 8)).astype(np.float32))
    elif args.case == "attention":
        dim, tokens = 8, 6

        def weight(name):
            return Parameter(Tensor(rs.normal(0, 0.5, (dim, dim)).astype(np.float16)), name=name)

        class SelfAttention(nn.Cell):
            def __init__(self):
                super().__init__()
                self.wq, self.wk, self.wv = weight("wq"), weight("wk"), weight("wv")
                self.scale = 1.0 / np.sqrt(dim)

            def construct(self, x):
                q, k, v = ops.matmul(x, self.wq), ops.matmul(x, self.wk), ops.matmul(x, self.wv)
                logits = ops.matmul(q, k.transpose(0, 2, 1)) * self.scale
                return ops.matmul(ops.softmax(logits, -1), v)

        class Loss(nn.Cell):
            def __init__(self, net):
                super().__init__()
                self.net = net

            def construct(self, x, t):
                return ops.reduce_mean(ops.square(ops.cast(self.net(x), ms.float32) - t))

        net = SelfAttention()
        loss_net = Loss(net)
        optimizer = nn.SGD(net.trainable_params(), learning_rate=0.01)
        x = Tensor(rs.normal(0, 1, (2, tokens, dim)).astype(np.float16))
        target = Tensor(rs.normal(0, 1, (2, tokens, dim)).astype(np.float32))

        def lr_at(step):
            net.scale = float(1.0 / np.sqrt(dim) * 1.5 ** max(0, step - args.onset + 1))
            return 0.01

        def batch(step):
            return x, target
    elif args.case == "optimizer":
        dim, side = 16, 4
        true_w = rs.normal(0, 1, (dim, 1)).astype(np.float32)

        class WithSideInput(nn.Cell):
            def __init__(self):
                super().__init__()
                self.main = nn.SequentialCell(nn.Dense(dim - side, args.hidden), nn.ReLU(), nn.Dense(args.hidden, 1))
                self.side = nn.Dense(side, 1, has_bias=False)

            def construct(self, x):
                return self.main(x[:, :dim - side]) + self.side(x[:, dim - side:])

        net = WithSideInput()
        loss_net = nn.WithLossCell(net, nn.MSELoss())
        # v forgets faster than m (beta2 < beta1^2): with no gradient, m / sqrt(v) grows by 0.9 / sqrt(0.5) a step
        optimizer = nn.Adam(net.trainable_params(), learning_rate=0.01, beta1=0.9, beta2=0.5)

        def lr_at(step):
            return 0.01

        def batch(step):
            xb = rs.normal(0, 1, (32, dim)).astype(np.float32)
            if args.onset <= step < args.onset + args.gap:
                xb[:, dim - side:] = 0.0          # the side features are off in these batches
            yb = xb @ true_w + rs.normal(0, 0.1, (32, 1)).astype(np.float32)
            return Tensor(xb), Tensor(yb)
    else:
        dim = 16
        true_w = rs.normal(0, 1, (dim, 1)).astype(np.float32)
        net = nn.SequentialCell(nn.Dense(dim, args.hidden), nn.ReLU(), nn.Dense(args.hidden, 1))
        loss_net = nn.WithLossCell(net, nn.MSELoss())
        optimizer = nn.SGD(net.trainable_params(), learning_rate=0.01)

        def lr_at(step):
            if args.case == "lr_divergence" and step >= args.onset:
                return 0.01 * 1.2 ** (step - args.onset + 1)
            return 0.01

        def batch(step):
            if args.case == "noisy":
                return Tensor(rs.normal(0, 1, (8, dim)).astype(np.float32)), \
                    Tensor(rs.normal(0, 1, (8, 1)).astype(np.float32))
            xb = rs.normal(0, 1, (32, dim)).astype(np.float32)
            yb = xb @ true_w + rs.normal(0, 0.1, (32, 1)).astype(np.float32)
            if args.case == "data_spike" and step == args.bad_step:
                yb = yb * 10.0            # one corrupted batch: its targets in the wrong unit
            return Tensor(xb), Tensor(yb)

    train_step = nn.TrainOneStepCell(loss_net, optimizer)
    for step in range(args.steps):
        optimizer.learning_rate.set_data(Tensor(np.float32(lr_at(step))))
        loss = float(train_step(*batch(step)).asnumpy())
        print(f"step {step}: loss {loss:.6g} lr {lr_at(step):.4g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
