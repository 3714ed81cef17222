"""Benchmark: `msoverflow analyze` against reference scripts, every case in one run, reported as ratios.

SYNTHETIC MindSpore-layout dumps with one overflow origin deep in the timeline (last step, 90% through the ops,
last rank); every method runs in its own process (wall time, peak RSS), the rounds interleaved (A B A B ...): a
time is the median of --rounds, a ratio the median of the rounds' paired ratios:
  npy     R ranks x O ops x S steps, one input and one output file per op (--ranks/--ops/--steps/--elements)
            walk         os.walk + list every file (the floor: what any tool pays to see the dump)
            naive        np.load every file in timestamp order and check isfinite (what people script by hand)
            lower bound  reads only the output tensors with os.read, one vectorised isfinite per directory
            analyze      msoverflow analyze (targets: <= 2x the lower bound, <= 0.2x naive)
  csv     statistic.csv only, --csv-ranks x --csv-steps files of --csv-rows rows (Ascend O0/O1 statistics)
            read_csv     pandas read_csv of every file, all columns
            analyze      (targets: <= 1.0x read_csv, peak RSS <= 300 MB)
  scale   the csv case with --scale-ranks ranks of one step: time per row vs the csv case (linear: ~1.0x) and
          peak RSS vs the csv case (flat in the number of ranks: ~1.0x)
  dask    analyze --scheduler on a dask.distributed LocalCluster (2 worker processes, loopback) on the npy dump:
          the same answer as in-process (time reported; cluster start-up not counted)
  imports `msoverflow --help` imports no command module; `analyze` no config/patch code (sys.modules)
Usage (from the repository root): python -m benchmarks.bench_analyze [--cases npy,csv,scale,dask,imports] [--markdown]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from tests.support.synth_dump import SynthDump

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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

LOWER_BOUND = """
import os, sys
import numpy as np
# Reads only output tensors (float32, all the same size here), one os.read each, and checks each directory
# with one vectorised isfinite: what the answer costs at least on this dump.
for folder, _, files in sorted(os.walk(sys.argv[1])):
    outputs = sorted((int(n.split('.')[-6]), n) for n in files if n.endswith('.npy') and '.output.' in n)
    if not outputs:
        continue
    payloads = []
    for _, name in outputs:
        fd = os.open(os.path.join(folder, name), os.O_RDONLY)
        blob = os.read(fd, 1 << 20)
        os.close(fd)
        payloads.append(memoryview(blob)[10 + int.from_bytes(blob[8:10], 'little'):])
    data = np.frombuffer(b''.join(payloads), dtype=np.float32).reshape(len(outputs), -1)
    bad = ~np.isfinite(data).all(axis=1)
    if bad.any():
        print(outputs[int(np.argmax(bad))][1])
"""

READ_CSV = """
import os, sys
import pandas as pd
rows = 0
for folder, _, files in os.walk(sys.argv[1]):
    if 'statistic.csv' in files:
        rows += len(pd.read_csv(os.path.join(folder, 'statistic.csv')))
