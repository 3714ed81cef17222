"""Reference kernels: an op recomputed from its dumped inputs, in a chosen precision, with numpy.

A precision is float16, bfloat16, float32 or float64. Inputs are rounded to it; elementwise math runs in it (numpy
rounds every step to float16, as a float16 kernel does; bfloat16 steps run in float32, whose range it shares, and
results are rounded to bfloat16); sums, products of matrices and normalisations accumulate in float32 (float64
for float64), as the devices' kernels do, and round their results. Which input slot holds what, and where an
op's arguments come from, is data (msoverflow/data/op_knowledge.yaml `recompute`); the numerics are here.

Ops without a kernel here are recomputed by MindSpore in a subprocess when it is installed
(msoverflow/cause/mindspore_kernel.py); analysis itself never imports MindSpore.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from ..dtypes import FLOAT_MAX
from ..resources import load_yaml

LOW_PRECISION = ("float16", "bfloat16")
# Finest first: comparing two values is done in the coarser of their precisions.
_FINENESS = {"float16": 0, "bfloat16": 0, "float32": 1, "float64": 2}
# Relative agreement expected between a recompute and a kernel's result in a precision (several roundings, other
# summation orders), measured against the tensor's own scale so cancellation in one element does not count.
TOLERANCE = {"float16": 1e-2, "bfloat16": 4e-2, "float32": 1e-4, "float64": 1e-4}


class RecomputeError(Exception):
    """The op cannot be recomputed from what was dumped; the message says why."""


def _bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), kept as float32; NaN stays NaN."""
    x = np.ascontiguousarray(values, dtype=np.float32)
    bits = x.view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000))
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, out)


@dataclass(frozen=True)
class Precision:
    name: str

    @property
    def work(self):
        return {"float16": np.float16, "float64": np.float64}.get(self.name, np.float32)

    @property
    def accumulate(self):
        return np.float64 if self.name == "float64" else np.float32

    @property
    def limit(self) -> float:
        return FLOAT_MAX[self.name]

    def round(self, values) -> np.ndarray:
        """A float result rounded to this precision (non-float values pass unchanged)."""
        values = np.asarray(values)
        if values.dtype.kind != "f":
            return values
        with np.errstate(all="ignore"):
            if self.name == "bfloat16":
                return _bfloat16(values)
            return values.astype(self.work)

    def wide(self, values) -> np.ndarray:
        """A float value in this precision, widened for accumulation."""
        return self.round(values).astype(self.accumulate)


@dataclass
class Call:
    """One op call to recompute: tensor inputs (float ones already in the precision), arguments, and the declared
    dtypes of the outputs (a Cast's target)."""
    tensors: List[np.ndarray]
    args: Dict[str, Any]           # literal arguments and attributes, as the saved graph gives them
    p: Precision
    out_dtypes: List[Optional[str]] = field(default_factory=list)


Kernel = Callable[[Call], List[np.ndarray]]


# ---- elementwise ------------------------------------------------------------------------------------------------

def _unary(fn) -> Kernel:
    return lambda c: [c.p.round(fn(c.tensors[0]))]


def _binary(fn) -> Kernel:
    return lambda c: [c.p.round(fn(c.tensors[0], c.tensors[1]))]


def _div_no_nan(a, b):
    return np.where(b == 0, np.zeros_like(a * b), a / np.where(b == 0, 1, b))


def _pow(a, b):
    return np.power(a, b)


def _addn(c: Call) -> List[np.ndarray]:
    total = np.zeros(np.broadcast_shapes(*[t.shape for t in c.tensors]), dtype=c.p.work)
    for t in c.tensors:
        total = c.p.round(total + t)
    return [total]


