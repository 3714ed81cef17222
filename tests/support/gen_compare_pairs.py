#!/usr/bin/env python
"""Generate pairs of real MindSpore 2.10 CPU runs for `msoverflow compare` (same seed, weights and data; one
change between baseline and target), as test fixtures.

Runs go through tests/support/gen_real_dumps.py's runner (graph-mode dumps, msrun) or mindstudio-probe's
PrecisionDebugger (PyNative); each run is `<out>/<run>/dump/` with run.log and case.json. Outputs are cached under
`<repo>/.fixture-cache/compare/<key>/`, the key hashing the runs defined here, tests/support/cases/compare/*.py,
msoverflow/demo/*.py and the installed mindspore and mindstudio-probe versions; generation is locked per key, and
other keys are removed once unused for hours.

    python -m tests.support.gen_compare_pairs [--out DIR] [--pair NAME ...] [--force]

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

from tests.support import gen_real_dumps  # its runner, lock and case records
from tests.support.fixture_runs import RUNNER, in_staged, prune_stale, staged_sources, version, wait_until_settled

REPO = Path(__file__).resolve().parents[2]
SUPPORT = Path(__file__).resolve().parent
CASES_DIR = SUPPORT / "cases" / "compare"
NET = "cases/compare/compare_net.py"      # relative to tests/support/ (the cache key must not hold a checkout's path)
DEFAULT_CACHE_ROOT = REPO / ".fixture-cache" / "compare"
RUN_TIMEOUT_S = 300


@dataclasses.dataclass(frozen=True)
class Run:
    name: str
    description: str
    argv: tuple                 # after the python executable (script paths relative to tests/support/, or -m module)
    workers: int = 0            # msrun workers (0: a plain process)
    msprobe: bool = False       # PyNative under PrecisionDebugger (L1, tensors) instead of a MindSpore dump
    msprobe_task: str = "tensor"    # msprobe's task: "tensor" (npy files and statistics) or "statistics" (dump.json)
    iterations: tuple = (0,)

    def command_args(self) -> tuple:
        """argv with the case script's absolute path."""
        return tuple(str(SUPPORT / a) if a.endswith(".py") else a for a in self.argv)

    def case(self) -> "gen_real_dumps.Case":
        return gen_real_dumps.Case(
            name=self.name, description=self.description, shows=self.description, argv=self.command_args(),
            expected=gen_real_dumps._expect("clean", layout={0: list(self.iterations)}), workers=self.workers,
            dump_settings=gen_real_dumps._ALL_DEVICES if self.workers else {})


@dataclasses.dataclass(frozen=True)
class Pair:
    name: str
    baseline: str
    target: str
    shows: str
    expected: dict     # verdict; first divergence: rank, iteration, op_type, cell_type, cell, source_contains, dtype


_DEMO = ("-m", "msoverflow.demo.train", "--steps", "1", "--loss-scale", "1")
RUNS: List[Run] = [
    Run("net_fp32", "compare_net.py, fp32, two steps", (NET, "--steps", "2"), iterations=(0, 1)),
    Run("net_fp32_rerun", "the same run again (same seed, weights, data)", (NET, "--steps", "2"), iterations=(0, 1)),
    Run("net_softmax_fp16", "the attention's Softmax in float16 (cast in and back)",
        (NET, "--steps", "2", "--softmax-dtype", "float16"), iterations=(0, 1)),
    Run("net_ln_eps", "the LayerNorm's epsilon 1e-2 instead of 1e-5", (NET, "--steps", "2", "--ln-eps", "1e-2"),
        iterations=(0, 1)),
    Run("demo_fp32", "the demo TinyBaichuan, NormHead in float32, loss scale 1, one step",
        (*_DEMO, "--head-dtype", "float32")),
    Run("demo_fp16", "the demo TinyBaichuan, NormHead in float16, loss scale 1, one step",
        (*_DEMO, "--head-dtype", "float16")),
    Run("dp2_fp32", "2 ranks (msrun, MCCL), data parallel compare_net.py, fp32, one step",
        (NET, "--steps", "1", "--distributed"), workers=2),
    Run("dp2_softmax_fp16_rank1", "2 ranks, data parallel; rank 1 computes the Softmax in float16",
        (NET, "--steps", "1", "--distributed", "--softmax-dtype", "float16", "--change-rank", "1"), workers=2),
    Run("msprobe_fp32", "compare_net.py in PyNative under mindstudio-probe (L1, tensors), fp32, one step",
        (NET, "--steps", "1"), msprobe=True),
    Run("msprobe_softmax_fp16", "the same with the Softmax in float16",
        (NET, "--steps", "1", "--softmax-dtype", "float16"), msprobe=True),
    Run("msprobe_fp32_statistics", "msprobe_fp32 again with msprobe's task statistics: Max, Min, Mean and Norm "
        "of every tensor in dump.json, no tensor files", (NET, "--steps", "1"), msprobe=True,
        msprobe_task="statistics"),
]
RUNS_BY_NAME = {r.name: r for r in RUNS}

