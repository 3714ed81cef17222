"""PyNative TinyBaichuan (fp16 NormHead) with a @ms.jit forward/backward from ms.value_and_grad (whose sens, the
backward's seed, is 1) and a dynamic loss scale applied to the loss: 256 at the start, divided by 64 after an
overflow (amp.all_finite on the grads; the SGD update skipped when they are not finite). Step 0 overflows in
SqrtGrad at 256 and is skipped; steps 1 and 2 run at 4 and recover."""
import mindspore as ms
from mindspore import nn, amp, Tensor
from msoverflow.demo.model import TinyBaichuan, CausalLMLoss, batches

STEPS = 3


def main():
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    ms.set_seed(0)
    net = TinyBaichuan()
    loss_net = CausalLMLoss(net, 1.0)
    optimizer = nn.SGD(net.trainable_params(), learning_rate=1e-4)

    def scaled_loss(ids, labels, scale):
        return loss_net(ids, labels) * scale

    grad_fn = ms.value_and_grad(scaled_loss, None, optimizer.parameters)

    @ms.jit
    def forward_backward(ids, labels, scale):
        return grad_fn(ids, labels, scale)

    scale = 256.0
    for step, (ids, labels) in enumerate(batches(STEPS)):
        loss, grads = forward_backward(ids, labels, Tensor(scale, ms.float32))
        finite = bool(amp.all_finite(grads).asnumpy())
        if finite:
            optimizer(grads)
        print(f"step {step}: loss scale {scale:g}, scaled loss {float(loss.asnumpy()):.4f}, grads finite: {finite}",
              flush=True)
        if not finite:
            scale /= 64.0


if __name__ == "__main__":
    main()
