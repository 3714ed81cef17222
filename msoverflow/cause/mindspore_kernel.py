"""Recompute an op with MindSpore itself (PyNative, CPU) for ops without a numpy reference kernel.

It runs in a subprocess with a bounded time, only when MindSpore is installed: the analyzing process never imports
it. The inputs and arguments go through a temporary directory (npy files and a JSON spec); the outputs come back
the same way. MindSpore's CPU kernels compute float16 and bfloat16 ops in float32, so a low-precision result is the
float32 one rounded (the caller rounds it).

    python -m msoverflow.cause.mindspore_kernel DIR      (the worker; DIR holds spec.json and input_N.npy)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence

import numpy as np

from .recompute import Precision, RecomputeError

TIMEOUT_S = 180          # importing MindSpore alone takes seconds; a CPU kernel on an origin's inputs takes less
_PRIMITIVE_MODULES = ("mindspore.ops.auto_generate.gen_ops_prim", "mindspore.ops.operations",
                      "mindspore.ops.operations._grad_ops", "mindspore.ops.operations._inner_ops")


def _jsonable(value):
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    raise TypeError(type(value).__name__)


def _spec(op_type: str, by_slot: Dict[int, np.ndarray], node, precisions: Sequence[str]) -> dict:
    literals, attrs, tensor_slots = {}, {}, None
    if node is not None:
        from ..readers.ir_graph import attributes, literal, shapes
        for slot, text in node.literals.items():
            try:
                literals[str(slot)] = _jsonable(literal(text))
            except (ValueError, TypeError):
                continue
        for name, value in attributes(node).items():
            try:
                attrs[name] = _jsonable(value)
            except TypeError:
                continue
        inputs, _outputs = shapes(node)
        if inputs:       # the saved graph says which slots are tensors; the others are scalar arguments
            tensor_slots = [slot for slot, shape in enumerate(inputs) if shape is not None]
    arity = max([*by_slot, *(int(s) for s in literals)], default=-1) + 1
    return {"op_type": op_type, "arity": arity, "inputs": sorted(by_slot), "literals": literals, "attrs": attrs,
            "tensor_slots": tensor_slots, "precisions": [_computed_in(p) for p in precisions]}


def _computed_in(precision: str) -> str:
    return "float32" if precision in ("float16", "bfloat16") else precision


def run_in_subprocess(op_type: str, by_slot: Dict[int, np.ndarray], node, precisions: Sequence[str],
                      out_dtypes: Sequence[Optional[str]] = ()) -> Dict[str, List[np.ndarray]]:
    """{precision: outputs} of `op_type` run by MindSpore on these inputs (slot -> array)."""
    del out_dtypes       # MindSpore infers the outputs' dtypes itself
    with tempfile.TemporaryDirectory(prefix="msoverflow_recompute_") as work:
        for slot, array in by_slot.items():
            np.save(os.path.join(work, f"input_{slot}.npy"), np.asarray(array), allow_pickle=False)
        with open(os.path.join(work, "spec.json"), "w") as fh:
            json.dump(_spec(op_type, by_slot, node, precisions), fh)
        env = dict(os.environ, GLOG_v=os.environ.get("GLOG_v", "3"))
        try:
            done = subprocess.run([sys.executable, "-m", __name__, work], capture_output=True, text=True,
                                  timeout=TIMEOUT_S, env=env)
        except subprocess.TimeoutExpired:
            raise RecomputeError(f"MindSpore did not recompute {op_type} within {TIMEOUT_S} s") from None
        if done.returncode != 0:
            lines = [line for line in (done.stderr or "").splitlines() if line.strip()]
            why = next((line for line in reversed(lines) if "Error" in line), lines[-1] if lines else "no output")
            raise RecomputeError(f"MindSpore could not recompute {op_type}: {why.strip()[:200]}")
        results: Dict[str, List[np.ndarray]] = {}
        for precision in precisions:
            computed = _computed_in(precision)
            outputs, k = [], 0
            while os.path.exists(os.path.join(work, f"out_{computed}_{k}.npy")):
                outputs.append(Precision(precision).round(np.load(os.path.join(work, f"out_{computed}_{k}.npy"))))
                k += 1
            if not outputs:
                raise RecomputeError(f"MindSpore gave no output for {op_type} in {computed}")
            results[precision] = outputs
        return results


# ---- the worker (runs in the subprocess) ------------------------------------------------------------------------

def _primitive_class(op_type: str):
    import importlib
    for name in _PRIMITIVE_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        cls = getattr(module, op_type, None)
        if isinstance(cls, type):
            return cls
    raise SystemExit(f"RecomputeError: MindSpore has no primitive {op_type}")


def _call(cls, attrs: dict, args: list):
    """The primitive built and called. A graph passes some of a primitive's constructor arguments as trailing
    inputs (StridedSlice's masks): those beyond what __call__ takes go to the constructor, in its order."""
    import inspect
    init = [p for p in list(inspect.signature(cls.__init__).parameters)[1:]]
    call = [p for p in list(inspect.signature(cls.__call__).parameters.values())[1:]
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    kwargs = {k: (tuple(v) if isinstance(v, list) else v) for k, v in attrs.items() if k in init}
    if len(args) > len(call):
        kwargs.update(zip([p for p in init if p not in kwargs], args[len(call):], strict=False))
        args = args[:len(call)]
    return cls(**kwargs)(*args)


def _argument(array: np.ndarray, scalar: bool):
    if not scalar:
        return array
    value = array.tolist()
    return tuple(value) if isinstance(value, list) else value


def main(argv=None) -> int:
    work = (argv or sys.argv[1:])[0]
    with open(os.path.join(work, "spec.json")) as fh:
        spec = json.load(fh)
    import mindspore as ms
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    cls = _primitive_class(spec["op_type"])
    tensor_slots = spec["tensor_slots"]
    for precision in dict.fromkeys(spec["precisions"]):
        args = []
        for slot in range(spec["arity"]):
            if slot in spec["inputs"]:
                array = np.load(os.path.join(work, f"input_{slot}.npy"))
                scalar = tensor_slots is not None and slot not in tensor_slots
                if array.dtype.kind == "f" and not scalar:
                    array = array.astype(precision)
                value = _argument(array, scalar)
                args.append(value if scalar else ms.Tensor(value))
            elif str(slot) in spec["literals"]:
                literal = spec["literals"][str(slot)]
                args.append(tuple(literal) if isinstance(literal, list) else literal)
            else:
                raise SystemExit(f"RecomputeError: input {slot} of {spec['op_type']} was not dumped")
        out = _call(cls, spec["attrs"], args)
        for k, value in enumerate(out if isinstance(out, (tuple, list)) else [out]):
            np.save(os.path.join(work, f"out_{precision}_{k}.npy"), value.asnumpy(), allow_pickle=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
