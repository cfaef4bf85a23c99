"""Layer 1, the kernel: exact block-pair sums of g(t) g(t)^T (pure numpy, no dask).

For row blocks A and B this computes

    S(A, B) = sum_{i, j} g(t_ij) g(t_ij)^T,   t_ij = (a_i - b_j) / sqrt(2),

over all pairs (i, j) of A x B, or over i < j when B is A (a within-block sum).
It returns the *unnormalised* sum; the graph layer divides by the number of pairs.

Fast path (method.md section 7).  With weights W_ij = w(||t_ij||^2),

    S = 1/2 [A^T diag(W 1) A + B^T diag(W^T 1) B - A^T W B - (A^T W B)^T],
    ||a_i - b_j||^2 = ||a_i||^2 + ||b_j||^2 - 2 a_i . b_j,

so all the work is matrix multiplication: about 4 d flops per pair.

Exact path.  The expansion loses accuracy when a pair's distance is small next to the
rows' distance from the centring point (near and exact duplicates, clusters far from
the bulk) and overflows for rows near the float range.  Those pairs are detected from
quantities the fast path computes anyway and are summed one by one, from the raw
differences, with an overflow-safe norm.  Every pair's term therefore keeps its true
size, at most G^2 up to a relative error of order ``CONDITION_LIMIT * d * eps``:
docs/privacy.md explains why the sensitivity proof needs this.

Non-finite records.  A row holding NaN or +-inf contributes nothing: all of its pair
terms are zero (bounded by G^2), while the caller still counts its pairs.  The code
path is the same whatever the values.

Memory.  Blocks are processed in square tiles of at most ``tile_rows`` rows, so the
scratch memory is O(tile_rows^2 + tile_rows d + d^2) whatever the block sizes.
"""

from __future__ import annotations

import math

import numpy as np

from .jit import njit
from .transforms import Transform, sphere

__all__ = ["block_pair_sum", "tile_rows_for_budget", "rounding_error_bound", "DEFAULT_MEMORY_BUDGET"]

#: Default scratch budget of one block-pair sum, in bytes.
DEFAULT_MEMORY_BUDGET = 256 * 2**20

#: A pair takes the fast path only when ||a - b||^2 * CONDITION_LIMIT > ||a||^2 + ||b||^2
#: (norms after centring): the expansion's relative error is then at most about
#: CONDITION_LIMIT * d * eps.
CONDITION_LIMIT = 256.0
#: Squared distance below which a pair takes the exact path (its weight 1/s2 could
#: overflow, or the norms have underflowed).
_MIN_SQUARED_DISTANCE = 1e-250
#: Rows whose squared norm (after centring) is beyond these take the exact path for all
#: of their pairs, so the matrix products never see values that overflow or underflow.
_MAX_SAFE_NORM2 = 1e250
_MIN_SAFE_NORM2 = 1e-250
#: Rows used to pick the centring point (any point is correct; a robust one is accurate).
_CENTRE_SAMPLE_ROWS = 1024
#: Cache-friendly upper limit on the tile size (measured in benchmarks/bench_kernel.py).
_MAX_TILE_ROWS = 512
#: Float64 tile-sized scratch arrays alive at once (the product/weight tile, index lists).
_TILE_ARRAYS = 2

_SQRT2 = math.sqrt(2.0)


def tile_rows_for_budget(memory_budget: int, n_features: int) -> int:
    """Largest tile (rows) whose scratch fits in ``memory_budget`` bytes, capped for cache."""
    per_row = 8 * (4 * n_features)  # centred tile rows, exact-path rows, products with d
    fixed = 8 * 4 * n_features * n_features
    room = max(memory_budget - fixed, 0)
    # Solve _TILE_ARRAYS * 8 * T^2 + per_row * T <= room for T.
    a = _TILE_ARRAYS * 8.0
    t = (-per_row + math.sqrt(per_row * per_row + 4 * a * room)) / (2 * a)
    return int(max(16, min(_MAX_TILE_ROWS, t)))


