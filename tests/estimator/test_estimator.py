"""DPPCA end to end: conventions, outputs, inputs, errors, clusters."""

from __future__ import annotations

import math
import warnings

import dask.array as da
import numpy as np
import pytest
import zarr
from sklearn.base import clone
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer

import dask_dppca as dd
from dask_dppca.privacy.mechanisms.calibration import calibrate_sigma
from dask_dppca.privacy.mechanisms.noise import NonPrivateRandomStateWarning

RNG = np.random.default_rng(5)  # test data only


def _fit(x, component=None, **params):
    params.setdefault("scheduler", "threads")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateRandomStateWarning)
        return dd.DPPCA(**params).fit(x, component=component)


def test_scikit_learn_conventions():
    est = dd.DPPCA(n_components=3, epsilon=0.5, spatial_sign="winsor", radius=2.0)
    params = est.get_params()
    assert params["n_components"] == 3 and params["radius"] == 2.0
    twin = clone(est)
    assert twin.get_params() == params and twin is not est
    est.set_params(epsilon=2.0)
    assert est.epsilon == 2.0
    # Parameters are stored untouched: validation happens in fit, not __init__.
    assert dd.DPPCA(epsilon=-1).epsilon == -1


def test_works_in_a_pipeline(elliptical):
    x, _ = elliptical
    pipe = Pipeline(
        [
            ("scale", FunctionTransformer(lambda z: z * 2.0)),
            ("pca", dd.DPPCA(n_components=2, scheduler="threads")),
        ]
    )
    scores = pipe.fit_transform(x)
    assert scores.shape == (len(x), 2)


def test_outputs_are_well_formed(elliptical):
    x, _ = elliptical
    est = _fit(x, n_components=3)
    v = est.components_
    assert v.shape == (3, x.shape[1])
    assert np.allclose(v @ v.T, np.eye(3), atol=1e-12)
    assert est.eigenvalues_.shape == (x.shape[1],)
    assert np.all(np.diff(est.eigenvalues_) <= 0)
    ratio = est.kendall_eigenvalue_ratio_
    positive = np.clip(est.eigenvalues_, 0, None)
    np.testing.assert_allclose(ratio, positive[:3] / positive.sum(), rtol=1e-15)
    assert np.all(ratio >= 0) and ratio.sum() <= 1 + 1e-12
    assert est.n_features_in_ == x.shape[1] and est.n_samples_ == len(x)


def test_recovers_the_true_subspace_on_cauchy_data_where_pca_fails(elliptical):
    x, truth = elliptical
    est = _fit(x, n_components=2, epsilon=5.0)
    assert dd.sin_theta(est.components_.T, truth) < 0.15
    cov = dd.kendall_matrix(x, spatial_sign="identity")
    pca = np.linalg.eigh(cov)[1][:, ::-1][:, :2]
    assert dd.sin_theta(pca, truth) > 0.3


def test_privacy_report_rederives_sigma_by_hand(elliptical):
    x, _ = elliptical
    p = _fit(x, epsilon=0.7, delta=1e-7).privacy_
    n = p["n_samples"]
    tight = math.sqrt(2) * p["bound_G"] ** 2 * p["max_degree"] / p["n_pairs"]
    assert p["max_degree"] == n - 1 and p["n_pairs"] == n * (n - 1) // 2
    assert math.isclose(tight, 2 * math.sqrt(2) / n, rel_tol=1e-12)
    want_sensitivity = tight + p["rounding_slack"] + p["sampler_slack"]
    assert math.isclose(p["sensitivity"], want_sensitivity, rel_tol=1e-12)
    assert 0 < p["rounding_slack"] < 1e-6 * tight
    assert 0 < p["sampler_slack"] < 1e-9 * tight  # the default OpenDP grid's rounding
    assert math.isclose(
        p["sigma"],
        calibrate_sigma(p["sensitivity"], 0.7, 1e-7, "analytic", excess=p["sampler_excess"]),
        rel_tol=1e-12,
    )
    assert p["neighbours"] == "replace-one" and p["epsilon"] == 0.7 and p["delta"] == 1e-7


def test_classical_calibration_is_the_papers(elliptical):
    x, _ = elliptical
    p = _fit(x, epsilon=0.5, calibration="classical").privacy_
    n = p["n_samples"]
    # the paper's 4 / n, plus the default sampler's lattice slack (its 40-bit OpenDP grid)
    assert 0 < p["sampler_slack"] < 1e-9 * 4.0 / n
    assert math.isclose(p["sensitivity"], 4.0 / n + p["sampler_slack"], rel_tol=1e-15)
    assert math.isclose(
        p["sigma"], p["sensitivity"] * math.sqrt(2 * math.log(1.25 / 1e-6)) / 0.5, rel_tol=1e-12
    )
    with pytest.raises(ValueError, match="epsilon"):
        _fit(x, epsilon=1.0, calibration="classical")


def test_random_state_warns_and_reproduces(elliptical):
    x, _ = elliptical
    with pytest.warns(NonPrivateRandomStateWarning):
        a = dd.DPPCA(random_state=1, scheduler="threads").fit(x)
    b = _fit(x, random_state=1)
    assert np.array_equal(a.components_, b.components_)
    assert a.privacy_["private"] is False


def test_default_noise_differs_between_fits(elliptical):
    x, _ = elliptical
    a, b = _fit(x[:300]), _fit(x[:300])
    assert not np.array_equal(a.eigenvalues_, b.eigenvalues_)


