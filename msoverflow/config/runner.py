"""`msoverflow run`: write a dump config into a fresh directory, run the user's command with the dump env, then
analyze what it wrote. Returns values (RunPlan, RunOutcome with the Report); the command prints them.

    plan = plan_run(["python", "train.py"], "/data/dump", device="cpu")       # checked; nothing run yet
    outcome = execute(plan, Options(finished=True))
    outcome.report, outcome.exit_code
"""
from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional, Sequence, Union

from ..errors import EXIT_USAGE, UserError
from ..logs import log
from .generator import DumpConfigResult, build

if TYPE_CHECKING:
    from ..job import OutputWatch
    from ..model import Report

CONFIG_FILE_NAME = "dump_config.json"
RUNS_DIR = "msoverflow_runs"
RERUN_HINT = "re-run with --two-pass"


@dataclass(frozen=True)
class RunPlan:
    """A run that was checked and prepared: its dump directory exists (fresh) and holds the config."""
    command: List[str]
    dump_dir: Path
    config: DumpConfigResult
    notes: List[str] = field(default_factory=list)    # what the user should know before hours of training


@dataclass
class RunOutcome:
    plan: RunPlan
    command_exit: int                 # the user's command's own exit code
    files_written: int
    report: Optional["Report"] = None       # the analysis of the dump; None when not analysed
    analysis_error: Optional[str] = None    # why there is no report although one was asked for
    output: Optional["OutputWatch"] = None  # what the command's own output said (losses)

    @property
    def dump_dir(self) -> Path:
        return self.plan.dump_dir

    @property
    def config(self) -> DumpConfigResult:
        return self.plan.config

    @property
    def analysis_exit(self) -> Optional[int]:
        """0 clean, 1 anomaly, 3 inconclusive, 2 could not be analysed; None when not asked for."""
        if self.report is not None:
            return self.report.exit_code
        return EXIT_USAGE if self.analysis_error else None

    @property
    def exit_code(self) -> int:
        """The analysis' exit code; a failed command with a clean dump is 2 (not "clean"); without an analysis,
        the command's own exit code."""
        if self.analysis_exit is None:
            return self.command_exit
        if self.analysis_exit == 0 and self.command_exit != 0:
            return EXIT_USAGE
        return self.analysis_exit


def fresh_dump_dir(dump_dir: Union[None, str, os.PathLike], what: str = "--dump-dir") -> Path:
    """Create the dump directory; never reuse a non-empty one (old files would mix into the analysis). One that
    cannot be made (under a file, in /proc, a name too long) is a UserError naming it."""
    try:
        if dump_dir is None:
            base = Path(RUNS_DIR).absolute()
            stamp = time.strftime("%Y%m%d_%H%M%S")
            candidate = base / f"run_{stamp}"
            suffix = 1
            while candidate.exists():
                suffix += 1
                candidate = base / f"run_{stamp}_{suffix}"
            dump_dir = candidate
        dump_dir = Path(dump_dir).absolute()
        if dump_dir.exists():
            if not dump_dir.is_dir():
                raise UserError(f"{dump_dir}: {what} exists and is not a directory")
            if any(dump_dir.iterdir()):
                raise UserError(f"{dump_dir}: not empty; msoverflow needs a fresh directory for {what} "
                                "(old files would mix into the analysis): pick a new one")
        dump_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno in (errno.ENOTDIR, errno.EEXIST):
            reason = "a part of the path is a file"
        raise UserError(f"{dump_dir}: cannot create {what} ({reason})") from None
    return dump_dir


def count_files(directory: Path, skip: Sequence[str] = (CONFIG_FILE_NAME,)) -> int:
    return sum(1 for p in directory.rglob("*") if p.is_file() and p.name not in skip)


def run_env(result: DumpConfigResult, base: Optional[dict] = None) -> dict:
    env = dict(os.environ if base is None else base)
    for name in result.unset:
        env.pop(name, None)
    env.update(result.env)
    return env


def installed_mismatch(ms_version: Optional[str], device: Optional[str]) -> List[str]:
    """Warnings when the MindSpore version or device asked for is not what this machine will run: the config is
    written for one, the training runs on the other."""
    from .detect import detect_device, installed_mindspore
    notes = []
    installed, _ = installed_mindspore()
    if ms_version and installed and installed.split(".")[:2] != str(ms_version).split(".")[:2]:
        notes.append(f"--ms-version {ms_version}, but MindSpore {installed} is installed here: the config is "
                     f"written for {ms_version}, the training will run {installed}")
    if device == "ascend":
        here, why = detect_device()
        if here != "ascend":
            notes.append(f"--device ascend, but this machine has no Ascend toolkit ({why}): the config is written "
                         "for Ascend")
    elif device == "gpu":
        import shutil
        if shutil.which("nvidia-smi") is None:
            notes.append("--device gpu, but nvidia-smi is not on PATH here: the config is written for GPU")
    return notes


