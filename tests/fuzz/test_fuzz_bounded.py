"""The bounded fuzz run of the test suite: every target of tests/fuzz/harness.py, a few dozen hypothesis cases
each, in one watched worker (tests/fuzz/run_long.py: per-case timeout, RLIMIT_AS, peak RSS, tree hashes, exit
codes). About a minute on 2 cores; `python -m tests.fuzz.run_long --cases 100000` is the long run
(docs/robustness.md)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CASES = 1500


@pytest.mark.slow
def test_fuzz_every_target_within_budget(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tests.fuzz.run_long", "--one-worker", "--cases", str(CASES),
                           "--seed", "20261130", "--case-timeout", "30", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["failures"] == [], proc.stdout[-3000:]
    ran = summary["summary"]["cases"]
    # hypothesis may stop a target early when its strategy is exhausted; nearly all cases must have run
    assert ran >= CASES * 0.8, summary["summary"]
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
