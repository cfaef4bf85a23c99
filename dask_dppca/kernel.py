"""Layer 1, the kernel: exact block-pair sums of g(t) g(t)^T (numpy + numba, no dask).

For row blocks A and B this computes

    S(A, B) = sum_{i, j} g(t_ij) g(t_ij)^T,   t_ij = (a_i - b_j) / sqrt(2),

over all pairs (i, j) of A x B, or over i < j when B is A (a within-block sum).
It returns the *unnormalised* sum; the graph layer divides by the number of pairs.

Fast path (method.md section 7).  With weights W_ij = w(||t_ij||^2),

    S = 1/2 [A^T diag(W 1) A + B^T diag(W^T 1) B - A^T W B - (A^T W B)^T],
    ||a_i - b_j||^2 = ||a_i||^2 + ||b_j||^2 - 2 a_i . b_j,

so the work is two matrix products per tile, ``A B^T`` and ``W [B 1]`` (the column of
ones gives ``W 1`` for free): about 4 d flops per pair.  The d x d products are one per
tile row, ``A^T (diag(r/2) A - W B)``, since ``N + N^T`` of that ``N`` is the whole
bracket but ``B^T diag(W^T 1) B``.

Preparation of a block, O(n d) work whatever the values:

* Non-finite records (NaN or +-inf anywhere) are dropped: every pair they are in
  contributes 0, while the caller still counts their pairs.
* Identical records are merged and carry their multiplicity: a pair of identical
  records contributes ``g(0) g(0)^T = 0`` exactly, and a record repeated m times pairs
  with each other record m times, so its weights are multiplied by m.
* Records are centred on a coordinate-wise median of a sample (the sum is translation
  invariant; a robust point keeps the expansion well conditioned).
* Records are put in *scale classes* by the size of their centred coordinates, a
  factor ``2^CLASS_BITS`` per class.  The pairs of classes p and q are computed from
  records multiplied by the power of two ``2^(-CLASS_BITS max(p, q))`` (exact), with
  the weights rescaled to match, so records near the float range or subnormal take the
  fast path without overflow or underflow.  Most data sets have one class.

Exact path.  A pair takes the fast path only when
``||a - b||^2 * CONDITION_LIMIT > ||a||^2 + ||b||^2`` (scaled, centred rows), tested on
the same computed quantities it then uses; the expansion's relative error is then at
most about ``CONDITION_LIMIT * d * eps``.  Every other pair (near duplicates, clusters
far from the centre) is summed one by one from the raw difference with an
overflow-safe norm.  Every pair's term therefore keeps its true size, at most G^2 up
to a relative error of order ``CONDITION_LIMIT * d * eps``: docs/privacy.md explains
why the sensitivity proof needs this.

Memory.  Blocks are processed in square tiles of at most ``tile_rows`` rows, so the
scratch memory is O(tile_rows^2 + tile_rows d + d^2) plus a few integers per record,
whatever the block sizes.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from .jit import njit
from .transforms import Transform, sphere

__all__ = ["block_pair_sum", "pairwise_sum", "tile_rows_for_budget", "rounding_error_bound",
           "DEFAULT_MEMORY_BUDGET"]

#: Default scratch budget of one block-pair sum, in bytes.
DEFAULT_MEMORY_BUDGET = 256 * 2**20

#: A pair takes the fast path only when ||a - b||^2 * CONDITION_LIMIT > ||a||^2 + ||b||^2
#: (scaled, centred rows): the expansion's relative error is then at most about
#: CONDITION_LIMIT * d * eps.
CONDITION_LIMIT = 256.0
#: Scaled squared distance below which a pair takes the exact path.  Rows of a scale
#: class have coordinates of size 2^-(CLASS_BITS/2) to 2^(CLASS_BITS/2) after scaling,
#: so well-conditioned pairs never come near it; it keeps every fast-path weight finite
#: (sphere 2/s2 <= 2^301; winsor 2 r^2/s2 with r <= transforms.MAX_BOUND).
_MIN_SQUARED_DISTANCE = 2.0**-300
#: Bits of magnitude per scale class.
CLASS_BITS = 200
#: Rows used to pick the centring point (any point is correct; a robust one is accurate).
_CENTRE_SAMPLE_ROWS = 256
#: Cache-friendly upper limit on the tile size (measured in benchmarks/bench_kernel.py).
_MAX_TILE_ROWS = 512
#: Tiles of the first block processed together (each tile of the second block is
#: loaded once per such band).
_BAND_TILES = 4
#: A diagonal tile of m rows is split in halves while m^2 d exceeds this (the flops a
#: split saves against the fixed cost of the two more products it makes), and m > 32.
_DIAGONAL_SPLIT_FLOPS = 1e6
#: Float64 tile-sized (T x T) scratch arrays alive at once: the weights, and at worst
#: the exact path's two index lists.
_TILE_ARRAYS = 3
#: Roundings outside the tiles: weights and multiplicities (5), the halves of diagonal
#: tiles (2 log2(512 / 32) = 8), forming diag(r/2) A - W B (2), symmetrising and the
#: exact-path total (2), the graph's (2: a task's tree over its block pairs is at most
#: one level deeper than log2 of all the block pairs, and the exact sum of the tasks'
#: sums is rounded once, dask_dppca.exact_sum), with room to spare (see
#: rounding_error_bound).  The
#: exact path's own sum, up to (B/T)^2 additions deep, is covered by its terms being
#: at most G^2 against the fast path's 4 CONDITION_LIMIT G^2 = 1024 G^2.
_FIXED_ROUNDINGS = 24
#: At most this many scale classes exist (float64 exponents span 2098 bits).
_MAX_CLASSES = 2 + 2098 // CLASS_BITS

_SQRT2 = math.sqrt(2.0)


def tile_rows_for_budget(memory_budget: int, n_features: int) -> int:
    """Largest tile (rows) whose scratch fits in ``memory_budget`` bytes, capped for cache."""
    # per tile row: the band's loaded tiles and one of B (rows, columns, norms, partner
    # sums: 3 d + 3 floats each), the [B 1]^T W^T product and the side buffer (d + 1, d)
    per_row = 8 * ((_BAND_TILES + 1) * (3 * n_features + 3) + 2 * n_features + 1)
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
    well-conditioned pairs take it, and scaling by powers of two changes no product;
    exact path: unit vectors scaled by ``xi <= G``).  Each passes through at most
    ``2 T + 2 B / T + d + log2(#block pairs) + _FIXED_ROUNDINGS + log2(_MAX_CLASSES^2)``
    roundings: the sum over a tile's columns in ``W [B 1]`` and over its rows in the
    d x d product (T each), the accumulation over tiles (B / T each way), the d-term
    dot products behind the weights, the graph's sums (a balanced tree over a task's block
    pairs, then the exact sum over tasks, rounded once), a few fixed steps (weights,
    multiplicities, the diagonal halves, symmetrising, the exact path) and the
    pairwise sum over pairs of scale classes.  The standard bound for floating-point sums then
    gives this value; docs/privacy.md uses it to widen the sensitivity by ``2 G^2``
    times it.  It is a worst case: observed errors are orders of magnitude smaller.
    ``tile_rows`` must be the tile size the kernel was run with (``DesignPlan.tile_rows``).
    """
    tile = int(tile_rows)
    depth = (2 * tile + 2 * math.ceil(max_block_rows / tile) + n_features
             + math.log2(max(n_block_pairs, 1)) + _FIXED_ROUNDINGS + math.log2(_MAX_CLASSES**2))
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

    rows_a, count_a = _distinct_finite_rows(a)
    rows_b, count_b = (rows_a, count_a) if within else _distinct_finite_rows(b)
    if rows_a.size == 0 or rows_b.size == 0:
        return np.zeros((d, d))
    centre = _centring_point(a, rows_a)
    # The unbounded identity is a non-private reference: one class, and rows whose
    # squares overflow take the exact path (its terms overflow as the true ones do).
    scaled = transform.name != "identity"
    class_a = _scale_classes(a, rows_a, centre, scaled)
    class_b = class_a if within else _scale_classes(b, rows_b, centre, scaled)
    summer = _TileSummer(transform, d, tile_rows)
    parts = []
    for p in np.unique(class_a):
        side_a = _Side(a, rows_a[class_a == p], count_a[class_a == p])
        for q in np.unique(class_b):
            if within and q < p:
                continue
            side_b = _Side(b, rows_b[class_b == q], count_b[class_b == q])
            exponent = -CLASS_BITS * int(max(p, q))
            parts.append(summer.run(side_a, side_b, within and p == q, centre, exponent))
    total = pairwise_sum(parts)
    return 0.5 * (total + total.T)


