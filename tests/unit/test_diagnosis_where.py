"""Where bad values sit in a tensor, and the pattern they form (msoverflow/cause/where.py)."""
import numpy as np
import pytest

from msoverflow.cause import where


def _mask(shape, *positions):
    mask = np.zeros(shape, dtype=bool)
    for p in positions:
        mask[p] = True
    return mask


def test_a_whole_batch_row():
    mask = np.zeros((4, 10, 3), dtype=bool)
    mask[1] = True
    assert where.place(mask).text == "batch row 1 entirely (30 of 120 values)"
    mask[1, 0, 0] = False
    assert where.place(mask).text == "all 29 in batch row 1 (of 120 values)"


def test_concentrated_in_positions_and_channels():
    mask = np.zeros((2, 16, 8), dtype=bool)
    mask[:, 3:5, :] = True                                   # sequence positions 3-4 of both rows
    assert where.place(mask).text == "sequence positions 3-4 entirely (32 of 256 values)"
    mask = np.zeros((2, 16, 8), dtype=bool)
    mask[0, 2:9, 7] = True
    assert where.place(mask).text == "all 7 in batch row 0, sequence positions 2-8, channel 7 (of 256 values)"


def test_few_values_are_named_one_by_one_and_many_are_spread():
    assert where.place(_mask((4, 8), (0, 0), (1, 2))).text == "2 of 32 values, at row 0, column 0; row 1, column 2"
    rs = np.random.RandomState(0)
    mask = rs.rand(32, 16) < 0.2
    text = where.place(mask).text
    assert text.startswith(f"spread across the tensor: {mask.sum()} of 512 values, in ")
    assert where.place(np.ones(8, dtype=bool)).text == "all 8 values"
    assert where.place(np.array(True)).text == "the only value"


def test_spans():
    assert where.spans([4, 5, 6, 9]) == "4-6 and 9"
    assert where.spans([1, 3, 5]) == "1, 3 and 5"


def test_aligned_blocks_and_whole_rows_are_a_stomp():
    mask = np.zeros(4 * where.BLOCK, dtype=bool)
    mask[where.BLOCK: 3 * where.BLOCK] = True
    assert where.stomp(mask).startswith("1 aligned block(s)")
    mask[where.BLOCK] = False                                  # no longer aligned
    assert where.stomp(mask) == ""
    rows = np.zeros((6, 5), dtype=bool)
    rows[[1, 4]] = True
    assert where.stomp(rows) == "2 whole row(s) of 5 values"
    rows[1, 0] = False
    assert where.stomp(rows) == ""


def test_exponent_flips_find_the_bits_a_flip_changed():
    value = np.float32(0.1156)
    bits = value.view(np.uint32)
    nan = (bits | np.uint32(0x7F800000)).view(np.float32)    # 0.1156 has exponent 0b01111011: two bits to set
    assert np.isnan(nan)
    assert where.exponent_flips(nan, 0.1156, scale=1.0) == 2
    assert where.exponent_flips(nan, None, scale=1.0) is not None      # without a recompute: some plausible value
    one = (np.float32(1.5).view(np.uint32) ^ np.uint32(1 << 30)).view(np.float32)
    assert np.isnan(one) and where.exponent_flips(one, 1.5, scale=2.0) == 1
    assert where.exponent_flips(np.float32(np.nan), 0.5, scale=1.0) is None   # the default NaN is far from 0.5
    # without a recompute, the inf an overflow writes and the NaN an invalid op writes say nothing of a flip
    assert where.exponent_flips(np.float32(np.inf), None, scale=4.0) is None
    assert where.exponent_flips(np.float32(np.nan), None, scale=4.0) is None
    assert where.exponent_flips(np.float16(np.inf), None, scale=4.0) is None


def test_bit_flip_needs_few_isolated_values():
    values = np.linspace(0.1, 0.9, 16).astype(np.float32)
    reference = values.astype(np.float64)
    flipped = values.copy()
    flipped.view(np.uint32)[5] |= np.uint32(0x7F800000)
    mask = np.isnan(flipped)
    text = where.bit_flip(flipped, mask, reference)
    assert text.startswith("NaN in 1 of 16 values, isolated, 2 exponent bits from the recomputed 0.366667")
    adjacent = flipped.copy()
    adjacent.view(np.uint32)[6] |= np.uint32(0x7F800000)
    assert where.bit_flip(adjacent, np.isnan(adjacent), reference) == ""   # neighbours: not isolated
    overflowed = np.full(16, 0.3, np.float32)
    overflowed[3] = np.inf            # inf has no mantissa left, 0.3 has one: no exponent flip turns one to the other
    assert where.bit_flip(overflowed, np.isinf(overflowed), np.full(16, 0.3)) == ""
    overflowed = np.full(16, 0.5, np.float32)      # 0.5 has none: inf is 0.5 with two exponent bits flipped
    overflowed[3] = np.inf
    assert "2 exponent bits from the recomputed 0.5" in where.bit_flip(overflowed, np.isinf(overflowed),
                                                                        np.full(16, 0.5))


def test_describe_names_a_bit_flip_only_when_the_recompute_does_not_make_the_value():
    values = np.linspace(0.1, 0.9, 16).astype(np.float32)
    values.view(np.uint32)[5] |= np.uint32(0x7F800000)
    mask = np.isnan(values)
    reference = np.linspace(0.1, 0.9, 16)
    assert where.describe(values, mask, reference=reference, reproduced=False).pattern == where.BIT_FLIP
    assert where.describe(values, mask, reference=reference, reproduced=True).pattern == ""


def test_values_past_the_limit_in_a_wide_recompute_are_an_overflow():
    values = np.array([1.0, 7e4, 2.0], np.float32)
    mask = values > 65504
    placement = where.describe(values, mask, reference=np.array([1.0, 7e4, 2.0]), limit=65504.0, reproduced=True)
    assert placement.pattern == where.OVERFLOW and "a real overflow" in placement.pattern_text


@pytest.mark.parametrize("ndim,names", [(1, ["position"]), (2, ["row", "column"]),
                                        (3, ["batch row", "sequence position", "channel"])])
def test_axis_names(ndim, names):
    assert where.axis_names(ndim) == names


def test_whole_rows_are_a_stomp_only_when_the_recompute_does_not_make_them():
    values = np.ones((6, 5), np.float32)
    values[[1, 4]] = np.nan
    mask = np.isnan(values)
    confirmed = where.describe(values, mask, reference=np.ones((6, 5)), reproduced=False)
    assert confirmed.pattern == where.MEMORY_STOMP
    unconfirmed = where.describe(values, mask, reproduced=None)
    assert unconfirmed.pattern == "" and "a recompute would tell" in unconfirmed.pattern_text
