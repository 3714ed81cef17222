"""Inside the user's PyNative training process: watch every op and Cell for the first bad value.

Installed by the start-up hook (msoverflow/startup_hook.py) when `msoverflow hunt` runs a script, once
`mindspore.nn.cell` has loaded. What is watched:
  - every call of a Primitive from outside any other watched call: mindspore.ops and mint functions reach their
    kernels through Primitive instances (ops.sqrt -> Sqrt), so they are named by the Primitive, as in a dump;
  - Tensor arithmetic and math methods (x * y, x.sum(), x.astype(...));
  - every Cell call (forward outputs; it also gives each op its Cell path and class);
  - the gradient arriving at each watched output (Tensor.register_hook), i.e. what the consumers' backward made;
  - the parameter gradients handed to the optimizer.
In PyNative a tensor's declared dtype is its storage dtype, so a value beyond that dtype's range is an inf: each
watched tensor gets one device-side flag (all finite: IsFinite + ReduceAll); flags stay on the device and are
stacked and reduced once per step, so the host receives two scalars a step, never a finite tensor. A step is one
optimizer update: flags are reduced when the optimizer is called (the forward and backward of the step are done,
the Parameters not yet updated) and again after it (the optimizer's own ops).
The first bad flag names an op execution: a forward op, or (a bad gradient) the backward of the op that consumed
that tensor. Its inputs and outputs are saved as npy files in the MindSpore dump layout, so `msoverflow analyze`
judges them with the same rules as any dump and `msoverflow repro` re-runs the op from them.
Code that @jit compiles is not watched inside (it runs as one graph), and must still compile: the graph parser
is shown MindSpore's own Tensor methods while it compiles, and gradient hooks are objects, not functions.
"""
from __future__ import annotations

import atexit
import json
import linecache
import os
import sys
import threading
import time

from ..startup_hook import read_spec, when_cell_module_loads
from .layout import RECORD_NAME, npy_name, scoped_name, step_dir

_HERE = os.path.dirname(os.path.abspath(__file__))
# Tensor methods that compute values (shape changes and views cannot create a bad value).
_TENSOR_METHODS = {
    "__add__": "Add", "__radd__": "Add", "__sub__": "Sub", "__rsub__": "Sub", "__mul__": "Mul", "__rmul__": "Mul",
    "__truediv__": "RealDiv", "__rtruediv__": "RealDiv", "__matmul__": "MatMul", "__pow__": "Pow",
    "__rpow__": "Pow", "__neg__": "Neg", "add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div",
    "matmul": "MatMul", "pow": "Pow", "sqrt": "Sqrt", "rsqrt": "Rsqrt", "exp": "Exp", "log": "Log",
    "square": "Square", "sum": "ReduceSum", "mean": "ReduceMean", "abs": "Abs", "reciprocal": "Reciprocal",
    "astype": "Cast", "to": "Cast", "softmax": "Softmax", "norm": "Norm", "prod": "ReduceProd",
}
FORWARD, BACKWARD = "forward", "backward"
# Cells that run a collective inside @jit (not watched op by op): named by the collective, so the dump rules see a
# value that arrived from another rank, not one this rank made.
_COLLECTIVE_CELLS = {"DistributedGradReducer": "AllReduce", "PipelineGradReducer": "AllReduce"}


class OpRecord:
    """One watched op (or Cell) execution of the current step."""
    __slots__ = ("number", "op_type", "is_cell", "cell", "cell_type", "where", "inputs", "outputs", "grads")

    def __init__(self, number, op_type, is_cell, cell, cell_type, where, inputs, outputs):
        self.number, self.op_type, self.is_cell = number, op_type, is_cell
        self.cell, self.cell_type, self.where = cell, cell_type, where
        self.inputs, self.outputs = inputs, outputs
        self.grads = {}      # output slot -> the gradient that arrived at it


