"""Benchmark: `msoverflow compare` of two SYNTHETIC npy dumps against `msoverflow analyze` of one of them.

The pair is bench_analyze.py's npy dump (R ranks x O ops x S steps, one input and one output file per op) built
twice; the target's output of one op (last rank, last step, half way through) differs by 1e-3 in a few values, so
every output of both dumps must be read and compared. Each method runs in its own process (wall time, peak RSS),
interleaved round by round: the median of --rounds, the ratio the median of the rounds' paired ratios. Target:
compare <= 2x analyze.

Usage (from the repository root): python -m benchmarks.bench_compare [--ranks 8 --ops 2000 --steps 2 --elements 1024] [--rounds 1] [--markdown]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks.bench_analyze import ANALYZE, REPO, measure_together, paired_ratio

COMPARE = [sys.executable, "-m", "msoverflow", "compare", "--format", "json"]


def build_pair(base: str, ranks: int, ops: int, steps: int, elements: int):
    """(baseline, target, the op made to differ): two builds of bench_analyze's dump, one output changed."""
    baseline, target = os.path.join(base, "baseline"), os.path.join(base, "target")
    for root in (baseline, target):
        if not os.path.isdir(root):
            subprocess.run([sys.executable, "-m", "benchmarks.bench_analyze", "--build-only", "npy", "--dir", root,
                            "--ranks", str(ranks), "--ops", str(ops), "--steps", str(steps),
                            "--elements", str(elements)], check=True, capture_output=True, cwd=REPO)
    changed = ops // 2
    folder = os.path.join(target, f"rank_{ranks - 1}", "Net", "0", str(steps - 1))
    name = next(n for n in os.listdir(folder) if f"MatMul-op{changed}." in n and ".output." in n)
    array = np.load(os.path.join(folder, name))
    array[:4] += np.float32(1e-3)
    np.save(os.path.join(folder, name), array)
    subprocess.run(["sync"], check=False)
    return baseline, target, f"MatMul-op{changed}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--ops", type=int, default=2000)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--elements", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--dir", help="build the dumps here and keep them (default: a temporary directory)")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args(argv)
    base = args.dir or tempfile.mkdtemp(prefix="msoverflow-bench-compare-")
    try:
        t0 = time.perf_counter()
        baseline, target, changed = build_pair(base, args.ranks, args.ops, args.steps, args.elements)
        print(f"built the pair in {time.perf_counter() - t0:.1f}s; changed: {changed}", file=sys.stderr)
        analyzed, compared = measure_together([ANALYZE + [baseline], COMPARE + [baseline, target]], args.rounds)
        (a_wall, a_rss, a_out), (c_wall, c_rss, c_out) = analyzed, compared
        answer = json.loads(c_out)
        first = answer["first_divergence"]
        result = (f"{answer['verdict']}: {first['op_name'].rsplit('_', 1)[-1]} rank {first['rank']} step "
                  f"{first['iteration']}" if first else answer["verdict"])
        files = 2 * args.ranks * args.ops * args.steps
        shape = f"npy pair, {args.ranks} ranks x {args.ops} ops x {args.steps} steps ({files // 1000}k files each)"
        rows = [(shape, "msoverflow analyze (one dump)", a_wall, a_rss, json.loads(a_out)["verdict"], ""),
                (shape, "msoverflow compare (both)", c_wall, c_rss, result,
                 f"{paired_ratio(compared, analyzed):.2f}x analyze (<= 2)")]
        if args.markdown:
            print("| case | method | wall s | peak RSS MB | result | ratio (target) |\n|---|---|---|---|---|---|")
            for r in rows:
                print(f"| {r[0]} | {r[1]} | {r[2]:.2f} | {r[3]:.0f} | {r[4]} | {r[5]} |")
        else:
            for r in rows:
                print(f"{r[1]:<32} {r[2]:7.2f}s {r[3]:6.0f} MB  {r[4]}  {r[5]}")
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
