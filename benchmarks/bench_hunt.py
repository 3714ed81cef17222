#!/usr/bin/env python
"""Cost of `msoverflow hunt` and `msoverflow run --two-pass` against the runs they replace (real MindSpore CPU).

hunt: the demo TinyBaichuan trained in PyNative without overflow (so every step is watched to the end), plain and
under `msoverflow hunt`, on a small model and a larger one. Target: hunt <= 3x the plain run's wall time on the
small model. The training loop's own time (printed by the script) is shown too: start-up (importing MindSpore)
is the same in both and dilutes the wall-time ratio.

two-pass: the demo trained in graph mode for 30 steps, overflowing at step 25: a plain run, a run with a full
every-step dump (every op's tensors, every step: what one would otherwise do), and `run --two-pass`. Targets:
two-pass bytes <= 15% of the full dump's, wall time <= 3x the full-dump run's.

    python -m benchmarks.bench_hunt [--markdown] [--only hunt|two-pass] [--keep DIR]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "support" / "cases" / "hunt" / "normhead_train.py"
SMALL = ["--steps", "20"]
LARGER = ["--steps", "10", "--hidden", "256", "--layers", "4", "--batch", "16", "--seq", "64"]
GRAPH_RUN = ["--mode", "graph", "--steps", "30", "--overflow-at", "25", "--scale", "65536"]


def _env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), GLOG_v="3",
                MSOVERFLOW_REPORT_JSON="")


def timed(cmd, cwd, env=None):
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=env or _env(), capture_output=True, text=True)
    seconds = time.monotonic() - started
    loop = re.search(r"trained \d+ steps in ([0-9.]+) s", proc.stdout)
    return seconds, float(loop.group(1)) if loop else None, proc


def size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def bench_hunt(work: Path, rows: list) -> None:
    py = sys.executable
    for label, args in (("small (hidden 16, 1 layer, batch 4x8), 20 steps", SMALL),
                        ("larger (hidden 256, 4 layers, batch 16x64), 10 steps", LARGER)):
        cmd = [py, str(SCRIPT), "--mode", "pynative", *args]
        plain, plain_loop, proc = timed(cmd, work)
        assert proc.returncode == 0, proc.stderr[-2000:]
        out = work / f"hunt_{len(rows)}"
        hunted, hunt_loop, proc = timed([py, "-m", "msoverflow", "hunt", "--out-dir", str(out), "--no-save", "--",
                                         *cmd], work)
        assert proc.returncode == 0, proc.stderr[-2000:]
        watched = re.search(r"(\d+ ops, \d+ Cell calls, \d+ gradients)", proc.stderr)
        rows.append(("hunt", label, "plain PyNative run", f"{plain:.1f}", f"{plain_loop:.2f}", "", ""))
        rows.append(("hunt", label, f"msoverflow hunt ({watched.group(1) if watched else '?'} watched)",
                     f"{hunted:.1f}", f"{hunt_loop:.2f}", "",
                     f"wall {hunted / plain:.2f}x, loop {hunt_loop / plain_loop:.2f}x the plain run"
                     + (" (target <= 3x)" if args is SMALL else "")))


def bench_two_pass(work: Path, rows: list) -> None:
    py = sys.executable
    cmd = [py, str(SCRIPT), *GRAPH_RUN]
    plain, _, proc = timed(cmd, work)
    assert proc.returncode == 0, proc.stderr[-2000:]
    label = "graph mode, 30 steps, overflow at step 25"
    rows.append(("two-pass", label, "plain run, no dump", f"{plain:.1f}", "", "", ""))
    full_dir = work / "full"
    full, _, proc = timed([py, "-m", "msoverflow", "run", "--device", "cpu", "--purpose", "tensors", "--steps", "all",
                           "--dump-dir", str(full_dir), "--no-analyze", "--", *cmd], work)
    assert proc.returncode == 0, proc.stderr[-2000:]
    full_bytes = size(full_dir)
    rows.append(("two-pass", label, "full dump, every op, every step (run --purpose tensors --steps all)",
                 f"{full:.1f}", "", f"{full_bytes / 1e6:.1f}", ""))
    two_dir = work / "two"
    two, _, proc = timed([py, "-m", "msoverflow", "run", "--two-pass", "--device", "cpu", "--dump-dir", str(two_dir),
                          "--no-save", "--", *cmd], work)
    assert proc.returncode == 1, proc.stderr[-2000:]
    found = re.search(r"ANOMALY: .*", proc.stdout)
    sizes = [(p.name, size(p)) for p in sorted(two_dir.iterdir()) if p.is_dir()]
    two_bytes = sum(b for _, b in sizes)
    rows.append(("two-pass", label, "run --two-pass (" + ", ".join(f"{n} {b / 1e6:.1f} MB" for n, b in sizes)
                 + "; analyses included)", f"{two:.1f}", "", f"{two_bytes / 1e6:.1f}",
                 f"{two_bytes / full_bytes:.1%} of the full dump's bytes (target <= 15%), {two / full:.2f}x its wall "
                 f"time (target <= 3x), {two / plain:.2f}x the plain run; "
                 + (found.group(0)[len('ANOMALY: '):] if found else "no anomaly")))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--only", choices=["hunt", "two-pass"])
    parser.add_argument("--keep", metavar="DIR", help="keep the runs' outputs here (default: a temporary directory)")
    args = parser.parse_args(argv)
    work = Path(args.keep or tempfile.mkdtemp(prefix="bench_hunt_"))   # no '.' in it: MindSpore's dump path rule
    work.mkdir(parents=True, exist_ok=True)
    rows: list = []
    try:
        if args.only in (None, "hunt"):
            bench_hunt(work, rows)
        if args.only in (None, "two-pass"):
            bench_two_pass(work, rows)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    header = ("what", "case", "method", "wall s", "loop s", "dump MB", "ratio")
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        for row in rows:
            print("  ".join(str(c) for c in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
