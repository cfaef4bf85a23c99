"""Planning a release before any data is read: its sigma, and a first-order model of its
accuracy (docs/method.md, section 6).
"""

from __future__ import annotations

import math
import os

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..design import plan_blocks
from ..kernel import resolve_spatial_sign
from ..privacy import PrivacyTarget, ReleaseMechanism
from ..privacy.mechanisms.contract import make_sampler
from .theory import (
    apply_spatial_sign,
    check_spectrum,
    draw_elliptical,
    model_spatial_sign,
    population_eigenvalues,
)

__all__ = ["UtilityModel", "plan", "release_sigma"]

_SQRT2 = math.sqrt(2.0)


# -- the release's sigma, without data ----------------------------------------------


def release_sigma(
    n: int,
    d: int,
    epsilon: float,
    delta: float = 1e-6,
    *,
    spatial_sign: str = "sphere",
    radius: float | None = None,
    calibration: str = "analytic",
    n_threads: int | None = None,
) -> float:
    """The noise scale ``sigma`` of ``DPPCA(design="complete")`` on an (n, d) numpy input.

    Builds the plan ``fit`` builds for a numpy input (the block rule on n, d and
    ``n_threads``, complete design) and the same
    :class:`~dask_dppca.privacy.mechanisms.mechanism.ReleaseMechanism` with the default sampler, so
    the planner and the experiments use the estimator's sigma without computing K_hat.
    ``n_threads`` defaults to this machine's cores, the threads of the embedded cluster
    and of ``scheduler="threads"`` (the blocks, hence the rounding slack, follow it).
    Both go through :func:`~dask_dppca.design.plan_blocks`, the one owner of block
    planning; ``tests/estimator/test_fit_matches_theory.py`` checks the two sigmas agree.
    """
    g = resolve_spatial_sign(spatial_sign, radius)
    threads = (os.cpu_count() or 1) if n_threads is None else n_threads
    design, block_plan = plan_blocks(n, d, None, "complete", threads)
    sampler = make_sampler("gaussian", n_entries=d * (d + 1) // 2)
    return ReleaseMechanism.plan_release(
        design, block_plan, g, PrivacyTarget.of(epsilon, delta, calibration), sampler
    ).sigma


# -- utility: first-order perturbation model ------------------------------------------


class UtilityModel:
    """First-order model of the subspace error of g-DPPCA for an elliptical law.

    In Sigma's eigenbasis, ``K_tilde = K + S + E`` with ``S`` the U-statistic's sampling
    error and ``E`` the privacy noise.  To first order the tangent of the principal
    angles is the norm of ``M_kj = (S + E)_kj / (phi_j - phi_k)``, ``j`` in the top m,
    ``k`` outside (Davis-Kahan / Sylvester).  The sign symmetries of an elliptical law
    make the entries uncorrelated, with variances

    * sampling: ``Var(K_hat_kj) = 4 (n-2)/(n(n-1)) zeta1_kj + 2/(n(n-1)) zeta2_kj``
      (Hoeffding), ``zeta1_kj = E[h12_kj h13_kj]``, ``zeta2_kj = E[h12_kj^2]``, by Monte
      Carlo over triples;
    * privacy: ``sigma^2 / 2`` (vecd law, off-diagonal).

    ``M`` is then treated as Gaussian: its norm's median and quantiles come from a
    fixed-seed simulation of the (d - m) x m matrix, and ``sin = tan / sqrt(1 + tan^2)``.
    No constant is fitted: every constant is 1.  The paper's Theorem 3.2 has the same
    shape (gap^-1 [sampling + privacy]) with constants it does not state; this model
    is checked against simulation instead (tests/statistical/test_theory.py, docs/results.md).

    Parameters
    ----------
    spectrum : array_like, shape (d,)
        Eigenvalues of Sigma, decreasing.
    n_components : int
        m.
    spatial_sign : {"sphere", "winsor"}
    radius : float, optional
        Winsor radius.
    df : float or None
        Law: multivariate t with ``df`` degrees of freedom, ``None`` for Gaussian.
    n_triples : int
        Monte Carlo size for phi (winsor) and zeta.
    seed : int
    """

    def __init__(
        self,
        spectrum: ArrayLike,
        n_components: int,
        spatial_sign: str = "sphere",
        radius: float | None = None,
        *,
        df: float | None = None,
        n_triples: int = 100_000,
        seed: int = 0,
        n_draws: int = 400,
    ) -> None:
        lam = check_spectrum(spectrum)
        if np.any(np.diff(lam) > 0):
            raise ValueError("spectrum: must be in decreasing order")
        g = model_spatial_sign(spatial_sign, radius)
        m = int(n_components)
        if not 1 <= m < lam.size:
            raise ValueError(f"n_components: must be in 1..{lam.size - 1}, got {n_components!r}")
        self.spectrum, self.m, self.spatial_sign, self.radius, self.df = (
            lam,
            m,
            spatial_sign,
            radius,
            df,
        )
        self.d = lam.size
        self.phi, self.phi_stderr = population_eigenvalues(
            lam, spatial_sign, radius, df=df, n_samples=2 * n_triples, seed=seed
        )
        self.gap = float(self.phi[m - 1] - self.phi[m])
        rng = np.random.default_rng(seed + 1)
        z1 = np.zeros((self.d, self.d))
        z2 = np.zeros((self.d, self.d))
        done = 0
        while done < n_triples:
            size = min(20_000, n_triples - done)
            x1, x2, x3 = (draw_elliptical(rng, size, lam, df) for _ in range(3))
            g12 = apply_spatial_sign((x1 - x2) / _SQRT2, g)
            g13 = apply_spatial_sign((x1 - x3) / _SQRT2, g)
            p = g12 * g13
            q = g12 * g12
            z1 += p.T @ p
            z2 += q.T @ q
            done += size
        self.zeta1 = z1 / done
        self.zeta2 = z2 / done
        phi = self.phi
        self._inv_gap2 = 1.0 / (phi[None, :m] - phi[m:, None]) ** 2  # (d - m, m)
        self._gauss = np.random.default_rng(seed + 2).standard_normal((n_draws, self.d - m, m))

    def sampling_variance(self, n: float, n_pairs: float | None = None) -> NDArray[np.float64]:
        """Variances of the (d - m, m) off-diagonal block of ``K_hat - K``.

        ``n_pairs``: ``|P|`` of an incomplete design (a regular one); its pair term is
        then ``zeta2 / |P|`` in place of the complete design's ``2 zeta2 / (n (n - 1))``
        (first order, for a design whose records have equal degrees).
        """
        n = float(n)
        m = self.m
        pair_term = 2.0 / (n * (n - 1)) if n_pairs is None else 1.0 / float(n_pairs)
        v = 4.0 * (n - 2) / (n * (n - 1)) * self.zeta1 + pair_term * self.zeta2
        return v[m:, :m]

    def sigma(self, n: int, epsilon: float, delta: float, calibration: str = "analytic") -> float:
        """The estimator's sigma (0 for epsilon = inf: the non-private reference)."""
        if math.isinf(epsilon):
            return 0.0
        return release_sigma(
            int(n),
            self.d,
            epsilon,
            delta,
            spatial_sign=self.spatial_sign,
            radius=self.radius,
            calibration=calibration,
        )

    def _tangents(self, n: int, sigma: float, n_pairs: float | None = None) -> NDArray[np.float64]:
        variance = self.sampling_variance(n, n_pairs)
        scale = np.sqrt((variance + 0.5 * sigma**2) * self._inv_gap2)
        tangents: NDArray[np.float64] = np.linalg.norm(self._gauss * scale, ord=2, axis=(1, 2))
        return tangents

    def quantile(
        self,
        n: int,
        epsilon: float,
        delta: float = 1e-6,
        p: float = 0.5,
        calibration: str = "analytic",
        *,
        sigma: float | None = None,
        n_pairs: float | None = None,
    ) -> float:
        """Predicted p-quantile of the operator sin Theta error (``sigma``: the release's,
        when known; ``n_pairs``: ``|P|`` of an incomplete design).
        """
        s = self.sigma(n, epsilon, delta, calibration) if sigma is None else sigma
        tan = float(np.quantile(self._tangents(n, s, n_pairs), p))
        return tan / math.sqrt(1.0 + tan * tan)

    def utility_bound(
        self, n: int, epsilon: float, delta: float = 1e-6, calibration: str = "analytic"
    ) -> dict[str, float]:
        """The paper's shape, ``min(1, (sampling + privacy) / gap)``, closed form.

        ``sampling = sqrt(max_j sum_k v_kj) + sqrt(max_k sum_j v_kj)`` (the Gaussian
        matrix norm estimate of Bandeira and van Handel, constant 1) and
        ``privacy = sigma / sqrt2 * (sqrt(d - m) + sqrt(m))`` (the norm of the noise's
        off-diagonal block), ``gap = phi_m - phi_{m+1}``.  Constants chosen as 1, not
        recovered from the paper (its constants are unstated).
        """
        s = self.sigma(n, epsilon, delta, calibration)
        v = self.sampling_variance(n)
        sampling = math.sqrt(v.sum(axis=0).max()) + math.sqrt(v.sum(axis=1).max())
        privacy = s / _SQRT2 * (math.sqrt(self.d - self.m) + math.sqrt(self.m))
        return {
            "sampling": sampling,
            "privacy": privacy,
            "gap": self.gap,
            "sigma": s,
            "bound": min(1.0, (sampling + privacy) / self.gap),
        }

    def plan_records(
        self,
        target: float,
        p: float = 0.9,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        calibration: str = "analytic",
        n_max: int = 10**12,
    ) -> int:
        """Smallest n with predicted ``P(sin Theta <= target) >= p`` (``n_max + 1`` if none)."""

        def ok(n: int) -> bool:
            return self.quantile(n, epsilon, delta, p, calibration) <= target

        lo, hi = 2, 4
        while not ok(hi):
            lo, hi = hi, hi * 2
            if hi > n_max:
                return n_max + 1
        while hi - lo > max(1, lo // 200):  # 0.5% resolution
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if ok(mid) else (mid, hi)
        return hi

    def plan_epsilon(
        self,
        target: float,
        n: int,
        p: float = 0.9,
        delta: float = 1e-6,
        calibration: str = "analytic",
    ) -> float:
        """Smallest epsilon with predicted ``P(sin Theta <= target) >= p`` (inf if none)."""
        if self.quantile(n, math.inf, delta, p) > target:
            return math.inf

        def ok(e: float) -> bool:
            return self.quantile(n, e, delta, p, calibration) <= target

        lo, hi = 1e-3, 1e-3
        while not ok(hi):
            lo, hi = hi, hi * 2
            if hi > 1e6:
                return math.inf
        for _ in range(40):
            mid = math.sqrt(lo * hi)
            lo, hi = (lo, mid) if ok(mid) else (mid, hi)
            if hi / lo < 1.005:
                break
        return hi


def plan(
    target: float,
    spectrum: ArrayLike,
    n_components: int,
    *,
    p: float = 0.9,
    n: int | None = None,
    epsilon: float | None = None,
    delta: float = 1e-6,
    spatial_sign: str = "sphere",
    radius: float | None = None,
    df: float | None = None,
    calibration: str = "analytic",
    seed: int = 0,
) -> dict[str, float]:
    """How many records (given epsilon) or what epsilon (given n) for
    ``P(sin Theta <= target) >= p``.

    Give exactly one of ``n`` and ``epsilon``; the other is returned.  Uses
    :class:`UtilityModel` (first-order, every constant 1; validated against simulation
    to within a factor 2 of the measured median, docs/results.md).
    """
    if (n is None) == (epsilon is None):
        raise ValueError("plan: give exactly one of n (to get epsilon) and epsilon (to get n)")
    model = UtilityModel(spectrum, n_components, spatial_sign, radius, df=df, seed=seed)
    if n is None:
        assert epsilon is not None  # exactly one of n and epsilon, checked above
        need = model.plan_records(target, p, epsilon, delta, calibration)
        return {"n": need, "epsilon": epsilon, "gap": model.gap}
    return {
        "n": n,
        "epsilon": model.plan_epsilon(target, n, p, delta, calibration),
        "gap": model.gap,
    }
