"""Theory tools (method.md section 6): subspace distances, population eigenvalues of
K_g, a first-order utility model and planner, and the breakdown lower bound."""

from __future__ import annotations

import math
import os

import numpy as np

from .transforms import Transform, resolve_transform

__all__ = [
    "sin_theta",
    "sphere_eigenvalues",
    "winsor_eigenvalues",
    "population_eigenvalues",
    "release_sigma",
    "UtilityModel",
    "plan",
    "breakdown_bound",
]

_SQRT2 = math.sqrt(2.0)


def sin_theta(V1: np.ndarray, V2: np.ndarray, form: str = "operator") -> float:
    """sin Theta distance between the column spaces of two orthonormal bases.

    Parameters
    ----------
    V1, V2 : ndarray, shape (d, m)
        Orthonormal columns (pass ``est.components_.T`` for an estimator's rows).
    form : {"operator", "frobenius"}
        ``"operator"``: ``sqrt(1 - rho_m^2)``, rho_m the smallest singular value of
        ``V1^T V2`` (Cai & Zhang 2018).  ``"frobenius"``: ``sqrt(m - ||V1^T V2||_F^2)``.

    Returns
    -------
    float
        In ``[0, 1]`` (operator) or ``[0, sqrt(m)]`` (Frobenius).
    """
    V1 = np.asarray(V1, dtype=np.float64)
    V2 = np.asarray(V2, dtype=np.float64)
    if V1.ndim == 1:
        V1 = V1[:, None]
    if V2.ndim == 1:
        V2 = V2[:, None]
    if V1.shape != V2.shape:
        raise ValueError(f"V2: shape {V2.shape} differs from V1's {V1.shape}; both must be (d, m)")
    if V1.shape[1] > V1.shape[0]:
        raise ValueError(f"V1: has more columns than rows {V1.shape}; pass a (d, m) basis")
    overlap = V1.T @ V2
    if form == "operator":
        rho = np.linalg.svd(overlap, compute_uv=False).min()
        return float(np.sqrt(max(0.0, 1.0 - min(rho, 1.0) ** 2)))
    if form == "frobenius":
        return float(np.sqrt(max(0.0, V1.shape[1] - np.sum(overlap**2))))
    raise ValueError(f"form: unknown value {form!r}; expected 'operator' or 'frobenius'")


# -- population eigenvalues of K_g ---------------------------------------------------


def _check_spectrum(spectrum) -> np.ndarray:
    lam = np.asarray(spectrum, dtype=np.float64)
    if lam.ndim != 1 or lam.size < 1 or not np.all(np.isfinite(lam)) or np.any(lam <= 0):
        raise ValueError(f"spectrum: must be a 1-D array of positive finite eigenvalues, got {spectrum!r}")
    return lam


def sphere_eigenvalues(spectrum) -> np.ndarray:
    """Eigenvalues of the population spatial-sign matrix ``K_sph`` (method.md section 6).

    ``phi_j = lambda_j * int_0^inf (1 + 2 lambda_j s)^-1 prod_k (1 + 2 lambda_k s)^-1/2 ds``,
    the same for every elliptical law (they sum to 1).  Computed with the substitution
    ``s = u / (1 - u)`` on ``[0, 1)`` by adaptive quadrature (relative error ~1e-10).

    Parameters
    ----------
    spectrum : array_like, shape (d,)
        Eigenvalues ``lambda_j > 0`` of the scatter matrix Sigma (any order, any scale).

    Returns
    -------
    ndarray, shape (d,)
        ``phi_j`` in the order of ``spectrum``.
    """
    from scipy.integrate import quad

    lam = _check_spectrum(spectrum)
    lam = lam / lam.max()  # phi is scale invariant; this keeps the integrand O(1)
    log_terms = np.log1p

    def integrand(u: float, j: int) -> float:
        if u >= 1.0:
            return 0.0
        s = u / (1.0 - u)
        log_prod = -0.5 * float(np.sum(log_terms(2.0 * lam * s)))
        return lam[j] / (1.0 + 2.0 * lam[j] * s) * math.exp(log_prod) / (1.0 - u) ** 2

    out = np.empty(lam.size)
    cache: dict[float, float] = {}
    for j in range(lam.size):
        key = float(lam[j])
        if key not in cache:  # equal eigenvalues share their phi
            cache[key] = quad(integrand, 0.0, 1.0, args=(j,), epsabs=0.0, epsrel=1e-10, limit=200)[0]
        out[j] = cache[key]
    return out


