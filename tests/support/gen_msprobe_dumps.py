#!/usr/bin/env python
"""Generate real msprobe (mindstudio-probe PrecisionDebugger) dumps of MindSpore PyNative runs on CPU, as fixtures.

Each case runs tests/support/cases/msprobe/normhead_msprobe.py (the demo TinyBaichuan, fp16 NormHead lm head) in its
own subprocess with its own msprobe config.json. Outputs are cached under
`<repo>/.fixture-cache/msprobe/<key>/<case>/` (dump/, config.json, run.log, case.json); the key hashes this file,
the case script, msoverflow/demo/*.py and the installed mindspore and mindstudio-probe versions.

    python -m tests.support.gen_msprobe_dumps [--out DIR] [--case NAME ...] [--force]

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
from concurrent.futures import ThreadPoolExecutor
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
CASE_SCRIPT = Path(__file__).resolve().parent / "cases" / "msprobe" / "normhead_msprobe.py"
DEFAULT_CACHE_ROOT = REPO / ".fixture-cache" / "msprobe"
CASE_TIMEOUT_S = 300
NORMHEAD_SQRT_LINE = "norm = self.sqrt(variance + self.eps)"
# Loss scales per step: steps 0 and 1 stay finite; at step 2 Sqrt's backward leaves fp16's range in PyNative.
STEP_K_SCALES = "1,1,16384"


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    shows: str
    task: str                 # statistics | tensor
    level: str                # L0 | L1 | mix
    steps: int
    loss_scale: str
    expected: dict
    step_filter: tuple = ()   # msprobe "step" list
    workers: int = 1          # > 1: msrun data parallel (MCCL on CPU), the last rank overflows

    def config(self, dump_path: str) -> dict:
        return {"task": self.task, "dump_path": dump_path, "rank": [], "step": list(self.step_filter),
                "level": self.level, "extra_info": True,
                self.task: {"scope": [], "list": [], "data_mode": ["all"],
                            **({"summary_mode": "statistics"} if self.task == "statistics" else {})}}


_API_ORIGIN = dict(verdict="anomaly", op_name="Primitive.sqrt.Sqrt.0.backward", forward_op="Sqrt",
                   kind="overflow", cell_type="NormHead", source_contains=NORMHEAD_SQRT_LINE)
_CELL_ORIGIN = dict(verdict="anomaly", op_name="Cell.lm_head.NormHead.backward.0", forward_op="NormHead",
                    kind="overflow", cell="lm_head", cell_type="NormHead", source_contains="self.lm_head(x)")

CASES: List[Case] = [
    Case("l1_statistics_stepk", "API level statistics over 3 steps: Sqrt's backward overflows at step 2",
         "statistics", "L1", 3, STEP_K_SCALES, dict(_API_ORIGIN, iteration=2)),
    Case("l1_tensor_step2", "API level tensors of step 2 only (msprobe step filter)", "tensor", "L1", 3,
         STEP_K_SCALES, dict(_API_ORIGIN, iteration=2), step_filter=(2,)),
    Case("l0_tensor_stepk", "Cell level tensors over 3 steps: NormHead's weight gradient overflows at step 2",
         "tensor", "L0", 3, STEP_K_SCALES, dict(_CELL_ORIGIN, iteration=2)),
    Case("l0_statistics", "Cell level statistics of one overflowing step", "statistics", "L0", 1, "16384",
         dict(_CELL_ORIGIN, iteration=0)),
    Case("mix_tensor_step2", "Cell and API level tensors of step 2 only (msprobe step filter)", "tensor", "mix", 3,
         STEP_K_SCALES, dict(_API_ORIGIN, iteration=2, cell="lm_head"), step_filter=(2,)),
    Case("l1_statistics_clean", "API level statistics of two healthy steps", "statistics", "L1", 2, "1",
         dict(verdict="clean")),
    Case("dp2_l1_statistics_rank1", "2 ranks, data parallel: rank 1 overflows at step 2, AllReduce spreads it",
         "statistics", "L1", 3, STEP_K_SCALES, dict(_API_ORIGIN, iteration=2, rank=1, ranks=[0, 1]), workers=2),
]
CASES_BY_NAME = {c.name: c for c in CASES}


def available() -> bool:
    return version("mindspore") is not None and version("mindstudio-probe") is not None


def cache_key() -> str:
    h = hashlib.sha1()
    for path in [Path(__file__), RUNNER, CASE_SCRIPT, *sorted((REPO / "msoverflow" / "demo").glob("*.py"))]:
        h.update(path.read_bytes())
    h.update(f"{version('mindspore')}|{version('mindstudio-probe')}".encode())
    return h.hexdigest()[:16]


def run_case(case: Case, out_root: Path, python: str = sys.executable) -> Path:
    """Run one case into out_root/<case>/ (dump/, config.json, run.log, case.json)."""
    target = out_root / case.name
    with tempfile.TemporaryDirectory(prefix=f"msprobe_{case.name}_") as tmp:
        work = Path(tmp)
        dump = work / "dump"
        config_path = work / "config.json"
        config_path.write_text(json.dumps(case.config(str(dump)), indent=2))
        src = staged_sources(out_root)    # the case script and demo package run from the cache entry's copy
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]),
                   GLOG_v="3")
        cmd = [python, in_staged(str(CASE_SCRIPT), src), "--config", str(config_path), "--steps", str(case.steps),
               "--loss-scale", case.loss_scale]
        if case.workers > 1:
            # msrun starts `python` from PATH: the venv's first
            env["PATH"] = os.pathsep.join([str(Path(python).parent), env.get("PATH", "")])
            cmd = [*msrun_prefix(python, case.workers, work / "logs"), *cmd[1:], "--distributed"]
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=CASE_TIMEOUT_S)
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        logs = worker_logs(work / "logs")
        (target / "run.log").write_text(proc.stdout + proc.stderr + logs)
        if proc.returncode != 0:
            raise RuntimeError(f"{case.name}: exit {proc.returncode}; see {target / 'run.log'}")
        shutil.move(str(dump), str(target / "dump"))
        shutil.copy(config_path, target / "config.json")
    record = {"name": case.name, "shows": case.shows, "made_by": "real mindstudio-probe "
              f"{version('mindstudio-probe')} + mindspore {version('mindspore')} on CPU (PyNative)",
              "command": cmd[1:], "expected": case.expected}
    (target / "case.json").write_text(json.dumps(record, indent=2))
    return target


def ensure_cases(out_dir: Optional[str] = None, names: Optional[List[str]] = None, force: bool = False,
                 jobs: int = 2, progress=lambda message: None) -> Dict[str, Path]:
    """{case: its directory}, generating the missing ones (about 10 s each)."""
    root = Path(out_dir) if out_dir else DEFAULT_CACHE_ROOT / cache_key()
    if not out_dir:
        prune_stale(DEFAULT_CACHE_ROOT, root)
    root.mkdir(parents=True, exist_ok=True)
    wanted = [CASES_BY_NAME[n] for n in (names or CASES_BY_NAME)]
    todo = [c for c in wanted if force or not (root / c.name / "case.json").exists()]
    if todo:
        progress(f"running {len(todo)} msprobe case(s) into {root}")
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            list(pool.map(lambda c: run_case(c, root), todo))
    return {c.name: root / c.name for c in wanted}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out")
    parser.add_argument("--case", action="append", choices=sorted(CASES_BY_NAME))
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    if not available():
        print("mindspore and mindstudio-probe must be installed (pip install 'msoverflow[mindspore,msprobe]')",
              file=sys.stderr)
        return 2
    for name, path in ensure_cases(args.out, args.case, args.force, args.jobs, progress=print).items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
