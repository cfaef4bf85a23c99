"""The privacy budget: tight Gaussian composition, cross-checked against dp_accounting."""

from __future__ import annotations

import contextvars
import math
import threading

import pytest
from dp_accounting import dp_event
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
from dp_accounting.privacy_accountant import NeighboringRelation

from dask_dppca.privacy.budget.charging import current_budget
from dask_dppca.privacy.budget.privacy_budget import (
    BudgetExceededError,
    GaussianCharge,
    PrivacyBudget,
    Release,
)
from dask_dppca.privacy.mechanisms.calibration import (
    analytic_gaussian_sigma,
    calibrate_sigma,
    gaussian_dp_delta,
    gaussian_dp_mu,
)


def pld_epsilon(releases: list[tuple[float, float]], delta: float) -> float:
    """epsilon of composed Gaussian releases (sensitivity, sigma) by dp_accounting's PLD.

    A release of l2 sensitivity Delta (our replace-one distance) shifts the mean by
    Delta: that is dp_accounting's Gaussian with sensitivity 1 and noise multiplier
    sigma / Delta under ADD_OR_REMOVE_ONE.  (Its REPLACE_ONE relation assumes a record
    moves the sum by 2 and would double-count.)
    """
    accountant = PLDAccountant(
        NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=1e-4
    )
    for sens, sigma in releases:
        accountant.compose(dp_event.GaussianDpEvent(sigma / sens))
    return accountant.get_epsilon(delta)


# -- the context manager ------------------------------------------------------------------


def test_current_budget_is_the_innermost_active_one():
    assert current_budget() is None
    with PrivacyBudget(epsilon=2, delta=1e-5) as outer:
        assert current_budget() is outer
        with PrivacyBudget(epsilon=1, delta=1e-6) as inner:
            assert current_budget() is inner
        assert current_budget() is outer
    assert current_budget() is None


def test_budget_is_popped_when_the_block_raises():
    with pytest.raises(KeyError):
        with PrivacyBudget(epsilon=1, delta=1e-6):
            raise KeyError("x")
    assert current_budget() is None


def test_budget_works_as_a_plain_object_and_is_reentrant():
    budget = PrivacyBudget(1.0, 1e-6)
    assert current_budget() is None
    budget.spend(GaussianCharge(1.0, 100.0))
    with budget:
        with budget:
            assert current_budget() is budget
        assert current_budget() is budget
    assert budget.releases == 1


def test_an_open_budget_covers_every_thread_and_context_of_the_process():
    """A fit in a thread started inside the block (a ThreadPoolExecutor, joblib's threading
    backend) must not escape the budget: the block is open process-wide, not per context."""
    seen = []
    with PrivacyBudget(1.0, 1e-6) as budget:
        thread = threading.Thread(target=lambda: seen.append(current_budget()))
        thread.start()
        thread.join()
        seen.append(contextvars.Context().run(current_budget))
    assert seen == [budget, budget]
    assert current_budget() is None


@pytest.mark.parametrize(
    "epsilon,delta,name",
    [(0, 1e-6, "epsilon"), (float("nan"), 1e-6, "epsilon"), (1, 0, "delta"), (1, 1, "delta")],
)
def test_bad_budget_parameters_are_named(epsilon, delta, name):
    with pytest.raises(ValueError, match=name):
        PrivacyBudget(epsilon, delta)


@pytest.mark.parametrize(
    "sens,sigma,name",
    [
        (-1, 1, "sensitivity"),
        (float("nan"), 1, "sensitivity"),
        (1, 0, "sigma"),
        (1, float("inf"), "sigma"),
        (True, 1, "sensitivity"),
        ("0.5", 1, "sensitivity"),
        (1, True, "sigma"),
    ],
)
def test_bad_release_parameters_are_named(sens, sigma, name):
    budget = PrivacyBudget(1, 1e-6)
    with pytest.raises(ValueError, match=name):
        budget.check(GaussianCharge(sens, sigma))
    with pytest.raises(ValueError, match=name):
        budget.spend(GaussianCharge(sens, sigma))
    assert budget.remaining_epsilon == 1  # nothing recorded


# -- spending ---------------------------------------------------------------------------------


def test_a_release_calibrated_to_the_whole_budget_fits_exactly_once():
    budget = PrivacyBudget(1.0, 1e-6)
    sigma = calibrate_sigma(0.3, 1.0, 1e-6)
    budget.spend(GaussianCharge(0.3, sigma), label="fit 1")
    assert budget.releases == 1
    (release,) = budget.spent
    assert (release.sensitivity, release.sigma, release.label, release.excess) == (
        0.3,
        sigma,
        "fit 1",
        0.0,
    )
    assert release.state == "committed" and isinstance(release, Release)
    assert budget.spent_epsilon == pytest.approx(1.0, rel=1e-6)
    with pytest.raises(BudgetExceededError, match="exceed the budget"):
        budget.spend(GaussianCharge(0.3, sigma * 100))  # even a tiny further release overspends
    assert budget.releases == 1  # a refused release is not recorded


def test_a_release_with_too_little_noise_is_refused_up_front():
    budget = PrivacyBudget(1.0, 1e-6)
    sigma = calibrate_sigma(1.0, 1.0, 1e-6)
    with pytest.raises(BudgetExceededError):
        budget.check(GaussianCharge(1.0, sigma * 0.999))
    with pytest.raises(BudgetExceededError):
        budget.spend(GaussianCharge(1.0, sigma * 0.999))
    assert budget.releases == 0 and budget.spent_epsilon == 0.0
    budget.check(GaussianCharge(1.0, sigma))  # the calibrated sigma is accepted