def rounding_error_bound(
    n_features: int,
    max_block_rows: int,
    n_block_pairs: int,
    tile_rows: int,
) -> float:
    """Worst-case ``||K_hat_computed - K_hat_exact||_F / G^2`` for any data set.

    Every quantity the kernel adds up is, per pair, at most ``4 CONDITION_LIMIT G^2``
    in size (fast path: ``W (||a||^2 + ||b||^2) < 2 CONDITION_LIMIT G^2`` because only
    well-conditioned pairs take it; exact path: unit vectors scaled by
    ``xi <= G``), and each passes through at most ``T + 2 B / T + d + log2(#block
    pairs) + 8`` roundings (a tile's products, the sequential accumulation over
    tiles, the d x d products, the tree reduction).  The standard bound for
    floating-point sums then gives this value; docs/privacy.md uses it to widen the
    sensitivity by ``2 G^2`` times it.  It is a worst case: observed errors are
    orders of magnitude smaller.  ``tile_rows`` must be the tile size the kernel was
    run with (``DesignPlan.tile_rows``).
    """
    tile = int(tile_rows)
    depth = tile + 2 * math.ceil(max_block_rows / tile) + n_features + math.log2(max(n_block_pairs, 1)) + 8
    return 4.0 * CONDITION_LIMIT * depth * float(np.finfo(np.float64).eps)


def block_pair_sum(
    block_a: np.ndarray,
    block_b: np.ndarray | None = None,
    transform: Transform | None = None,
    *,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    tile_rows: int | None = None,
) -> np.ndarray:
    """Sum of ``g(t) g(t)^T`` over the pairs of one block pair.

    Parameters
    ----------
    block_a : ndarray, shape (p, d)
        Rows of the first block (any real dtype; computed in float64).
    block_b : ndarray, shape (q, d), optional
        Rows of the second block.  When omitted the sum runs over the pairs
        ``i < j`` of ``block_a`` (a within-block sum).
    transform : Transform, optional
        The generalized spatial sign; the sphere by default.
    memory_budget : int
        Bytes of scratch memory the tiling may use (default 256 MiB).
    tile_rows : int, optional
        Force a tile size (tests use small tiles to exercise the tiling).

    Returns
    -------
    ndarray, shape (d, d)
        The symmetric sum ``sum_pairs g(t_ij) g(t_ij)^T`` (not divided by the count).
    """
    transform = sphere() if transform is None else transform
    a = _as_float_rows(block_a)
    within = block_b is None
    b = a if within else _as_float_rows(block_b)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"block_b: has {b.shape[1]} columns, block_a has {a.shape[1]}")
    d = a.shape[1]
    if tile_rows is None:
        tile_rows = tile_rows_for_budget(memory_budget, d)
    elif isinstance(tile_rows, bool) or not isinstance(tile_rows, int) or tile_rows < 1:
        raise ValueError(f"tile_rows: must be a positive integer, got {tile_rows!r}")

    valid_a = np.isfinite(a).all(axis=1)
    valid_b = valid_a if within else np.isfinite(b).all(axis=1)
    centre = _centring_point(a, valid_a)
    fast_norm2_a = _fast_path_norms(a, valid_a, centre, tile_rows)
    fast_norm2_b = fast_norm2_a if within else _fast_path_norms(b, valid_b, centre, tile_rows)

    weighted_sum = _WeightedSum(d)
    colsum_b = np.zeros(b.shape[0])
    exact = np.zeros((d, d))
    for i0 in range(0, a.shape[0], tile_rows):
        i1 = min(i0 + tile_rows, a.shape[0])
        a_tile = _centred(a, i0, i1, centre, fast_norm2_a)
        rowsum = np.zeros(i1 - i0)
        cross = np.zeros((i1 - i0, d))
        for j0 in range(i0 if within else 0, b.shape[0], tile_rows):
            j1 = min(j0 + tile_rows, b.shape[0])
            b_tile = a_tile if (within and j0 == i0) else _centred(b, j0, j1, centre, fast_norm2_b)
            weights, tile_rowsum, tile_colsum, exact_i, exact_j = _tile_weights(
                a_tile, fast_norm2_a[i0:i1], valid_a[i0:i1],
                b_tile, fast_norm2_b[j0:j1], valid_b[j0:j1],
                transform, upper_only=(within and j0 == i0),
            )
            rowsum += tile_rowsum
            colsum_b[j0:j1] += tile_colsum
            cross += weights @ b_tile
            if exact_i.size:
                exact += _exact_pair_sum(a, i0 + exact_i, b, j0 + exact_j, transform, tile_rows)
        weighted_sum.add_rows(a_tile, rowsum)
        weighted_sum.add_cross(a_tile, cross)
    for j0 in range(0, b.shape[0], tile_rows):
        j1 = min(j0 + tile_rows, b.shape[0])
        weighted_sum.add_rows(_centred(b, j0, j1, centre, fast_norm2_b), colsum_b[j0:j1])
    total = weighted_sum.result() + exact
    return 0.5 * (total + total.T)


