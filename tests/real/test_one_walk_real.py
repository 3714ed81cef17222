"""The tests of tests/unit/test_one_walk.py that read a real MindSpore dump (moved here: tests/unit holds no MindSpore run;
the helpers stay in tests/unit/test_one_walk.py)."""
import pytest

from msoverflow import walk
from msoverflow.analysis import analyze


@pytest.mark.mindspore
def test_real_mindspore_step_spans_are_every_op(real_dumps):
    """Every real MindSpore 2.10 CPU case: each scanned step's span is the first and last op time of all its op
    runs, as the registry lists them independently of the judged ones."""
    from tests.real.test_real_dumps_analyze import CASES
    for case in CASES:
        report = analyze(real_dumps[case], progress=False, scan_all=True)
        for unit in walk.units(real_dumps[case]):
            times = [ex.time for ex in walk.unit_executions(unit)]
            if times:
                assert report.step_times[unit.rank][unit.iteration] == (min(times), max(times)), case


@pytest.mark.mindspore
def test_real_four_ranks_every_arrival_and_the_later_origin(multirank_dumps):
    """The real 4-rank msrun run: rank 3 receives the bad gradient at step 1 and makes its own at step 2; both are
    facts of the Report, and each arrival is timed from that rank's own step start."""
    report = analyze(str(multirank_dumps["dp4_two_origins"]), progress=False)
    arrivals = {(a.rank, a.iteration): a for a in report.arrivals}
    assert (3, 1) in arrivals and arrivals[(3, 1)].op_type == "AllReduce"
    assert all(a.offset_us is not None and a.offset_us >= 0 for a in report.arrivals)
    rows = {row.rank: row for row in report.rank_status}
    assert (rows[3].status, rows[3].iteration) == ("origin", 2) and (rows[1].status, rows[1].iteration) == ("origin", 1)
    assert report.scanned_steps[3] == [0, 1, 2] and report.scanned_steps[1] == [0, 1]
    for rank, steps in report.scanned_steps.items():
        assert set(report.step_times[rank]) == set(steps)
