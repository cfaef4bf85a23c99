"""Object arrays: refused by their declared dtype, before any value is read.

Converting Python objects one by one fails or not depending on the values (``10**400``
overflows float64): a fit that runs on one data set and raises on its neighbour.  A
declared ``object`` dtype (numpy, a pandas column) is public and refused whatever it
holds; a plain list whose numbers numpy cannot type converts value by value, a number
beyond float64's range to +-inf (a non-finite record, docs/robustness.md).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import dask_dppca as dd
from dask_dppca.privacy.mechanisms.noise import NonPrivateRandomStateWarning


def _fit(data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateRandomStateWarning)
        return dd.DPPCA(1, scheduler="synchronous", random_state=0).fit(data)


def _numbers():
    return np.random.default_rng(3).standard_normal((40, 3))  # test data


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x.astype(object),  # plain numbers, still object
        lambda x: np.array([[10**400, 1, 2]] + x[1:].tolist(), dtype=object),
        lambda x: pd.DataFrame({"a": x[:, 0], "b": x[:, 1].astype(object), "c": x[:, 2]}),
    ],
    ids=["floats-as-objects", "huge-int", "frame-column"],
)
def test_an_object_array_is_refused_up_front_naming_x(make):
    with pytest.raises(ValueError, match=r"^X: an array of dtype object is refused"):
        _fit(make(_numbers()))
    with pytest.raises(ValueError, match=r"^X: an array of dtype object"):
        dd.kendall_matrix(make(_numbers()), scheduler="synchronous")


def test_a_list_with_a_number_beyond_float64_is_a_non_finite_record_not_an_overflow():
    x = _numbers()
    rows = x.tolist()
    rows[5][1] = 10**400
    rows[9][0] = -(10**400)
    got = _fit(rows)
    want = x.copy()
    want[5, 1], want[9, 0] = np.inf, -np.inf
    assert got.n_samples_ == 40
    assert np.array_equal(got.components_, _fit(want).components_)
