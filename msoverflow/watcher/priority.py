"""The watcher's rounds run on the CPU the training leaves idle.

Measured on the 2-core machine of docs/performance.md: each round of the watcher (read a file of ~400 steps, run
the detectors) is a burst of 20-30 ms of CPU, and at normal priority (or at nice 19, or SCHED_BATCH with nice 19)
it held a core the training's threads were waking to use: a demo step took 7-25 ms instead of 1.2 ms once a round,
about 3.5% of a 2,000-step run's time. At the scheduler's idle priority (Linux SCHED_IDLE) a waking training thread
takes the core at once: no such step.

An idle-priority thread gets almost no CPU while other work fills every core (another job on the machine), and an
unprivileged thread cannot leave SCHED_IDLE by itself. So the idle priority is taken only where the thread can be
put back (root, CAP_SYS_NICE, or an RLIMIT_NICE that allows it: probed on a throwaway thread first), and a guard
thread at normal priority puts it back when a round has not completed for STARVED_SECONDS; it then stays normal.
Where none of this is possible (not Linux, not permitted), the rounds run as before, at normal priority.

The watcher's other threads (the job's output pumps, the guard) share the interpreter lock with the idle one: while
the cores are full, an idle thread caught mid-round keeps the lock until it is next given a slice (under CFS, a
fraction of a second), so they wait that long; the job's output waits in its pipe meanwhile, and the guard then
puts the rounds back to normal.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Optional

STARVED_SECONDS = 2.0        # a round takes the poll's 0.2 s and its reading; ten of those without one: starved
GUARD_SECONDS = 0.25


def _set_policy(tid: int, policy: int) -> None:
    os.sched_setscheduler(tid, policy, os.sched_param(0))


def _can_come_back() -> Optional[str]:
    """None when a thread may go to SCHED_IDLE and back to SCHED_OTHER; else why not (tried on a thread of its own,
    which is left at idle priority when it cannot come back and then ends)."""
    idle, other = getattr(os, "SCHED_IDLE", None), getattr(os, "SCHED_OTHER", None)
    if idle is None or other is None or not hasattr(os, "sched_setscheduler"):
        return "this system has no SCHED_IDLE"
    found = {}

    def probe():
        try:
            _set_policy(0, idle)
        except OSError as exc:
            found["why"] = f"SCHED_IDLE refused ({exc.strerror or exc})"
            return
        try:
            _set_policy(0, other)
        except OSError as exc:
            found["why"] = f"a thread at SCHED_IDLE could not be put back ({exc.strerror or exc})"

    thread = threading.Thread(target=probe, name="msoverflow-priority-probe", daemon=True)
    thread.start()
    thread.join()
    return found.get("why")


class SpareCpu:
    """with SpareCpu() as spare: ... spare.round_done() after each round. The calling thread runs at idle priority
    inside the block while its rounds keep up (see the module's doc); `state` says how it went, for the report."""

    def __init__(self, starved_seconds: float = STARVED_SECONDS, enabled: bool = True):
        self.starved_seconds = starved_seconds
        self.enabled = enabled
        self.idle = False
        self.state = "normal"
        self.last_round = time.monotonic()
        self._tid = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._guard: Optional[threading.Thread] = None

    def __enter__(self) -> "SpareCpu":
        if not self.enabled:
            self.state = "normal (idle priority not asked)"
            return self
        why = _can_come_back()
        if why is None and os.sched_getscheduler(0) != os.SCHED_OTHER:
            why = "the thread's scheduling policy was chosen by its program: left as it was"
        if why is not None:
            self.state = f"normal ({why})"
            return self
        self._tid = threading.get_native_id()
        try:
            _set_policy(0, os.SCHED_IDLE)
        except OSError as exc:
            self.state = f"normal (SCHED_IDLE refused: {exc.strerror or exc})"
            return self
        self.idle, self.state = True, "idle"
        self.last_round = time.monotonic()
        self._guard = threading.Thread(target=self._watch_rounds, name="msoverflow-priority-guard", daemon=True)
        self._guard.start()
        return self

    def round_done(self) -> None:
        self.last_round = time.monotonic()

    def _watch_rounds(self) -> None:
        while not self._stop.wait(GUARD_SECONDS):
            late = time.monotonic() - self.last_round
            if late > self.starved_seconds:
                self.back_to_normal(f"idle, then normal: a round took over {late:.1f} s (the machine's cores "
                                     "were busy)")
                return

    def back_to_normal(self, state: str) -> None:
        """The thread at SCHED_OTHER again (once, for the rest of the block), `state` then saying why. Also called
        before a request whose timing matters (the stop step is reckoned from the steps on disk and must reach the
        ranks before they get there: at idle priority the thread could lose the core between the two)."""
        with self._lock:
            if not self.idle:
                return
            try:
                _set_policy(self._tid, os.SCHED_OTHER)
            except OSError as exc:       # (probed: not expected)
                self.state = f"idle: could not be put back ({exc.strerror or exc})"
                return
            self.idle, self.state = False, state

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._guard is not None:
            self._guard.join()
        self.back_to_normal(self.state)      # (the job ended: its state, "idle", stays as it was)
