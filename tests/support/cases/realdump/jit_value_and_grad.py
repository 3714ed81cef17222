"""PyNative training with a @ms.jit forward/backward built from ms.value_and_grad, amp.all_finite on the grads and
an update that is skipped when they are not finite (the usual dynamic loss-scale pattern).

all_finite and the optimizer are jit-compiled graphs of their own, so the dump holds three graphs. The loss scale is
1, 4, 256 over three steps: the fp16 NormHead overflows in SqrtGrad on the last step only.
The scale is passed as an argument: a Parameter changed with set_data between calls is not seen by the jit graph.
"""
import mindspore as ms
from mindspore import nn, amp, Tensor
from msoverflow.demo.model import TinyBaichuan, CausalLMLoss, batches

LOSS_SCALES = (1.0, 4.0, 256.0)


def main():
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)  # initialisers not given explicitly (e.g. nn.Dense bias) are random: keep runs identical
    net = TinyBaichuan()
    loss_net = CausalLMLoss(net, 1.0)
    optimizer = nn.SGD(net.trainable_params(), learning_rate=1e-4)

    def scaled_loss(ids, labels, scale):
        return loss_net(ids, labels) * scale

    grad_fn = ms.value_and_grad(scaled_loss, None, optimizer.parameters)

    @ms.jit
    def forward_backward(ids, labels, scale):
        return grad_fn(ids, labels, scale)

    for step, ((ids, labels), scale) in enumerate(zip(batches(len(LOSS_SCALES)), LOSS_SCALES)):
        loss, grads = forward_backward(ids, labels, Tensor(scale, ms.float32))
        finite = bool(amp.all_finite(grads).asnumpy())
        if finite:
            optimizer(grads)
        print(f"step {step}: scaled loss {float(loss.asnumpy()):.4f} grads finite: {finite}", flush=True)


if __name__ == "__main__":
    main()