def plan_run(command: Sequence[str], dump_dir: Union[None, str, os.PathLike] = None, *,
             purpose: str = "overflow", **config_options) -> RunPlan:
    """Check the command and build the config before creating anything (a refused config leaves no directory
    behind), then make the fresh dump directory and write the config into it.

    config_options are msoverflow.config.build's keyword arguments (device, ms_version, steps, ...); `path` is
    always the dump directory."""
    from ..job import check_command
    command = check_command(command)
    if config_options.pop("path", None) is not None:
        raise UserError("msoverflow run writes the dump into --dump-dir; do not pass --path")
    probe_dir = Path(dump_dir).absolute() if dump_dir is not None else None
    result = build(purpose, path=str(probe_dir) if probe_dir else None, **config_options)
    missing = [p for p in result.problems if p.id == "msprobe-adump" and p.severity != "info"]
    if missing:    # hours of training that would dump no kernel: refuse before the run, with what works
        raise UserError(f"not running: {missing[0].message} Fix: {missing[0].fix}")
    directory = fresh_dump_dir(dump_dir)
    if probe_dir is None:
        result = build(purpose, path=str(directory), **config_options)
    result.write(directory / CONFIG_FILE_NAME)
    notes = installed_mismatch(config_options.get("ms_version"), config_options.get("device"))
    return RunPlan(command, directory, result, notes)


def execute(plan: RunPlan, options=None, *, analyze: bool = True, invoked_as=None, echo=None) -> RunOutcome:
    """Run the planned command (its output passes through, or line by line to `echo`), then analyse its dump with
    `options` (api.Options; finished=True is implied: the job has ended). invoked_as: the msoverflow command
    line, recorded in the report's provenance."""
    import dataclasses

    from ..api import Options, analyze_with
    from ..job import start
    result = plan.config
    log.debug("run: %s (%s dump into %s)", " ".join(plan.command), result.purpose, plan.dump_dir)
    finished = start(plan.command, run_env(result), echo=echo)
    files = count_files(plan.dump_dir)
    log.info("run: command exited with %d; %d dump files in %s", finished.returncode, files, plan.dump_dir)
    outcome = RunOutcome(plan, finished.returncode, files, output=finished.output)
    if not analyze:
        return outcome
    if files == 0:
        outcome.analysis_error = "the dump is empty, nothing to analyze " + _why_empty(result)
        return outcome
    options = dataclasses.replace(options or Options(), finished=True)
    log.info("run: analyzing %s", plan.dump_dir)
    try:
        outcome.report = analyze_with(str(plan.dump_dir), options, command=invoked_as)
    except UserError as exc:
        outcome.analysis_error = " ".join(str(exc).split())
        return outcome
    check_output_against(outcome.report, finished.output)
    return outcome


def _why_empty(result: DumpConfigResult) -> str:
    if result.mechanism == "msprobe":
        return (f"(does the script create PrecisionDebugger(config_path={result.config_path!r}) and call "
                f"start/stop/step around the dumped steps {_steps_text(result.config.get('step'))}?)")
    return ("(did the script run in graph mode, reach the dumped steps "
            f"{_steps_text(result.config['common_dump_settings']['iteration'])}, and read MINDSPORE_DUMP_CONFIG "
            "before starting?)")


def _steps_text(steps) -> str:
    if not steps:
        return "all"
    if isinstance(steps, (list, tuple)):
        return ", ".join(map(str, steps))
    return str(steps)


def check_output_against(report, output) -> None:
    """A dump that shows no bad value, from a job whose own output reported a non-finite loss (or parameters):
    the blow-up happened where the dump did not look (a later step, an op the config left out). The verdict
    becomes inconclusive, never clean, with what to run instead."""
    seen = output.first_nonfinite if output is not None else None
    if seen is None or report.first is not None or report.bad_values_seen:
        return
    from ..render.common import steps_text
    dumped = sorted({s for steps in report.iterations.values() for s in steps})
    hint = RERUN_HINT
    if seen.step is not None:
        first = max(dumped) + 1 if dumped and max(dumped) < seen.step else seen.step
        hint += f" (or --steps {first}-{seen.step}" if first < seen.step else f" (or --steps {seen.step}"
        hint += ", the steps its output names)"
    else:
        hint += " (or --steps covering the step its output names)"
    report.inconclusive.append(
        f"the job's own output reported {seen.what} (\"{seen.line[:160]}\"), but this dump (steps "
        f"{steps_text(dumped) if dumped else 'none'}) holds no bad value: the blow-up is outside what was dumped; "
        f"{hint}")


def run_and_analyze(command: Sequence[str], dump_dir: Union[None, str, os.PathLike] = None, *,
                    purpose: str = "overflow", options=None, analyze: bool = True, invoked_as=None,
                    **config_options) -> RunOutcome:
    """plan_run, then execute: run `command` under a `purpose` dump into a fresh `dump_dir` and analyse it."""
    return execute(plan_run(command, dump_dir, purpose=purpose, **config_options), options, analyze=analyze,
                   invoked_as=invoked_as)


def run_with_dump(command: Sequence[str], dump_dir: Union[None, str, os.PathLike] = None, **config_options) -> int:
    """Run `command` under a dump and analyze it: 0 clean, 1 anomaly found, 3 inconclusive, 2 error (or the
    command's exit code when analysis is off). See run_and_analyze for the Report and the rest."""
    return run_and_analyze(command, dump_dir, **config_options).exit_code
