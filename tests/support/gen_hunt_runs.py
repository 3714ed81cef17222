#!/usr/bin/env python
"""Real `msoverflow hunt` and `msoverflow run --two-pass` runs on MindSpore CPU, as test fixtures.

Each case runs the msoverflow command over tests/support/cases/hunt/normhead_train.py (the demo TinyBaichuan, fp16
NormHead lm head, loss scale jumping at a chosen step) in its own working directory, and keeps what the command
wrote: report.json (the JSON report), its stdout/stderr (run.log), the hunt's or the dump's directory, case.json.
Cached under `<repo>/.fixture-cache/hunt/<key>/<case>/`; the key hashes this file, the case script, every
msoverflow module (the commands under test made these outputs) and the installed MindSpore version.

    python -m tests.support.gen_hunt_runs [--out DIR] [--case NAME ...] [--force]

Only the standard library is imported at module level (tests import this file).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

from tests.support.fixture_runs import (
    RUNNER,
    in_staged,
    msrun_prefix,
    prune_stale,
    staged_sources,
    version,
    worker_logs,
)

REPO = Path(__file__).resolve().parents[2]
CASE_SCRIPT = Path(__file__).resolve().parent / "cases" / "hunt" / "normhead_train.py"
DEFAULT_CACHE_ROOT = REPO / ".fixture-cache" / "hunt"
CASE_TIMEOUT_S = 600
NORMHEAD_SQRT_LINE = "norm = self.sqrt(variance + self.eps)"


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    shows: str
    msoverflow: tuple          # the msoverflow command and its options (before `--`)
    script: tuple              # normhead_train.py's arguments
    expected: dict
    workers: int = 1           # > 1: under msrun (CPU workers, MCCL), data parallel; the last rank overflows
    glog: str = "3"            # MindSpore's log level (GLOG_v) in the run: 2 keeps its warnings in run.log


_SQRT_BACKWARD = dict(verdict="anomaly", op_type="SqrtGrad", forward_op="Sqrt", kind="overflow",
                      cell="network._backbone.lm_head", cell_type="NormHead", source_contains=NORMHEAD_SQRT_LINE)

CASES: List[Case] = [
    Case("hunt_pynative_step2", "PyNative fp16 loop: NormHead's Sqrt backward overflows at step 2 (not the first)",
         ("hunt", "--out-dir", "hunt"), ("--mode", "pynative", "--steps", "4", "--overflow-at", "2"),
         dict(_SQRT_BACKWARD, iteration=2, rank=0, direction="backward")),
    Case("hunt_pynative_clean", "PyNative fp16 loop that stays finite: every step watched, nothing found",
         ("hunt", "--out-dir", "hunt"), ("--mode", "pynative", "--steps", "2"), dict(verdict="clean")),
    Case("two_pass_graph_step25", "graph mode, 30 steps: the loss scale jumps at step 25 and Sqrt's backward "
         "overflows there", ("run", "--two-pass", "--device", "cpu", "--dump-dir", "dump"),
         ("--mode", "graph", "--steps", "30", "--overflow-at", "25", "--scale", "65536"),
         dict(_SQRT_BACKWARD, iteration=25, rank=0), glog="2"),
    Case("hunt_msrun_dp2", "2 ranks under msrun, data parallel in PyNative: rank 1 overflows at step 2, rank 0 "
         "receives it through the gradient AllReduce", ("hunt", "--out-dir", "hunt"),
         ("--mode", "pynative", "--steps", "3", "--overflow-at", "2", "--distributed"),
         dict(_SQRT_BACKWARD, iteration=2, rank=1, direction="backward"), workers=2),
    Case("two_pass_not_reproduced", "graph mode: only the second run (pass 1, after the graph probe) overflows "
         "(at step 1), so pass 2 cannot see what pass 1 saw", ("run", "--two-pass", "--device", "cpu", "--dump-dir",
                                                               "dump"),
         ("--mode", "graph", "--steps", "3", "--overflow-at", "1", "--scale", "65536", "--overflow-on-run", "2",
          "runs_counted"), dict(verdict="inconclusive", iteration=1)),
    Case("run_blowup_after_dumped_step", "graph mode, plain `run` (CPU dumps step 0 by default): Sqrt's backward "
         "overflows at step 1, the weights and then the loss go non-finite; the dump of step 0 is clean, the job's "
         "own output is not", ("run", "--device", "cpu", "--dump-dir", "dump"),
         ("--mode", "graph", "--steps", "3", "--overflow-at", "1", "--scale", "65536"),
         dict(verdict="inconclusive", dumped_steps=[0], blowup_step=1)),
]
CASES_BY_NAME = {c.name: c for c in CASES}


def available() -> bool:
    return version("mindspore") is not None


def cache_key() -> str:
    h = hashlib.sha1()
    for path in [Path(__file__), RUNNER, CASE_SCRIPT, *sorted((REPO / "msoverflow").rglob("*.py")),
                 *sorted((REPO / "msoverflow" / "data").glob("*.yaml"))]:
        h.update(str(path.relative_to(REPO)).encode())
        h.update(path.read_bytes())
    h.update(f"{version('mindspore')}".encode())
    return h.hexdigest()[:16]


def run_case(case: Case, out_root: Path, python: str = sys.executable) -> Path:
    """Run one case into out_root/<case>/ (report.json, run.log, case.json and what the command wrote)."""
    target = out_root / case.name
    # MindSpore refuses dump paths with a '.' (.fixture-cache): run in a temporary directory, then move it here
    # (the report's absolute paths then name the temporary directory: give `repro --dump` the moved one).
    work = Path(tempfile.mkdtemp(prefix=f"msoverflow_{case.name}_"))
    # msoverflow (the key hashes all of it), the case script and the demo run from the cache entry's copy
    src = staged_sources(out_root, whole_package=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]),
               GLOG_v=case.glog, MSOVERFLOW_REPORT_JSON="")
    launcher = [python]
    if case.workers > 1:   # msrun starts `python` from PATH: the venv's first
        env["PATH"] = os.pathsep.join([str(Path(python).parent), env.get("PATH", "")])
        launcher = msrun_prefix(python, case.workers, work / "logs")   # msrun runs the script with `python` itself
    cmd = [python, "-m", "msoverflow", *case.msoverflow, "--format", "json", "-o", "report.json", "--",
           *launcher, in_staged(str(CASE_SCRIPT), src), *case.script]
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=CASE_TIMEOUT_S)
    logs = worker_logs(work / "logs")
    (work / "run.log").write_text(proc.stdout + proc.stderr + logs)
    record = {"name": case.name, "shows": case.shows, "made_by": f"real mindspore {version('mindspore')} on CPU",
              "command": ["msoverflow", *cmd[3:]], "exit": proc.returncode, "expected": case.expected,
              "glog": case.glog}
    (work / "case.json").write_text(json.dumps(record, indent=2))   # last: a case without it is run again
    if target.exists():
        shutil.rmtree(target)
    shutil.move(str(work), str(target))
    return target


def ensure_cases(out_dir: Optional[str] = None, names: Optional[List[str]] = None, force: bool = False,
                 progress=lambda message: None) -> Dict[str, Path]:
    """{case: its directory}, running the missing ones one after the other (about 15-40 s each)."""
    root = Path(out_dir) if out_dir else DEFAULT_CACHE_ROOT / cache_key()
    if not out_dir:
        prune_stale(DEFAULT_CACHE_ROOT, root)
    root.mkdir(parents=True, exist_ok=True)
    wanted = [CASES_BY_NAME[n] for n in (names or CASES_BY_NAME)]
    import fcntl
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        todo = [c for c in wanted if force or not (root / c.name / "case.json").exists()]
        if todo:
            progress(f"running {len(todo)} hunt/two-pass case(s) into {root}")
        for case in todo:
            run_case(case, root)
    return {c.name: root / c.name for c in wanted}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out")
    parser.add_argument("--case", action="append", choices=sorted(CASES_BY_NAME))
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args(argv)
    if not available():
        print("mindspore must be installed (pip install 'msoverflow[mindspore]')", file=sys.stderr)
        return 2
    for name, path in ensure_cases(args.out, args.case, args.force, progress=print).items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
