"""The exact accountant of mixed parts (privacy/mechanisms/accounting.py) and the budget split.

Oracles: the Gaussian profile's definition in 50-digit mpmath (negative epsilon
included), brute-force hockey-stick divergences of the product distributions (every
outcome enumerated, the Gaussian integrated numerically), and dp-accounting's PLD
accountant (an independent implementation; pessimistic, so never below the exact value).
"""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as pld
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from dask_dppca.analysis.stages import default_shares
from dask_dppca.privacy.mechanisms.accounting import (
    MAX_OUTCOMES,
    PlannedPart,
    _log_gaussian_profile,
    compose,
    composed_delta,
    composed_epsilon,
    split_budget,
)
from dask_dppca.privacy.mechanisms.calibration import gaussian_dp_delta, log_delta
from dask_dppca.privacy.mechanisms.parts import ApproxDPPart, GaussianPart, PureDPPart

#: The analysis's default shares of its three stages (the stage registry's).
SHARES = default_shares(("directions", "scree", "score_map"))

mpmath.mp.dps = 50


def profile_by_definition(epsilon: float, mu: float) -> float:
    """``Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)`` in 50 digits."""
    e, m = mpmath.mpf(epsilon), mpmath.mpf(mu)
    return float(mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2))


@pytest.mark.parametrize("epsilon", [-20.0, -3.0, -1.0, -0.1, -1e-4, -1e-12, 0.0, 0.5, 4.0])
@pytest.mark.parametrize("mu", [1e-6, 0.05, 0.7, 2.0, 8.0])
def test_gaussian_profile_holds_at_negative_epsilon(epsilon, mu):
    exact = profile_by_definition(epsilon, mu)
    scalar = math.exp(log_delta(epsilon, mu))
    vector = float(np.exp(_log_gaussian_profile(np.array([epsilon]), mu))[0])
    assert scalar == pytest.approx(exact, rel=1e-12, abs=0)
    assert vector == pytest.approx(exact, rel=1e-12, abs=0)


def test_profile_without_gaussian_parts_is_one_minus_e_to_the_epsilon():
    e = np.array([-2.0, -1e-3, 0.0, 1.0])
    got = np.exp(_log_gaussian_profile(e, 0.0))
    assert got == pytest.approx(np.maximum(0.0, -np.expm1(e)), rel=1e-15, abs=0)


# -- brute-force oracle ----------------------------------------------------------------


def _pair(part):
    """The dominating pair of one discrete part as (P, Q) probability lists."""
    if isinstance(part, PureDPPart):
        a = math.exp(part.epsilon) / (1 + math.exp(part.epsilon))
        return [a, 1 - a], [1 - a, a]
    e, d = part.epsilon, part.delta
    a = (1 - d) * math.exp(e) / (1 + math.exp(e))
    b = (1 - d) / (1 + math.exp(e))
    return [d, a, b, 0.0], [0.0, b, a, d]


def brute_force_delta(parts, epsilon):
    """H_eps of the product pair: every discrete outcome, the Gaussian by quadrature."""
    mu = math.sqrt(sum(p.mu**2 for p in parts if isinstance(p, GaussianPart)))
    discrete = [_pair(p) for p in parts if not isinstance(p, GaussianPart)]
    total = 0.0
    for outcome in itertools.product(*[range(len(p)) for p, _ in discrete]):
        p_o = math.prod(pair[0][i] for pair, i in zip(discrete, outcome))
        q_o = math.prod(pair[1][i] for pair, i in zip(discrete, outcome))
        if mu == 0:
            total += max(0.0, p_o - math.exp(epsilon) * q_o)
            continue

        def gap(x, p_o=p_o, q_o=q_o):
            return max(
                0.0,
                p_o * stats.norm.pdf(x, mu, 1) - math.exp(epsilon) * q_o * stats.norm.pdf(x, 0, 1),
            )

        total += integrate.quad(gap, -12, mu + 12, limit=400, epsabs=1e-14, epsrel=1e-10)[0]
    return total


MIXES = [
    [PureDPPart(0.3)] * 3,
    [PureDPPart(0.3), PureDPPart(0.7), ApproxDPPart(0.2, 1e-3)],
    [GaussianPart(0.8), PureDPPart(0.5)],
    [GaussianPart(0.4), GaussianPart(0.3), PureDPPart(0.2), ApproxDPPart(0.1, 1e-4)],
]


@pytest.mark.parametrize("parts", MIXES)
@pytest.mark.parametrize("epsilon", [0.0, 0.4, 1.5])
def test_composition_equals_the_brute_force_hockey_stick(parts, epsilon):
    exact = brute_force_delta(parts, epsilon)
    got = composed_delta(parts, epsilon)
    assert got >= exact * (1 - 1e-8) - 1e-13
    assert got == pytest.approx(exact, rel=1e-6, abs=1e-12)


def _dp_accounting_pld(parts):
    interval = 1e-3
    out = None
    for p in parts:
        if isinstance(p, GaussianPart):
            one = pld.from_gaussian_mechanism(1 / p.mu, value_discretization_interval=interval)
        elif isinstance(p, PureDPPart):
            one = pld.from_randomized_response(
                2 / (1 + math.exp(p.epsilon)), 2, value_discretization_interval=interval
            )
        else:
            one = pld.from_privacy_parameters(
                common.DifferentialPrivacyParameters(p.epsilon, p.delta),
                value_discretization_interval=interval,
            )
        out = one if out is None else out.compose(one)
    return out


