"""Early warnings and events from per-step statistics: run after every complete step (live) or over all steps
(a finished dump), with the same code.

  - projected_overflow: a float tensor's max |x| grows steadily (least squares on log max |x| over the last
    TREND_STEPS steps, at least GROWTH_MIN per step, most steps rising) and the trend reaches the dtype's largest
    finite value within `warn_ahead` steps;
  - spike: a step's value (loss, an input, a weight's update, a Cell's output) is far above its recent past:
    log value over the median of the previous SPIKE_WINDOW steps by more than SPIKE_MADS robust deviations
    (1.4826 MAD) and by at least SPIKE_FACTOR times; the median/MAD test, no fixed threshold on the value;
  - divergence: the loss climbs out of its own noise (rise.diverging: RISE_STEPS rises in a row to at least twice
    the lower quartile of its recent values, by more than NOISE_SIGMAS robust deviations of its steps): a finite
    blow-up under way;
  - nonfinite: a tracked tensor holds a NaN or an inf.
Each tensor warns once per kind.
"""
from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import asdict, dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

import numpy as np

from .rise import NOISE_WINDOW, RISE_STEPS, diverging
from .series import Store, Tracked

TREND_STEPS = 6
GROWTH_MIN = 0.03            # 3% a step: slower growth is not called a trend toward overflow
SPIKE_WINDOW = 20
SPIKE_MIN_HISTORY = 8
SPIKE_MADS = 8.0
SPIKE_FACTOR = 3.0
SPIKE_KINDS = ("loss", "input", "update", "cell output", "op output")
SIFT_FROM = 16               # a tensor with this many new readings in a batch is sifted (Detector.steps)
LOOKBACK = NOISE_WINDOW + RISE_STEPS     # the most readings before a step any test reads (recent(...) below)

NONFINITE, PROJECTED, SPIKE, DIVERGENCE = "nonfinite", "projected_overflow", "spike", "divergence"


@dataclass
class Event:
    step: int
    kind: str
    rank: int
    tensor: str
    tensor_kind: str
    op: str
    cell: str
    dtype: Optional[str]
    range_used: Optional[float]       # max |x| / the dtype's largest finite value, at this step
    growth: Optional[float]           # per step (0.25 = +25%/step) over the range used
    projected_step: Optional[int]     # the step the trend reaches the limit (projected_overflow)
    value: Optional[float]
    range: str                        # the steps the test used, "12-17"
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        where = f"{self.op}" + (f" in {self.cell}" if self.cell else "")
        rank = f"rank {self.rank} " if self.rank else ""
        parts = [f"{rank}step {self.step}: {self.kind.replace('_', ' ')}: {self.tensor} ({where}, {self.dtype})"]
        if self.range_used is not None and self.range_used >= 1e-4:
            parts.append(f"range used {_pct(self.range_used)}")
        if self.growth is not None:
            parts.append(f"growth {self.growth * 100:+.1f}%/step over steps {self.range}")
        if self.projected_step is not None:
            parts.append(f"projected to overflow at step {self.projected_step}")
        return ", ".join(parts) + (f": {self.detail}" if self.detail else "")


def _pct(x: float) -> str:
    if x >= 0.01:
        return f"{x * 100:.1f}%"
    return f"{x:.2g} of the limit"


