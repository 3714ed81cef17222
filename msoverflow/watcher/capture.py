"""Inside the training process: statistics of the tracked tensors, sampled within a cost budget, written as
statistic.csv.

Installed by the start-up hook (msoverflow/startup_hook.py) when `msoverflow watch` runs a command. A step is one
call, from outside any Cell, of a Cell that holds an optimizer (nn.TrainOneStepCell and its kind).

What is read, and when (the cost, measured in docs/performance.md, is the host's reads and the files, not the
arithmetic):
  - every step: the loss (one scalar, already computed: `item()`, its row made into text when the file is
    written);
  - a full step: the step's inputs (the batch), every Parameter of the step Cell (weights, loss scale, optimizer
    state and settings), each weight's update in the step (w after - w before), and in PyNative mode every Cell's
    output and the logits of every attention softmax. Full steps are the first WARMUP_STEPS, then one every k steps,
    k chosen from the measured costs so the full steps cost at most BUDGET of the training's own step time; and
    DENSE_STEPS steps in a row from a step whose loss looks off (non-finite, a jump, a steady rise: a hint for the
    sampling only, the watcher's detectors decide the events) or when the watcher asks (an event, control.json).
Rows (max, min, mean, mean |x|, count, NaN/inf counts) are buffered and written several steps to a file, as
`{dir}/rank_{r}/Net/0/{last step}/statistic.csv` (the MindSpore statistic dump's columns, plus `Mean Abs Value`
and `Step`), into a hidden directory renamed into place when whole, so a reader never sees half a file. What each
row is (tensor, kind, Cell, dtype) and how the sampling went go into `rank_{r}/watch_tensors.json`. The watcher asks
the job to stop by writing `control.json` (`{"stop": why}`) and then counting up `control.seq`, 8 bytes every
rank maps into memory and compares before each step (no system call on the step's path; without the file, a
`stat` of control.json before each step). One process stops before its next step; the ranks of a job whose steps
wait for each other stop together at their next agreed step (agreement.py), never alone. (`{"stop_at": step}`,
written before the run starts, stops every rank before that step: the event dump's re-run.)
This module imports MindSpore (it runs in the training process); the analysis never imports it.
"""
from __future__ import annotations

import atexit
import json
import math
import os
import sys
import time
from collections import deque
from typing import Any, Optional

from ..startup_hook import read_spec, when_cell_module_loads
from .agreement import Agreement, of_job
from .rise import NOISE_WINDOW, RISE_STEPS, diverging

HEADER = ("Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,Max Value,Min Value,"
          "Avg Value,Count,NaN Count,Negative Inf Count,Positive Inf Count,L2Norm Value,Mean Abs Value,Step\n")
CONTROL = "control.json"
CONTROL_SEQ = "control.seq"     # 8 bytes, counted up after each control.json: mapped, read before every step
RING = "ring.json"              # {"allowance": steps a rank may hold on disk}, written by the watcher
RING_WAIT_SECONDS = 30.0        # a writer ahead of the watcher by more than the allowance waits at most this long
META = "watch_tensors.json"
GRAPH_DIR = os.path.join("Net", "0")
WARMUP_STEPS = 10               # full steps at the start: the detectors' first history
DENSE_STEPS = 30                # full steps in a row after a hint or the watcher's request
BUDGET = 0.005                  # the full steps' share of the training's own step time
MAX_EVERY = 1000
FLUSH_SECONDS = 1.0             # buffered steps are written this often (a file costs ~1 ms under load: once a
                                # step it would be the demo's whole budget), or at once on a hint
FLUSH_STEPS = 1000              # or when this many are buffered
CONTROL_SECONDS = 1.0           # with control.seq mapped, control.json is also stat'ed this often (a file
                                # system whose mapping does not follow another process's writes). Without it,
                                # before every step: at 0.05 s two ranks ran 7 steps past the stop step under CI
                                # load (after a hint a file holds a step or two, so the watcher's margin, two
                                # files' steps, is shorter than 0.05 s of them). The stat cost 12-60 us a step
                                # after a step of the 1M-parameter MLP; the mapped read about 1 us
