"""Discrete Laplace noise on integers: the pure-DP noise of the score map (docs/privacy.md).

The private quantile (:mod:`.quantile`, AboveThreshold) and the sparse histogram
(:mod:`.histogram`) add noise to *integer* counts, so their noise can be integer too:
``P(y) ∝ exp(-|y| / t)`` on the integers (the two-sided geometric law), sampled exactly
from OS entropy by Canonne, Kamath & Steinke (2020, Algorithm 2), the sampler
:mod:`.noise` already uses inside its discrete Gaussian.  Integer noise on integer counts
gives integer outputs: nothing in a low-order bit of a float can carry the exact count
(Mironov 2012).

A count of sensitivity 1 released at epsilon ``e`` needs ``t = 1 / e``; ``t`` must be an
integer, so the counts are first multiplied by a public integer ``s`` and the noise drawn
at ``t = ceil(s / e')``: :func:`integer_scale` picks ``(s, t)`` with ``s / t <= e``.

* :class:`DiscreteLaplaceSampler`: private (OS entropy).
* :class:`SeededDiscreteLaplace`: numpy's seeded generator; NOT private, tests only.

The noisy arg-max of integer scores (the scree's pair quantiles) is integer-score noise
too: :func:`opendp_selector` (OpenDP's exact ``make_noisy_max``, private) and
:class:`SeededSelector` (NOT private, tests only).  Every one of these is made by
:func:`~dask_dppca.privacy.mechanisms.contract.make_sampler`, the package's one sampler
factory.
"""

from __future__ import annotations

import math
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from ...validation import positive_finite
from .noise import OSEntropy, discrete_laplace, seeded_generator

__all__ = [
    "EPSILON_MARGIN",
    "MAX_SCALE",
    "DiscreteLaplaceSampler",
    "IntegerNoise",
    "SeededDiscreteLaplace",
    "SeededSelector",
    "integer_noise",
    "integer_scale",
    "opendp_selector",
]

#: ``select(scores, scale) -> index``: the noisy arg-max of integer scores.
Selector = Callable[[NDArray[np.int64], float], int]

#: Largest noise scale ``t``: the sampler's rejection of ``|y| >= 2^52`` then cuts a tail
#: of probability below ``exp(-2^52 / t) = exp(-2^20)``, which the guarantee neglects.
MAX_SCALE = 2**32

#: Absolute room left below each epsilon for the sampler's floating-point acceptance
#: probabilities (each shifted draw's log-ratio is off by < 1e-14; docs/privacy.md).
EPSILON_MARGIN = 1e-12

#: The multiplier ``s`` aimed at: makes ``s / t`` within 2^-16 (relative) of the target.
_TARGET_MULTIPLIER = 2**16


def integer_scale(epsilon: float) -> tuple[int, int]:
    """``(s, t)``: integers with ``s / t <= epsilon - EPSILON_MARGIN`` and ``t <= MAX_SCALE``.

    A sensitivity-1 integer count ``c`` released as ``s c + Y``, ``Y`` discrete Laplace of
    scale ``t``, is ``s / t``-DP: shifting ``Y`` by ``s`` changes its probability by a
    factor of at most ``exp(s / t)``.

    Parameters
    ----------
    epsilon : float
        The epsilon one unit of change may cost, > 1e-9.

    Returns
    -------
    (int, int)
    """
    eps = positive_finite("epsilon", epsilon)
    if eps <= 1e-9:
        raise ValueError(f"epsilon: must be > 1e-9 for integer noise, got {eps!r}")
    target = eps - EPSILON_MARGIN
    s = max(1, min(_TARGET_MULTIPLIER, math.floor(target * MAX_SCALE / 2)))
    t = math.ceil(s / target)
    while s / t > target:  # float division is monotone; guard its rounding
        t += 1
    if t > MAX_SCALE:
        raise ValueError(f"epsilon: {eps!r} is too small for integer noise")
    return s, t


