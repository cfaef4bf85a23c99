"""The fast path's tile loop: two matrix products per tile (docs/method.md, section 7).

For tiles of rows A and B and weights ``W_ij = w(||t_ij||^2)`` the loop accumulates

    S = 1/2 [A^T diag(W 1) A + B^T diag(W^T 1) B - A^T W B - (A^T W B)^T]

from ``A B^T`` (the squared distances) and ``[B 1]^T W^T`` (the partner sums and the
weight sums at once).  One fused numba pass per tile turns ``A B^T`` into weights and
marks the ill-conditioned pairs for the exact path (:mod:`.exact_path`); the sphere on
two tiles of distinct rows has a pass of its own, without multiplicities.  Scratch is
O(tile_rows^2 + tile_rows d + d^2), kept by each thread from one call to the next.

Every sum is accumulated as :func:`~.rounding.rounding_error_bound` counts it: within a
tile pair (at most T terms deep), then tile pair by tile pair (at most B / T more).
The column weight sums ``c = W^T 1`` too: the fused pass adds a tile pair's weights into
a zeroed tile-sized buffer, which is then added to the block's running sums, exactly
like ``W 1`` that the second product gives per tile pair.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .exact_path import exact_pair_sum
from .jit import njit
from .rounding import BAND_TILES, CONDITION_LIMIT, MIN_SQUARED_DISTANCE, TILE_ARRAYS  # noqa: F401
from .spatial_sign import SpatialSign

__all__ = ["ClassPair", "Side", "TileSummer", "WeightKind"]

#: A diagonal tile of m rows is split in halves while m^2 d exceeds this (the flops a
#: split saves against the fixed cost of the two more products it makes), and m > 32.
_DIAGONAL_SPLIT_FLOPS = 1e6
#: Elements of a custom xi's weights computed at once (small temporaries).
_CUSTOM_STRIP_ELEMENTS = 16384


class WeightKind:
    """How the fused pass turns a squared distance into a pair weight (ints for numba)."""

    SPHERE = 0
    WINSOR = 1
    IDENTITY = 2
    #: A custom xi: the pass leaves ``||t'||^2`` and Python computes the weights.
    SQUARED_NORM = 3

    @staticmethod
    def of(spatial_sign: SpatialSign) -> int:
        """The kind for a spatial sign (custom ones are computed in Python)."""
        return {
            "sphere": WeightKind.SPHERE,
            "winsor": WeightKind.WINSOR,
            "identity": WeightKind.IDENTITY,
        }.get(spatial_sign.name, WeightKind.SQUARED_NORM)


# The kinds as module constants: the compiled pass reads globals, not class attributes.
_SPHERE, _WINSOR, _IDENTITY, _SQUARED_NORM = (
    WeightKind.SPHERE,
    WeightKind.WINSOR,
    WeightKind.IDENTITY,
    WeightKind.SQUARED_NORM,
)


@dataclass
class ClassPair:
    """The class pair a :class:`TileSummer` is running: its two sides, the centring point,
    the power-of-two ``scale`` of its rows, the weight ``cap`` (``1/scale^2``) and the
    second side's running weight sums ``colsum`` (``W^T 1``, a tile pair's sums added
    at a time).
    """

    side_a: Side
    side_b: Side
    centre: NDArray[np.float64]
    scale: float
    cap: float
    colsum: NDArray[np.float64]


class Side:
    """The records of one block that take part in a class pair: raw rows, indices, counts."""

    def __init__(
        self, raw: NDArray[np.float64], index: NDArray[np.int64], count: NDArray[np.float64]
    ) -> None:
        self.raw = raw
        self.index = index
        self.count = count

    def __len__(self) -> int:
        rows: int = self.index.shape[0]
        return rows


class _TileSlot:
    """Buffers of one loaded tile: rows, columns with ones, squared norms, partner sums,
    and whether each of its rows has multiplicity 1 (``unit``).
    """

    def __init__(self, tile: int, d: int) -> None:
        self.d = d
        self.memory: list[NDArray[np.float64]] = [
            np.empty(tile * d),
            np.empty(tile * (d + 1)),
            np.empty(tile),
            np.empty(tile * (d + 1)),
        ]
        self.start = self.stop = 0
        self.unit = False

    def __len__(self) -> int:
        return self.stop - self.start

    def load(
        self, side: Side, start: int, stop: int, centre: NDArray[np.float64], scale: float
    ) -> _TileSlot:
        """Rows ``start:stop`` of ``side``, centred and scaled."""
        m, d = stop - start, self.d
        rows, cols, norm2, partners = self.memory
        self.rows = rows[: m * d].reshape(m, d)
        self.cols = cols[: m * (d + 1)].reshape(d + 1, m)
        self.norm2 = norm2[:m]
        self.partners = partners[: m * (d + 1)].reshape(d + 1, m)  # [W B | W 1]^T
        self.partners[:] = 0.0
        self.start, self.stop = start, stop
        # Every row distinct (multiplicity 1): the sphere's pass needs no counts.
        self.unit = bool(np.all(side.count[start:stop] == 1.0))
        _load_tile(
            side.raw, side.index[start:stop], centre, scale, self.rows, self.cols, self.norm2
        )
        return self


class TileSummer:
    """The tile loop of one class pair, with scratch buffers reused across tiles.

    A loaded tile is kept twice: as rows (m x d) and as columns with a row of ones
    ((d + 1) x m), so that both products run on contiguous operands:
    ``W = A B^T`` is rows times columns, and ``[W B | W 1]^T = [B | 1]^T W^T`` is
    columns times ``W^T`` (faster in BLAS than ``W [B 1]`` with its d + 1 columns).
    Tiles of A are taken ``BAND_TILES`` at a time, so each tile of B is loaded once
    per band rather than once per tile.  A diagonal tile (pairs i < j of one tile) is
    split in halves (see ``_DIAGONAL_SPLIT_FLOPS``), so that little of its product is
    spent on the pairs j <= i it does not need.
    """

    def __init__(self, spatial_sign: SpatialSign, d: int, tile: int) -> None:
        self.spatial_sign = spatial_sign
        self.kind = WeightKind.of(spatial_sign)
        self.radius2x2 = 2.0 * (spatial_sign.radius or 0.0) ** 2
        self.d = d
        self.tile = tile
        self.weights, self.product, self.side, self.tile_colsum, self.slots = _scratch(tile, d)
        self.diagonal_rows = max(32, int(math.sqrt(_DIAGONAL_SPLIT_FLOPS / d)))

    def run(
        self, side_a: Side, side_b: Side, within: bool, centre: NDArray[np.float64], exponent: int
    ) -> NDArray[np.float64]:
        """``S`` over the pairs of ``side_a x side_b`` (``i < j`` when ``within``).

        Rows are centred and multiplied by ``2^exponent``; the fast-path weights are
        ``w(||t'||^2 / s^2) / s^2`` for ``s = 2^exponent``, so the sums come out unscaled.
        """
        d = self.d
        # Tiles of about equal size, at most self.tile rows: a block of 2667 rows is 5
        # tiles of 448 and one of 427, not 5 of 512 and a thin one of 107 that costs a
        # pass over every tile of the other side at a low GEMM rate.  As many tiles as
        # with self.tile, no larger: the depth rounding_error_bound counts
        # (2 T + 2 ceil(B / T)) still bounds it.
        tile_a = _even_tile(len(side_a), self.tile)
        tile_b = tile_a if within else _even_tile(len(side_b), self.tile)
        scale = math.ldexp(1.0, exponent)
        # 1/s^2 caps winsor's weight (t inside the radius) and is identity's weight.
        cap = math.ldexp(1.0, -2 * exponent) if -2 * exponent < 1024 else math.inf
        self.pair = ClassPair(side_a, side_b, centre, scale, cap, np.zeros(len(side_b)))
        colsum = self.pair.colsum
        # M with S = (M + M^T) / 2: per tile of A, M += (diag(r/2) A - W B)^T A,
        # and for two blocks M += B^T diag(c/2) B (r = W 1, c = W^T 1).
        twice_sym = np.zeros((d, d))
        exact = np.zeros((d, d))
        band_rows = tile_a * BAND_TILES
        for band0 in range(0, len(side_a), band_rows):
            starts = range(band0, min(band0 + band_rows, len(side_a)), tile_a)
            band = [
                slot.load(side_a, i0, min(i0 + tile_a, len(side_a)), centre, scale)
                for slot, i0 in zip(self.slots, starts)
            ]
            for j0 in range(band0 if within else 0, len(side_b), tile_b):
                if within and j0 < band0 + band_rows:
                    b_tile = band[(j0 - band0) // tile_a]  # already loaded
                else:
                    b_tile = self.slots[-1].load(
                        side_b, j0, min(j0 + tile_b, len(side_b)), centre, scale
                    )
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
                    half_weight += 0.5 * colsum[a_tile.start : a_tile.stop]
                twice_sym += self._side(a_tile, half_weight, subtract=True) @ a_tile.rows
        if not within:
            for j0 in range(0, len(side_b), tile_b):
                b_tile = self.slots[-1].load(
                    side_b, j0, min(j0 + tile_b, len(side_b)), centre, scale
                )
                twice_sym += self._side(b_tile, 0.5 * colsum[j0 : b_tile.stop]) @ b_tile.rows
        return 0.5 * (twice_sym + twice_sym.T) + exact

    def _side(
        self, tile: _TileSlot, half_weight: NDArray[np.float64], subtract: bool = False
    ) -> NDArray[np.float64]:
        """``diag(half_weight) rows`` of a loaded tile, transposed (d x m), minus its partner
        sums ``(W B)^T`` when ``subtract``: in a kept buffer, since a fresh d x T array per
        tile is a fresh mapping of pages under Dask's malloc settings.
        """
        d, m = self.d, len(tile)
        side = self.side[: d * m].reshape(d, m)
        np.multiply(tile.cols[:d], half_weight, out=side)
        if subtract:
            np.subtract(side, tile.partners[:d], out=side)
        return side

    def _diagonal(self, tile: _TileSlot, lo: int, hi: int) -> NDArray[np.float64] | float:
        """The pairs i < j of rows ``lo:hi`` of a loaded tile: halves, and the pairs between."""
        if hi - lo <= self.diagonal_rows:
            return self._tile_pair(tile, lo, hi, tile, lo, hi, diagonal=True)
        mid = (lo + hi) // 2
        return (
            self._diagonal(tile, lo, mid)
            + self._tile_pair(tile, lo, mid, tile, mid, hi)
            + self._diagonal(tile, mid, hi)
        )

    def _tile_pair(
        self,
        a_tile: _TileSlot,
        a_lo: int,
        a_hi: int,
        b_tile: _TileSlot,
        b_lo: int,
        b_hi: int,
        diagonal: bool = False,
    ) -> NDArray[np.float64] | float:
        """Add ``[W B | W 1]^T`` of rows ``a_lo:a_hi`` x ``b_lo:b_hi`` of two loaded tiles
        to the first one's partner sums; return the exact-path sum (0.0 when no pair takes it).
        """
        pair = self.pair
        side_a, side_b, colsum = pair.side_a, pair.side_b, pair.colsum
        d = self.d
        i0, i1 = a_tile.start + a_lo, a_tile.start + a_hi
        j0, j1 = b_tile.start + b_lo, b_tile.start + b_hi
        weights = self.weights[: (i1 - i0) * (j1 - j0)].reshape(i1 - i0, j1 - j0)
        cols_b = b_tile.cols[:, b_lo:b_hi]
        np.matmul(a_tile.rows[a_lo:a_hi], cols_b[:d], out=weights)
        # This tile pair's column weight sums (at most T terms deep), added to the block's
        # running sums once: the depth rounding_error_bound counts, T + B / T.
        tile_colsum = self.tile_colsum[: j1 - j0]
        tile_colsum[:] = 0.0
        unit_sphere = self.kind == WeightKind.SPHERE and a_tile.unit and b_tile.unit
        weights_pass = _unit_sphere_weights if unit_sphere else _fast_path_weights
        n_exact = weights_pass(
            weights,
            a_tile.norm2[a_lo:a_hi],
            b_tile.norm2[b_lo:b_hi],
            side_a.count[i0:i1],
            side_b.count[j0:j1],
            diagonal,
            self.kind,
            pair.cap,
            self.radius2x2,
            tile_colsum,
        )
        exact = self._exact_pairs(weights, side_a, i0, side_b, j0) if n_exact else 0.0
        if self.kind == WeightKind.SQUARED_NORM:
            self._custom_weights(
                weights, side_a.count[i0:i1], side_b.count[j0:j1], pair.scale, tile_colsum
            )
        colsum[j0:j1] += tile_colsum
        product = self.product[: (d + 1) * (i1 - i0)].reshape(d + 1, i1 - i0)
        np.matmul(cols_b, weights.T, out=product)
        a_tile.partners[:, a_lo:a_hi] += product
        return exact

    def _exact_pairs(
        self, weights: NDArray[np.float64], side_a: Side, i0: int, side_b: Side, j0: int
    ) -> NDArray[np.float64]:
        """Sum of the pairs the fast pass marked (-1) from their raw rows; marks cleared."""
        local_i, local_j = np.nonzero(weights < 0)
        weights[local_i, local_j] = 0.0
        return exact_pair_sum(
            side_a.raw,
            side_a.index[i0 + local_i],
            side_b.raw,
            side_b.index[j0 + local_j],
            side_a.count[i0 + local_i] * side_b.count[j0 + local_j],
            self.spatial_sign,
            self.tile,
        )

    def _custom_weights(
        self,
        weights: NDArray[np.float64],
        count_a: NDArray[np.float64],
        count_b: NDArray[np.float64],
        scale: float,
        colsum: NDArray[np.float64],
    ) -> None:
        """A custom xi is plain Python: weights ``xi(||t'|| / s)^2 / ||t'||^2`` from the
        squared norms the fused pass left, a few rows at a time (small temporaries).
        """
        strip = max(1, _CUSTOM_STRIP_ELEMENTS // max(weights.shape[1], 1))
        for r0 in range(0, weights.shape[0], strip):
            part = weights[r0 : r0 + strip]
            kept = part > 0
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                s2 = part[kept]
                xi = self.spatial_sign.xi(np.sqrt(s2) / scale)
                part[kept] = xi * xi / s2
            part *= count_a[r0 : r0 + strip, None] * count_b[None, :]
        colsum += weights.sum(axis=0)


def _even_tile(rows: int, tile: int) -> int:
    """The size of ``ceil(rows / tile)`` tiles of about equal size covering ``rows``: at
    most ``tile``, and a multiple of 16 rows where that keeps the count (BLAS's
    micro-tiles: 500-row tiles ran about 10 % slower than 512-row ones at d = 32).
    """
    if rows <= tile:
        return max(rows, 1)
    count = -(-rows // tile)
    size = -(-rows // count)
    aligned = -(-size // 16) * 16
    return aligned if aligned <= tile and -(-rows // aligned) == count else size


_thread_scratch = threading.local()


_Scratch = tuple[
    NDArray[np.float64],
    NDArray[np.float64],
    NDArray[np.float64],
    NDArray[np.float64],
    list[_TileSlot],
]


def _scratch(tile: int, d: int) -> _Scratch:
    """The tile loop's buffers (weights, product, side, a tile pair's column weight sums,
    tile slots), kept by each thread from one
    call to the next: allocating and first touching a few MiB per block pair costs about
    a millisecond, as much as a small block's pairs.  Within the memory budget either way.
    """
    kept: (
        tuple[
            tuple[int, int],
            NDArray[np.float64],
            NDArray[np.float64],
            NDArray[np.float64],
            NDArray[np.float64],
            list[_TileSlot],
        ]
        | None
    )
    kept = getattr(_thread_scratch, "buffers", None)
    if kept is None or kept[0] != (tile, d):
        kept = (
            (tile, d),
            np.empty(tile * tile),
            np.empty(tile * (d + 1)),
            np.empty(tile * d),
            np.empty(tile),
            [_TileSlot(tile, d) for _ in range(BAND_TILES + 1)],
        )
        _thread_scratch.buffers = kept
    return kept[1:]


@njit(nogil=True)
def _load_tile(
    rows: NDArray[np.float64],
    index: NDArray[np.int64],
    centre: NDArray[np.float64],
    scale: float,
    out_rows: NDArray[np.float64],
    out_cols: NDArray[np.float64],
    norm2: NDArray[np.float64],
) -> None:  # pragma: no cover
    """``out_rows = (rows[index] - centre) * scale`` (as ``x s - c s`` when s < 1, so
    nothing overflows), ``out_cols`` its transpose with a last row of ones, and the
    squared norms of the scaled rows.
    """
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
    for r0 in range(0, index.shape[0], 16):  # transposed in blocks of rows (cache)
        for k in range(d):
            for r in range(r0, min(r0 + 16, index.shape[0])):
                out_cols[k, r] = out_rows[r, k]
    _squared_norms(out_rows, norm2)


@njit(nogil=True, fastmath={"reassoc"})
def _squared_norms(
    rows: NDArray[np.float64], out: NDArray[np.float64]
) -> None:  # pragma: no cover - compiled
    # Sums of squares in any order (reassoc lets them vectorise): at most d roundings.
    for r in range(rows.shape[0]):
        total = 0.0
        for k in range(rows.shape[1]):
            total += rows[r, k] * rows[r, k]
        out[r] = total


@njit(nogil=True, error_model="numpy", inline="always")
def _weights_pass(
    prod: NDArray[np.float64],
    norm2_a: NDArray[np.float64],
    norm2_b: NDArray[np.float64],
    count_a: NDArray[np.float64],
    count_b: NDArray[np.float64],
    diagonal: bool,
    kind: int,
    counted: bool,
    cap: float,
    radius2x2: float,
    colsum: NDArray[np.float64],
) -> int:  # pragma: no cover - compiled
    # One pass over the tile (the element-wise work would otherwise cost ~10 numpy
    # passes): prod[i, j] holds a_i . b_j on entry and the pair weight (times the two
    # multiplicities when ``counted``) on exit; -1 marks a pair for the exact path.  For
    # a custom xi (_SQUARED_NORM) it leaves ||t'||^2 instead, unweighted, and colsum is
    # not touched.  Inlined into the compiled passes below with ``kind`` and ``counted``
    # constants, so that each compiles without the branches it does not take.
    # The inner loop has no branch on the data and runs over slices from index 0
    # (a loop from a variable start defeats numba's proof that indices are >= 0):
    # it vectorises, ~5x faster.
    inv_limit = 1.0 / CONDITION_LIMIT
    n_exact = 0
    n_cols = prod.shape[1]
    for i in range(prod.shape[0]):
        start = min(i + 1, n_cols) if diagonal else 0
        prod[i, :start] = 0.0
        row, row_norm2, row_count, row_colsum = (
            prod[i, start:],
            norm2_b[start:],
            count_b[start:],
            colsum[start:],
        )
        norm2_i = norm2_a[i]
        count_i = count_a[i]
        for j in range(row.shape[0]):
            bound = norm2_i + row_norm2[j]
            squared = bound - 2.0 * row[j]  # ||a - b||^2 = 2 ||t'||^2
            fast = squared > max(bound * inv_limit, MIN_SQUARED_DISTANCE)
            # Transform.xi(||t'|| / s)^2 / ||t'||^2, inlined for numba: keep in step
            if kind == _SPHERE:
                weight = 2.0 / squared
            elif kind == _WINSOR:
                weight = min(cap, radius2x2 / squared)
            elif kind == _IDENTITY:
                weight = cap
            else:
                weight = 0.5 * squared
            if kind != _SQUARED_NORM:
                if counted:
                    weight *= count_i * row_count[j]
                row_colsum[j] += weight if fast else 0.0
            row[j] = weight if fast else -1.0
            n_exact += 0 if fast else 1
    return n_exact


@njit(nogil=True, error_model="numpy")
def _fast_path_weights(
    prod: NDArray[np.float64],
    norm2_a: NDArray[np.float64],
    norm2_b: NDArray[np.float64],
    count_a: NDArray[np.float64],
    count_b: NDArray[np.float64],
    diagonal: bool,
    kind: int,
    cap: float,
    radius2x2: float,
    colsum: NDArray[np.float64],
) -> int:  # pragma: no cover - compiled
    # The fused pass of any kind, weights times the rows' multiplicities.
    return _weights_pass(
        prod, norm2_a, norm2_b, count_a, count_b, diagonal, kind, True, cap, radius2x2, colsum
    )


@njit(nogil=True, error_model="numpy")
def _unit_sphere_weights(
    prod: NDArray[np.float64],
    norm2_a: NDArray[np.float64],
    norm2_b: NDArray[np.float64],
    count_a: NDArray[np.float64],
    count_b: NDArray[np.float64],
    diagonal: bool,
    kind: int,
    cap: float,
    radius2x2: float,
    colsum: NDArray[np.float64],
) -> int:  # pragma: no cover - compiled
    # The fused pass for the sphere on two tiles of distinct rows (every multiplicity 1,
    # the usual case): the same weights bit for bit (a product by 1.0 is exact) without
    # the two products and the loads of the counts, 0.15 ns a pair faster (a quarter of
    # the pass) at d = 32.  Same arguments as _fast_path_weights; kind is the sphere's.
    return _weights_pass(
        prod, norm2_a, norm2_b, count_a, count_b, diagonal, _SPHERE, False, cap, radius2x2, colsum
    )
