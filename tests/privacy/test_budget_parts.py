"""A budget after mixed releases (Gaussian, pure and approximate DP parts).

check/reserve/spend/remaining stay exact after releases stated as parts; the SQLite
ledger records every part (a nullable ``parts`` column; a file written before it is
migrated in place); what the budget reports equals an independent dp-accounting PLD
computation over the same parts.
"""

from __future__ import annotations

import math
import sqlite3

import pytest
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as pld

from dask_dppca.privacy import BudgetExceededError, GaussianCharge, PrivacyBudget
from dask_dppca.privacy.budget.privacy_budget import PartsCharge
from dask_dppca.privacy.mechanisms.calibration import analytic_gaussian_sigma
from dask_dppca.privacy.mechanisms.parts import ApproxDPPart, GaussianPart, PureDPPart

SCREE = PartsCharge((PureDPPart(0.15),) * 5 + (GaussianPart(0.35),))


def independent_epsilon(parts, delta: float) -> float:
    """dp-accounting's PLD epsilon of the composition (pessimistic: >= exact)."""
    out = None
    for p in parts:
        if isinstance(p, GaussianPart):
            one = pld.from_gaussian_mechanism(1 / p.mu, value_discretization_interval=1e-4)
        elif isinstance(p, PureDPPart):
            one = pld.from_randomized_response(
                2 / (1 + math.exp(p.epsilon)), 2, value_discretization_interval=1e-4
            )
        else:
            one = pld.from_privacy_parameters(
                common.DifferentialPrivacyParameters(p.epsilon, p.delta),
                value_discretization_interval=1e-4,
            )
        out = one if out is None else out.compose(one)
    return out.get_epsilon_for_delta(delta)


def all_parts(budget: PrivacyBudget):
    out = []
    for row in budget.spent:
        out += list(row.parts) or [GaussianPart(row.mu)]
    return out


def test_remaining_is_exact_after_mixed_releases():
    budget = PrivacyBudget(3.0, 1e-5)
    budget.spend(GaussianCharge(1.0, 2.0))
    budget.spend(SCREE)
    for k in (1, 3):
        eps = budget.remaining(k)
        assert 0 < eps < 3
        sigma = analytic_gaussian_sigma(1.0, eps, 1e-5)
        trial = PrivacyBudget(3.0, 1e-5)
        trial.spend(GaussianCharge(1.0, 2.0))
        trial.spend(SCREE)
        for _ in range(k):
            trial.spend(GaussianCharge(1.0, sigma))  # k releases at remaining(k) fit
        too_much = analytic_gaussian_sigma(1.0, eps * 1.001, 1e-5)
        with pytest.raises(BudgetExceededError):
            trial.check(GaussianCharge(1.0, too_much))


def test_min_sigma_is_the_smallest_that_fits_after_mixed_releases():
    budget = PrivacyBudget(3.0, 1e-6)
    budget.spend(SCREE)
    sigma = budget.min_sigma(1.0)
    budget.check(GaussianCharge(1.0, sigma))
    with pytest.raises(BudgetExceededError):
        budget.check(GaussianCharge(1.0, sigma * (1 - 1e-6)))


def test_a_parts_release_that_does_not_fit_is_refused_and_not_recorded():
    budget = PrivacyBudget(1.0, 1e-6)
    budget.spend(PartsCharge((PureDPPart(0.6),)))
    with pytest.raises(BudgetExceededError, match="eps=0.6"):
        budget.spend(PartsCharge((PureDPPart(0.6),)))
    assert budget.releases == 1
    reservation = budget.reserve(PartsCharge((PureDPPart(0.3),)), label="scree")
    assert budget.releases == 2
    reservation.cancel()
    assert budget.releases == 1


def test_mechanisms_offering_parts_are_charged_by_their_parts():
    class Quantiles:  # the mechanism contract (dask_dppca.privacy.mechanisms.contract)
        parts = (PureDPPart(0.2), PureDPPart(0.2))

        def release(self, exact, sampler=None):
            raise AssertionError("never released here")

        def describe(self):
            return {}

    budget = PrivacyBudget(1.0, 1e-6)
    budget.spend(Quantiles())
    assert budget.spent[0].parts == Quantiles.parts
    with pytest.raises(TypeError, match="charge"):
        budget.spend(object())


def test_never_more_than_the_total_and_equal_to_dp_accounting(tmp_path):
    """An analysis-like sequence charged until refused: what was admitted composes (by
    dp-accounting, independently) to at most the total, and the ledger reports it."""
    budget = PrivacyBudget(3.0, 1e-4, ledger=tmp_path / "study.ledger", create=True)
    charges = [
        GaussianCharge(1.0, 3.0),  # directions
        SCREE,
        PartsCharge((GaussianPart(0.4), ApproxDPPart(0.2, 1e-6))),  # a score map
    ] * 3
    admitted = 0
    for charge in charges:
        try:
            budget.spend(charge)
            admitted += 1
        except BudgetExceededError:
            pass
    assert 4 <= admitted < len(charges)
    reopened = PrivacyBudget.open(tmp_path / "study.ledger")
    parts = all_parts(reopened)
    theirs = independent_epsilon(parts, 1e-4)
    assert theirs <= 3.0 + 5e-3  # pessimistic PLD: a little above exact at most
    assert reopened.spent_epsilon == pytest.approx(theirs, abs=5e-3)
    assert reopened.spent_epsilon <= 3.0


def test_the_ledger_records_every_part_and_migrates_old_files(tmp_path):
    path = tmp_path / "old.ledger"
    budget = PrivacyBudget(3.0, 1e-5, ledger=path, create=True)
    budget.spend(GaussianCharge(1.0, 4.0), label="a fit before parts")
    with sqlite3.connect(path) as db:  # no parts column yet (layout 3: the hash chain)
        assert "parts" not in [r[1] for r in db.execute("PRAGMA table_info(releases)")]
        assert db.execute("SELECT format FROM budget").fetchone()[0] == 3
    before = budget.remaining()
    budget.spend(SCREE, label="scree")
    with sqlite3.connect(path) as db:
        assert "parts" in [r[1] for r in db.execute("PRAGMA table_info(releases)")]
        assert db.execute("SELECT format FROM budget").fetchone()[0] == 3  # never lowered
    rows = PrivacyBudget.open(path).spent
    assert rows[0].parts == () and rows[0].mu == 0.25
    assert rows[1].parts == SCREE.parts and rows[1].label == "scree"
    assert PrivacyBudget.open(path).remaining() < before
    assert "eps=0.15" in PrivacyBudget.open(path).describe()
