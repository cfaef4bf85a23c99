"""Synthetic data with known principal directions (demo, tests, benchmarks).

Elliptical rows (:func:`make_elliptical`) and skewed independent components
(:func:`make_skewed`), each with scatter ``directions diag(spectrum) directions^T``.

Data generation is not privacy noise: these generators take an explicit seed so that
examples are reproducible.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "make_contaminated",
    "make_elliptical",
    "make_skewed",
    "random_directions",
    "spiked_spectrum",
    "write_elliptical_zarr",
]

SKEWED_MARGINALS = ("lognormal", "pareto")


def spiked_spectrum(d: int, n_spikes: int = 2, spike: float = 10.0) -> np.ndarray:
    """Eigenvalues ``spike * (n_spikes - k)`` for the first ``n_spikes``, then 1."""
    values = np.ones(d)
    values[:n_spikes] = spike * np.arange(n_spikes, 0, -1)
    return values


def random_directions(d: int, seed: int) -> np.ndarray:
    """A random orthogonal (d, d) matrix; column k is the k-th true principal direction."""
    q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    return q * np.sign(np.diag(r))


def make_elliptical(
    n: int,
    spectrum: np.ndarray,
    directions: np.ndarray,
    *,
    df: float | None = 1.0,
    outlier_fraction: float = 0.0,
    outlier_distance: float = 1e4,
    seed: int,
) -> np.ndarray:
    """Rows from a multivariate t (``df``; ``None`` for Gaussian) with scatter
    ``directions diag(spectrum) directions^T``, plus gross outliers.

    The outliers form a tight cluster at ``outlier_distance`` along the weakest true
    direction: the covariance's leading direction flips to it, g-DPPCA's does not.
    """
    rng = np.random.default_rng(seed)
    d = len(spectrum)
    z = rng.standard_normal((n, d)) * np.sqrt(spectrum)
    if df is not None:
        z /= np.sqrt(rng.chisquare(df, size=(n, 1)) / df)
    x = z @ directions.T
    n_out = int(round(outlier_fraction * n))
    if n_out:
        rows = rng.choice(n, size=n_out, replace=False)
        x[rows] = outlier_distance * directions[:, -1] + rng.standard_normal((n_out, d))
    return x


def make_contaminated(
    n: int,
    spectrum: np.ndarray,
    directions: np.ndarray,
    *,
    df: float = 2.0,
    centre: float = 100.0,
    outlier_fraction: float = 0.01,
    outlier_scale: float = 150.0,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Multivariate t rows (as :func:`make_elliptical`, about ``centre`` in every
    coordinate) with gross outliers spread in every direction; ``(x, outlier mask)``.

    Each row is an outlier with probability ``outlier_fraction``, then drawn as ``centre``
    plus ``outlier_scale`` times a standard normal vector: far from the bulk along every
    direction, so they own the top quantiles of any projection (the score map's frame).
    """
    rng = np.random.default_rng(seed)
    d = len(spectrum)
    z = rng.standard_normal((n, d)) * np.sqrt(spectrum)
    w = np.sqrt(rng.chisquare(df, (n, 1)) / df)
    x = centre + (z / w) @ directions.T
    bad = rng.random(n) < outlier_fraction
    x[bad] = centre + (outlier_scale * rng.standard_normal((int(bad.sum()), d))) @ directions.T
    return x, bad


def make_skewed(
    n: int,
    spectrum: np.ndarray,
    directions: np.ndarray,
    *,
    marginal: str = "pareto",
    pareto_shape: float = 1.5,
    seed: int,
) -> np.ndarray:
    """Rows ``directions @ (sqrt(spectrum) * z)`` with iid skewed, mean-zero components z.

    Not elliptical, so a sign covariance about any single centre is biased, while the
    differences ``x_i - x_j`` have independent *symmetric* components: the pairwise
    ``K`` then has exactly ``directions`` as eigenvectors, ordered by ``spectrum``
    (flipping the sign of one component's difference leaves the law unchanged, which
    kills every off-diagonal term; exchangeability orders the diagonal).

    Parameters
    ----------
    n : int
        Rows.
    spectrum, directions : ndarray
        As in :func:`make_elliptical`.
    marginal : {"lognormal", "pareto"}
        ``"lognormal"``: exp(N(0, 1)) standardised to mean 0, variance 1 (so the
        covariance is the scatter).  ``"pareto"``: Lomax (Pareto II) with shape
        ``pareto_shape`` and scale 1, centred at its mean; with the default 1.5 the mean
        exists and the variance is infinite.
    pareto_shape : float, default 1.5
        > 1 (so that the mean used for centring exists).
    seed : int
        Seed of the generator (data generation, not privacy noise).
    """
    if marginal not in SKEWED_MARGINALS:
        raise ValueError(f"marginal: must be one of {SKEWED_MARGINALS}, got {marginal!r}")
    if not pareto_shape > 1.0:
        raise ValueError(f"pareto_shape: must be > 1 (the mean must exist), got {pareto_shape!r}")
    rng = np.random.default_rng(seed)
    d = len(spectrum)
    if marginal == "lognormal":
        z = (rng.lognormal(0.0, 1.0, size=(n, d)) - np.exp(0.5)) / np.sqrt((np.e - 1.0) * np.e)
    else:
        z = rng.pareto(pareto_shape, size=(n, d)) - 1.0 / (pareto_shape - 1.0)
    return (z * np.sqrt(spectrum)) @ directions.T


def write_elliptical_zarr(
    path: str,
    n: int,
    spectrum: np.ndarray,
    directions: np.ndarray,
    *,
    chunk_rows: int = 8192,
    seed: int,
    **kwargs,
):
    """Write :func:`make_elliptical` rows to a Zarr array chunk by chunk (bounded memory).

    Chunk ``k`` uses the seed ``(seed, k)``.  Returns the ``zarr.Array``.
    """
    import zarr

    store = zarr.open_array(
        path, mode="w", shape=(n, len(spectrum)), chunks=(chunk_rows, len(spectrum)), dtype="f8"
    )
    for k, start in enumerate(range(0, n, chunk_rows)):
        stop = min(start + chunk_rows, n)
        store[start:stop] = make_elliptical(
            stop - start,
            spectrum,
            directions,
            seed=np.random.SeedSequence([seed, k]).generate_state(1)[0],
            **kwargs,
        )
    return store
