"""Theory (docs/method.md, section 6): population eigenvalues of K_g for an elliptical
law, and the Monte Carlo pieces the utility model
(:mod:`dask_dppca.planning.utility`) shares with them.

The breakdown bound of the (non-private) g-subspace is
``dask_dppca.decomposition.reference.breakdown_bound``.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..kernel import SpatialSign, resolve_spatial_sign

__all__ = [
    "apply_spatial_sign",
    "check_spectrum",
    "draw_elliptical",
    "model_spatial_sign",
    "population_eigenvalues",
    "sphere_eigenvalues",
    "winsor_eigenvalues",
]

_SQRT2 = math.sqrt(2.0)


# -- population eigenvalues of K_g ---------------------------------------------------


def check_spectrum(spectrum: ArrayLike) -> NDArray[np.float64]:
    """A spectrum as a float64 array, checked: 1-D, non-empty, positive and finite.

    Parameters
    ----------
    spectrum : array_like, shape (d,)
        Eigenvalues of a scatter matrix.

    Returns
    -------
    ndarray, shape (d,)
        The eigenvalues as float64, in the order given.

    Raises
    ------
    ValueError
        Naming ``spectrum``, when it is not such an array.
    """
    lam = np.asarray(spectrum, dtype=np.float64)
    if lam.ndim != 1 or lam.size < 1 or not np.all(np.isfinite(lam)) or np.any(lam <= 0):
        raise ValueError(
            f"spectrum: must be a 1-D array of positive finite eigenvalues, got {spectrum!r}"
        )
    return lam


def sphere_eigenvalues(spectrum: ArrayLike) -> NDArray[np.float64]:
    """Eigenvalues of the population spatial-sign matrix ``K_sph`` (docs/method.md, section 6).

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

    lam = check_spectrum(spectrum)
    lam = lam / lam.max()  # phi is scale invariant; this keeps the integrand O(1)
    log_terms = np.log1p

    def integrand(u: float, j: int) -> float:
        if u >= 1.0:
            return 0.0
        s = u / (1.0 - u)
        log_prod = -0.5 * float(np.sum(log_terms(2.0 * lam * s)))
        lam_j = float(lam[j])
        return lam_j / (1.0 + 2.0 * lam_j * s) * math.exp(log_prod) / (1.0 - u) ** 2

    out = np.empty(lam.size)
    cache: dict[float, float] = {}
    for j in range(lam.size):
        key = float(lam[j])
        if key not in cache:  # equal eigenvalues share their phi
            cache[key] = float(
                quad(integrand, 0.0, 1.0, args=(j,), epsabs=0.0, epsrel=1e-10, limit=200)[0]
            )
        out[j] = cache[key]
    return out


def draw_elliptical(
    rng: np.random.Generator, size: int, lam: NDArray[np.float64], df: float | None
) -> NDArray[np.float64]:
    """Rows of ``EC_d(0, diag(lam))``: Gaussian (``df=None``) or multivariate t with ``df``.

    Parameters
    ----------
    rng : numpy.random.Generator
        The Monte Carlo's generator (simulation, not privacy noise).
    size : int
        Rows to draw.
    lam : ndarray, shape (d,)
        The scatter matrix's eigenvalues (its diagonal in its eigenbasis).
    df : float or None
        Degrees of freedom of the multivariate t; ``None`` for the Gaussian.

    Returns
    -------
    ndarray, shape (size, d)
    """
    z = rng.standard_normal((size, lam.size)) * np.sqrt(lam)
    if df is not None:
        z /= np.sqrt(rng.chisquare(df, size=(size, 1)) / df)
    return z


def model_spatial_sign(spatial_sign: str, radius: float | None) -> SpatialSign:
    """The sphere or winsor spatial sign these models cover (``resolve_spatial_sign``
    checks the radius).

    Parameters
    ----------
    spatial_sign : {"sphere", "winsor"}
        The spatial sign's name.
    radius : float or None
        The winsor radius (``None`` for the sphere).

    Returns
    -------
    SpatialSign

    Raises
    ------
    ValueError
        Naming ``spatial_sign`` for another name, or the radius when it is invalid.
    """
    if spatial_sign not in ("sphere", "winsor"):
        raise ValueError(f"spatial_sign: must be 'sphere' or 'winsor', got {spatial_sign!r}")
    return resolve_spatial_sign(spatial_sign, radius)


def apply_spatial_sign(t: NDArray[np.float64], g: SpatialSign) -> NDArray[np.float64]:
    """The spatial sign of each row: ``g(t) = t xi(||t||) / ||t||``, with ``g(0) = 0``.

    Parameters
    ----------
    t : ndarray, shape (size, d)
        Rows (pair differences ``(x_i - x_j) / sqrt2`` in the models).
    g : SpatialSign
        The spatial sign (its radial map ``xi``).

    Returns
    -------
    ndarray, shape (size, d)
    """
    norms = np.sqrt(np.einsum("ij,ij->i", t, t))[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(norms > 0, t * (g.xi(norms) / norms), 0.0)


def winsor_eigenvalues(
    spectrum: ArrayLike,
    radius: float,
    *,
    df: float | None = None,
    n_samples: int = 200_000,
    seed: int = 0,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
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
    lam = check_spectrum(spectrum)
    g = model_spatial_sign("winsor", radius)
    rng = np.random.default_rng(seed)
    total = np.zeros(lam.size)
    total_sq = np.zeros(lam.size)
    done = 0
    while done < n_samples:
        size = min(50_000, n_samples - done)
        t = (draw_elliptical(rng, size, lam, df) - draw_elliptical(rng, size, lam, df)) / _SQRT2
        terms = apply_spatial_sign(t, g) ** 2
        total += terms.sum(axis=0)
        total_sq += (terms**2).sum(axis=0)
        done += size
    mean = total / done
    var = np.maximum(total_sq / done - mean**2, 0.0)
    return mean, np.sqrt(var / done)


def population_eigenvalues(
    spectrum: ArrayLike,
    spatial_sign: str = "sphere",
    radius: float | None = None,
    *,
    df: float | None = None,
    n_samples: int = 200_000,
    seed: int = 0,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Eigenvalues of ``K_g`` for an elliptical law: ``(phi, stderr)``.

    ``sphere``: the exact one-dimensional integral (stderr 0); ``winsor``: Monte Carlo
    (:func:`winsor_eigenvalues`).
    """
    model_spatial_sign(spatial_sign, radius)
    if spatial_sign == "sphere":
        phi = sphere_eigenvalues(spectrum)
        return phi, np.zeros_like(phi)
    assert radius is not None  # model_spatial_sign: a winsor spatial sign has a radius
    return winsor_eigenvalues(spectrum, radius, df=df, n_samples=n_samples, seed=seed)
