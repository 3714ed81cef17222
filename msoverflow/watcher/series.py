"""Per-step statistics of tracked tensors, read from statistic.csv step directories (the watch's own, or a finished
MindSpore statistics dump), through the one statistic.csv reader. Never imports MindSpore.

Completeness (the rules analyze uses, applied live): a step directory is read only once it exists under its final
name (the watch writes it whole, then renames it), only when every rank that writes has that step or the job has
ended, and a step whose row count falls short of the rank's earlier steps is named in a warning.
"""
from __future__ import annotations

import bisect
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from ..dtypes import dtype_max
from ..readers.statistic_csv import read_table

STEP_DIR = re.compile(r"^\d+$")
RANK_DIR = re.compile(r"^rank_(\d+)$")
META = "watch_tensors.json"
# kinds in the order a tie on the onset step is broken: what feeds the step comes before what it makes
KIND_ORDER = {"input": 0, "optimizer setting": 1, "optimizer state": 2, "parameter": 3, "update": 4,
              "attention logits": 5, "cell output": 6, "op output": 7, "loss": 8}


@dataclass
class Tracked:
    key: str                 # rank-qualified
    rank: int
    name: str
    kind: str                # input | parameter | update | optimizer state | optimizer setting | cell output | loss
    op: str
    cell: str
    cell_class: str
    dtype: Optional[str]

    @property
    def limit(self) -> Optional[float]:
        return dtype_max(self.dtype)

    @property
    def label(self) -> str:
        return self.name if self.rank == 0 else f"{self.name} (rank {self.rank})"


@dataclass
class Point:
    max_abs: Optional[float]
    low: Optional[float]
    high: Optional[float]
    nonfinite: int
    count: int
    mean_abs: Optional[float] = None


@dataclass
class Store:
    """Everything read so far: tensors, and per tensor step -> Point."""
    tensors: Dict[str, Tracked] = field(default_factory=dict)
    points: Dict[str, Dict[int, Point]] = field(default_factory=dict)
    steps: Dict[int, List[int]] = field(default_factory=dict)       # rank -> steps read, in order
    rows: Dict[int, int] = field(default_factory=dict)              # rank -> rows of its fullest step
    warnings: List[str] = field(default_factory=list)
    recent_values: Dict[str, List[Tuple[int, float]]] = field(default_factory=dict)   # (step, max |x|), in order

    recent_steps: Dict[str, List[int]] = field(default_factory=dict)
    read_at: Dict[int, Dict[str, None]] = field(default_factory=dict)   # step -> the tensors read there (most
                                     # steps: the loss alone; the detectors look at those, not at every tensor)
    full_steps: Dict[int, List[int]] = field(default_factory=dict)   # rank -> steps read with more than the loss
    order: Dict[str, int] = field(default_factory=dict)             # tensor -> the order it was first read in
    nonfinite_at: Dict[int, List[str]] = field(default_factory=dict)  # step -> the tensors holding NaN/inf there

    def track(self, tracked: Tracked) -> None:
        if tracked.key not in self.tensors:
            self.order[tracked.key] = len(self.order)
            self.tensors[tracked.key] = tracked

    def add_point(self, key: str, step: int, point: Point) -> None:
        """A tracked tensor's reading at a step (read in step order)."""
        self.points.setdefault(key, {})[step] = point
        self.read_at.setdefault(step, {})[key] = None
        if point.nonfinite:
            self.nonfinite_at.setdefault(step, []).append(key)
        if point.max_abs is not None:
            self.recent_values.setdefault(key, []).append((step, point.max_abs))
            self.recent_steps.setdefault(key, []).append(step)

    def read_in_order(self, step: int) -> List[str]:
        """The tensors read at a step, in the order of self.tensors."""
        return sorted(self.read_at.get(step, ()), key=self.order.__getitem__)

    def recent(self, key: str, n: int, upto: int) -> List[Tuple[int, float]]:
        """The last n finite readings of a tensor up to a step: what the detectors read each step (O(n + log
        steps), not O(steps))."""
        end = bisect.bisect_right(self.recent_steps.get(key, []), upto)
        return self.recent_values.get(key, [])[max(0, end - n):end]

    def series(self, key: str) -> List[Tuple[int, Point]]:
        return sorted(self.points.get(key, {}).items())

    def values(self, key: str, upto: Optional[int] = None) -> List[Tuple[int, float]]:
        """(step, max |x|) of a tensor's finite readings (loss: |loss|), up to a step."""
        return [(s, p.max_abs) for s, p in self.series(key)
                if p.max_abs is not None and (upto is None or s <= upto)]

    def add_step(self, rank: int, step: int, path: str, meta: Dict[str, dict], warn: Callable[[str], None]) -> List[int]:
        """Read one step directory's statistic.csv; the steps it held (the watch's files hold several, each row
        with its Step; a MindSpore statistics dump's file is the directory's one step)."""
        # the one statistic.csv parser, in this thread (threads=False: the watcher's rounds run at idle priority,
        # and so does their parsing). pyarrow reads a file of 978 rows in 1.2 ms, the row-by-row route in 13 ms;
        # the watcher pays pyarrow's first use (~0.3 s of CPU) before the training's steps (warm_up)
        table = read_table(path, warn, threads=False)
        if table is None:
            self.steps.setdefault(rank, []).append(step)
            return [step]
        column = table.columns.get("step")
        if column is None or not meta:
            events = table.events(np.arange(table.size), rank, "0", step)
            if self.rows.get(rank, 0) > len(events):
                warn(f"{path}: rank {rank} step {step} holds {len(events)} rows, earlier steps "
                     f"{self.rows[rank]}: read as incomplete")
            self.rows[rank] = max(self.rows.get(rank, 0), len(events))
            self.add_events(rank, step, events, meta)
            self.steps.setdefault(rank, []).append(step)
            return [step]
        # the watch's own file: written whole and renamed into place, its row count varies by design (sampled)
        values, nulls = column
        values = np.where(nulls, step, values)          # a row without its Step: the directory's step
        # the file's rows made into events at once (its shapes and dtypes parsed once, not once a step), then
        # taken step by step
        by_step: Dict[int, list] = {}
        for event, one in zip(table.events(np.arange(table.size), rank, "0", step), values.tolist(), strict=True):
            event.step = one
            by_step.setdefault(one, []).append(event)
        held = []
        for one in sorted(by_step):
            self.add_events(rank, one, by_step[one], meta)
            self.steps.setdefault(rank, []).append(one)
            held.append(one)
        return held

    def add_events(self, rank: int, step: int, events, meta: Dict[str, dict]) -> None:
        if any(meta.get(e.op_name, {}).get("kind") != "loss" for e in events):
            self.full_steps.setdefault(rank, []).append(step)
        for event in events:
            info = meta.get(event.op_name)
            if info is None:      # a MindSpore statistics dump: the op and its scope name the tensor
                name = f"{event.op_name} {event.io.lower()} {event.slot}"
                kind = "parameter" if event.is_parameter else "op output"
                info = {"name": name, "kind": kind, "op": event.op_type, "cell": _scope(event.op_name),
                        "cell_class": "", "dtype": event.dtype}
            key = f"{rank}:{info['kind']}:{info['name']}"
            if key not in self.tensors:
                self.track(Tracked(key, rank, info["name"], info["kind"], info["op"], info["cell"],
                                   info.get("cell_class", ""), info.get("dtype") or event.dtype))
            stats = event.stats
            if stats is not None:
                self.add_point(key, step, Point(stats.max_abs, stats.min, stats.max, stats.nonfinite, stats.count,
                                                stats.mean_abs))

    def series_of(self, key: str) -> dict:
        """One tracked tensor's statistics over the steps read, as the JSON report and the API give them."""
        tracked = self.tensors[key]
        points = self.series(key)
        return {"tensor": tracked.name, "rank": tracked.rank, "kind": tracked.kind, "op": tracked.op,
                "cell": tracked.cell, "dtype": tracked.dtype, "steps": [s for s, _p in points],
                "max_abs": [p.max_abs for _s, p in points], "min": [p.low for _s, p in points],
                "max": [p.high for _s, p in points], "mean_abs": [p.mean_abs for _s, p in points],
                "nonfinite": [p.nonfinite for _s, p in points]}