_SOFTMAX = dict(verdict="diverged", rank=0, iteration=0, op_type="Softmax", cell_type="Attention",
                cell="attention", source_contains="self.softmax(", dtype="float16")
PAIRS: List[Pair] = [
    Pair("identical_rerun", "net_fp32", "net_fp32_rerun", "the same run twice: bit-identical on CPU",
         dict(verdict="equivalent")),
    Pair("softmax_fp16", "net_fp32", "net_softmax_fp16", "one Cell's Softmax computed in float16", _SOFTMAX),
    Pair("layernorm_eps", "net_fp32", "net_ln_eps", "one LayerNorm's epsilon changed",
         dict(verdict="diverged", rank=0, iteration=0, op_type="LayerNorm", cell_type="LayerNorm", cell="norm",
              source_contains="self.norm(")),
    Pair("demo_fp16_vs_fp32", "demo_fp32", "demo_fp16", "the demo's NormHead in float16 against float32",
         dict(verdict="diverged", rank=0, iteration=0, cell_type="NormHead", cell="lm_head", dtype="float16")),
    Pair("dp2_softmax_fp16", "dp2_fp32", "dp2_softmax_fp16_rank1",
         "2 ranks: rank 1's Softmax in float16; rank 0 receives the difference through the gradient AllReduce",
         dict(_SOFTMAX, rank=1)),
    Pair("msprobe_softmax_fp16", "msprobe_fp32", "msprobe_softmax_fp16",
         "mindstudio-probe dumps (L1 tensors): the Softmax in float16. msprobe records every API call, the "
         "astype of the baseline (float32 to float32) too, so the cast into float16 is matched and is where the "
         "runs part (in a graph-mode dump that Cast exists in the target only and the Softmax is first)",
         dict(verdict="diverged", rank=0, iteration=0, op_type="Tensor.to", source_contains="self.softmax(",
              dtype="float16")),
    # Not comparable (issue 26): never a divergence, whatever differs.
    Pair("different_models", "demo_fp32", "net_fp32", "two different models (the demo TinyBaichuan against "
         "compare_net.py): a handful of op runs match by type and scope and differ",
         dict(verdict="inconclusive", reason="the runs are not the same model: ")),
    Pair("different_rank_counts", "net_fp32", "dp2_fp32", "the same network on 1 rank against 2 data-parallel "
         "ranks (msrun): another job, whose gradients go through AllReduce and whose batch shapes differ",
         dict(verdict="inconclusive", reason="the runs are not the same job: the baseline holds ranks 0, the target "
                                             "ranks 0,1")),
    Pair("msprobe_statistics_vs_tensors", "msprobe_fp32", "msprobe_fp32_statistics", "the same msprobe run, "
         "dumped with tensors and with statistics only: compared by Max and Min, which agree; the element values "
         "of the statistics side are not there to compare",
         dict(verdict="inconclusive", reason="only statistics could be compared (Max and Min")),
]
PAIRS_BY_NAME = {p.name: p for p in PAIRS}


def available(msprobe: bool = False) -> bool:
    return version("mindspore") is not None and (not msprobe or version("mindstudio-probe") is not None)


def cache_key() -> str:
    """What makes the dumps: the runs' definitions (not the pairs' expectations), the case scripts, the demo
    model and the versions."""
    digest = hashlib.sha256(repr(RUNS).encode())
    for path in [Path(__file__).resolve(), RUNNER, *sorted(CASES_DIR.glob("*.py")), *sorted((REPO / "msoverflow" / "demo").glob("*.py"))]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(f"{gen_real_dumps.mindspore_identity()}|msprobe={version('mindstudio-probe')}".encode())
    return digest.hexdigest()[:16]


