"""Float-safe Gaussian noise for the release (docs/method.md, sections 5 and 13; docs/privacy.md).

The mechanism adds ``E = vecd^-1(zeta)``, ``zeta ~ N(0, sigma^2 I)``, to ``K_hat``:
diagonal entries get variance ``sigma^2``, off-diagonal ones ``sigma^2 / 2``, all
independent.  Noise must be *float-safe* (Mironov 2012): the low-order bits of a noisy
value must not depend on the exact input.  Every private sampler here therefore
returns a deterministic function of an integer ``round(x / L) + Y``, ``Y`` an integer
noise draw whose law does not depend on ``x`` (L a power of two far below sigma):

* :class:`OpenDPSampler` -- OpenDP's exact discrete Gaussian over a float vector.
* :class:`LatticeSampler` -- the same construction, vectorised in numpy: a discrete
  Gaussian on the integers (Canonne, Kamath & Steinke 2020, Algorithm 3) from OS
  entropy, about 100x faster than OpenDP.
* :class:`SeededSampler` -- numpy's Generator; NOT private, for tests and examples.

:func:`~dask_dppca.privacy.mechanisms.contract.make_sampler` makes each of them (the one
sampler factory of the package).

Each private sampler reports the two small corrections its guarantee needs:
:meth:`NoiseSampler.sensitivity_slack` (the rounding of the input to the lattice,
added to the sensitivity) and :meth:`NoiseSampler.privacy_excess` (how far its sampled
law may be, multiplicatively, from the rounded continuous Gaussian; passed to
:func:`~dask_dppca.privacy.mechanisms.calibration.calibrate_sigma` as ``excess``).
docs/privacy.md proves both.
"""

from __future__ import annotations

import math
import os
import warnings
from abc import ABC, abstractmethod
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ...validation import positive_finite

__all__ = [
    "DEFAULT_LATTICE_BITS",
    "OPENDP_MAX_ENTRIES",
    "LatticeSampler",
    "NoiseSampler",
    "NonPrivateRandomStateWarning",
    "OSEntropy",
    "OpenDPSampler",
    "SeededSampler",
    "add_symmetric_noise",
    "default_sampler",
    "discrete_laplace",
    "lattice_step",
    "vecd",
    "vecd_inverse",
]

_SQRT2 = math.sqrt(2.0)
_UNIT_ROUNDOFF = 2.0**-53

#: log2(sigma / L): the lattice step L sits this many binary orders below sigma.
#: 40 makes the discrete Gaussian indistinguishable from the rounded continuous one
#: far below the float-rounding terms (docs/privacy.md), while every integer drawn
#: stays below 2^53, exact in float64.
DEFAULT_LATTICE_BITS = 40

#: make_sampler("gaussian") uses OpenDP up to this many entries (d <= 154), LatticeSampler
#: above: OpenDP costs ~11 us per entry on that 40-bit grid (~40 us on every float),
#: <= 0.15 s at this size (benchmarks/bench_noise.py).
OPENDP_MAX_ENTRIES = 12_000


class NonPrivateRandomStateWarning(UserWarning):
    """Noise drawn from a seeded numpy generator: reproducible, and NOT private."""


# -- vecd -------------------------------------------------------------------------


def vecd(matrix: ArrayLike) -> NDArray[np.float64]:
    """Half-vectorisation that is an isometry from Frobenius to l2 (Schwartzman 2016).

    Parameters
    ----------
    matrix : ndarray, shape (d, d)
        A symmetric matrix; only its diagonal and upper triangle are read.

    Returns
    -------
    ndarray, shape (d (d + 1) / 2,)
        The diagonal, then ``sqrt(2)`` times the strict upper triangle in
        ``np.triu_indices(d, 1)`` order.
    """
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"matrix: must be square 2-D, got shape {m.shape}")
    d = m.shape[0]
    return np.concatenate([np.diag(m), _SQRT2 * m[np.triu_indices(d, 1)]])


