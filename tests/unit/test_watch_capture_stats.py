"""The capture's statistics of one tensor (msoverflow/watcher/capture.py _stats_row) against their plain definition
in float64: the fast route (sums in the array's own precision, |x| skipped when max and min share a sign) must give
the same numbers, to float32's rounding, for every dtype and value range a watch meets."""
import math
import warnings

import numpy as np
import pytest

from msoverflow.watcher.capture import _stats_row

F32_MAX = float(np.finfo(np.float32).max)


def _reference(array):
    a = np.asarray(array)
    values = a.astype(np.float64).reshape(-1)
    finite = values[np.isfinite(values)]
    counts = (int(a.size), int(np.isnan(values).sum()), int(np.isneginf(values).sum()),
              int(np.isposinf(values).sum()))
    if finite.size == 0:
        return (None, None, None) + counts + (None, None)
    return ((float(finite.max()), float(finite.min()), float(finite.mean())) + counts
            + (None, float(np.abs(finite).mean())))


def _arrays(seed):
    rs = np.random.RandomState(seed)
    n = int(rs.choice([1, 2, 7, 129, 4096, 70001]))
    shape = (n,) if rs.rand() < 0.5 or n < 4 else (n // 2, 2) if n % 2 == 0 else (n,)
    kind = rs.randint(9)
    if kind == 0:        # a weight: both signs
        a = rs.normal(0, 10 ** rs.uniform(-4, 2), shape)
    elif kind == 1:      # one sign (a second moment, |x|)
        a = np.abs(rs.normal(0, 1, shape)) * 10 ** rs.uniform(-6, 3)
    elif kind == 2:      # all negative
        a = -np.abs(rs.normal(0, 1, shape)) - 1e-3
    elif kind == 3:      # near float32's limit: the sum overflows float32, the values do not
        a = rs.uniform(0.5, 1.0, shape) * F32_MAX * rs.choice([1, -1])
    elif kind == 4:      # a constant (a loss scale, an optimizer's step)
        a = np.full(shape, rs.normal() * 1e3)
    elif kind == 5:      # a mean far smaller than the values (cancellation)
        a = rs.normal(0, 1, shape)
        a = a - a.mean()
    else:
        a = rs.normal(1, 5, shape)
    dtype = [np.float16, np.float32, np.float64][rs.randint(3)] if kind != 3 else np.float32
    a = np.asarray(a).astype(dtype)
    if rs.rand() < 0.3:         # NaN and inf among the values
        flat = a.reshape(-1)
        for bad in (np.nan, np.inf, -np.inf):
            if rs.rand() < 0.6:
                flat[rs.randint(flat.size, size=rs.randint(1, 4))] = bad
    if rs.rand() < 0.1:         # every value bad
        a = np.full(shape, [np.nan, np.inf][rs.randint(2)], dtype=a.dtype)
    return a


@pytest.mark.parametrize("seed", range(400))
def test_the_fast_statistics_are_the_plain_ones(seed):
    array = _arrays(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # nothing printed into the user's training
        got = _stats_row(array)
    want = _reference(array.astype(np.float32) if array.dtype == np.float16 else array)
    assert got[3:7] == want[3:7]                 # count, NaN, -inf, +inf: exact
    for index in (0, 1):                         # max, min: exact
        assert got[index] == want[index]
    if want[0] is None:
        assert got[2] is None and got[8] is None
        return
    scale = want[8]                              # mean |x|: the rounding of a sum is relative to it
    assert math.isfinite(got[2]) and math.isfinite(got[8])
    assert got[8] == pytest.approx(want[8], rel=1e-5, abs=1e-300)
    assert abs(got[2] - want[2]) <= 1e-5 * scale + 1e-300


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.bool_])
def test_whole_numbers_and_bools_are_counted_in_float64(dtype):
    values = np.array([0, 1, 1, 0, 1] if dtype == np.bool_ else [3, 2, 7, 100, 0], dtype)
    if np.dtype(dtype).kind == "i":
        values = values - 50
    assert _stats_row(values)[:3] == _reference(values)[:3]
    assert _stats_row(values)[8] == pytest.approx(_reference(values)[8])


def test_an_empty_tensor_has_no_statistics():
    assert _stats_row(np.zeros((0, 3), np.float32)) == (None, None, None, 0, 0, 0, 0, None, None)
