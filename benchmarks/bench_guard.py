"""Benchmark: the in-graph zero-token guard's cost per training step, on a real 2-rank msrun CPU job.

Each round is one data-parallel msrun job (tests/support/cases/guard/train_guard_ingraph.py --bench: a small LM,
MCCL collectives, graph mode, no empty masks) holding two copies of the model, one unguarded (A) and one guarded
(B).
They run alternately, step by step, in the order A B B A A B ..., so the machine's load hits both alike; the
copies share no Parameter, and which one is built first flips every round. A pair's cost is the slower rank's
time of B minus that of A (and B / A); the first fifth of the pairs is warm-up. Reported: the median over all
pairs of the difference (ms per step) and of the ratio, and each round's own medians (their spread shows the
noise), never a best-of. --aa builds both copies unguarded: the noise floor of the method.
The guard is measured in both forms: `plain` (nn.TrainOneStepCell: a branch before the step) and `loss-scale`
(nn.TrainOneStepWithLossScaleCell: the signal folded into the cell's own all-reduce and branch).
Target: median overhead <= 4 ms per step, or <= 5% of the step.

    python -m benchmarks.bench_guard [--form plain|loss-scale|both] [--rounds 4] [--steps 60] [--hidden 1024]
                                     [--batch 256] [--aa] [--markdown]      (from the repository root)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(REPO, "tests", "support", "cases", "guard", "train_guard_ingraph.py")
TARGET_MS, TARGET_RATIO = 4.0, 1.05


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(form: str, steps: int, hidden: int, batch: int, first: str, aa: bool):
    """One msrun job: ([(unguarded s, guarded s) per step, the slower rank's], parameters of one copy)."""
    logs = tempfile.mkdtemp(prefix="bench-guard-")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
               GUARD_BENCH_HIDDEN=str(hidden), GUARD_BENCH_BATCH=str(batch), GLOG_v="3")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    command = ["msrun", "--worker_num=2", "--local_worker_num=2", f"--master_port={_port()}", "--join=True",
               f"--log_dir={logs}", CASE, "--bench", "--steps", str(steps), "--first", first]
    command += (["--loss-scale"] if form == "loss-scale" else []) + (["--aa"] if aa else [])
    try:
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600, cwd=logs)
        text = "".join(open(os.path.join(logs, n), errors="replace").read() for n in sorted(os.listdir(logs))
                       if n.startswith("worker_"))
        ranks = [json.loads(m) for m in re.findall(r'\{"rank": \d+, "bench".*\}', text)]
        if proc.returncode != 0 or len(ranks) != 2:
            raise SystemExit(f"msrun failed (exit {proc.returncode}):\n{(proc.stdout + text)[-3000:]}")
        pairs = [(max(r["bench"]["unguarded"][i] for r in ranks), max(r["bench"]["guarded"][i] for r in ranks))
                 for i in range(steps)]
        return pairs[steps // 5:], ranks[0]["params"]
    finally:
        shutil.rmtree(logs, ignore_errors=True)


def summarize(rounds):
    pairs = [p for r in rounds for p in r]
    diffs = [(b - a) * 1e3 for a, b in pairs]
    ratios = [b / a for a, b in pairs]
    return {"pairs": len(pairs), "unguarded_ms": statistics.median(a for a, _ in pairs) * 1e3,
            "guarded_ms": statistics.median(b for _, b in pairs) * 1e3,
            "overhead_ms": statistics.median(diffs), "ratio": statistics.median(ratios),
            "rounds_overhead_ms": [statistics.median((b - a) * 1e3 for a, b in r) for r in rounds],
            "rounds_ratio": [statistics.median(b / a for a, b in r) for r in rounds]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--form", choices=["plain", "loss-scale", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=60, help="pairs of steps per round (the first fifth: warm-up)")
    parser.add_argument("--hidden", type=int, default=1024, help="model width (step time grows with it)")
    parser.add_argument("--batch", type=int, default=256, help="sequences per step and rank (4 tokens each)")
    parser.add_argument("--aa", action="store_true", help="both copies unguarded: the noise floor")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    if shutil.which("msrun", path=os.path.dirname(sys.executable)) is None:
        raise SystemExit("msrun is not installed next to this Python")
    load_before = os.getloadavg()[0]
    results, params = {}, 0
    for form in (["plain", "loss-scale"] if args.form == "both" else [args.form]):
        rounds = []
        for i in range(args.rounds):
            pairs, params = run(form, args.steps, args.hidden, args.batch, ("unguarded", "guarded")[i % 2], args.aa)
            rounds.append(pairs)
        results[form] = summarize(rounds)
    load = (load_before, os.getloadavg()[0])
    verdict = all(r["overhead_ms"] <= TARGET_MS or r["ratio"] <= TARGET_RATIO for r in results.values())
    if args.markdown:
        print("| form | unguarded step | guarded step | overhead (median of pairs) | ratio | rounds' medians |")
        print("|---|---|---|---|---|---|")
        for form, r in results.items():
            print(f"| {form}{' (A/A)' if args.aa else ''} | {r['unguarded_ms']:.2f} ms | {r['guarded_ms']:.2f} ms | "
                  f"{r['overhead_ms']:+.2f} ms | {r['ratio']:.3f} | "
                  + ", ".join(f"{d:+.2f} ms" for d in r["rounds_overhead_ms"]) + " |")
        print(f"\nmodel: hidden {args.hidden}, {params:,} parameters per copy, {args.batch} x 4 tokens per rank and "
              f"step, 2 ranks (msrun, MCCL, CPU); {args.rounds} rounds x {args.steps} step pairs (first fifth "
              f"dropped); load average {load[0]:.1f} before, {load[1]:.1f} after")
        print(f"\ntarget: median overhead <= {TARGET_MS:g} ms per step or <= {TARGET_RATIO - 1:.0%}: "
              f"{'PASS' if verdict else 'FAIL'}")
    else:
        print(json.dumps({"results": results, "params": params, "load": load, "aa": args.aa,
                          "verdict": "PASS" if verdict else "FAIL"}))
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
