"""The source patch on the REAL Baichuan2 NormHead (MindFormers research/baichuan2/baichuan2_13b.py, both the fp16
and the fp32 hard-coded versions), run on MindSpore CPU: the overflow is gone, the Parameter still updates (the
write target is never cast), values leaving the island keep their dtype, and outputs and gradients match a
float64 numpy reference.

MindFormers itself does not import on CPU without its whole stack, so the NormHead class is extracted from the
real file (as patched, or as it is) with libcst-free `ast` slicing and written, with the imports it needs and the
patch's helpers, into a small module that is imported here. The file is kept in tests/support/mindformers/
(mindformers_source.py; PROVENANCE.md names its repository, commit and path).
"""
import ast
import importlib.util
import math
import sys

import numpy as np
import pytest

from msoverflow.patch import source_patch
from tests.support import mindformers_source

pytestmark = pytest.mark.mindspore

HIDDEN, VOCAB, TINY_ROW = 16, 32, 3
CULPRIT = "variance_eps = self.sqrt(self.add(variance, self.eps))"
HEADER = ("import math\nimport numpy as np\nimport mindspore\nimport mindspore.common.dtype as mstype\n"
          "from mindspore import Tensor, nn, ops\nfrom mindspore.common.parameter import Parameter\n"
          "from mindspore.ops import operations as P\nfrom mindspore.common.initializer import initializer, "
          "HeUniform\n\n")


def _culprit_line(text: str) -> int:
    return next(i + 1 for i, l in enumerate(text.splitlines()) if l.strip() == CULPRIT)


@pytest.fixture(scope="module", autouse=True)
def _cpu():
    from tests.support.patch_reports import mindspore_on_cpu
    return mindspore_on_cpu()


@pytest.fixture(scope="module", params=sorted(mindformers_source.VERSIONS))
def version(request):
    text = mindformers_source.read(request.param)
    return request.param, text


@pytest.fixture(scope="module")
def patched(version, tmp_path_factory):
    name, text = version
    path = tmp_path_factory.mktemp(name) / "baichuan2_13b.py"
    path.write_text(text)
    return source_patch.plan(str(path), _culprit_line(text), "float32", code=CULPRIT)


