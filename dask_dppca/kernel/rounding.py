"""The kernel's constants, its tile size rule and its worst-case rounding bound.

The privacy layer widens the sensitivity by ``2 G^2`` times :func:`rounding_error_bound`
for the plan's blocks and tiles (docs/method.md, section 11; docs/privacy.md), so the
tile size the kernel runs with and the one the bound is computed for must be the same:
both come from :func:`tile_rows_for_budget` through ``DesignPlan.tile_rows``.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "BAND_TILES",
    "CLASS_BITS",
    "CONDITION_LIMIT",
    "DEFAULT_MEMORY_BUDGET",
    "MAX_TILE_ROWS",
    "MIN_SQUARED_DISTANCE",
    "TILE_ARRAYS",
    "rounding_error_bound",
    "tile_rows_for_budget",
    "tile_scratch_bytes",
]

#: Default scratch budget of one block-pair sum, in bytes.
DEFAULT_MEMORY_BUDGET = 256 * 2**20

#: A pair takes the fast path only when ||a - b||^2 * CONDITION_LIMIT > ||a||^2 + ||b||^2
#: (scaled, centred rows): the expansion's relative error is then at most about
#: CONDITION_LIMIT * d * eps.
CONDITION_LIMIT = 256.0
#: Scaled squared distance below which a pair takes the exact path.  Rows of a scale
#: class have coordinates of size 2^-(CLASS_BITS/2) to 2^(CLASS_BITS/2) after scaling,
#: so well-conditioned pairs never come near it; it keeps every fast-path weight finite
#: (sphere 2/s2 <= 2^301; winsor 2 r^2/s2 with r <= spatial_sign.MAX_BOUND).
MIN_SQUARED_DISTANCE = 2.0**-300
#: Bits of magnitude per scale class.
CLASS_BITS = 200
#: Cache-friendly upper limit on the tile size (benchmarks/bench_kernel.py, section 5).
#: 384 rather than 512: a 384-row tile's weights (1.1 MiB) stay near a core's L2 while a
#: 512-row tile's (2 MiB) are read three times from a shared L3.  Interleaved one-thread
#: sweeps, n = 6000, 384 against 512 rows: d = 16 0.42 / 0.37 of GEMM, d = 32 0.63 /
#: 0.58, d = 64 0.75 / 0.63, d = 128 0.90 / 0.85, d = 256 0.80 / 0.72.
MAX_TILE_ROWS = 384
#: Tiles of the first block processed together (each tile of the second block is
#: loaded once per such band).
BAND_TILES = 4
#: Float64 tile-sized (T x T) scratch arrays alive at once: the weights, and at worst
#: the exact path's two index lists.
TILE_ARRAYS = 3
#: Roundings outside the tiles: weights and multiplicities (5), the halves of diagonal
#: tiles (2 ceil(log2(384 / 32)) = 8), forming diag(r/2) A - W B (2), symmetrising and the
#: exact-path total (2), the graph's (2: a task's tree over its block pairs is at most
#: one level deeper than log2 of all the block pairs, and the exact sum of the tasks'
#: sums is rounded once, dask_dppca.kernel.exact_sum), with room to spare (see
#: rounding_error_bound).  The
#: exact path's own sum, up to (B/T)^2 additions deep, is covered by its terms being
#: at most G^2 against the fast path's 4 CONDITION_LIMIT G^2 = 1024 G^2.
_FIXED_ROUNDINGS = 24
#: At most this many scale classes exist (float64 exponents span 2098 bits).
_MAX_CLASSES = 2 + 2098 // CLASS_BITS


def tile_scratch_bytes(tile_rows: int, n_features: int) -> int:
    """The tile loop's scratch of one block-pair sum, in bytes, for tiles of ``tile_rows``.

    What :func:`tile_rows_for_budget` keeps within its budget: ``TILE_ARRAYS`` tile-sized
    arrays, the band's loaded tiles and one of B, the product and side buffers, and the
    ``4 d^2`` floats of the d x d partial sums.
    """
    per_row, fixed = _scratch_terms(n_features)
    return int(TILE_ARRAYS * 8 * tile_rows * tile_rows + per_row * tile_rows + fixed)


def _scratch_terms(n_features: int) -> tuple[int, int]:
    # per tile row: the band's loaded tiles and one of B (rows, columns, norms, partner
    # sums: 3 d + 3 floats each), the [B 1]^T W^T product and the side buffer (d + 1, d)
    per_row = 8 * ((BAND_TILES + 1) * (3 * n_features + 3) + 2 * n_features + 1)
    fixed = 8 * 4 * n_features * n_features
    return per_row, fixed


def tile_rows_for_budget(memory_budget: int, n_features: int) -> int:
    """Largest tile (rows) whose scratch fits in ``memory_budget`` bytes, capped for cache."""
    per_row, fixed = _scratch_terms(n_features)
    room = max(memory_budget - fixed, 0)
    # Solve TILE_ARRAYS * 8 * T^2 + per_row * T <= room for T.
    a = TILE_ARRAYS * 8.0
    t = (-per_row + math.sqrt(per_row * per_row + 4 * a * room)) / (2 * a)
    return int(max(16, min(MAX_TILE_ROWS, t)))


def rounding_error_bound(
    n_features: int,
    max_block_rows: int,
    n_block_pairs: int,
    tile_rows: int,
) -> float:
    """Worst-case ``||K_hat_computed - K_hat_exact||_F / G^2`` for any data set.

    Every quantity the kernel adds up is, per pair, at most ``4 CONDITION_LIMIT G^2``
    in size (fast path: ``W (||a||^2 + ||b||^2) < 2 CONDITION_LIMIT G^2`` because only
    well-conditioned pairs take it, and scaling by powers of two changes no product;
    exact path: unit vectors scaled by ``xi <= G``).  Each passes through at most
    ``2 T + 2 B / T + d + log2(#block pairs) + _FIXED_ROUNDINGS + log2(_MAX_CLASSES^2)``
    roundings: the sum over a tile's columns in ``W [B 1]`` (and over its rows in the
    column weight sums ``W^T 1``) and over its rows in the d x d product (T each), the
    accumulation over tiles (B / T each way: a tile pair's sums are added to the
    block's, never a block's rows one by one), the d-term
    dot products behind the weights, the graph's sums (a balanced tree over a task's block
    pairs, then the exact sum over tasks, rounded once), a few fixed steps (weights,
    multiplicities, the diagonal halves, symmetrising, the exact path) and the
    pairwise sum over pairs of scale classes.  The standard bound for floating-point sums then
    gives this value; docs/privacy.md uses it to widen the sensitivity by ``2 G^2``
    times it.  It is a worst case: observed errors are orders of magnitude smaller.
    ``tile_rows`` must be the tile size the kernel was run with (``DesignPlan.tile_rows``).
    """
    tile = int(tile_rows)
    depth = (
        2 * tile
        + 2 * math.ceil(max_block_rows / tile)
        + n_features
        + math.log2(max(n_block_pairs, 1))
        + _FIXED_ROUNDINGS
        + math.log2(_MAX_CLASSES**2)
    )
    return 4.0 * CONDITION_LIMIT * depth * float(np.finfo(np.float64).eps)
