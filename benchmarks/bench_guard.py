"""Benchmark: the in-graph zero-token guard's cost per training step, on a real 2-rank msrun CPU job.

The same data-parallel run (tests/support/cases/guard/train_guard_ingraph.py --bench: a small LM, MCCL collectives, graph
mode, no empty masks) with and without `msoverflow.guard.guard(...)`; each worker times its steps (the first fifth
is warm-up and dropped) and reports the median. Runs alternate (unguarded, guarded, ...) for --rounds rounds and
the best median of each side is compared, so a busy machine's noise hits both alike.
Target: overhead <= 5% of the step time.
Usage (from the repository root): python -m benchmarks.bench_guard [--steps 200] [--rounds 3] [--hidden 256] [--markdown]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(REPO, "tests", "support", "cases", "guard", "train_guard_ingraph.py")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(guarded: bool, steps: int, hidden: int, batch: int) -> float:
    """The slower rank's median step time (seconds) of one msrun job."""
    logs = tempfile.mkdtemp(prefix="bench-guard-")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
               GUARD_BENCH_HIDDEN=str(hidden), GUARD_BENCH_BATCH=str(batch))
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    command = ["msrun", "--worker_num=2", "--local_worker_num=2", f"--master_port={_port()}", "--join=True",
               f"--log_dir={logs}", CASE, "--bench", "--steps", str(steps)] + ([] if guarded else ["--unguarded"])
    try:
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800, cwd=logs)
        text = "".join(open(os.path.join(logs, n), errors="replace").read() for n in sorted(os.listdir(logs))
                       if n.startswith("worker_"))
        medians = [json.loads(m)["median_step_s"] for m in re.findall(r'\{"rank": \d+, "median_step_s".*?\}', text)]
        if proc.returncode != 0 or len(medians) != 2:
            raise SystemExit(f"msrun failed (exit {proc.returncode}):\n{(proc.stdout + text)[-3000:]}")
        return max(medians)
    finally:
        shutil.rmtree(logs, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=1024, help="model width (step time grows with it)")
    parser.add_argument("--batch", type=int, default=256, help="sequences per step and rank (4 tokens each)")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    if shutil.which("msrun", path=os.path.dirname(sys.executable)) is None:
        raise SystemExit("msrun is not installed next to this Python")
    plain, guarded = [], []
    for _ in range(args.rounds):
        plain.append(run(False, args.steps, args.hidden, args.batch))
        guarded.append(run(True, args.steps, args.hidden, args.batch))
    base, with_guard = min(plain), min(guarded)
    overhead = (with_guard - base) / base
    verdict = "PASS" if overhead <= 0.05 else "FAIL"
    if args.markdown:
        print("| run | median step (best of rounds) |\n|---|---|")
        print(f"| unguarded | {base * 1e3:.2f} ms |\n| guarded (in-graph) | {with_guard * 1e3:.2f} ms |")
        print(f"\nmodel: hidden {args.hidden}, {args.batch} x 4 tokens per rank and step, 2 ranks (msrun, MCCL, CPU), "
              f"{args.steps} steps per run, {args.rounds} alternating rounds")
        print(f"\noverhead {overhead:+.1%} (target <= 5%: {verdict}); rounds: unguarded "
              + ", ".join(f"{t * 1e3:.2f}" for t in plain) + " ms; guarded "
              + ", ".join(f"{t * 1e3:.2f}" for t in guarded) + " ms")
    else:
        print(json.dumps({"unguarded_s": plain, "guarded_s": guarded, "overhead": overhead, "verdict": verdict}))
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