class _GradHook:
    """The gradient that comes back to a watched output. A callable object, not a function: a tensor carrying it
    into a @jit function under a gradient would have a function parsed as graph code (and refused)."""
    __slots__ = ("hunt", "record", "slot")

    def __init__(self, hunt, record, slot):
        self.hunt, self.record, self.slot = hunt, record, slot

    def __call__(self, grad):
        self.hunt.on_grad(self.record, self.slot, grad)


class Hunt:
    def __init__(self, spec: dict):
        import mindspore as ms
        from mindspore import ops
        self.ms, self.spec = ms, spec
        self.out_dir = spec["out_dir"]
        self.steps = set(spec.get("steps") or []) or None
        self.step = 0
        self.found = None            # the record written when the first bad value was found
        self.local = threading.local()
        self.cell_paths: dict = {}   # id(cell) -> (path, class) from each root Cell
        self.path_classes: dict = {}  # path -> class name, for every Cell segment of a scope name
        self.roots_seen = 0
        self.events: list = []       # (kind, record, slot, tensor) in the order they happened this step
        self.flags: list = []        # one device scalar per event: True when every value is finite
        self.consumers: dict = {}    # id(tensor) -> records that took it as input this step
        self.numbers = 0
        self.counts = {"ops": 0, "cells": 0, "grads": 0, "parameter_grads": 0, "tensors": 0}
        self.started = time.time()
        self._isfinite, self._all, self._stack = ops.isfinite, ops.all, ops.stack
        self._logical_not, self._argmax = ops.logical_not, ops.argmax
        self._float_types = {ms.float16, ms.float32, ms.float64, ms.bfloat16}
        self.skip_dirs = (os.path.dirname(os.path.abspath(ms.__file__)), _HERE,
                          os.path.dirname(os.path.abspath(threading.__file__)))
        self.exit_registered = False

    # -- what is being watched ------------------------------------------------------------------------------------
    @property
    def depth(self):
        return getattr(self.local, "depth", 0)

    def checking(self) -> bool:
        return self.found is None and (self.steps is None or self.step in self.steps)

    def is_float(self, value) -> bool:
        return isinstance(value, self.ms.Tensor) and value.dtype in self._float_types

    def floats(self, values):
        out = []
        for value in values:
            if isinstance(value, (tuple, list)):
                out += [v for v in value if self.is_float(v)]
            elif self.is_float(value):
                out.append(value)
        return out

    def caller(self):
        """(file, line) of the first frame outside MindSpore and msoverflow's hooks: the user's line."""
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename.startswith(self.skip_dirs):
            frame = frame.f_back
        return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None

    def cell_now(self):
        stack = getattr(self.local, "cells", None)
        return self.cell_paths.get(id(stack[-1]), (None, type(stack[-1]).__name__)) if stack else (None, None)

    def watch(self, kind, record, slot, tensor):
        self.events.append((kind, record, slot, tensor))
        self.flags.append(self._all(self._isfinite(tensor)))
        self.counts["tensors"] += 1

    def on_op(self, op_type, args, kwargs, result, is_cell=False, cell=None):
        """After a watched call: flag its float outputs, hook the gradients that will come back to them."""
        outputs = self.floats(result if isinstance(result, (tuple, list)) else [result])
        if not outputs:
            return
        inputs = self.floats(list(args) + list(kwargs.values()))
        path, cls = cell if cell else self.cell_now()
        self.numbers += 1
        record = OpRecord(self.numbers, op_type, is_cell, path, cls, self.caller(), inputs, outputs)
        self.counts["cells" if is_cell else "ops"] += 1
        for tensor in inputs:
            self.consumers.setdefault(id(tensor), []).append(record)
        for slot, tensor in enumerate(outputs):
            self.watch(FORWARD, record, slot, tensor)
            try:
                tensor.register_hook(_GradHook(self, record, slot))
            except Exception:   # noqa: BLE001 - a tensor outside any gradient computation takes no hook
                pass

    def on_grad(self, record, slot, grad):
        if self.checking() and self.is_float(grad):
            self.local.depth = self.depth + 1
            try:
                record.grads[slot] = grad
                self.counts["grads"] += 1
                self.watch(BACKWARD, record, slot, grad)
            finally:
                self.local.depth -= 1

    # -- steps ----------------------------------------------------------------------------------------------------
    def before_update(self, optimizer, args):
        """The optimizer is called: the step's forward and backward are done, the Parameters not yet updated."""
        if not self.checking():
            return
        grads = args[0] if args and isinstance(args[0], (tuple, list)) else ()
        params = list(getattr(optimizer, "parameters", ()) or ())
        for i, grad in enumerate(grads):
            if self.is_float(grad):
                name = params[i].name if i < len(params) else f"gradient {i}"
                param = params[i] if i < len(params) else None
                record = OpRecord(0, "Parameter", False, name, None, None, [param] if param is not None else [],
                                  [grad])
                self.watch("parameter-grad", record, 0, grad)
                self.counts["parameter_grads"] += 1
        self.flush()

    def after_update(self):
        if self.checking():
            self.flush()
        self.step += 1
        self.clear()

    def clear(self):
        self.events, self.flags, self.consumers = [], [], {}

    def flush(self):
        """Two scalars to the host: was any flag of the step false, and where is the first."""
        if not self.events:
            return
        self.local.depth = self.depth + 1
        try:
            bad = self._logical_not(self._stack(self.flags))
            if not bool(bad.any().asnumpy()):
                self.flags, self.events = [], []
                return
            first = int(self._argmax(bad.astype(self.ms.int32)).asnumpy())
            self.report(*self.events[first])
        finally:
            self.local.depth -= 1
        self.clear()

    # -- the first bad value ---------------------------------------------------------------------------------------
    def report(self, kind, record, slot, tensor):
        """Decide which execution made the bad tensor and save its inputs and outputs."""
        if kind == FORWARD:
            execution = dict(op_type=record.op_type, direction=FORWARD, record=record,
                             inputs=record.inputs, outputs=record.outputs)
        else:
            # A bad gradient at a tensor: made by the backward of the op(s) that consumed it, whose own
            # output gradients were still finite (their flags came earlier).
            owner = record.outputs[slot] if kind == BACKWARD else record.inputs[0] if record.inputs else None
            users = [r for r in self.consumers.get(id(owner), []) if r is not record] if owner is not None else []
            if users:
                user = users[-1]          # the last consumer's backward runs first
                grads = [user.grads[s] for s in sorted(user.grads)]
                from ..repro import VJP_FORMS
                if f"{user.op_type}Grad" in VJP_FORMS:
                    ins = [user.outputs[0]] + grads[:1]        # SqrtGrad(y, dy), as the kernel takes them
                else:
                    ins = list(user.inputs) + grads
                execution = dict(op_type=user.op_type, direction=BACKWARD, record=user, inputs=ins,
                                 outputs=[tensor], others=[u.op_type for u in users[:-1]])
            else:
                execution = dict(op_type=record.op_type, direction=BACKWARD, record=record, inputs=[],
                                 outputs=[tensor], note="the gradient arrived bad from an op that is not watched")
            if kind == "parameter-grad":
                execution["parameter"] = record.cell
        self.found = self.save(execution, kind)

    def rank(self) -> int:
        try:
            from mindspore.communication import get_rank
            return int(get_rank())
        except Exception:   # noqa: BLE001 - not initialised: a single process, or the launcher's env
            return int(os.environ.get("RANK_ID") or os.environ.get("MS_NODE_ID") or 0)

    def save(self, execution, kind):
        record = execution["record"]
        rank = self.rank()
        forward = _COLLECTIVE_CELLS.get(record.op_type, record.op_type) if record.is_cell else record.op_type
        op_type = forward + "Grad" if execution["direction"] == BACKWARD and not record.is_cell else forward
        attrs = record.cell.split(".") if record.cell and not execution.get("parameter") else []
        cells = [(a, self.path_classes.get(".".join(attrs[:i + 1]), "Cell")) for i, a in enumerate(attrs)]
        full_name = scoped_name(cells, op_type, record.number, execution["direction"] == BACKWARD, forward)
        directory = step_dir(self.out_dir, rank, self.step)
        os.makedirs(directory, exist_ok=True)
        import numpy as np
        stamp = int(time.time() * 1e6)
        files = []
        for io, tensors in (("input", execution["inputs"]), ("output", execution["outputs"])):
            for slot, tensor in enumerate(tensors):
                declared = str(tensor.dtype)
                array = tensor.astype(self.ms.float32).asnumpy() if declared == "BFloat16" else tensor.asnumpy()
                name = npy_name(op_type, full_name, record.number, stamp, io, slot, declared)
                np.save(os.path.join(directory, name), array)
                files.append(name)
        source = None
        if record.where:
            code = linecache.getline(record.where[0], record.where[1]).strip()
            source = {"file": record.where[0], "line": record.where[1], "code": code}
        return {"rank": rank, "step": self.step, "kind": kind, "direction": execution["direction"],
                "op_type": op_type, "forward_op": forward, "full_name": full_name, "cell": record.cell,
                "cell_type": record.cell_type, "is_cell": record.is_cell, "source": source, "files": files,
                "parameter": execution.get("parameter"), "other_consumers": execution.get("others") or [],
                "note": execution.get("note", "")}

    def write_record(self):
        """One record per process that ran a network (a launcher such as msrun runs none)."""
        if not self.roots_seen:
            return
        if self.found is None and self.events and self.checking():
            try:
                self.flush()
            except Exception as exc:   # noqa: BLE001 - the runtime may be going down; say so
                self.found = None
                sys.stderr.write(f"msoverflow hunt: could not check the last events at exit: {exc}\n")
        rank = self.rank()
        record = {"rank": rank, "pid": os.getpid(), "steps_seen": self.step, "found": self.found,
                  "steps_checked": sorted(self.steps) if self.steps else None, "counts": self.counts,
                  "seconds": round(time.time() - self.started, 3)}
        self.save_record(record)

    def save_record(self, record: dict) -> None:
        """Written whole or not at all (temporary file and rename): a rank killed mid-write leaves no cut record."""
        from ..errors import UserError
        from ..safeio import write_atomic
        try:
            os.makedirs(self.out_dir, exist_ok=True)
            write_atomic(os.path.join(self.out_dir, RECORD_NAME.format(rank=record["rank"], pid=os.getpid())),
                         json.dumps(record, indent=2), what="the hunt record")
        except (OSError, UserError) as exc:
            sys.stderr.write(f"msoverflow hunt: {exc}\n")


