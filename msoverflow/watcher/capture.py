"""Inside the training process: per-step statistics of the tracked tensors, written as statistic.csv.

Installed by the start-up hook (msoverflow/startup_hook.py) when `msoverflow watch` runs a command. A step is one
call, from outside any Cell, of a Cell that holds an optimizer (nn.TrainOneStepCell and its kind). After each step
the host reads, once, every tracked tensor and reduces it with numpy (max, min, mean, count, NaN/inf counts, L2):
  - the network's parameters (weights) and the other Parameters of the step Cell (loss scale, optimizer state);
  - each weight's update in the step (w after - w before: the optimizer's step, the gradient scaled by the lr);
  - the step's float and integer inputs (the batch) and its output (the loss);
  - in PyNative mode, the output of every Cell (a graph-mode construct runs as one graph and calls none).
The rows are written as `{dir}/rank_{r}/Net/0/{step}/statistic.csv` (the MindSpore statistic dump's layout and
columns) into a hidden directory renamed into place when whole, so a reader never sees half a step. What each row
is (tensor, kind, Cell, dtype) goes once into `rank_{r}/watch_tensors.json`. The watcher asks the job to stop by
writing `control.json` (`{"stop_at": step}`): every rank reads it before each step and ends cleanly there.
This module imports MindSpore (it runs in the training process); the analysis never imports it.
"""
from __future__ import annotations

import json
import os
import sys
import time

from ..startup_hook import read_spec, when_cell_module_loads

HEADER = ("Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,Max Value,Min Value,"
          "Avg Value,Count,NaN Count,Negative Inf Count,Positive Inf Count,L2Norm Value\n")
CONTROL = "control.json"
RING = "ring.json"              # {"allowance": steps a rank may hold on disk}, written by the watcher
RING_WAIT_SECONDS = 30.0        # a writer ahead of the watcher by more than the allowance waits at most this long
META = "watch_tensors.json"
GRAPH_DIR = os.path.join("Net", "0")

_watch = None


def rank_of_process() -> int:
    for name in ("RANK_ID", "RANK", "MS_NODE_ID"):
        value = os.environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    return 0


def _stats_row(array):
    """(max, min, mean, count, nan, -inf, +inf, l2) of a numpy array; max/min/mean over finite values; l2 is not
    computed (None: a dot a tensor a step, which no detector reads). The common case (all finite) costs a max, a
    min and a sum in the array's own precision (float16 in float32): NaN and inf show in max/min, and only then
    are they counted."""
    import numpy as np
    a = np.asarray(array)
    if a.dtype.kind not in "fiub" or (a.dtype.kind == "f" and a.dtype.itemsize < 4):
        a = a.astype(np.float32)
    count = int(a.size)
    if count == 0:
        return None, None, None, 0, 0, 0, 0, None
    flat = a.reshape(-1)
    high, low = flat.max(), flat.min()
    nan = posinf = neginf = 0
    if a.dtype.kind == "f" and not (np.isfinite(high) and np.isfinite(low)):
        nan = int(np.isnan(flat).sum())
        posinf = int(np.isposinf(flat).sum())
        neginf = int(np.isneginf(flat).sum())
        flat = flat[np.isfinite(flat)]
        if flat.size == 0:
            return None, None, None, count, nan, neginf, posinf, None
        high, low = flat.max(), flat.min()
    if a.dtype.kind != "f":
        flat = flat.astype(np.float64)
    total = float(flat.sum(dtype=np.float64))
    return float(high), float(low), total / flat.size, count, nan, neginf, posinf, None


def _fmt(value) -> str:
    return "" if value is None else repr(value)


