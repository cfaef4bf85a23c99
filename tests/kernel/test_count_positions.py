"""The quantile counts held sparse (``at_most_positions``) are ``count_at_most``'s, value
for value, on hostile values, added over any split of the rows, and a counting task
holds at most its rows times its columns (``ExactPositions``)."""

from __future__ import annotations

import pickle

import dask
import dask.array as da
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dask_dppca.graph.score_stats import ExactPositions, quantile_counts_graph
from dask_dppca.kernel.score_stats import (
    at_most_positions,
    count_at_most,
    counts_from_positions,
    merge_positions,
)
from dask_dppca.privacy.mechanisms.quantile import quantile_candidates

pytestmark = pytest.mark.timeout(120)

#: Values a column can hold: NaN, both infinities, both zeros, subnormals, the extremes,
#: and ordinary ones.
HOSTILE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True),
    st.sampled_from([0.0, -0.0, 5e-324, -5e-324, 1.7976931348623157e308, 1.0, -1.0]),
)


@settings(max_examples=40, deadline=None)
@given(
    values=arrays(np.float64, st.tuples(st.integers(0, 40), st.integers(1, 3)), elements=HOSTILE),
    cuts=st.lists(st.integers(0, 40), max_size=4),
    signed=st.booleans(),
)
def test_the_sparse_counts_are_the_dense_counts_over_any_split(values, cuts, signed):
    grid = quantile_candidates(signed, 2)
    with np.errstate(all="ignore"):
        dense = count_at_most(values, grid)
        bounds = sorted({0, len(values), *(min(c, len(values)) for c in cuts)})
        parts = [at_most_positions(values[a:b], grid) for a, b in zip(bounds[:-1], bounds[1:])]
    keys = np.concatenate([k for k, _ in parts]) if parts else np.zeros(0, np.int64)
    weights = np.concatenate([w for _, w in parts]) if parts else np.zeros(0, np.int64)
    merged = merge_positions(keys, weights)
    counts = counts_from_positions(*merged, values.shape[1], grid.size)
    assert counts.dtype == np.int64 and np.array_equal(counts, dense)
    with np.errstate(all="ignore"):
        whole = at_most_positions(values, grid)  # no rows at all, too
    assert np.array_equal(counts_from_positions(*whole, values.shape[1], grid.size), dense)
    assert merged[0].size <= values.size  # at most a key a value, whatever the grid
    assert np.all(np.diff(merged[0]) > 0)  # distinct and sorted


def test_a_value_above_every_candidate_counts_at_none():
    """A grid without +inf (any increasing one): a value above it is counted nowhere, and
    never at the next column's first candidate."""
    grid = np.array([-1.0, 0.0, 1.0])
    values = np.array([[5.0, -5.0], [0.5, np.nan]])
    counts = counts_from_positions(*at_most_positions(values, grid), 2, 3)
    assert np.array_equal(counts, count_at_most(values, grid))
    assert counts.tolist() == [[0, 0, 1], [1, 1, 1]]
    for nowhere in (np.full((3, 2), 9.0), np.zeros((0, 2))):  # no key at all
        keys, weights = at_most_positions(nowhere, grid)
        assert keys.size == weights.size == 0
        assert counts_from_positions(keys, weights, 2, 3).tolist() == [[0] * 3] * 2


def test_the_graph_holds_positions_and_releases_the_counts():
    """``quantile_counts_graph`` over blocks of a dask array: its value is an
    ``ExactPositions`` no larger than the rows times the columns (the dense counts would
    be 8 bytes a column and candidate), whose counts are ``count_at_most``'s; it pickles
    whole here (no worker process: unsealed)."""
    rng = np.random.default_rng(3)  # test data
    x = rng.standard_normal((5000, 3)) * [1e-3, 1.0, 1e6]
    x[:5] = [[np.nan, np.inf, -np.inf], [0.0, -0.0, 1e308], [5e-324, 1, 2], [1, 1, 1], [1, 1, 1]]
    grid = quantile_candidates(True)
    (total,) = dask.compute(
        quantile_counts_graph(da.from_array(x, chunks=(700, 3)), grid), scheduler="synchronous"
    )
    assert isinstance(total, ExactPositions) and total.shape == (3, grid.size)
    assert total.keys.size <= x.size < grid.size
    assert np.array_equal(total.counts, count_at_most(x, grid))
    again = pickle.loads(pickle.dumps(total))
    assert np.array_equal(again.counts, total.counts)