_hunt = None


def install() -> None:
    """The start-up hook's entry (no-op without a spec): once mindspore.nn.cell has loaded, while MindSpore is
    still being imported, wrap only Cell.__call__; the first Cell call, with MindSpore complete, wraps the
    Primitives and Tensor methods."""
    spec = read_spec()
    if spec is not None:
        when_cell_module_loads(lambda module: _wrap_cells(module, spec))


def _start(spec: dict) -> Hunt:
    global _hunt
    _hunt = Hunt(spec)
    _wrap_primitives()
    _wrap_tensor_methods()
    _unwrapped_while_compiling()
    return _hunt


def _op_wrapper(function, op_type_of):
    def wrapped(*args, **kwargs):
        hunt = _hunt
        if hunt.depth or not hunt.checking():
            return function(*args, **kwargs)
        hunt.local.depth = 1
        try:
            result = function(*args, **kwargs)
            hunt.on_op(op_type_of(args), args, kwargs, result)
        finally:
            hunt.local.depth = 0
        return result
    wrapped.__wrapped__ = function
    wrapped.__name__ = getattr(function, "__name__", "op")
    wrapped.__doc__ = getattr(function, "__doc__", None)
    return wrapped


def _wrap_primitives():
    from mindspore.ops.primitive import Primitive
    seen, todo = set(), [Primitive]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        todo += cls.__subclasses__()
        call = cls.__dict__.get("__call__")
        if call is not None and not hasattr(call, "__wrapped__"):
            cls.__call__ = _op_wrapper(call, lambda args: getattr(args[0], "name", "Primitive"))