class Watch:
    def __init__(self, spec: dict):
        self.spec = spec
        self.out = spec["out_dir"]
        self.rank = rank_of_process()
        self.rank_dir = ""
        self.step = 0
        self.depth = 0
        self.meta: dict = {}
        self.previous: dict = {}         # weight name -> its values after the previous step
        self.cell_outputs: list = []     # (cell path, cell class, output) of this step (PyNative)
        self.cell_paths: dict = {}
        self.step_cells: set = set()
        self.pynative = False
        self.prefixes: dict = {}         # (kind, name) -> the row's text before and after its time stamp

    # -- what a step is --------------------------------------------------------------------------------
    def is_step_cell(self, cell) -> bool:
        key = id(cell)
        if key not in self.step_cells and not hasattr(cell, "_msoverflow_not_step"):
            from mindspore import nn
            if any(isinstance(c, nn.Optimizer) for _n, c in cell.cells_and_names()):
                self.step_cells.add(key)
                self.first_step(cell)
            else:
                try:
                    cell._msoverflow_not_step = True
                except Exception:
                    pass
        return key in self.step_cells

    def first_step(self, root) -> None:
        import mindspore as ms
        from mindspore import nn
        self.pynative = ms.get_context("mode") == ms.PYNATIVE_MODE
        try:        # a distributed job has initialised its communication before its first step
            from mindspore.communication import get_rank
            self.rank = int(get_rank())
        except Exception:
            pass
        self.rank_dir = os.path.join(self.out, f"rank_{self.rank}", GRAPH_DIR)
        os.makedirs(self.rank_dir, exist_ok=True)
        self.cell_paths = {id(c): (name, type(c).__name__) for name, c in root.cells_and_names()}
        optimizer = next(c for _n, c in root.cells_and_names() if isinstance(c, nn.Optimizer))
        network_params = {id(p) for p in optimizer.parameters}
        self.params = []
        for p in root.get_parameters():
            name = p.name
            if id(p) in network_params:
                kind = "parameter"
            elif name in ("learning_rate", "global_step") or name.endswith(".learning_rate"):
                kind = "optimizer setting"
            elif any(id(q) == id(p) for q in optimizer.get_parameters()):
                kind = "optimizer state"
            else:
                kind = "parameter"           # loss scale and other network Parameters
            cell = name.rsplit(".", 1)[0] if "." in name else ""
            self.params.append((name, kind, p, cell, _class_of(self, cell)))
        self.optimizer_class = type(optimizer).__name__
        self.root_class = type(root).__name__

    # -- one step --------------------------------------------------------------------------------------
    def control(self) -> None:
        try:
            with open(os.path.join(self.out, CONTROL), encoding="utf-8") as fh:
                stop_at = json.load(fh).get("stop_at")
        except (OSError, ValueError):
            return
        if stop_at is not None and self.step >= int(stop_at):
            sys.stderr.write(f"msoverflow watch: stopping before step {self.step} (asked by the watcher)\n")
            sys.stderr.flush()
            raise SystemExit(0)

    def after_step(self, args, result) -> None:
        rows = []

        def add(name, kind, op_type, cell, cell_class, tensor_or_array, dtype=None):
            array = tensor_or_array.asnumpy() if hasattr(tensor_or_array, "asnumpy") else tensor_or_array
            key = (kind, name)
            prefix = self.prefixes.get(key)
            if prefix is None:        # what a row says besides its numbers, made once per tracked tensor
                dtype = dtype or _dtype_name(tensor_or_array)
                csv_name = _csv_name(f"{kind}:{name}")
                self.meta[csv_name] = {"name": name, "kind": kind, "op": op_type, "cell": cell,
                                       "cell_class": cell_class, "dtype": dtype, "row": len(self.meta)}
                shape = '"(' + ",".join(str(int(s)) for s in getattr(array, "shape", ())) + ')"'
                prefix = self.prefixes[key] = (f"{op_type},{csv_name},{len(self.meta) - 1},0,", 
                                               f",output,0,{int(getattr(array, 'size', 1))},{dtype},{shape},")
            rows.append((prefix, _stats_row(array)))
            return array

        for slot, arg in enumerate(args):
            if hasattr(arg, "asnumpy"):
                add(f"input {slot}", "input", "Input", "", self.root_class, arg)
        loss = result[0] if isinstance(result, (tuple, list)) and result else result
        if hasattr(loss, "asnumpy"):
            add("loss", "loss", "Loss", "", self.root_class, loss)
        for path, cell_class, output in self.cell_outputs:
            out = output[0] if isinstance(output, (tuple, list)) and output else output
            if hasattr(out, "asnumpy") and "float" in _dtype_name(out):
                add(path, "cell output", cell_class, path, cell_class, out)
        self.cell_outputs = []
        for name, kind, p, cell, cell_class in self.params:
            values = add(name, kind, "Parameter", cell, cell_class, p)
            if kind == "parameter" and p.requires_grad:
                before = self.previous.get(name)
                if before is not None and before.shape == values.shape:
                    import numpy as np
                    with np.errstate(invalid="ignore", over="ignore"):     # inf - inf: the NaN is counted
                        update = np.subtract(values, before, dtype=np.float32)
                    add(f"{name} update", "update", self.optimizer_class, cell, cell_class, update,
                        dtype=_dtype_name(p))
                self.previous[name] = values.copy()      # asnumpy may share the Parameter's memory
        self.write(rows)
        self.step += 1
        if self.spec.get("stop_on_nonfinite") and any(r[1][4] or r[1][5] or r[1][6] for r in rows):
            # the watcher would ask a step late: a rank that holds a NaN/inf ends here itself (in a data-parallel
            # job the all-reduced gradients carry it to every rank in the same step)
            sys.stderr.write(f"msoverflow watch: a non-finite value at step {self.step - 1}: stopping\n")
            sys.stderr.flush()
            raise SystemExit(0)

    def write(self, rows) -> None:
        stamp = int(time.time() * 1e6)
        lines = [HEADER]
        for (before, after), (high, low, mean, count, nan, neginf, posinf, l2) in rows:
            lines.append(f"{before}{stamp}{after}{_fmt(high)},{_fmt(low)},{_fmt(mean)},{count},{nan},{neginf},"
                         f"{posinf},{_fmt(l2)}\n")
        hidden = os.path.join(self.rank_dir, f".{self.step}.partial")
        os.makedirs(hidden, exist_ok=True)
        with open(os.path.join(hidden, "statistic.csv"), "w", encoding="utf-8") as fh:
            fh.writelines(lines)
        os.replace(hidden, os.path.join(self.rank_dir, str(self.step)))
        self.hold_back()
        meta_path = os.path.join(self.out, f"rank_{self.rank}", META)
        if self.step == 0 or len(self.meta) != getattr(self, "_meta_written", 0):
            with open(meta_path + ".partial", "w", encoding="utf-8") as fh:
                json.dump({"rank": self.rank, "tensors": self.meta}, fh)
            os.replace(meta_path + ".partial", meta_path)
            self._meta_written = len(self.meta)


    def hold_back(self) -> None:
        """The ring buffer's bound holds when the job writes faster than the watcher reads: while this rank has
        more than 2K + 1 step directories on disk (K kept, K + 1 written and not yet read; the watcher's allowance
        in ring.json adds the steps it keeps around events), wait for it to read and delete (never longer than
        RING_WAIT_SECONDS: a watcher that is gone does not stop the training). The slack of K unread steps keeps
        a fast step from waiting on every poll of the watcher (seen: K + 1 stalled the demo's 8 ms steps)."""
        keep = self.spec.get("keep")
        if not keep:
            return
        allowance = keep
        deadline = None
        while True:
            held = sum(1 for n in os.listdir(self.rank_dir) if n.isdigit())
            if held <= allowance + keep + 1:
                return
            try:
                with open(os.path.join(self.out, RING), encoding="utf-8") as fh:
                    allowance = max(keep, int(json.load(fh).get("allowance", keep)))
            except (OSError, ValueError):
                pass
            if held <= allowance + keep + 1:
                return
            now = time.monotonic()
            deadline = deadline or now + RING_WAIT_SECONDS
            if now > deadline:
                return
            time.sleep(0.005)


