"""A real MindSpore CPU training run (graph mode) with one fault planted by a flag: the fault suite's run script.

    python benchmarks/faults/train_fault.py --model demo|transformer --fault CLASS --step S --seed N --truth T.json

The faults are planted through the training loop, never by editing dump files:
- overflow   : at step S the weights feeding the chosen op are scaled (Parameter.set_data) so that the op's own
               result leaves float16's range from inputs within it (demo: the NormHead's loss scale; transformer:
               the fp16 attention scores BatchMatMul).
- zero_div   : transformer only; the loss mask of step S is all zero, so the token weights mask / sum(mask) are 0/0.
- masked_row : transformer only; at step S one query row of the attention mask masks every key. MindSpore CPU's
               Softmax maps an all -inf row to zeros (no fault), so these runs use the softmax written out
               (--manual-softmax: exp(s - max s) / sum), where the row's -inf - (-inf) is NaN in the Sub.
- bitflip    : after step S-1, exponent bit 30 of one element of the embedding table (the tensor the optimizer op
               wrote) is flipped in memory; the element is one whose exponent is 127 (|x| in [1, 2)), so the flip
               gives inf or NaN, and whose row is gathered at step S.
- stomp      : after step S-1, a 64-byte-aligned block (16 float32) of the embedding table is overwritten with
               random bytes (a row gathered at step S).
- recv       : two ranks (msrun), data parallel; at step S rank 1's reduced gradient of the head weight (the
               AllReduce's receive buffer) has a 64-byte-aligned block replaced by garbage (random bytes and a NaN),
               by a Select right after the AllReduce (Cell `receive`); rank 0 is untouched.
- lr_blowup  : the learning rate of step S is 3e38 (a schedule gone wrong): the SGD update leaves float32's range.
- clean      : no fault (controls).

The run writes --truth (JSON): what was planted, where (Cell path, op, rank, step) and the values it changed.
"""
import argparse
import json
import sys

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore import dtype as mstype

VOCAB, HIDDEN, HEADS, BATCH, SEQ = 16, 16, 2, 2, 6


def _normal(shape, seed, std):
    return np.random.RandomState(seed).normal(0.0, std, shape).astype(np.float32)


