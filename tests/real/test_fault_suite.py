"""The fault suite's CI subset (benchmarks/faults): real MindSpore CPU runs with one planted fault each (and clean
controls), analyzed by `msoverflow analyze --format json`, scored per fault class against the planted ground truth.
A class fails under 95% origin right or 85% cause right; a clean control fails on any anomaly or inconclusive.

The classes that main's analysis does not yet get right are strict xfails that name what the report says, so the
test turns red the moment a fix lands and the mark must go (the lead re-scores after merging the analysis fixes).
"""
import sys

import pytest

from benchmarks.faults import suite

pytestmark = pytest.mark.mindspore

ORIGIN_BAR, CAUSE_BAR = 95.0, 85.0

# What main's analysis (4a531e2) says on these classes; each is owned by another branch this session.
NOT_YET = {
    "masked_row": "issue 32 item 3 (upstream): the report names MaskedFill (the -inf fill), cause unknown, instead "
                  "of the Sub/Softmax that makes NaN from an all -inf row, cause domain",
    "bitflip": "the Gather that reads the flipped weight is the origin, but the cause is unknown ('the op that made "
               "the value (Load) is not in the dump'): nothing compares the weight read with what SGD wrote the step "
               "before, so no device verdict",
    "stomp": "garbage bytes that stay finite (up to ~1e36) are not flagged where they enter (Gather); the origin is "
             "the LayerNorm/Square downstream that overflows, cause domain",
    "recv": "the Select after the AllReduce on rank 1 is the origin, but the cause is unknown (its input is a "
            "Parameter load that is not dumped); the replicas (rank 0's same tensor finite) are not used for device",
}


@pytest.fixture(scope="session")
def fault_scores():
    cases = suite.select(suite.CI_SUBSET)
    records = suite.ensure_runs(cases, progress=lambda msg: print(f"[fault suite] {msg}", file=sys.__stderr__,
                                                                  flush=True))
    failed = [name for name, record in records.items() if not record.get("ok")]
    assert not failed, f"real runs failed: {failed} (see run.log under {suite.default_out_dir()})"
    rows = suite.score(records)
    return {line["class"]: line for line in suite.table(rows)}, rows


def _params():
    for fault in suite.CLASSES:
        if fault == "clean":
            continue
        marks = [pytest.mark.xfail(strict=True, reason=NOT_YET[fault])] if fault in NOT_YET else []
        yield pytest.param(fault, marks=marks, id=fault)


@pytest.mark.parametrize("fault", list(_params()))
def test_fault_class_scores(fault_scores, fault):
    lines, rows = fault_scores
    line = lines[fault]
    said = [row["said"] for row in rows if row["fault"] == fault]
    assert line["cases"] >= 1
    assert line["origin"] >= ORIGIN_BAR and line["cause"] >= CAUSE_BAR, (line, said)


def test_clean_controls_raise_no_alarm(fault_scores):
    lines, rows = fault_scores
    alarms = [(row["name"], row["said"]) for row in rows if row["fault"] == "clean" and row["false_alarm"]]
    assert lines["clean"]["cases"] >= 3
    assert not alarms
