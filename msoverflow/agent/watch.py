"""watch_status(dir): what a `msoverflow watch` directory holds, for an agent checking on a running training.

Reads the directory as msoverflow/watcher/session.py writes it (its names are imported from there, docs/watch.md):
`watch_events.jsonl` (one warning or event a line, appended live), `stats/rank_{r}/{net}/{graph}/{step}/` (the
complete steps still on disk), `stats/control.json` (`{"stop": why}` once the watcher asked the job to stop),
`stats/rank_{r}/watch_tensors.json` (the step each rank stopped before, once it did) and `dump_step{N}/` (the tensor dump of an event step, which analyze reads). A directory holding none of these is
answered `found: false`, never guessed at.
"""
from __future__ import annotations

import os
import re
from collections import Counter, deque
from typing import Deque, Dict, List

from ..watcher.series import META
from ..watcher.session import CONTROL, EVENT_DUMP, EVENTS_LOG, STATS_DIR, stopped_before
from .answer import call, fit

EVENTS, STATS = EVENTS_LOG, STATS_DIR
SHOWN_EVENTS = 10
_RANK = re.compile(r"rank_(\d+)$")
_STEP = re.compile(r"\d+$")
_EVENT_DUMP = re.compile(re.escape(EVENT_DUMP).replace(re.escape("{step}"), r"(\d+)") + "$")
_EVENT_FIELDS = ("step", "kind", "rank", "tensor", "tensor_kind", "op", "cell", "dtype", "range_used", "growth",
                 "projected_step", "value", "range", "detail")


def watch_status(directory: str) -> dict:
    if os.path.basename(directory) == STATS and os.path.isfile(os.path.join(os.path.dirname(directory), EVENTS)):
        directory = os.path.dirname(directory)
    events_file = os.path.join(directory, EVENTS)
    stats = os.path.join(directory, STATS)
    if not os.path.isfile(events_file) and not os.path.isdir(stats):
        return {"found": False, "dir": directory,
                "reason": f"no watch found: {directory} holds no {EVENTS} and no {STATS}/ (what `msoverflow watch "
                          "--dump-dir DIR` writes)",
                "next": [call("analyze", "read it as a dump instead", path=directory)]}
    events, total, kinds, unreadable = _events(events_file)
    steps = _steps(stats)
    stop_asked = _stop_asked(os.path.join(stats, CONTROL))
    dumps = sorted((int(m.group(1)), name) for name in _names(directory) if (m := _EVENT_DUMP.match(name))
                   and os.path.isdir(os.path.join(directory, name)))
    answer: Dict[str, object] = {
        "found": True, "dir": directory,
        "steps_on_disk": {str(rank): {"count": len(s), "first": s[0], "last": s[-1]} if s else {"count": 0}
                          for rank, s in sorted(steps.items())},
        "events_total": total, "events_by_kind": dict(kinds), "events_last": events,
        "unreadable_event_lines": unreadable,
        "stop_asked": stop_asked,
        "stopped_before_step": {str(rank): _stopped_before(os.path.join(stats, f"rank_{rank}", META))
                                for rank in sorted(steps)},
        "event_dumps": [{"step": step, "path": os.path.join(directory, name)} for step, name in dumps],
    }
    nxt = [call("analyze", f"the origin of the event at step {step}", path=os.path.join(directory, name))
           for step, name in dumps[:2]]
    if not dumps and total:
        nxt.append(call("watch_status", "check again as the run goes on (warnings come before a blow-up)",
                        dir=directory))
    answer["next"] = nxt
    return fit(answer)


def _names(directory: str) -> List[str]:
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []


def _events(path: str):
    """The last SHOWN_EVENTS event lines (each cut to its documented fields), how many there are and of which
    kinds; memory stays flat however long the file (the safe-I/O line reader, a bounded deque)."""
    from ..safeio import bounded_lines, loads_json, open_regular
    last: Deque[dict] = deque(maxlen=SHOWN_EVENTS)
    kinds: Counter = Counter()
    unreadable = 0
    try:
        with open_regular(path, "r", encoding="utf-8", errors="replace") as fh:
            for line in bounded_lines(fh):
                if not line.strip():
                    continue
                try:
                    record = loads_json(line)
                except ValueError:
                    unreadable += 1
                    continue
                if isinstance(record, dict):
                    last.append({k: record.get(k) for k in _EVENT_FIELDS if k in record})
                    kinds[str(record.get("kind"))] += 1
                else:
                    unreadable += 1
    except OSError:
        pass
    return list(last), sum(kinds.values()), kinds, unreadable


def _steps(stats: str) -> Dict[int, List[int]]:
    found: Dict[int, List[int]] = {}
    for name in _names(stats):
        m = _RANK.match(name)
        if not m:
            continue
        steps: List[int] = []
        rank_dir = os.path.join(stats, name)
        for net in _names(rank_dir):
            net_dir = os.path.join(rank_dir, net)
            if net.startswith(".") or not os.path.isdir(net_dir):
                continue
            for graph in _names(net_dir):
                steps += [int(s) for s in _names(os.path.join(net_dir, graph)) if _STEP.match(s)]
        found[int(m.group(1))] = sorted(set(steps))
    return found


def _stop_asked(path: str):
    """Why the watcher asked the job to stop (None: not asked)."""
    from ..safeio import load_json
    try:
        value = load_json(path).get("stop")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _stopped_before(path: str):
    """The step a rank stopped before, as it wrote it (None: still running, or it ended on its own)."""
    from ..safeio import load_json
    try:
        meta = load_json(path)
    except (OSError, ValueError):
        return None
    return stopped_before(meta.get("sampling") if isinstance(meta, dict) else None)
