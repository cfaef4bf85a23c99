"""What a user holds after a fit: warnings from public quantities, a readable privacy
report, a result file that loads back, and a logger that says what happened (and never
a data value or a secret)."""

from __future__ import annotations

import json
import logging
import warnings

import numpy as np
import pytest

import dask_dppca as dd
from dask_dppca.decomposition.results import RESULT_FORMAT, RESULT_FORMAT_VERSION
from dask_dppca.privacy.mechanisms.advice import release_warnings
from dask_dppca.privacy.mechanisms.noise import NonPrivateRandomStateWarning

X = np.random.default_rng(11).standard_normal((400, 4))  # test data only


def _fit(x, **params):
    params.setdefault("scheduler", "synchronous")
    params.setdefault("random_state", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateRandomStateWarning)
        return dd.DPPCA(**params).fit(x)


def _privacy_warnings(x, **params) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit(x, **params)
    return [w for w in caught if issubclass(w.category, dd.PrivacyWarning)]


# -- warnings from public quantities ------------------------------------------------------


def test_two_records_warn_that_the_noise_swamps_every_signal():
    """DPPCA().fit(X[:2]) released eigenvalues [16.5, 4.7, 2.8] of a matrix whose trace
    is at most 1, silently."""
    (caught,) = _privacy_warnings(X[:2])
    assert caught.category is dd.NoisyReleaseWarning
    assert "swamps the largest possible signal" in str(caught.message)
    assert caught.filename == __file__  # points at the caller's fit, not the library


def test_delta_above_one_over_n_warns():
    caught = _privacy_warnings(X, delta=0.01)  # 1/n = 0.0025
    assert [w.category for w in caught] == [dd.LargeDeltaWarning]
    assert "delta=0.01 is above 1/n = 0.0025" in str(caught[0].message)


def test_a_normal_fit_warns_about_nothing():
    assert _privacy_warnings(X) == []
    assert _privacy_warnings(X, delta=1 / len(X)) == []  # at 1/n, not above


def test_the_warnings_depend_on_public_quantities_only():
    """The same shape and parameters give the same warnings whatever the values: all
    identical records, records at 1e300, NaN records, ordinary ones."""
    cases = [X[:3], np.zeros((3, 4)), np.full((3, 4), 1e300), np.full((3, 4), np.nan)]
    seen = [[(w.category, str(w.message)) for w in _privacy_warnings(x)] for x in cases]
    assert seen[0] and all(s == seen[0] for s in seen)
    # ... and the rule is a function of (n, d, G, sigma, delta) alone.
    assert release_warnings(3, 4, 1.0, 10.0, 1e-6)[0][0] is dd.NoisyReleaseWarning
    assert release_warnings(3, 4, 1.0, 0.01, 1e-6) == []


def test_the_signal_to_noise_figure_is_what_the_report_says():
    est = _fit(X)
    p = est.privacy_
    assert p["signal_bound"] == 1.0  # sphere: G = 1
    assert p["noise_spectral_norm"] == pytest.approx(p["sigma"] * np.sqrt(2 * 4), rel=1e-15)
    assert p["signal_to_noise"] == pytest.approx(1.0 / p["noise_spectral_norm"], rel=1e-15)
    # The noise's spectral norm is what the figure says it is (seeded noise: TEST ONLY).
    rng = np.random.default_rng(3)
    d, sigma = 40, 1.0
    norms = []
    for _ in range(20):
        a = rng.normal(0, sigma / np.sqrt(2), (d, d))
        e = np.triu(a, 1) + np.triu(a, 1).T + np.diag(rng.normal(0, sigma, d))
        norms.append(np.linalg.norm(e, 2))
    assert np.mean(norms) == pytest.approx(
        dd.privacy.mechanisms.advice.noise_spectral_norm(sigma, d), rel=0.1
    )


# -- the privacy report -------------------------------------------------------------------


def test_the_privacy_report_reads_as_text_and_html_and_stays_a_dict():
    est = _fit(X)
    report = est.privacy_
    assert isinstance(report, dict) and report["sigma"] > 0
    assert json.loads(json.dumps(report)) == dict(report)
    text = str(report)
    assert text.startswith("privacy report: (1, 1e-06)-DP for replace-one neighbours")
    for heading in ("guarantee:", "calibration:", "signal to noise:", "where the noise was drawn:"):
        assert f"\n  {heading}" in text
    assert f"sigma = {report['sigma']:.6g}" in text and "NOT PRIVATE" in text  # seeded
    assert len(text.splitlines()) == len(report) + 1 + len(report.sections())
    html = report._repr_html_()
    assert html.startswith("<div>") and "<table>" in html and "<code>sigma</code>" in html
    assert "<script" not in html


def test_an_os_entropy_release_is_not_called_not_private():
    est = dd.DPPCA(scheduler="synchronous").fit(X)
    assert "NOT PRIVATE" not in str(est.privacy_)


# -- result files ---------------------------------------------------------------------------


