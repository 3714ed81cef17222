"""The user's training command: checked before anything is created, run with its output passing through, and
that output read for what it says about the run (losses, "params finite" flags, guard skips, its last lines).

`run`, `run --two-pass`, `hunt` and `patch --verify` all start the training through `start`; no MindSpore import.
"""
from __future__ import annotations

import codecs
import collections
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .errors import UserError

# "loss 2.3", "loss: 2.3", "loss=nan", "loss is 2.3" (LossMonitor), "loss: [2.3]", "scaled loss inf"
_LOSS = re.compile(r"\bloss(?:\s+is)?\s*[:=]?\s*[\[(]?\s*([-+]?(?:\d+\.?\d*(?:e[-+]?\d+)?|nan|inf(?:inity)?))\b",
                   re.I)
_PARAMS_FINITE = re.compile(r"params(?:eters)?[ _]finite[:=]?\s*(true|false)", re.I)
_STEP = re.compile(r"\bstep\s*[:=]?\s*(\d{1,12})\b", re.I)
_GUARD_SKIP = re.compile(r"msoverflow guard: step (\d+) skipped on rank (\d+)")
_LOG_DIR = re.compile(r"^--log_dir(?:=(.*))?$")
_WORKER_LOG = re.compile(r"worker_(\d+)\.log")
MAX_LINE_BYTES = 1 << 16     # a line longer than this is read (and passed through) in pieces
TAIL_LINES = 5


def check_command(command: Sequence[str], who: str = "msoverflow run") -> List[str]:
    """The command as a list, or UserError (exit 2) naming the program when it cannot be run: no command, not
    found, a directory, not executable. Checked before any directory or config is made."""
    command = [os.fspath(part) for part in (command or [])]
    if not command:
        raise UserError(f"{who} needs a command after '--', e.g. {who} -- python train.py")
    program = command[0]
    problem = None
    if os.sep in program or (os.altsep and os.altsep in program):
        if os.path.isdir(program):
            problem = "it is a directory"
        elif not os.path.exists(program):
            problem = "no such file"
        elif not os.access(program, os.X_OK):
            problem = "not executable (chmod +x it, or run it with its interpreter, e.g. python train.py)"
    elif shutil.which(program) is None:
        problem = "not found on PATH"
    if problem:
        raise UserError(f"{program}: cannot run the training command: {problem}")
    return command


@dataclass(frozen=True)
class Loss:
    value: float
    step: Optional[int]     # the step the line names ("step 3: loss nan"), None when it names none
    line: str


@dataclass(frozen=True)
class NonFinite:
    """The first line of a run's output that reported a non-finite loss or non-finite parameters."""
    what: str               # "a non-finite loss" | "non-finite parameters"
    step: Optional[int]
    line: str


@dataclass
class OutputWatch:
    """What one process's output said, read line by line as it arrives; memory stays flat except one float per
    reported loss."""
    losses: List[Loss] = field(default_factory=list)
    params_finite: List[bool] = field(default_factory=list)
    skipped: List[str] = field(default_factory=list)           # zero-token guard: "step N on rank R"
    tail: collections.deque = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    first_nonfinite: Optional[NonFinite] = None     # a NaN/inf loss, or "params finite: false"

    def feed(self, line: str) -> None:
        line = line.rstrip("\r\n")
        if "[WARNING]" in line or "[INFO]" in line:      # MindSpore's own log lines say nothing about the loss
            return
        if line.strip():
            self.tail.append(line)
        step = _STEP.search(line)
        step_number = int(step.group(1)) if step else None
        m = _LOSS.search(line)
        if m:
            text = m.group(1).lower()
            loss = Loss(float("inf" if text.lstrip("+-").startswith("inf") else text), step_number, line.strip())
            self.losses.append(loss)
            if not math.isfinite(loss.value) and self.first_nonfinite is None:
                self.first_nonfinite = NonFinite("a non-finite loss", step_number, line.strip())
        m = _PARAMS_FINITE.search(line)
        if m:
            finite = m.group(1).lower() == "true"
            self.params_finite.append(finite)
            if not finite and self.first_nonfinite is None:
                self.first_nonfinite = NonFinite("non-finite parameters", step_number, line.strip())
        m = _GUARD_SKIP.search(line)
        if m:
            self.skipped.append(f"step {m.group(1)} on rank {m.group(2)}")

    @property
    def loss_values(self) -> List[float]:
        return [loss.value for loss in self.losses]

    @property
    def loss_finite(self) -> Optional[bool]:
        return all(math.isfinite(v) for v in self.loss_values) if self.losses else None

    @property
    def weights_finite(self) -> Optional[bool]:
        return all(self.params_finite) if self.params_finite else None


@dataclass
class Finished:
    """A training command that has exited: its exit code, what its output said (all processes together, and per
    msrun worker when there were worker logs), how long it ran."""
    returncode: int
    output: OutputWatch
    per_rank: Dict[int, OutputWatch] = field(default_factory=dict)
    seconds: float = 0.0


