"""The integer noise of the score map: the law P(y) ∝ exp(-|y|/t) at the claimed t, and
integer scales that never cost more than the epsilon they are given.

The law check is a chi-square goodness-of-fit test (false-alarm rate 1e-4) of the private
sampler's draws against the exact pmf; the same check rejects draws at half the scale
(half the noise), which a black-box audit of AboveThreshold cannot see at this cost.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dask_dppca.privacy.mechanisms.laplace import (
    MAX_SCALE,
    DiscreteLaplaceSampler,
    SeededDiscreteLaplace,
    integer_scale,
)

pytestmark = pytest.mark.filterwarnings(
    "ignore::dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning"
)

ALPHA = 1e-4
N_DRAWS = 20_000


def law_p_value(draws: np.ndarray, scale: int) -> float:
    """Chi-square p-value of ``draws`` against ``P(y) = (1-p)/(1+p) p^|y|``, p = e^(-1/t)."""
    p = math.exp(-1.0 / scale)
    edge = int(4 * scale) + 2  # cells -edge..edge, the two tails pooled
    values = np.arange(-edge, edge + 1)
    pmf = (1 - p) / (1 + p) * p ** np.abs(values)
    tail = 1.0 - pmf.sum()
    observed = np.array(
        [np.sum(draws == v) for v in values] + [np.sum(np.abs(draws) > edge)], dtype=float
    )
    expected = np.append(pmf, tail) * draws.size
    return float(stats.chisquare(observed, expected).pvalue)


@pytest.mark.statistical
@pytest.mark.parametrize("scale", [1, 3, 8])
def test_the_private_sampler_has_the_claimed_law(scale):
    draws = DiscreteLaplaceSampler().draw(scale, N_DRAWS)
    assert draws.dtype == np.int64
    assert law_p_value(draws, scale) > ALPHA


@pytest.mark.statistical
def test_the_law_check_rejects_half_the_noise():
    """BROKEN on purpose: draws at scale 4 claimed as scale 8."""
    assert law_p_value(DiscreteLaplaceSampler().draw(4, N_DRAWS), 8) < ALPHA


def test_the_seeded_double_has_the_same_law_and_is_marked_not_private():
    sampler = SeededDiscreteLaplace(0)
    assert not sampler.is_private and DiscreteLaplaceSampler().is_private
    assert law_p_value(sampler.draw(3, N_DRAWS), 3) > ALPHA


@pytest.mark.parametrize("epsilon", [2e-9, 1e-4, 0.05, 0.5, 3.0, 40.0])
def test_integer_scales_cost_at_most_epsilon_and_stay_in_range(epsilon):
    s, t = integer_scale(epsilon)
    assert 1 <= s and 1 <= t <= MAX_SCALE
    assert s / t <= epsilon - 1e-12
    assert s / t >= 0.99 * epsilon or epsilon < 1e-6  # tiny epsilons lose a little


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="epsilon"):
        integer_scale(1e-10)
    with pytest.raises(ValueError, match="scale"):
        DiscreteLaplaceSampler().draw(0, 3)
    with pytest.raises(ValueError, match="size"):
        DiscreteLaplaceSampler().draw(2, -1)
