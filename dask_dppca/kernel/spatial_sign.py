"""Generalized spatial signs g_xi(t) = xi(||t||) t / ||t|| (docs/method.md, section 2).

A spatial sign is described by its scale function ``xi`` and, for private use, its bound
``G = sup xi``.  The kernel never calls ``g`` directly on a difference vector: it needs
the pair weight ``w(s2) = xi(sqrt(s2))**2 / s2`` (docs/method.md, section 3) for the fast
matrix-product path, and ``xi(norm)`` for the exact path that handles ill-conditioned
pairs.  Both are vectorised and both are *clamped* to the declared bound, so that even
a misbehaving custom ``xi`` cannot produce a pair term larger than ``G**2`` (the
sensitivity proof needs that bound for every pair, docs/privacy.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..validation import positive_finite

__all__ = [
    "MAX_BOUND",
    "MIN_BOUND",
    "SpatialSign",
    "bound_in_range",
    "custom",
    "identity",
    "resolve_spatial_sign",
    "sphere",
    "winsor",
]

# Norms at which a custom xi is checked against its declared bound when it is built.
_CHECK_NORMS = np.concatenate([[0.0], np.logspace(-300, 300, 601), [np.inf]])

#: Accepted range of a bound G (the winsor radius, a custom xi's bound).  Inside it the
#: kernel's fast-path weights stay finite normal floats at every data scale, and no sum
#: of pair terms (each at most 4 CONDITION_LIMIT G^2) can overflow, so the computed
#: K_hat keeps its rounding bound whatever the data (kernel/rounding.py, docs/privacy.md).  A
#: bound outside it would make the release's behaviour depend on the data (an overflow
#: for some data sets, lost precision for others).
MIN_BOUND = 1e-100
MAX_BOUND = 1e100
_NAMES = ("sphere", "winsor", "identity", "custom")


@dataclass(frozen=True)
class SpatialSign:
    """A generalized spatial sign, described by its scale function.

    Use the factories :func:`sphere`, :func:`winsor`, :func:`custom` (and the
    non-private :func:`identity`) rather than building this directly.  A spatial sign
    built directly is checked the same way: its ``bound`` must be the true ``sup xi``
    of its name (1 for the sphere, the radius for winsor, ``inf`` for the identity),
    and a radius or custom bound must lie in ``[MIN_BOUND, MAX_BOUND]``; otherwise
    ``ValueError``.

    Attributes
    ----------
    name : str
        ``"sphere"``, ``"winsor"``, ``"identity"`` or ``"custom"``.
    bound : float
        ``G = sup_s xi(s)``; ``inf`` for the unbounded identity.
    radius : float or None
        The winsorization radius ``r`` (public), in the units of
        ``t = (x_i - x_j) / sqrt(2)``.

    Examples
    --------
    >>> import dask_dppca as dd
    >>> g = dd.winsor(2.0)
    >>> isinstance(g, dd.SpatialSign), g.name, g.bound
    (True, 'winsor', 2.0)
    """

    name: str
    bound: float
    radius: float | None = None
    # Compared by identity: two custom spatial signs are equal only with the same xi.
    xi_function: Callable[[NDArray[np.float64]], ArrayLike] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # The kernel computes g from the name (and radius, or xi for a custom), while the
        # privacy layer trusts ``bound``: a spatial sign whose bound does not match its g
        # must not exist (SpatialSign("identity", bound=1.0) would under-report the
        # sensitivity without limit).
        expected = {"sphere": 1.0, "winsor": self.radius, "identity": math.inf}
        if self.name not in _NAMES:
            raise ValueError(f"spatial_sign: unknown name {self.name!r}; expected one of {_NAMES}")
        if self.name == "winsor":
            bound_in_range("radius", self.radius)
        if self.name == "custom":
            if not callable(self.xi_function):
                raise ValueError(
                    "spatial_sign: a 'custom' SpatialSign needs a callable xi_function"
                )
            bound_in_range("bound", self.bound)
        elif self.xi_function is not None:
            raise ValueError(f"spatial_sign: a {self.name!r} SpatialSign takes no xi_function")
        if self.name != "winsor" and self.radius is not None:
            raise ValueError(
                f"spatial_sign: a {self.name!r} SpatialSign takes no radius, got {self.radius!r}"
            )
        if self.name in expected and self.bound != expected[self.name]:
            raise ValueError(
                f"spatial_sign: a {self.name!r} SpatialSign has bound {expected[self.name]!r}, "
                f"got {self.bound!r}; build it with dask_dppca.{self.name}(...)"
            )

    @property
    def is_bounded(self) -> bool:
        """True when ``bound`` is finite, i.e. the spatial sign may be used privately."""
        return math.isfinite(self.bound)

    def xi(self, norm: ArrayLike) -> NDArray[np.float64]:
        """Length ``xi(||t||)`` of ``g(t)`` for the given norms (``inf`` allowed).

        The result lies in ``[0, bound]``; non-finite values of a custom ``xi`` count
        as 0 (documented bounded treatment).
        """
        norms = np.asarray(norm, dtype=np.float64)
        if self.name == "sphere":
            return np.ones_like(norms)
        if self.name == "winsor":
            assert self.radius is not None  # __post_init__: a winsor sign has a radius
            return np.minimum(norms, self.radius)
        if self.name == "identity":
            return norms.copy()
        # A pair whose norm overflowed gets xi at the largest float: its limit for any
        # monotone xi, where xi(inf) may be NaN (e.g. s / (1 + s)).
        finite_norm = np.minimum(norms, np.finfo(np.float64).max)
        assert self.xi_function is not None  # __post_init__: a custom sign has one
        with np.errstate(all="ignore"):
            raw = np.asarray(self.xi_function(finite_norm), dtype=np.float64)
        raw = np.broadcast_to(raw, norms.shape)
        return np.clip(np.where(np.isfinite(raw), raw, 0.0), 0.0, self.bound)

    def weight(self, squared_norm: ArrayLike) -> NDArray[np.float64]:
        """Pair weight ``w(s2) = xi(sqrt(s2))**2 / s2`` for ``s2 > 0``.

        ``g(t) g(t)^T = w(||t||^2) t t^T``.  Callers pass only ``s2`` in the kernel's
        fast-path range (positive, neither subnormal nor near overflow); the kernel
        routes every other pair to its exact path, which uses :meth:`xi`.
        """
        s2 = np.asarray(squared_norm, dtype=np.float64)
        # kernel.tiles._weights_pass inlines these formulas for numba: keep in step
        if self.name == "sphere":
            return 1.0 / s2
        if self.name == "winsor":
            assert self.radius is not None  # __post_init__: a winsor sign has a radius
            return np.minimum(1.0, (self.radius * self.radius) / s2)
        if self.name == "identity":
            return np.ones_like(s2)
        xi = self.xi(np.sqrt(s2))
        return (xi * xi) / s2


def sphere() -> SpatialSign:
    """The spatial sign ``g(t) = t / ||t||``; ``xi = 1``, bound ``G = 1``.

    Examples
    --------
    >>> import dask_dppca as dd
    >>> dd.sphere().bound
    1.0
    """
    return SpatialSign(name="sphere", bound=1.0)


def winsor(radius: float) -> SpatialSign:
    """Winsorization ``g(t) = t min(1, r / ||t||)``; ``xi(s) = min(r, s)``, ``G = r``.

    Parameters
    ----------
    radius : float
        Public radius ``r`` in the units of ``t = (x_i - x_j) / sqrt(2)``, between
        ``MIN_BOUND = 1e-100`` and ``MAX_BOUND = 1e100``.  It must not be tuned on the
        data.

    Examples
    --------
    >>> import dask_dppca as dd
    >>> g = dd.winsor(3.0)  # a PUBLIC radius, never tuned on the data
    >>> g.radius, g.bound
    (3.0, 3.0)
    """
    r = bound_in_range("radius", radius)
    return SpatialSign(name="winsor", bound=r, radius=r)


def identity() -> SpatialSign:
    """The identity ``g(t) = t`` (covariance).  Unbounded: a non-private reference only."""
    return SpatialSign(name="identity", bound=math.inf)


def custom(xi: Callable[[NDArray[np.float64]], ArrayLike], bound: float) -> SpatialSign:
    """A user-supplied bounded scale function.

    Parameters
    ----------
    xi : callable
        Vectorised ``xi(norm) -> length`` on arrays of norms (``norm >= 0``, ``inf``
        included).  It must be a fixed public function, not tuned on the data.
    bound : float
        Declared ``G = sup xi``, between ``MIN_BOUND`` and ``MAX_BOUND``.  ``xi`` is
        checked against it on a grid of norms from
        1e-300 to 1e300 when the spatial sign is built, and its values are clamped to
        ``[0, bound]`` whenever it is used, so the privacy proof holds even between
        grid points.

    Raises
    ------
    ValueError
        If ``bound`` is not a number in ``[MIN_BOUND, MAX_BOUND]``, or ``xi`` exceeds it, is
        negative, or is not finite on the check grid.

    Examples
    --------
    >>> import numpy as np
    >>> import dask_dppca as dd
    >>> g = dd.custom(lambda s: np.minimum(np.sqrt(s), 2.0), bound=2.0)
    >>> g.name, g.bound
    ('custom', 2.0)
    """
    if not callable(xi):
        raise TypeError(f"spatial_sign: a custom xi must be callable, got {type(xi).__name__}")
    g_bound = bound_in_range("bound", bound)
    grid = _CHECK_NORMS[1:-1]
    values = _xi_values(xi, grid.copy())
    # The kernel calls xi on tiles of pairs (2-D) as well: the same rule there.
    _xi_values(xi, grid[: 2 * (len(grid) // 2)].reshape(2, -1).copy())
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ValueError("spatial_sign: custom xi must return finite values >= 0 for every norm")
    worst = float(values.max())
    if worst > g_bound * (1 + 1e-12):
        raise ValueError(
            f"spatial_sign: custom xi reaches {worst!r}, above its declared bound {g_bound!r}; "
            "an unbounded or under-declared xi is not private"
        )
    return SpatialSign(name="custom", bound=g_bound, xi_function=xi)


def _xi_values(
    xi: Callable[[NDArray[np.float64]], ArrayLike], norms: NDArray[np.float64]
) -> NDArray[np.float64]:
    """``xi(norms)`` as float64 of the shape of ``norms`` (a single number is a constant
    xi); any other shape, or a value that is not a number, is a ValueError naming it.
    """
    try:
        with np.errstate(all="ignore"):
            raw = np.asarray(xi(norms), dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"spatial_sign: custom xi must return numbers, one per norm "
            f"({type(error).__name__}: {error})"
        ) from None
    if raw.shape not in (norms.shape, ()):
        raise ValueError(
            f"spatial_sign: custom xi must return one value per norm (an array of the shape "
            f"it is given), got shape {raw.shape} for norms of shape {norms.shape}"
        )
    return np.broadcast_to(raw, norms.shape)


def bound_in_range(name: str, value: object) -> float:
    """``value`` as a float in ``[MIN_BOUND, MAX_BOUND]``, else a ValueError naming ``name``."""
    number = positive_finite(name, value)
    if not MIN_BOUND <= number <= MAX_BOUND:
        raise ValueError(
            f"{name}: must be between {MIN_BOUND:g} and {MAX_BOUND:g} (the range in which the "
            f"computed K_hat keeps its rounding bound for every data set), got {number!r}"
        )
    return number


def resolve_spatial_sign(
    spatial_sign: str | SpatialSign, radius: float | None = None
) -> SpatialSign:
    """Turn the estimator's ``spatial_sign`` / ``radius`` parameters into a :class:`SpatialSign`.

    Raises
    ------
    ValueError
        For an unknown name, a winsor spatial sign without a radius, or a radius given
        with a spatial sign that takes none.
    """
    if isinstance(spatial_sign, SpatialSign):
        if radius is not None and spatial_sign.name != "winsor":
            raise ValueError(
                f"radius: given ({radius!r}) but spatial sign {spatial_sign.name!r} takes none"
            )
        if radius is not None and radius != spatial_sign.radius:
            raise ValueError(
                f"radius: given ({radius!r}) but the winsor spatial sign has radius "
                f"{spatial_sign.radius!r}"
            )
        return spatial_sign
    if spatial_sign == "sphere":
        if radius is not None:
            raise ValueError(f"radius: given ({radius!r}) but spatial sign 'sphere' takes none")
        return sphere()
    if spatial_sign == "winsor":
        if radius is None:
            raise ValueError("radius: spatial sign 'winsor' needs a public radius > 0")
        return winsor(radius)
    if spatial_sign == "identity":
        return identity()
    raise ValueError(
        f"spatial_sign: unknown value {spatial_sign!r}; expected 'sphere', 'winsor', "
        "or dask_dppca.custom(xi, bound)"
    )