LOSS_WINDOW = 20
SPIKE_FLOOR_STEPS = 4           # the spike test's floor (see loss_hint) is made again this often
HINT_RISES = RISE_STEPS - 1     # the divergence hint comes a step before the watcher's event
GROWTH_HINT = 3.0               # a tensor tripled over its highest reading (the root cause's own factor)
GROWTH_RATE = 0.03              # ... at least this fast a step (the trend detector's GROWTH_MIN)
GROWTH_KINDS = ("parameter", "optimizer state", "attention logits", "cell output")   # (an update or an input
                                # swings 3x between two samples as a matter of course: seen on the demo and the MLP)

_watch = None


def rank_of_process() -> int:
    for name in ("RANK_ID", "RANK", "MS_NODE_ID"):
        value = os.environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    return 0


def _stats_row(array):
    """(max, min, mean, count, nan, -inf, +inf, l2, mean |x|) of a numpy array; max/min/means over finite values;
    l2 is not computed (None: no detector reads it). The common case (all finite) costs a max, a min, a sum and a
    sum of |x| (none when max and min share a sign), in the array's own precision (float16 in float32): NaN and inf
    show in max/min, and only then are they counted."""
    import numpy as np
    a = np.asarray(array)
    if a.dtype.kind not in "fiub" or (a.dtype.kind == "f" and a.dtype.itemsize < 4):
        a = a.astype(np.float32)
    count = int(a.size)
    if count == 0:
        return None, None, None, 0, 0, 0, 0, None, None
    flat = a.reshape(-1)
    high, low = flat.max(), flat.min()
    nan = posinf = neginf = 0
    if a.dtype.kind == "f" and not (np.isfinite(high) and np.isfinite(low)):
        nan = int(np.isnan(flat).sum())
        posinf = int(np.isposinf(flat).sum())
        neginf = int(np.isneginf(flat).sum())
        flat = flat[np.isfinite(flat)]
        if flat.size == 0:
            return None, None, None, count, nan, neginf, posinf, None, None
        high, low = flat.max(), flat.min()
    if a.dtype.kind != "f":
        flat = flat.astype(np.float64)
    total = _sum(flat)
    if low >= 0:
        absolute = total
    elif high <= 0:
        absolute = -total
    else:
        absolute = _sum(np.abs(flat))
    return float(high), float(low), total / flat.size, count, nan, neginf, posinf, None, absolute / flat.size


def _sum(flat) -> float:
    """The sum of a 1-D float array of finite values, in its own precision: NumPy sums float32 pairwise (relative
    error about 1e-6 of the sum of |x|, at half the time of a float64 sum of it); in float64 when that overflows
    (values near float32's limit: the tensors a watch is for)."""
    import numpy as np
    with np.errstate(over="ignore"):         # (a warning in the user's training for a sum we redo)
        total = float(flat.sum())
    if not math.isfinite(total):
        total = float(flat.sum(dtype=np.float64))
    return total


def _scalar_row(value: float):
    """_stats_row of a one-value tensor (the loss), without numpy."""
    if math.isfinite(value):
        return value, value, value, 1, 0, 0, 0, None, abs(value)
    nan, neginf, posinf = int(math.isnan(value)), int(value == -math.inf), int(value == math.inf)
    return None, None, None, 1, nan, neginf, posinf, None, None


def _sorted_tail(history) -> list:
    """The last LOSS_WINDOW losses of the hint's history, sorted."""
    return sorted(list(history)[-LOSS_WINDOW:])


def _fmt(value) -> str:
    return "" if value is None else repr(value)


def _loss_line(prefix, value: float, step: int, stamp: int) -> str:
    """_line of a loss-only row (most rows: one repr, not four; half the time). stamp: in microseconds."""
    if not math.isfinite(value):
        return _line(prefix, _scalar_row(value), step, stamp)
    before, after = prefix
    text = repr(value)
    return f"{before}{stamp}{after}{text},{text},{text},1,0,0,0,,{text if value > 0 else repr(abs(value))},{step}\n"


