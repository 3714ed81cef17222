"""The watcher's rounds at the scheduler's idle priority (msoverflow/watcher/priority.py): taken where the thread can
be put back, given up when the rounds starve, never passed on to the training it starts. Linux; where this system
cannot give a thread SCHED_IDLE and take it back, the idle tests skip saying why (CI runs as root: they run)."""
import json
import os
import subprocess
import sys
import time

import pytest

from msoverflow.watcher import priority
from msoverflow.watcher.priority import SpareCpu


def _policy():
    return os.sched_getscheduler(0)


def _need_idle():
    why = priority._can_come_back()
    if why is not None:
        pytest.skip(f"no idle priority here: {why}")


def test_rounds_that_keep_up_stay_idle_and_a_starved_one_goes_back_to_normal():
    _need_idle()
    assert _policy() == os.SCHED_OTHER
    with SpareCpu(starved_seconds=0.6) as spare:
        assert spare.idle and _policy() == os.SCHED_IDLE, spare.state
        for _ in range(8):                    # rounds every 0.1 s: kept up
            time.sleep(0.1)
            spare.round_done()
        assert spare.idle and _policy() == os.SCHED_IDLE and spare.state == "idle"
        time.sleep(1.2)                       # no round for twice the bound: the guard puts the thread back
        assert not spare.idle and _policy() == os.SCHED_OTHER, spare.state
        assert spare.state.startswith("idle, then normal: a round took over"), spare.state
    assert _policy() == os.SCHED_OTHER


def test_the_thread_is_normal_again_after_the_block_even_when_it_raised():
    _need_idle()
    with pytest.raises(KeyError):
        with SpareCpu():
            assert _policy() == os.SCHED_IDLE
            raise KeyError("a round failed")
    assert _policy() == os.SCHED_OTHER


def test_where_the_thread_could_not_come_back_nothing_changes(monkeypatch):
    monkeypatch.setattr(priority, "_can_come_back", lambda: "SCHED_IDLE refused (Operation not permitted)")
    with SpareCpu() as spare:
        assert not spare.idle and _policy() == os.SCHED_OTHER
    assert spare.state == "normal (SCHED_IDLE refused (Operation not permitted))"


def test_the_training_the_watch_starts_runs_at_normal_priority(tmp_path):
    """The command's process is started by a thread that stays at normal priority: it must not inherit the idle
    one (a training at SCHED_IDLE would run only on the CPU nothing else wants)."""
    _need_idle()
    probe = ("import os, time\n"
             "time.sleep(0.6)\n"        # (the watcher's thread is idle by then)
             "print('policy', os.sched_getscheduler(0), flush=True)\n")
    out = tmp_path / "w"
    done = subprocess.run([sys.executable, "-m", "msoverflow", "watch", "--dump-dir", str(out), "--format", "json",
                           "-o", str(tmp_path / "r.json"), "--", sys.executable, "-c", probe],
                          capture_output=True, text=True, timeout=120)
    assert f"policy {os.SCHED_OTHER}" in done.stdout, (done.stdout, done.stderr)
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["capture"]["watcher_priority"] == "idle", report["capture"]
