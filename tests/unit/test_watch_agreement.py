"""The ranks' stop agreement (msoverflow/watcher/agreement.py) without MindSpore: ranks are threads, the all-reduce
a sum behind a barrier. The property: whenever and wherever each rank learns that it should stop, every rank stops
before the same step, and no rank is left in a collective the others will not join."""
import json
import random
import threading
import time

import pytest

from msoverflow.watcher.agreement import AGREE_FIRST, AGREE_SECONDS, Agreement


class SumGroup:
    """An all-reduce sum over `size` threads: each call blocks until every rank has called (as a collective
    does); a rank that never comes makes the others fail after `timeout` (a hang, in a real job)."""

    def __init__(self, size: int, timeout: float = 10.0):
        self.size, self.timeout = size, timeout
        self.barrier = threading.Barrier(size)
        self.lock = threading.Lock()
        self.parts: dict = {}
        self.calls = 0
        self.total: list = []

    def of_rank(self, rank: int):
        def all_reduce_sum(values):
            with self.lock:
                self.parts[rank] = list(values)
            self.barrier.wait(self.timeout)        # every rank has put its part
            with self.lock:
                if len(self.parts) == self.size:
                    self.total = [sum(col) for col in zip(*self.parts.values(), strict=True)]
                    self.calls += 1
            total = list(self.total)
            self.barrier.wait(self.timeout)        # every rank has its total
            with self.lock:
                self.parts.pop(rank, None)
            return total
        return all_reduce_sum