def _cast(c: Call) -> List[np.ndarray]:
    """Computing a Cast in a precision means carrying the value in it: a float32 -> float16 Cast recomputed in
    float32 keeps the float32 value; in the dumped dtype (the target's), it rounds to it."""
    target = c.out_dtypes[0] if c.out_dtypes else None
    x = c.tensors[0]
    if target in FLOAT_MAX and x.dtype.kind in "fiub":
        # to a float: the value carried in the precision (an int32 69998 is inf in float16, exact in float32)
        with np.errstate(all="ignore"):
            return [c.p.round(x.astype(np.float64) if x.dtype.kind != "f" else x)]
    if target is None:
        raise RecomputeError("the Cast's target dtype is not known")
    with np.errstate(all="ignore"):
        return [np.asarray(x).astype(target)]


# Gradients of elementwise ops: (y, dy) -> dx. Slot orders as MindSpore's CPU kernels take them (checked against
# real dumps: SqrtGrad's input 0 is the forward output y, input 1 the incoming gradient).
def _sqrt_grad(c: Call):
    y, dy = c.tensors
    return [c.p.round(dy / (y * 2))]


def _rsqrt_grad(c: Call):
    y, dy = c.tensors
    return [c.p.round(dy * (y * y * y) * -0.5)]


def _reciprocal_grad(c: Call):
    y, dy = c.tensors
    return [c.p.round(-dy * (y * y))]


def _sigmoid_grad(c: Call):
    y, dy = c.tensors
    return [c.p.round(dy * y * (1 - y))]


def _tanh_grad(c: Call):
    y, dy = c.tensors
    return [c.p.round(dy * (1 - y * y))]


def _relu_grad(c: Call):
    dy, y = c.tensors
    return [c.p.round(np.where(y > 0, dy, np.zeros_like(dy)))]


def _select(c: Call):
    cond, x, y = c.tensors
    return [c.p.round(np.where(cond.astype(bool), x, y))]


# ---- products and reductions (accumulated wider, rounded once) --------------------------------------------------

def _swap_last(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2) if x.ndim >= 2 else x


def _matmul(c: Call):
    a, b = (c.p.wide(t) for t in c.tensors)
    if c.args.get("transpose_a"):
        a = _swap_last(a)
    if c.args.get("transpose_b"):
        b = _swap_last(b)
    try:
        return [c.p.round(np.matmul(a, b))]
    except ValueError as exc:
        raise RecomputeError(f"the inputs' shapes do not multiply ({exc})") from None


def _channel_axis(x: np.ndarray, data_format) -> int:
    # MindSpore's data_format enum: 1 is NHWC (channels last); NCHW and 2-D inputs put channels on axis 1.
    return x.ndim - 1 if data_format in (1, "NHWC") else min(1, x.ndim - 1)


def _bias_add(c: Call):
    x, bias = c.tensors
    axis = _channel_axis(x, c.args.get("data_format"))
    shape = [1] * x.ndim
    shape[axis] = -1
    return [c.p.round(c.p.wide(x) + c.p.wide(bias).reshape(shape))]


def _bias_add_grad(c: Call):
    dy = c.p.wide(c.tensors[0])
    axis = _channel_axis(dy, c.args.get("data_format"))
    return [c.p.round(dy.sum(axis=tuple(i for i in range(dy.ndim) if i != axis)))]


def _axes(x: np.ndarray, axis) -> Optional[tuple]:
    if axis is None or axis == () or axis == []:
        return None
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    return tuple(int(a) % max(x.ndim, 1) for a in axes)


def _reduce(fn) -> Kernel:
    def kernel(c: Call):
        x = c.tensors[0]
        if c.args.get("skip_mode") and _axes(x, c.args.get("axis")) is None:
            return [x]
        values = c.p.wide(x) if x.dtype.kind == "f" else x
        return [c.p.round(fn(values, axis=_axes(x, c.args.get("axis")), keepdims=bool(c.args.get("keep_dims"))))]
    return kernel


def _softmax_axis(c: Call, name: str) -> int:
    axis = c.args.get(name, -1)
    return int(axis[0] if isinstance(axis, (tuple, list)) else axis)


def _softmax(c: Call):
    x = c.p.wide(c.tensors[0])
    axis = _softmax_axis(c, "axis")
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return [c.p.round(e / e.sum(axis=axis, keepdims=True))]