def _draw_elliptical(rng: np.random.Generator, size: int, lam: np.ndarray, df: float | None) -> np.ndarray:
    """Rows of EC_d(0, diag(lam)): Gaussian (``df=None``) or multivariate t with ``df``."""
    z = rng.standard_normal((size, lam.size)) * np.sqrt(lam)
    if df is not None:
        z /= np.sqrt(rng.chisquare(df, size=(size, 1)) / df)
    return z


def _model_transform(transform: str, radius: float | None) -> Transform:
    """The sphere or winsor transform these models cover (``resolve_transform`` checks the radius)."""
    if transform not in ("sphere", "winsor"):
        raise ValueError(f"transform: must be 'sphere' or 'winsor', got {transform!r}")
    return resolve_transform(transform, radius)


def _g(t: np.ndarray, g: Transform) -> np.ndarray:
    """Rows ``g(t)``, with ``g(0) = 0``."""
    norms = np.sqrt(np.einsum("ij,ij->i", t, t))[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(norms > 0, t * (g.xi(norms) / norms), 0.0)


def winsor_eigenvalues(spectrum, radius: float, *, df: float | None = None,
                       n_samples: int = 200_000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Monte Carlo eigenvalues of the population winsorized matrix ``K_wins^(r)``.

    ``phi_j(r) = E[T_j^2 min(1, r^2 / ||T||^2)]``, ``T = (X - X') / sqrt2`` in Sigma's
    eigenbasis, X, X' independent from the elliptical law (Gaussian for ``df=None``,
    multivariate t with ``df`` degrees of freedom otherwise).  Unlike the sphere, the
    winsorized eigenvalues depend on the law and on the scale of Sigma.

    Parameters
    ----------
    spectrum : array_like, shape (d,)
        Eigenvalues of Sigma (in the units of the data: ``r`` is compared to ``||T||``).
    radius : float
        Winsorization radius ``r``.
    df : float or None
        Degrees of freedom of the multivariate t; ``None`` for the Gaussian.
    n_samples : int
        Monte Carlo pairs.
    seed : int
        Seed of the Monte Carlo (not privacy noise).

    Returns
    -------
    phi : ndarray, shape (d,)
        The estimates, in the order of ``spectrum``.
    stderr : ndarray, shape (d,)
        Their Monte Carlo standard errors.
    """
    lam = _check_spectrum(spectrum)
    g = _model_transform("winsor", radius)
    rng = np.random.default_rng(seed)
    total = np.zeros(lam.size)
    total_sq = np.zeros(lam.size)
    done = 0
    while done < n_samples:
        size = min(50_000, n_samples - done)
        t = (_draw_elliptical(rng, size, lam, df) - _draw_elliptical(rng, size, lam, df)) / _SQRT2
        terms = _g(t, g) ** 2
        total += terms.sum(axis=0)
        total_sq += (terms**2).sum(axis=0)
        done += size
    mean = total / done
    var = np.maximum(total_sq / done - mean**2, 0.0)
    return mean, np.sqrt(var / done)


def population_eigenvalues(spectrum, transform: str = "sphere", radius: float | None = None, *,
                           df: float | None = None, n_samples: int = 200_000, seed: int = 0):
    """Eigenvalues of ``K_g`` for an elliptical law: ``(phi, stderr)``.

    ``sphere``: the exact one-dimensional integral (stderr 0); ``winsor``: Monte Carlo
    (:func:`winsor_eigenvalues`).
    """
    _model_transform(transform, radius)
    if transform == "sphere":
        phi = sphere_eigenvalues(spectrum)
        return phi, np.zeros_like(phi)
    return winsor_eigenvalues(spectrum, radius, df=df, n_samples=n_samples, seed=seed)


# -- the release's sigma, without data ----------------------------------------------


def release_sigma(n: int, d: int, epsilon: float, delta: float = 1e-6, *,
                  transform: str = "sphere", radius: float | None = None,
                  calibration: str = "analytic", n_threads: int | None = None) -> float:
    """The noise scale ``sigma`` of ``DPPCA(design="complete")`` on an (n, d) numpy input.

    Builds the plan ``fit`` builds for a numpy input (the block rule on n, d and
    ``n_threads``, complete design) and the same
    :class:`~dask_dppca.privacy.mechanism.ReleaseMechanism` with the default sampler, so
    the planner and the experiments use the estimator's sigma without computing K_hat.
    ``n_threads`` defaults to this machine's cores, the threads of the embedded cluster
    and of ``scheduler="threads"`` (the blocks, hence the rounding slack, follow it).
    ``tests/estimator/test_fit_matches_theory.py`` checks it against
    ``est.privacy_["sigma"]``, which catches a drift in how ``fit`` plans its blocks.
    """
    from .design import CompleteDesign, complete_blocks
    from .privacy.mechanism import ReleaseMechanism
    from .privacy.noise import default_sampler

    g = resolve_transform(transform, radius)
    chunks = complete_blocks(n, d, (os.cpu_count() or 1) if n_threads is None else n_threads)
    design = CompleteDesign()
    sampler = default_sampler(d * (d + 1) // 2)
    return ReleaseMechanism.plan_release(design, design.plan(chunks, d), g, epsilon, delta,
                                         calibration, sampler).sigma


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
    transform : {"sphere", "winsor"}
    radius : float, optional
        Winsor radius.
    df : float or None
        Law: multivariate t with ``df`` degrees of freedom, ``None`` for Gaussian.
    n_triples : int
        Monte Carlo size for phi (winsor) and zeta.
    seed : int
    """

    def __init__(self, spectrum, n_components: int, transform: str = "sphere",
                 radius: float | None = None, *, df: float | None = None,
                 n_triples: int = 100_000, seed: int = 0, n_draws: int = 400) -> None:
        lam = _check_spectrum(spectrum)
        if np.any(np.diff(lam) > 0):
            raise ValueError("spectrum: must be in decreasing order")
        g = _model_transform(transform, radius)
        m = int(n_components)
        if not 1 <= m < lam.size:
            raise ValueError(f"n_components: must be in 1..{lam.size - 1}, got {n_components!r}")
        self.spectrum, self.m, self.transform, self.radius, self.df = lam, m, transform, radius, df
        self.d = lam.size
        self.phi, self.phi_stderr = population_eigenvalues(lam, transform, radius, df=df,
                                                           n_samples=2 * n_triples, seed=seed)
        self.gap = float(self.phi[m - 1] - self.phi[m])
        rng = np.random.default_rng(seed + 1)
        z1 = np.zeros((self.d, self.d))
        z2 = np.zeros((self.d, self.d))
        done = 0
        while done < n_triples:
            size = min(20_000, n_triples - done)
            x1, x2, x3 = (_draw_elliptical(rng, size, lam, df) for _ in range(3))
            g12 = _g((x1 - x2) / _SQRT2, g)
            g13 = _g((x1 - x3) / _SQRT2, g)
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

    def sampling_variance(self, n: int) -> np.ndarray:
        """Variances of the (d - m, m) off-diagonal block of ``K_hat - K``."""
        n = float(n)
        m = self.m
        v = 4.0 * (n - 2) / (n * (n - 1)) * self.zeta1 + 2.0 / (n * (n - 1)) * self.zeta2
        return v[m:, :m]

    def sigma(self, n: int, epsilon: float, delta: float, calibration: str = "analytic") -> float:
        """The estimator's sigma (0 for epsilon = inf: the non-private reference)."""
        if math.isinf(epsilon):
            return 0.0
        return release_sigma(int(n), self.d, epsilon, delta, transform=self.transform,
                             radius=self.radius, calibration=calibration)

    def _tangents(self, n: int, sigma: float) -> np.ndarray:
        scale = np.sqrt((self.sampling_variance(n) + 0.5 * sigma**2) * self._inv_gap2)
        return np.linalg.norm(self._gauss * scale, ord=2, axis=(1, 2))

    def quantile(self, n: int, epsilon: float, delta: float = 1e-6, p: float = 0.5,
                 calibration: str = "analytic", *, sigma: float | None = None) -> float:
        """Predicted p-quantile of the operator sin Theta error."""
        s = self.sigma(n, epsilon, delta, calibration) if sigma is None else sigma
        tan = float(np.quantile(self._tangents(n, s), p))
        return tan / math.sqrt(1.0 + tan * tan)

    def utility_bound(self, n: int, epsilon: float, delta: float = 1e-6,
                      calibration: str = "analytic") -> dict:
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
        return {"sampling": sampling, "privacy": privacy, "gap": self.gap, "sigma": s,
                "bound": min(1.0, (sampling + privacy) / self.gap)}

    def plan_records(self, target: float, p: float = 0.9, epsilon: float = 1.0,
                     delta: float = 1e-6, calibration: str = "analytic",
                     n_max: int = 10**12) -> int:
        """Smallest n with predicted ``P(sin Theta <= target) >= p`` (``n_max + 1`` if none)."""
        ok = lambda n: self.quantile(n, epsilon, delta, p, calibration) <= target  # noqa: E731
        lo, hi = 2, 4
        while not ok(hi):
            lo, hi = hi, hi * 2
            if hi > n_max:
                return n_max + 1
        while hi - lo > max(1, lo // 200):  # 0.5% resolution
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if ok(mid) else (mid, hi)
        return hi

    def plan_epsilon(self, target: float, n: int, p: float = 0.9, delta: float = 1e-6,
                     calibration: str = "analytic") -> float:
        """Smallest epsilon with predicted ``P(sin Theta <= target) >= p`` (inf if none)."""
        if self.quantile(n, math.inf, delta, p) > target:
            return math.inf
        ok = lambda e: self.quantile(n, e, delta, p, calibration) <= target  # noqa: E731
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


def plan(target: float, spectrum, n_components: int, *, p: float = 0.9,
         n: int | None = None, epsilon: float | None = None, delta: float = 1e-6,
         transform: str = "sphere", radius: float | None = None, df: float | None = None,
         calibration: str = "analytic", seed: int = 0) -> dict:
    """How many records (given epsilon) or what epsilon (given n) for
    ``P(sin Theta <= target) >= p``.

    Give exactly one of ``n`` and ``epsilon``; the other is returned.  Uses
    :class:`UtilityModel` (first-order, every constant 1; validated against simulation
    to within a factor 2 of the measured median, docs/results.md).
    """
    if (n is None) == (epsilon is None):
        raise ValueError("plan: give exactly one of n (to get epsilon) and epsilon (to get n)")
    model = UtilityModel(spectrum, n_components, transform, radius, df=df, seed=seed)
    if n is None:
        need = model.plan_records(target, p, epsilon, delta, calibration)
        return {"n": need, "epsilon": epsilon, "gap": model.gap}
    return {"n": n, "epsilon": model.plan_epsilon(target, n, p, delta, calibration), "gap": model.gap}


# -- breakdown ---------------------------------------------------------------------------


def breakdown_bound(X, n_components: int, transform: str = "sphere", radius: float | None = None,
                    *, scheduler: str = "synchronous") -> dict:
    """Lower bound on the breakdown point of the (non-private) g-subspace of ``X``.

    Replacing k records changes a fraction ``p(k) = k (2n - k - 1) / (n (n - 1))`` of
    the pair terms, each by at most ``G^2`` in operator norm; by Weyl the top-m
    eigenspace of ``K_hat`` stays separated while ``G^2 p(k) < gap / 2``,
    ``gap = phi_m(K_hat) - phi_{m+1}(K_hat)`` (method.md section 6).

    NOT PRIVATE: computed from the exact ``K_hat`` of ``X``; a diagnostic for data you
    may look at (or synthetic data), not something to release.

    Returns
    -------
    dict
        ``k`` (largest number of replaced records certified safe, possibly 0),
        ``fraction`` (``k / n``), ``gap``, ``G``, ``n``, ``limit`` (the n -> inf limit of
        the fraction, ``1 - sqrt(1 - gap / (2 G^2))``).
    """
    from .graph import kendall_matrix

    g = resolve_transform(transform, radius)
    if not g.is_bounded:
        raise ValueError(f"transform: {g.name!r} is unbounded; the bound needs a finite G")
    k_hat = kendall_matrix(X, transform=transform, radius=radius, scheduler=scheduler)
    n, d = np.shape(X)
    m = int(n_components)
    if not 1 <= m < d:
        raise ValueError(f"n_components: must be in 1..{d - 1}, got {n_components!r}")
    ev = np.sort(np.linalg.eigvalsh(k_hat))[::-1]
    gap = float(ev[m - 1] - ev[m])
    G2 = g.bound**2
    target = gap / (2.0 * G2)  # need p(k) < target
    # p(k) = k (2n - k - 1) / (n (n - 1)) is increasing on 0 <= k <= n: solve p(k) = target.
    a = n * (n - 1) * target
    b = 2 * n - 1
    disc = b * b - 4 * a
    k = n if disc < 0 else int(math.floor((b - math.sqrt(disc)) / 2))
    k = max(0, min(k, n))
    while k > 0 and k * (2 * n - k - 1) / (n * (n - 1)) >= target:
        k -= 1
    while k < n and (k + 1) * (2 * n - k - 2) / (n * (n - 1)) < target:
        k += 1
    limit = 1.0 - math.sqrt(max(0.0, 1.0 - min(target, 1.0)))
    return {"k": int(k), "fraction": k / n, "gap": gap, "G": g.bound, "n": int(n), "limit": limit}
