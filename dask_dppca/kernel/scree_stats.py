"""Exact per-block statistics of pairwise score differences, for the private scree (no Dask).

Along public (already released) unit directions ``v_1..v_k`` the scree statistics are
functions of record pairs only: ``dy_l = v_l^T (x_i - x_j)`` and, for the trace,
``||x_i - x_j||``.  They need no centre (a translation of the data changes nothing).

The pairs: the *scree design*, a public sub-design of K_hat's block pairs.  The rows
of each block are put in a public random order (a permutation drawn from the public
:data:`ORDER_SEED` and the block's index: the input's own row order, sorted by group
say, does not matter) and cut into consecutive sub-blocks of :data:`SCREE_BLOCK_ROWS`
rows.  For a block pair ``(I, I)`` the design keeps every pair inside each sub-block;
for a block pair ``(I, J)``, every pair between sub-block ``t`` of I and sub-block ``t``
of J.  So over the complete design with B equal blocks every record is in about
``64 B`` of about ``32 B n`` pairs: a mean over them has sensitivity about ``2 / n``
times the term's range, as over all pairs, for ``64 / block`` of the work (the degrees
and ``|P|`` are counted exactly by :func:`scree_design`).

This module computes, for one block pair and public parameters,

* :func:`block_histograms`: the exact integer counts of the pairs' ``|dy_l|`` (and
  ``||dx||``) on the public log grid :func:`grid_values` (``2^(j / 64)``, ``|j| <= 4096``);
* :func:`block_sums`: sums over the pairs of the clipped ``min(dy^2 / 2, C)``, the
  winsorized ``min(dy^2 / 2, U)`` and the Huber score ``clamp(dy^2 / 2 - m, -tau, tau)``,
  each per sub-block pair in float as numpy's ``sum(axis=0)`` adds a piece (row after
  row for two columns or more; its pairwise sum for one column) and across sub-block
  pairs exactly (:class:`~.ExactSum`).

Both are compiled (numba, the GIL released: the embedded cluster's threads run them side
by side) and give the bits of the numpy formulation they replaced, value by value
(tests/kernel/test_scree_kernel.py keeps it as the oracle).

Bad values have a bounded treatment: a pair with a non-finite difference counts in the
grid's top bin, at the clip level, at ``U`` and at ``+tau``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ..validation import integer_at_least
from .exact_sum import ExactSum
from .fp_state import own_errstate
from .jit import njit

__all__ = [
    "GRID_HALF_WIDTH",
    "GRID_STEPS_PER_OCTAVE",
    "ORDER_SEED",
    "SCREE_BLOCK_ROWS",
    "block_histograms",
    "block_order",
    "block_sums",
    "grid_index",
    "grid_values",
    "scree_design",
    "sub_block_pairs_per_record",
    "sub_blocks",
    "summation_slack",
]

#: Rows of a sub-block of the scree design.
SCREE_BLOCK_ROWS = 64
#: Grid points per factor 2 of the dispersion grid (a relative step of 1.1 %).
GRID_STEPS_PER_OCTAVE = 64
#: The grid is ``2^(j / 64)`` for ``-GRID_HALF_WIDTH <= j <= GRID_HALF_WIDTH`` (2^-64 .. 2^64).
GRID_HALF_WIDTH = 64 * GRID_STEPS_PER_OCTAVE
_N_GRID = 2 * GRID_HALF_WIDTH + 1


def grid_values() -> NDArray[np.float64]:
    """The public grid ``2^(j / 64)``, ``j = -4096 .. 4096`` (8193 points, increasing)."""
    j = np.arange(-GRID_HALF_WIDTH, GRID_HALF_WIDTH + 1, dtype=np.float64)
    return np.exp2(j / GRID_STEPS_PER_OCTAVE)


@own_errstate
def grid_index(values: NDArray[np.float64]) -> NDArray[np.int64]:
    """0-based grid bin of each value >= 0: the first grid point at or above it (about).

    ``0`` and values below the grid go to bin 0, values above it and non-finite ones to
    the top bin.  Any deterministic rule is private (a pair's bin depends on that pair
    only); this one rounds ``64 log2(v)`` up.
    """
    v = np.asarray(values, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        j = np.ceil(GRID_STEPS_PER_OCTAVE * np.log2(v))
    j = np.where(np.isnan(j), GRID_HALF_WIDTH, j)  # NaN (a non-finite difference): top
    return (np.clip(j, -GRID_HALF_WIDTH, GRID_HALF_WIDTH) + GRID_HALF_WIDTH).astype(np.int64)


def sub_blocks(n_rows: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of the consecutive sub-blocks of a block of ``n_rows`` rows.

    Sub-blocks of :data:`SCREE_BLOCK_ROWS`; a shorter tail is its own sub-block.
    """
    b = SCREE_BLOCK_ROWS
    return [(start, min(start + b, n_rows)) for start in range(0, int(n_rows), b)]


