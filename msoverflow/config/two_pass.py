"""`msoverflow run --two-pass`: find the step cheaply, then dump only that step in full.

Pass 1 runs the command with a dump that watches every step at little cost: on Ascend the overflow-only dump
(op_debug_mode 3, only ops that overflowed are written); on CPU/GPU, which have no overflow flag, the outputs of the
loss kernel and of the update kernels the compiled graph holds (SGD, ApplyMomentum, ...: a bad gradient makes a bad
weight in the same step), read first from a short probe run that stops once the graph is compiled
(config/graph_probe.py). Its analysis gives the first bad step and the ranks that had it. Pass 2 runs the command
again with every op's tensors dumped for that step only (and, where the dump config can say so, for those ranks
only), and is analysed in full. The answer counts only if pass 2 saw a bad value at the same step on the same
ranks; otherwise the run is not deterministic and the verdict is inconclusive.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

from ..errors import EXIT_USAGE
from ..logs import log
from ..model import Report
from .generator import build

NOT_REPRODUCED = "not reproduced: the run is not deterministic"


@dataclass
class PassResult:
    label: str
    dump_dir: Path
    command_exit: int
    files: int
    bytes: int
    seconds: float
    report: Optional[Report] = None


@dataclass
class TwoPassOutcome:
    report: Report
    passes: List[PassResult] = field(default_factory=list)
    step: Optional[int] = None
    ranks: List[int] = field(default_factory=list)
    probe: Optional[dict] = None       # what the graph probe found (CPU/GPU without --kernels)

    @property
    def command_exit(self) -> int:
        return next((p.command_exit for p in self.passes if p.command_exit), 0)

    @property
    def exit_code(self) -> int:
        """The report's; a failed command with a clean report is 2, as for a single run."""
        code = self.report.exit_code
        return EXIT_USAGE if code == 0 and self.command_exit else code


def dump_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def pass1_plan(device: str, kernels: Sequence[str]):
    """(purpose, build options, what it watches) of the cheap every-step pass; `kernels`: what it watches on
    CPU/GPU (the probe's update and loss kernels, or the user's --kernels)."""
    if device == "ascend":
        return "overflow", {"steps": "all"}, "overflow-only dump (op_debug_mode 3), every step"
    return ("tensors", {"steps": "all", "kernels": list(kernels), "outputs": True},
            f"outputs of {', '.join(kernels)}, every step")


def watch_from_probe(command, directory: Path, **config_options):
    """(kernels for pass 1, the probe's record, a reason when there is nothing to watch) from a graph probe; the
    probe's files are removed once read (pass 1 saves the same graphs)."""
    import shutil

    from .graph_probe import log_tail, probe
    found = probe(command, directory, **config_options)
    record = {"update_kernels": found.update_kernels, "loss_kernel": found.loss_kernel, "graphs": len(found.graphs),
              "seconds": round(found.seconds, 2), "bytes": found.bytes, "stopped": found.stopped,
              "command_exit": found.command_exit}
    how = "stopped once compiled" if found.stopped else f"the command exited with {found.command_exit}"
    log.info("run --two-pass: probe: %d compiled graph(s) read in %.1f s (%s, removed once read; %s): update kernels "
             "%s; loss %s", len(found.graphs), found.seconds, _size(found.bytes), how,
             ", ".join(found.update_kernels) or "none",
             found.loss_kernel or "not found (the step has no network-* forward beside its backward)")
    reason = None
    if not found.graphs:
        log.warning("run --two-pass: probe: the command's last output:\n%s", log_tail(directory))
        reason = ("the probe run saved no compiled graph: --two-pass needs graph mode (a PyNative run: msoverflow "
                  "hunt)")
    elif not found.update_kernels:
        reason = ("the compiled graph holds no optimizer update kernel to watch: name the kernels with --kernels "
                  "(op types or full names)")
    shutil.rmtree(directory, ignore_errors=True)
    return found.kernels(), record, reason


