"""The watch's report: events, the root cause, `first` (analyze's report of the dumped event step), and how the
capture went. Its renderers (text, JSON, HTML with the headroom over steps) are msoverflow/render/watch.py's."""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ..errors import EXIT_ANOMALY, EXIT_CLEAN, EXIT_INCONCLUSIVE
from .cause import RootCause
from .detect import NONFINITE, PROJECTED, Event
from .series import Store, headroom

SERIES_POINTS = 2000     # points a tensor in the JSON report (and the steps around events): a long run, a bounded report
EVENT_MARGIN = 20        # steps each side of an event kept whole
_COLUMNS = ("steps", "max_abs", "min", "max", "mean_abs", "nonfinite")


def thin(one: dict, events: List[int], limit: int = SERIES_POINTS) -> dict:
    """One tensor's series with at most about `limit` points: the steps within EVENT_MARGIN of an event, the first
    and the last kept whole; the rest cut into equal runs of steps, each giving its largest max |x| and its first
    non-finite reading (a peak or a NaN is never thinned away). Marked `thinned` with how many points it had."""
    steps = one["steps"]
    if len(steps) <= limit:
        return one
    keep = {0, len(steps) - 1}
    for step in events:
        lo = bisect.bisect_left(steps, step - EVENT_MARGIN)
        hi = bisect.bisect_right(steps, step + EVENT_MARGIN)
        keep.update(range(lo, hi))
    rest = [i for i in range(len(steps)) if i not in keep]
    runs = max(1, (limit - len(keep)) // 2)
    size = -(-len(rest) // runs)
    for start in range(0, len(rest), size):
        run = rest[start:start + size]
        keep.add(max(run, key=lambda i: -math.inf if one["max_abs"][i] is None else one["max_abs"][i]))
        bad = next((i for i in run if one["nonfinite"][i]), None)
        if bad is not None:
            keep.add(bad)
    kept = sorted(keep)
    out = {k: ([v[i] for i in kept] if k in _COLUMNS else v) for k, v in one.items()}
    out["thinned"] = {"points": len(steps), "kept": len(kept),
                      "how": f"the largest max |x| and the first non-finite reading of each run of steps; "
                             f"{EVENT_MARGIN} steps each side of an event whole"}
    return out


@dataclass
class WatchReport:
    source: str                              # the statistics directory
    events: List[Event]
    root_cause: Optional[RootCause]
    store: Store
    first: Optional[Any] = None              # analyze's Report of the event step's full dump
    first_dump: Optional[str] = None
    command: List[str] = field(default_factory=list)
    command_exit: Optional[int] = None
    stopped_at: Optional[int] = None
    capture: Dict[str, Any] = field(default_factory=dict)    # keep, disk peak, steps deleted ...
    notes: List[str] = field(default_factory=list)

    @property
    def steps_read(self) -> int:
        return max((len(s) for s in self.store.steps.values()), default=0)

    @property
    def exit_code(self) -> int:
        if self.steps_read == 0:
            return EXIT_INCONCLUSIVE
        if self.events:
            return EXIT_ANOMALY
        return EXIT_CLEAN

    @property
    def verdict(self) -> str:
        if self.steps_read == 0:
            return "INCONCLUSIVE"
        if any(e.kind == NONFINITE for e in self.events):
            return "NON-FINITE"
        if any(e.kind != PROJECTED for e in self.events):
            return "BLOW-UP"
        return "WARNING" if self.events else "HEALTHY"

    def to_dict(self) -> dict:
        first = None
        if self.first is not None:
            from ..safeio import json_safe
            first = json_safe(self.first.to_dict())
        return {
            "kind": "watch", "verdict": self.verdict, "source": self.source,
            "ranks": sorted(self.store.steps), "steps_read": {str(r): len(s) for r, s in self.store.steps.items()},
            "tensors": len(self.store.tensors),
            "events": [e.to_dict() for e in self.events],
            "root_cause": self.root_cause.to_dict() if self.root_cause else None,
            "first": first, "first_dump": self.first_dump,
            "command": self.command, "command_exit": self.command_exit, "stopped_at": self.stopped_at,
            "capture": self.capture, "warnings": self.store.warnings[:50], "notes": self.notes,
            "series": self.series(),
        }

    def series(self) -> List[dict]:
        """Every tracked tensor's statistics over the steps read: max |x|, min, max, mean |x|, NaN/inf count; a long
        run's thinned to SERIES_POINTS a tensor (thin), the steps around each event whole."""
        events = sorted({e.step for e in self.events})
        return [thin(self.store.series_of(key), events) for key in self.store.tensors]

    def headroom_series(self, plotted: int) -> List[tuple]:
        """(tracked, steps, headroom) of the tensors closest to their limit (or named by an event)."""
        store = self.store
        named = {(e.rank, e.tensor) for e in self.events}
        rows = []
        for key, tracked in store.tensors.items():
            limit = tracked.limit
            if limit is None:
                continue
            pts: List[Tuple[int, float]] = []
            for s, v in store.values(key):
                room = headroom(v, limit)
                if room is not None:
                    pts.append((s, room))
            if not pts:
                continue
            low = min(h for _s, h in pts)
            rows.append((0 if (tracked.rank, tracked.name) in named else 1, low, tracked, pts))
        rows.sort(key=lambda r: (r[0], r[1]))
        return [(t, [s for s, _h in pts], [h for _s, h in pts]) for _n, _l, t, pts in rows[:plotted]]
