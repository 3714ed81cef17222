"""The worker of the MindSpore recompute (msoverflow/cause/mindspore_kernel.py), run in its own process.

It is started by its file path as `python -I <this file> DIR`, from an empty temporary working directory, so
neither the working directory nor PYTHONPATH is on sys.path (a numpy.py or json.py there never runs), and it
imports nothing of msoverflow. DIR holds spec.json and input_N.npy; the outputs come back as out_<precision>_K.npy.
It refuses a spec that names code (the parent never writes one), checks the element budget on the shapes
MindSpore infers before computing, and writes no output larger than the budget allows.
"""
import os
import sys

# Started by file path, Python puts this file's directory first on sys.path: take it off before any other import,
# so no module beside this one can stand in for one MindSpore or numpy imports.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import json  # noqa: E402

_PRIMITIVE_MODULES = ("mindspore.ops.auto_generate.gen_ops_prim", "mindspore.ops.operations",
                      "mindspore.ops.operations._grad_ops", "mindspore.ops.operations._inner_ops")
_CODE_OPS = ("Custom", "PyFunc", "PyExecute", "PyInterpret", "ScriptOp")


def _fail(message):
    sys.stderr.write(f"RecomputeError: {message}\n")
    raise SystemExit(3)


def _primitive_class(op_type):
    import importlib
    for name in _PRIMITIVE_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        cls = getattr(module, op_type, None)
        if isinstance(cls, type):
            return cls
    _fail(f"MindSpore has no primitive {op_type}")


def _call(cls, attrs, args):
    """The primitive built and called. A graph passes some of a primitive's constructor arguments as trailing
    inputs (StridedSlice's masks): those beyond what __call__ takes go to the constructor, in its order."""
    import inspect
    init = list(inspect.signature(cls.__init__).parameters)[1:]
    call = [p for p in list(inspect.signature(cls.__call__).parameters.values())[1:]
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    kwargs = {k: (tuple(v) if isinstance(v, list) else v) for k, v in attrs.items() if k in init}
    if len(args) > len(call):
        kwargs.update(zip([p for p in init if p not in kwargs], args[len(call):], strict=False))
        args = args[:len(call)]
    return cls(**kwargs)(*args)


def _argument(array, scalar):
    if not scalar:
        return array
    value = array.tolist()
    return tuple(value) if isinstance(value, list) else value


def main(argv):
    work = argv[0]
    with open(os.path.join(work, "spec.json")) as fh:
        spec = json.load(fh)
    op_type = spec["op_type"]
    if op_type.split("_")[0] in _CODE_OPS or spec.get("takes_code"):
        _fail(f"{op_type} runs code; it is not recomputed")
    import numpy as np
    budget = int(spec["budget"])
    import mindspore as ms
    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    cls = _primitive_class(op_type)
    tensor_slots = spec["tensor_slots"]
    held = sum(int(np.load(os.path.join(work, f"input_{s}.npy"), mmap_mode="r").size) for s in spec["inputs"])
    for precision in dict.fromkeys(spec["precisions"]):
        args = []
        for slot in range(spec["arity"]):
            if slot in spec["inputs"]:
                array = np.load(os.path.join(work, f"input_{slot}.npy"), allow_pickle=False)
                scalar = tensor_slots is not None and slot not in tensor_slots
                if array.dtype.kind == "f" and not scalar:
                    array = array.astype(precision)
                value = _argument(array, scalar)
                args.append(value if scalar else ms.Tensor(value))
            elif str(slot) in spec["literals"]:
                literal = spec["literals"][str(slot)]
                args.append(tuple(literal) if isinstance(literal, list) else literal)
            else:
                _fail(f"input {slot} of {op_type} was not dumped")
        out = _call(cls, spec["attrs"], args)
        outs = out if isinstance(out, (tuple, list)) else [out]
        held += sum(int(np.prod(value.shape, dtype=np.int64)) for value in outs)
        if held > budget:
            _fail(f"{op_type} computed {held:,} elements, more than its budget of {budget:,}")
        for k, value in enumerate(outs):
            np.save(os.path.join(work, f"out_{precision}_{k}.npy"), value.asnumpy(), allow_pickle=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
