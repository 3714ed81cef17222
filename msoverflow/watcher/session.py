"""`msoverflow watch`: run the training with the per-step statistics capture (msoverflow/watcher/capture.py, loaded
by the start-up hook), read each complete step as it lands, warn, keep the last K steps on disk, escalate on an
event, and report. The watcher process never imports MindSpore.

    outcome = watch(["python", "train.py"], "/tmp/w", keep=20, warn_ahead=10, on_event="dump")
    outcome.report.events, outcome.report.root_cause
"""
from __future__ import annotations

import json
import os
import shutil
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from ..logs import log
from ..readers.statistic_csv import warm_up
from .capture import CONTROL, RING, count_control_seq, make_control_seq
from .cause import root_cause
from .detect import NONFINITE, PROJECTED, Detector, Event, scan
from .priority import SpareCpu
from .report import WatchReport
from .series import META, Follower, Store, rank_dirs, steps_on_disk

INSTALLER = "msoverflow.watcher.capture"
HOOK_DIR = ".msoverflow_watch_hook"
STATS_DIR = "stats"
EVENTS_LOG = "watch_events.jsonl"       # one warning or event a line, appended live
EVENT_DUMP = "dump_step{step}"          # the tensor dump of an event step, which analyze reads
ON_EVENT = ("stop", "dump", "continue")
POLL_SECONDS = 0.2
DENSE_ON_EVENT = 30          # full steps asked of every rank after the first event (the event's region)


@dataclass
class WatchOutcome:
    report: WatchReport
    out_dir: str

    @property
    def exit_code(self) -> int:
        return self.report.exit_code


def _disk_bytes(root: str) -> int:
    total = 0
    for here, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(here, name))
            except OSError:
                pass
    return total


class Ring:
    """Keeps the last `keep` steps of each rank on disk, and its last `keep` full steps (the capture samples: the
    history the detectors and the root cause read again from a finished watch); the steps around an event (the
    `keep` before it and the one after) are never deleted. A step directory of the watch holds several steps (held: (rank, directory) ->
    its steps, as the Follower read them); one not read yet, or of a MindSpore dump, holds its own step."""

    def __init__(self, root: str, keep: int, held: Optional[Dict[Tuple[int, int], List[int]]] = None,
                 store: Optional[Store] = None):
        self.root, self.keep = root, keep
        self.held = held if held is not None else {}
        self.store = store
        self.protected: Set[int] = set()
        self.deleted = 0
        self.peak_bytes = 0
        self.peak_steps = 0

    def protect(self, step: int) -> None:
        self.protected.update(range(max(0, step - self.keep), step + 2))

    def trim(self, read_upto: int) -> None:
        for rank, path in rank_dirs(self.root).items():
            names = steps_on_disk(path)
            held = {name: self.held.get((rank, name), [name]) for name in names}
            self.peak_steps = max(self.peak_steps, sum(len(steps) for steps in held.values()))
            # the last K steps, and the last K full steps (sampled: the steps that hold more than the loss)
            full = self.store.full_steps.get(rank, []) if self.store is not None else []
            oldest = min([read_upto - self.keep + 1] + full[-self.keep:])
            for name, steps in held.items():
                if max(steps) < oldest and not self.protected.intersection(steps):
                    shutil.rmtree(os.path.join(path, str(name)), ignore_errors=True)
                    self.deleted += len(steps)
        self.peak_bytes = max(self.peak_bytes, _disk_bytes(self.root))
        # the files a rank may hold before it waits (capture.Watch.hold_back): those the ring keeps now (the last
        # K steps, the last K full steps, the steps around events) plus K; a fixed K + protected steps stalled a
        # sampled run whose last K full steps spread over more than K files (seen: 30 s waits on the 1M MLP)
        kept = max((len(steps_on_disk(path)) for path in rank_dirs(self.root).values()), default=0)
        allowance = max(self.keep + len(self.protected), kept + self.keep)
        path = os.path.join(self.root, RING)
        with open(path + ".partial", "w", encoding="utf-8") as fh:
            json.dump({"allowance": allowance}, fh)
        os.replace(path + ".partial", path)


