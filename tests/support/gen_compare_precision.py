#!/usr/bin/env python
"""Pairs of real MindSpore 2.10 CPU runs whose graphs differ, for `msoverflow compare` (issue 34): before and after
a precision patch made by `msoverflow patch`, amp O0 against O2, a planted float16 overflow, the same model in jit
and in PyNative (mindstudio-probe). Nothing is edited by
hand: the "after" run's model is the demo's model.py as `msoverflow patch --dump BEFORE --how source --write`
rewrote it.

Runs go through tests/support/gen_real_dumps.py's runner (graph-mode dumps of every tensor); each run is
`<out>/<run>/dump/` with run.log and case.json. Cached under `<repo>/.fixture-cache/compare_precision/<key>/`, the
key hashing the runs defined here, tests/support/cases/compare_precision/*.py, msoverflow/demo/*.py,
tests/support/cases/compare/compare_net.py, msoverflow/patch/*.py (they make the patched model) and the mindspore
and mindstudio-probe versions.

    python -m tests.support.gen_compare_precision [--out DIR] [--pair NAME ...] [--force]

Only the standard library is imported at module level (tests import this file).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

from tests.support import gen_compare_pairs, gen_real_dumps
from tests.support.fixture_runs import prune_stale, version
from tests.support.gen_compare_pairs import ComparePairs, Pair

REPO = Path(__file__).resolve().parents[2]
SUPPORT = Path(__file__).resolve().parent
CASES_DIR = SUPPORT / "cases" / "compare_precision"
AMP = "cases/compare_precision/amp_net.py"
NET = "cases/compare/compare_net.py"      # the compare set's small net, run here in jit and in PyNative
DEMO_WITH_MODEL = "cases/compare_precision/demo_with_model.py"
PATCHED_MODEL = "{patched_model}"       # replaced by <out>/patched_model/model.py when the run starts
DEFAULT_CACHE_ROOT = REPO / ".fixture-cache" / "compare_precision"
RUN_TIMEOUT_S = 300


@dataclasses.dataclass(frozen=True)
class Run:
    name: str
    description: str
    argv: tuple
    msprobe: bool = False       # PyNative under mindstudio-probe (gen_compare_pairs' runner) instead of a graph dump

    def case(self, out_dir: Path) -> "gen_real_dumps.Case":
        args = tuple(str(out_dir / "patched_model" / "model.py") if a == PATCHED_MODEL else
                     str(SUPPORT / a) if a.endswith(".py") else a for a in self.argv)
        return gen_real_dumps.Case(name=self.name, description=self.description, shows=self.description, argv=args,
                                   expected=gen_real_dumps._expect("any", layout={0: [0]}))


RUNS: List[Run] = [
    Run("demo_overflow", "the demo TinyBaichuan as shipped (NormHead in float16, loss scale 64), one step",
        ("-m", "msoverflow.demo.train", "--steps", "1")),
    Run("demo_patched", "the same run with the model `msoverflow patch --dump demo_overflow --how source --write` "
        "rewrote (NormHead's norm computed in float32)", (DEMO_WITH_MODEL, PATCHED_MODEL, "--steps", "1")),
    Run("amp_o0", "amp_net.py under amp O0 (float32), one step", (AMP, "--amp", "O0")),
    Run("amp_o2", "amp_net.py under amp O2 (float16 network), one step", (AMP, "--amp", "O2")),
    Run("amp_o0_overflow", "amp_net.py with the Square's input scaled by 400, amp O0 (float32 holds it)",
        (AMP, "--amp", "O0", "--overflow")),
    Run("amp_o2_overflow", "the same under amp O2: the Square overflows float16", (AMP, "--amp", "O2", "--overflow")),
    Run("jit_fp32", "compare_net.py in graph mode (jit), fp32, one step", (NET, "--steps", "1")),
    Run("jit_ln_eps", "the same with the LayerNorm's epsilon 1e-2 instead of 1e-5", (NET, "--steps", "1", "--ln-eps",
                                                                                       "1e-2")),
    Run("pynative_fp32", "compare_net.py in PyNative under mindstudio-probe (L1: every API call), fp32, one step",
        (NET, "--steps", "1"), msprobe=True),
]
RUNS_BY_NAME = {r.name: r for r in RUNS}

PAIRS: List[Pair] = [
    Pair("precision_patch", "demo_overflow", "demo_patched", "before and after a precision patch made by "
         "`msoverflow patch`: Casts inserted around NormHead's norm; everything upstream bit-identical",
         dict(verdict="diverged", rank=0, iteration=0, cell_type="NormHead", cell="lm_head")),
    Pair("amp_o0_vs_o2", "amp_o0", "amp_o2", "a healthy model in float32 against float16 (amp O2): every op "
         "differs by rounding, within float16's precision", dict(verdict="equivalent", within_precision="float16")),
    Pair("amp_overflow", "amp_o0_overflow", "amp_o2_overflow", "amp O0 against O2 of a model whose Square "
         "overflows float16: the constant scale * scale (160000) is inf in float16, so the Div after the Square "
         "(a kernel MindSpore's graph expanded, Expand_Divs, no Cell scope) makes NaN",
         dict(verdict="diverged", rank=0, iteration=0, op_type="Div", source_contains="/ (self.scale * self.scale)",
              dtype="float16")),
]
PAIRS += [
    Pair("jit_vs_pynative", "jit_fp32", "pynative_fp32", "the same model in graph mode and in PyNative: kernels "
         "against API calls, paired by op family in forward order", dict(verdict="equivalent")),
    Pair("jit_eps_vs_pynative", "jit_ln_eps", "pynative_fp32", "jit with the LayerNorm's epsilon changed against "
         "PyNative", dict(verdict="diverged", rank=0, iteration=0, op_type="LayerNorm", cell_type="LayerNorm",
                          cell="norm", source_contains="self.norm(")),
]
PAIRS_BY_NAME = {p.name: p for p in PAIRS}
_NEEDS_PATCH = {"demo_patched": "demo_overflow"}


def available() -> bool:
    return version("mindspore") is not None and version("mindstudio-probe") is not None


def cache_key() -> str:
    digest = hashlib.sha256(repr(RUNS).encode())
    files = [*sorted(CASES_DIR.glob("*.py")), SUPPORT / NET, *sorted((REPO / "msoverflow" / "demo").glob("*.py")),
             *sorted((REPO / "msoverflow" / "patch").glob("*.py"))]
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(f"{gen_real_dumps.mindspore_identity()}|msprobe={version('mindstudio-probe')}".encode())
    return digest.hexdigest()[:16]


def _patch_model(out_dir: Path, before_dump: Path, python: str) -> None:
    """A copy of the demo's model.py, rewritten by `msoverflow patch --dump BEFORE --how source --write`."""
    folder = out_dir / "patched_model"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    model = folder / "model.py"
    shutil.copy(REPO / "msoverflow" / "demo" / "model.py", model)
    command = [python, "-m", "msoverflow", "patch", "--dump", str(before_dump), "--how", "source",
               "--source", str(model), "--write"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=folder)
    (folder / "patch.log").write_text(" ".join(command[1:]) + "\n" + proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise gen_real_dumps.CaseFailed(f"msoverflow patch exit {proc.returncode}:\n{proc.stdout}{proc.stderr}")


def _run(run: Run, out_dir: Path, python: str) -> dict:
    if run.msprobe:
        return gen_compare_pairs._run_msprobe(gen_compare_pairs.Run(run.name, run.description, run.argv,
                                                                    msprobe=True), out_dir, python)
    return gen_real_dumps.run_case(run.case(out_dir), out_dir, python, timeout=RUN_TIMEOUT_S)


def ensure_pairs(names: Optional[List[str]] = None, out_dir: Optional[Path] = None, force: bool = False,
                 python: str = sys.executable, progress=None) -> ComparePairs:
    pairs = [PAIRS_BY_NAME[n] for n in (names or PAIRS_BY_NAME)]
    wanted = list(dict.fromkeys(r for p in pairs for r in (p.baseline, p.target)))
    if out_dir is None:
        out_dir = DEFAULT_CACHE_ROOT / cache_key()
        prune_stale(DEFAULT_CACHE_ROOT, out_dir)
    out_dir = Path(out_dir)
    records: Dict[str, dict] = {}
    with gen_real_dumps._locked(out_dir):
        for name in wanted:
            record = None if force else gen_real_dumps.read_case_json(out_dir / name)
            if not (record and record.get("ok")):
                run = RUNS_BY_NAME[name]
                if progress:
                    progress(f"running {name}: {run.description}")
                if name in _NEEDS_PATCH:
                    before = _NEEDS_PATCH[name]
                    if not (records.get(before) or {}).get("ok"):
                        records[before] = gen_real_dumps.run_case(RUNS_BY_NAME[before].case(out_dir), out_dir,
                                                                  python, timeout=RUN_TIMEOUT_S)
                    _patch_model(out_dir, out_dir / before / "dump", python)
                record = _run(run, out_dir, python)
                if progress:
                    progress(f"{name}: {'ok' if record.get('ok') else 'FAILED'}")
            records[name] = record
    return ComparePairs(out_dir, records, PAIRS_BY_NAME)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--pair", action="append", choices=sorted(PAIRS_BY_NAME))
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args(argv)
    if not available():
        print("gen_compare_precision: mindspore and mindstudio-probe must be installed", file=sys.stderr)
        return 2
    made = ensure_pairs(args.pair, args.out, args.force, progress=lambda m: print(m, file=sys.stderr, flush=True))
    for name in args.pair or PAIRS_BY_NAME:
        pair = PAIRS_BY_NAME[name]
        print(f"{name}: {made.root / pair.baseline / 'dump'} vs {made.root / pair.target / 'dump'}")
    failed = [n for n, r in made.records.items() if not r.get("ok")]
    print(json.dumps({"failed": failed}), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