print(rows)
"""

IMPORTS = """
import sys
from msoverflow.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
mods = sorted(m for m in sys.modules if m.startswith(('msoverflow.commands.', 'msoverflow.config', 'msoverflow.patch')))
print('IMPORTED', ','.join(mods))
"""

STAT_HEADER = ("Op Type,Op Name,Task ID,Stream ID,Timestamp,IO,Slot,Data Size,Data Type,Shape,Max Value,Min Value,"
               "Avg Value,Count,Negative Zero Count,Positive Zero Count,NaN Count,Negative Inf Count,"
               "Positive Inf Count,Zero Count,L2 Value,MD5")


def build_statistics(root: str, ranks: int, steps: int, rows: int) -> str:
    """statistic.csv only (Ascend O0/O1 with saved_data "statistic"), in the documented 2.2 header, `rows` rows
    per step directory (an input and an output row per op); the origin as in build()."""
    rng = np.random.default_rng(0)
    ops = rows // 2
    origin = (ranks - 1, steps - 1, int(ops * 0.9))
    for rank in range(ranks):
        for step in range(steps):
            folder = os.path.join(root, f"rank_{rank}", "Net", "0", str(step))
            os.makedirs(folder, exist_ok=True)
            high = rng.uniform(0.5, 4.0, ops)
            low = -rng.uniform(0.5, 4.0, ops)
            bad_from = origin[2] if (rank, step) == origin[:2] else ops + 1
            lines = [STAT_HEADER]
            clock = 1_700_000_000_000_000 + rank * 10_000_000 + step * 1_000_000
            for op in range(ops):
                name = f"Default/network-Net/layers-CellList/{op // 10}-Block/MatMul-op{op}"
                for io, slot in (("input", 0), ("output", 0)):
                    bad = op > bad_from or (op == bad_from and io == "output")
                    stats = ("null,null,null,1024,0,0,0,0,1024,0,null" if bad else
                             f"{high[op]:.6f},{low[op]:.6f},0.01,1024,0,0,0,0,0,0,31.9")
                    lines.append(f"MatMul,{name},{op},2,{clock + 10 * op + (io == 'output')},{io},{slot},4096,"
                                 f"float32,(1024),{stats},8e3f1b2c")
            with open(os.path.join(folder, "statistic.csv"), "w") as fh:
                fh.write("\n".join(lines) + "\n")
    return f"MatMul-op{origin[2]} on rank {origin[0]}, step {origin[1]}"


def add_statistics(root: str):
    """statistic.csv beside the npy files of every step directory, as Ascend O0/O1 dumps write it
    (built from the documented format by tests/support/ascend_fixtures.py)."""
    from msoverflow.names import parse
    from tests.support.ascend_fixtures import write_statistic_csv
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


def _run(argv):
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_maxrss / 1024.0, out.decode(errors="replace")


class Runs(tuple):
    """(median wall s, median peak RSS MB, last output) of one command's rounds; `.walls`: each round's wall time."""

    def __new__(cls, runs):
        self = super().__new__(cls, (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs),
                                     runs[-1][2]))
        self.walls = [r[0] for r in runs]
        return self


def paired_ratio(a: Runs, b: Runs) -> float:
    """a's wall time over b's, the median of the ratios of each round's pair (never the best of each side)."""
    return statistics.median(x / y for x, y in zip(a.walls, b.walls, strict=True))


def measure(argv, rounds=1) -> Runs:
    """`rounds` runs (each in its own process): median wall time, median peak RSS (MB), output."""
    return measure_together([argv], rounds)[0]


def measure_together(commands, rounds=1):
    """measure() of several commands, their runs interleaved round by round (A B A B ...), so that paired_ratio()
    pairs runs made under the same load."""
    runs = [[] for _ in commands]
    for _ in range(rounds):
        for i, argv in enumerate(commands):
            runs[i].append(_run(argv))
    return [Runs(r) for r in runs]


ANALYZE = [sys.executable, "-m", "msoverflow", "analyze", "--format", "json", "--no-progress", "--no-save"]


def _answer(out: str) -> str:
    report = json.loads(out)
    first = report["first"]
    return (f"{first['op_name'].rsplit('_', 1)[-1]} rank {first['rank']} step {first['iteration']}"
            if first else report["verdict"])


