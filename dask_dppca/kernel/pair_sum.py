"""Exact block-pair sums of g(t) g(t)^T (numpy + numba, no dask).

For row blocks A and B this computes

    S(A, B) = sum_{i, j} g(t_ij) g(t_ij)^T,   t_ij = (a_i - b_j) / sqrt(2),

over all pairs (i, j) of A x B, or over i < j when B is A (a within-block sum).
It returns the *unnormalised* sum; the graph layer divides by the number of pairs.

Fast path (docs/method.md, section 7).  With weights W_ij = w(||t_ij||^2),

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

from typing import Any

import numpy as np
from numpy.typing import NDArray

from . import rows, tiles
from .fp_state import own_errstate
from .jit import compiled_here
from .rounding import CLASS_BITS, DEFAULT_MEMORY_BUDGET, tile_rows_for_budget
from .rows import as_float_rows, centring_point, distinct_finite_rows, scale_classes
from .spatial_sign import SpatialSign, sphere
from .tiles import Side, TileSummer

__all__ = ["block_pair_sum", "compiled_on_this_machine", "pairwise_sum"]


@own_errstate
def block_pair_sum(
    block_a: NDArray[Any],
    block_b: NDArray[Any] | None = None,
    spatial_sign: SpatialSign | None = None,
    *,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    tile_rows: int | None = None,
) -> NDArray[np.float64]:
    """Sum of ``g(t) g(t)^T`` over the pairs of one block pair.

    Parameters
    ----------
    block_a : ndarray, shape (p, d)
        Rows of the first block (any real dtype; computed in float64).
    block_b : ndarray, shape (q, d), optional
        Rows of the second block.  When omitted the sum runs over the pairs
        ``i < j`` of ``block_a`` (a within-block sum).
    spatial_sign : SpatialSign, optional
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
    spatial_sign = sphere() if spatial_sign is None else spatial_sign
    a = as_float_rows(block_a)
    within = block_b is None
    b = a if block_b is None else as_float_rows(block_b)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"block_b: has {b.shape[1]} columns, block_a has {a.shape[1]}")
    d = a.shape[1]
    if tile_rows is None:
        tile_rows = tile_rows_for_budget(memory_budget, d)
    elif isinstance(tile_rows, bool) or not isinstance(tile_rows, int) or tile_rows < 1:
        raise ValueError(f"tile_rows: must be a positive integer, got {tile_rows!r}")

    rows_a, count_a = distinct_finite_rows(a)
    rows_b, count_b = (rows_a, count_a) if within else distinct_finite_rows(b)
    if rows_a.size == 0 or rows_b.size == 0:
        return np.zeros((d, d))
    centre = centring_point(a, rows_a)
    # The unbounded identity is a non-private reference: one class, and rows whose
    # squares overflow take the exact path (its terms overflow as the true ones do).
    scaled = spatial_sign.name != "identity"
    class_a = scale_classes(a, rows_a, centre, scaled)
    class_b = class_a if within else scale_classes(b, rows_b, centre, scaled)
    summer = TileSummer(spatial_sign, d, tile_rows)
    parts = []
    for p in np.unique(class_a):
        side_a = Side(a, rows_a[class_a == p], count_a[class_a == p])
        for q in np.unique(class_b):
            if within and q < p:
                continue
            side_b = Side(b, rows_b[class_b == q], count_b[class_b == q])
            exponent = -CLASS_BITS * int(max(p, q))
            parts.append(summer.run(side_a, side_b, within and p == q, centre, exponent))
    total = pairwise_sum(parts)
    return 0.5 * (total + total.T)


def pairwise_sum(parts: list[NDArray[np.float64]]) -> NDArray[np.float64]:
    """Sum in a balanced tree: log2(len(parts)) roundings deep (rounding_error_bound).

    Also adds a graph task's block-pair sums (:mod:`dask_dppca.graph`), no deeper than
    one tree over all the block pairs would be, plus one level.
    """
    while len(parts) > 1:
        parts = [
            parts[k] + parts[k + 1] if k + 1 < len(parts) else parts[k]
            for k in range(0, len(parts), 2)
        ]
    return parts[0]


def compiled_on_this_machine() -> bool:
    """Whether the compiled functions every fit runs are in numba's cache here.

    When not, the first fit on this machine compiles them (a few seconds, once; the
    cache is :func:`~dask_dppca.kernel.jit.cache_directory`).
    """
    return compiled_here(
        rows._finite_rows,
        rows._row_hashes,
        rows._group_rows,
        rows.scale_classes,
        tiles._load_tile,
        tiles._squared_norms,
        tiles._unit_sphere_weights,
    )