def test_transform_scores(elliptical):
    x, _ = elliptical
    est = _fit(x)
    assert np.allclose(est.transform(x), x @ est.components_.T)
    lazy = est.transform(da.from_array(x, chunks=(500, -1)))
    assert isinstance(lazy, da.Array)
    assert np.allclose(lazy.compute(), x @ est.components_.T)
    with pytest.raises(ValueError, match="features"):
        est.transform(x[:, :3])


def test_transform_takes_the_input_keywords_of_fit(tmp_path, elliptical):
    """est.transform(store, component=..., storage_options=...) like fit: nested group path."""
    x, _ = elliptical
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_group("sub").create_array("X", shape=x.shape, chunks=(500, 6), dtype="f8")[:] = x
    est = _fit(str(tmp_path / "g.zarr"), component="sub/X")
    scores = est.transform(
        str(tmp_path / "g.zarr"), component="sub/X", storage_options=None, allow_fill_values=False
    )
    assert isinstance(scores, da.Array)
    assert np.allclose(scores.compute(), x @ est.components_.T)


def test_inputs_numpy_dask_zarr_and_paths(tmp_path, elliptical):
    x, _ = elliptical
    x = x[:400]
    want = dd.kendall_matrix(x)
    z = zarr.open_array(
        str(tmp_path / "a.zarr"), mode="w", shape=x.shape, chunks=(90, 6), dtype="f8"
    )
    z[:] = x
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_array("records", shape=x.shape, chunks=(100, 3), dtype="f8")[:] = x
    group.create_array("other", shape=(3,), dtype="f8")
    for source, component in [
        (da.from_array(x, chunks=(77, 6)), None),
        (z, None),
        (str(tmp_path / "a.zarr"), None),
        (tmp_path / "a.zarr", None),
        (str(tmp_path / "g.zarr"), "records"),
    ]:
        got = dd.kendall_matrix(source, component=component)
        assert np.linalg.norm(got - want) <= 1e-12 * np.linalg.norm(want)
    est = dd.DPPCA(random_state=0, scheduler="threads")
    with pytest.warns(NonPrivateRandomStateWarning):
        est.fit(str(tmp_path / "g.zarr"), component="records")
    assert est.n_samples_ == 400


@pytest.mark.parametrize(
    "params, fit_input, match",
    [
        ({"epsilon": 0}, None, "epsilon"),
        ({"epsilon": float("nan")}, None, "epsilon"),
        ({"epsilon": -1}, None, "epsilon"),
        ({"delta": 0}, None, "delta"),
        ({"delta": 1.0}, None, "delta"),
        ({"n_components": 0}, None, "n_components"),
        ({"n_components": 7}, None, "n_components"),
        ({"n_components": 2.5}, None, "n_components"),
        ({"spatial_sign": "winsor", "radius": 0.0}, None, "radius"),
        ({"spatial_sign": "winsor"}, None, "radius"),
        ({"spatial_sign": "banana"}, None, "spatial_sign"),
        ({"spatial_sign": "identity"}, None, "spatial_sign"),
        ({"calibration": "loose"}, None, "calibration"),
        ({"design": "partial"}, None, "design"),
        ({"scheduler": "nowhere"}, None, "scheduler"),
        ({}, np.zeros(5), "X"),
        ({}, np.zeros((4, 3, 2)), "X"),
        ({}, np.zeros((5, 0)), "X"),
        ({}, np.zeros((1, 6)), "X"),
        ({}, np.array([["a", "b"], ["c", "d"]]), "X"),
        ({}, "/no/such/store.zarr", "X"),
    ],
)
def test_bad_parameters_raise_errors_that_name_them(params, fit_input, match, elliptical):
    x = elliptical[0][:50] if fit_input is None else fit_input
    with pytest.raises(ValueError, match=match):
        dd.DPPCA(**{"scheduler": "threads", **params}).fit(x)


@pytest.mark.slow
def test_unanswered_scheduler_address_fails_fast():
    with pytest.raises(ValueError, match="scheduler"):
        dd.DPPCA(scheduler="tcp://127.0.0.1:1").fit(np.eye(3))


@pytest.mark.cluster
def test_cluster_and_threads_release_the_same_with_a_test_seed(cluster_client, elliptical):
    x, _ = elliptical
    x = da.from_array(x[:1200], chunks=(300, -1))
    local = _fit(x, random_state=7)
    remote = _fit(x, random_state=7, scheduler=cluster_client)
    assert np.allclose(local.components_, remote.components_, atol=1e-9)
    assert np.allclose(local.eigenvalues_, remote.eigenvalues_, atol=1e-12)


def test_no_attribute_carries_the_variance_name(elliptical):
    """The eigenvalues are of the noisy Kendall (spatial-sign) matrix: no attribute calls
    them variances, the old names say where to look, and the docstring and the privacy
    report say what they are."""
    x, _ = elliptical
    est = _fit(x, n_components=2)
    for name in ("explained_variance_ratio_", "explained_variance_"):
        assert not hasattr(est, name)
        with pytest.raises(AttributeError, match="kendall_eigenvalue_ratio_"):
            getattr(est, name)
    assert not [name for name in vars(est) if "variance" in name]
    assert "not a share of variance" in " ".join(dd.DPPCA.__doc__.split())
    assert "not variances" in est.privacy_["released"]
    assert "kendall_eigenvalue_ratio_" in str(est.privacy_)