def watch(command: Sequence[str], out_dir=None, *, keep: int = 20, warn_ahead: int = 10, on_event: str = "dump",
          full_every: Optional[int] = None, device: Optional[str] = None, echo: Optional[Callable[[str], None]] = None,
          say: Optional[Callable[[str], None]] = None, invoked_as=None) -> WatchOutcome:
    """Run `command` watched; the WatchReport. say(line): each warning, printed live (default: the log)."""
    from ..config.runner import fresh_dump_dir
    from ..errors import UserError
    from ..job import check_command, start
    from ..startup_hook import write_hook
    if on_event not in ON_EVENT:
        raise UserError(f"--on-event {on_event}: one of {', '.join(ON_EVENT)}")
    if keep < 1 or warn_ahead < 1:
        raise UserError("--keep and --warn-ahead take a whole number of steps, at least 1")
    if full_every is not None and full_every < 1:
        raise UserError("--full-every takes a whole number of steps, at least 1")
    command = check_command(command, "msoverflow watch")
    out = str(fresh_dump_dir(out_dir or _default_dir(), "--dump-dir"))
    stats = os.path.join(out, STATS_DIR)
    os.makedirs(stats)
    make_control_seq(stats)
    say = say or (lambda line: log.warning("%s", line))
    env = dict(os.environ)
    hook_dir = os.path.join(out, HOOK_DIR)
    env.update(write_hook(hook_dir, {"kind": "watch", "out_dir": stats, "keep": keep, "full_every": full_every,
                                     "stop_on_nonfinite": on_event != "continue"},
                          os.path.join(hook_dir, "spec.json"), INSTALLER))
    store = Store()
    follower = Follower(stats, store)
    detector = Detector(warn_ahead)
    ring = Ring(stats, keep, follower.held, store)
    dense_asked = False
    events: List[Event] = []
    log_path = os.path.join(out, EVENTS_LOG)
    stop_asked: Optional[str] = None
    rounds_cpu = 0.0          # the watcher's own CPU beside the job (its rounds), for the report
    finished = threading.Event()
    result = {}

    def run_job():
        try:
            result["job"] = start(command, env, echo=echo)
        except BaseException as exc:      # handed to the main thread
            result["error"] = exc
        finally:
            finished.set()

    thread = threading.Thread(target=run_job, daemon=True)
    started = time.monotonic()
    thread.start()
    # the rounds at idle priority (priority.py), entered after the job's thread started: the training inherits
    # the priority of the thread that starts it, which stays normal
    with SpareCpu() as spare, open(log_path, "w", encoding="utf-8") as event_log:
        warm_up()         # the reader's first use, while the training starts up (imports, compiles)
        while True:
            done = finished.wait(POLL_SECONDS)
            round_started = time.thread_time()
            new_steps = follower.poll(finished=done)
            for event in detector.steps(store, new_steps):
                events.append(event)
                say(f"msoverflow watch: {event.line()}")
                event_log.write(json.dumps(event.to_dict()) + "\n")
                event_log.flush()
                ring.protect(event.step)
                if stop_asked is None and _escalates(event, on_event):
                    spare.back_to_normal(f"idle, then normal from the stop request (step {event.step})")
                    stop_asked = event.line()
                    _ask(stats, {"stop": stop_asked, "dense_steps": DENSE_ON_EVENT})
                    say(f"msoverflow watch: asking the job to stop (--on-event {on_event}): one process before "
                        "its next step, the ranks of a distributed job together at their next agreed step")
                elif stop_asked is None and not dense_asked:       # full steps from now: the event's region
                    _ask(stats, {"dense_steps": DENSE_ON_EVENT, "why": event.line()})
                    dense_asked = True
            if new_steps:
                ring.trim(new_steps[-1])
            if not done:                  # (the last round reads after the job: not beside it)
                rounds_cpu += time.thread_time() - round_started
            spare.round_done()
            if done:
                break
    shutil.rmtree(hook_dir, ignore_errors=True)
    if "error" in result:
        raise result["error"]
    job = result["job"]
    seconds = time.monotonic() - started
    cause = root_cause(store, events)
    sampling = _sampling(stats)
    stop_notes: List[str] = []
    report = WatchReport(stats, events, cause, store, command=list(command), command_exit=job.returncode,
                         stopped_at=_stopped_at(sampling, stop_asked, stop_notes), notes=stop_notes)
    report.capture = {"keep": keep, "warn_ahead": warn_ahead, "on_event": on_event, "full_every": full_every,
                      "seconds": round(seconds, 1),
                      "steps_deleted": ring.deleted, "peak_steps_on_disk": ring.peak_steps,
                      "peak_bytes_on_disk": ring.peak_bytes, "bytes_on_disk_at_end": _disk_bytes(stats),
                      "events_log": log_path, "sampling": sampling, "watcher_priority": spare.state,
                      "watcher_cpu_seconds": round(rounds_cpu, 3),
                      "stop_asked": stop_asked}
    if not store.steps:
        report.notes.append("no step was captured: the command never called a Cell holding an optimizer "
                            "(nn.TrainOneStepCell or the like) from Python, or failed before its first step")
    nonfinite = next((e for e in events if e.kind == NONFINITE), None)
    if on_event == "dump" and nonfinite is not None:
        _dump_event_step(report, command, out, nonfinite, device, invoked_as)
    return WatchOutcome(report, out)


