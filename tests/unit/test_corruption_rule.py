"""rules/corruption.py: a weight as a step read it against the same weight as the step before left it. A block of
a few values turned absurd (a stomp's random bytes) is `corrupted`; a weight scaled as a whole (set_data) is `set`,
never corrupted; a change within the weight's range, or of the whole tensor, is neither."""
import numpy as np

from msoverflow.rules.corruption import CHUNK, CORRUPTED, OTHER, SET, judge_change, stands_out


def _weight(seed=0):
    return np.random.RandomState(seed).normal(0, 0.5, (16, 16)).astype(np.float32)


def _stomped(stored, start, seed=1):
    read = stored.copy()
    read.reshape(-1).view(np.uint8)[start * 4:start * 4 + 64] = np.random.RandomState(seed).randint(0, 256, 64)
    return read


def test_an_aligned_block_of_random_bytes_is_corrupted():
    stored = _weight()
    judged = 0
    for seed in range(1, 40):
        read = _stomped(stored, 64, seed)
        if not np.isfinite(read).all() or np.abs(read).max() < 1e6 * np.abs(stored).max():
            continue        # no absurd value in the block: the stomp is not told by magnitude
        change = judge_change(read, stored)
        assert change is not None and change.verdict == CORRUPTED, change
        assert change.changed == 16 and "at element 64 (byte offset 256, 64-byte aligned)" in change.block
        assert "decades" in change.text
        judged += 1
    assert judged >= 10


def test_a_weight_scaled_as_a_whole_is_set_not_corrupted():
    stored = _weight()
    for factor in (150.0, 1e30):
        change = judge_change((stored * np.float32(factor)).astype(np.float32), stored)
        assert change is not None and change.verdict == SET, change
        assert "set_data" in change.text


def test_a_weight_replaced_as_a_whole_or_nudged_is_not_corrupted():
    stored = _weight()
    assert judge_change(_weight(seed=5) * np.float32(1e36), stored).verdict == OTHER    # reloaded, every value
    nudged = stored.copy()
    nudged[4, :] += np.float32(0.25)                                                    # one row, in range
    assert judge_change(nudged, stored).verdict == OTHER


def test_an_unchanged_weight_has_no_change():
    stored = _weight()
    assert judge_change(stored.copy(), stored) is None
    assert judge_change(stored[:8], stored) is None          # not comparable


def test_a_weight_larger_than_one_chunk_is_judged_whole():
    """Compared in chunks (memory bounded): a block past the first chunk, and a factor over every chunk."""
    stored = np.random.RandomState(3).normal(0, 0.02, 3 * CHUNK + 100).astype(np.float32)
    read = stored.copy()
    read[2 * CHUNK + 32:2 * CHUNK + 48] = np.float32(3e35) * np.arange(1, 17, dtype=np.float32)
    change = judge_change(read, stored)
    assert change is not None and change.verdict == CORRUPTED
    assert f"at element {2 * CHUNK + 32} (byte offset {(2 * CHUNK + 32) * 4}, 64-byte aligned)" in change.block
    assert judge_change(stored * np.float32(4), stored).verdict == SET


def test_a_few_absurd_values_stand_out_and_scaled_or_grown_ones_do_not():
    """The gate before any step is read again: the origin's input holds a few values absurd beside its others."""
    embeddings = _weight().reshape(-1)[:192].copy()
    assert not stands_out(embeddings)
    assert not stands_out(embeddings * np.float32(1e30))                  # scaled together
    outlier = embeddings.copy()
    outlier[7] = np.float32(3e4)                                          # a large activation, not absurd
    assert not stands_out(outlier)
    carried = embeddings.copy()
    carried[64:80] = _stomped(_weight(), 64).reshape(-1)[64:80]
    carried[64] = np.float32(2e36)
    assert stands_out(carried)