def scree_design(
    block_sizes: tuple[int, ...], block_pairs: tuple[tuple[int, int], ...] | None = None
) -> tuple[int, int]:
    """``(n_pairs, max_degree)`` of the scree design over these blocks and block pairs.

    ``block_pairs`` are K_hat's (``None``: each block with itself only).  Public: block
    sizes and pairs only.
    """
    pairs = tuple((i, i) for i in range(len(block_sizes))) if block_pairs is None else block_pairs
    subs = [[stop - start for start, stop in sub_blocks(size)] for size in block_sizes]
    degrees = [np.zeros(len(s), dtype=np.int64) for s in subs]
    n_pairs = 0
    for i, j in pairs:
        if i == j:
            m = np.asarray(subs[i], dtype=np.int64)
            n_pairs += int(np.sum(m * (m - 1) // 2))
            degrees[i] += m - 1
            continue
        t = min(len(subs[i]), len(subs[j]))
        a = np.asarray(subs[i][:t], dtype=np.int64)
        b = np.asarray(subs[j][:t], dtype=np.int64)
        n_pairs += int(np.sum(a * b))
        degrees[i][:t] += b
        degrees[j][:t] += a
    return n_pairs, int(max((int(d.max()) for d in degrees if d.size), default=0))


#: Public seed of the rows' order inside each block (with the block's index).
ORDER_SEED = 20261201


def block_order(index: int, rows: int) -> NDArray[np.int64]:
    """The public random order of a block's rows (from :data:`ORDER_SEED` and its index)."""
    return np.random.default_rng([ORDER_SEED, int(index)]).permutation(int(rows))


def _ordered_scores(
    block: NDArray[np.float64], directions: NDArray[np.float64], index: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The block's rows in their public order and their scores ``x V^T`` (rows, k)."""
    x = np.asarray(block, dtype=np.float64)[block_order(index, block.shape[0])]
    with np.errstate(all="ignore"):  # non-finite records: treated below, never a warning
        scores = x @ np.asarray(directions, dtype=np.float64).T
    return x, scores


class _BlockPair:
    """A block pair's sub-block pairs, ready for the compiled passes.

    ``ya``, ``yb``: the two blocks' scores in their public row order (``yb is ya`` for a
    block with itself); ``bounds[s] = (a0, a1, b0, b1)``: the rows of sub-block pair
    ``s`` (inside one sub-block, ``a0 == b0``: its pairs ``i < j``; else all of
    ``a x b``); ``within``: ``[1]`` for a block with itself, else ``[0]``.  With the
    trace, ``norms`` (``||x_i||^2`` per row of each block) and ``grams[s] = x_a x_b^T``
    (numpy's matrix product, one per sub-block pair) give ``||dx||^2 = ||x_i||^2 +
    ||x_j||^2 - 2 x_i . x_j``: O(d) per pair in BLAS, not a d-vector per pair, and each
    pair's value still a function of its two records alone (an entry of a product does
    not depend on the other rows), so privacy is untouched; its accuracy needs data not
    far from the origin relative to its spread (relative error about
    ``u ||x||^2 / ||dx||^2``); negatives from rounding are set to 0.
    """

    def __init__(
        self,
        block: NDArray[np.float64],
        directions: NDArray[np.float64],
        trace: bool,
        other: NDArray[np.float64] | None,
        indices: tuple[int, int] | None,
    ) -> None:
        ia, ib = indices if indices is not None else (0, 1)
        x, self.ya = _ordered_scores(block, directions, ia)
        if other is None:
            z, self.yb = x, self.ya
            bounds = [(a, b, a, b) for a, b in sub_blocks(x.shape[0]) if b - a > 1]
        else:
            z, self.yb = _ordered_scores(other, directions, ib)
            bounds = [
                (a0, a1, b0, b1)
                for (a0, a1), (b0, b1) in zip(sub_blocks(x.shape[0]), sub_blocks(z.shape[0]))
            ]
        self.within = np.array([1 if other is None else 0], dtype=np.int64)
        self.bounds = np.array(bounds, dtype=np.int64).reshape(-1, 4)
        self.n_sub = len(bounds)
        self.norms_a = self.norms_b = self.grams = np.zeros((0, 0, 0))
        if trace:
            with np.errstate(all="ignore"):
                self.norms_a = np.einsum("pd,pd->p", x, x).reshape(1, 1, -1)
                self.norms_b = (
                    self.norms_a if other is None else np.einsum("pd,pd->p", z, z).reshape(1, 1, -1)
                )
                self.grams = _grams(x, None if other is None else z, bounds)


def _grams(
    x: NDArray[np.float64], z: NDArray[np.float64] | None, bounds: list[tuple[int, int, int, int]]
) -> NDArray[np.float64]:
    """``grams[s] = x_a x_b^T`` for each sub-block pair ``s`` (``z`` None: ``x_a x_a^T``).

    The leading sub-blocks of 64 rows in one batched product (numpy's matmul makes the
    same BLAS call for each matrix of the batch as for the matrix alone: the same bits),
    the short tail on its own.
    """
    b = SCREE_BLOCK_ROWS
    grams = np.empty((max(len(bounds), 1), b, b))
    full = 0
    while full < len(bounds) and bounds[full][1] - bounds[full][0] == b:
        if z is not None and bounds[full][3] - bounds[full][2] != b:
            break
        full += 1
    d = x.shape[1]
    xa = x[: full * b].reshape(full, b, d)
    xb = xa if z is None else z[: full * b].reshape(full, b, d)
    np.matmul(xa, xb.transpose(0, 2, 1), out=grams[:full])
    for s in range(full, len(bounds)):
        a0, a1, b0, b1 = bounds[s]
        rows = x[a0:a1]
        grams[s, : a1 - a0, : b1 - b0] = rows @ (rows if z is None else z[b0:b1]).T
    return grams


@njit(nogil=True, error_model="numpy")
def _fill_pair_values(
    ya: NDArray[np.float64],
    yb: NDArray[np.float64],
    bounds: NDArray[np.int64],
    within: NDArray[np.int64],
    norms_a: NDArray[np.float64],
    norms_b: NDArray[np.float64],
    grams: NDArray[np.float64],
    s: int,
    out: NDArray[np.float64],
    row: int,
) -> int:  # pragma: no cover - compiled
    """``|dy|`` (and ``||dx||`` when ``grams`` is not empty) of sub-block pair ``s``'s
    pairs into the rows of ``out`` from ``row`` on, in row-major order of ``a x b``
    (inside one sub-block: ``i < j``); the row after the last.  The operations are
    numpy's on the arrays, element by element (``(||x_i||^2 + ||x_j||^2) - 2 g_ij``,
    its square root), so every value has their bits.
    """
    k = ya.shape[1]
    trace = grams.shape[0] > 0
    a0, a1, b0, b1 = bounds[s, 0], bounds[s, 1], bounds[s, 2], bounds[s, 3]
    p = row
    for i in range(a1 - a0):
        for j in range(i + 1 if within[0] else 0, b1 - b0):
            for m in range(k):
                out[p, m] = abs(ya[a0 + i, m] - yb[b0 + j, m])
            if trace:
                square = (norms_a[0, 0, a0 + i] + norms_b[0, 0, b0 + j]) - 2.0 * grams[s, i, j]
                if square > 0.0:
                    out[p, k] = np.sqrt(square)
                elif np.isnan(square):
                    out[p, k] = square
                else:
                    out[p, k] = 0.0
            p += 1
    return p


@njit(nogil=True, error_model="numpy")
def _fill_chunk(
    ya: NDArray[np.float64],
    yb: NDArray[np.float64],
    bounds: NDArray[np.int64],
    within: NDArray[np.int64],
    norms_a: NDArray[np.float64],
    norms_b: NDArray[np.float64],
    grams: NDArray[np.float64],
    first: int,
    stop: int,
    out: NDArray[np.float64],
) -> int:  # pragma: no cover - compiled
    """The pair values of sub-block pairs ``first .. stop - 1`` into ``out``; their count."""
    row = 0
    for s in range(first, stop):
        row = _fill_pair_values(ya, yb, bounds, within, norms_a, norms_b, grams, s, out, row)
    return row


@njit(nogil=True)
def _add_grid_counts(
    logs: NDArray[np.float64], counts: NDArray[np.int64]
) -> None:  # pragma: no cover - compiled
    """Add the grid bins of values whose ``log2`` is ``logs`` (pairs, m) to ``counts``
    (m, 8193): :func:`grid_index`'s rule, entry by entry.
    """
    for p in range(logs.shape[0]):
        for m in range(logs.shape[1]):
            j = np.ceil(GRID_STEPS_PER_OCTAVE * logs[p, m])
            if np.isnan(j):  # NaN (a non-finite difference): top
                j = GRID_HALF_WIDTH
            elif j < -GRID_HALF_WIDTH:
                j = -GRID_HALF_WIDTH
            elif j > GRID_HALF_WIDTH:
                j = GRID_HALF_WIDTH
            counts[m, int(j) + GRID_HALF_WIDTH] += 1


@njit(nogil=True)
def _minimum(a: float, b: float) -> float:  # pragma: no cover - compiled
    """The float minimum as numpy takes it (``a`` if ``a < b`` or ``a`` is NaN, else ``b``)."""
    return a if np.isnan(a) or a < b else b


@njit(nogil=True)
def _maximum(a: float, b: float) -> float:  # pragma: no cover - compiled
    """The float maximum as numpy takes it (``a`` if ``a > b`` or ``a`` is NaN, else ``b``)."""
    return a if np.isnan(a) or a > b else b


@njit(nogil=True)
def _pairwise_block(
    terms: NDArray[np.float64], start: int, n: int, column: int
) -> float:  # pragma: no cover - compiled
    """At most 128 terms summed as numpy does: 8 accumulators (below 8 terms: in turn)."""
    if n < 8:
        res = 0.0
        for i in range(start, start + n):
            res += terms[i, column]
        return res
    r0 = terms[start, column]
    r1 = terms[start + 1, column]
    r2 = terms[start + 2, column]
    r3 = terms[start + 3, column]
    r4 = terms[start + 4, column]
    r5 = terms[start + 5, column]
    r6 = terms[start + 6, column]
    r7 = terms[start + 7, column]
    i = 8
    while i < n - (n % 8):
        r0 += terms[start + i, column]
        r1 += terms[start + i + 1, column]
        r2 += terms[start + i + 2, column]
        r3 += terms[start + i + 3, column]
        r4 += terms[start + i + 4, column]
        r5 += terms[start + i + 5, column]
        r6 += terms[start + i + 6, column]
        r7 += terms[start + i + 7, column]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += terms[start + i, column]
        i += 1
    return float(res)


@njit(nogil=True)
def _pairwise_sum(
    terms: NDArray[np.float64], n: int, column: int
) -> float:  # pragma: no cover - compiled
    """The pairwise sum of ``terms[:n, column]`` as numpy's ``pairwise_sum`` adds it (blocks
    of at most 128 terms; above that the two halves, the first a multiple of 8 long).

    Without recursion (with a recursive form, a second process loading the cached kernel
    crashed once here, numba 0.68): the halving tree is walked with explicit stacks,
    each node's value the sum of its two halves', as numpy adds them.
    """
    starts = np.empty(128, dtype=np.int64)
    lengths = np.empty(128, dtype=np.int64)
    done = np.empty(128, dtype=np.int64)
    values = np.empty(128, dtype=np.float64)
    top, n_values = 0, 0
    starts[0], lengths[0], done[0] = 0, n, 0
    while top >= 0:
        start, length, visited = starts[top], lengths[top], done[top]
        top -= 1
        if length <= 128:
            values[n_values] = _pairwise_block(terms, start, length, column)
            n_values += 1
        elif visited:
            values[n_values - 2] = values[n_values - 2] + values[n_values - 1]
            n_values -= 1
        else:
            half = length // 2
            half -= half % 8
            top += 1
            starts[top], lengths[top], done[top] = start, length, 1
            top += 1
            starts[top], lengths[top], done[top] = start + half, length - half, 0
            top += 1
            starts[top], lengths[top], done[top] = start, half, 0
    return float(values[0])


@njit(nogil=True, error_model="numpy")
def _block_pair_sums(
    ya: NDArray[np.float64],
    yb: NDArray[np.float64],
    bounds: NDArray[np.int64],
    within: NDArray[np.int64],
    norms_a: NDArray[np.float64],
    norms_b: NDArray[np.float64],
    grams: NDArray[np.float64],
    clip: NDArray[np.float64],
    upper: NDArray[np.float64],
    centre: NDArray[np.float64],
    tau: NDArray[np.float64],
    partials: NDArray[np.float64],
) -> None:  # pragma: no cover - compiled
    """Each sub-block pair's sums of the terms into its row of ``partials``.

    The terms of a pair's values ``v`` (``|dy|``, ``||dx||``): ``min(v^2 / 2, C)``
    (len(clip) columns), ``min(dy^2 / 2, U)`` and ``clamp(dy^2 / 2 - m, -tau, tau)`` (k
    columns each; none when ``upper`` / ``centre`` is empty); a non-finite ``v^2 / 2``
    gives ``C``, ``U`` and ``+tau``.  Element by element numpy's operations on the
    arrays (``np.minimum``, ``np.clip``), and each piece summed as numpy sums its own
    (pairs, columns) array with ``sum(axis=0)``: row after row (``0 + t_0 + t_1 + ...``)
    for two columns or more, as it goes; its pairwise sum for a single column, from the
    column kept (:func:`_pairwise_sum`).  The same bits.
    """
    k = ya.shape[1]
    trace = grams.shape[0] > 0
    n_clip, n_upper, n_huber = clip.shape[0], upper.shape[0], centre.shape[0]
    width = n_clip + n_upper + n_huber
    one = np.array([n_clip == 1, n_upper == 1, n_huber == 1])
    kept = np.empty((SCREE_BLOCK_ROWS * SCREE_BLOCK_ROWS, 3))  # single columns, for pairwise
    acc = np.zeros(width)
    for s in range(bounds.shape[0]):
        a0, a1, b0, b1 = bounds[s, 0], bounds[s, 1], bounds[s, 2], bounds[s, 3]
        acc[:] = 0.0
        p = 0
        for i in range(a1 - a0):
            for j in range(i + 1 if within[0] else 0, b1 - b0):
                for m in range(k + 1 if trace else k):
                    if m < k:
                        v = abs(ya[a0 + i, m] - yb[b0 + j, m])
                    else:
                        square = (norms_a[0, 0, a0 + i] + norms_b[0, 0, b0 + j]) - 2.0 * grams[
                            s, i, j
                        ]
                        if square > 0.0:
                            v = np.sqrt(square)
                        elif np.isnan(square):
                            v = square
                        else:
                            v = 0.0
                    half_square = 0.5 * v * v
                    bad = not np.isfinite(half_square)
                    if m < n_clip:
                        term = clip[m] if bad else _minimum(half_square, clip[m])
                        if one[0]:
                            kept[p, 0] = term
                        else:
                            acc[m] += term
                    if m < n_upper:
                        term = upper[m] if bad else _minimum(half_square, upper[m])
                        if one[1]:
                            kept[p, 1] = term
                        else:
                            acc[n_clip + m] += term
                    if m < n_huber:
                        score = _minimum(_maximum(half_square - centre[m], -tau[m]), tau[m])
                        term = tau[m] if bad else score
                        if one[2]:
                            kept[p, 2] = term
                        else:
                            acc[n_clip + n_upper + m] += term
                p += 1
        first = 0
        for piece, used in enumerate((n_clip, n_upper, n_huber)):
            if used == 1:
                acc[first] = 0.0 + _pairwise_sum(kept, p, piece)
            first += used
        for m in range(width):
            partials[s, m] = acc[m]


#: Pair values one histogram step holds at most (the chunk of sub-block pairs it fills).
_CHUNK_VALUES = 1 << 21


@own_errstate
def block_histograms(
    block: NDArray[np.float64],
    directions: NDArray[np.float64],
    *,
    trace: bool = True,
    other: NDArray[np.float64] | None = None,
    indices: tuple[int, int] | None = None,
) -> NDArray[np.int64]:
    """Exact counts of a block pair's scree-design pairs on the public grid.

    Parameters
    ----------
    block : ndarray, shape (rows, d)
    directions : ndarray, shape (k, d)
        Public unit directions.
    trace : bool
        Also count ``||x_i - x_j||`` (the last row).
    other : ndarray, shape (rows', d), optional
        The block pair's second block (default: the block with itself).
    indices : (int, int), optional
        The blocks' indices in the input (their public row order; default (0, 1)).

    Returns
    -------
    ndarray of int64, shape (k [+ 1], 8193)
    """
    m = directions.shape[0] + (1 if trace else 0)
    counts = np.zeros((m, _N_GRID), dtype=np.int64)
    pair = _BlockPair(block, directions, trace, other, indices)
    per_sub = SCREE_BLOCK_ROWS * SCREE_BLOCK_ROWS
    step = max(1, _CHUNK_VALUES // (per_sub * m))
    values = np.empty((min(step, max(pair.n_sub, 1)) * per_sub, m))
    for first in range(0, pair.n_sub, step):
        stop = min(first + step, pair.n_sub)
        n = _fill_chunk(
            pair.ya,
            pair.yb,
            pair.bounds,
            pair.within,
            pair.norms_a,
            pair.norms_b,
            pair.grams,
            first,
            stop,
            values,
        )
        # numpy's log2 (not the compiled one, which differs in the last bit for about
        # 2 values in 10^4): the bins are exactly grid_index's.
        with np.errstate(divide="ignore", invalid="ignore"):
            logs = np.log2(values[:n])
        _add_grid_counts(logs, counts)
    return counts


@own_errstate
def block_sums(
    block: NDArray[np.float64],
    directions: NDArray[np.float64],
    clip: NDArray[np.float64] | None,
    upper: NDArray[np.float64] | None = None,
    huber_centre: NDArray[np.float64] | None = None,
    huber_tau: NDArray[np.float64] | None = None,
    *,
    other: NDArray[np.float64] | None = None,
    indices: tuple[int, int] | None = None,
) -> ExactSum:
    """Exact sums over a block pair's scree-design pairs of the clipped, winsorized and
    Huber terms.

    Parameters
    ----------
    block : ndarray, shape (rows, d)
    directions : ndarray, shape (k, d)
    clip : ndarray, shape (k + 1,) or (k,), or None
        Clip levels of ``dy_l^2 / 2`` (and, with k + 1 entries, of ``||dx||^2 / 2``);
        None: no clipped sums (a Huber step alone).
    upper : ndarray, shape (k,), optional
        Winsorizing levels of ``dy_l^2 / 2``.
    huber_centre, huber_tau : ndarray, shape (k,), optional
        The Huber step's current centre and threshold.
    other, indices
        As for :func:`block_histograms`.

    Returns
    -------
    ExactSum
        Of shape (len(clip) + len(upper) + len(huber_centre),): the clipped sums, then
        the winsorized ones, then the Huber scores, in the order given.

    Notes
    -----
    Each sub-block pair's sum of a piece is numpy's ``sum(axis=0)`` of that piece's
    (pairs, columns) array (``_block_pair_sums``), as the float slack
    (:func:`summation_slack`) covers; the sub-block pairs' sums are added exactly.
    """
    k = directions.shape[0]
    empty = np.zeros(0)
    c = empty if clip is None else np.asarray(clip, dtype=np.float64).reshape(-1)
    if c.size not in (0, k, k + 1):
        raise ValueError(f"clip: expected {k} or {k + 1} levels, got {c.size}")
    trace = c.size == k + 1
    u = empty if upper is None else np.asarray(upper, dtype=np.float64).reshape(-1)
    if huber_centre is not None and huber_tau is None:
        raise ValueError("huber_tau: required with huber_centre")
    m = empty if huber_centre is None else np.asarray(huber_centre, dtype=np.float64).reshape(-1)
    tau = empty if huber_centre is None else np.asarray(huber_tau, dtype=np.float64).reshape(-1)
    if u.size not in (0, k) or m.size not in (0, k) or tau.size != m.size:
        raise ValueError(f"upper, huber_centre, huber_tau: expected {k} entries each")
    total = c.size + u.size + m.size
    pair = _BlockPair(block, directions, trace, other, indices)
    partials = np.zeros((pair.n_sub, total))
    _block_pair_sums(
        pair.ya,
        pair.yb,
        pair.bounds,
        pair.within,
        pair.norms_a,
        pair.norms_b,
        pair.grams,
        c,
        u,
        m,
        tau,
        partials,
    )
    return ExactSum.of_rows(partials)


def summation_slack(n_pairs: int, sub_block_pairs_per_record: int) -> float:
    """Room, in units of a term's range, for the float sums' rounding (public).

    A sub-block pair's float sum of ``p <= SCREE_BLOCK_ROWS^2`` terms in ``[0, C]`` is
    within ``(p - 1) u p C`` of exact in any order of addition (Higham 2002, 4.2; numpy's
    ``sum(axis=0)`` adds a piece of two columns or more row after row, not pairwise).  One
    record is in at most ``sub_block_pairs_per_record`` sub-block pairs (one per block
    pair its block is in, :func:`sub_block_pairs_per_record`); the others are computed
    bit for bit the same on both neighbours.  So one record's change moves the float
    total by at most its exact change plus twice that error per sub-block pair it is in;
    the exact total over sub-block pairs is rounded once more (``u |P| C`` each side).
    ``u = 2^-53``.
    """
    p = SCREE_BLOCK_ROWS * SCREE_BLOCK_ROWS
    u = 2.0**-53
    per_record = integer_at_least("sub_block_pairs_per_record", sub_block_pairs_per_record, 1)
    rounding = 2.0 * per_record * (p - 1) * p + 2.0 * float(n_pairs)
    return rounding * u * (1.0 + 1e-6)


def sub_block_pairs_per_record(
    n_blocks: int, block_pairs: tuple[tuple[int, int], ...] | None = None
) -> int:
    """The most sub-block pairs of the scree design one record is in: the most block
    pairs one block is in (each block with itself when ``block_pairs`` is None).
    """
    if block_pairs is None:
        return 1
    count = [0] * int(n_blocks)
    for i, j in block_pairs:
        count[i] += 1
        if j != i:
            count[j] += 1
    return max(max(count, default=1), 1)
