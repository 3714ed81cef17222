"""A tiny Baichuan2-like causal LM whose fp16 NormHead overflows in SqrtGrad.

The lm head normalises its weight rows (weight -> Square -> ReduceSum -> Sqrt -> RealDiv -> MatMul), as
Baichuan2's NormHead does. One vocabulary row starts almost at zero, so its norm is tiny and the backward of
Sqrt (dy * 0.5 / y) leaves fp16's range once the loss is scaled, as in the field report.
"""
import numpy as np
import mindspore as ms  # noqa: F401  (the source patch writes ms.ops.cast into this module)
from mindspore import nn, ops, Parameter, Tensor
from mindspore import dtype as mstype


def _normal(shape, seed, std=0.02):
    return np.random.RandomState(seed).normal(0.0, std, shape).astype(np.float32)


class RMSNorm(nn.Cell):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = Parameter(Tensor(np.ones(hidden, np.float32)), name="weight")
        self.eps = eps

    def construct(self, x):
        variance = ops.mean(ops.square(x), -1, keep_dims=True)
        return x * ops.rsqrt(variance + self.eps) * self.weight


class MLP(nn.Cell):
    def __init__(self, hidden, inner, seed):
        super().__init__()
        self.up = nn.Dense(hidden, inner, weight_init=Tensor(_normal((inner, hidden), seed)), has_bias=False)
        self.down = nn.Dense(inner, hidden, weight_init=Tensor(_normal((hidden, inner), seed + 1)), has_bias=False)
        self.act = nn.SiLU()

    def construct(self, x):
        return self.down(self.act(self.up(x)))


class DecoderLayer(nn.Cell):
    def __init__(self, hidden, seed):
        super().__init__()
        self.post_attention_layernorm = RMSNorm(hidden)
        self.mlp = MLP(hidden, hidden * 2, seed)

    def construct(self, x):
        return x + self.mlp(self.post_attention_layernorm(x))


class NormHead(nn.Cell):
    """Baichuan2's lm head: logits = x @ (W / ||W||_row)^T, computed in `compute_dtype`."""

    def __init__(self, hidden, vocab, compute_dtype=mstype.float16, tiny_row=3, tiny_value=1e-3):
        super().__init__()
        weight = _normal((vocab, hidden), 7)
        weight[tiny_row, :] = tiny_value
        self.weight = Parameter(Tensor(weight, compute_dtype), name="weight")
        self.square = ops.Square()
        self.sqrt = ops.Sqrt()
        self.reduce_sum = ops.ReduceSum(keep_dims=True)
        self.real_div = ops.RealDiv()
        self.matmul = ops.MatMul(transpose_b=True)
        self.cast = ops.Cast()
        self.eps = Tensor(1e-7, compute_dtype)
        self.compute_dtype = compute_dtype

    def construct(self, hidden_states):
        variance = self.reduce_sum(self.square(self.weight), 1)
        norm = self.sqrt(variance + self.eps)
        norm_weight = self.real_div(self.weight, norm)
        return self.matmul(self.cast(hidden_states, self.compute_dtype), norm_weight)


class TinyBaichuan(nn.Cell):
    def __init__(self, vocab=32, hidden=16, layers=1, head_dtype=mstype.float16):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden, embedding_table=Tensor(_normal((vocab, hidden), 1, 1.0)))
        self.layers = nn.CellList([DecoderLayer(hidden, 10 + i) for i in range(layers)])
        self.norm = RMSNorm(hidden)
        self.lm_head = NormHead(hidden, vocab, head_dtype)

    def construct(self, input_ids):
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x)
        x = self.norm(x).reshape((-1, x.shape[-1]))
        return self.lm_head(x)


class CausalLMLoss(nn.Cell):
    """Cross entropy in fp32, multiplied by a loss scale (as fp16 training does).

    The scale is a Parameter so a schedule can change it between steps without recompiling the graph.
    """

    def __init__(self, backbone, loss_scale=64.0):
        super().__init__(auto_prefix=False)
        self._backbone = backbone
        self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        self.loss_scale = Parameter(Tensor(loss_scale, mstype.float32), name="loss_scale", requires_grad=False)

    def set_loss_scale(self, value):
        self.loss_scale.set_data(Tensor(value, mstype.float32))

    def construct(self, input_ids, labels):
        logits = ops.cast(self._backbone(input_ids), mstype.float32)
        return self.ce(logits, labels.reshape((-1,))) * self.loss_scale


def batches(steps, batch=4, seq=8, vocab=32, seed=1):
    rs = np.random.RandomState(seed)
    for _ in range(steps):
        ids = rs.randint(0, vocab, (batch, seq)).astype(np.int32)
        labels = np.full((batch, seq), 3, np.int32)  # the tiny row's token: its logit gradient is large
        yield Tensor(ids), Tensor(labels)
