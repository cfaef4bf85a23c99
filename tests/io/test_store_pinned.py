"""An analysis reads one version of its store: rewritten between two stages, it is refused
with one line, the stages released before it kept.  Seeds make TEST DATA only."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import zarr

import dask_dppca as dd
from dask_dppca.analysis.stages import directions as directions_stage
from dask_dppca.io.fingerprint import StoreChangedError, store_fingerprint

pytestmark = pytest.mark.timeout(300)


def _write(path, seed: int) -> None:
    rng = np.random.default_rng(seed)  # test data only
    z = zarr.open_array(str(path), mode="w", shape=(600, 4), chunks=(200, 4), dtype="f8")
    z[:] = rng.standard_normal((600, 4)) * np.array([3.0, 2.0, 1.0, 0.5])


def test_the_fingerprint_follows_a_rewrite_and_nothing_else(tmp_path):
    store = tmp_path / "x.zarr"
    _write(store, 1)
    pinned = store_fingerprint(str(store))
    assert pinned is not None and store_fingerprint(str(store)) == pinned
    _write(store, 2)  # same shape, chunks and sizes: the times differ
    assert store_fingerprint(str(store)) != pinned
    assert store_fingerprint(np.zeros((3, 2))) is None


def test_a_store_rewritten_after_the_directions_is_refused(tmp_path, monkeypatch):
    store = tmp_path / "x.zarr"
    _write(store, 1)

    class RewritesAfterItsFit(dd.DPPCA):
        def fit(self, X, *args, **kwargs):
            fitted = super().fit(X, *args, **kwargs)
            _write(store, 2)  # another process rewrites the store meanwhile
            return fitted

    monkeypatch.setattr(directions_stage, "DPPCA", RewritesAfterItsFit)
    budget = dd.PrivacyBudget(10.0, 1e-4)
    with warnings.catch_warnings(), budget, pytest.raises(StoreChangedError) as changed:
        warnings.simplefilter("ignore")
        dd.analyze(str(store), 2, epsilon=2.0, scheduler="synchronous")
    text = str(changed.value)
    assert "\n" not in text and "changed since the analysis started" in text
    assert "refused before the scree" in text
    assert changed.value.partial_analysis.meta["released_stages"] == ["directions"]
    states = {r.fit_id.rsplit(".", 1)[1]: r.state for r in budget._ledger.rows()}
    assert states == {"directions": "committed", "scree": "cancelled", "score_map": "cancelled"}


def test_an_unchanged_store_runs_every_stage(tmp_path):
    store = tmp_path / "x.zarr"
    _write(store, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = dd.analyze(str(store), 2, epsilon=2.0, scheduler="synchronous")
    assert result.score_map is not None and "released_stages" not in result.meta