class Attention(nn.Cell):
    def __init__(self, seed, compute_dtype, manual_softmax=False):
        super().__init__()
        self.manual_softmax = manual_softmax
        self.q = nn.Dense(HIDDEN, HIDDEN, weight_init=Tensor(_normal((HIDDEN, HIDDEN), seed, 0.2)), has_bias=False)
        self.k = nn.Dense(HIDDEN, HIDDEN, weight_init=Tensor(_normal((HIDDEN, HIDDEN), seed + 1, 0.2)), has_bias=False)
        self.v = nn.Dense(HIDDEN, HIDDEN, weight_init=Tensor(_normal((HIDDEN, HIDDEN), seed + 2, 0.2)), has_bias=False)
        self.o = nn.Dense(HIDDEN, HIDDEN, weight_init=Tensor(_normal((HIDDEN, HIDDEN), seed + 3, 0.2)), has_bias=False)
        self.scores = ops.BatchMatMul(transpose_b=True)
        self.mix = ops.BatchMatMul()
        self.softmax = ops.Softmax(-1)
        self.cast = ops.Cast()
        self.compute_dtype = compute_dtype
        self.scale = float((HIDDEN // HEADS) ** -0.5)

    def _heads(self, x):
        return x.reshape((BATCH, SEQ, HEADS, HIDDEN // HEADS)).transpose((0, 2, 1, 3))

    def construct(self, x, mask):
        q = self.cast(self._heads(self.q(x)), self.compute_dtype)
        k = self.cast(self._heads(self.k(x)), self.compute_dtype)
        v = self._heads(self.v(x))
        scores = self.cast(self.scores(q, k), mstype.float32) * self.scale
        scores = ops.masked_fill(scores, mask, Tensor(float("-inf"), mstype.float32))
        if self.manual_softmax:  # the max-subtracted softmax written out, as custom attention code does
            shifted = ops.exp(scores - scores.max(axis=-1, keepdims=True))
            probs = shifted / shifted.sum(axis=-1, keepdims=True)
        else:
            probs = self.softmax(scores)
        mixed = self.mix(probs, v).transpose((0, 2, 1, 3)).reshape((BATCH, SEQ, HIDDEN))
        return self.o(mixed)


class Block(nn.Cell):
    def __init__(self, seed, compute_dtype, manual_softmax=False):
        super().__init__()
        self.ln1 = nn.LayerNorm((HIDDEN,))
        self.attn = Attention(seed, compute_dtype, manual_softmax)
        self.ln2 = nn.LayerNorm((HIDDEN,))
        self.up = nn.Dense(HIDDEN, 2 * HIDDEN, weight_init=Tensor(_normal((2 * HIDDEN, HIDDEN), seed + 4, 0.2)))
        self.down = nn.Dense(2 * HIDDEN, HIDDEN, weight_init=Tensor(_normal((HIDDEN, 2 * HIDDEN), seed + 5, 0.2)))
        self.act = nn.GELU()

    def construct(self, x, mask):
        x = x + self.attn(self.ln1(x), mask)
        return x + self.down(self.act(self.up(self.ln2(x))))


class TinyTransformer(nn.Cell):
    def __init__(self, seed, layers=2, compute_dtype=mstype.float32, manual_softmax=False):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN, embedding_table=Tensor(_normal((VOCAB, HIDDEN), seed, 1.0)))
        self.layers = nn.CellList([Block(seed + 10 * (i + 1), compute_dtype, manual_softmax) for i in range(layers)])
        self.norm = nn.LayerNorm((HIDDEN,))
        self.head = nn.Dense(HIDDEN, VOCAB, weight_init=Tensor(_normal((VOCAB, HIDDEN), seed + 99, 0.2)))

    def construct(self, ids, mask):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, mask)
        return self.head(self.norm(x).reshape((-1, HIDDEN)))


class TokenWeightedLoss(nn.Cell):
    """Cross entropy weighted by mask / sum(mask), times a fixed loss scale."""

    def __init__(self, backbone, loss_scale=64.0):
        super().__init__(auto_prefix=False)
        self._backbone = backbone
        self.ce = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="none")
        self.loss_scale = loss_scale

    def construct(self, ids, labels, attn_mask, loss_mask):
        per_token = self.ce(self._backbone(ids, attn_mask), labels.reshape((-1,)))
        mask = loss_mask.reshape((-1,))
        token_count = ops.reduce_sum(mask)
        return ops.reduce_sum(per_token * (mask / token_count)) * self.loss_scale


class GradientReceiveFault(nn.Cell):
    """Right after the gradient AllReduce: selects, element by element, the reduced gradient or the garbage that the
    receive buffer got. `corrupt` is False everywhere but in the planted (rank, step); Parameters, so the graph is
    the same for every rank and step."""

    def __init__(self, weights):
        super().__init__()
        self.corrupt = ms.ParameterTuple([Parameter(Tensor(np.zeros(w.shape, np.bool_)), name=f"fault_corrupt_{i}",
                                                    requires_grad=False) for i, w in enumerate(weights)])
        self.garbage = ms.ParameterTuple([Parameter(Tensor(np.zeros(w.shape, np.float32)),
                                                    name=f"fault_garbage_{i}", requires_grad=False)
                                          for i, w in enumerate(weights)])

    def construct(self, grads):
        out = ()
        for i, g in enumerate(grads):
            out = out + (ops.select(self.corrupt[i], self.garbage[i], g),)
        return out


class DataParallelStep(nn.Cell):
    def __init__(self, network, optimizer, world):
        super().__init__(auto_prefix=False)
        self.network = network
        self.optimizer = optimizer
        self.weights = optimizer.parameters
        self.grad = ops.GradOperation(get_by_list=True)
        self.grad_reducer = nn.DistributedGradReducer(self.weights, mean=True, degree=world)
        self.receive = GradientReceiveFault(self.weights)

    def construct(self, *inputs):
        loss = self.network(*inputs)
        grads = self.receive(self.grad_reducer(self.grad(self.network, self.weights)(*inputs)))
        return ops.depend(loss, self.optimizer(grads))


def _flip_exponent_bit(table, rows, rs):
    """Exponent bit 30 of one element of `rows` whose exponent is 127 (|x| in [1, 2)): the flip gives inf/NaN."""
    bits = table.view(np.uint32)
    exponent = (bits >> 23) & 0xFF
    candidates = [(r, c) for r in rows for c in range(table.shape[1]) if exponent[r, c] == 127]
    row, col = candidates[rs.randint(len(candidates))]
    before = float(table[row, col])
    bits[row, col] ^= np.uint32(1 << 30)
    return {"index": [int(row), int(col)], "before": before, "after": repr(float(table[row, col])), "bit": 30}


def _stomp_block(table, rows, rs, block_bytes=64):
    """A block_bytes-aligned block of the table's buffer overwritten with random bytes, inside one of `rows`."""
    flat = table.reshape(-1).view(np.uint8)
    row = int(rows[rs.randint(len(rows))])
    start = (row * table.shape[1] * 4) // block_bytes * block_bytes
    flat[start:start + block_bytes] = rs.randint(0, 256, block_bytes).astype(np.uint8)
    values = table.reshape(-1)[start // 4:(start + block_bytes) // 4]
    finite = values[np.isfinite(values)]
    return {"byte_offset": start, "bytes": block_bytes, "row": row, "nonfinite": int(values.size - finite.size),
            "max_abs_finite": float(np.abs(finite).max()) if finite.size else None}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=["demo", "transformer"], required=True)
    parser.add_argument("--fault", default="clean",
                        choices=["clean", "overflow", "zero_div", "masked_row", "bitflip", "stomp", "recv",
                                 "lr_blowup"])
    parser.add_argument("--step", type=int, default=1, help="the step the fault is planted in")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--manual-softmax", action="store_true", help="transformer: softmax written as exp/sum")
    parser.add_argument("--truth", required=True)
    args = parser.parse_args(argv)

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    rank, world = 0, 1
    if args.fault == "recv":
        from mindspore.communication import get_group_size, get_rank, init
        init()
        rank, world = get_rank(), get_group_size()
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    ms.set_seed(args.seed)
    rs = np.random.RandomState(1000 + args.seed)
    lrs = [args.lr] * args.steps
    if args.fault == "lr_blowup":
        lrs[args.step] = 3e38
    truth = {"fault": args.fault, "model": args.model, "step": args.step, "rank": 0, "seed": args.seed}

    if args.model == "demo":
        from msoverflow.demo.model import CausalLMLoss, TinyBaichuan
        head_dtype = mstype.float16 if args.fault == "overflow" else mstype.float32
        net = TinyBaichuan(head_dtype=head_dtype)
        loss_net = CausalLMLoss(net, 1.0 if args.fault == "overflow" else 64.0)
        vocab = 32
    else:
        compute = mstype.float16 if args.fault == "overflow" else mstype.float32
        net = TinyTransformer(args.seed, compute_dtype=compute, manual_softmax=args.manual_softmax)
        loss_net = TokenWeightedLoss(net)
        vocab = VOCAB
    optimizer = nn.SGD(net.trainable_params(), learning_rate=lrs)
    train_step = DataParallelStep(loss_net, optimizer, world) if args.fault == "recv" \
        else nn.TrainOneStepCell(loss_net, optimizer)

    data = np.random.RandomState(args.seed + 17 * rank)
    batches = [(data.randint(0, vocab, (BATCH if args.model == "transformer" else 4,
                                        SEQ if args.model == "transformer" else 8)).astype(np.int32),
                data.randint(0, vocab, (BATCH if args.model == "transformer" else 4,
                                        SEQ if args.model == "transformer" else 8)).astype(np.int32))
               for _ in range(args.steps)]
    for step, (ids, labels) in enumerate(batches):
        if args.model == "demo":
            labels = np.full_like(labels, 3)  # the demo's tiny NormHead row (its logit gradient is large)
        planted = step == args.step
        causal = np.triu(np.ones((SEQ, SEQ), bool), 1)
        attn_mask = np.broadcast_to(causal, (BATCH, 1, SEQ, SEQ)).copy()
        loss_mask = np.ones((BATCH, SEQ), np.float32)
        if planted and args.fault == "overflow":
            if args.model == "demo":
                loss_net.set_loss_scale(256.0 * (1 + args.seed))
                truth.update(where="network._backbone.lm_head", cell_type="NormHead", op_type="SqrtGrad",
                             detail={"loss_scale": 256.0 * (1 + args.seed)})
            else:
                layer = rs.randint(2)
                attn = net.layers[layer].attn
                factor = float(150 + 100 * rs.rand())
                for dense in (attn.q, attn.k):
                    dense.weight.set_data(Tensor(dense.weight.asnumpy() * factor))
                truth.update(where=f"network._backbone.layers.{layer}.attn", cell_type="Attention",
                             op_type="BatchMatMul", detail={"q_k_weight_factor": factor})
        if planted and args.fault == "zero_div":
            loss_mask[:] = 0.0
            truth.update(where="network", cell_type="TokenWeightedLoss", op_type="Div")
        if planted and args.fault == "masked_row":
            b, row = rs.randint(BATCH), rs.randint(SEQ)
            attn_mask[b, 0, row, :] = True
            truth.update(where="network._backbone.layers.0.attn", cell_type="Attention",
                         op_type="Sub" if args.manual_softmax else "Softmax",
                         detail={"batch": int(b), "query_row": int(row)})
        if planted and args.fault in ("bitflip", "stomp"):
            table_param = net.embed_tokens.embedding_table
            table = table_param.asnumpy().astype(np.float32).copy()
            rows = sorted(set(ids.reshape(-1).tolist()))
            detail = _flip_exponent_bit(table, rows, rs) if args.fault == "bitflip" else _stomp_block(table, rows, rs)
            table_param.set_data(Tensor(table))
            truth.update(where="network._backbone.embed_tokens", cell_type="Embedding", op_type="Gather",
                         detail=detail)
        if args.fault == "recv":
            receive = train_step.receive
            head_slot = [i for i, w in enumerate(train_step.weights) if w.name == "head.weight"][0]
            corrupt = np.zeros(receive.corrupt[head_slot].shape, np.bool_)
            garbage = np.zeros(corrupt.shape, np.float32)
            if planted and rank == 1:
                start = rs.randint(corrupt.size // 16) * 16  # a 64-byte-aligned block of 16 float32
                corrupt.reshape(-1)[start:start + 16] = True
                block = rs.randint(0, 256, 64).astype(np.uint8).view(np.float32).copy()
                block[rs.randint(16)] = np.nan
                garbage.reshape(-1)[start:start + 16] = block
                truth.update(rank=1, where="receive", cell_type="GradientReceiveFault", op_type="Select",
                             detail={"parameter": "head.weight", "element_offset": int(start), "elements": 16})
            receive.corrupt[head_slot].set_data(Tensor(corrupt))
            receive.garbage[head_slot].set_data(Tensor(garbage))
        if planted and args.fault == "lr_blowup":
            truth.update(where="optimizer", cell_type="SGD", op_type="SGD", detail={"lr": 3e38})
        if args.model == "demo":
            loss = train_step(Tensor(ids), Tensor(labels))
        else:
            loss = train_step(Tensor(ids), Tensor(labels), Tensor(attn_mask), Tensor(loss_mask))
        finite = all(bool(np.isfinite(p.asnumpy().astype(np.float32)).all()) for p in net.trainable_params())
        print(f"rank {rank} step {step}: loss {float(loss.asnumpy()):.4g} weights finite: {finite}", flush=True)
    if rank == (1 if args.fault == "recv" else 0):
        with open(args.truth, "w") as fh:
            json.dump(truth, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
