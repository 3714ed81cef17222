"""`msoverflow run`: write a dump config into a fresh directory, run the user's command with the dump env, then
analyze what it wrote."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Union

from ..errors import UserError
from .generator import DumpConfigResult, build

CONFIG_FILE_NAME = "dump_config.json"
RUNS_DIR = "msoverflow_runs"


@dataclass
class RunOutcome:
    command_exit: int                 # the user's command's own exit code
    analysis_exit: Optional[int]      # msoverflow analyze: 0 clean, 1 anomaly, 2 error; None when not run
    dump_dir: Path
    config: DumpConfigResult
    files_written: int

    @property
    def exit_code(self) -> int:
        """0 clean, 1 anomaly found, 2 error; without analysis, the command's own exit code."""
        if self.analysis_exit is None:
            return self.command_exit
        if self.analysis_exit == 0 and self.command_exit != 0:
            return 2  # nothing anomalous in the dump, but the run itself failed: not "clean"
        return self.analysis_exit


def fresh_dump_dir(dump_dir: Union[None, str, os.PathLike]) -> Path:
    """Create the dump directory; never reuse a non-empty one (old files would mix into the analysis)."""
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
            raise UserError(f"{dump_dir}: exists and is not a directory")
        if any(dump_dir.iterdir()):
            raise UserError(f"{dump_dir}: not empty; msoverflow run needs a fresh dump directory "
                            "(old files would mix into the analysis): pick a new --dump-dir")
    dump_dir.mkdir(parents=True, exist_ok=True)
    return dump_dir


def count_files(directory: Path, skip: Sequence[str] = (CONFIG_FILE_NAME,)) -> int:
    return sum(1 for p in directory.rglob("*") if p.is_file() and p.name not in skip)


def run_env(result: DumpConfigResult, base: Optional[dict] = None) -> dict:
    env = dict(os.environ if base is None else base)
    for name in result.unset:
        env.pop(name, None)
    env.update(result.env)
    return env


def run_and_analyze(command: Sequence[str], dump_dir: Union[None, str, os.PathLike] = None, *,
                    purpose: str = "overflow", analyze: bool = True, analyze_args: Sequence[str] = (),
                    log=None, invoked_as=None, **config_options) -> RunOutcome:
    """Run `command` with a `purpose` dump into a fresh `dump_dir`, then `msoverflow analyze` it.

    config_options are msoverflow.config.build's keyword arguments (device, ms_version, steps, ...); `path` is
    always the dump directory. The command's stdout/stderr pass straight through. invoked_as: the msoverflow
    command line, recorded in the report's provenance.
    """
    log = log or sys.stderr
    if not command:
        raise UserError("msoverflow run needs a command after '--', e.g. msoverflow run -- python train.py")
    if config_options.pop("path", None) is not None:
        raise UserError("msoverflow run writes the dump into --dump-dir; do not pass --path")
    if analyze:   # a wrong --analyze-arg is said before hours of training, not after
        from ..commands import analyze as analyze_command
        analyze_command.parse(["DUMP", *analyze_args])
    # Build before creating anything: a refused config must leave no directory behind.
    probe_dir = Path(dump_dir).absolute() if dump_dir is not None else None
    result = build(purpose, path=str(probe_dir) if probe_dir else None, **config_options)
    missing = [p for p in result.problems if p.id == "msprobe-adump" and p.severity != "info"]
    if missing:    # hours of training that would dump no kernel: refuse before the run, with what works
        raise UserError(f"not running: {missing[0].message} Fix: {missing[0].fix}")
    directory = fresh_dump_dir(dump_dir)
    if probe_dir is None:
        result = build(purpose, path=str(directory), **config_options)
    result.write(directory / CONFIG_FILE_NAME)

    print(f"msoverflow run: {result.purpose} dump, MindSpore {result.ms_version}, {result.device}"
          + (f" {result.jit_level}" if result.jit_level else "") + f" -> {directory}", file=log)
    for line in result.summary:
        print(f"  {line}", file=log)
    for warning in result.warnings:
        print(f"  note: {warning}", file=log)
    if result.mechanism == "msprobe":     # msprobe dumps only what a PrecisionDebugger in the script asks for
        print("  the script must hold msprobe's PrecisionDebugger (run cannot insert it):", file=log)
        for line in getattr(result, "python", []):
            print(f"    {line}", file=log)
    log.flush()
    try:
        completed = subprocess.run(list(command), env=run_env(result))
        command_exit = completed.returncode
    except FileNotFoundError as exc:
        raise UserError(f"cannot run {command[0]!r}: {exc.strerror}") from exc
    files = count_files(directory)
    print(f"msoverflow run: command exited with {command_exit}; {files} dump files in {directory}", file=log)

    analysis_exit = None
    if not analyze:
        pass
    elif files == 0:
        if result.mechanism == "msprobe":
            print("msoverflow run: the dump is empty, nothing to analyze (does the script create "
                  f"PrecisionDebugger(config_path={result.config_path!r}) and call start/stop/step around the "
                  f"dumped steps {result.config.get('step') or 'all'}?)", file=log)
        else:
            print("msoverflow run: the dump is empty, nothing to analyze (did the script run in graph mode, reach "
                  f"the dumped steps {result.config['common_dump_settings']['iteration']!r}, and read "
                  "MINDSPORE_DUMP_CONFIG before starting?)", file=log)
        analysis_exit = 2
    else:
        analysis_exit = _analyze(directory, analyze_args, log, invoked_as)
    log.flush()
    return RunOutcome(command_exit, analysis_exit, directory, result, files)


def _analyze(directory: Path, analyze_args: Sequence[str], log, command=None) -> Optional[int]:
    """The Python API on the dump, delivered as `msoverflow analyze` would (with run's --analyze-arg options)."""
    from ..api import analyze
    from ..commands import analyze as analyze_command
    from ..logs import log as logger

    args = analyze_command.parse([str(directory), *analyze_args])
    print(f"msoverflow run: analyzing {directory}", file=log)
    log.flush()
    try:     # finished: the job has exited, so files written seconds ago are complete
        report = analyze(str(directory), ranks=args.rank, steps=args.iteration, scan_all=args.scan_all,
                         strict=args.strict, warn=lambda message: logger.debug("warning: %s", message), jobs=args.jobs,
                         scheduler=args.scheduler, finished=True, command=command)
        return analyze_command.deliver(args, report)
    except UserError as exc:
        print(f"msoverflow run: analyze: error: {' '.join(str(exc).split())}", file=log)
        return 2


def run_with_dump(command: Sequence[str], dump_dir: Union[None, str, os.PathLike] = None, **config_options) -> int:
    """Run `command` under a dump and analyze it: 0 clean, 1 anomaly found, 2 error (or the command's exit code
    when analysis is off/unavailable). See run_and_analyze for the details and a richer result."""
    return run_and_analyze(command, dump_dir, **config_options).exit_code