def test_save_and_load_give_back_the_fitted_estimator(tmp_path):
    est = _fit(X, n_components=3, spatial_sign="winsor", radius=2.0)
    path = tmp_path / "fit.json"
    assert est.save(path) == str(path)
    loaded = dd.load_result(path)
    assert type(loaded) is dd.DPPCA and loaded.get_params() == {
        **est.get_params(),
        "scheduler": "synchronous",
    }
    for name in ("components_", "eigenvalues_", "kendall_eigenvalue_ratio_"):
        assert np.array_equal(getattr(loaded, name), getattr(est, name)), name
    assert loaded.privacy_ == est.privacy_ and isinstance(loaded.privacy_, dd.PrivacyReport)
    assert loaded.provenance_ == est.provenance_
    assert np.array_equal(loaded.transform(X), est.transform(X))
    payload = json.loads(path.read_text())
    assert payload["format"] == RESULT_FORMAT and payload["format_version"] == RESULT_FORMAT_VERSION
    assert payload["library_version"] == dd.__version__
    assert payload["input"] == {
        "location": None,
        "component": None,
        "type": "ndarray",
        "shape": [400, 4],
    }
    assert payload["created"].endswith("+00:00") and payload["fit_seconds"] >= 0
    assert payload["privacy"]["signal_to_noise"] > 0
    assert dd.DPPCA.load(path).privacy_ == est.privacy_


def test_a_saved_result_is_never_overwritten_unless_asked(tmp_path):
    est = _fit(X)
    path = tmp_path / "fit.json"
    est.save(path)
    before = path.read_text()
    with pytest.raises(ValueError, match="exists; pass overwrite=True"):
        _fit(X[:300]).save(path)
    assert path.read_text() == before
    _fit(X[:300]).save(path, overwrite=True)
    assert json.loads(path.read_text())["n_samples"] == 300


def test_load_checks_the_format_and_its_version(tmp_path):
    est = _fit(X)
    path = tmp_path / "fit.json"
    est.save(path)
    payload = json.loads(path.read_text())
    # A file from another library version with the same format loads.
    path.write_text(json.dumps({**payload, "library_version": "99.1.0"}))
    assert np.array_equal(dd.load_result(path).components_, est.components_)
    # A newer format is refused with what to do.
    path.write_text(json.dumps({**payload, "format_version": RESULT_FORMAT_VERSION + 1}))
    with pytest.raises(ValueError, match="format_version 2.*upgrade dask-dppca"):
        dd.load_result(path)
    for broken, needle in [
        ({"components": [[1.0]]}, "do not fit"),
        ({"format": "something-else"}, "not a dask-dppca result file"),
        ({"format_version": "1"}, "invalid format_version"),
    ]:
        path.write_text(json.dumps({**payload, **broken}))
        with pytest.raises(ValueError, match=needle):
            dd.load_result(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="is not JSON"):
        dd.load_result(path)
    with pytest.raises(ValueError, match="does not exist"):
        dd.load_result(tmp_path / "none.json")


def test_a_store_is_recorded_by_its_absolute_location(tmp_path, monkeypatch):
    import zarr

    z = zarr.open_array(str(tmp_path / "x.zarr"), mode="w", shape=X.shape, dtype="f8")
    z[:] = X
    monkeypatch.chdir(tmp_path)
    est = _fit("x.zarr")
    assert est.provenance_["input"]["location"] == str(tmp_path / "x.zarr")


def test_feature_names_survive_a_round_trip(tmp_path):
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame(X, columns=["a", "b", "c", "d"])
    est = _fit(frame)
    est.save(tmp_path / "fit.json")
    loaded = dd.load_result(tmp_path / "fit.json")
    assert list(loaded.feature_names_in_) == ["a", "b", "c", "d"]
    with pytest.raises(ValueError, match="feature names"):
        loaded.transform(frame.rename(columns={"a": "z"}))


# -- the logger ------------------------------------------------------------------------------


def test_the_logger_tells_the_fit_and_never_a_value_or_a_secret(caplog):
    signature = "SeCrEt-SiG"
    x = X.copy()
    x[0, 0] = 1234.56789  # a value that must not reach the log
    import zarr

    url = f"memory://logged/x.zarr?sig={signature}"
    z = zarr.open_array(url, mode="w", shape=x.shape, chunks=(200, 4), dtype="f8")
    z[:] = x
    with caplog.at_level(logging.INFO, logger="dask_dppca"):
        est = _fit(url)
    records = [r for r in caplog.records if r.name.startswith("dask_dppca")]
    messages = [r.getMessage() for r in records]
    fit_id = est.privacy_["fit_id"]
    kinds = [m.split(": ", 2)[1].split(" ")[0] for m in messages]
    assert kinds == ["start", "plan", "noise", "done"], messages
    assert messages[0].startswith(f"fit {fit_id}: start: memory://logged/x.zarr?sig=***")
    assert any(m.startswith(f"fit {fit_id}: plan: complete design") for m in messages)
    assert any(m.startswith(f"fit {fit_id}: noise drawn on ") for m in messages)
    assert messages[-1].startswith(f"fit {fit_id}: done in ")
    text = "\n".join(messages)
    assert signature not in text and "1234.5" not in text
    assert "sigma" in text and "epsilon=1" in text


def test_the_logger_is_silent_until_configured():
    logger = logging.getLogger("dask_dppca")
    assert any(isinstance(h, logging.NullHandler) for h in logger.handlers)