def _scope(op_name: str) -> str:
    return op_name.rsplit("_", 1)[0] if "_" in op_name else ""


def rank_dirs(root: str) -> Dict[int, str]:
    """rank -> its graph directory holding step directories (rank_{r}/{net}/{graph})."""
    found: Dict[int, str] = {}
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return found
    for name in names:
        m = RANK_DIR.match(name)
        if not m:
            continue
        rank_path = os.path.join(root, name)
        for net in sorted(os.listdir(rank_path)):
            net_path = os.path.join(rank_path, net)
            if not os.path.isdir(net_path) or net.startswith(".") or net in ("graphs", "execution_order"):
                continue
            for graph in sorted(os.listdir(net_path)):
                if STEP_DIR.match(graph) and os.path.isdir(os.path.join(net_path, graph)):
                    found[int(m.group(1))] = os.path.join(net_path, graph)
                    break
            if int(m.group(1)) in found:
                break
    return found


def steps_on_disk(graph_dir: str) -> List[int]:
    try:
        return sorted(int(n) for n in os.listdir(graph_dir) if STEP_DIR.match(n))
    except OSError:
        return []


def read_meta(root: str, rank: int) -> Dict[str, dict]:
    path = os.path.join(root, f"rank_{rank}", META)
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh).get("tensors", {})
    except (OSError, ValueError):
        return {}


class Follower:
    """Reads complete steps of a statistics directory as they appear (live), or all of them (finished)."""

    def __init__(self, root: str, store: Optional[Store] = None):
        self.root = root
        self.store = store or Store()
        self.read: Dict[int, int] = {}           # rank -> last step directory read
        self.held: Dict[Tuple[int, int], List[int]] = {}     # (rank, step directory) -> the steps it held

    def poll(self, finished: bool) -> List[int]:
        """Read every step now complete; the steps newly read on all ranks (ascending)."""
        dirs = rank_dirs(self.root)
        if not dirs:
            return []
        on_disk = {rank: steps_on_disk(path) for rank, path in dirs.items()}
        newest_common = min((steps[-1] if steps else -1) for steps in on_disk.values())
        new: set = set()
        for rank, path in sorted(dirs.items()):
            meta = None                              # read when the rank has a step to read (most polls: none)
            for step in on_disk[rank]:
                if step <= self.read.get(rank, -1):
                    continue
                if not finished and step > newest_common:
                    break                            # another rank has not written this step yet
                if meta is None:
                    meta = read_meta(self.root, rank)
                step_dir = os.path.join(path, str(step))
                csv_path = os.path.join(step_dir, "statistic.csv")
                if not os.path.isfile(csv_path):
                    self.store.warnings.append(f"{step_dir}: no statistic.csv: step {step} of rank {rank} not read")
                    held = [step]
                else:
                    held = self.store.add_step(rank, step, csv_path, meta, self.store.warnings.append)
                self.held[(rank, step)] = held
                self.read[rank] = step
                new.update(held)
        return sorted(new)


def headroom(value: Optional[float], limit: Optional[float]) -> Optional[float]:
    """Orders of magnitude left to the dtype's limit (log10 limit/|x|)."""
    if value is None or limit is None or value <= 0:
        return None
    return math.log10(limit / value)