def _wrap_tensor_methods():
    """On the Python Tensor class, which then overrides the methods its C++ base (TensorPy) defines."""
    from mindspore import Tensor
    classes = [Tensor]
    try:
        from mindspore.common._stub_tensor import StubTensor
        classes.append(StubTensor)
    except ImportError:
        pass
    for cls in classes:
        for name, op_type in _TENSOR_METHODS.items():
            method = getattr(cls, name, None)
            if method is not None and callable(method) and not hasattr(method, "__wrapped__"):
                wrapped = _op_wrapper(method, lambda args, t=op_type: t)
                _SWAPPED.append((cls, name, cls.__dict__.get(name), wrapped))
                setattr(cls, name, wrapped)


_SWAPPED: list = []   # (class, name, its own attribute before (None: inherited), the wrapper)


def _unwrapped_while_compiling():
    """Graph compilation (@jit functions, graph-mode Cells) parses a Python function found on the Tensor class as
    code and refuses the wrappers' try statements: it sees the original methods while it compiles."""
    from mindspore.graph import api

    def unwrapping(compile_method):
        def compile(*args, **kwargs):
            for cls, name, own, _ in _SWAPPED:
                if own is None:
                    delattr(cls, name)
                else:
                    setattr(cls, name, own)
            try:
                return compile_method(*args, **kwargs)
            finally:
                for cls, name, _, wrapped in _SWAPPED:
                    setattr(cls, name, wrapped)
        compile.__wrapped__ = compile_method
        return compile

    for executor in ("_JitExecutor", "_CellGraphExecutor"):
        cls = getattr(api, executor, None)
        if cls is not None and not hasattr(cls.compile, "__wrapped__"):
            cls.compile = unwrapping(cls.compile)