def vecd_inverse(vector: ArrayLike, d: int) -> NDArray[np.float64]:
    """Inverse of :func:`vecd`: the symmetric ``d x d`` matrix with ``vecd(M) = vector``.

    Parameters
    ----------
    vector : ndarray, shape (d (d + 1) / 2,)
    d : int
        Matrix size, >= 0.

    Returns
    -------
    ndarray, shape (d, d)
        Symmetric.
    """
    if not (isinstance(d, (int, np.integer)) and d >= 0):
        raise ValueError(f"d: must be an integer >= 0, got {d!r}")
    v = np.asarray(vector, dtype=np.float64)
    expected = d * (d + 1) // 2
    if v.shape != (expected,):
        raise ValueError(f"vector: must have shape ({expected},) for d={d}, got {v.shape}")
    out = np.zeros((d, d))
    out[np.diag_indices(d)] = v[:d]
    rows, cols = np.triu_indices(d, 1)
    off = v[d:] / _SQRT2
    out[rows, cols] = off
    out[cols, rows] = off
    return out


# -- validation -------------------------------------------------------------------------


def _check_sigma(sigma: float) -> float:
    return positive_finite("sigma", sigma)


def _check_values(values: ArrayLike) -> NDArray[np.float64]:
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1:
        raise ValueError(f"values: must be 1-D, got shape {v.shape}")
    # The release only passes K_hat entries, bounded by G^2 by construction; a
    # non-finite value is a bug upstream, never silently noised.
    if not np.all(np.isfinite(v)):
        raise ValueError("values: must all be finite")
    return v


def _check_n_entries(n_entries: int) -> int:
    if not (isinstance(n_entries, (int, np.integer)) and n_entries >= 0):
        raise ValueError(f"n_entries: must be an integer >= 0, got {n_entries!r}")
    return int(n_entries)


def lattice_step(sigma: float, lattice_bits: int = DEFAULT_LATTICE_BITS) -> float:
    """The lattice step ``L = 2^(floor(log2 sigma) - lattice_bits)``.

    Parameters
    ----------
    sigma : float
        Noise scale > 0.
    lattice_bits : int
        ``log2`` of the smallest ratio ``sigma / L``.

    Returns
    -------
    float
        A power of two with ``2^lattice_bits <= sigma / L < 2^(lattice_bits + 1)``.
    """
    return math.ldexp(1.0, _lattice_exponent(sigma, lattice_bits))


def _lattice_exponent(sigma: float, lattice_bits: int) -> int:
    """``log2`` of :func:`lattice_step`: ``floor(log2 sigma) - lattice_bits``."""
    s = _check_sigma(sigma)
    _, exponent = math.frexp(s)  # s = m 2^e, 0.5 <= m < 1, so floor(log2 s) = e - 1
    step_exponent = exponent - 1 - lattice_bits
    if step_exponent < -1022:
        # Subnormal steps would make the final scaling inexact.
        raise ValueError(f"sigma: {s!r} is too small for a lattice {lattice_bits} bits below it")
    return step_exponent


# -- the sampler interface ------------------------------------------------------------


