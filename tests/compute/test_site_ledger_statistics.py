"""Every statistic of an analysis is charged to the ledger configured where it is drawn.

The directions' release charged the release-site ledger (``dask-dppca.release.ledger``)
before this; the analysis's scree and score-map statistics must be charged there too, or
a client could get them from a trusted worker whose ledger never sees them.  A process
that releases itself (the synchronous scheduler) reads the same keys, so the check runs
in this process.  Data are test data (fixed seed).
"""

from __future__ import annotations

import warnings

import dask
import numpy as np
import pytest

import dask_dppca as dd
from dask_dppca.compute.trusted.site_ledger import (
    RELEASE_DELTA_KEY,
    RELEASE_EPSILON_KEY,
    RELEASE_LEDGER_KEY,
)
from dask_dppca.privacy.budget.privacy_budget import BudgetExceededError, PrivacyBudget
from dask_dppca.privacy.mechanisms.accounting import compose
from dask_dppca.privacy.mechanisms.parts import GaussianPart

pytestmark = pytest.mark.timeout(120)


def _x() -> np.ndarray:
    return np.random.default_rng(5).standard_normal((1500, 4)) * [4.0, 2.0, 1.0, 1.0]


def _site(path, epsilon: float) -> dict:
    return {RELEASE_LEDGER_KEY: str(path), RELEASE_EPSILON_KEY: epsilon, RELEASE_DELTA_KEY: 1e-5}


def _spent_parts(path) -> list:
    parts = []
    for row in PrivacyBudget.open(path).spent:
        parts += list(row.parts) if row.parts else [GaussianPart(row.sensitivity / row.sigma)]
    return parts


def test_every_release_of_an_analysis_is_charged_where_it_is_drawn(tmp_path):
    path = tmp_path / "site.ledger"
    with dask.config.set(_site(path, 10.0)), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = dd.analyze(_x(), n_components=2, epsilon=3.0, delta=1e-5, scheduler="synchronous")
    planned = compose(
        [dd.privacy.mechanisms.parts.part_from_dict(p) for p in result.meta["parts"]]
    ).epsilon(1e-5)
    charged = compose(_spent_parts(path)).epsilon(1e-5)
    # Every planned part is there (the directions' fit is charged at its own slightly
    # rounded-down mu): nothing the client got is missing from the site's ledger.
    assert charged >= planned * (1 - 1e-6), (charged, planned)
    rows = PrivacyBudget.open(path).spent
    assert len(rows) >= 3 and all(r.state == "committed" for r in rows)
    assert sum(1 for r in rows if r.parts) >= 2  # the scree's quantiles and means at least


def test_a_site_ledger_that_cannot_afford_the_scree_refuses_it(tmp_path):
    # Its room: the analysis's directions release and a little more, not the scree.
    probe = tmp_path / "probe.ledger"
    with dask.config.set(_site(probe, 10.0)), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dd.analyze(_x(), n_components=2, epsilon=3.0, delta=1e-5, scheduler="synchronous")
    (directions,) = [r for r in PrivacyBudget.open(probe).spent if not r.parts]
    room = 1.02 * compose([GaussianPart(directions.mu)]).epsilon(1e-5)
    path = tmp_path / "small.ledger"
    with dask.config.set(_site(path, room)), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with dd.PrivacyBudget(100.0, 1e-3):  # the client could afford it all
            with pytest.raises(BudgetExceededError, match="refused where the noise is drawn"):
                dd.analyze(_x(), n_components=2, epsilon=3.0, delta=1e-5, scheduler="synchronous")
    rows = PrivacyBudget.open(path).spent
    assert compose(_spent_parts(path)).epsilon(1e-5) <= room * (1 + 1e-9)
    assert len(rows) == 1 and not rows[0].parts  # the directions, and no statistic