def _wrap_cells(module, spec: dict) -> None:
    cell_class = module.Cell
    original_call = cell_class.__call__

    def __call__(self, *args, **kwargs):
        hunt = _hunt or _start(spec)
        local = hunt.local
        stack = getattr(local, "cells", None)
        if stack is None:
            stack = local.cells = []
        if not stack and id(self) not in hunt.cell_paths:
            hunt.roots_seen += 1
            _first_call(hunt, self)
        is_optimizer = any(k.__name__ == "Optimizer" for k in type(self).__mro__)
        if is_optimizer:
            hunt.before_update(self, args)
        stack.append(self)
        depth = hunt.depth
        try:
            result = original_call(self, *args, **kwargs)
        finally:
            stack.pop()
        if is_optimizer:
            hunt.after_update()
        elif not depth and hunt.checking():
            hunt.local.depth = 1
            try:
                hunt.on_op(type(self).__name__, args, kwargs, result, is_cell=True,
                           cell=hunt.cell_paths.get(id(self), (None, type(self).__name__)))
            finally:
                hunt.local.depth = 0
        return result

    __call__.__wrapped__ = original_call      # type: ignore[attr-defined]  # functions take attributes
    cell_class.__call__ = __call__


def _first_call(hunt: Hunt, root) -> None:
    """A Cell called from outside any Cell: name its sub-Cells by attribute path, check the mode."""
    import mindspore as ms
    if ms.get_context("mode") == ms.GRAPH_MODE and not hunt.spec.get("allow_graph"):
        # `msoverflow hunt` says so, once: the record tells it even when a launcher (msrun) changes the exit code
        hunt.save_record({"rank": hunt.rank(), "pid": os.getpid(), "graph_mode": True})
        os._exit(EXIT_GRAPH_MODE)
    hunt.cell_paths[id(root)] = ("", type(root).__name__)
    for name, cell in root.cells_and_names():
        if name and id(cell) not in hunt.cell_paths:
            hunt.cell_paths[id(cell)] = (name, type(cell).__name__)
            hunt.path_classes.setdefault(name, type(cell).__name__)
    if not hunt.exit_registered:
        # Registered after MindSpore's own exit handlers, so it runs before them (atexit is last in, first out).
        atexit.register(hunt.write_record)
        hunt.exit_registered = True


EXIT_GRAPH_MODE = 97   # the child's exit code that tells `msoverflow hunt` the run was in graph mode
