"""What public quantities say about a release before it is drawn: warnings, never data.

A release can be valid and useless.  Two cases are visible from public quantities
alone (n, d, epsilon, delta, sigma, the spatial sign's bound G), so they are warned
about at plan time, before any data is read, and the same numbers go into the privacy
report:

* **The noise swamps every possible signal.**  Each pair's term ``g g^T`` has trace
  ``||g||^2 <= G^2``, so ``||K_hat||_2 <= trace K_hat <= G^2`` whatever the data.  The
  noise ``E`` (vecd law: diagonal ``N(0, sigma^2)``, off-diagonal ``N(0, sigma^2/2)``) is
  a Wigner matrix whose spectral norm is about ``2 sqrt(d)`` times its off-diagonal
  standard deviation: ``sigma sqrt(2 d)``.  Their ratio :func:`signal_to_noise` is an
  upper bound on what any data set can show; below 1 the released directions are
  mostly noise (:class:`NoisyReleaseWarning`).  Above 1 nothing is promised: the signal
  that matters is an eigengap of K_hat, usually far below ``G^2``.
* **delta above 1/n.**  A mechanism that publishes one record chosen at random outright
  is (0, 1/n)-DP; a delta at or above ``1/n`` permits that (:class:`LargeDeltaWarning`).

Neither warning looks at the data: they are the same for every data set of this shape.
"""

from __future__ import annotations

import math

__all__ = [
    "LargeDeltaWarning",
    "NoisyReleaseWarning",
    "PrivacyWarning",
    "noise_spectral_norm",
    "release_warnings",
    "signal_to_noise",
]


class PrivacyWarning(UserWarning):
    """A release that is valid but weak, told from public quantities only.

    Examples
    --------
    >>> import dask_dppca as dd
    >>> issubclass(dd.NoisyReleaseWarning, dd.PrivacyWarning)
    True
    """


class NoisyReleaseWarning(PrivacyWarning):
    """The noise's spectral norm exceeds the largest possible signal ``||K_hat||_2 <= G^2``.

    Examples
    --------
    >>> import warnings
    >>> import numpy as np
    >>> import dask_dppca as dd
    >>> X = np.random.default_rng().standard_normal((20, 4))  # far too few records
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = dd.DPPCA(2, epsilon=0.1, delta=1e-6, scheduler="threads").fit(X)
    >>> any(issubclass(w.category, dd.NoisyReleaseWarning) for w in caught)
    True
    """


class LargeDeltaWarning(PrivacyWarning):
    """delta is above ``1/n``: the guarantee then permits publishing a record outright.

    Examples
    --------
    >>> import warnings
    >>> import numpy as np
    >>> import dask_dppca as dd
    >>> X = np.random.default_rng().standard_normal((500, 3))
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = dd.DPPCA(2, epsilon=1.0, delta=0.01, scheduler="threads").fit(X)  # 0.01 > 1/n
    >>> any(issubclass(w.category, dd.LargeDeltaWarning) for w in caught)
    True
    """


def noise_spectral_norm(sigma: float, n_features: int) -> float:
    """Typical spectral norm of the symmetric noise matrix: ``sigma sqrt(2 d)``.

    The noise's off-diagonal entries have standard deviation ``sigma / sqrt(2)``, and the
    spectral norm of a d x d Wigner matrix is about ``2 sqrt(d)`` times that.
    """
    return float(sigma) * math.sqrt(2.0 * n_features)


def signal_to_noise(bound: float, sigma: float, n_features: int) -> float:
    """``G^2 / (sigma sqrt(2 d))``: the largest possible signal over the noise's size."""
    return float(bound) ** 2 / noise_spectral_norm(sigma, n_features)


def release_warnings(
    n_samples: int, n_features: int, bound: float, sigma: float, delta: float
) -> list[tuple[type[PrivacyWarning], str]]:
    """The warnings a release of these public quantities deserves, as (category, message)."""
    found: list[tuple[type[PrivacyWarning], str]] = []
    ratio = signal_to_noise(bound, sigma, n_features)
    if ratio < 1.0:
        found.append(
            (
                NoisyReleaseWarning,
                f"the noise swamps the largest possible signal: the noise's spectral norm "
                f"is about {noise_spectral_norm(sigma, n_features):.3g} (sigma={sigma:.3g}, "
                f"d={n_features}) while ||K_hat||_2 <= G^2 = {bound**2:.3g} for any data "
                f"(signal to noise at most {ratio:.3g}); the components will be mostly noise. "
                "More records, a larger epsilon or delta, or fewer features help",
            )
        )
    if delta > 1.0 / n_samples:
        found.append(
            (
                LargeDeltaWarning,
                f"delta={delta:g} is above 1/n = {1.0 / n_samples:.3g}: a guarantee with "
                "delta >= 1/n allows publishing a record outright; choose delta well below "
                "1/n (for example 1/n^2)",
            )
        )
    return found