def _sampling(stats: str) -> Dict[str, dict]:
    """rank -> how the capture sampled (steps, full steps, the last k, the costs it measured)."""
    found = {}
    for rank in rank_dirs(stats):
        try:
            with open(os.path.join(stats, f"rank_{rank}", META), encoding="utf-8") as fh:
                found[str(rank)] = json.load(fh).get("sampling", {})
        except (OSError, ValueError):
            pass
    return found


def _ask(stats: str, asked: dict) -> None:
    """What every rank reads before its next step (capture.Watch.control), written whole."""
    with open(os.path.join(stats, CONTROL + ".partial"), "w", encoding="utf-8") as fh:
        json.dump(asked, fh)
    os.replace(os.path.join(stats, CONTROL + ".partial"), os.path.join(stats, CONTROL))
    count_control_seq(stats)


def stopped_before(sampling: object) -> Optional[int]:
    """The step a rank stopped before, from its watch_tensors.json `sampling` (capture.Watch.stop); None: it ran
    on, or ended on its own."""
    stopped = sampling.get("stopped") if isinstance(sampling, dict) else None
    value = stopped.get("before_step") if isinstance(stopped, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _stopped_at(sampling: Dict[str, dict], stop_asked: Optional[str], notes: List[str]) -> Optional[int]:
    """The step the job stopped before, as its ranks wrote it; a note when they differ (a rank stopped alone) or
    when the job ended before a stop asked of it."""
    stopped = {rank: step for rank, s in sampling.items() if (step := stopped_before(s)) is not None}
    for rank, s in sorted(sampling.items()):
        if s.get("agreement_note"):
            notes.append(f"rank {rank}: {s['agreement_note']}: a rank that stops leaves the others waiting")
    if not stopped:
        if stop_asked:
            notes.append("the job ended before it stopped as asked")
        return None
    if len(set(stopped.values())) > 1 or len(stopped) < len(sampling):
        notes.append("the ranks did not stop before the same step: " + ", ".join(
            f"rank {r}: {stopped.get(r, 'ran on')}" for r in sorted(sampling)))
    return max(stopped.values())


def _escalates(event: Event, on_event: str) -> bool:
    if on_event == "continue":
        return False
    if on_event == "stop":
        return True
    return event.kind == NONFINITE        # dump: the full tensors of the non-finite step prove the origin


def _dump_event_step(report: WatchReport, command, out: str, event: Event, device, invoked_as) -> None:
    """Re-run the command with every op's tensors dumped for the event's step only (as run --two-pass's pass 2
    does), stopped after that step by the same capture, and analyze it: `first`."""
    from ..api import Options
    from ..config.runner import execute, plan_run
    from ..errors import UserError
    from ..startup_hook import write_hook
    step = event.step
    log.info("msoverflow watch: re-running with a full dump of step %d (the non-finite step)", step)
    options = {"device": device} if device else {}
    try:
        plan = plan_run(command, os.path.join(out, EVENT_DUMP.format(step=step)), purpose="tensors", steps=str(step),
                        **options)
    except UserError as exc:
        report.notes.append(f"no dump of step {step}: {exc}")
        return
    stats = os.path.join(out, EVENT_DUMP.format(step=step) + "_stats")
    os.makedirs(stats, exist_ok=True)
    with open(os.path.join(stats, CONTROL), "w", encoding="utf-8") as fh:
        json.dump({"stop_at": step + 1}, fh)
    hook_dir = os.path.join(out, HOOK_DIR + "_dump")
    extra = write_hook(hook_dir, {"kind": "watch", "out_dir": stats}, os.path.join(hook_dir, "spec.json"),
                       INSTALLER)
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        outcome = execute(plan, Options(finished=True), analyze=True, invoked_as=invoked_as)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(hook_dir, ignore_errors=True)
        shutil.rmtree(stats, ignore_errors=True)
    report.first_dump = str(plan.dump_dir)
    if outcome.report is None:
        report.notes.append(f"the full dump of step {step} was not analyzed: {outcome.analysis_error}")
        return
    report.first = outcome.report
    if outcome.report.first is None:
        report.notes.append(f"the full dump of step {step} holds no bad value: the re-run did not repeat the "
                            "blow-up (not deterministic), so no origin is named")


def _default_dir() -> str:
    from ..config.runner import RUNS_DIR
    return os.path.join(os.path.abspath(RUNS_DIR), time.strftime("watch_%Y%m%d_%H%M%S"))


def from_dump(path: str, warn_ahead: int = 10) -> WatchReport:
    """The same detectors and root cause over a finished statistics dump (statistic.csv per step)."""
    store = Store()
    Follower(path, store).poll(finished=True)
    events = scan(store, warn_ahead)
    return WatchReport(path, events, root_cause(store, events), store)


__all__ = ["watch", "from_dump", "WatchOutcome", "Ring", "PROJECTED"]