def run_two_pass(command: Sequence[str], dump_dir=None, *, options=None, invoked_as=None,
                 on_plan: Optional[Callable[[str, object], None]] = None,
                 on_start: Optional[Callable[[], None]] = None, **config_options) -> TwoPassOutcome:
    """Both passes; the Report of pass 2 (or of pass 1 when it saw nothing). options: api.Options for both
    analyses (finished=True implied). on_plan(label, RunPlan) is called before each pass runs, on_start once the
    command and both configs were checked. invoked_as: the msoverflow command line, recorded in the reports'
    provenance. Narration goes to the msoverflow logger."""
    import dataclasses

    from ..api import Options, analyze_with
    from ..job import check_command
    from .detect import detect_device
    from .runner import check_output_against, execute, fresh_dump_dir, plan_run
    command = check_command(command, "msoverflow run --two-pass")
    device = config_options.get("device") or detect_device()[0]
    config_options["device"] = device
    user_kernels = config_options.pop("kernels", None)
    user_steps = config_options.pop("steps", None)
    for option in ("inputs", "outputs"):
        config_options.pop(option, None)
    probing = device != "ascend" and not user_kernels     # CPU/GPU: what pass 1 watches comes from a probe run
    if probing:
        from .graph_probe import GRAPHS_ONLY_STEP
        purpose, first_options = "tensors", {"steps": str(GRAPHS_ONLY_STEP)}
    else:
        purpose, first_options, _ = pass1_plan(device, user_kernels)
    build(purpose, **{**config_options, **first_options})    # the first run's config, refused before any directory
    if user_steps is not None:
        log.warning("run --two-pass: --steps %s ignored: pass 1 watches every step", user_steps)
    base = fresh_dump_dir(dump_dir)
    options = dataclasses.replace(options or Options(), finished=True)     # each pass's command has exited
    if on_start is not None:
        on_start()
    watch, probed = user_kernels, None
    if probing:
        watch, probed, reason = watch_from_probe(command, base / "probe", **config_options)
        if reason:
            report = Report(dump_dir=str(base), first=None, anomalies=[], propagation=[], warnings=[], ranks=[],
                            steps={})
            report.inconclusive.append(reason)
            return _finish(TwoPassOutcome(report, probe=probed), command, invoked_as)
    purpose, pass1_options, what = pass1_plan(device, watch)

    def one_pass(label: str, purpose: str, **pass_options) -> PassResult:
        started = time.monotonic()
        plan = plan_run(command, base / label, purpose=purpose, **{**config_options, **pass_options})
        if on_plan is not None:
            on_plan(label.replace("pass", "pass "), plan)
        outcome = execute(plan, analyze=False)
        seconds = time.monotonic() - started
        result = PassResult(label, outcome.dump_dir, outcome.command_exit, outcome.files_written,
                            dump_bytes(outcome.dump_dir), seconds)
        if outcome.files_written:
            result.report = analyze_with(str(outcome.dump_dir), options, command=invoked_as)
            check_output_against(result.report, outcome.output)
        return result

    log.info("run --two-pass: pass 1: %s", what)
    first = one_pass("pass1", purpose, **pass1_options)
    passes = [first]
    log.info("run --two-pass: pass 1 wrote %d files, %s in %.1f s", first.files, _size(first.bytes), first.seconds)
    if first.report is None or first.report.first is None:
        report = first.report or _empty(first)
        log.info("run --two-pass: pass 1 saw no bad value; no second pass")
        return _finish(TwoPassOutcome(report, passes, probe=probed), command, invoked_as)
    step = first.report.first.step
    ranks = sorted({f.rank for f in first.report.anomalies if f.step == step})
    log.info("run --two-pass: first bad step %s on rank(s) %s; pass 2: every op's tensors of step %s only", step,
             ", ".join(map(str, ranks)), step)
    extra = {"ranks": ",".join(map(str, ranks))} if device != "cpu" else {}   # CPU dumps ignore support_device
    second = one_pass("pass2", "tensors", steps=str(step), **extra)
    passes.append(second)
    log.info("run --two-pass: pass 2 wrote %d files, %s in %.1f s", second.files, _size(second.bytes),
             second.seconds)
    report = second.report or _empty(second)
    seen = {f.rank for f in report.anomalies if f.step == step}
    if not set(ranks) <= seen:
        missing = sorted(set(ranks) - seen)
        report.inconclusive.insert(0, f"{NOT_REPRODUCED}: pass 1 saw a bad value at step {step} on rank(s) "
                                      f"{', '.join(map(str, missing))}, pass 2's full dump of that step holds none there")
        report.first, report.anomalies, report.propagation = None, [], []
    return _finish(TwoPassOutcome(report, passes, step, ranks, probe=probed), command, invoked_as)


def _finish(outcome: TwoPassOutcome, command, invoked_as=None) -> TwoPassOutcome:
    from ..provenance import collect, command_line
    if not outcome.report.provenance:       # a report made here, not by the API (nothing was dumped)
        outcome.report.provenance = collect(outcome.report, invoked_as)
    if outcome.report.provenance.get("command") is None:
        outcome.report.provenance["command"] = command_line(["run", "--two-pass", "--", *command])
    two_pass: Dict[str, object] = {
        "step": outcome.step, "ranks": outcome.ranks,
        "passes": [{"pass": p.label, "dump_dir": str(p.dump_dir), "files": p.files, "bytes": p.bytes,
                    "seconds": round(p.seconds, 2), "command_exit": p.command_exit} for p in outcome.passes]}
    if outcome.probe is not None:
        two_pass["probe"] = outcome.probe
    outcome.report.provenance["two_pass"] = two_pass
    total = sum(p.bytes for p in outcome.passes)
    log.info("run --two-pass: sizes: %s; total %s",
             ", ".join(f"{p.label} {_size(p.bytes)}" for p in outcome.passes), _size(total))
    return outcome


def _empty(result: PassResult) -> Report:
    report = Report(dump_dir=str(result.dump_dir), first=None, anomalies=[], propagation=[], warnings=[], ranks=[],
                    steps={})
    report.inconclusive.append(f"{result.label} wrote no dump file (did the command run in graph mode and call "
                               "the optimizer, and read MINDSPORE_DUMP_CONFIG before starting?)")
    return report


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.0f} KB"

