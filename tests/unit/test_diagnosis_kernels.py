"""Reference kernels (msoverflow/cause/recompute.py) and what the saved graph tells them.

The kernels are held to MindSpore's own results on every op of the real CPU dumps (test_every_dumped_op_agrees_
with_its_kernel); the formula tests below cover what the CPU cannot show (float16/bfloat16 rounding, RmsNorm, which
MindSpore 2.10 has no CPU kernel for, and gradients checked by finite differences).
"""
import numpy as np
import pytest

from msoverflow.cause import recompute
from msoverflow.cause.recompute import Precision, RecomputeError, disagreement, run
from msoverflow.readers.ir_graph import attributes, literal, parse_ir, shapes

# ---- the saved graph's literals, attributes and shapes ------------------------------------------------------

IR = """# Total params: 2
# Params:
%para1_fc.weight: <Ref[Tensor[Float32]], (1, 16), ref_key=fc.weight, is_parameter>  :  has_default  :  IsWeight: true
%para2_inputs0: <Tensor[Float32], (4, 8)> : [4, 8]  :  <Float32xDefaultFormat[const vector]{4, 8}>  :  IsWeight: false

subgraph @kernel_graph0() {
  %0(CNode_1) = PrimFunc_MatMul(%para2_inputs0, %para1_fc.weight, Bool(0), Bool(1)) primitive_attrs: {IsFeatureMapOutput: Bool(1), IsFeatureMapInputList: (0, 2, 3), dst_type: F32, left_format: "DefaultFormat"} cnode_attrs: {checkpoint: Bool(1)}
      : (<Tensor[Float32], (4, 8)>, <Ref[Tensor[Float32]], (16, 8), ref_key=fc.weight>, <Bool, NoShape>, <Bool, NoShape>) -> (<Tensor[Float32], (4, 16)>)
      # Fullname with scope: (Default/fc-Dense/MatMul-op0)
  %1(CNode_2) = PrimFunc_LayerNorm(%0, %para1_fc.weight, %para1_fc.weight, I64(-1), I64(-1), F32(1e-05)) primitive_attrs: {transpose_a: Bool(1), axis: (I64(0), I64(1)), eps: Tensor(shape=[], dtype=Float32, value=1e-06)}
      : (<Tensor[Float32], (4, 16)>) -> (<Tuple[Tensor[Float32]*3]>)
      # Fullname with scope: (Default/ln-LayerNorm/LayerNorm-op0)
}
"""


def test_literal_arguments_attributes_and_shapes_are_read_from_the_ir():
    graph = parse_ir(IR.splitlines(True))
    matmul = graph.find("Default_fc-Dense_MatMul-op0")
    assert {slot: literal(text) for slot, text in matmul.literals.items()} == {2: False, 3: True}
    assert attributes(matmul)["IsFeatureMapInputList"] == (0, 2, 3)
    assert attributes(matmul)["left_format"] == "DefaultFormat"
    assert "dst_type" not in attributes(matmul)            # a bare type name is not a literal
    assert shapes(matmul) == ([(4, 8), (16, 8), None, None], [(4, 16)])
    norm = graph.find("Default_ln-LayerNorm_LayerNorm-op0")
    assert {slot: literal(text) for slot, text in norm.literals.items()} == {3: -1, 4: -1, 5: 1e-05}
    assert attributes(norm) == {"transpose_a": True, "axis": (0, 1), "eps": 1e-06}
    assert graph.data_inputs == {"inputs0"}                # the batch, not the weight


@pytest.mark.parametrize("text", ["%12", "UMonad[U]", "Tensor(shape=[2])", "F32", "(%1, %2)"])
def test_what_is_not_a_literal_is_refused(text):
    with pytest.raises(ValueError):
        literal(text)


# ---- precisions ----------------------------------------------------------------------------------------------

def test_bfloat16_rounds_to_nearest_even_and_overflows_to_inf():
    bf16 = Precision("bfloat16")
    one_ulp = 2.0 ** -7                                  # bfloat16 keeps 7 mantissa bits
    values = np.array([1 + one_ulp / 2, 1 + 3 * one_ulp / 2, 3.3e38, 3.4e38, np.nan, -2.5], dtype=np.float32)
    got = bf16.round(values)
    assert got[0] == 1.0                                  # a tie goes to the even neighbour
    assert got[1] == 1 + 2 * one_ulp
    assert got[2] == pytest.approx(3.3e38, rel=1e-2) and np.isinf(got[3])
    assert np.isnan(got[4]) and got[5] == -2.5


def test_sqrt_grad_overflows_float16_and_not_float32():
    y = np.array([0.004, 0.5], dtype=np.float32)
    dy = np.array([4636.0, 2.0], dtype=np.float16)
    low = run("SqrtGrad", [y, dy], {}, "float16")[0]
    wide = run("SqrtGrad", [y, dy], {}, "float32")[0]
    assert low.dtype == np.float16 and np.isinf(low[0]) and low[1] == 2.0
    assert wide[0] == pytest.approx(4636 / 0.008, rel=1e-3)


