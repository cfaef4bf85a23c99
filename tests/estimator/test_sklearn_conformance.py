"""scikit-learn's own estimator checks, all of them, plus the output API.

One check is expected to fail: ``check_dtype_object`` wants an object array of numbers
fitted as numbers, which the estimator refuses by its dtype (tests/io/test_object_dtype.py:
converting objects one by one raises for some values, ``10**400``, and not for others, so
whether a fit runs would depend on the data).  NaN/inf input is accepted by design (a
non-finite record contributes 0 and still counts in n: docs/robustness.md), declared with the
``allow_nan`` tag, so scikit-learn skips its "must reject NaN" check rather than
failing it.  The checks fit with ``random_state`` set (scikit-learn's set_random_state):
seeded, NOT private noise, for testing only.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

import dask_dppca as dd
from dask_dppca.privacy.mechanisms.noise import NonPrivateRandomStateWarning

pytestmark = pytest.mark.filterwarnings(
    "ignore::dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning"
)


#: Checks expected to fail, and why.
EXPECTED_FAILURES = {
    "check_dtype_object": "object arrays are refused by their dtype (a data-independent refusal)"
}


@parametrize_with_checks(
    [dd.DPPCA(scheduler="threads"), dd.DPPCA()],
    expected_failed_checks=lambda est: EXPECTED_FAILURES,
)
def test_scikit_learn_check(estimator, check):
    check(estimator)


def test_the_expected_failure_is_the_object_refusal():
    """The one expected failure fails for the documented reason, not another."""
    from sklearn.utils.estimator_checks import check_dtype_object

    with pytest.raises(ValueError, match="^X: an array of dtype object is refused"):
        check_dtype_object("DPPCA", dd.DPPCA(scheduler="threads"))


def _frame(n=300, d=4):
    x = np.random.default_rng(1).standard_t(2, size=(n, d))  # test data only
    return pd.DataFrame(x, columns=[f"f{i}" for i in range(d)])


def _fit(x, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateRandomStateWarning)
        return dd.DPPCA(2, scheduler="threads", random_state=0, **params).fit(x)


def test_feature_names_in_and_out():
    frame = _frame()
    est = _fit(frame)
    assert list(est.feature_names_in_) == list(frame.columns)
    assert list(est.get_feature_names_out()) == ["dppca0", "dppca1"]
    pipe = Pipeline([("scale", StandardScaler()), ("pca", dd.DPPCA(2, scheduler="threads"))]).fit(
        frame
    )
    assert list(pipe.get_feature_names_out()) == ["dppca0", "dppca1"]


def test_reordered_columns_are_refused():
    frame = _frame()
    est = _fit(frame)
    with pytest.raises(ValueError, match="feature names"):
        est.transform(frame[frame.columns[::-1]])


def test_set_output_pandas_and_polars():
    frame = _frame()
    est = _fit(frame).set_output(transform="pandas")
    scores = est.transform(frame)
    assert isinstance(scores, pd.DataFrame) and list(scores.columns) == ["dppca0", "dppca1"]
    assert np.array_equal(scores.to_numpy(), frame.to_numpy() @ est.components_.T)
    import polars

    scores = _fit(frame).set_output(transform="polars").transform(frame)
    assert isinstance(scores, polars.DataFrame) and scores.columns == ["dppca0", "dppca1"]


def test_the_spatial_sign_is_a_plain_parameter_and_transform_a_plain_method():
    est = dd.DPPCA(spatial_sign="winsor", radius=2.0)
    assert est.get_params()["spatial_sign"] == "winsor"
    assert "transform" not in est.get_params()
    assert callable(est.transform) and "transform" not in vars(est)
