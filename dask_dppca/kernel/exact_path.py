"""The exact path: pairs summed one by one from their raw differences, overflow-safe.

Every pair the fast path cannot take with its rounding bound (near duplicates, pairs
far from the centre, records near the float range) comes here, so that each pair's
term keeps its true size, at most ``G^2`` (docs/method.md, section 7).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from .jit import njit
from .spatial_sign import SpatialSign

__all__ = ["exact_pair_sum"]

_SQRT2 = math.sqrt(2.0)


@njit(nogil=True, error_model="numpy")
def _exact_units(
    rows_a: NDArray[np.float64],
    index_a: NDArray[np.int64],
    rows_b: NDArray[np.float64],
    index_b: NDArray[np.int64],
    unit: NDArray[np.float64],
    norm_t: NDArray[np.float64],
) -> None:  # pragma: no cover - compiled
    """Unit vector of each pair's raw difference, and ``||t||``, overflow-safe.

    A difference that overflows is formed from halves (both rows are finite, so halving
    first cannot overflow; the direction is the same).  Exact duplicates give a zero
    unit vector: they contribute exactly 0.
    """
    d = rows_a.shape[1]
    for p in range(index_a.shape[0]):
        a = rows_a[index_a[p]]
        b = rows_b[index_b[p]]
        halved = False
        for k in range(d):
            unit[p, k] = a[k] - b[k]
            if not np.isfinite(unit[p, k]):
                halved = True
        if halved:
            for k in range(d):
                unit[p, k] = 0.5 * a[k] - 0.5 * b[k]
        peak = 0.0
        for k in range(d):
            peak = max(peak, abs(unit[p, k]))
        if peak == 0.0:
            norm_t[p] = 0.0
            continue
        length2 = 0.0
        for k in range(d):
            unit[p, k] /= peak
            length2 += unit[p, k] * unit[p, k]
        length = math.sqrt(length2)
        for k in range(d):
            unit[p, k] /= length
        norm_t[p] = peak * length * (2.0 if halved else 1.0) / _SQRT2


def exact_pair_sum(
    rows_a: NDArray[np.float64],
    index_a: NDArray[np.int64],
    rows_b: NDArray[np.float64],
    index_b: NDArray[np.int64],
    multiplicity: NDArray[np.float64],
    spatial_sign: SpatialSign,
    chunk_rows: int,
) -> NDArray[np.float64]:
    """Sum of ``multiplicity * g g^T`` over the given pairs, from their raw differences.

    Pairs go chunk by chunk, so scratch stays at a few ``chunk_rows x d`` arrays.
    """
    d = rows_a.shape[1]
    total = np.zeros((d, d))
    for k0 in range(0, index_a.shape[0], chunk_rows):
        k1 = min(k0 + chunk_rows, index_a.shape[0])
        unit = np.empty((k1 - k0, d))
        norm_t = np.empty(k1 - k0)
        _exact_units(rows_a, index_a[k0:k1], rows_b, index_b[k0:k1], unit, norm_t)
        length = spatial_sign.xi(norm_t)  # xi(||t||) <= G
        total += unit.T @ ((length * length * multiplicity[k0:k1])[:, None] * unit)
    return total
