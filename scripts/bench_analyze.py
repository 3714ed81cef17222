"""Benchmark: `msoverflow analyze` against a naive baseline and the bare directory walk.

Builds a SYNTHETIC MindSpore-layout dump (ranks x ops x steps, one input and one output file per op, tensors of
--elements float32 values) with one overflow origin deep in the timeline (last step, 90% through the ops, last
rank), then runs each method in its own process and reports wall time and peak RSS:
  walk     os.walk + list every file (the floor: what any tool pays to see the dump)
  naive    np.load every file in timestamp order and check isfinite (what people script by hand)
  analyze  msoverflow analyze --format json
Usage: python scripts/bench_analyze.py --ranks 8 --ops 2000 --steps 2 --elements 1024
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synth_dump import SynthDump  # noqa: E402

WALK = """
import os, sys
n = sum(len(files) for _, _, files in os.walk(sys.argv[1]))
print(n)
"""

NAIVE = """
import os, sys, numpy as np
files = []
for folder, _, names in os.walk(sys.argv[1]):
    files += [(int(n.split('.')[-6]), os.path.join(folder, n)) for n in names if n.endswith('.npy')]
for _, path in sorted(files):
    a = np.load(path)
    if a.dtype.kind == 'f' and not np.isfinite(a).all():
        print(os.path.basename(path))
        break
"""


def add_statistics(root: str):
    """statistic.csv beside the npy files of every step directory, as Ascend O0/O1 dumps write it
    (built from the documented format by scripts/ascend_fixtures.py)."""
    from ascend_fixtures import write_statistic_csv
    from msoverflow.names import parse
    for folder, _, files in os.walk(root):
        rows = []
        for name in files:
            p = parse(name)
            if p is not None and p.kind == "npy":
                rows.append({"op_type": p.op_type, "op_name": p.op_name, "task_id": p.task_id,
                             "stream_id": p.stream_id, "timestamp": p.timestamp, "io": p.io, "slot": p.slot,
                             "array": np.load(os.path.join(folder, name))})
        if rows:
            write_statistic_csv(os.path.join(folder, "statistic.csv"), rows)


def build(root: str, ranks: int, ops: int, steps: int, elements: int) -> str:
    rng = np.random.default_rng(0)
    base = rng.normal(size=elements).astype(np.float32)
    bad = base.copy()
    bad[elements // 2] = np.inf
    origin = (ranks - 1, steps - 1, int(ops * 0.9))
    for rank in range(ranks):
        dump = SynthDump(root, rank=rank, clock=1_700_000_000_000_000 + rank * 10_000_000)
        for step in range(steps):
            spread = False
            for op in range(ops):
                name = f"Default_network-Net_layers-CellList_{op // 10}-Block_MatMul-op{op}"
                here = (rank, step, op) == origin
                dump.tensor(step, "MatMul", name, "input", 0, bad if spread else base)
                dump.tensor(step, "MatMul", name, "output", 0, bad if (spread or here) else base)
                spread = spread or here
    return f"MatMul-op{origin[2]} on rank {origin[0]}, step {origin[1]}"


def measure(argv, cwd=None):
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    return wall, usage.ru_maxrss / 1024.0, out.decode(errors="replace")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--ops", type=int, default=2000)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--elements", type=int, default=1024, help="float32 values per tensor")
    p.add_argument("--dir", help="build the dump here (default: a temporary directory, removed afterwards)")
    p.add_argument("--markdown", action="store_true", help="print the result as a Markdown table row set")
    p.add_argument("--statistics", action="store_true",
                   help="also write statistic.csv per step directory (Ascend O0/O1): analyze then reads no tensor")
    p.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.build_only:
        print(build(args.dir, args.ranks, args.ops, args.steps, args.elements))
        if args.statistics:
            add_statistics(args.dir)
        return

    root = args.dir or tempfile.mkdtemp(prefix="msoverflow-bench-")
    try:
        t0 = time.perf_counter()
        # Built in a child process: the measured children must not inherit the builder's memory (ru_maxrss).
        origin = subprocess.run([sys.executable, os.path.abspath(__file__), "--build-only", "--dir", root,
                                 "--ranks", str(args.ranks), "--ops", str(args.ops), "--steps", str(args.steps),
                                 "--elements", str(args.elements)] + (["--statistics"] if args.statistics else []),
                                check=True, capture_output=True,
                                text=True).stdout.strip()
        files = 2 * args.ranks * args.ops * args.steps
        size_mb = files * (args.elements * 4 + 128) / 2**20
        print(f"built {files} files ({size_mb:.0f} MB) in {time.perf_counter() - t0:.1f}s; origin: {origin}",
              file=sys.stderr)
        subprocess.run(["sync"], check=False)
        rows = []
        for label, cmd in (("walk", [sys.executable, "-c", WALK, root]),
                           ("naive np.load + isfinite", [sys.executable, "-c", NAIVE, root]),
                           ("msoverflow analyze", [sys.executable, "-m", "msoverflow", "analyze", root,
                                                   "--format", "json", "--no-progress"])):
            wall, rss, out = measure(cmd)
            if label == "msoverflow analyze":
                report = json.loads(out)
                found = report["first"]["op_name"].rsplit("_", 1)[-1]
                extra = f"found {found} (rank {report['first']['rank']}, step {report['first']['iteration']}), " \
                        f"read {report['summary']['tensors_read']} tensors"
            elif label.startswith("naive"):
                extra = f"found {out.strip().split('.')[1].rsplit('_', 1)[-1] if out.strip() else 'nothing'}"
            else:
                extra = f"{out.strip()} files"
            rows.append((label, wall, rss, extra))
        shape = f"{args.ranks} ranks x {args.ops} ops x {args.steps} steps, {args.elements} fp32/tensor" + (
            ", with statistic.csv" if args.statistics else "")
        if args.markdown:
            print("| dump | method | wall s | peak RSS MB | result |\n|---|---|---|---|---|")
            for label, wall, rss, extra in rows:
                print(f"| {shape} | {label} | {wall:.2f} | {rss:.0f} | {extra} |")
        else:
            print(shape)
            for label, wall, rss, extra in rows:
                print(f"  {label:28s} {wall:8.2f} s {rss:8.0f} MB  {extra}")
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
