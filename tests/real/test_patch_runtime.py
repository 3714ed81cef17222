"""Runtime patch (msoverflow.patch.apply) on the demo's TinyBaichuan, in this process, real MindSpore CPU.

Training runs here are the demo's own loop (TrainOneStepCell + SGD, loss scale 64) for 3 steps: unpatched, the
fp16 NormHead's weights go non-finite at step 0; patched, they stay finite. The dump-based proof is in
test_patch_verify.py.
"""
import numpy as np
import pytest

pytestmark = pytest.mark.mindspore


@pytest.fixture(scope="module")
def ms():
    pytest.importorskip("mindspore")
    from tests.support.patch_reports import mindspore_on_cpu
    return mindspore_on_cpu()


def _train(ms, mode, patch=None, amp_level=None, amp_first=False, steps=3, optimizer="sgd"):
    from mindspore import amp, nn

    from msoverflow.demo.model import CausalLMLoss, TinyBaichuan, batches
    from msoverflow.patch import apply

    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    net = TinyBaichuan()
    if amp_level and amp_first:
        net = amp.auto_mixed_precision(net, amp_level)
    loss_net = CausalLMLoss(net, 64.0)
    opt = (nn.SGD(net.trainable_params(), learning_rate=0.01) if optimizer == "sgd"
           else nn.Momentum(net.trainable_params(), 0.01, 0.9))
    step = nn.TrainOneStepCell(loss_net, opt)
    result = apply(step, patch, "float32") if patch else None
    if amp_level and not amp_first:
        amp.auto_mixed_precision(net, amp_level)     # O2/O3 work in place on the backbone
    history = []
    for ids, labels in batches(steps):
        loss = float(step(ids, labels).asnumpy())
        finite = all(bool(np.isfinite(p.asnumpy().astype(np.float32)).all()) for p in step.trainable_params())
        history.append((loss, finite))
    return history, result, step, net


def test_unpatched_fp16_norm_head_blows_up(ms):
    history, _, _, _ = _train(ms, "graph", steps=2)
    assert history[0][1] is False, "the demo must overflow, else the other tests prove nothing"
    assert not np.isfinite(history[1][0])


@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_island_keeps_weights_finite_over_several_steps(ms, mode):
    history, result, step, net = _train(ms, mode, patch="network._backbone.lm_head")
    assert all(np.isfinite(loss) and finite for loss, finite in history), history
    assert history[-1][0] < history[0][0]          # still training, not just frozen
    kinds = {c.kind for c in result.changes}
    assert {"parameter", "constant", "dtype-attr", "wrap", "flags", "optimizer-state"} <= kinds
    assert result.cells == ["network._backbone.lm_head"]
    head = net.lm_head.inner
    assert str(head.weight.dtype) == "Float32" and str(head.eps.dtype) == "Float32"
    assert str(head.compute_dtype) == "Float32"
    # the SGD's accum/stat clones of the weight follow it, else the optimizer kernel sees mixed dtypes
    mirrors = [p for p in step.get_parameters() if p.name.endswith(".lm_head.weight")]
    assert mirrors and all(str(p.dtype) == "Float32" for p in mirrors)


# O1 is left out: amp's rewrite-based O1 already fails on the unpatched demo model in MindSpore 2.10
# ("The name 'square_opt' is not defined"), so it cannot tell anything about the island.
@pytest.mark.parametrize("amp_level", ["O2", "O3"])
@pytest.mark.parametrize("amp_first", [True, False], ids=["amp-then-patch", "patch-then-amp"])
def test_composes_with_amp_in_either_order(ms, amp_first, amp_level):
    from mindspore._c_expression import MixedPrecisionType
    history, result, step, net = _train(ms, "graph", patch="network._backbone.lm_head", amp_level=amp_level,
                                        amp_first=amp_first, optimizer="momentum")
    assert all(np.isfinite(loss) and finite for loss, finite in history), history
    backbone = step.network._backbone
    backbone = getattr(backbone, "_backbone", backbone)      # amp O2/O3 wrap the backbone in _OutputTo32
    island = backbone.lm_head
    assert type(island).__name__ == "PrecisionIsland"
    # amp's to_float(fp16) reached every Cell but the island's
    assert backbone.layers[0].mlp.mixed_precision_type == MixedPrecisionType.FP16
    assert island.inner.mixed_precision_type == MixedPrecisionType.FP32
    assert island.mixed_precision_type == MixedPrecisionType.FP32
    assert any(c.kind == "optimizer-state" and c.where.startswith("moments.") for c in result.changes)