def test_matmul_takes_the_transpose_flags():
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    b = np.arange(8, dtype=np.float32).reshape(4, 2)
    out = run("MatMul", [a, b], {"transpose_a": False, "transpose_b": True}, "float32")[0]
    np.testing.assert_allclose(out, a @ b.T)
    out = run("BatchMatMul", [a[None], a[None]], {"transpose_a": True, "transpose_b": False}, "float64")[0]
    np.testing.assert_allclose(out, (a.T @ a)[None])
    with pytest.raises(RecomputeError, match="do not multiply"):
        run("MatMul", [a, b], {}, "float32")


def test_a_cast_is_the_value_carried_in_the_precision():
    x = np.array([1e5, 1.0], dtype=np.float32)
    assert np.isinf(run("Cast", [x], {}, "float16", ["float16"])[0][0])
    assert run("Cast", [x], {}, "float32", ["float16"])[0][0] == 1e5


def _rms_norm_reference(x, gamma, eps):      # MindSpore's documented RmsNorm: x / sqrt(mean(x^2) + eps) * gamma
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * gamma


def test_rms_norm_follows_its_documented_formula():
    rs = np.random.RandomState(0)
    x, gamma = rs.normal(size=(3, 8)), rs.normal(size=8)
    y, rstd = run("RmsNorm", [x, gamma], {"epsilon": 1e-6}, "float64")
    np.testing.assert_allclose(y, _rms_norm_reference(x, gamma, 1e-6), rtol=1e-12)
    np.testing.assert_allclose(rstd, 1 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6), rtol=1e-12)


def _numeric_grad(f, x, dy, h=1e-6):
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += h
        down[i] -= h
        grad[i] = ((f(up) - f(down)) * dy).sum() / (2 * h)
    return grad


def test_rms_norm_grad_is_the_derivative_of_rms_norm():
    rs = np.random.RandomState(1)
    x, gamma, dy = rs.normal(size=(3, 8)), rs.normal(size=8), rs.normal(size=(3, 8))
    _y, rstd = run("RmsNorm", [x, gamma], {"epsilon": 1e-6}, "float64")
    dx, dgamma = run("RmsNormGrad", [dy, x, rstd, gamma], {}, "float64")
    np.testing.assert_allclose(dx, _numeric_grad(lambda v: _rms_norm_reference(v, gamma, 1e-6), x, dy), rtol=1e-6,
                               atol=1e-8)
    np.testing.assert_allclose(dgamma, _numeric_grad(lambda g: _rms_norm_reference(x, g, 1e-6), gamma, dy),
                               rtol=1e-6, atol=1e-8)


def test_softmax_grads_are_the_derivative_of_softmax():
    rs = np.random.RandomState(2)
    x, dy = rs.normal(size=(2, 5)), rs.normal(size=(2, 5))
    y = run("Softmax", [x], {"axis": (-1,)}, "float64")[0]
    expected = _numeric_grad(lambda v: run("Softmax", [v], {"axis": (-1,)}, "float64")[0], x, dy)
    np.testing.assert_allclose(run("SoftmaxBackward", [dy, y], {"dim": -1}, "float64")[0], expected, rtol=1e-6,
                               atol=1e-9)
    np.testing.assert_allclose(run("SoftmaxGrad", [y, dy], {}, "float64")[0], expected, rtol=1e-6, atol=1e-9)


def test_sgd_gives_the_update_it_adds_from_what_it_does_not_overwrite():
    grad, lr = np.array([50.0, -50.0], np.float32), np.array(3e38, np.float32)
    unchanged = [np.zeros(2, np.float32), grad, lr, np.zeros(2, np.float32), np.array(0, np.float32),
                 np.ones(2, np.float32)]
    assert not np.all(np.isfinite(run("SGD", unchanged, {}, "float32")[0]))
    np.testing.assert_allclose(run("SGD", unchanged, {}, "float64")[0], [-1.5e40, 1.5e40], rtol=1e-6)
    with pytest.raises(RecomputeError, match="weight decay"):
        run("SGD", unchanged, {"weight_decay": 0.1}, "float32")


# ---- comparing with the dump ---------------------------------------------------------------------------------

def test_disagreement_sees_classes_and_differences_beyond_the_tensor_scale():
    dumped = np.array([1.0, np.nan, np.inf, 100.0, 0.0], np.float32)
    same = np.array([1.00001, np.nan, np.inf, 100.0, 1e-4], np.float32)
    assert not disagreement(same, dumped, "float32", "float32").any()
    other = np.array([1.0, 3.0, np.inf, 100.0, 0.0], np.float32)
    assert disagreement(other, dumped, "float32", "float32").tolist() == [False, True, False, False, False]
    # a float32 payload under a float16 name: 1.3e5 is inf as the dump declares it
    assert not disagreement(np.array([np.inf]), np.array([1.3e5], np.float32), "float16", "float16").any()


def test_every_kernel_has_a_signature_and_every_signature_a_kernel():
    assert set(recompute.signatures()) == set(recompute.KERNELS)
    assert recompute.POINTWISE <= set(recompute.KERNELS) and recompute.UPDATES <= set(recompute.KERNELS)