def slope(points: List[Tuple[int, float]]) -> float:
    """Least-squares slope of log value over step."""
    xs = [s for s, _v in points]
    ys = [math.log(v) for _s, v in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def trend(store: Store, key: str, upto: int) -> Optional[Tuple[float, List[Tuple[int, float]]]]:
    """(growth per step, the points used) when the last TREND_STEPS positive values rise steadily."""
    points = [(s, v) for s, v in store.recent(key, TREND_STEPS, upto) if v > 0]
    if len(points) < TREND_STEPS or points[-1][0] != upto:
        return None
    rises = sum(1 for (_a, x), (_b, y) in zip(points, points[1:], strict=False) if y > x)
    if rises < len(points) - 2:          # (first: most steps of most tensors stop here, before the logs)
        return None
    growth = math.exp(slope(points)) - 1
    if growth < GROWTH_MIN:
        return None
    return growth, points


class Detector:
    def __init__(self, warn_ahead: int = 10):
        self.warn_ahead = warn_ahead
        self.warned: Set[Tuple[str, str]] = set()

    def step(self, store: Store, step: int, only: Optional[Set[str]] = None) -> List[Event]:
        """The events of one step (the definition; `only`: the tensors to test, the others known to raise none)."""
        events: List[Event] = []
        for key in store.read_in_order(step):
            if only is not None and key not in only:
                continue
            tracked, point = store.tensors[key], store.points[key][step]
            if point.nonfinite and (key, NONFINITE) not in self.warned:
                events.append(self._event(store, tracked, step, NONFINITE, None, None, str(step),
                                          f"{point.nonfinite} NaN/inf value(s)"))
                self.warned.add((key, NONFINITE))
                continue
            events += self._projected(store, tracked, step)
            events += self._spike(store, tracked, step)
            if tracked.kind == "loss":
                events += self._divergence(store, tracked, step)
        events.sort(key=lambda e: (e.step, _KIND_RANK[e.kind], e.rank))
        return events

    def steps(self, store: Store, steps: Sequence[int]) -> List[Event]:
        """The events of the steps newly read (ascending), in order: step() on each, with the readings no test
        can fire on sifted out first, a tensor's whole batch at once (most readings are a loss going its usual
        way: step() on each cost the watcher ~17 us a step). The sifting only drops what step() would drop
        (tests/unit/test_watch_detect.py runs both on random series)."""
        if not steps:
            return []
        wanted = set(steps)
        tested: Dict[int, Set[str]] = {}
        for key in store.recent_values:
            for one in self._may_fire(store, key, steps[0], steps[-1]):
                if one in wanted:
                    tested.setdefault(one, set()).add(key)
        for one in steps:
            for key in store.nonfinite_at.get(one, ()):
                if (key, NONFINITE) not in self.warned:
                    tested.setdefault(one, set()).add(key)
        events: List[Event] = []
        for one in sorted(tested):
            events += self.step(store, one, tested[one])
        return events

    def _may_fire(self, store: Store, key: str, first: int, last: int) -> Iterable[int]:
        """The steps from `first` to `last` at which a test of step() may fire for this tensor's finite readings:
        each test's necessary condition, over the batch's readings at once."""
        tracked = store.tensors[key]
        steps_read = store.recent_steps.get(key, [])
        start, end = bisect.bisect_left(steps_read, first), bisect.bisect_right(steps_read, last)
        if end - start < SIFT_FROM:
            return steps_read[start:end]
        projected = (tracked.limit is not None and tracked.kind != "optimizer setting"
                     and (key, PROJECTED) not in self.warned)
        spike = tracked.kind in SPIKE_KINDS and (key, SPIKE) not in self.warned
        divergence = tracked.kind == "loss" and (key, DIVERGENCE) not in self.warned
        if not (projected or spike or divergence):
            return ()
        low = max(0, start - LOOKBACK)
        values = np.fromiter((v for _s, v in store.recent_values[key][low:end]), dtype=np.float64,
                             count=end - low)
        at = np.arange(start - low, end - low)          # the batch's readings, in `values`
        positive = values > 0
        rose = np.zeros(len(values), dtype=np.int64)        # rose[j]: reading j above reading j - 1
        rose[1:] = values[1:] > values[:-1]
        rises = np.concatenate(([0], np.cumsum(rose)))      # rises[j + 1] - rises[i]: rises among readings i..j
        fire = np.zeros(len(at), dtype=bool)
        if projected:      # trend(): the last TREND_STEPS readings all positive, all but one of their steps rises
            whole = np.concatenate(([0], np.cumsum(positive)))
            since = np.maximum(at - (TREND_STEPS - 1), 0)
            fire |= ((whole[at + 1] - whole[since] == TREND_STEPS)
                     & (rises[at + 1] - rises[since + 1] >= TREND_STEPS - 2))
        if divergence:     # rise.diverging(): RISE_STEPS rises in a row up to the reading
            since = np.maximum(at - (RISE_STEPS - 1), 0)
            fire |= rises[at + 1] - rises[since] >= RISE_STEPS
        if spike:          # _spike(): at least SPIKE_FACTOR over the lower middle of the previous positive
                           # readings, so over their least (loosened by a hair: a superset of its float test)
            padded = np.concatenate((np.full(SPIKE_WINDOW, np.inf), np.where(positive, values, np.inf)))
            least = np.lib.stride_tricks.sliding_window_view(padded, SPIKE_WINDOW)[at]   # readings at-20..at-1
            fire |= positive[at] & (values[at] >= least.min(axis=1) * SPIKE_FACTOR * (1 - 1e-9))
        return [steps_read[low + j] for j in at[fire].tolist()]

    def _event(self, store: Store, tracked: Tracked, step: int, kind: str, growth, projected, used_range,
               detail) -> Event:
        point = store.points[tracked.key][step]
        limit = tracked.limit
        used = point.max_abs / limit if point.max_abs is not None and limit else None
        return Event(step, kind, tracked.rank, tracked.name, tracked.kind, tracked.op, tracked.cell, tracked.dtype,
                     used, growth, projected, point.max_abs, used_range, detail)

    def _projected(self, store: Store, tracked: Tracked, step: int) -> List[Event]:
        limit = tracked.limit
        if limit is None or tracked.kind in ("optimizer setting",) or (tracked.key, PROJECTED) in self.warned:
            return []
        found = trend(store, tracked.key, step)
        if found is None:
            return []
        growth, points = found
        now = points[-1][1]
        steps_left = math.log(limit / now) / math.log1p(growth)
        if steps_left > self.warn_ahead:
            return []
        self.warned.add((tracked.key, PROJECTED))
        projected = step + max(1, math.ceil(steps_left))
        return [self._event(store, tracked, step, PROJECTED, growth, projected, f"{points[0][0]}-{points[-1][0]}",
                            f"max |x| {points[0][1]:.4g} -> {now:.4g}, limit {limit:.4g}")]

    def _spike(self, store: Store, tracked: Tracked, step: int) -> List[Event]:
        if tracked.kind not in SPIKE_KINDS or (tracked.key, SPIKE) in self.warned:
            return []
        values = [(s, v) for s, v in store.recent(tracked.key, SPIKE_WINDOW + 1, step) if v > 0]
        if not values or values[-1][0] != step:
            return []
        past = values[:-1][-SPIKE_WINDOW:]
        if len(past) < SPIKE_MIN_HISTORY:
            return []
        # the cheap test first: most steps of most tensors stop there (the lower middle value: never above the
        # median of the logs below, so no step that test would pass stops here)
        now = math.log(values[-1][1])
        if now - math.log(statistics.median_low(v for _s, v in past)) < math.log(SPIKE_FACTOR):
            return []
        gaps = sorted(b[0] - a[0] for a, b in zip(past, past[1:], strict=False))
        if step - past[-1][0] > gaps[len(gaps) // 2]:
            return []        # read farther apart than its history (a sampled step): a change, not a one-step spike
        logs = [math.log(v) for _s, v in past]
        median = statistics.median(logs)
        mad = statistics.median(abs(x - median) for x in logs) * 1.4826
        if now - median < math.log(SPIKE_FACTOR) or now - median < SPIKE_MADS * mad:
            return []
        self.warned.add((tracked.key, SPIKE))
        score = (now - median) / mad if mad > 0 else math.inf
        return [self._event(store, tracked, step, SPIKE, None, None, f"{past[0][0]}-{past[-1][0]}",
                            f"{values[-1][1]:.4g} against a median of {math.exp(median):.4g} "
                            f"({math.exp(now - median):.1f}x, {score:.0f} robust deviations)")]

    def _divergence(self, store: Store, tracked: Tracked, step: int) -> List[Event]:
        if (tracked.key, DIVERGENCE) in self.warned:
            return []
        readings = store.recent(tracked.key, NOISE_WINDOW + RISE_STEPS, step)
        if not readings or readings[-1][0] != step:
            return []
        found = diverging([v for _s, v in readings])
        if found is None:
            return []
        self.warned.add((tracked.key, DIVERGENCE))
        last = readings[-(RISE_STEPS + 1):]
        growth = math.exp(slope(last)) - 1
        now, low, noise = readings[-1][1], found["low"], found["noise"]
        noise_text = f", {found['rise'] / noise:.0f} robust deviations of its steps" if noise else ""
        return [self._event(store, tracked, step, DIVERGENCE, growth, None, f"{last[0][0]}-{last[-1][0]}",
                            f"rose {RISE_STEPS} steps in a row to {now:.4g}, {now / low:.1f}x its lower quartile "
                            f"{low:.4g}{noise_text}")]


_KIND_RANK = {NONFINITE: 0, SPIKE: 1, DIVERGENCE: 2, PROJECTED: 3}


def scan(store: Store, warn_ahead: int = 10) -> List[Event]:
    """Every event over all steps read (a finished dump): the live detector, fed every step at once."""
    return Detector(warn_ahead).steps(store, sorted({s for steps in store.steps.values() for s in steps}))


def by_kind(events: List[Event]) -> Dict[str, List[Event]]:
    out: Dict[str, List[Event]] = {}
    for e in events:
        out.setdefault(e.kind, []).append(e)
    return out