def _run_msprobe(run: Run, out_dir: Path, python: str) -> dict:
    """A PyNative run under PrecisionDebugger (task tensor, level L1) into out_dir/<run>/dump."""
    target = out_dir / run.name
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix=f"msoverflow_compare_{run.name}_") as tmp:
        dump = Path(tmp) / "dump"
        config = {"task": run.msprobe_task, "dump_path": str(dump), "rank": [], "step": [], "level": "L1",
                  "extra_info": True, run.msprobe_task: {"scope": [], "list": [], "data_mode": ["all"]}}
        config_path = Path(tmp) / "config.json"
        config_path.write_text(json.dumps(config, indent=2))
        src = staged_sources(out_dir)    # the case script and demo package run from the cache entry's copy
        env = dict(os.environ, GLOG_v="3",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")])))
        cmd = [python, *(in_staged(arg, src) for arg in run.command_args()), "--msprobe", str(config_path)]
        proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        (target / "run.log").write_text(proc.stdout + proc.stderr)
        ok = proc.returncode == 0 and dump.is_dir()
        if ok:
            shutil.move(str(dump), str(target / "dump"))
            shutil.copy(config_path, target / "msprobe_config.json")
    record = {"name": run.name, "description": run.description, "command": cmd[1:], "exit_code": proc.returncode,
              "made_by": f"mindstudio-probe {version('mindstudio-probe')} + mindspore {version('mindspore')} "
                         "on CPU (PyNative)", "ok": ok, "problems": [] if ok else [f"exit {proc.returncode}"]}
    (target / "case.json").write_text(json.dumps(record, indent=2))
    return record


def _run(run: Run, out_dir: Path, python: str) -> dict:
    if run.msprobe:
        return _run_msprobe(run, out_dir, python)
    return gen_real_dumps.run_case(run.case(), out_dir, python, timeout=RUN_TIMEOUT_S)


class ComparePairs:
    """pair name -> (baseline dump, target dump); `.pair(name)` the Pair; `.record(run)` a run's case.json."""

    def __init__(self, root: Path, records: Dict[str, dict], pairs: Optional[Dict[str, "Pair"]] = None):
        self.root = root
        self.records = records
        self.pairs = pairs or PAIRS_BY_NAME      # another generator's pairs (gen_compare_precision)
        wait_until_settled(root, records)

    def __getitem__(self, name: str):
        pair = self.pairs[name]
        for run in (pair.baseline, pair.target):
            record = self.records.get(run) or {}
            if not record.get("ok"):
                raise gen_real_dumps.CaseFailed(gen_real_dumps.failure_message(self.root / run, record))
        return self.root / pair.baseline / "dump", self.root / pair.target / "dump"

    def pair(self, name: str) -> Pair:
        return self.pairs[name]


def ensure_pairs(names: Optional[List[str]] = None, out_dir: Optional[Path] = None, force: bool = False,
                 python: str = sys.executable, progress=None) -> ComparePairs:
    """Generate the runs the named pairs need (all pairs by default) unless finished copies are cached."""
    pairs = [PAIRS_BY_NAME[n] for n in (names or PAIRS_BY_NAME)]
    wanted = list(dict.fromkeys(r for p in pairs for r in (p.baseline, p.target)))
    if out_dir is None:
        out_dir = DEFAULT_CACHE_ROOT / cache_key()
        prune_stale(DEFAULT_CACHE_ROOT, out_dir)
    out_dir = Path(out_dir)
    records: Dict[str, dict] = {}
    with gen_real_dumps._locked(out_dir):
        for name in wanted:       # one at a time: every run is already multi-threaded or multi-process
            record = None if force else gen_real_dumps.read_case_json(out_dir / name)
            if not (record and record.get("ok")):
                run = RUNS_BY_NAME[name]
                if progress:
                    progress(f"running {name}: {run.description}")
                record = _run(run, out_dir, python)
                if progress:
                    progress(f"{name}: {'ok' if record.get('ok') else 'FAILED'}")
            records[name] = record
    return ComparePairs(out_dir, records)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--pair", action="append", choices=sorted(PAIRS_BY_NAME))
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args(argv)
    if not available(msprobe=True):
        print("gen_compare_pairs: mindspore and mindstudio-probe must be installed", file=sys.stderr)
        return 2
    made = ensure_pairs(args.pair, args.out, args.force, progress=lambda m: print(m, file=sys.stderr, flush=True))
    failed = [n for n, r in made.records.items() if not r.get("ok")]
    for name in args.pair or PAIRS_BY_NAME:
        pair = PAIRS_BY_NAME[name]
        print(f"{name}: {made.root / pair.baseline / 'dump'} vs {made.root / pair.target / 'dump'}")
    for name in failed:
        print(gen_real_dumps.failure_message(made.root / name, made.records[name]), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
