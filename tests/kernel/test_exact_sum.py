"""ExactSum: the exact, order-free sum behind the graph's reduction.

Oracle: the exact sum in Fractions, entry by entry, correctly rounded to float
(``float(Fraction)``; inf beyond the float range).
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dask_dppca.kernel.exact_sum import ExactSum

HYP = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
FLOATS = st.floats(allow_nan=False, allow_infinity=False, width=64)
# Arrays of 2 x 3 entries; each a list of such arrays, as the graph's tasks give them.
ARRAYS = st.lists(st.lists(FLOATS, min_size=6, max_size=6), min_size=1, max_size=12).map(
    lambda rows: [np.array(r).reshape(2, 3) for r in rows]
)


def _added(arrays, order=None):
    total = ExactSum((2, 3))
    for index in range(len(arrays)) if order is None else order:
        total = total.plus(arrays[index])
    return total


def _rounded(exact: Fraction) -> float:
    try:
        return float(exact)  # correctly rounded
    except OverflowError:
        return math.inf if exact > 0 else -math.inf


def _oracle(arrays) -> np.ndarray:
    exact = [sum((Fraction(a.reshape(-1)[i]) for a in arrays), Fraction(0)) for i in range(6)]
    return np.array([_rounded(e) for e in exact]).reshape(2, 3)


@settings(max_examples=300, **HYP)
@given(ARRAYS)
def test_the_total_is_the_correctly_rounded_sum(arrays):
    np.testing.assert_array_equal(_added(arrays).to_float(), _oracle(arrays))


@settings(max_examples=200, **HYP)
@given(ARRAYS, st.randoms(use_true_random=False), st.integers(1, 4))
def test_any_order_and_grouping_gives_the_same_bits(arrays, rnd, n_groups):
    order = list(range(len(arrays)))
    rnd.shuffle(order)
    groups = [_added(arrays, order=order[g::n_groups]) for g in range(n_groups)]
    merged = ExactSum.merge(*groups).to_float()
    in_order = _added(arrays).to_float()
    assert merged.tobytes() == in_order.tobytes()


def test_cancellation_is_exact():
    big, tiny = np.full((2, 3), 2.0**1000), np.full((2, 3), 2.0**-1074)
    total = ExactSum((2, 3)).plus(big).plus(tiny).plus(-big)
    np.testing.assert_array_equal(total.to_float(), tiny)
    # a float sum in that order loses it: the oracle would catch a float shortcut
    assert ((big + tiny) - big == 0).all()


def test_ties_round_to_even_unless_a_far_lower_bit_breaks_them():
    one, half_ulp = np.ones((2, 3)), np.full((2, 3), 2.0**-53)
    assert (ExactSum((2, 3)).plus(one).plus(half_ulp).to_float() == 1.0).all()
    broken = ExactSum((2, 3)).plus(one).plus(half_ulp).plus(np.full((2, 3), 2.0**-1000))
    assert (broken.to_float() == 1.0 + 2.0**-52).all()
    # a tie on an odd last bit rounds up, to even
    odd = np.full((2, 3), 1.0 + 2.0**-52)
    assert (ExactSum((2, 3)).plus(odd).plus(half_ulp).to_float() == 1.0 + 2.0**-51).all()


def test_many_additions_carry_without_overflow():
    """2^14 additions of the largest digit pattern: every digit carries."""
    value = np.full((2, 3), float(2**53 - 1) * 2.0**7)  # fills a digit's top bits
    total = ExactSum((2, 3))
    for _ in range(2**14):
        total = total.plus(value)
    assert (total.to_float() == value * 2**14).all()
    negative = ExactSum.merge(total, *[ExactSum((2, 3)).plus(-value * 2**13)] * 2)
    assert (negative.to_float() == 0).all()


def test_non_finite_values_are_summed_apart_and_order_free():
    inf, nan = math.inf, math.nan
    arrays = [
        np.array([[inf, 1.0, -inf], [nan, inf, 1.0]]),
        np.array([[1.0, -inf, inf], [1.0, inf, 2.0]]),
    ]
    for order in ([0, 1], [1, 0]):
        got = _added(arrays, order=order).to_float()
        assert got[0, 0] == inf and got[0, 1] == -inf and math.isnan(got[0, 2])
        assert math.isnan(got[1, 0]) and got[1, 1] == inf and got[1, 2] == 3.0


def test_plus_leaves_its_input_unchanged():
    start = ExactSum((2, 3)).plus(np.ones((2, 3)))
    before = start.to_float().copy()
    start.plus(np.full((2, 3), 5.0))
    ExactSum.merge(start, start)
    np.testing.assert_array_equal(start.to_float(), before)


def test_shapes_must_match():
    with pytest.raises(ValueError, match="values: expected shape"):
        ExactSum((2, 3)).plus(np.ones((3, 2)))
    with pytest.raises(ValueError, match="one shape"):
        ExactSum.merge(ExactSum((2, 3)), ExactSum((3, 2)))


def test_a_float_tree_would_not_be_order_free():
    """Why the graph needs this: a float sum of the same addends in another order differs."""
    rnd = random.Random(0)  # test data only
    values = [rnd.uniform(-1, 1) * 10.0 ** rnd.randint(-8, 8) for _ in range(64)]
    shuffled = sorted(values, key=lambda _: rnd.random())
    assert sum(values) != sum(shuffled)
    arrays = [np.full((2, 3), v) for v in values]
    again = [np.full((2, 3), v) for v in shuffled]
    assert _added(arrays).to_float().tobytes() == _added(again).to_float().tobytes()


# Rows of 6 entries, as the scree kernel's sub-block pairs give them (up to 40 rows: the
# row groups of of_rows nest three deep).
ROWS = st.lists(st.lists(FLOATS, min_size=6, max_size=6), min_size=0, max_size=40)


@settings(max_examples=300, **HYP)
@given(ROWS)
def test_of_rows_is_the_correctly_rounded_sum_of_the_rows(rows):
    values = np.array(rows, dtype=np.float64).reshape(-1, 6)
    got = ExactSum.of_rows(values)
    assert got.shape == (6,)
    expected = _oracle([r.reshape(2, 3) for r in values]).reshape(6) if len(values) else 0.0
    np.testing.assert_array_equal(got.to_float(), np.zeros(6) + expected)
    # and it merges as the row-by-row sum does (the same exact total)
    one_by_one = ExactSum((6,))
    for row in values:
        one_by_one = one_by_one.plus(row)
    both = ExactSum.merge(got, one_by_one).to_float()
    assert both.tobytes() == ExactSum.merge(one_by_one, one_by_one).to_float().tobytes()


def test_of_rows_carries_many_full_digits_and_cancels_exactly():
    value = float(2**53 - 1) * 2.0**7  # fills a digit's top bits: every digit carries
    rows = np.full((1000, 3), value)
    rows[:, 1] *= -1
    rows[::2, 2] = 2.0**1000
    rows[1::2, 2] = -(2.0**1000)
    rows[0, 2] += 0.0  # the +-2^1000 cancel: only the tiny entry below survives
    rows = np.vstack([rows, [[0.0, 0.0, 2.0**-1074]]])
    total = ExactSum.of_rows(rows).to_float()
    assert total[0] == value * 1000 and total[1] == -value * 1000 and total[2] == 2.0**-1074


def test_of_rows_sums_non_finite_entries_apart():
    rows = np.array([[math.inf, 1.0, math.nan], [1.0, -math.inf, 2.0], [math.inf, 3.0, 1.0]])
    got = ExactSum.of_rows(rows).to_float()
    assert got[0] == math.inf and got[1] == -math.inf and math.isnan(got[2])
    with pytest.raises(ValueError, match="2-D"):
        ExactSum.of_rows(np.ones(3))