def test_tight_composition_allows_what_summing_epsilons_refuses():
    """Releases at (1, 1e-6) each under a (2.5, 1e-5) budget.

    Summing epsilons would stop after 2 (and refuse 4 releases: 4 > 2.5); Gaussian
    composition fits 6 (mu = sqrt(6) mu_1 gives epsilon 2.35 at delta 1e-5) and refuses
    the 7th (2.57).
    """
    budget = PrivacyBudget(2.5, 1e-5)
    sens = 0.01
    sigma = analytic_gaussian_sigma(sens, 1.0, 1e-6)
    naive_releases = int(budget.epsilon // 1.0)
    assert naive_releases == 2
    for i in range(6):
        budget.spend(GaussianCharge(sens, sigma), label=f"release {i}")
    assert budget.releases == 6
    assert budget.spent_epsilon == pytest.approx(2.3526, abs=1e-3)
    with pytest.raises(BudgetExceededError, match="epsilon=2.56"):
        budget.spend(GaussianCharge(sens, sigma))
    assert budget.releases == 6
    # The composition really is (2.5, 1e-5)-DP, by dp_accounting's PLD accountant:
    assert pld_epsilon([(sens, sigma)] * 6, 1e-5) <= 2.5
    assert pld_epsilon([(sens, sigma)] * 7, 1e-5) > 2.5


def test_composition_matches_dp_accounting_pld():
    releases = [(0.02, 0.05), (1.0, 7.0), (0.3, 0.9), (2.0, 3.5)]
    budget = PrivacyBudget(50.0, 1e-6)
    for sens, sigma in releases:
        budget.spend(GaussianCharge(sens, sigma))
    # PLD discretisation is pessimistic: it may exceed the exact value, never undercut it much.
    pld = pld_epsilon(releases, 1e-6)
    assert budget.spent_epsilon == pytest.approx(pld, rel=2e-3)
    assert budget.spent_epsilon <= pld * (1 + 1e-6)


def test_composition_is_one_gaussian_with_the_root_sum_of_squares():
    mus = [0.1, 0.25, 0.4]
    budget = PrivacyBudget(10.0, 1e-5)
    for mu in mus:
        budget.spend(GaussianCharge(mu, 1.0))
    single = PrivacyBudget(10.0, 1e-5)
    single.spend(GaussianCharge(math.sqrt(sum(m * m for m in mus)), 1.0))
    assert budget.spent_mu == pytest.approx(single.spent_mu, rel=1e-14)
    assert budget.spent_epsilon == pytest.approx(single.spent_epsilon, rel=1e-9)


def test_min_sigma_is_the_boundary():
    budget = PrivacyBudget(2.0, 1e-5)
    budget.spend(GaussianCharge(1.0, 3.0))
    sigma = budget.min_sigma(0.5)
    budget.check(GaussianCharge(0.5, sigma))
    with pytest.raises(BudgetExceededError):
        budget.check(GaussianCharge(0.5, sigma * (1 - 1e-6)))
    # On an empty budget it is the analytic calibration of the whole budget.
    fresh = PrivacyBudget(2.0, 1e-5).min_sigma(0.5)
    assert fresh == pytest.approx(analytic_gaussian_sigma(0.5, 2.0, 1e-5), rel=1e-9)


def test_remaining_epsilon_is_reported_not_subtracted():
    budget = PrivacyBudget(2.0, 1e-5)
    assert budget.remaining_epsilon == 2.0
    budget.spend(GaussianCharge(1.0, analytic_gaussian_sigma(1.0, 1.0, 1e-5)))
    assert budget.remaining_epsilon == pytest.approx(1.0, rel=1e-6)
    budget.spend(GaussianCharge(1.0, analytic_gaussian_sigma(1.0, 1.0, 1e-5)))
    # Two (1, 1e-5) releases compose to less than epsilon 2 at 1e-5: room remains.
    assert 0.0 < budget.remaining_epsilon < 1.0
    mu = gaussian_dp_mu(1.0, 1e-5) * math.sqrt(2)
    assert gaussian_dp_delta(budget.spent_epsilon, mu) <= 1e-5


def test_an_exhausted_budget_leaves_only_useless_releases():
    budget = PrivacyBudget(1.0, 1e-6)
    sigma = calibrate_sigma(1.0, 1.0, 1e-6)
    budget.spend(GaussianCharge(1.0, sigma))
    # Calibration rounds sigma up by a few ulps; the sliver left needs ~1e6 x the noise.
    assert budget.min_sigma(1.0) > 1e6 * sigma
    with pytest.raises(BudgetExceededError, match="no room"):
        budget.min_sigma(1.0, excess=0.6)  # 2 x 0.6 > epsilon: nothing can fit


def test_sampler_excess_is_charged():
    exact = PrivacyBudget(1.0, 1e-6)
    sigma = calibrate_sigma(1.0, 1.0, 1e-6)
    exact.check(GaussianCharge(1.0, sigma))
    with pytest.raises(BudgetExceededError):
        exact.check(GaussianCharge(1.0, sigma, excess=1e-4))
    charged = calibrate_sigma(1.0, 1.0, 1e-6, excess=1e-4)
    exact.spend(GaussianCharge(1.0, charged, excess=1e-4))
    assert exact.spent[0].excess == 1e-4
    assert exact.spent_epsilon <= 1.0


def test_concurrent_spending_never_overspends():
    budget = PrivacyBudget(2.5, 1e-5)
    sigma = analytic_gaussian_sigma(1.0, 1.0, 1e-6)
    accepted = []

    def worker():
        for _ in range(5):
            try:
                budget.spend(GaussianCharge(1.0, sigma))
                accepted.append(1)
            except BudgetExceededError:
                pass

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(accepted) == budget.releases == 6