class NoiseSampler(ABC):
    """Adds independent ``N(0, sigma^2)`` noise to each entry of a vector.

    Subclasses implement ``_add_noise``; :meth:`add_noise` validates first.  A
    private sampler draws from OS entropy and is float-safe (docs/privacy.md); it
    reports the corrections its guarantee needs through :meth:`sensitivity_slack` and
    :meth:`privacy_excess`.

    Attributes
    ----------
    is_private : bool
        False only for samplers that must never be used for a real release.
    """

    is_private: bool = True

    def add_noise(self, values: ArrayLike, sigma: float) -> NDArray[np.float64]:
        """Return ``values + noise``, noise i.i.d. ``N(0, sigma^2)`` per entry.

        Parameters
        ----------
        values : ndarray, shape (n,)
            Finite values.
        sigma : float
            Noise standard deviation > 0.

        Returns
        -------
        ndarray, shape (n,)
            A new array.
        """
        v = _check_values(values)
        s = _check_sigma(sigma)
        if v.size == 0:
            return v.copy()
        return self._add_noise(v, s)

    @abstractmethod
    def _add_noise(self, values: NDArray[np.float64], sigma: float) -> NDArray[np.float64]:
        """``values + noise`` for validated, non-empty ``values`` and ``sigma``."""

    def sensitivity_slack(self, n_entries: int, sigma: float) -> float:
        """Extra l2 sensitivity to add before calibrating (input rounding); 0 by default.

        Parameters
        ----------
        n_entries : int
            Number of noised entries: ``d (d + 1) / 2`` for a ``d x d`` symmetric matrix.
        sigma : float
            The (vecd-scale) noise standard deviation.

        Returns
        -------
        float
        """
        _check_n_entries(n_entries)
        _check_sigma(sigma)
        return 0.0

    def privacy_excess(self, n_entries: int, sigma: float) -> float:
        """Bound ``A`` on the sampled law's log-ratio to the ideal one; 0 by default.

        The sampled mechanism is (epsilon + 2A, e^A delta)-DP whenever the continuous
        Gaussian mechanism with the slack-inflated sensitivity is (epsilon, delta)-DP
        (docs/privacy.md); pass ``A`` to ``calibrate_sigma(..., excess=A)``.

        Parameters
        ----------
        n_entries : int
        sigma : float

        Returns
        -------
        float
        """
        _check_n_entries(n_entries)
        _check_sigma(sigma)
        return 0.0

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _lattice_excess(n_entries: int, min_ratio: float) -> float:
    """A(N) = N c0 + c1 H(N) for per-entry bounds ``|log ratio| <= c0 + c1 y^2/s^2``.

    ``c0, c1`` carry the float error of the acceptance probabilities (100 u and 20 u,
    u = 2^-53, derived in docs/privacy.md with a 4-ulp allowance for exp) and the gap
    between the discrete and the rounded Gaussian (``1 / (8 s^2)``).  ``H(N)`` bounds
    ``sum y^2/s^2`` outside an event of probability e^-10000 (Laurent-Massart).
    """
    gap = 1.0 / (8.0 * min_ratio * min_ratio)
    c0 = 100.0 * _UNIT_ROUNDOFF + gap
    c1 = 20.0 * _UNIT_ROUNDOFF + gap
    return _excess_from_bounds(n_entries, c0, c1)


def _excess_from_bounds(n_entries: int, c0: float, c1: float) -> float:
    tail_log = 1e4  # L in P(chi2_N >= N + 2 sqrt(N L) + 2 L) <= e^-L
    h = 1.01 * (n_entries + 2.0 * math.sqrt(n_entries * tail_log) + 2.0 * tail_log)
    return (n_entries * c0 + c1 * h) * (1.0 + 1e-12)


class OpenDPSampler(NoiseSampler):
    """OpenDP's Gaussian over a float vector: exact discrete Gaussian, float-safe.

    ``dp.m.make_gaussian`` on ``vector_domain(atom_domain(T=float))`` rounds each value
    to the nearest multiple of ``2^k`` exactly (rational arithmetic), adds an exact
    discrete Gaussian of scale ``sigma / 2^k`` and converts the integer back to the
    nearest float: the output is a function of an integer only (OpenDP proof documents,
    ``MakeNoise_VectorDomain_for_FloatExpFamily``).

    Parameters
    ----------
    lattice_bits : int or None, default None
        ``None``: OpenDP's default ``k = -1074`` (every float is a lattice point, no
        rounding, ~40 us per entry).  An integer ``b`` in [20, 60]: ``k = floor(log2 sigma) - b``,
        ~4x faster, at the cost of a rounding slack ``2^k sqrt(2 n)`` (about
        ``sigma 2^-b sqrt(2 n)``, negligible for ``b >= 30``).
    """

    def __init__(self, lattice_bits: int | None = None) -> None:
        if lattice_bits is not None and not (
            isinstance(lattice_bits, (int, np.integer)) and 20 <= lattice_bits <= 60
        ):
            raise ValueError(
                f"lattice_bits: must be None or an integer in [20, 60], got {lattice_bits!r}"
            )
        self.lattice_bits = lattice_bits

    def _k(self, sigma: float) -> int:
        if self.lattice_bits is None:
            return -1074
        return max(-1074, _lattice_exponent(sigma, self.lattice_bits))

    def _add_noise(self, values: NDArray[np.float64], sigma: float) -> NDArray[np.float64]:
        # The modules themselves, not opendp.prelude: the prelude also imports OpenDP's
        # scikit-learn extras, about 2 s of a fresh worker's release (0.2 s this way).
        from opendp.domains import atom_domain, vector_domain
        from opendp.measurements import make_gaussian
        from opendp.metrics import l2_distance
        from opendp.mod import enable_features

        enable_features("contrib")
        measurement = make_gaussian(
            vector_domain(atom_domain(T=float, nan=False), size=values.size),
            l2_distance(T=float),
            scale=sigma,
            k=None if self.lattice_bits is None else self._k(sigma),
        )
        return np.asarray(measurement(values.tolist()), dtype=np.float64)

    def sensitivity_slack(self, n_entries: int, sigma: float) -> float:
        """``2^k sqrt(2 n_entries)``: input rounding to the 2^k grid (0 when k = -1074).

        Valid for ``add_noise`` on ``n_entries`` values at ``sigma`` and for
        :func:`add_symmetric_noise` with ``n_entries = d (d + 1) / 2`` at (vecd-scale)
        ``sigma``; see :meth:`LatticeSampler.sensitivity_slack`.
        """
        n = _check_n_entries(n_entries)
        s = _check_sigma(sigma)
        k = self._k(s)
        if k == -1074:  # floats are already multiples of 2^-1074: no rounding
            return 0.0
        return math.ldexp(1.0, k) * math.sqrt(2.0 * n) * (1.0 + 1e-12)

    def privacy_excess(self, n_entries: int, sigma: float) -> float:
        """Discrete vs rounded continuous Gaussian only: OpenDP samples exactly."""
        n = _check_n_entries(n_entries)
        s = _check_sigma(sigma)
        # The off-diagonal entries use sigma / sqrt2: the smallest ratio sigma / 2^k.
        ratio = (s / _SQRT2) / math.ldexp(1.0, self._k(s / _SQRT2))  # inf for k = -1074
        # 1e-300 stands for the true, positive but unrepresentable, gap when ratio is huge.
        gap = max(1.0 / (8.0 * ratio * ratio), 1e-300)
        return _excess_from_bounds(n, gap, gap)

    def __repr__(self) -> str:
        return f"OpenDPSampler(lattice_bits={self.lattice_bits!r})"