def _csv_name(key: str) -> str:
    """A tracked tensor's name as the Op Name column holds it (no comma, no quote; scope_to_file_name keeps it)."""
    return "".join(ch if ch.isalnum() or ch in "-" else "_" for ch in key)


def _class_of(watch: Watch, cell_path: str) -> str:
    for path, cell_class in watch.cell_paths.values():
        if path == cell_path or path.endswith("." + cell_path):
            return cell_class
    return ""


def _dtype_name(value) -> str:
    dtype = getattr(value, "dtype", None)
    text = str(dtype).lower() if dtype is not None else "float32"
    for name in ("bfloat16", "float16", "float32", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"):
        if name in text:
            return name
    return text


def install() -> None:
    spec = read_spec()
    if spec is not None:
        when_cell_module_loads(lambda module: _wrap_cells(module, spec))


def _wrap_cells(module, spec: dict) -> None:
    cell_class = module.Cell
    original_call = cell_class.__call__

    def __call__(self, *args, **kwargs):
        global _watch
        watch = _watch
        if watch is None:
            watch = _watch = Watch(spec)
        if watch.depth:
            result = original_call(self, *args, **kwargs)
            if watch.pynative and id(self) in watch.cell_paths:
                path, class_name = watch.cell_paths[id(self)]
                if path:
                    watch.cell_outputs.append((path, class_name, result))
            return result
        if not watch.is_step_cell(self):
            return original_call(self, *args, **kwargs)
        watch.control()
        watch.depth = 1
        try:
            result = original_call(self, *args, **kwargs)
        finally:
            watch.depth = 0
        watch.after_step(args, result)
        return result

    __call__.__wrapped__ = original_call      # type: ignore[attr-defined]
    cell_class.__call__ = __call__