@settings(max_examples=8, deadline=None)
@given(
    mus=st.lists(st.floats(0.05, 1.0), max_size=2),
    pure=st.lists(st.sampled_from([0.1, 0.25, 0.6]), max_size=4),
    approx=st.lists(
        st.tuples(st.sampled_from([0.1, 0.5]), st.sampled_from([1e-6, 1e-4])), max_size=2
    ),
    epsilon=st.floats(0.2, 3.0),
)
def test_composition_matches_dp_accounting(mus, pure, approx, epsilon):
    parts = [GaussianPart(m) for m in mus] + [PureDPPart(e) for e in pure]
    parts += [ApproxDPPart(e, d) for e, d in approx]
    if not parts:
        return
    ours = composed_delta(parts, epsilon)
    theirs = _dp_accounting_pld(parts)
    # PLD rounds every loss up by at most its interval (1e-3): never below the exact
    # value, and not above it once epsilon is shifted by the rounding of all the parts.
    assert theirs.get_delta_for_epsilon(epsilon) >= ours * (1 - 1e-6) - 1e-12
    shifted = theirs.get_delta_for_epsilon(epsilon + 1e-3 * len(parts))
    assert shifted <= ours * (1 + 1e-6) + 1e-12


def test_gaussian_parts_alone_are_the_closed_form():
    parts = [GaussianPart(0.5), GaussianPart(0.3), GaussianPart(0.1)]
    mu = math.sqrt(0.35)
    for eps in (0.1, 1.0, 3.0):
        assert composed_delta(parts, eps) == pytest.approx(gaussian_dp_delta(eps, mu), rel=1e-8)
    assert compose(parts).is_gaussian


def test_epsilon_is_the_smallest_that_meets_delta():
    parts = [GaussianPart(0.6), PureDPPart(0.2), PureDPPart(0.2), ApproxDPPart(0.3, 1e-7)]
    eps = composed_epsilon(parts, 1e-5)
    assert composed_delta(parts, eps) <= 1e-5
    assert composed_delta(parts, eps * (1 - 1e-6)) > 1e-5
    # tighter than summing: basic composition would claim 0.7 + Gaussian's own epsilon
    assert eps < 0.7 + composed_epsilon([GaussianPart(0.6)], 1e-5 - 1e-7)


def test_delta_atoms_beyond_delta_give_no_epsilon():
    assert composed_epsilon([ApproxDPPart(0.1, 1e-3)], 1e-4) == math.inf


def test_too_many_distinct_outcomes_compose_on_the_pessimistic_lattice():
    parts = [PureDPPart(0.01 * (i + 1)) for i in range(21)]  # 2^21 outcomes
    assert math.prod([2] * 21) > MAX_OUTCOMES
    lattice = compose(parts)  # never refused (test_accounting_lattice.py: never below exact)
    assert lattice.slack > 0.0 and lattice.losses.size < MAX_OUTCOMES
    assert compose(parts[:20]).slack == 0.0  # 2^20 outcomes: still exact
    # equal parts merge by binomial counts: 1000 of them are 1001 outcomes
    assert compose([PureDPPart(0.01)] * 1000).losses.size == 1001


# -- the split ----------------------------------------------------------------------


PLAN = [
    PlannedPart("directions", "directions", "gaussian"),
    PlannedPart("scree", "quantiles", "pure", count=5),
    PlannedPart("scree", "means", "gaussian", weight=5.0),
    PlannedPart("score_map", "histogram", "gaussian"),
]


@pytest.mark.parametrize("epsilon,delta", [(3.0, 1e-4), (0.5, 1e-8), (10.0, 1e-6)])
def test_split_spends_exactly_the_total(epsilon, delta):
    split = split_budget(epsilon, delta, PLAN, SHARES)
    spent = split.composed_epsilon()
    assert spent <= epsilon
    assert spent == pytest.approx(epsilon, rel=1e-6)
    # a little more scale would exceed the total: the bisection found the largest one
    bigger = split_budget(epsilon * 1.01, delta, PLAN, SHARES)
    assert composed_delta(bigger.all_parts, epsilon) > delta


def test_split_follows_the_public_shares():
    split = split_budget(3.0, 1e-4, PLAN, SHARES)
    strength = {
        stage: sum(
            (p.mu if isinstance(p, GaussianPart) else p.epsilon) ** 2
            for p in split.stage_parts(stage)
        )
        for stage in ("directions", "scree", "score_map")
    }
    total = sum(strength.values())
    assert strength["directions"] / total == pytest.approx(0.5)
    assert strength["scree"] / total == pytest.approx(0.25)
    means = split.part("scree", "means").mu
    quantile = split.part("scree", "quantiles").epsilon
    assert means**2 == pytest.approx(5 * quantile**2)  # weight 5 against 5 parts of weight 1
    custom = split_budget(3.0, 1e-4, PLAN, {"directions": 2, "scree": 1, "score_map": 1})
    assert custom.shares == pytest.approx(split.shares)
    assert [row["stage"] for row in split.table()] == [p.stage for p in PLAN]


@pytest.mark.parametrize(
    "shares",
    [
        {"directions": 1.0},
        {"directions": 1, "scree": 0, "score_map": 1},
        {"directions": 1, "scree": -1, "score_map": 1},
    ],
)
def test_split_needs_a_positive_share_for_every_stage(shares):
    with pytest.raises(ValueError, match="shares: stage"):
        split_budget(3.0, 1e-4, PLAN, shares)


def test_planned_parts_check_their_parameters():
    with pytest.raises(ValueError, match="kind"):
        PlannedPart("s", "x", "laplace")
    with pytest.raises(ValueError, match="count"):
        PlannedPart("s", "x", "pure", count=0)
    with pytest.raises(ValueError, match="weight"):
        PlannedPart("s", "x", "pure", weight=0.0)