def pairwise_sum(parts: list[np.ndarray]) -> np.ndarray:
    """Sum in a balanced tree: log2(len(parts)) roundings deep (rounding_error_bound).

    Also adds a graph task's block-pair sums (:mod:`dask_dppca.graph`), no deeper than
    one tree over all the block pairs would be, plus one level.
    """
    while len(parts) > 1:
        parts = [parts[k] + parts[k + 1] if k + 1 < len(parts) else parts[k]
                 for k in range(0, len(parts), 2)]
    return parts[0]


class _Side:
    """The records of one block that take part in a class pair: raw rows, indices, counts."""

    def __init__(self, raw: np.ndarray, index: np.ndarray, count: np.ndarray) -> None:
        self.raw = raw
        self.index = index
        self.count = count

    def __len__(self) -> int:
        return self.index.shape[0]


class _TileSlot:
    """Buffers of one loaded tile: rows, columns with ones, squared norms, partner sums."""

    def __init__(self, tile: int, d: int) -> None:
        self.d = d
        self.memory = [np.empty(tile * d), np.empty(tile * (d + 1)), np.empty(tile),
                       np.empty(tile * (d + 1))]
        self.start = self.stop = 0

    def __len__(self) -> int:
        return self.stop - self.start

    def load(self, side: _Side, start: int, stop: int, centre, scale) -> _TileSlot:
        """Rows ``start:stop`` of ``side``, centred and scaled."""
        m, d = stop - start, self.d
        rows, cols, norm2, partners = self.memory
        self.rows = rows[:m * d].reshape(m, d)
        self.cols = cols[:m * (d + 1)].reshape(d + 1, m)
        self.norm2 = norm2[:m]
        self.partners = partners[:m * (d + 1)].reshape(d + 1, m)   # [W B | W 1]^T
        self.partners[:] = 0.0
        self.start, self.stop = start, stop
        _load_tile(side.raw, side.index[start:stop], centre, scale, self.rows, self.cols, self.norm2)
        return self