class IntegerNoise(ABC):
    """Integer noise with ``P(y) ∝ exp(-|y| / t)``.

    Attributes
    ----------
    is_private : bool
        False only for sources that must never be used for a real release.
    """

    is_private: bool = True

    def draw(self, scale: int, size: int) -> NDArray[np.int64]:
        """``size`` independent draws at integer ``scale`` (``t``).

        Parameters
        ----------
        scale : int
            ``t`` in ``[1, MAX_SCALE]``.
        size : int
            Number of draws, >= 0.

        Returns
        -------
        ndarray of int64, shape (size,)
        """
        if not (isinstance(scale, (int, np.integer)) and 1 <= scale <= MAX_SCALE):
            raise ValueError(f"scale: must be an integer in [1, {MAX_SCALE}], got {scale!r}")
        if not (isinstance(size, (int, np.integer)) and size >= 0):
            raise ValueError(f"size: must be an integer >= 0, got {size!r}")
        if size == 0:
            return np.zeros(0, dtype=np.int64)
        return self._draw(int(scale), int(size))

    @abstractmethod
    def _draw(self, scale: int, size: int) -> NDArray[np.int64]:
        """Validated draws."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class DiscreteLaplaceSampler(IntegerNoise):
    """Exact discrete Laplace from ``os.urandom`` (Canonne, Kamath & Steinke 2020, Alg. 2)."""

    def __init__(self) -> None:
        self._entropy = OSEntropy()

    def _draw(self, scale: int, size: int) -> NDArray[np.int64]:
        return discrete_laplace(scale, size, self._entropy, 2**52 // scale - 1)

    def __getstate__(self) -> dict[str, object]:
        return {}

    def __setstate__(self, state: dict[str, object]) -> None:
        self._entropy = OSEntropy()


class SeededDiscreteLaplace(IntegerNoise):
    """The same law from ``numpy.random.default_rng(seed)``: reproducible and NOT private.

    A difference of two geometric variables; for tests only.  Constructing one issues a
    :class:`~dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning`.

    Parameters
    ----------
    seed : int or None
    """

    is_private = False

    def __init__(self, seed: int | None) -> None:
        self.seed = seed
        self._rng = seeded_generator(
            "SeededDiscreteLaplace: noise from a seeded numpy generator is reproducible and "
            "NOT differentially private; use it for tests only",
            seed,
        )

    def _draw(self, scale: int, size: int) -> NDArray[np.int64]:
        p = 1.0 - math.exp(-1.0 / scale)  # success probability: P(G = k) = (1-p)^k p
        g = self._rng.geometric(p, size=(2, size)) - 1
        out: NDArray[np.int64] = (g[0] - g[1]).astype(np.int64)
        return out

    def __repr__(self) -> str:
        return f"SeededDiscreteLaplace(seed={self.seed!r})"


def opendp_selector(scores: NDArray[np.int64], scale: float) -> int:
    """OpenDP's ``make_noisy_max`` (exact sampling, OS entropy) on integer scores."""
    from opendp.domains import atom_domain, vector_domain
    from opendp.measurements import make_noisy_max
    from opendp.measures import max_divergence
    from opendp.metrics import linf_distance
    from opendp.mod import enable_features

    enable_features("contrib")
    measurement = make_noisy_max(
        vector_domain(atom_domain(T="i64")), linf_distance(T="i64"), max_divergence(), scale
    )
    return int(measurement([int(s) for s in scores]))


class SeededSelector:
    """A noisy arg-max from ``numpy.random.default_rng(seed)``: reproducible and NOT private.

    Adds Gumbel noise of scale ``scale / 2`` in floating point; for tests and examples
    only.  Constructing one issues a
    :class:`~dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning`.

    Parameters
    ----------
    seed : int or None
    """

    is_private = False

    def __init__(self, seed: int | None) -> None:
        self.seed = seed
        self._rng = seeded_generator(
            "SeededSelector: a noisy max from a seeded numpy generator is reproducible and "
            "NOT differentially private; use it for tests only",
            seed,
        )

    def __call__(self, scores: NDArray[np.int64], scale: float) -> int:
        """The index of the largest noisy score."""
        noise = self._rng.gumbel(0.0, scale / 2.0, len(scores))
        return int(np.argmax(np.asarray(scores, dtype=np.float64) + noise))

    def __repr__(self) -> str:
        return f"SeededSelector(seed={self.seed!r})"


def integer_noise(random_state: int | None) -> IntegerNoise:
    """Deprecated (removed in 0.3): ``make_sampler("discrete_laplace", random_state)``.

    :func:`~dask_dppca.privacy.mechanisms.contract.make_sampler` is the one sampler factory.
    """
    warnings.warn(
        "integer_noise is deprecated and will be removed in 0.3; use "
        "dask_dppca.privacy.make_sampler('discrete_laplace', random_state)",
        DeprecationWarning,
        stacklevel=2,
    )
    # The factory's own rule (contract.make_sampler), kept here until the removal: the
    # factory's module imports this one, so this one cannot call it.
    return DiscreteLaplaceSampler() if random_state is None else SeededDiscreteLaplace(random_state)