def _run_ranks(size, learns_at, step_seconds, steps=400):
    """Each rank steps until its agreement says stop; rank r wants to stop from step learns_at[r] on (None:
    never learns: only another rank does). Returns {rank: the step it stopped before, or None}."""
    group = SumGroup(size)
    stopped = {}
    errors = []

    def rank_loop(rank):
        agreement = Agreement(rank, size, group.of_rank(rank))
        try:
            for step in range(steps):
                want = learns_at[rank] is not None and step >= learns_at[rank]
                if agreement.due(step) and agreement.agree(step, want, step_seconds[rank]):
                    stopped[rank] = step
                    return
            stopped[rank] = None
        except threading.BrokenBarrierError:
            errors.append(rank)

    threads = [threading.Thread(target=rank_loop, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, f"ranks {errors} were left waiting in the agreement"
    return stopped


def test_ranks_that_learn_at_different_steps_stop_before_the_same_step():
    """300 random schedules: 2-5 ranks, each learning of the stop at its own step (or never: only another rank
    saw the NaN), with its own step time. All stop before one step: the first agreed step at or after the
    earliest learning step."""
    rs = random.Random(7)
    for _ in range(300):
        size = rs.randint(2, 5)
        first = rs.randint(0, 120)
        learns_at = [first + rs.randint(0, 60) if rs.random() < 0.7 else None for _ in range(size)]
        learns_at[rs.randrange(size)] = first
        step_seconds = [rs.choice([None, 0.001, 0.003, 0.05, 2.0]) for _ in range(size)]
        stopped = _run_ranks(size, learns_at, step_seconds)
        assert len(set(stopped.values())) == 1, (learns_at, step_seconds, stopped)
        stop = next(iter(stopped.values()))
        assert stop is not None and stop >= max(first, AGREE_FIRST), (learns_at, stopped)


def test_the_next_agreed_step_is_the_smallest_proposal_and_within_the_time_bound():
    agreement = Agreement(0, 2, lambda values: [values[0], values[1], 7.0])      # rank 1 proposes 7 steps
    assert agreement.proposal(0.001) == 1          # nothing measured yet: the next step
    agreement.costs.extend([0.0004] * 3)
    # 0.4 ms against 0.2% of a 1 ms step: 200 steps; the time bound allows 0.5 s: 500 steps
    assert agreement.proposal(0.001) in (200, 201)        # (ceil of a float quotient)
    assert agreement.proposal(2.0) == 1                                   # a long step: every step
    slow = Agreement(0, 2, lambda values: values)
    slow.costs.extend([0.01] * 3)           # a slow collective: the budget's 5,000 steps, the time bound's 500
    assert slow.proposal(0.001) == int(AGREE_SECONDS / 0.001)
    assert agreement.agree(10, False, 0.001) is False
    assert (agreement.every, agreement.next_at) == (7, 17)


def test_an_agreement_names_a_rank_outside_its_group():
    with pytest.raises(ValueError):
        Agreement(2, 2, lambda values: values)


def _loss(value):
    class Loss:
        size = 1

        def item(self):
            return value
    return Loss()


def test_a_rank_with_a_nan_loss_stops_with_the_others_not_alone(tmp_path):
    """The capture of two ranks (stand-in tensors, the agreement's sum across threads): rank 1's loss is NaN at
    step 30 and rank 0's never is. Both stop before the same step (before this, rank 1 stopped at the end of step
    30 alone and rank 0 failed in its next all-reduce); each rank's watch_tensors.json says where and why."""
    from msoverflow.watcher.capture import META, Watch
    group = SumGroup(2)
    outcome = {}

    def rank_loop(rank):
        watch = Watch({"out_dir": str(tmp_path), "stop_on_nonfinite": True})
        watch.rank = rank
        watch.rank_dir = str(tmp_path / f"rank_{rank}" / "Net" / "0")
        (tmp_path / f"rank_{rank}" / "Net" / "0").mkdir(parents=True)
        watch.params, watch.root_class, watch.optimizer_class = [], "Step", "SGD"
        watch.agreement = Agreement(rank, 2, group.of_rank(rank))
        try:
            for step in range(3000):        # steps of 1 ms or more: the agreed steps are at most 500 apart
                watch.control()
                time.sleep(0.001)
                value = float("nan") if rank == 1 and step == 30 else 1.0 + 0.01 * (step % 5)
                watch.after_step((), _loss(value))
            outcome[rank] = ("ran on", watch.step)
        except SystemExit:
            outcome[rank] = ("stopped", watch.step)
        except threading.BrokenBarrierError:
            outcome[rank] = ("left waiting", watch.step)

    threads = [threading.Thread(target=rank_loop, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert outcome[0] == outcome[1] and outcome[0][0] == "stopped" and outcome[0][1] > 30, outcome
    for rank in (0, 1):
        sampling = json.loads((tmp_path / f"rank_{rank}" / META).read_text())["sampling"]
        assert sampling["stopped"]["before_step"] == outcome[0][1] and sampling["stopped"]["agreed"], sampling
        assert sampling["agreement"]["ranks"] == 2
    reasons = {json.loads((tmp_path / f"rank_{r}" / META).read_text())["sampling"]["stopped"]["why"] for r in (0, 1)}
    assert reasons == {"a non-finite value at step 30", "another rank wanted to stop"}, reasons


def test_one_process_stops_before_its_next_step_and_a_stop_asked_before_the_run_holds(tmp_path):
    from msoverflow.watcher.capture import Watch
    from msoverflow.watcher.session import _ask
    for asked, expect in (({"stop": "a spike"}, 3), ({"stop_at": 5}, 5)):
        out = tmp_path / str(expect)
        (out / "rank_0" / "Net" / "0").mkdir(parents=True)
        watch = Watch({"out_dir": str(out)})
        watch.rank_dir = str(out / "rank_0" / "Net" / "0")
        watch.params, watch.root_class, watch.optimizer_class = [], "Step", "SGD"
        with pytest.raises(SystemExit):
            for step in range(20):
                if step == 3 or (step == 0 and "stop_at" in asked):
                    _ask(str(out), asked)
                watch.control()
                watch.after_step((), _loss(1.0))
        assert watch.stopped["before_step"] == expect and not watch.stopped["agreed"], watch.stopped
