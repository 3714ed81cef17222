#!/usr/bin/env python3
"""Fuzz msoverflow's readers and CLI (tests/fuzz/harness.py) in watched worker processes.

    .venv/bin/python -m tests.fuzz.run_long --cases 100000            # the long local run (docs/robustness.md)
    .venv/bin/python -m tests.fuzz.run_long --cases 600 --budget 90   # what the test suite runs

Run from the repository root (the workers import tests.fuzz.harness as a package).

Every case is checked for: no traceback / exception, an exit code in the contract, the dump tree unchanged
(harness), no hang (a worker whose case runs past --case-timeout is killed and the case saved), bounded memory
(RLIMIT_AS per worker, and peak RSS under --rss-mb). Failing inputs are written to --out with their target and
reason, ready to be added to tests/fuzz/corpus/. Exit status: 0 when no case failed.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def worker(args) -> int:
    """Run hypothesis cases of each target in --kind (comma-separated, --examples per target); a heartbeat file
    holds the current case (and .kind its target) before it runs; results go out as JSON lines."""
    limit = args.as_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    from hypothesis import HealthCheck, Phase, given, seed, settings

    from tests.fuzz import harness

    beat = Path(args.heartbeat)
    results = open(args.results, "a", encoding="utf-8")
    rss_limit_kb = [args.rss_mb * 1024]
    count = [0]

    def record(kind, data, reason):
        name = f"{kind}-{hashlib.sha1(data).hexdigest()[:12]}.bin"
        Path(args.out, name).write_bytes(data)
        results.write(json.dumps({"failure": name, "kind": kind, "reason": reason[:500]}) + "\n")
        results.flush()

    def one(kind, data):
        beat.write_bytes(data)             # the parent saves it if this case hangs or kills the worker
        try:
            harness.run_case(kind, data)
        except MemoryError:
            record(kind, data, "MemoryError (over the address-space limit)")
        except Exception as exc:           # noqa: BLE001 - every exception is a contract break
            record(kind, data, f"{type(exc).__name__}: {exc}")
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        if rss > rss_limit_kb[0]:
            record(kind, data, f"peak RSS {rss // 1024} MB over {args.rss_mb} MB")
            rss_limit_kb[0] = float("inf")
        count[0] += 1
        if count[0] % 50 == 0:
            results.write(json.dumps({"progress": count[0]}) + "\n")
            results.flush()

    for kind in args.kind.split(","):
        Path(str(beat) + ".kind").write_text(kind)

        @seed(args.seed)
        @settings(max_examples=args.examples, deadline=None, database=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(data=harness.seed_strategy(kind))
        def fuzz(data):
            one(kind, data)     # noqa: B023 (fuzz() runs on the next line, within this iteration)

        fuzz()
    results.write(json.dumps({"cases": count[0]}) + "\n")
    results.close()
    return 0


def _run_worker(args, out: Path, kinds, examples: int, worker_seed: int):
    """One watched worker: (cases run, failures)."""
    tag = "-".join(kinds) if len(kinds) == 1 else "mixed"
    results = out / f".results-{tag}.jsonl"
    beat = out / f".current-{tag}.bin"
    results.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "tests.fuzz.run_long", "--worker", "--kind", ",".join(kinds), "--examples", str(examples),
           "--seed", str(worker_seed), "--heartbeat", str(beat), "--results", str(results),
           "--out", str(out), "--as-mb", str(args.as_mb), "--rss-mb", str(args.rss_mb)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, cwd=REPO)
    last = (None, time.monotonic())
    reason = None
    while proc.poll() is None:
        time.sleep(0.2)
        try:
            stamp = beat.stat().st_mtime_ns
        except FileNotFoundError:
            stamp = None
        if stamp != last[0]:
            last = (stamp, time.monotonic())
        elif time.monotonic() - last[1] > args.case_timeout:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            reason = f"hang: no progress for {args.case_timeout:.0f} s"
            break
    stderr = proc.stderr.read() if proc.stderr else ""
    if reason is None and proc.returncode != 0:
        reason = f"worker died (exit {proc.returncode}): {stderr.strip()[-300:]}"
    ran, failures = 0, []
    if results.exists():
        for line in results.read_text().splitlines():
            entry = json.loads(line)
            if "failure" in entry:
                failures.append(entry)
            else:
                ran = max(ran, entry.get("cases", entry.get("progress", 0)))
    if reason is not None:
        kind_file = Path(str(beat) + ".kind")
        kind = kind_file.read_text() if kind_file.exists() else tag
        name = f"{kind}-{reason.split(':')[0]}-{int(time.time() * 1000)}.bin"
        if beat.exists():
            beat.replace(out / name)
        failures.append({"failure": name, "kind": kind, "reason": reason})
        ran += 1       # the case that hung or killed the worker
    return ran, failures


def parent(args) -> int:
    from tests.fuzz import harness
    out = Path(args.out or tempfile.mkdtemp(prefix="msoverflow-fuzz-out-"))
    out.mkdir(parents=True, exist_ok=True)
    kinds = args.targets.split(",") if args.targets else list(harness.TARGETS)
    rng = random.Random(args.seed)
    started = time.monotonic()
    cases, failures = 0, []
    if args.one_worker:       # the test suite's bounded run: one process start for every target
        ran, found = _run_worker(args, out, kinds, max(1, args.cases // len(kinds)), rng.randrange(1 << 30))
        cases, failures = ran, found
    else:
        # Readers are cheap, CLI cases cost more: CLI targets get a third of a reader's share.
        weights = {k: (1.0 if k in harness.READER_TARGETS else 0.34) for k in kinds}
        plan = {k: max(1, int(args.cases * w / sum(weights.values()))) for k, w in weights.items()}
        for kind, wanted in plan.items():
            done = 0
            while done < wanted and not (args.budget and time.monotonic() - started > args.budget):
                ran, found = _run_worker(args, out, [kind], min(wanted - done, args.chunk), rng.randrange(1 << 30))
                done += max(ran, 1)
                failures += found
            cases += done
            print(f"{kind:18s} {done:7d} cases  ({time.monotonic() - started:6.0f} s)", flush=True)
    summary = {"cases": cases, "failures": len(failures), "seconds": round(time.monotonic() - started),
               "targets": kinds, "out": str(out)}
    (out / "summary.json").write_text(json.dumps({"summary": summary, "failures": failures}, indent=2))
    for failure in failures:
        print(f"FAIL {failure['kind']}: {failure['reason'][:300]} -> {out / failure['failure']}")
    print(json.dumps(summary))
    return 1 if failures else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=2000, help="total cases over all targets")
    p.add_argument("--targets", help="comma-separated targets (default: all in tests/fuzz/harness.py)")
    p.add_argument("--budget", type=float, default=0, help="stop starting new chunks after this many seconds")
    p.add_argument("--case-timeout", type=float, default=30.0, help="seconds one case may run (a hang)")
    p.add_argument("--rss-mb", type=int, default=1024, help="peak resident memory allowed per worker")
    p.add_argument("--as-mb", type=int, default=6144, help="address-space limit per worker (RLIMIT_AS)")
    p.add_argument("--chunk", type=int, default=2000, help="cases per worker process")
    p.add_argument("--seed", type=int, default=int(time.time()))
    p.add_argument("--out", help="where failing inputs and summary.json go (default: a temp dir)")
    p.add_argument("--one-worker", action="store_true",
                   help="run every target in one worker process (fast start; the test suite uses it)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--kind", help=argparse.SUPPRESS)
    p.add_argument("--examples", type=int, help=argparse.SUPPRESS)
    p.add_argument("--heartbeat", help=argparse.SUPPRESS)
    p.add_argument("--results", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    return worker(args) if args.worker else parent(args)


if __name__ == "__main__":
    sys.exit(main())
