"""PrivateRobustScaler: the scale stage's release as a scikit-learn transformer.

In a ``Pipeline`` before ``DPPCA`` both fits are charged to the active budget (the
scaler's parts compose exactly to its epsilon); ``transform`` is post-processing (free,
lazy on a dask array); parameters are checked by name.  Seeds make TEST DATA and seed
the noise of these tests only (NOT private).
"""

from __future__ import annotations

import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.pipeline import make_pipeline

import dask_dppca as dd
from dask_dppca.privacy.mechanisms.accounting import compose
from dask_dppca.privacy.mechanisms.scale import LEVELS
from tests.estimator.test_analysis_scale import mixed_units

pytestmark = pytest.mark.filterwarnings(
    "ignore::dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning"
)


def test_a_pipeline_charges_the_scaler_and_the_fit_and_scales_the_directions(tmp_path):
    x = mixed_units(8000, seed=2)
    ledger = tmp_path / "l.ledger"
    dd.PrivacyBudget(10.0, 1e-5, ledger=ledger, create=True)
    scaler = dd.PrivateRobustScaler(epsilon=1.0, scheduler="threads", random_state=0)
    pipeline = make_pipeline(scaler, dd.DPPCA(2, epsilon=2.0, scheduler="threads"))
    with warnings.catch_warnings(), dd.PrivacyBudget.open(ledger):
        warnings.simplefilter("ignore")
        pipeline.fit(x)
    rows = dd.PrivacyBudget.open(ledger)._ledger.rows()
    assert [row.state for row in rows] == ["committed", "committed"]
    assert len(rows[0].parts) == len(LEVELS) * 3
    assert compose(rows[0].parts).epsilon(1e-9) <= 1.0 + 1e-9
    assert scaler.rule_ == ["q75-q25"] * 3
    assert np.allclose(scaler.centre_, np.median(x, axis=0), rtol=0.05)
    pca = pipeline[-1]
    z = (x - x.mean(axis=0)) / x.std(axis=0)
    truth = np.linalg.eigh(np.cov(z, rowvar=False))[1][:, ::-1][:, :2]
    assert dd.sin_theta(pca.components_.T, truth) < 0.3


def test_transform_is_the_released_affine_map_lazy_on_dask():
    x = mixed_units(3000, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaler = dd.PrivateRobustScaler(2.0, scheduler="threads", random_state=1).fit(x)
    expected = (x - scaler.centre_) / scaler.scale_
    assert np.array_equal(scaler.transform(x), expected)
    lazy = scaler.transform(da.from_array(x, chunks=(1000, 3)))
    assert isinstance(lazy, da.Array) and np.array_equal(lazy.compute(), expected)
    assert clone(scaler).get_params() == scaler.get_params()
    with pytest.raises(ValueError, match="X: expected shape"):
        scaler.transform(x[:, :2])


@pytest.mark.parametrize(
    ("kwargs", "name"), [({"epsilon": -1.0}, "epsilon"), ({"delta": 2.0}, "delta")]
)
def test_bad_parameters_are_refused_by_name(kwargs, name):
    with pytest.raises(ValueError, match=name):
        dd.PrivateRobustScaler(**kwargs, scheduler="threads").fit(np.ones((10, 2)))
