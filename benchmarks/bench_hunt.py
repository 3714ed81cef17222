#!/usr/bin/env python
"""Cost of `msoverflow hunt` and `msoverflow run --two-pass` against the runs they replace (real MindSpore CPU).

hunt: the demo TinyBaichuan trained in PyNative without overflow (so every step is watched to the end), plain and
under `msoverflow hunt`, on a small model and a larger one. Target: hunt <= 3x the plain run's wall time on the
small model. The training loop's own time (printed by the script) is shown too: start-up (importing MindSpore)
is the same in both and dilutes the wall-time ratio.

two-pass: the demo trained in graph mode for 30 steps, overflowing at step 25: a plain run, a run with a full
every-step dump (every op's tensors, every step: what one would otherwise do; its analysis timed apart), and
`run --two-pass` (its graph probe, pass 1 and pass 2, analyses included), in paired rounds: each round runs the three, the order of the
full-dump run and two-pass flipping every round, and the wall-time ratios are the medians of the per-round ratios.
Bytes are what each run leaves on disk (two-pass removes its probe's graphs once read; they are shown apart).
Targets: two-pass bytes <= 12% of the full dump's, wall time <= 3x the full-dump run's.

    python -m benchmarks.bench_hunt [--markdown] [--only hunt|two-pass] [--rounds 3] [--keep DIR]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
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


def bench_two_pass(work: Path, rows: list, rounds: int = 3) -> None:
    py = sys.executable
    cmd = [py, str(SCRIPT), *GRAPH_RUN]
    label = "graph mode, 30 steps, overflow at step 25"
    plain_s, full_s, analysed_s, two_s, full_bytes, two = [], [], [], [], 0, None
    for i in range(rounds):
        seconds, _, proc = timed(cmd, work)
        assert proc.returncode == 0, proc.stderr[-2000:]
        plain_s.append(seconds)
        for method in (("full", "two") if i % 2 == 0 else ("two", "full")):
            out = work / f"{method}_{i}"
            if method == "full":    # then its analysis, timed apart (two-pass's time holds its own analyses)
                seconds, _, proc = timed([py, "-m", "msoverflow", "run", "--device", "cpu", "--purpose", "tensors",
                                          "--steps", "all", "--dump-dir", str(out), "--no-analyze", "--", *cmd], work)
                assert proc.returncode == 0, proc.stderr[-2000:]
                analysis, _, proc = timed([py, "-m", "msoverflow", "analyze", str(out), "--no-save"], work)
                assert proc.returncode == 1, proc.stderr[-2000:]
                full_s.append(seconds)
                analysed_s.append(seconds + analysis)
                full_bytes = size(out)
            else:
                seconds, _, proc = timed([py, "-m", "msoverflow", "run", "--two-pass", "--device", "cpu",
                                          "--dump-dir", str(out), "--no-save", "--", *cmd], work)
                assert proc.returncode == 1, proc.stderr[-2000:]
                two_s.append(seconds)
                two = (out, proc)
    out, proc = two
    found = re.search(r"ANOMALY: .*", proc.stdout)
    probe = re.search(r"probe: .* read in ([0-9.]+) s \(([0-9.]+ [KM]B), .*\): update kernels (.*)", proc.stderr)
    sizes = [(p.name, size(p)) for p in sorted(out.iterdir()) if p.is_dir()]
    two_bytes = sum(b for _, b in sizes)
    ratio = statistics.median(t / f for t, f in zip(two_s, full_s, strict=True))
    analysed_ratio = statistics.median(t / f for t, f in zip(two_s, analysed_s, strict=True))
    plain_ratio = statistics.median(t / p for t, p in zip(two_s, plain_s, strict=True))
    rounds_text = f"medians of {rounds} paired rounds"
    rows.append(("two-pass", label, "plain run, no dump", f"{statistics.median(plain_s):.1f}", "", "", ""))
    rows.append(("two-pass", label, "full dump, every op, every step (run --purpose tensors --steps all)",
                 f"{statistics.median(full_s):.1f}", "", f"{full_bytes / 1e6:.1f}", ""))
    rows.append(("two-pass", label, "the same, then msoverflow analyze of it", f"{statistics.median(analysed_s):.1f}",
                 "", "", ""))
    probe_text = (f"probe {float(probe.group(1)):.1f} s, {probe.group(2)} removed once read, watched "
                  f"{probe.group(3)}" if probe else "probe ?")
    rows.append(("two-pass", label, f"run --two-pass ({probe_text}; "
                 + ", ".join(f"{n} {b / 1e6:.1f} MB" for n, b in sizes) + "; analyses included)",
                 f"{statistics.median(two_s):.1f}", "", f"{two_bytes / 1e6:.2f}",
                 f"{two_bytes / full_bytes:.1%} of the full dump's bytes (target <= 12%), {ratio:.2f}x its wall time "
                 f"(target <= 3x), {analysed_ratio:.2f}x with its analysis, {plain_ratio:.2f}x the plain run "
                 f"({rounds_text}); "
                 + (found.group(0)[len('ANOMALY: '):] if found else "no anomaly")))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--only", choices=["hunt", "two-pass"])
    parser.add_argument("--keep", metavar="DIR", help="keep the runs' outputs here (default: a temporary directory)")
    parser.add_argument("--rounds", type=int, default=3, help="two-pass: paired rounds (default 3)")
    args = parser.parse_args(argv)
    work = Path(args.keep or tempfile.mkdtemp(prefix="bench_hunt_"))   # no '.' in it: MindSpore's dump path rule
    work.mkdir(parents=True, exist_ok=True)
    rows: list = []
    try:
        if args.only in (None, "hunt"):
            bench_hunt(work, rows)
        if args.only in (None, "two-pass"):
            bench_two_pass(work, rows, args.rounds)
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