class _WeightedSum:
    """Accumulates 1/2 [A^T diag(r) A + B^T diag(c) B - A^T W B - (A^T W B)^T]."""

    def __init__(self, d: int) -> None:
        self._rows = np.zeros((d, d))
        self._cross = np.zeros((d, d))

    def add_rows(self, rows: np.ndarray, weights: np.ndarray) -> None:
        self._rows += rows.T @ (weights[:, None] * rows)

    def add_cross(self, rows: np.ndarray, weighted_partners: np.ndarray) -> None:
        self._cross += rows.T @ weighted_partners

    def result(self) -> np.ndarray:
        return 0.5 * (self._rows - self._cross - self._cross.T)


def _as_float_rows(block: np.ndarray) -> np.ndarray:
    rows = np.asarray(block)
    if rows.ndim != 2:
        raise ValueError(f"block: expected a 2-D array of rows, got {rows.ndim} dimension(s)")
    if np.iscomplexobj(rows):
        raise ValueError(f"block: needs real values, got dtype {rows.dtype}")
    # A long double beyond the float64 range becomes +-inf (then a non-finite row, kernel
    # docstring): silently, since a warning would depend on the private values.
    with np.errstate(over="ignore", invalid="ignore"):
        return np.ascontiguousarray(rows, dtype=np.float64)