# -- the vectorised lattice sampler ---------------------------------------------------------


class _Words(Protocol):
    """A source of uniform random 64-bit words (the OS; tests inject others)."""

    def words(self, n: int) -> NDArray[np.uint64]:
        """``n`` independent uniform 64-bit words."""
        ...


class _Entropy(_Words, Protocol):
    """Uniform random words and fair bits."""

    def bits(self, n: int) -> NDArray[np.bool_]:
        """``n`` independent fair bits as a bool array."""
        ...


class OSEntropy:
    """Uniform random words from the operating system's CSPRNG (``os.urandom``).

    The entropy of the private samplers: :class:`LatticeSampler` here, and the discrete
    Laplace noise of :mod:`.laplace` (:func:`discrete_laplace`).
    """

    def words(self, n: int) -> NDArray[np.uint64]:
        """``n`` independent uniform 64-bit words."""
        if n == 0:
            return np.empty(0, dtype=np.uint64)
        return np.frombuffer(os.urandom(8 * n), dtype=np.uint64)

    def bits(self, n: int) -> NDArray[np.bool_]:
        """``n`` independent fair bits as a bool array."""
        raw = np.frombuffer(os.urandom((n + 7) // 8), dtype=np.uint8)
        return np.unpackbits(raw)[:n].astype(bool)


_EXP_MINUS_ONE = math.exp(-1.0)


def _bernoulli(probability: NDArray[np.float64], entropy: _Words) -> NDArray[np.bool_]:
    """Bernoulli draws; exactly ``P = ceil(p 2^53) / 2^53`` for each float ``p`` in [0, 1].

    ``W = k 2^-53`` with ``k`` a uniform 53-bit integer is exact in float64, and
    ``W < p`` holds for exactly ``ceil(p 2^53)`` values of ``k``.
    """
    k = entropy.words(probability.size) >> np.uint64(11)
    return k.astype(np.float64) * 2.0**-53 < probability


def _uniform_below(bound: int, n: int, entropy: _Words) -> NDArray[np.int64]:
    """``n`` exact uniform integers in ``{0, ..., bound - 1}`` (rejection, no modulo bias)."""
    out = np.empty(n, dtype=np.uint64)
    pending = np.arange(n)
    limit = (2**64 // bound) * bound  # words >= limit would bias the modulo
    while pending.size:
        w = entropy.words(pending.size)
        ok = np.ones(pending.size, dtype=bool) if limit == 2**64 else w < np.uint64(limit)
        out[pending[ok]] = w[ok] % np.uint64(bound)
        pending = pending[~ok]
    return out.astype(np.int64)


def _bernoulli_exp_minus(gamma: NDArray[np.float64], entropy: _Words) -> NDArray[np.bool_]:
    """Bernoulli(exp(-gamma)) for ``gamma >= 0``, as CKS 2020 Algorithm 1 splits it.

    ``exp(-gamma) = exp(-frac) * exp(-1)^floor(gamma)``: every factor is >= e^-1, so
    the 53-bit quantisation of :func:`_bernoulli` stays a relative error <= e 2^-53
    however large gamma is (no truncated tail).
    """
    whole = np.floor(gamma)
    accept = _bernoulli(np.exp(-(gamma - whole)), entropy)  # gamma - floor is exact
    remaining = whole
    live = np.flatnonzero(accept & (remaining > 0))
    while live.size:
        ok = _bernoulli(np.full(live.size, _EXP_MINUS_ONE), entropy)
        accept[live[~ok]] = False
        remaining[live] -= 1.0
        live = live[ok & (remaining[live] > 0)]
    return accept


def _geometric_exp_minus_one(n: int, entropy: _Words) -> NDArray[np.int64]:
    """Number of successes of Bernoulli(e^-1) before the first failure."""
    out = np.zeros(n, dtype=np.int64)
    live = np.arange(n)
    while live.size:
        ok = _bernoulli(np.full(live.size, _EXP_MINUS_ONE), entropy)
        live = live[ok]
        out[live] += 1
    return out


def discrete_laplace(t: int, n: int, entropy: _Entropy, max_v: int) -> NDArray[np.int64]:
    """``n`` draws with ``P(y) ∝ exp(-|y| / t)`` on the integers (CKS 2020, Algorithm 2).

    Draws with ``V > max_v`` are rejected, which keeps ``|y| < 2^52`` exact in float64;
    their probability is below exp(-max_v) and docs/privacy.md counts it in the tail.
    The proposal of the discrete Gaussian here, and the integer noise of :mod:`.laplace`.

    Parameters
    ----------
    t : int
        The scale, >= 1.
    n : int
        How many draws.
    entropy : OSEntropy or another source of ``words(n)`` and ``bits(n)``
        Where the random bits come from (only :class:`OSEntropy` is private).
    max_v : int
        The largest geometric part kept (``2**52 // t - 1`` keeps ``|y| < 2^52``).

    Returns
    -------
    numpy.ndarray of int64
        ``n`` draws.
    """
    out = np.empty(n, dtype=np.int64)
    pending = np.arange(n)
    t_float = float(t)
    while pending.size:
        m = pending.size
        u = _uniform_below(t, m, entropy)
        keep = _bernoulli(np.exp(-(u.astype(np.float64) / t_float)), entropy)
        v = _geometric_exp_minus_one(m, entropy)
        negative = entropy.bits(m)
        x = u + t * np.minimum(v, max_v)
        good = keep & (v <= max_v) & ~(negative & (x == 0))
        out[pending[good]] = np.where(negative[good], -x[good], x[good])
        pending = pending[~good]
    return out


def _discrete_gaussian(s: float, n: int, entropy: _Entropy) -> NDArray[np.int64]:
    """``n`` draws from ``N_Z(0, s^2)``: ``P(y) ∝ exp(-y^2 / (2 s^2))`` (CKS 2020, Alg. 3).

    A discrete Laplace proposal of scale ``t = floor(s) + 1``, accepted with probability
    ``exp(-(|y| - s^2/t)^2 / (2 s^2))``.  Valid for any ``s > 0`` with ``s < 2^46``.
    """
    t = math.floor(s) + 1
    max_v = 2**52 // t - 1
    center = (s * s) / t
    two_s2 = 2.0 * (s * s)
    out = np.empty(n, dtype=np.int64)
    pending = np.arange(n)
    while pending.size:
        y = discrete_laplace(t, pending.size, entropy, max_v)
        gap = np.abs(y).astype(np.float64) - center
        accept = _bernoulli_exp_minus(gap * gap / two_s2, entropy)
        out[pending[accept]] = y[accept]
        pending = pending[~accept]
    return out


class LatticeSampler(NoiseSampler):
    """Vectorised float-safe Gaussian noise: ``L (round(x / L) + Y)``, ``Y ~ N_Z(0, (sigma/L)^2)``.

    ``L = 2^(floor(log2 sigma) - lattice_bits)`` is a power of two, ``Y`` a discrete
    Gaussian on the integers sampled from ``os.urandom`` bits with the exact rejection
    algorithm of Canonne, Kamath & Steinke (2020); only its acceptance probabilities
    are floating point (bounded in :meth:`privacy_excess`).  The output is
    ``fl(round(x/L) + Y) * L``: a function of the integer ``round(x/L) + Y`` alone, so
    its low bits carry nothing about ``x`` (docs/privacy.md).

    The rounding of ``x`` to the lattice is handled by the *caller*: add
    :meth:`sensitivity_slack` to the sensitivity before calibrating.

    Parameters
    ----------
    lattice_bits : int, default 40
        ``sigma / L >= 2^lattice_bits``; between 30 and 45.
    """

    def __init__(self, lattice_bits: int = DEFAULT_LATTICE_BITS) -> None:
        if not (isinstance(lattice_bits, (int, np.integer)) and 30 <= lattice_bits <= 45):
            raise ValueError(f"lattice_bits: must be an integer in [30, 45], got {lattice_bits!r}")
        self.lattice_bits = int(lattice_bits)
        self._entropy = OSEntropy()

    def _add_noise(self, values: NDArray[np.float64], sigma: float) -> NDArray[np.float64]:
        exponent = _lattice_exponent(sigma, self.lattice_bits)
        step = math.ldexp(1.0, exponent)
        scaled = np.ldexp(values, -exponent)  # exact: a power-of-two scaling
        if not np.all(np.isfinite(scaled)):
            raise ValueError(f"values: too large for a lattice step of {step!r}")
        base = np.rint(scaled)  # nearest lattice index, |base - x/L| <= 1/2
        noise = _discrete_gaussian(sigma / step, values.size, self._entropy)
        # |noise| < 2^52 converts exactly; the float sum is the correctly rounded
        # integer base + noise, and ldexp by a normal power of two is exact.
        noised: NDArray[np.float64] = np.ldexp(base + noise.astype(np.float64), exponent)
        return noised

    def sensitivity_slack(self, n_entries: int, sigma: float) -> float:
        """``L(sigma) sqrt(2 n_entries)``: the l2 room for rounding inputs to the lattice.

        Rounding moves each entry by at most ``L/2``, so two neighbouring inputs' lattice
        indices differ by at most ``||x - x'|| / L + sqrt(n)``.  For
        :func:`add_symmetric_noise` (``n_entries = d (d + 1) / 2``, ``sigma`` on the vecd
        scale) off-diagonal entries are noised at ``sigma / sqrt2`` on a lattice no
        coarser than ``L(sigma)`` and count ``sqrt2`` in vecd's norm: hence the
        ``sqrt(2 n)``, which also covers a plain vector.
        """
        n = _check_n_entries(n_entries)
        step = lattice_step(_check_sigma(sigma), self.lattice_bits)
        return step * math.sqrt(2.0 * n) * (1.0 + 1e-12)

    def privacy_excess(self, n_entries: int, sigma: float) -> float:
        """Bound A(n) (docs/privacy.md): about ``1.3e-14 n``, e.g. 6e-8 at n = 4.5e6."""
        n = _check_n_entries(n_entries)
        _check_sigma(sigma)
        return _lattice_excess(n, 2.0**self.lattice_bits)

    def __getstate__(self) -> dict[str, Any]:
        return {"lattice_bits": self.lattice_bits}

    def __setstate__(self, state: dict[str, Any]) -> None:
        type(self).__init__(self, state["lattice_bits"])

    def __repr__(self) -> str:
        return f"LatticeSampler(lattice_bits={self.lattice_bits})"


def seeded_generator(message: str, seed: int | None) -> np.random.Generator:
    """A numpy generator from ``seed`` for a test-only (NOT private) sampler, after warning
    ``message`` (:class:`NonPrivateRandomStateWarning`) where the sampler is made.
    """
    warnings.warn(message, NonPrivateRandomStateWarning, stacklevel=3)
    return np.random.default_rng(seed)


class SeededSampler(NoiseSampler):
    """Noise from ``numpy.random.default_rng(seed)``: reproducible and NOT private.

    Neither the generator (predictable from its output) nor its floating-point
    Gaussians (Mironov 2012) are fit for a release.  Constructing one issues a
    :class:`NonPrivateRandomStateWarning`.

    Parameters
    ----------
    seed : int or None
        Seed of the generator.
    """

    is_private = False

    def __init__(self, seed: int | None) -> None:
        self.seed = seed
        self._rng = seeded_generator(
            "SeededSampler: noise from a seeded numpy generator is reproducible and NOT "
            "differentially private; use it for tests and examples only",
            seed,
        )

    def _add_noise(self, values: NDArray[np.float64], sigma: float) -> NDArray[np.float64]:
        return values + self._rng.normal(0.0, sigma, size=values.size)

    def __repr__(self) -> str:
        return f"SeededSampler(seed={self.seed!r})"


def default_sampler(n_entries: int) -> NoiseSampler:
    """Deprecated (removed in 0.3): ``make_sampler("gaussian", n_entries=n_entries)``.

    :func:`~dask_dppca.privacy.mechanisms.contract.make_sampler` is the one sampler
    factory: OpenDP's exact sampler on the grid ``2^(floor(log2 sigma) - 40)`` up to
    :data:`OPENDP_MAX_ENTRIES` entries (d <= 154), :class:`LatticeSampler` above.

    Parameters
    ----------
    n_entries : int
        ``d (d + 1) / 2`` for a ``d x d`` symmetric matrix.

    Returns
    -------
    NoiseSampler
    """
    warnings.warn(
        "default_sampler is deprecated and will be removed in 0.3; use "
        "dask_dppca.privacy.make_sampler('gaussian', n_entries=n_entries)",
        DeprecationWarning,
        stacklevel=2,
    )
    # The factory's rule, kept here until the removal (the factory imports this module).
    n = _check_n_entries(n_entries)
    if n <= OPENDP_MAX_ENTRIES:
        return OpenDPSampler(lattice_bits=DEFAULT_LATTICE_BITS)
    return LatticeSampler()


def _scale_down_by_sqrt2(sigma: float) -> float:
    """A float >= sigma / sqrt(2): rounded up by 3 ulps past two rounding errors."""
    value = sigma / _SQRT2
    for _ in range(3):
        value = math.nextafter(value, math.inf)
    return value


def add_symmetric_noise(
    matrix: ArrayLike, sigma: float, sampler: NoiseSampler
) -> NDArray[np.float64]:
    """``matrix + vecd^-1(zeta)``, ``zeta ~ N(0, sigma^2 I)``: the mechanism's noise.

    Diagonal entries get ``N(0, sigma^2)``, off-diagonal ones ``N(0, sigma^2 / 2)``,
    independent, mirrored to keep the result exactly symmetric (docs/method.md, section 5).
    The noise is added to the entries directly, diagonal at ``sigma`` and strict upper
    triangle at (a float just above) ``sigma / sqrt2``: the same law as
    ``vecd^-1(vecd(M) + zeta)``, but without multiplying the private entries by
    ``sqrt2`` in floating point before the noise, which would perturb the input by a
    rounding error the sensitivity would have to cover.

    Parameters
    ----------
    matrix : ndarray, shape (d, d)
        Symmetric; only the diagonal and upper triangle are read.
    sigma : float
        The vecd-scale noise standard deviation from calibration.
    sampler : NoiseSampler

    Returns
    -------
    ndarray, shape (d, d)
        Symmetric.
    """
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"matrix: must be square 2-D, got shape {m.shape}")
    s = _check_sigma(sigma)
    d = m.shape[0]
    rows, cols = np.triu_indices(d, 1)
    out = np.empty_like(m)
    out[np.diag_indices(d)] = sampler.add_noise(np.diag(m).copy(), s)
    off = sampler.add_noise(m[rows, cols], _scale_down_by_sqrt2(s))
    out[rows, cols] = off
    out[cols, rows] = off
    return out
