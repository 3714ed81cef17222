"""Data-parallel replicas as evidence of a device fault (msoverflow/cause/replicas.py), on the real 4-rank
msrun dump (tests/support/gen_real_dumps.py dp4_two_origins); the copies edited here say so."""
import shutil

import numpy as np
import pytest

from msoverflow.analysis import analyze
from msoverflow.cause.replicas import compare, dp_group
from msoverflow.evaluate import TensorAccess
from msoverflow.parallel_layout import parse_spec
from msoverflow.rules.knowledge import knowledge
from msoverflow.walk import read_unit, units


def test_dp_group_is_the_ranks_sharing_tp_and_pp():
    coords = {r: {"dp": (r % 4) // 2, "tp": r % 2, "pp": r // 4} for r in range(8)}
    assert dp_group(1, coords) == [1, 3]
    assert dp_group(4, coords) == [4, 6]
    assert dp_group(0, {0: {"pp": 0}, 1: {"pp": 0}}) == []     # stages inferred, no dp/tp: nothing to compare


def _edit_updated_weight(dump, rank):
    """In a copy of a real dump: one value of the weight SGD-op0 writes on `rank` at step 0 turned into NaN by
    flipping two exponent bits, in every file of that step holding the updated weight (SGD's output and written
    input, the Parameter file), as silent data corruption in the update would leave it."""
    step = dump / f"rank_{rank}" / "Net" / "0" / "0"
    original = np.load(next(step.glob("SGD.*SGD-op0.*.output.0.*.npy")))
    bits = original.reshape(-1).view(np.uint32)
    index = int(np.flatnonzero([8 - bin(int(b >> 23) & 0xFF).count("1") <= 2 for b in bits])[0])
    edited = []
    for path in step.glob("*.npy"):
        values = np.load(path)
        if values.shape == original.shape and values.dtype == original.dtype and np.array_equal(values, original):
            values.reshape(-1).view(np.uint32)[index] |= np.uint32(0x7F800000)
            np.save(path, values)
            edited.append(path.name.split(".")[0])
    return sorted(edited)


@pytest.mark.mindspore
def test_the_rank_whose_update_differs_from_its_replicas_is_the_suspect_device(multirank_dumps, tmp_path):
    dump = tmp_path / "dump"
    shutil.copytree(multirank_dumps["dp4_two_origins"], dump)
    assert _edit_updated_weight(dump, 2) == ["Parameter", "SGD", "SGD"]
    without = analyze(str(dump), progress=False)
    assert (without.first.rank, without.first.iteration, without.first.op_type) == (2, 0, "SGD")
    assert without.first.cause.cause == "unknown"              # the weights SGD overwrote are not in the dump
    assert any("--parallel" in e for e in without.first.cause.evidence)
    report = analyze(str(dump), progress=False, parallel=parse_spec("dp=4"))
    cause = report.first.cause
    assert cause.cause == "device" and "rank 2's SGD" in cause.reason and "ranks 0, 1, 3, which agree" in cause.reason
    assert any("rank 2 is the suspect device" in e for e in cause.evidence)
    assert cause.pattern == "bit flip"


@pytest.mark.mindspore
def test_replicas_that_hold_the_same_bad_gradient_agree(multirank_dumps):
    """Rank 1's empty loss mask at step 1 reaches every rank through the AllReduce: the replicas agree, so the
    value was made before the AllReduce, not by one device after it."""
    dump = multirank_dumps["dp4_two_origins"]
    step = {u.rank: u for u in units(str(dump), steps=[1])}
    runs = {r: read_unit(u).executions for r, u in step.items()}
    reduces = sorted({ex.op_name for ex in runs[1] if ex.op_type == "AllReduce"})
    check = compare(1, [0, 1, 2, 3], runs.__getitem__, TensorAccess(lambda message: None), knowledge(),
                    only=reduces)
    assert check.compared == len(reduces) >= 3 and check.differences == [] and not check.suspect
    assert "agree on all" in check.text