def _centring_point(rows: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Coordinate-wise median of about ``_CENTRE_SAMPLE_ROWS`` valid rows spread over the block.

    The U-statistic is translation invariant, so any point gives the same result in
    exact arithmetic; a robust point keeps most pairs on the fast path (a common offset
    of 1e8 or a few rows at 1e300 would otherwise push every pair to the exact path).
    """
    step = max(1, rows.shape[0] // _CENTRE_SAMPLE_ROWS)   # spread over the block: sorted data
    sample = rows[::step][valid[::step]]
    if sample.shape[0] == 0:
        return np.zeros(rows.shape[1])
    return np.median(sample, axis=0)


def _fast_path_norms(rows, valid, centre, tile_rows) -> np.ndarray:
    """Squared norms after centring; NaN marks a row whose pairs all take the exact path."""
    norm2 = np.full(rows.shape[0], np.nan)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        for r0 in range(0, rows.shape[0], tile_rows):
            centred = rows[r0:r0 + tile_rows] - centre
            norm2[r0:r0 + tile_rows] = np.einsum("ij,ij->i", centred, centred)
    safe = valid & (norm2 <= _MAX_SAFE_NORM2) & ((norm2 == 0) | (norm2 >= _MIN_SAFE_NORM2))
    norm2[~safe] = np.nan
    return norm2


def _centred(rows, r0, r1, centre, fast_norm2) -> np.ndarray:
    """Centred tile rows, with rows excluded from the fast path zeroed (so products stay finite)."""
    with np.errstate(over="ignore", invalid="ignore"):
        tile = rows[r0:r1] - centre
    tile[np.isnan(fast_norm2[r0:r1])] = 0.0
    return tile


def _tile_weights(a_tile, norm2_a, valid_a, b_tile, norm2_b, valid_b, transform, upper_only):
    """Fast-path weights of one tile, their row and column sums, and the exact-path pairs."""
    weights = a_tile @ b_tile.T                           # a . b, overwritten in place
    rowsum = np.zeros(weights.shape[0])
    colsum = np.zeros(weights.shape[1])
    kind = _KIND_CODES.get(transform.name, _KIND_SQUARED_NORM)
    radius2 = (transform.radius or 0.0) ** 2
    n_exact = _fused_weights(
        weights, norm2_a, norm2_b, valid_a, valid_b, upper_only,
        1.0 / CONDITION_LIMIT, _MIN_SQUARED_DISTANCE, kind, radius2, rowsum, colsum,
    )
    exact_i = exact_j = _NO_PAIRS
    if n_exact:
        exact_i, exact_j = np.nonzero(weights < 0)
        weights[exact_i, exact_j] = 0.0
    if kind == _KIND_SQUARED_NORM:
        # A custom xi is plain Python: apply it to the squared norms the fused pass left,
        # a few rows at a time so its temporaries stay small next to the tile.
        strip = max(1, _CUSTOM_STRIP_ELEMENTS // max(weights.shape[1], 1))
        for r0 in range(0, weights.shape[0], strip):
            part = weights[r0:r0 + strip]
            kept = part > 0
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                part[kept] = transform.weight(part[kept])
        rowsum = weights.sum(axis=1)
        colsum = weights.sum(axis=0)
    return weights, rowsum, colsum, exact_i, exact_j


_NO_PAIRS = np.zeros(0, dtype=np.intp)
_CUSTOM_STRIP_ELEMENTS = 16384
_KIND_CODES = {"sphere": 0, "winsor": 1, "identity": 2}
_KIND_SQUARED_NORM = 3


@njit(nogil=True)
def _fused_weights(prod, norm2_a, norm2_b, valid_a, valid_b, upper_only,
                   inv_limit, min_squared, kind, radius2, rowsum, colsum):  # pragma: no cover
    # One pass over the tile (the element-wise work would otherwise cost ~10 numpy passes):
    # prod[i, j] holds a_i . b_j on entry and the pair weight on exit; -1 marks a pair for
    # the exact path.  NaN norms (rows excluded from the fast path) fail every comparison.
    n_exact = 0
    for i in range(prod.shape[0]):
        row_total = 0.0
        for j in range(prod.shape[1]):
            counted = (not upper_only) or j > i
            bound = norm2_a[i] + norm2_b[j]
            squared = bound - 2.0 * prod[i, j]            # ||a - b||^2 = 2 ||t||^2
            threshold = max(bound * inv_limit, min_squared)
            weight = 0.0
            if counted and squared > threshold:
                # Transform.weight at ||t||^2 = squared / 2, inlined for numba: keep in step
                if kind == 0:
                    weight = 2.0 / squared
                elif kind == 1:
                    weight = min(1.0, 2.0 * radius2 / squared)
                elif kind == 2:
                    weight = 1.0
                else:
                    weight = 0.5 * squared
                row_total += weight
                colsum[j] += weight
            elif counted and valid_a[i] and valid_b[j]:
                weight = -1.0
                n_exact += 1
            prod[i, j] = weight
        rowsum[i] += row_total
    return n_exact


def _exact_pair_sum(rows_a, index_a, rows_b, index_b, transform, chunk_rows) -> np.ndarray:
    """Pair-by-pair (vectorised) sum of g g^T from the raw differences, overflow-safe.

    Rows are gathered chunk by chunk, so scratch stays at a few ``chunk_rows x d`` arrays.
    """
    d = rows_a.shape[1]
    total = np.zeros((d, d))
    for k0 in range(0, index_a.shape[0], chunk_rows):
        a = rows_a[index_a[k0:k0 + chunk_rows]]
        b = rows_b[index_b[k0:k0 + chunk_rows]]
        with np.errstate(over="ignore", invalid="ignore"):
            diff = a - b
        halved = ~np.isfinite(diff).all(axis=1)
        if halved.any():
            # Both rows are finite, so halving first cannot overflow; the direction is the same.
            diff[halved] = 0.5 * a[halved] - 0.5 * b[halved]
        scale = np.abs(diff).max(axis=1)
        moved = scale > 0                                 # exact duplicates contribute exactly 0
        if not moved.any():
            continue
        unit = diff[moved] / scale[moved, None]
        length = np.sqrt(np.einsum("ij,ij->i", unit, unit))
        unit /= length[:, None]
        with np.errstate(over="ignore"):
            norm_t = scale[moved] * length * np.where(halved[moved], 2.0, 1.0) / _SQRT2
        signs = transform.xi(norm_t)[:, None] * unit      # g(t), length xi(||t||) <= G
        total += signs.T @ signs
    return total
