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
  each per sub-block with numpy's pairwise sum and across sub-blocks exactly
  (:class:`~.ExactSum`).

Bad values have a bounded treatment: a pair with a non-finite difference counts in the
grid's top bin, at the clip level, at ``U`` and at ``+tau``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
from numpy.typing import NDArray

from .exact_sum import ExactSum
from .fp_state import own_errstate

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


_PAIRS: dict[int, tuple[NDArray[np.intp], NDArray[np.intp]]] = {}


def _pairs(m: int) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    if m not in _PAIRS:
        _PAIRS[m] = np.triu_indices(m, 1)
    return _PAIRS[m]


def _pair_values(
    xa: NDArray[np.float64],
    ya: NDArray[np.float64],
    xb: NDArray[np.float64] | None,
    yb: NDArray[np.float64] | None,
    trace: bool,
) -> NDArray[np.float64]:
    """``|dy|`` (and ``||dx||``) of the pairs inside ``a`` (``b`` None) or of ``a x b``.

    Pairs in row-major order of ``a x b`` (inside ``a``: ``i < j``), by broadcasting.
    ``||dx||^2`` is ``||x_i||^2 + ||x_j||^2 - 2 x_i . x_j`` from one matrix product (O(d)
    per pair in BLAS, not a d-vector per pair): each pair's value is still a function of
    its two records alone (an entry of a product does not depend on the other rows), so
    privacy is untouched; its accuracy needs data not far from the origin relative to
    its spread (relative error about ``u ||x||^2 / ||dx||^2``), negatives from rounding
    are set to 0.
    """
    within = xb is None or yb is None
    xo = xa if within else xb
    yo = ya if within else yb
    assert xo is not None and yo is not None
    with np.errstate(all="ignore"):
        dy = np.abs(ya[:, None, :] - yo[None, :, :])  # (a, b, k)
        if trace:
            sa = np.einsum("pd,pd->p", xa, xa)
            sb = sa if within else np.einsum("pd,pd->p", xo, xo)
            square = sa[:, None] + sb[None, :] - 2.0 * (xa @ xo.T)
            norm = np.sqrt(np.where(square > 0.0, square, np.where(np.isnan(square), square, 0.0)))
            dy = np.concatenate([dy, norm[:, :, None]], axis=2)
    if within:
        i, j = _pairs(xa.shape[0])
        return dy[i, j]
    return dy.reshape(-1, dy.shape[2])


def _differences(
    block: NDArray[np.float64],
    directions: NDArray[np.float64],
    trace: bool,
    other: NDArray[np.float64] | None = None,
    indices: tuple[int, int] | None = None,
) -> Iterator[NDArray[np.float64]]:
    """For each sub-block (pair): ``|dy|`` of its pairs, shape (pairs, k [+ 1 for ||dx||]).

    ``indices`` are the blocks' indices (their public row order); ``other`` the second
    block of a block pair (None: the block with itself).
    """
    v = np.asarray(directions, dtype=np.float64)
    ia, ib = indices if indices is not None else (0, 1)
    x = np.asarray(block, dtype=np.float64)[block_order(ia, block.shape[0])]
    with np.errstate(all="ignore"):  # non-finite records: treated below, never a warning
        scores = x @ v.T  # (rows, k)
    if other is None:
        for start, stop in sub_blocks(x.shape[0]):
            if stop - start > 1:
                yield _pair_values(x[start:stop], scores[start:stop], None, None, trace)
        return
    z = np.asarray(other, dtype=np.float64)[block_order(ib, other.shape[0])]
    with np.errstate(all="ignore"):
        scores_z = z @ v.T
    for (a0, a1), (b0, b1) in zip(sub_blocks(x.shape[0]), sub_blocks(z.shape[0])):
        yield _pair_values(x[a0:a1], scores[a0:a1], z[b0:b1], scores_z[b0:b1], trace)


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
    k = directions.shape[0] + (1 if trace else 0)
    counts = np.zeros(k * _N_GRID, dtype=np.int64)
    offsets = np.arange(k, dtype=np.int64) * _N_GRID
    for dy in _differences(block, directions, trace, other, indices):
        index = grid_index(dy) + offsets[None, :]
        counts += np.bincount(index.ravel(), minlength=k * _N_GRID)
    return counts.reshape(k, _N_GRID)


@own_errstate
def block_sums(
    block: NDArray[np.float64],
    directions: NDArray[np.float64],
    clip: NDArray[np.float64],
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
    clip : ndarray, shape (k + 1,) or (k,)
        Clip levels of ``dy_l^2 / 2`` (and, with k + 1 entries, of ``||dx||^2 / 2``).
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
    """
    clip = np.asarray(clip, dtype=np.float64)
    k = directions.shape[0]
    trace = clip.size == k + 1
    parts = [clip.size]
    if upper is not None:
        parts.append(k)
    if huber_centre is not None:
        parts.append(k)
    total = ExactSum((sum(parts),))
    for diff in _differences(block, directions, trace, other, indices):
        with np.errstate(over="ignore", invalid="ignore"):
            half_square = 0.5 * diff * diff
        bad = ~np.isfinite(half_square)
        pieces = [np.where(bad, clip, np.minimum(half_square, clip)).sum(axis=0)]
        s = half_square[:, :k]
        bad_k = bad[:, :k]
        if upper is not None:
            u = np.asarray(upper, dtype=np.float64)
            pieces.append(np.where(bad_k, u, np.minimum(s, u)).sum(axis=0))
        if huber_centre is not None:
            assert huber_tau is not None
            tau = np.asarray(huber_tau, dtype=np.float64)
            with np.errstate(invalid="ignore"):
                score = np.clip(s - np.asarray(huber_centre, dtype=np.float64), -tau, tau)
            pieces.append(np.where(bad_k, tau, score).sum(axis=0))
        total = total.plus(np.concatenate(pieces))
    return total


def summation_slack(n_pairs: int) -> float:
    """Room, in units of a term's range, for the float sums' rounding (public).

    A sub-block pair's pairwise sum of ``p <= SCREE_BLOCK_ROWS^2`` terms in ``[0, C]`` is
    within ``(log2 p + 1) u p C`` of exact (Higham 2002, 4.3), so one record's change
    moves it by at most its exact change plus twice that; the exact cross-block total
    is rounded once more (``u |P| C`` each side).  ``u = 2^-53``.
    """
    p = SCREE_BLOCK_ROWS * SCREE_BLOCK_ROWS
    u = 2.0**-53
    return (2.0 * (math.log2(p) + 2.0) * p + 2.0 * float(n_pairs)) * u * (1.0 + 1e-6)