def launcher_log_dir(command: Sequence[str], log_dir: Optional[str] = None) -> Tuple[List[str], Optional[str]]:
    """msrun writes each worker's output to --log_dir/worker_N.log, not to its own stdout. With `log_dir`, the
    command is given that --log_dir (its own replaced, so runs do not mix); without, the one it names is read
    (msrun's default: its working directory). (command, the worker log directory or None when not msrun)."""
    command = list(command)
    if not command or (os.path.basename(command[0]) != "msrun" and "msrun" not in command[:3]):
        return command, None
    out, found, i = [], None, 0
    while i < len(command):
        m = _LOG_DIR.match(command[i])
        if m and found is None:
            found = m.group(1)
            if found is None and i + 1 < len(command):
                i += 1
                found = command[i]
            out.append(f"--log_dir={log_dir or found}")
        else:
            out.append(command[i])
        i += 1
    if log_dir is None:      # msrun's default: the worker logs go to its working directory
        return command, found or "."
    if found is None:
        out.insert(1, f"--log_dir={log_dir}")
    return out, log_dir


def _worker_logs(log_dir: Optional[str], since: float) -> Dict[int, OutputWatch]:
    """worker rank -> what its msrun log said (logs older than this run are someone else's)."""
    found: Dict[int, OutputWatch] = {}
    if not log_dir or not os.path.isdir(log_dir):
        return found
    from .safeio import bounded_lines, open_regular
    for name in sorted(os.listdir(log_dir)):
        m = _WORKER_LOG.fullmatch(name)
        path = os.path.join(log_dir, name)
        try:
            if not m or os.stat(path).st_mtime < since - 1:
                continue
            watch = OutputWatch()
            with open_regular(path, "r", errors="replace") as fh:
                for line in bounded_lines(fh, MAX_LINE_BYTES):
                    watch.feed(line)
        except OSError:
            continue
        found[int(m.group(1))] = watch
    return found


def start(command: Sequence[str], env: dict, *, cwd: Optional[str] = None,
          echo: Optional[Callable[[str], None]] = None, log_dir: Optional[str] = None) -> Finished:
    """Run `command` to its end. Its stdout and stderr pass through to ours as they arrive (or, with `echo`, each
    line of both goes there), and every line is read for losses. Under msrun, `log_dir` is where the worker logs
    go (see launcher_log_dir); they are read afterwards, per rank. A command that cannot be started is a
    UserError naming it."""
    command = check_command(command)
    command, log_dir = launcher_log_dir(command, log_dir)
    if log_dir is not None and not os.path.isabs(log_dir):
        log_dir = os.path.join(cwd or os.getcwd(), log_dir)
    env = dict(env)
    env.setdefault("PYTHONUNBUFFERED", "1")    # its lines arrive as printed, though its stdout is now a pipe
    started = time.time()
    try:
        proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        raise UserError(f"{command[0]}: cannot run the training command ({exc.strerror or exc})") from None
    stdout, stderr = proc.stdout, proc.stderr
    assert stdout is not None and stderr is not None        # both piped
    watch = OutputWatch()
    lock = threading.Lock()

    def pump(pipe, stream) -> None:
        """Pass each chunk on as it arrives (a progress bar's \r updates too), and read it line by line."""
        pending = b""
        decoder = codecs.getincrementaldecoder("utf-8")("replace")    # a character split across chunks stays whole
        while True:
            chunk = pipe.read1(MAX_LINE_BYTES)
            if not chunk:
                break
            with lock:
                if echo is None:
                    target = stream()
                    target.write(decoder.decode(chunk))
                    target.flush()
                pending += chunk
                *lines, pending = pending.split(b"\n")
                if len(pending) >= MAX_LINE_BYTES:      # an endless line is read in pieces
                    lines.append(pending)
                    pending = b""
                for raw in lines:
                    line = raw.decode("utf-8", "replace")
                    watch.feed(line)
                    if echo is not None:
                        echo(line.rstrip("\r"))
        if pending:
            with lock:
                line = pending.decode("utf-8", "replace")
                watch.feed(line)
                if echo is not None:
                    echo(line.rstrip("\r"))

    threads = [threading.Thread(target=pump, args=(proc.stdout, lambda: sys.stdout), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, lambda: sys.stderr), daemon=True)]
    for thread in threads:
        thread.start()
    try:
        returncode = proc.wait()
    except KeyboardInterrupt:      # the child got the same Ctrl-C: let it end, then stop
        proc.wait()
        raise
    finally:
        for thread in threads:
            thread.join()
        stdout.close()
        stderr.close()
    per_rank = _worker_logs(log_dir, started)
    if per_rank:       # the workers' logs are the training's output (msrun's own stdout may repeat parts)
        combined = OutputWatch()
        for rank in sorted(per_rank):
            worker = per_rank[rank]
            combined.losses += worker.losses
            combined.params_finite += worker.params_finite
            combined.skipped += worker.skipped
            combined.tail.extend(worker.tail)
            if combined.first_nonfinite is None:
                combined.first_nonfinite = worker.first_nonfinite
        combined.skipped = sorted(set(combined.skipped))
        watch = combined
    return Finished(returncode, watch, per_rank, time.time() - started)
