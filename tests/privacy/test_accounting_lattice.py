"""The pessimistic lattice beyond MAX_OUTCOMES (privacy/mechanisms/accounting.py), and a
study ledger.

Oracles: the exact enumeration (the same parts with the fallback forced, on cases the
exact path can still take), and dp-accounting's PLD with *optimistic* estimates (an
independent implementation that rounds every loss down: a lower bound of the exact
profile, so ours must never be below it) and with pessimistic ones (an upper bound: ours,
shifted by its stated slack, must not be above it).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld
from hypothesis import given, settings
from hypothesis import strategies as st

import dask_dppca.privacy.mechanisms.accounting as accounting
from dask_dppca.analysis.stages import default_shares
from dask_dppca.analysis.stages.scree import scree_parts as _scree_plan
from dask_dppca.privacy import BudgetExceededError, GaussianCharge, PrivacyBudget
from dask_dppca.privacy.budget.privacy_budget import PartsCharge
from dask_dppca.privacy.mechanisms.accounting import (
    MAX_OUTCOMES,
    TAIL_MASS,
    PlannedPart,
    compose,
    split_budget,
)
from dask_dppca.privacy.mechanisms.calibration import gaussian_dp_mu
from dask_dppca.privacy.mechanisms.parts import ApproxDPPart, GaussianPart, PureDPPart

#: The analysis's default shares of its three stages (the stage registry's).
SHARES = default_shares(("directions", "scree", "score_map"))

DELTA = 1e-5


def forced_lattice(parts, monkeypatch):
    """The composition of ``parts`` on the pessimistic lattice, whatever their count."""
    with monkeypatch.context() as patch:
        patch.setattr(accounting, "MAX_OUTCOMES", 1)
        out = compose(parts)
    assert out.slack > 0.0
    return out


def assert_pessimistic_and_close(exact, lattice, epsilons):
    """Never below the exact profile; within its slack (and the tail mass) above it."""
    for eps in epsilons:
        assert lattice.delta(eps) >= exact.delta(eps) * (1.0 - 1e-12)
        shifted = lattice.delta(eps + lattice.slack)
        assert shifted <= exact.delta(eps) * (1.0 + 1e-8) + 2.0 * TAIL_MASS


def test_just_under_max_outcomes_the_lattice_bounds_the_exact_profile(monkeypatch):
    rng = np.random.default_rng(7)
    parts = [PureDPPart(float(e)) for e in rng.uniform(0.01, 0.4, 16)]
    parts += [PureDPPart(0.05)] * 3 + [ApproxDPPart(0.3, 1e-7)]  # groups of 4 and 1 more
    parts += [GaussianPart(0.8)]
    exact = compose(parts)
    assert exact.slack == 0.0
    assert MAX_OUTCOMES // 4 < exact.losses.size <= MAX_OUTCOMES  # 2^17 * 4 = 2^19
    lattice = forced_lattice(parts, monkeypatch)
    assert_pessimistic_and_close(exact, lattice, [0.0, 1.0, 2.5, 4.0])
    e_exact, e_lattice = exact.epsilon(DELTA), lattice.epsilon(DELTA)
    assert e_exact <= e_lattice <= e_exact + lattice.slack + 1e-9
    assert lattice.slack < 1e-3 * e_exact  # the lattice is fine enough to matter little


@settings(max_examples=25, deadline=None)
@given(
    pure=st.lists(st.floats(0.01, 2.0), min_size=1, max_size=8),
    repeats=st.integers(1, 30),
    approx=st.lists(st.tuples(st.floats(0.05, 1.0), st.floats(1e-9, 1e-4)), max_size=3),
    mu=st.sampled_from([0.0, 0.05, 0.7, 3.0]),
)
def test_lattice_never_below_exact(pure, repeats, approx, mu):
    parts = [PureDPPart(e) for e in pure] + [PureDPPart(pure[0])] * repeats
    parts += [ApproxDPPart(e, d) for e, d in approx]
    parts += [GaussianPart(mu)] if mu else []
    exact = compose(parts)
    with pytest.MonkeyPatch.context() as patch:
        lattice = forced_lattice(parts, patch)
    grid = [0.0, 0.3, 1.0, 2.0, 5.0, sum(pure) + 1.0]
    assert_pessimistic_and_close(exact, lattice, grid)


def independent_delta(parts, epsilon: float, *, pessimistic: bool, interval: float) -> float:
    """dp-accounting's delta(epsilon) of the composition: a lower bound of the exact profile
    when not ``pessimistic`` (every loss rounded down, truncated mass dropped), an upper
    bound when it is.  The (epsilon, delta) parts enter as their delta atom times
    ``RR_eps``: ``delta = 1 - keep + keep * delta_RR``, an identity of the pair."""
    mu = math.sqrt(math.fsum(p.mu**2 for p in parts if isinstance(p, GaussianPart)))
    keep = math.prod(1.0 - p.delta for p in parts if isinstance(p, ApproxDPPart))
    counts = Counter(p.epsilon for p in parts if isinstance(p, (PureDPPart, ApproxDPPart)))
    out = None
    for eps, m in counts.items():
        one = pld.from_randomized_response(
            2 / (1 + math.exp(eps)),
            2,
            pessimistic_estimate=pessimistic,
            value_discretization_interval=interval,
        )
        one = one.self_compose(m) if m > 1 else one
        out = one if out is None else out.compose(one)
    if mu > 0.0:
        gauss = pld.from_gaussian_mechanism(
            1 / mu, pessimistic_estimate=pessimistic, value_discretization_interval=interval
        )
        out = gauss if out is None else out.compose(gauss)
    assert out is not None
    return 1.0 - keep + keep * out.get_delta_for_epsilon(epsilon)


def test_beyond_max_outcomes_between_dp_accountings_two_bounds():
    rng = np.random.default_rng(11)
    parts = [PureDPPart(float(e)) for e in rng.uniform(0.02, 0.3, 40)]
    parts += [PureDPPart(0.1)] * 25 + [ApproxDPPart(0.2, 1e-8)] * 3 + [GaussianPart(1.1)]
    ours = compose(parts)
    assert ours.slack > 0.0  # 2^40 outcomes: the lattice
    for eps in (1.0, 2.0, 3.0):
        low = independent_delta(parts, eps, pessimistic=False, interval=1e-3)
        high = independent_delta(parts, eps, pessimistic=True, interval=1e-3)
        assert ours.delta(eps) >= low * (1.0 - 1e-9)
        assert ours.delta(eps + ours.slack) <= high * (1.0 + 1e-9) + 2.0 * TAIL_MASS


# -- a study ledger ------------------------------------------------------------------


def analysis_parts(epsilon: float, delta: float = 1e-8, k: int = 5) -> tuple:
    """Every part of one analysis at this total (directions, scree, score map)."""
    planned = [
        PlannedPart("directions", "directions", "gaussian"),
        *_scree_plan(k, ("clipped", "winsorized", "huber")),
        PlannedPart("score_map", "frame quantiles", "pure", count=4, weight=0.25),
        PlannedPart("score_map", "additive histogram", "gaussian", weight=1.5),
        PlannedPart("score_map", "sparse histogram", "approx", weight=1.5, delta_share=0.1),
    ]
    return split_budget(epsilon, delta, planned, SHARES).all_parts


@pytest.mark.timeout(600)
def test_a_study_ledger_takes_200_analyses_with_random_totals():
    rng = np.random.default_rng(2026)
    budget = PrivacyBudget(1000.0, DELTA)
    charged = []
    for eps in rng.uniform(0.3, 3.0, 200):
        parts = analysis_parts(float(eps))
        budget.reserve(PartsCharge(parts))  # none refused: the budget has room
        charged.extend(parts)
    assert budget.releases == 200
    assert Counter(p for r in budget.spent for p in r.parts) == Counter(charged)
    # The ledger's total is never below an independent lower bound of the exact one.
    total = compose(charged)
    spent = budget.spent_epsilon
    assert spent >= total.epsilon(DELTA) * (1 - 1e-12)
    for eps in (0.9 * spent, spent):
        low = independent_delta(charged, eps, pessimistic=False, interval=1e-2)
        assert total.delta(eps) >= low * (1.0 - 1e-9)
    # What is left is exactly what a reservation admits; a refusal says it.
    left = budget.remaining()
    assert 0.0 < left < 1000.0
    budget.check(PartsCharge((GaussianPart(gaussian_dp_mu(left, DELTA)),)))
    with pytest.raises(BudgetExceededError, match=f"left: .*epsilon <= {left:.6g}"):
        budget.reserve(PartsCharge((GaussianPart(gaussian_dp_mu(1.01 * left, DELTA)),)))
    assert budget.releases == 200


def test_a_refusal_after_mixed_releases_says_what_is_left():
    budget = PrivacyBudget(2.0, DELTA)
    budget.reserve(PartsCharge(analysis_parts(1.0)))
    left = budget.remaining()
    said = f"left: one more release of epsilon <= {left:.6g} at delta=1e-05"
    with pytest.raises(BudgetExceededError, match=said):
        budget.reserve(PartsCharge(analysis_parts(3.0)))
    with pytest.raises(BudgetExceededError, match=said):
        budget.check(PartsCharge(analysis_parts(3.0)))
    stages = [
        ("a", PartsCharge(analysis_parts(3.0)), "one"),
        ("b", PartsCharge(analysis_parts(3.0)), "two"),
    ]
    with pytest.raises(BudgetExceededError, match=said + ".*nothing was reserved"):
        budget.reserve_together(stages)
    assert budget.releases == 1


def test_parts_of_epsilon_zero_on_the_lattice_are_their_atoms(monkeypatch):
    parts = [PureDPPart(0.01 * (i + 1)) for i in range(12)] + [ApproxDPPart(0.0, 1e-6)] * 3
    exact = compose(parts)
    lattice = forced_lattice(parts, monkeypatch)
    assert_pessimistic_and_close(exact, lattice, [0.0, 0.2, 0.5, 1.0])
    with monkeypatch.context() as patch:
        patch.setattr(accounting, "MAX_OUTCOMES", 1)
        atoms = compose([ApproxDPPart(0.0, 1e-6)] * 3)  # nothing left for the lattice
    assert atoms.delta(0.0) == pytest.approx(1 - (1 - 1e-6) ** 3, rel=1e-8)


def test_a_gaussian_refusal_says_what_is_left_too():
    budget = PrivacyBudget(1.0, DELTA)
    budget.reserve(GaussianCharge(1.0, 1 / 0.15))
    left = budget.remaining()
    said = f"left: one more release of epsilon <= {left:.6g}"
    over = gaussian_dp_mu(1.01 * left, DELTA)
    with pytest.raises(BudgetExceededError, match=said):
        budget.check(GaussianCharge(1.0, 1 / over))
    with pytest.raises(BudgetExceededError, match=said):
        budget.check(PartsCharge((GaussianPart(over),)))
    budget.check(GaussianCharge(1.0, 1 / gaussian_dp_mu(left, DELTA)))