def _normhead_class(text: str, where, tag: str):
    """NormHead (and the patch's module-level helpers) from `text`, imported from a real file so that graph
    mode can read its source."""
    tree = ast.parse(text)
    parts = [ast.get_source_segment(text, node) for node in tree.body
             if (isinstance(node, ast.FunctionDef) and node.name.startswith("_msoverflow"))
             or (isinstance(node, ast.ClassDef) and node.name == "NormHead")]
    module_path = where / f"normhead_{tag}.py"
    module_path.write_text(HEADER + "\n\n".join(parts) + "\n")
    spec = importlib.util.spec_from_file_location(f"normhead_{tag}_{id(where)}", module_path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # graph mode resolves the class's globals through sys.modules
    spec.loader.exec_module(module)
    return module.NormHead


def _weights():
    weight = np.random.RandomState(7).normal(0.0, 0.02, (VOCAB, HIDDEN))
    weight[TINY_ROW] = 1e-3      # a near-zero vocabulary row: its norm is tiny, the backward of Sqrt huge
    return weight


def _hidden():
    """The hidden states as the fp16 input the head receives (the reference uses the same rounded values)."""
    return np.random.RandomState(1).normal(0.0, 1.0, (4, 8, HIDDEN)).astype(np.float16).astype(np.float64)


def _reference(weight, hidden, scale, eps=1e-5):
    """float64: out = h @ (W / sqrt(sum W^2 + eps))^T; loss = scale * sum(out[..., TINY_ROW]); dloss/dW."""
    norm = np.sqrt((weight ** 2).sum(1, keepdims=True) + eps)
    normed = weight / norm
    out = hidden.reshape(-1, HIDDEN) @ normed.T
    g = scale * hidden.reshape(-1, HIDDEN).sum(0)           # dloss / d normed[TINY_ROW]
    grad = np.zeros_like(weight)
    row, n = weight[TINY_ROW], norm[TINY_ROW, 0]
    grad[TINY_ROW] = g / n - row * (row @ g) / n ** 3
    return out.reshape(hidden.shape[:-1] + (VOCAB,)), scale * out[:, TINY_ROW].sum(), grad, normed


def _build(cls, use_past=False):
    import mindspore.common.dtype as mstype
    from mindspore import Tensor
    kwargs = {"use_past": use_past} if "use_past" in cls.__init__.__code__.co_varnames else {}
    cell = cls(HIDDEN, VOCAB, compute_dtype=mstype.float32, **kwargs)
    cell.weight.set_data(Tensor(_weights(), cell.weight.dtype))
    return cell


def _loss_and_grad(cell, scale):
    import mindspore as ms
    import mindspore.common.dtype as mstype
    from mindspore import Tensor, ops
    hidden = Tensor(_hidden(), mstype.float16)

    def loss_fn(x):
        return (ops.cast(cell(x), mstype.float32)[..., TINY_ROW] * scale).sum()
    loss, grads = ms.value_and_grad(loss_fn, None, cell.trainable_params())(hidden)
    return float(loss.asnumpy()), grads[0].asnumpy().astype(np.float64)


def test_real_normhead_patch_is_small_and_never_casts_a_write_target(version, patched):
    name, text = version
    assert patched.changed and not patched.already
    klass = next(n for n in ast.parse(patched.patched).body if isinstance(n, ast.ClassDef) and n.name == "NormHead")
    construct = next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == "construct")
    calls = [n for n in ast.walk(construct) if isinstance(n, ast.Call)]
    assigns = [c for c in calls if ast.unparse(c.func) == "self.assign"]
    if name.startswith("fp16"):
        assert len(assigns) == 2, "the use_past and the incremental branch both write the Parameter"
    for call in assigns:
        assert ast.unparse(call.args[0]) == "self.weight", "the target of a write is never cast"
    # boundary ops keep their dtype: the vocab-size MatMul's casts and the exit cast are untouched
    original_lines = set(text.splitlines())
    for line in ("        out = self.matmul(hidden_states.astype(self.compute_dtype),",
                 "                          norm_weight.astype(self.compute_dtype))",
                 "        return self.cast(out, ori_type)"):
        assert line in original_lines and line in patched.patched.splitlines()
    # every changed line of the class says why
    removed = [l for l in patched.diff().splitlines() if l.startswith("-") and not l.startswith("---")]
    added = [l for l in patched.diff().splitlines() if l.startswith("+") and not l.startswith("+++")
             and l.startswith("+        ")]
    assert len(removed) == 3, removed             # square(weight), the culprit, real_div(weight, ...)
    assert all("# msoverflow:" in l for l in added if l.strip("+ ") and not l.strip("+ ").startswith(("if ", "return", '"""')))
    # the helpers follow the file's own imports (a try block among them) and use its names: nothing imported
    body = ast.parse(patched.patched).body
    last_import = max(i for i, n in enumerate(body) if isinstance(n, (ast.Import, ast.ImportFrom)))
    helpers = [i for i, n in enumerate(body) if isinstance(n, ast.FunctionDef) and n.name.startswith("_msoverflow")]
    assert helpers and min(helpers) == last_import + 1, [ast.unparse(n)[:60] for n in body[last_import - 1:]]
    assert "import mindspore\n" not in patched.patched and "isinstance(x, Tensor)" in patched.patched
    assert "ops.cast(x, mstype.float32)" in patched.patched
    # a second plan on the patched file is "already patched"
    path = patched.path + ".patched.py"
    with open(path, "w") as fh:
        fh.write(patched.patched)
    again = source_patch.plan(path, _culprit_line(text), "float32")
    assert again.already and not again.changed


