"""The analysis as a chain of stages, and the API around it (architecture-review.md appendices A and C, issue 28
C1, C6, E1, D5): one Selection carried unexpanded from the API and the CLI to the plan of both analyze and
compare; `events()` with the one definition of a bad value; `.step` on every public type (`.iteration` a
read-only alias); arguments checked before anything is read; stage timings on the `msoverflow` logger.
Dumps are SYNTHETIC MindSpore-layout npy dumps (tests/support/synth_dump.py)."""
import logging
import tracemalloc

import numpy as np
import pytest

import msoverflow
from msoverflow import layout
from msoverflow.model import Arrival, Finding, RankStatus, StepCompleteness
from msoverflow.selection import format_ids, parse
from tests.support.synth_dump import SynthDump, same_run_pair

ONES = np.ones(4, np.float32)


def test_compare_takes_ranks_in_the_grammar_like_analyze(tmp_path):
    """Appendix A: msoverflow.compare(a, b, ranks="0-3") failed with `--ranks ['-', '0', '3']`; "10" is rank 10."""
    a, b = same_run_pair(str(tmp_path), ranks=(0, 10))
    assert msoverflow.analyze(a, ranks="0-3").verdict == "clean"
    assert msoverflow.compare(a, b, ranks="0-3").units == [(0, 0)]
    assert msoverflow.compare(a, b, ranks="10").units == [(10, 0)]
    assert msoverflow.compare(a, b, ranks=range(0, 2**31 - 1)).units == [(0, 0), (10, 0)]


def test_events_carry_the_one_definition_of_bad_and_find_the_fp16_overflow(tmp_path):
    """Appendix C: fp32 bytes under an fp16 name hold 1e5, beyond fp16's range: no inf or NaN, yet bad."""
    SynthDump(str(tmp_path), rank=0).op(0, "Mul", "Default_network-Net_Mul-op1", [np.ones(2, np.float32)],
                                        [np.array([1e5, 1.0], np.float32)], declared="float16")
    report = msoverflow.analyze(str(tmp_path))
    assert (report.verdict, report.first.op_type, report.first.kind) == ("anomaly", "Mul", "overflow")
    for events in (report.events(), msoverflow.events(report), msoverflow.events(str(tmp_path), steps="0")):
        assert len(events[(events.nan > 0) | (events.posinf > 0) | (events.neginf > 0)]) == 0   # non-finite only
        bad = events[events.bad]
        assert list(zip(bad.op_type, bad.io, bad.over_range, strict=True)) == [("Mul", "output", 1)]
        assert events.bad.dtype == "boolean"


def test_an_integer_tensor_is_never_bad_and_an_unreadable_one_is_unknown(tmp_path):
    d = SynthDump(str(tmp_path), rank=0)
    d.op(0, "ArgMax", "Default_ArgMax-op1", [ONES], [np.array([1, 2], np.int32)])
    cut = d.tensor(0, "Exp", "Default_Exp-op2", "output", 0, ONES)
    with open(cut, "r+b") as fh:
        fh.truncate(20)
    events = msoverflow.events(str(tmp_path))
    assert dict(zip(events.op_type + "." + events.io, map(str, events.bad), strict=True)) == {
        "ArgMax.input": "False", "ArgMax.output": "False", "Exp.output": "<NA>"}
    assert len(events[events.bad]) == 0


def test_step_everywhere_and_iteration_a_read_only_alias(tmp_path):
    SynthDump(str(tmp_path), rank=0).op(1, "Exp", "Default_Exp-op1", [ONES], [np.array([np.inf, 1], np.float32)])
    report = msoverflow.analyze(str(tmp_path))
    assert report.first.step == report.first.iteration == 1 and report.steps == report.iterations == {0: [1]}
    assert report.rank_status[0].step == 1 and report.to_dict()["first"]["iteration"] == 1   # the JSON schema 1
    for obj in (report.first, report.rank_status[0], Arrival(0, 2, "AllReduce", "x"),
                StepCompleteness(0, 3, False, 1, 2)):
        assert obj.iteration == obj.step
        with pytest.raises(AttributeError):
            obj.iteration = 7
    with pytest.raises(TypeError):
        Finding(rank=0, graph="0", iteration=1, op_type="A", op_name="a", role="origin", kind="overflow",
                detail="", timestamp=0)
    assert RankStatus(0, "clean", step=2).iteration == 2


@pytest.mark.parametrize("call, message", [
    (lambda: msoverflow.analyze(4), "path must be str or os.PathLike, not int"),
    (lambda: msoverflow.analyze(None), "path must be str or os.PathLike, not NoneType"),
    (lambda: msoverflow.analyze(b"dump"), "path must be str or os.PathLike, not bytes"),
    (lambda: msoverflow.analyze("dump", parallel=4), "parallel must be str or ParallelSpec or None, not int"),
    (lambda: msoverflow.analyze("dump", scheduler=8786), "scheduler must be str or None, not int"),
    (lambda: msoverflow.analyze("dump", jobs="2"), "jobs must be int or None, not str"),
    (lambda: msoverflow.analyze("dump", ranks=3.5), "ranks must be str, int, an iterable of ints"),
    (lambda: msoverflow.compare("a", "b", tolerance_ulps="8"), "tolerance_ulps must be a number or None, not str"),
    (lambda: msoverflow.compare("a", 7), "target must be str or os.PathLike, not int"),
    (lambda: msoverflow.events(3), "source must be str or os.PathLike or a Report, not int"),
])
def test_arguments_are_checked_before_anything_is_read(call, message, monkeypatch):
    monkeypatch.setattr(layout.Dump, "open", lambda *a, **k: pytest.fail("the dump was opened"))
    with pytest.raises(TypeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()


def test_one_formatter_of_id_lists_never_expands_a_range():
    assert format_ids([5, 0, 1, 2, 7, 8]) == "0-2,5,7,8" and format_ids([]) == ""
    assert format_ids(parse("0-2000000", "--ranks")) == "0-2000000"
    assert format_ids([0, 123456789012345678]) == "0,123456789012345678"      # an 18-digit step directory
    assert format_ids(range(0, 1000, 2), limit=3) == "0,2,4,... (500 in all)"
    tracemalloc.start()
    assert format_ids(range(0, 2**31 - 1)) == "0-2147483646"
    assert tracemalloc.get_traced_memory()[1] < 1 << 20
    tracemalloc.stop()


def test_each_stage_is_timed_on_the_msoverflow_logger(tmp_path):
    SynthDump(str(tmp_path), rank=0).op(0, "Exp", "Default_Exp-op1", [ONES], [np.array([np.inf], np.float32)])
    messages = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = logging.getLogger("msoverflow")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        msoverflow.analyze(str(tmp_path))
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    stages = [m.split()[1] for m in messages if m.startswith("timing: ")]
    assert stages == ["discover", "plan", "walk", "harmless", "decide", "settle", "explain", "ranks", "diagnose", "history",
                      "assemble", "judge"]