def test_undo_restores_structure_and_dtypes(ms):
    from mindspore import nn

    from msoverflow.demo.model import CausalLMLoss, TinyBaichuan
    from msoverflow.patch import apply
    net = TinyBaichuan()
    head = net.lm_head
    step = nn.TrainOneStepCell(CausalLMLoss(net), nn.SGD(net.trainable_params(), learning_rate=0.01))
    result = apply(step, "NormHead", "float32")
    assert net.lm_head is not head and net.lm_head.inner is head
    result.undo()
    assert net.lm_head is head and net._cells["lm_head"] is head
    assert str(head.weight.dtype) == "Float16" and str(head.eps.dtype) == "Float16"
    assert str(head.compute_dtype) == "Float16"
    assert "add_flags" not in vars(head) and head.mixed_precision_type is None
    assert all(str(p.dtype) == "Float16" for p in step.get_parameters() if p.name.endswith("lm_head.weight"))


def test_bfloat16_island_structure(ms):
    """bf16 Square/Sqrt/MatMul have no CPU kernel: the bf16 island is checked by structure, not by running."""
    from msoverflow.demo.model import TinyBaichuan
    from msoverflow.patch import apply
    net = TinyBaichuan()
    result = apply(net, "lm_head", "bfloat16")
    island = net.lm_head
    assert str(island.island_dtype) == "BFloat16"
    assert [str(d) for d in island.narrow] == ["Float16"]
    assert str(island.inner.weight.dtype) == "BFloat16" and str(island.inner.compute_dtype) == "BFloat16"
    # the fp32 RMSNorm weights elsewhere are not narrowed
    assert str(net.norm.weight.dtype) == "Float32"
    assert all(c.after == "bfloat16" for c in result.changes if c.kind == "parameter")


def test_op_only_patch_wraps_the_primitive_and_warns(ms):
    from msoverflow.demo.model import TinyBaichuan
    from msoverflow.patch import Target, apply
    net = TinyBaichuan()
    result = apply(net, Target(op="Sqrt"), "float32")
    assert result.cells == ["lm_head.sqrt"]
    assert type(net.lm_head.sqrt).__name__ == "OpIsland"
    assert str(net.lm_head.weight.dtype) == "Float16", "an op-only patch does not touch the Parameters"
    assert any("widen to the owning Cell" in w for w in result.warnings)
    again = apply(net, Target(op="Sqrt"), "float32")
    assert [c.kind for c in again.changes] == ["note"] and type(net.lm_head.sqrt.prim).__name__ == "Sqrt"
    result.undo()
    assert type(net.lm_head.sqrt).__name__ == "Sqrt"


def test_missing_target_names_the_cells_it_has(ms):
    from msoverflow.demo.model import TinyBaichuan
    from msoverflow.patch import Target, apply
    from msoverflow.patch.runtime import TargetNotFound
    with pytest.raises(TargetNotFound, match=r"Cell type Attention not found in TinyBaichuan.*lm_head \(NormHead\)"):
        apply(TinyBaichuan(), "Attention", "float32")
    with pytest.raises(TargetNotFound, match="functional calls"):
        apply(TinyBaichuan(), Target(op="Exp"))


def test_longest_path_match_wins(ms):
    from msoverflow.demo.model import TinyBaichuan
    from msoverflow.patch import Target
    from msoverflow.patch.runtime import find_cells
    net = TinyBaichuan(layers=2)
    hits = find_cells(net, Target(cell="network._backbone.layers.1.mlp"))
    assert [h[0] for h in hits] == ["layers.1.mlp"]
    assert len(find_cells(net, Target(cell="MLP"))) == 2