@pytest.mark.parametrize("mode", ["pynative", "graph"])
def test_training_branch_overflow_gone_and_matches_float64(version, patched, tmp_path, mode):
    import mindspore as ms
    from mindspore import nn
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    try:
        name, text = version
        original = _normhead_class(text, tmp_path, "original")
        fixed = _normhead_class(patched.patched, tmp_path, "patched")
        scale = 16.0     # the float64 weight gradient (max 3.5e4) fits fp16; SqrtGrad's does not
        ref_out, ref_loss, ref_grad, _ = _reference(_weights(), _hidden(), scale)
        assert np.abs(ref_grad).max() < 65504
        _, grad_before = _loss_and_grad(_build(original), scale)
        cell = _build(fixed)
        loss, grad = _loss_and_grad(cell, scale)
        if name.startswith("fp16"):
            assert not np.isfinite(grad_before).all(), "the unpatched fp16 NormHead must overflow here"
        else:
            # fp32 hard-coded weight and eps: no overflow to begin with, and the patch changes no value
            assert np.isfinite(grad_before).all()
            np.testing.assert_array_equal(grad, grad_before)
        assert np.isfinite(grad).all() and math.isfinite(loss)
        tol = 2e-2 if name.startswith("fp16") else 1e-3   # fp32: only the fp16 exit cast rounds
        assert abs(loss - ref_loss) <= tol * abs(ref_loss)
        np.testing.assert_allclose(grad, ref_grad, rtol=tol, atol=tol * np.abs(ref_grad).max())
        # the Parameter still updates through an optimizer step, and stays finite
        import mindspore.common.dtype as mstype
        from mindspore import Tensor, ops

        class Loss(nn.Cell):
            def __init__(self, head):
                super().__init__()
                self.head = head

            def construct(self, x):
                return (ops.cast(self.head(x), mstype.float32)[..., TINY_ROW] * scale).sum()
        before = cell.weight.asnumpy().copy()
        step = nn.TrainOneStepCell(Loss(cell), nn.SGD(cell.trainable_params(), learning_rate=1e-6))
        step(Tensor(_hidden(), mstype.float16))
        after = cell.weight.asnumpy()
        assert np.isfinite(after).all()
        assert not np.array_equal(after[TINY_ROW], before[TINY_ROW]), "the Parameter must still update"
        assert str(cell.weight.dtype) == str(_build(original).weight.dtype), "the stored Parameter keeps its dtype"
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def test_use_past_branch_still_writes_the_normalised_weight(version, patched, tmp_path):
    """Inference with use_past: the first call normalises the weight and ASSIGNS it to the Parameter; later
    calls use it as it is. With the old patch (cast target) the Parameter silently never changed."""
    import mindspore.common.dtype as mstype
    from mindspore import Tensor
    name, text = version
    if not name.startswith("fp16"):
        pytest.skip("the fp32 (r0.8) NormHead has no use_past branch")
    cells = {}
    for tag, source in (("original", text), ("patched", patched.patched)):
        cell = _build(_normhead_class(source, tmp_path, tag), use_past=True)
        first = cell(Tensor(_hidden(), mstype.float16)).asnumpy()
        written = cell.weight.asnumpy().astype(np.float64)
        cell.is_first_iteration = False
        second = cell(Tensor(_hidden(), mstype.float16)).asnumpy()
        cells[tag] = (first, written, second)
    ref_out, _, _, normed = _reference(_weights(), _hidden(), 1.0)
    first, written, second = cells["patched"]
    np.testing.assert_allclose(written, normed, rtol=2e-3, atol=2e-3)       # the Parameter was updated
    assert not np.allclose(written, _weights(), atol=1e-3)
    np.testing.assert_allclose(written, cells["original"][1], rtol=1e-3, atol=1e-3)
    for out in (first, second):
        np.testing.assert_allclose(out.astype(np.float64), ref_out, rtol=2e-2, atol=2e-2)


def test_runtime_patch_on_the_real_normhead(version, tmp_path):
    """The runtime route on the same real class: the overflow is gone, the Parameter still updates (use_past
    writes the normalised weight into it), and the gradient matches the float64 reference."""
    import mindspore.common.dtype as mstype
    from mindspore import Tensor, nn

    from msoverflow.patch import Target, apply
    name, text = version
    cls = _normhead_class(text, tmp_path, "runtime")

    class Holder(nn.Cell):       # the network a user hands over: NormHead as its lm_head
        def __init__(self, head):
            super().__init__()
            self.lm_head = head

        def construct(self, x):
            return self.lm_head(x)
    cell = _build(cls)
    result = apply(Holder(cell), Target(cell="NormHead"), "float32")
    assert result.changed and any(path.endswith("lm_head") for path in result.cells)
    scale = 16.0
    _, _, ref_grad, normed = _reference(_weights(), _hidden(), scale)
    loss, grad = _loss_and_grad(cell, scale)
    assert np.isfinite(grad).all() and math.isfinite(loss)
    np.testing.assert_allclose(grad, ref_grad, rtol=2e-2, atol=2e-2 * np.abs(ref_grad).max())
    if name.startswith("fp16"):
        past = _build(cls, use_past=True)
        apply(Holder(past), Target(cell="NormHead"), "float32")
        past(Tensor(_hidden(), mstype.float16))
        np.testing.assert_allclose(past.weight.asnumpy().astype(np.float64), normed, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("name", sorted(mindformers_source.VERSIONS))
def test_the_kept_mindformers_file_is_the_pinned_commits(name):
    """The fixture is MindFormers' file unmodified (skips where no git copy of MindFormers is here)."""
    kept = mindformers_source.read(name)
    assert kept.startswith("# Copyright 2023 Huawei Technologies Co., Ltd") and "Apache License" in kept[:400]
    assert kept == mindformers_source.from_git(name)