def _log_softmax(c: Call):
    x = c.p.wide(c.tensors[0])
    axis = _softmax_axis(c, "axis")
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return [c.p.round(shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True)))]


def _softmax_grad_of(y, dy, axis, p: Precision):
    y, dy = p.wide(y), p.wide(dy)
    return [p.round((dy - (dy * y).sum(axis=axis, keepdims=True)) * y)]


def _softmax_backward(c: Call):
    dy, y = c.tensors
    return _softmax_grad_of(y, dy, _softmax_axis(c, "dim"), c.p)


def _softmax_grad(c: Call):
    y, dy = c.tensors
    return _softmax_grad_of(y, dy, -1, c.p)


def _log_softmax_grad(c: Call):
    y, dy = (c.p.wide(t) for t in c.tensors)     # y: the LogSoftmax output
    axis = _softmax_axis(c, "axis")
    return [c.p.round(dy - np.exp(y) * dy.sum(axis=axis, keepdims=True))]


def _norm_axes(x: np.ndarray, begin) -> tuple:
    begin = int(begin) % x.ndim if x.ndim else 0
    return tuple(range(begin, x.ndim))


def _layer_norm(c: Call):
    x, gamma, beta = (c.p.wide(t) for t in c.tensors)
    axes = _norm_axes(x, c.args.get("begin_norm_axis", 1))
    mean = x.mean(axis=axes, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(variance + float(c.args.get("epsilon", 1e-7)))
    y = (x - mean) * rstd * gamma + beta
    return [c.p.round(y), c.p.round(mean), c.p.round(variance)]


def _layer_norm_grad(c: Call):
    x, dy, variance, mean, gamma = (c.p.wide(t) for t in c.tensors)
    axes = _norm_axes(x, c.args.get("begin_norm_axis", 1))
    params = _norm_axes(x, c.args.get("begin_params_axis", 1))
    rstd = 1.0 / np.sqrt(variance + float(c.args.get("epsilon", 1e-7)))
    xhat = (x - mean) * rstd
    g = dy * gamma
    dx = rstd * (g - g.mean(axis=axes, keepdims=True) - xhat * (g * xhat).mean(axis=axes, keepdims=True))
    outer = tuple(i for i in range(x.ndim) if i not in params)
    return [c.p.round(dx), c.p.round((dy * xhat).sum(axis=outer)), c.p.round(dy.sum(axis=outer))]


def _rms_norm(c: Call):
    x, gamma = (c.p.wide(t) for t in c.tensors)
    axes = tuple(range(x.ndim - gamma.ndim, x.ndim)) if gamma.ndim else (x.ndim - 1,)
    rstd = 1.0 / np.sqrt((x * x).mean(axis=axes, keepdims=True) + float(c.args.get("epsilon", 1e-6)))
    return [c.p.round(x * rstd * gamma), c.p.round(rstd)]


def _rms_norm_grad(c: Call):
    dy, x, rstd, gamma = (c.p.wide(t) for t in c.tensors)
    axes = tuple(range(x.ndim - gamma.ndim, x.ndim)) if gamma.ndim else (x.ndim - 1,)
    rstd = rstd.reshape(rstd.shape + (1,) * (x.ndim - rstd.ndim)) if rstd.ndim < x.ndim else rstd
    g = dy * gamma
    xhat = x * rstd
    dx = rstd * (g - xhat * (g * xhat).mean(axis=axes, keepdims=True))
    outer = tuple(i for i in range(x.ndim) if i not in axes)
    return [c.p.round(dx), c.p.round((dy * xhat).sum(axis=outer))]


def _sparse_softmax_cross_entropy(c: Call):
    logits, labels = c.tensors
    x = c.p.wide(logits)
    shifted = x - x.max(axis=-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    labels = labels.astype(np.int64).reshape(-1)
    if labels.size != x.shape[0] or (labels.size and (labels.min() < 0 or labels.max() >= x.shape[-1])):
        raise RecomputeError("labels do not index the logits")
    if c.args.get("is_grad"):
        grad = np.exp(log_p)
        grad[np.arange(labels.size), labels] -= 1
        return [c.p.round(grad / max(labels.size, 1))]
    return [c.p.round(-log_p[np.arange(labels.size), labels].mean())]


def _sgd_update(c: Call):
    """MindSpore's SGD writes the parameter (slot 0), accum (3) and stat (5) in place, and a dump reads them after
    it ran: the parameter before the update is gone. What can be recomputed is the update it added, -lr * accum,
    from what it does not overwrite: accum is the gradient on the first step (stat > 0) or without momentum, else
    the dumped accum is already this step's."""
    _param, grad, lr, accum, momentum, stat = (c.p.wide(t) for t in c.tensors)
    if c.args.get("weight_decay"):
        raise RecomputeError("SGD with weight decay adds the weights before the update, which the dump overwrote")
    first = bool(np.all(stat > 0)) or not np.any(momentum)
    velocity = grad if first else accum
    step = grad + momentum * velocity if c.args.get("nesterov") else velocity
    return [c.p.round(-lr * step)]


KERNELS: Dict[str, Kernel] = {
    "Add": _binary(np.add), "Sub": _binary(np.subtract), "Mul": _binary(np.multiply),
    "RealDiv": _binary(np.true_divide), "Div": _binary(np.true_divide), "DivNoNan": _binary(_div_no_nan),
    "Maximum": _binary(np.maximum), "Minimum": _binary(np.minimum), "Pow": _binary(_pow),
    "SquaredDifference": _binary(lambda a, b: (a - b) * (a - b)), "Select": _select, "AddN": _addn,
    "Sqrt": _unary(np.sqrt), "Rsqrt": _unary(lambda x: 1 / np.sqrt(x)), "Exp": _unary(np.exp), "Log": _unary(np.log),
    "Log1p": _unary(np.log1p), "Expm1": _unary(np.expm1), "Square": _unary(np.square), "Neg": _unary(np.negative),
    "Abs": _unary(np.abs), "Sign": _unary(np.sign), "Reciprocal": _unary(lambda x: 1 / x),
    "Sigmoid": _unary(lambda x: 1 / (1 + np.exp(-x))), "Tanh": _unary(np.tanh),
    "ReLU": _unary(lambda x: np.maximum(x, 0)), "SiLU": _unary(lambda x: x / (1 + np.exp(-x))), "Cast": _cast,
    "SqrtGrad": _sqrt_grad, "RsqrtGrad": _rsqrt_grad, "ReciprocalGrad": _reciprocal_grad,
    "SigmoidGrad": _sigmoid_grad, "TanhGrad": _tanh_grad, "ReluGrad": _relu_grad,
    "MatMul": _matmul, "BatchMatMul": _matmul, "BiasAdd": _bias_add, "BiasAddGrad": _bias_add_grad,
    "ReduceSum": _reduce(np.sum), "ReduceMean": _reduce(np.mean), "ReduceMax": _reduce(np.max),
    "ReduceMin": _reduce(np.min), "Softmax": _softmax, "LogSoftmax": _log_softmax,
    "SoftmaxBackward": _softmax_backward, "SoftmaxGrad": _softmax_grad, "LogSoftmaxGrad": _log_softmax_grad,
    "LayerNorm": _layer_norm, "LayerNormGrad": _layer_norm_grad, "RmsNorm": _rms_norm, "RmsNormGrad": _rms_norm_grad,
    "SparseSoftmaxCrossEntropyWithLogits": _sparse_softmax_cross_entropy, "SGD": _sgd_update,
}


# Elementwise ops: an input of the output's size is that many values, whatever shape the dump gave it.
POINTWISE = frozenset({"Add", "Sub", "Mul", "RealDiv", "Div", "DivNoNan", "Maximum", "Minimum", "Pow",
                       "SquaredDifference", "Select", "AddN", "Sqrt", "Rsqrt", "Exp", "Log", "Log1p", "Expm1",
                       "Square", "Neg", "Abs", "Sign", "Reciprocal", "Sigmoid", "Tanh", "ReLU", "SiLU", "Cast",
                       "SqrtGrad", "RsqrtGrad", "ReciprocalGrad", "SigmoidGrad", "TanhGrad", "ReluGrad"})

# Kernels of ops that write their inputs in place give the update they add, not the written value: its being
# finite or not says whether the op could have made a non-finite value, never that the dump disagrees.
UPDATES = frozenset({"SGD"})


# ---- signatures (data) ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Signature:
    tensors: Optional[int]                       # None: every dumped input (AddN)
    args: Dict[str, tuple]                       # name -> (slot or None, default)


@functools.lru_cache(maxsize=1)
def signatures() -> Dict[str, Signature]:
    table = load_yaml("op_knowledge.yaml").get("recompute") or {}
    found = {}
    for op, spec in table.items():
        count = spec.get("tensors")
        found[op] = Signature(None if count == "all" else int(count),
                              {name: (pair[0], pair[1]) for name, pair in (spec.get("args") or {}).items()})
    return found


def supported(op_type: str) -> bool:
    return op_type in KERNELS and op_type in signatures()


def run(op_type: str, inputs: Sequence[np.ndarray], args: Dict[str, object], precision: str,
        out_dtypes: Sequence[Optional[str]] = ()) -> List[np.ndarray]:
    """The op's outputs recomputed in `precision` from its tensor inputs (float inputs are rounded to it)."""
    if op_type not in KERNELS:
        raise RecomputeError(f"no reference kernel for {op_type}")
    p = Precision(precision)
    tensors = [p.round(np.asarray(x)) if np.asarray(x).dtype.kind == "f" else np.asarray(x) for x in inputs]
    with np.errstate(all="ignore"):
        try:
            return [np.asarray(out) for out in KERNELS[op_type](Call(tensors, dict(args), p, list(out_dtypes)))]
        except (ValueError, IndexError, TypeError, ArithmeticError) as exc:
            # shapes the dump got wrong, missing inputs, arguments the saved graph gives as inf or NaN (an axis)
            raise RecomputeError(f"{op_type} could not be recomputed from these inputs and arguments "
                                 f"({type(exc).__name__}: {exc})") from None


# ---- comparing with the dump ------------------------------------------------------------------------------------

def coarser(a: str, b: Optional[str]) -> str:
    if b not in _FINENESS:
        return a
    return a if _FINENESS[a] <= _FINENESS[b] else b


def as_dumped(values: np.ndarray, declared: Optional[str]) -> np.ndarray:
    """A dumped float tensor as its declared dtype holds it (MindSpore CPU writes float32 bytes under float16
    names: 1.3e5 in such a file is inf in float16)."""
    values = np.asarray(values)
    if declared in _FINENESS and values.dtype.kind == "f":
        return Precision(declared).round(values)
    return values


def disagreement(recomputed: np.ndarray, dumped: np.ndarray, precision: str,
                 declared: Optional[str]) -> np.ndarray:
    """Boolean mask of the elements where a recompute in `precision` and the dumped values differ, both seen in
    the coarser of that precision and the declared dtype: a different class (NaN, +inf, -inf, finite), or finite
    values further apart than that precision's tolerance of the tensor's scale."""
    level = coarser(precision, declared)
    with np.errstate(all="ignore"):
        r = Precision(level).round(np.asarray(recomputed, dtype=np.float64)).astype(np.float64)
        d = Precision(level).round(np.asarray(dumped, dtype=np.float64)).astype(np.float64)
        if r.shape != d.shape:
            if r.size != d.size:
                raise RecomputeError(f"recomputed shape {r.shape} is not the dumped {d.shape}")
            r = r.reshape(d.shape)
        both = np.isfinite(r) & np.isfinite(d)
        scale = float(np.max(np.abs(d[both]))) if both.any() else 0.0
        tol = TOLERANCE[level]
        far = both & (np.abs(r - d) > tol * scale + tol * np.abs(d))
        differ_class = ~both & ~((np.isnan(r) & np.isnan(d)) | (r == d))
    return far | differ_class