class _TileSummer:
    """The tile loop of one class pair, with scratch buffers reused across tiles.

    A loaded tile is kept twice: as rows (m x d) and as columns with a row of ones
    ((d + 1) x m), so that both products run on contiguous operands:
    ``W = A B^T`` is rows times columns, and ``[W B | W 1]^T = [B | 1]^T W^T`` is
    columns times ``W^T`` (faster in BLAS than ``W [B 1]`` with its d + 1 columns).
    Tiles of A are taken ``_BAND_TILES`` at a time, so each tile of B is loaded once
    per band rather than once per tile.  A diagonal tile (pairs i < j of one tile) is
    split in halves (see ``_DIAGONAL_SPLIT_FLOPS``), so that little of its product is
    spent on the pairs j <= i it does not need.
    """

    def __init__(self, transform: Transform, d: int, tile: int) -> None:
        self.transform = transform
        self.kind = _KIND_CODES.get(transform.name, _KIND_SQUARED_NORM)
        self.radius2x2 = 2.0 * (transform.radius or 0.0) ** 2
        self.d = d
        self.tile = tile
        self.weights, self.product, self.side, self.slots = _scratch(tile, d)
        self.diagonal_rows = max(32, int(math.sqrt(_DIAGONAL_SPLIT_FLOPS / d)))

    def run(self, side_a: _Side, side_b: _Side, within: bool, centre: np.ndarray,
            exponent: int) -> np.ndarray:
        """``S`` over the pairs of ``side_a x side_b`` (``i < j`` when ``within``).

        Rows are centred and multiplied by ``2^exponent``; the fast-path weights are
        ``w(||t'||^2 / s^2) / s^2`` for ``s = 2^exponent``, so the sums come out unscaled.
        """
        d, tile = self.d, self.tile
        scale = math.ldexp(1.0, exponent)
        # 1/s^2 caps winsor's weight (t inside the radius) and is identity's weight.
        cap = math.ldexp(1.0, -2 * exponent) if -2 * exponent < 1024 else math.inf
        self.pair = (side_a, side_b, centre, scale, cap, np.zeros(len(side_b)))
        colsum = self.pair[-1]
        # M with S = (M + M^T) / 2: per tile of A, M += (diag(r/2) A - W B)^T A,
        # and for two blocks M += B^T diag(c/2) B (r = W 1, c = W^T 1).
        twice_sym = np.zeros((d, d))
        exact = np.zeros((d, d))
        band_rows = tile * _BAND_TILES
        for band0 in range(0, len(side_a), band_rows):
            starts = range(band0, min(band0 + band_rows, len(side_a)), tile)
            band = [slot.load(side_a, i0, min(i0 + tile, len(side_a)), centre, scale)
                    for slot, i0 in zip(self.slots, starts)]
            for j0 in range(band0 if within else 0, len(side_b), tile):
                if within and j0 < band0 + band_rows:
                    b_tile = band[(j0 - band0) // tile]          # already loaded
                else:
                    b_tile = self.slots[-1].load(side_b, j0, min(j0 + tile, len(side_b)),
                                                 centre, scale)
                for a_tile in band:
                    if within and j0 == a_tile.start:
                        exact += self._diagonal(a_tile, 0, len(a_tile))
                    elif not within or j0 > a_tile.start:
                        exact += self._tile_pair(a_tile, 0, len(a_tile), b_tile, 0, len(b_tile))
            for a_tile in band:
                # Its rows have their final weight sums: r (W 1) and, within a block,
                # c (W^T 1, only from tiles up to this one).
                half_weight = 0.5 * a_tile.partners[d]
                if within:
                    half_weight += 0.5 * colsum[a_tile.start:a_tile.stop]
                twice_sym += self._side(a_tile, half_weight, subtract=True) @ a_tile.rows
        if not within:
            for j0 in range(0, len(side_b), tile):
                b_tile = self.slots[-1].load(side_b, j0, min(j0 + tile, len(side_b)), centre, scale)
                twice_sym += self._side(b_tile, 0.5 * colsum[j0:b_tile.stop]) @ b_tile.rows
        return 0.5 * (twice_sym + twice_sym.T) + exact

    def _side(self, tile: _TileSlot, half_weight: np.ndarray, subtract: bool = False) -> np.ndarray:
        """``diag(half_weight) rows`` of a loaded tile, transposed (d x m), minus its partner
        sums ``(W B)^T`` when ``subtract``: in a kept buffer, since a fresh d x T array per
        tile is a fresh mapping of pages under Dask's malloc settings."""
        d, m = self.d, len(tile)
        side = self.side[:d * m].reshape(d, m)
        np.multiply(tile.cols[:d], half_weight, out=side)
        if subtract:
            np.subtract(side, tile.partners[:d], out=side)
        return side

    def _diagonal(self, tile: _TileSlot, lo: int, hi: int) -> np.ndarray:
        """The pairs i < j of rows ``lo:hi`` of a loaded tile: halves, and the pairs between."""
        if hi - lo <= self.diagonal_rows:
            return self._tile_pair(tile, lo, hi, tile, lo, hi, diagonal=True)
        mid = (lo + hi) // 2
        return (self._diagonal(tile, lo, mid) + self._tile_pair(tile, lo, mid, tile, mid, hi)
                + self._diagonal(tile, mid, hi))

    def _tile_pair(self, a_tile, a_lo, a_hi, b_tile, b_lo, b_hi, diagonal=False) -> np.ndarray:
        """Add ``[W B | W 1]^T`` of rows ``a_lo:a_hi`` x ``b_lo:b_hi`` of two loaded tiles
        to the first one's partner sums; return the exact-path sum."""
        side_a, side_b, centre, scale, cap, colsum = self.pair
        d = self.d
        i0, i1 = a_tile.start + a_lo, a_tile.start + a_hi
        j0, j1 = b_tile.start + b_lo, b_tile.start + b_hi
        weights = self.weights[:(i1 - i0) * (j1 - j0)].reshape(i1 - i0, j1 - j0)
        cols_b = b_tile.cols[:, b_lo:b_hi]
        np.matmul(a_tile.rows[a_lo:a_hi], cols_b[:d], out=weights)
        n_exact = _fast_path_weights(
            weights, a_tile.norm2[a_lo:a_hi], b_tile.norm2[b_lo:b_hi], side_a.count[i0:i1],
            side_b.count[j0:j1], diagonal, self.kind, cap, self.radius2x2, colsum[j0:j1],
        )
        exact = self._exact_pairs(weights, side_a, i0, side_b, j0) if n_exact else 0.0
        if self.kind == _KIND_SQUARED_NORM:
            self._custom_weights(weights, side_a.count[i0:i1], side_b.count[j0:j1],
                                 scale, colsum[j0:j1])
        product = self.product[:(d + 1) * (i1 - i0)].reshape(d + 1, i1 - i0)
        np.matmul(cols_b, weights.T, out=product)
        a_tile.partners[:, a_lo:a_hi] += product
        return exact

    def _exact_pairs(self, weights, side_a, i0, side_b, j0) -> np.ndarray:
        """Sum of the pairs the fast pass marked (-1) from their raw rows; marks cleared."""
        local_i, local_j = np.nonzero(weights < 0)
        weights[local_i, local_j] = 0.0
        return _exact_pair_sum(
            side_a.raw, side_a.index[i0 + local_i], side_b.raw, side_b.index[j0 + local_j],
            side_a.count[i0 + local_i] * side_b.count[j0 + local_j], self.transform, self.tile,
        )

    def _custom_weights(self, weights, count_a, count_b, scale, colsum) -> None:
        """A custom xi is plain Python: weights ``xi(||t'|| / s)^2 / ||t'||^2`` from the
        squared norms the fused pass left, a few rows at a time (small temporaries)."""
        strip = max(1, _CUSTOM_STRIP_ELEMENTS // max(weights.shape[1], 1))
        for r0 in range(0, weights.shape[0], strip):
            part = weights[r0:r0 + strip]
            kept = part > 0
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                s2 = part[kept]
                xi = self.transform.xi(np.sqrt(s2) / scale)
                part[kept] = xi * xi / s2
            part *= count_a[r0:r0 + strip, None] * count_b[None, :]
        colsum += weights.sum(axis=0)


_thread_scratch = threading.local()


def _scratch(tile: int, d: int):
    """The tile loop's buffers (weights, product, side, tile slots), kept by each thread from one
    call to the next: allocating and first touching a few MiB per block pair costs about
    a millisecond, as much as a small block's pairs.  Within the memory budget either way."""
    kept = getattr(_thread_scratch, "buffers", None)
    if kept is None or kept[0] != (tile, d):
        kept = ((tile, d), np.empty(tile * tile), np.empty(tile * (d + 1)), np.empty(tile * d),
                [_TileSlot(tile, d) for _ in range(_BAND_TILES + 1)])
        _thread_scratch.buffers = kept
    return kept[1:]


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


def _centring_point(rows: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Coordinate-wise lower median of about ``_CENTRE_SAMPLE_ROWS`` finite rows.

    The U-statistic is translation invariant, so any point gives the same result in
    exact arithmetic; a robust point keeps most pairs well conditioned (a common offset
    of 1e8 would otherwise push every pair to the exact path).  The rows are spread
    over the block (sorted data); the *lower* median is one of the sampled values, so
    no arithmetic on them can overflow or warn.
    """
    step = max(1, index.shape[0] // _CENTRE_SAMPLE_ROWS)
    sample = np.ascontiguousarray(rows[index[::step]].T)   # one row per coordinate
    middle = (sample.shape[1] - 1) // 2
    return np.partition(sample, middle, axis=1)[:, middle].copy()


_CUSTOM_STRIP_ELEMENTS = 16384
_HASH_LANES = 8
_KIND_CODES = {"sphere": 0, "winsor": 1, "identity": 2}
_KIND_SQUARED_NORM = 3


def _distinct_finite_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the distinct finite rows (first occurrences, in order) and their counts.

    Rows are grouped by a 64-bit hash of their values (-0.0 read as 0.0), then compared
    exactly, so a hash collision never merges different rows.
    """
    finite = _finite_rows(rows)
    return _group_rows(rows, finite, _row_hashes(rows, finite))


@njit(nogil=True)
def _finite_rows(rows):  # pragma: no cover - compiled
    finite = np.empty(rows.shape[0], dtype=np.int64)
    n_finite = 0
    for i in range(rows.shape[0]):
        ok = True
        for k in range(rows.shape[1]):
            if not np.isfinite(rows[i, k]):
                ok = False
                break
        if ok:
            finite[n_finite] = i
            n_finite += 1
    return finite[:n_finite]


@njit(nogil=True)
def _row_hashes(rows, finite):  # pragma: no cover - compiled
    d = rows.shape[1]
    values = np.empty(_HASH_LANES, dtype=np.float64)
    bits = values.view(np.uint64)
    lanes = np.empty(_HASH_LANES, dtype=np.uint64)
    hashes = np.empty(finite.shape[0], dtype=np.uint64)
    for r in range(finite.shape[0]):
        row = rows[finite[r]]
        lanes[:] = np.uint64(0x9E3779B97F4A7C15)
        for k0 in range(0, d, _HASH_LANES):    # independent lanes: no long dependency chain
            for lane in range(_HASH_LANES):
                values[lane] = row[k0 + lane] + 0.0 if k0 + lane < d else 0.0
            for lane in range(_HASH_LANES):
                h = (lanes[lane] ^ bits[lane]) * np.uint64(0xBF58476D1CE4E5B9)
                lanes[lane] = h ^ (h >> np.uint64(31))
        h = np.uint64(0)
        for lane in range(_HASH_LANES):
            h = (h ^ lanes[lane]) * np.uint64(0x94D049BB133111EB)
        hashes[r] = h ^ (h >> np.uint64(29))
    return hashes


@njit(nogil=True)
def _group_rows(rows, finite, hashes):  # pragma: no cover - compiled
    """Distinct rows among ``rows[finite]`` and their counts, given any hash of each row."""
    n_finite, d = finite.shape[0], rows.shape[1]
    order = np.argsort(hashes, kind="mergesort")   # stable: first occurrences first
    owner = np.arange(n_finite)                      # position of each row's first copy
    start = 0
    while start < n_finite:
        stop = start + 1
        while stop < n_finite and hashes[order[stop]] == hashes[order[start]]:
            stop += 1
        for s in range(start + 1, stop):
            row = finite[order[s]]
            for t in range(start, s):
                first = order[t]
                if owner[first] != first:
                    continue
                same = True
                for k in range(d):
                    if rows[row, k] != rows[finite[first], k]:
                        same = False
                        break
                if same:
                    owner[order[s]] = first
                    break
        start = stop
    count = np.zeros(n_finite)
    for r in range(n_finite):
        count[owner[r]] += 1.0
    n_distinct = 0
    for r in range(n_finite):
        if owner[r] == r:
            n_distinct += 1
    index = np.empty(n_distinct, dtype=np.int64)
    counts = np.empty(n_distinct)
    k = 0
    for r in range(n_finite):
        if owner[r] == r:
            index[k] = finite[r]
            counts[k] = count[r]
            k += 1
    return index, counts


@njit(nogil=True)
def _scale_classes(rows, index, centre, scaled):  # pragma: no cover - compiled
    """Scale class of each row: ``round(log2 max_k |x_k - c_k| / CLASS_BITS)`` (0 if not scaled).

    Quarters are compared so that the difference cannot overflow.
    """
    classes = np.zeros(index.shape[0], dtype=np.int64)
    if not scaled:
        return classes
    for r in range(index.shape[0]):
        largest = 0.0
        for k in range(rows.shape[1]):
            size = abs(0.25 * rows[index[r], k] - 0.25 * centre[k])
            largest = max(largest, size)
        if largest > 0.0:
            exponent = math.frexp(largest)[1] + 2
            classes[r] = (exponent + CLASS_BITS // 2) // CLASS_BITS
    return classes


@njit(nogil=True)
def _load_tile(rows, index, centre, scale, out_rows, out_cols, norm2):  # pragma: no cover
    """``out_rows = (rows[index] - centre) * scale`` (as ``x s - c s`` when s < 1, so
    nothing overflows), ``out_cols`` its transpose with a last row of ones, and the
    squared norms of the scaled rows."""
    d = rows.shape[1]
    shifted = centre * scale
    for r in range(index.shape[0]):
        row = rows[index[r]]
        if scale < 1.0:
            for k in range(d):
                out_rows[r, k] = row[k] * scale - shifted[k]
        else:
            for k in range(d):
                out_rows[r, k] = (row[k] - centre[k]) * scale
        out_cols[d, r] = 1.0
    for r0 in range(0, index.shape[0], 16):     # transposed in blocks of rows (cache)
        for k in range(d):
            for r in range(r0, min(r0 + 16, index.shape[0])):
                out_cols[k, r] = out_rows[r, k]
    _squared_norms(out_rows, norm2)


@njit(nogil=True, fastmath={"reassoc"})
def _squared_norms(rows, out):  # pragma: no cover - compiled
    # Sums of squares in any order (reassoc lets them vectorise): at most d roundings.
    for r in range(rows.shape[0]):
        total = 0.0
        for k in range(rows.shape[1]):
            total += rows[r, k] * rows[r, k]
        out[r] = total


@njit(nogil=True, error_model="numpy")
def _fast_path_weights(prod, norm2_a, norm2_b, count_a, count_b, diagonal,
                       kind, cap, radius2x2, colsum):  # pragma: no cover - compiled
    # One pass over the tile (the element-wise work would otherwise cost ~10 numpy
    # passes): prod[i, j] holds a_i . b_j on entry and the pair weight (times the two
    # multiplicities) on exit; -1 marks a pair for the exact path.  For a custom xi
    # (kind 3) it leaves ||t'||^2 instead, unweighted, and colsum is not touched.
    # The inner loop has no branch on the data and runs over slices from index 0
    # (a loop from a variable start defeats numba's proof that indices are >= 0):
    # it vectorises, ~5x faster.
    inv_limit = 1.0 / CONDITION_LIMIT
    n_exact = 0
    n_cols = prod.shape[1]
    for i in range(prod.shape[0]):
        start = min(i + 1, n_cols) if diagonal else 0
        prod[i, :start] = 0.0
        row, row_norm2, row_count, row_colsum = prod[i, start:], norm2_b[start:], count_b[start:], colsum[start:]
        norm2_i = norm2_a[i]
        count_i = count_a[i]
        for j in range(row.shape[0]):
            bound = norm2_i + row_norm2[j]
            squared = bound - 2.0 * row[j]               # ||a - b||^2 = 2 ||t'||^2
            fast = squared > max(bound * inv_limit, _MIN_SQUARED_DISTANCE)
            # Transform.xi(||t'|| / s)^2 / ||t'||^2, inlined for numba: keep in step
            if kind == 0:
                weight = 2.0 / squared
            elif kind == 1:
                weight = min(cap, radius2x2 / squared)
            elif kind == 2:
                weight = cap
            else:
                weight = 0.5 * squared
            if kind != 3:
                weight *= count_i * row_count[j]
                row_colsum[j] += weight if fast else 0.0
            row[j] = weight if fast else -1.0
            n_exact += 0 if fast else 1
    return n_exact


@njit(nogil=True, error_model="numpy")
def _exact_units(rows_a, index_a, rows_b, index_b, unit, norm_t):  # pragma: no cover - compiled
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


def _exact_pair_sum(rows_a, index_a, rows_b, index_b, multiplicity, transform, chunk_rows):
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
        length = transform.xi(norm_t)                     # xi(||t||) <= G
        total += unit.T @ ((length * length * multiplicity[k0:k1])[:, None] * unit)
    return total