def _line(prefix, row, step: int, stamp: int) -> str:
    """One statistic.csv row: the tensor's prefix (made once), its time stamp, statistics and step."""
    (before, after), (high, low, mean, count, nan, neginf, posinf, l2, mean_abs) = prefix, row
    return (f"{before}{stamp}{after}{_fmt(high)},{_fmt(low)},{_fmt(mean)},{count},{nan},{neginf},{posinf},"
            f"{_fmt(l2)},{_fmt(mean_abs)},{step}\n")


class Watch:
    def __init__(self, spec: dict):
        self.spec = spec
        self.out = spec["out_dir"]
        self.keep = spec.get("keep")
        self.rank = rank_of_process()
        self.rank_dir = ""
        self.step = 0
        self.depth = 0
        self.meta: dict = {}
        self.previous: dict = {}         # weight name -> its values after the step previous_step
        self.previous_step = -2
        self.scalar_loss_type: Any = None
        self.cell_outputs: list = []     # (cell path, cell class, output) of this step (PyNative)
        self.attention: list = []        # (cell path, cell class, softmax input) of this step (PyNative)
        self.cell_stack: list = []       # the Cells being called (PyNative): where a softmax is
        self.cell_paths: dict = {}
        self.step_cells: set = set()
        self.pynative = False
        self.prefixes: dict = {}         # (kind, name) -> the row's text before and after its time stamp
        self.loss_prefix: Optional[tuple] = None
        # the sampling: what a full step and the training's own step cost (seconds), the last full step
        self.full_cost = 0.0
        self.step_cost = 0.0
        self.full_costs: list = []
        self.kept_spent = 0.0            # the last keep_weights's time: the next full step's cost includes it
        self.own_total = 0.0             # the training's own time and the capture's, over the steps after the first
        self.spent_total = 0.0
        self.step_costs: deque = deque(maxlen=9)
        self.fixed_every = spec.get("full_every")     # --full-every: the user's spacing, not the budget's
        self.every = self.fixed_every or 1
        self.last_full = -1
        self.dense_until = WARMUP_STEPS - 1
        self.full_steps = 0
        self.loss_history: deque = deque(maxlen=NOISE_WINDOW + HINT_RISES)     # |loss| (finite), in order
        self.spike_floor = math.inf      # a loss at or under it is no spike for the next steps (loss_hint)
        self.floor_in = 1                # steps until the floor is made again
        self.highest: dict = {}          # row prefix -> (its highest max |x| at a full step after the warm-up, step)
        self.rises = 0
        self.step_started = 0.0
        self.capture_spent = 0.0
        # the buffer of rows not yet written, and the files on disk
        self.lines: list = []
        self.buffered = 0
        self.last_flush = time.perf_counter()
        self.last_buffered = -1
        self.flush_now = False
        self.control_mtime: Optional[int] = None
        self.control_seq = None          # control.seq mapped, its count as one 8-byte word (None: not yet tried;
                                         # False: not there)
        self.seen_seq = 0
        self.next_look = 0.0             # perf_counter time of the next stat of control.json
        self.stop_at: Optional[int] = None      # stop before this step (known before the run)
        self.stop_wanted: Optional[str] = None  # why this process wants to stop (the watcher asked; a NaN/inf)
        self.agreement: Optional[Agreement] = None
        self.agreement_note = ""
        self.stopped: Optional[dict] = None
        self._meta_written = -1
        self.flushes = 0
        atexit.register(self.flush)

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
        try:
            self.agreement = of_job(root)
        except Exception as exc:       # (no AllReduce here: the ranks stop on their own, said in the report)
            self.agreement_note = f"no agreement between the ranks ({type(exc).__name__}: {exc})"
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
        if self.pynative:
            _watch_softmax()

    # -- one step --------------------------------------------------------------------------------------
    def control(self) -> None:
        """Before each step: what the watcher asked (stop before a step; full steps from now): control.seq's
        count compared (mapped), and control.json stat'ed every CONTROL_SECONDS (before every step when control.seq
        cannot be mapped); the file is parsed only when either changed."""
        entered = time.perf_counter()
        seq = self.control_seq
        if seq and seq[0] != self.seen_seq:
            self.seen_seq = seq[0]
            self.control_mtime = None
            self.look_at_control()
        elif entered >= self.next_look:
            if seq is None:
                self.control_seq = seq = map_control_seq(self.out)
            self.next_look = entered + (CONTROL_SECONDS if seq else 0.0)
            self.look_at_control()
        if self.stop_at is not None and self.step >= self.stop_at:
            self.stop(f"asked before the run to stop before step {self.stop_at}")
        if self.stop_wanted is not None and self.agreement is None:
            self.stop(self.stop_wanted)
        if self.step_started:      # the training's own time of the previous step (its capture taken out)
            own = max(entered - self.step_started - self.capture_spent, 1e-6)
            self.step_costs.append(own)
            if self.step > 1:          # (the first step compiles)
                self.own_total += own
                self.spent_total += self.capture_spent
        if self.agreement is not None and self.agreement.due(self.step):
            self.agree()
        self.step_started = entered
        self.capture_spent = time.perf_counter() - entered      # this look at control.json; after_step adds its own

    def agree(self) -> None:
        """Before an agreed step: every rank stops here when any wants to (agreement.py)."""
        costs = sorted(self.step_costs)
        agreement = self.agreement
        assert agreement is not None
        try:
            stop = agreement.agree(self.step, self.stop_wanted is not None, costs[len(costs) // 2] if costs else None)
        except Exception as exc:       # (failed on every rank alike: the same op, the same group)
            self.agreement, self.agreement_note = None, f"the agreement failed ({type(exc).__name__}: {exc})"
            return
        if stop:
            self.stop(self.stop_wanted or "another rank wanted to stop", agreed=True)

    def stop(self, why: str, agreed: bool = False) -> None:
        """End the job before this step: the rows written, then SystemExit(0) out of the step's call."""
        together = f", with the {self.agreement.size} ranks" if agreed and self.agreement else ""
        self.stopped = {"before_step": self.step, "why": why, "agreed": agreed}
        sys.stderr.write(f"msoverflow watch: stopping before step {self.step}{together} ({why})\n")
        sys.stderr.flush()
        self.flush()
        raise SystemExit(0)

    def look_at_control(self) -> None:
        try:
            mtime = os.stat(os.path.join(self.out, CONTROL)).st_mtime_ns
        except OSError:
            mtime = None
        if mtime is not None and mtime != self.control_mtime:
            self.control_mtime = mtime
            try:
                with open(os.path.join(self.out, CONTROL), encoding="utf-8") as fh:
                    asked = json.load(fh)
            except (OSError, ValueError):
                asked = {}
            if asked.get("stop_at") is not None:
                self.stop_at = int(asked["stop_at"])
            if asked.get("stop") and self.stop_wanted is None:
                self.stop_wanted = f"asked by the watcher: {asked['stop']}"
            if asked.get("dense_steps"):
                self.dense_until = max(self.dense_until, self.step + int(asked["dense_steps"]) - 1)

    def loss_hint(self, value: float) -> bool:
        """Whether the loss looks off enough to capture this step and the next ones in full: non-finite, 3x the
        median of the last LOSS_WINDOW losses and 8 robust deviations above it (a spike), or a divergence under way
        by the watcher's own test (rise.diverging) a rise early: 3 rises, not 4. A hint for the sampling only;
        the watcher's tests decide the events. (Looser hints fired on the demo's small, noisy converged loss and
        on a loss with nothing to learn, and made most steps full.)
        Most steps compare the loss with one number: 3x a low order statistic of the window as it was a few steps
        ago, which the median of each window until the floor is made again cannot fall under (with k of its values
        replaced, a window's median is at least the old window's value k places under its median); only a loss
        over it is tested in full."""
        if value != value or value == math.inf or value == -math.inf:
            return True
        if value < 0:
            value = -value
        history = self.loss_history
        self.rises = rises = self.rises + 1 if history and value > history[-1] else 0
        hint = False
        if value > self.spike_floor:
            window = _sorted_tail(history)
            median = window[len(window) // 2]
            if value > 3.0 * median:
                spread = sorted(abs(x - median) for x in window)[len(window) // 2] * 1.4826
                hint = value > median + 8 * spread
        history.append(value)
        if not hint and rises >= HINT_RISES and len(history) > 8:
            hint = diverging(list(history), rises=HINT_RISES) is not None
        self.floor_in -= 1
        if self.floor_in <= 0:
            window = _sorted_tail(history)
            if len(window) >= 8:     # (the tests start with 8 losses before the step's)
                self.spike_floor = 3.0 * window[max(0, len(window) // 2 - (SPIKE_FLOOR_STEPS - 1))]
                self.floor_in = SPIKE_FLOOR_STEPS
            else:
                self.floor_in = 1
        return hint

    def after_step(self, args, result) -> None:
        started = time.perf_counter()
        step = self.step
        loss: Any = result[0] if isinstance(result, (tuple, list)) and result else result
        loss_value = None
        # item(): a third of asnumpy's cost, and the user's own read stays cheap (_item: the same without item's
        # Python frame); a scalar's type told once (a Tensor's size is a call into MindSpore)
        if type(loss) is self.scalar_loss_type:
            try:
                loss_value = loss._item()
            except (ValueError, TypeError, RuntimeError):     # (a later loss of that type with several values)
                loss_value = None
        elif hasattr(loss, "item") and getattr(loss, "size", 0) == 1:
            loss_value = loss.item()
            if type(loss_value) is float and hasattr(loss, "_item"):      # (item() is _item() with a frame)
                self.scalar_loss_type = type(loss)
            loss_value = float(loss_value)
        hint = loss_value is not None and self.loss_hint(loss_value)
        if hint:
            self.dense_until = max(self.dense_until, step + DENSE_STEPS - 1)
            self.flush_now = True
        full = step <= self.dense_until or step - self.last_full >= self.every
        if not full and loss_value is not None:
            # most steps: the loss alone (finite: a non-finite loss is a hint, so its step is full), its row made
            # into text when the file is written
            self.lines.append((self.loss_prefix or self._prefix("loss", "loss", "Loss", "", self.root_class, loss, loss,
                                                                 None), loss_value, step, started))
            if step + 1 - self.last_full >= self.every and step + 1 > self.dense_until:
                self.keep_weights()       # the next step is full: its updates need these weights
            if self.pynative:
                self.cell_outputs, self.attention = [], []
            self.step += 1
            self.buffered += 1          # (buffered_step, written out: this path runs every step)
            self.last_buffered = step
            now = time.perf_counter()
            if self.flush_now or self.buffered >= FLUSH_STEPS or now - self.last_flush >= FLUSH_SECONDS:
                self.flush(final=False)
                now = time.perf_counter()
            self.capture_spent += now - started
            return
        rows = []

        def add(name, kind, op_type, cell, cell_class, tensor_or_array, dtype=None):
            array = tensor_or_array.asnumpy() if hasattr(tensor_or_array, "asnumpy") else tensor_or_array
            rows.append((self._prefix(name, kind, op_type, cell, cell_class, tensor_or_array, array, dtype),
                         _stats_row(array), kind))
            return array

        if loss_value is not None:
            self.loss_prefix = self._prefix("loss", "loss", "Loss", "", self.root_class, loss, loss, None)
            rows.append((self.loss_prefix, _scalar_row(loss_value), "loss"))
        elif hasattr(loss, "asnumpy"):
            add("loss", "loss", "Loss", "", self.root_class, loss.asnumpy(), dtype=_dtype_name(loss))
        if full:
            self.full_step(args, add)
        elif step + 1 - self.last_full >= self.every and step + 1 > self.dense_until:
            self.keep_weights()       # the next step is full: its updates need these weights
        self.cell_outputs, self.attention = [], []
        if full and self.grew(rows, step):
            self.dense_until = max(self.dense_until, step + DENSE_STEPS)
            self.flush_now = True
        stamp = int(time.time() * 1e6)
        self.lines.extend((prefix, row, step, stamp) for prefix, row, _kind in rows)
        self.step += 1
        self.buffered_step(step)
        spent = time.perf_counter() - started
        if full:
            self.full_costs = (self.full_costs + [spent + self.kept_spent])[-5:]
            self.kept_spent = 0.0
            self.full_steps += 1
            self.last_full = step
            if len(self.step_costs) > 1:        # medians: the first step's compilation, a slow step, move none
                self.full_cost = sorted(self.full_costs)[len(self.full_costs) // 2]
                self.step_cost = sorted(list(self.step_costs)[1:])[(len(self.step_costs) - 1) // 2]
                if not self.fixed_every:         # (--full-every: measured and reported, not followed)
                    self.every = max(1, min(MAX_EVERY, math.ceil(self.full_cost / (BUDGET * self.step_cost))))
        self.capture_spent += spent
        if (self.spec.get("stop_on_nonfinite") and self.stop_wanted is None
                and any(r[1][4] or r[1][5] or r[1][6] for r in rows)):
            # the watcher would ask a step late: one process ends here itself; a rank of a job whose steps wait
            # for each other at the next agreed step, with the others (its loss may be the only one non-finite)
            self.stop_wanted = f"a non-finite value at step {step}"
            if self.agreement is None:
                self.stop(self.stop_wanted)
            self.flush_now = True

    def grew(self, rows, step: int) -> bool:
        """Whether a tensor's max |x| reached GROWTH_HINT times the highest of its earlier full readings since the
        warm-up, at GROWTH_RATE a step or faster (a hint to capture the next steps in full: a trend between two
        samples). Not: a tensor growing out of its start (a zero bias, a fresh optimizer state: the warm-up's
        readings are no base), a scalar wandering near zero (3x its last reading, not its highest), a random
        walk's slow growth read 100 steps apart (3x at 1% a step). Seen on a loss with nothing to learn: the
        output bias made most steps full."""
        grew = False
        highest = self.highest
        for prefix, row, kind in rows:
            high, low = row[0], row[1]
            if high is None or kind not in GROWTH_KINDS:
                continue
            now = max(abs(high), abs(low))
            before = highest.get(prefix[0])
            if before is not None:
                base, since = before
                if base and now >= GROWTH_HINT * base and now >= base * (1 + GROWTH_RATE) ** (step - since):
                    grew = True
                if now <= base:
                    continue
            if step >= WARMUP_STEPS:
                highest[prefix[0]] = (now, step)
        return grew

    def full_step(self, args, add) -> None:
        """A full step's rows. A weight's update is its change in this step alone: written only when its values
        were kept after the step before (a sampled step keeps them the step before; the first step of a run of
        full steps set off by a hint has none: a difference since an older full step would be several steps'
        updates under one step's name)."""
        import numpy as np
        step = self.step
        one_step = self.previous_step == step - 1
        for slot, arg in enumerate(args):
            if hasattr(arg, "asnumpy"):
                add(f"input {slot}", "input", "Input", "", self.root_class, arg)
        for path, cell_class, output in self.cell_outputs:
            out = output[0] if isinstance(output, (tuple, list)) and output else output
            if hasattr(out, "asnumpy") and "float" in _dtype_name(out):
                add(path, "cell output", cell_class, path, cell_class, out)
        for path, cell_class, logits in self.attention:
            add(f"{path} attention logits", "attention logits", "Softmax", path, cell_class, logits)
        for name, kind, p, cell, cell_class in self.params:
            values = add(name, kind, "Parameter", cell, cell_class, p)
            if kind == "parameter" and p.requires_grad:
                before = self.previous.get(name) if one_step else None
                if before is not None and before.shape == values.shape:
                    with np.errstate(invalid="ignore", over="ignore"):     # inf - inf: the NaN is counted
                        update = np.subtract(values, before, dtype=np.float32)
                    add(f"{name} update", "update", self.optimizer_class, cell, cell_class, update,
                        dtype=_dtype_name(p))
                self.previous[name] = values.copy()      # asnumpy may share the Parameter's memory
        self.previous_step = step

    def softmax_input(self, logits) -> None:
        """The input of a softmax called inside a Cell, kept when it has the shape of attention logits: at least
        3 dimensions, the last two equal (queries x keys of one sequence). A classifier's logits (batch x classes)
        are not; a cross-attention (queries x other keys) is not seen."""
        shape = tuple(getattr(logits, "shape", ()))
        if len(shape) >= 3 and shape[-1] == shape[-2] and all(path != self.cell_stack[-1][0]
                                                              for path, _c, _x in self.attention):
            path, cell_class = self.cell_stack[-1]
            self.attention.append((path, cell_class, logits))

    def keep_weights(self) -> None:
        """The weights before a sampled full step (its updates are its change). Part of that step's cost for the
        budget (on the 1M-parameter MLP the measured full-step cost went from 9.5-10.2 to 10.4-11.6 ms with it)."""
        started = time.perf_counter()
        for name, kind, p, _cell, _cell_class in self.params:
            if kind == "parameter" and p.requires_grad:
                self.previous[name] = p.asnumpy().copy()
        self.previous_step = self.step
        self.kept_spent = time.perf_counter() - started

    def _prefix(self, name, kind, op_type, cell, cell_class, tensor_or_array, array, dtype):
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
        return prefix

    # -- the files -------------------------------------------------------------------------------------
    def buffered_step(self, step: int) -> None:
        """A step's rows are in the buffer (as numbers: made into text when written, FLUSH_SECONDS on)."""
        self.buffered += 1
        self.last_buffered = step
        if self.flush_now or self.buffered >= FLUSH_STEPS or time.perf_counter() - self.last_flush >= FLUSH_SECONDS:
            self.flush(final=False)

    def flush(self, final: bool = True) -> None:
        """Write the buffered steps as one statistic.csv, named by the last of them (final: the job ends here,
        the sampling's figures are written with it)."""
        if not self.rank_dir:
            return
        if not self.lines:
            self.buffered = 0
            if final:
                self.write_meta()
            return
        last = self.last_buffered
        self.flushes += 1
        if len(self.meta) != self._meta_written or final or self.flushes % 10 == 0:
            self.write_meta()     # before the rows that name its tensors
        hidden = os.path.join(self.rank_dir, f".{last}.partial")
        os.makedirs(hidden, exist_ok=True)
        with open(os.path.join(hidden, "statistic.csv"), "w", encoding="utf-8") as fh:
            fh.write(HEADER)
            # a loss-only row holds the perf_counter time of its step (one clock read a step, not two): made
            # into the wall clock's microseconds here
            offset = time.time() - time.perf_counter()
            fh.writelines(_line(prefix, row, step, stamp) if type(row) is tuple
                          else _loss_line(prefix, row, step, int((stamp + offset) * 1e6))
                          for prefix, row, step, stamp in self.lines)
        os.replace(hidden, os.path.join(self.rank_dir, str(last)))
        self.lines, self.buffered, self.flush_now = [], 0, False
        self.last_flush = time.perf_counter()
        self.hold_back()

    def write_meta(self) -> None:
        meta_path = os.path.join(self.out, f"rank_{self.rank}", META)
        with open(meta_path + ".partial", "w", encoding="utf-8") as fh:
            json.dump({"rank": self.rank, "tensors": self.meta,
                       "sampling": {"steps": self.step, "full_steps": self.full_steps, "every": self.every,
                                    "budget": None if self.fixed_every else BUDGET, "full_step_ms": round(self.full_cost * 1e3, 3),
                                    "step_ms": round(self.step_cost * 1e3, 3),
                                    "capture_share": round(self.spent_total / self.own_total, 5)
                                    if self.own_total else None,
                                    "agreement": self.agreement.describe() if self.agreement else None,
                                    "agreement_note": self.agreement_note or None,
                                    "stopped": self.stopped}}, fh)
        os.replace(meta_path + ".partial", meta_path)
        self._meta_written = len(self.meta)

    def hold_back(self) -> None:
        """The ring buffer's bound holds when the job writes faster than the watcher reads: while this rank has
        more than K + 1 files on disk beyond the watcher's allowance (ring.json: the files it keeps, plus K), wait for it to read and delete (never longer than RING_WAIT_SECONDS: a watcher that is gone
        does not stop the training). Looked at once a file, not once a step."""
        keep = self.keep
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


def map_control_seq(out: str):
    """control.seq mapped read-only, seen as one unsigned 8-byte word (a memoryview: [0] reads it, no bytes
    object made), or False when it cannot be (no watcher made it)."""
    import mmap
    try:
        fd = os.open(os.path.join(out, CONTROL_SEQ), os.O_RDONLY)
    except OSError:
        return False
    try:
        if os.fstat(fd).st_size < 8:
            return False
        return memoryview(mmap.mmap(fd, 8, prot=mmap.PROT_READ)).cast("Q")
    except (OSError, ValueError):
        return False
    finally:
        os.close(fd)


def make_control_seq(out: str) -> None:
    """The watcher's side, before the job starts: control.seq at 0."""
    with open(os.path.join(out, CONTROL_SEQ), "wb") as fh:
        fh.write(bytes(8))


def count_control_seq(out: str) -> None:
    """The watcher's side, after control.json is written whole: control.seq counted up in place (the ranks'
    mappings see it at their next step)."""
    path = os.path.join(out, CONTROL_SEQ)
    try:
        with open(path, "r+b") as fh:
            count = int.from_bytes(fh.read(8).ljust(8, b"\0"), "little") + 1
            fh.seek(0)
            fh.write(count.to_bytes(8, "little"))
    except OSError:
        pass          # no control.seq: the ranks stat control.json before each step


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
            if not watch.pynative or id(self) not in watch.cell_paths:
                return original_call(self, *args, **kwargs)
            path, class_name = watch.cell_paths[id(self)]
            if class_name == "Softmax" and args and watch.cell_stack:
                watch.softmax_input(args[0])
            watch.cell_stack.append((path, class_name))
            try:
                result = original_call(self, *args, **kwargs)
            finally:
                watch.cell_stack.pop()
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
            watch.cell_stack = []
        watch.after_step(args, result)
        return result

    __call__.__wrapped__ = original_call      # type: ignore[attr-defined]
    cell_class.__call__ = __call__


def _watch_softmax() -> None:
    """PyNative: the functional softmax notes its input when it is attention logits (see Watch.softmax_input).
    Replaced where it is looked up (mindspore.ops, ops.function, nn_func) at the first step."""
    from mindspore import ops
    from mindspore.ops import function as functional
    from mindspore.ops.function import nn_func
    original = nn_func.softmax
    if getattr(original, "_msoverflow", False):
        return

    def softmax(input, axis=-1, *, dtype=None):      # noqa: A002 - MindSpore's own argument name
        watch = _watch
        if watch is not None and watch.depth and watch.cell_stack:
            watch.softmax_input(input)
        return original(input, axis, dtype=dtype)

    softmax._msoverflow = True      # type: ignore[attr-defined]
    softmax.__doc__ = original.__doc__
    for where in (ops, functional, nn_func):
        if getattr(where, "softmax", None) is original:
            where.softmax = softmax