def _build(kind: str, root: str, args, ranks=None, steps=None) -> str:
    """Built in a child process: the measured children must not inherit the builder's memory (ru_maxrss)."""
    cmd = [sys.executable, "-m", "benchmarks.bench_analyze", "--build-only", kind, "--dir", root,
           "--ranks", str(args.ranks), "--ops", str(args.ops), "--steps", str(args.steps),
           "--elements", str(args.elements), "--csv-rows", str(args.csv_rows),
           "--csv-ranks", str(ranks or args.csv_ranks), "--csv-steps", str(steps or args.csv_steps)]
    if args.statistics:
        cmd.append("--statistics")
    t0 = time.perf_counter()
    origin = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO).stdout.strip()
    print(f"built {kind} dump in {time.perf_counter() - t0:.1f}s; origin: {origin}", file=sys.stderr)
    subprocess.run(["sync"], check=False)
    return origin


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default="npy,csv,scale,dask,imports")
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--ops", type=int, default=2000)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--elements", type=int, default=1024, help="float32 values per tensor")
    p.add_argument("--csv-rows", type=int, default=50_000, help="rows per statistic.csv")
    p.add_argument("--csv-ranks", type=int, default=8)
    p.add_argument("--csv-steps", type=int, default=2)
    p.add_argument("--scale-ranks", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3, help="runs per method (the median counts; ratios are paired)")
    p.add_argument("--jobs", help="pass --jobs to analyze (default: its own choice)")
    p.add_argument("--dir", help="build the dumps under here and keep them (default: a temporary directory)")
    p.add_argument("--markdown", action="store_true", help="print the results as a Markdown table")
    p.add_argument("--statistics", action="store_true",
                   help="npy case: also write statistic.csv per step directory (analyze then reads no tensor)")
    p.add_argument("--build-only", choices=["npy", "csv"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.build_only == "npy":
        print(build(args.dir, args.ranks, args.ops, args.steps, args.elements))
        if args.statistics:
            add_statistics(args.dir)
        return
    if args.build_only == "csv":
        print(build_statistics(args.dir, args.csv_ranks, args.csv_steps, args.csv_rows))
        return

    cases = set(args.cases.split(","))
    analyze_cmd = ANALYZE + (["--jobs", args.jobs] if args.jobs else [])
    base = args.dir or tempfile.mkdtemp(prefix="msoverflow-bench-")
    rows = []   # (case, method, wall, rss, result, ratio text)

    def dump(name, kind, **kw):
        root = os.path.join(base, name)
        if not os.path.isdir(root):
            _build(kind, root, args, **kw)
        return root

    try:
        if "npy" in cases or "dask" in cases:
            npy_root = dump(f"npy-{args.ranks}x{args.ops}x{args.steps}-{args.elements}"
                            + ("-stat" if args.statistics else ""), "npy")
            files = 2 * args.ranks * args.ops * args.steps
            shape = f"npy, {args.ranks} ranks x {args.ops} ops x {args.steps} steps ({files // 1000}k files)"
        if "npy" in cases:
            walk, naive, lower, ours = measure_together([
                [sys.executable, "-c", WALK, npy_root], [sys.executable, "-c", NAIVE, npy_root],
                [sys.executable, "-c", LOWER_BOUND, npy_root], analyze_cmd + [npy_root]], args.rounds)
            rows += [(shape, "walk", *walk[:2], f"{walk[2].strip()} files", ""),
                     (shape, "naive np.load + isfinite", *naive[:2],
                      naive[2].strip().split(".")[1].rsplit("_", 1)[-1] if naive[2].strip() else "nothing", ""),
                     (shape, "lower bound (outputs, os.read)", *lower[:2],
                      lower[2].strip().split(".")[1].rsplit("_", 1)[-1] if lower[2].strip() else "nothing", ""),
                     (shape, "msoverflow analyze", *ours[:2], _answer(ours[2]),
                      f"{paired_ratio(ours, lower):.2f}x lower bound (<= 2), "
                      f"{paired_ratio(ours, naive):.2f}x naive (<= 0.2)")]
        if "csv" in cases or "scale" in cases:
            csv_root = dump(f"csv-{args.csv_ranks}x{args.csv_steps}x{args.csv_rows}", "csv")
            csv_rows = args.csv_ranks * args.csv_steps * args.csv_rows
            csv_shape = (f"statistic.csv, {args.csv_ranks} ranks x {args.csv_steps} steps x {args.csv_rows // 1000}k "
                         f"rows ({csv_rows / 1e6:.1f}M rows)")
        if "scale" in cases:
            scale_root = dump(f"csv-{args.scale_ranks}x1x{args.csv_rows}", "csv", ranks=args.scale_ranks, steps=1)
        read_csv, csv_ours, scale = measure_together(
            [[sys.executable, "-c", READ_CSV, csv_root], analyze_cmd + [csv_root]]
            + ([analyze_cmd + [scale_root]] if "scale" in cases else [[sys.executable, "-c", "pass"]]),
            args.rounds) if ("csv" in cases or "scale" in cases) else (None, None, None)
        if "csv" in cases:
            rows += [(csv_shape, "pandas read_csv, all columns", *read_csv[:2], f"{read_csv[2].strip()} rows", ""),
                     (csv_shape, "msoverflow analyze", *csv_ours[:2], _answer(csv_ours[2]),
                      f"{paired_ratio(csv_ours, read_csv):.2f}x read_csv (<= 1.0), {csv_ours[1]:.0f} MB (<= 300)")]
        if "scale" in cases:
            scale_rows = args.scale_ranks * args.csv_rows
            per_row = (scale[0] / scale_rows) / (csv_ours[0] / csv_rows)
            rows.append((f"statistic.csv, {args.scale_ranks} ranks x 1 step x {args.csv_rows // 1000}k rows "
                         f"({scale_rows / 1e6:.1f}M rows)", "msoverflow analyze", *scale[:2], _answer(scale[2]),
                         f"time/row {per_row:.2f}x the {csv_rows / 1e6:.1f}M case (linear: ~1), "
                         f"RSS {scale[1] / csv_ours[1]:.2f}x (flat: ~1)"))
        if "imports" in cases:
            runs = [(["--help"], args.rounds), (["analyze", "--help"], args.rounds)]
            if "csv" in cases or "scale" in cases:
                runs.append((["analyze", csv_root, "--format", "json", "--no-progress", "--no-save"], 1))
            for argv, rounds in runs:
                wall, rss, out = measure([sys.executable, "-c", IMPORTS] + argv, rounds)
                imported = out.strip().rsplit("IMPORTED", 1)[-1].strip() or "none"
                label = " ".join("CSV_DUMP" if os.sep in a else a for a in argv)
                rows.append(("start-up", f"msoverflow {label}", wall, rss,
                             f"command/config/patch modules imported: {imported}", ""))
        # last: the bench process then holds a Dask client, and forked children inherit its peak RSS
        if "dask" in cases:
            rows.append(_dask_case(npy_root, shape, analyze_cmd, args.rounds))
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    if args.markdown:
        print("| case | method | wall s | peak RSS MB | result | ratio (target) |\n|---|---|---|---|---|---|")
        for case, label, wall, rss, result, ratio in rows:
            print(f"| {case} | {label} | {wall:.2f} | {rss:.0f} | {result} | {ratio} |")
    else:
        for case, label, wall, rss, result, ratio in rows:
            print(f"{case}\n  {label:32s} {wall:8.2f} s {rss:8.0f} MB  {result}" + (f"\n  {'':32s} {ratio}"
                                                                                     if ratio else ""))


def _dask_case(root, shape, analyze_cmd, rounds):
    """analyze --scheduler against a LocalCluster of 2 worker processes (loopback), vs the in-process answer."""
    try:
        from distributed import LocalCluster
    except ImportError:
        return (shape, "analyze --scheduler (Dask)", float("nan"), float("nan"), "dask.distributed not installed",
                "")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address=None, silence_logs=50) as cluster:
        here, remote = measure_together(
            [analyze_cmd + ["--jobs", "1", root], analyze_cmd + ["--scheduler", cluster.scheduler_address, root]],
            rounds)
    wall, rss, out = remote
    same = "same answer as in-process" if json.loads(out)["first"] == json.loads(here[2])["first"] else "DIFFERENT"
    return (shape, "analyze --scheduler (Dask LocalCluster, 2 workers)", wall, rss, f"{_answer(out)}, {same}",
            f"{paired_ratio(remote, here):.2f}x in-process ({here[0]:.2f}s)")


if __name__ == "__main__":
    main()
