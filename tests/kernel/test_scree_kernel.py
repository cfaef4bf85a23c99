"""The compiled scree kernel against its numpy formulation, bit for bit.

The scree statistics were first computed with numpy array operations per sub-block pair
(``|dy|`` by broadcasting, ``||dx||^2`` from one matrix product, the terms by
``np.minimum`` / ``np.clip``, each piece summed by ``sum(axis=0)``, the sub-block pairs'
sums added exactly).  The compiled kernel must give exactly the same counts and the same
float partial sums (hence the same released values for a given noise draw), bad values,
ties, single-column pieces (numpy sums those pairwise) and short tail sub-blocks
included.  The numpy formulation is kept here as the oracle.

Seeds make TEST DATA only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from dask_dppca.kernel.exact_sum import ExactSum
from dask_dppca.kernel.scree_stats import (
    block_histograms,
    block_order,
    block_sums,
    grid_index,
    grid_values,
    sub_blocks,
)

RNG = np.random.default_rng(20261202)  # test data only


def _numpy_differences(block, directions, trace, other, indices):
    """Per sub-block pair, ``|dy|`` (and ``||dx||``) of its pairs: numpy's arrays."""
    v = np.asarray(directions, dtype=np.float64)
    ia, ib = indices
    x = np.asarray(block, dtype=np.float64)[block_order(ia, block.shape[0])]
    with np.errstate(all="ignore"):
        scores = x @ v.T
    if other is None:
        spans = [((a, b), (a, b)) for a, b in sub_blocks(x.shape[0]) if b - a > 1]
        z, scores_z = x, scores
    else:
        z = np.asarray(other, dtype=np.float64)[block_order(ib, other.shape[0])]
        with np.errstate(all="ignore"):
            scores_z = z @ v.T
        spans = list(zip(sub_blocks(x.shape[0]), sub_blocks(z.shape[0])))
    for (a0, a1), (b0, b1) in spans:
        xa, ya = x[a0:a1], scores[a0:a1]
        within = other is None
        xo, yo = (xa, ya) if within else (z[b0:b1], scores_z[b0:b1])
        with np.errstate(all="ignore"):
            dy = np.abs(ya[:, None, :] - yo[None, :, :])
            if trace:
                sa = np.einsum("pd,pd->p", xa, xa)
                sb = sa if within else np.einsum("pd,pd->p", xo, xo)
                square = sa[:, None] + sb[None, :] - 2.0 * (xa @ xo.T)
                norm = np.sqrt(
                    np.where(square > 0.0, square, np.where(np.isnan(square), square, 0.0))
                )
                dy = np.concatenate([dy, norm[:, :, None]], axis=2)
        if within:
            i, j = np.triu_indices(xa.shape[0], 1)
            yield dy[i, j]
        else:
            yield dy.reshape(-1, dy.shape[2])


def _numpy_histograms(block, directions, trace, other, indices):
    k = directions.shape[0] + (1 if trace else 0)
    n_grid = grid_values().size
    counts = np.zeros(k * n_grid, dtype=np.int64)
    offsets = np.arange(k, dtype=np.int64) * n_grid
    for dy in _numpy_differences(block, directions, trace, other, indices):
        index = grid_index(dy) + offsets[None, :]
        counts += np.bincount(index.ravel(), minlength=k * n_grid)
    return counts.reshape(k, n_grid)


def _numpy_partials(block, directions, clip, upper, centre, tau, other, indices):
    """Each sub-block pair's float sums (clipped, winsorized, Huber), as numpy sums them."""
    k = directions.shape[0]
    trace = clip is not None and clip.size == k + 1
    rows = []
    for diff in _numpy_differences(block, directions, trace, other, indices):
        with np.errstate(over="ignore", invalid="ignore"):
            half_square = 0.5 * diff * diff
        bad = ~np.isfinite(half_square)
        pieces = []
        if clip is not None:
            pieces.append(np.where(bad, clip, np.minimum(half_square, clip)).sum(axis=0))
        s, bad_k = half_square[:, :k], bad[:, :k]
        if upper is not None:
            pieces.append(np.where(bad_k, upper, np.minimum(s, upper)).sum(axis=0))
        if centre is not None:
            with np.errstate(invalid="ignore"):
                score = np.clip(s - centre, -tau, tau)
            pieces.append(np.where(bad_k, tau, score).sum(axis=0))
        rows.append(np.concatenate(pieces))
    return rows


def _case(case: int):
    d = int(RNG.integers(1, 9))
    k = 1 if case % 4 == 0 else int(RNG.integers(1, d + 1))  # one column: pairwise sums
    rows_a = int(RNG.integers(2, 400))
    rows_b = int(RNG.integers(1, 400))
    x = RNG.standard_t(2, size=(rows_a, d)) * 10.0 ** RNG.uniform(-3, 3)
    z = RNG.standard_t(2, size=(rows_b, d)) * 10.0 ** RNG.uniform(-3, 3)
    if case % 3 == 0:  # bad values: NaN, infinities, a far record
        x[RNG.integers(0, rows_a)] = np.nan
        z[RNG.integers(0, rows_b), 0] = np.inf
        x[RNG.integers(0, rows_a), -1] = -np.inf
        x[RNG.integers(0, rows_a)] = 1e200
    if case % 5 == 0:  # ties: zero differences
        x[: rows_a // 2] = x[0]
    v = np.linalg.qr(RNG.standard_normal((d, k)))[0].T
    scale = 10.0 ** RNG.uniform(-2, 4)
    clip = np.abs(RNG.standard_normal(k + 1)) * scale
    upper = np.abs(RNG.standard_normal(k)) * scale
    centre = np.abs(RNG.standard_normal(k)) * scale / 4
    tau = np.abs(RNG.standard_normal(k)) * scale
    if case % 7 == 0:
        tau[0] = 0.0
    return x, z, v, clip, upper, centre, tau


@pytest.mark.parametrize("case", range(24))
def test_the_compiled_kernel_gives_numpys_bits(case):
    x, z, v, clip, upper, centre, tau = _case(case)
    k = v.shape[0]
    for other, indices in ((None, (case, case)), (z, (case, case + 1))):
        for trace in (True, False):
            got = block_histograms(x, v, trace=trace, other=other, indices=indices)
            expected = _numpy_histograms(x, v, trace, other, indices)
            assert np.array_equal(got, expected), (case, trace, other is None)
        for c, u, m, t in (
            (clip, upper, centre, tau),
            (clip[:k], upper, None, None),
            (clip, None, None, None),
            (None, None, centre, tau),
            (clip[:k], None, centre, tau),
        ):
            partials = _numpy_partials(x, v, c, u, m, t, other, indices)
            width = sum(a.size for a in (c, u, m) if a is not None)
            expected = ExactSum((width,))
            for row in partials:
                expected = expected.plus(row)
            got = block_sums(x, v, c, u, m, t, other=other, indices=indices)
            assert got.shape == (width,)
            assert got.to_float().tobytes() == expected.to_float().tobytes(), (case, width)


def test_full_sub_blocks_reach_numpys_pairwise_tree():
    """4096 pairs per sub-block pair (and 2016 inside one): numpy's pairwise sum of one
    column splits above 128 terms; the compiled sum must split the same way.
    """
    x = RNG.standard_normal((256, 3)) * 10.0 ** RNG.uniform(-3, 3, 256)[:, None]
    z = RNG.standard_normal((200, 3))
    v = np.linalg.qr(RNG.standard_normal((3, 1)))[0].T
    for other, indices in ((None, (0, 0)), (z, (0, 1))):
        for clip in (np.array([0.7]), np.array([0.7, 2.0])):
            partials = _numpy_partials(x, v, clip, None, None, None, other, indices)
            expected = ExactSum((clip.size,))
            for row in partials:
                expected = expected.plus(row)
            got = block_sums(x, v, clip, other=other, indices=indices)
            assert got.to_float().tobytes() == expected.to_float().tobytes()


def test_parameters_of_the_wrong_size_are_refused():
    x, v = RNG.standard_normal((70, 3)), np.eye(3)[:2]
    with pytest.raises(ValueError, match="clip"):
        block_sums(x, v, np.ones(5))
    with pytest.raises(ValueError, match="huber_tau"):
        block_sums(x, v, None, None, np.ones(2))
    with pytest.raises(ValueError, match="expected 2 entries"):
        block_sums(x, v, None, np.ones(3))


def test_many_full_sub_blocks_and_unequal_tails():
    """Blocks of 1000 and 1100 rows (15 and 17 sub-blocks, tails of 40 and 12 rows): the
    batched products of the full sub-blocks and the tails on their own.
    """
    x = RNG.standard_t(3, size=(1000, 7)) + 5.0
    z = RNG.standard_t(3, size=(1100, 7))
    v = np.linalg.qr(RNG.standard_normal((7, 3)))[0].T
    clip, upper = np.array([1.0, 2.0, 3.0, 40.0]), np.array([0.5, 1.0, 1.5])
    centre, tau = np.array([0.3, 0.4, 0.5]), np.array([2.0, 2.0, 2.0])
    for other, indices in ((None, (2, 2)), (z, (2, 5))):
        assert np.array_equal(
            block_histograms(x, v, other=other, indices=indices),
            _numpy_histograms(x, v, True, other, indices),
        )
        expected = ExactSum((10,))
        for row in _numpy_partials(x, v, clip, upper, centre, tau, other, indices):
            expected = expected.plus(row)
        got = block_sums(x, v, clip, upper, centre, tau, other=other, indices=indices)
        assert got.to_float().tobytes() == expected.to_float().tobytes()


_RUN_SCREE = """
import json, numpy as np
from dask_dppca.kernel import scree_stats as ss
x = np.arange(600.0).reshape(200, 3) ** 1.5
v = np.eye(3)[:1]
sums = ss.block_sums(x, v, np.array([5.0]), np.array([3.0]), np.array([1.0]), np.array([2.0]))
counts = ss.block_histograms(x, v, other=x[:90], indices=(0, 1))
stats = ss._block_pair_sums.stats
print(json.dumps({"sums": sums.to_float().tolist(), "counts": int(counts.sum()),
                  "hits": sum(stats.cache_hits.values())}))
"""


@pytest.mark.slow
def test_a_second_process_loads_the_compiled_scree_kernel_from_the_cache(tmp_path):
    """The kernel is cached by numba and a fresh process loads it and computes the same."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    runs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", _RUN_SCREE], capture_output=True, text=True, env=env, timeout=240
        )
        assert done.returncode == 0, done.stderr[-2000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert runs[1]["hits"] >= 1
    assert runs[0]["sums"] == runs[1]["sums"] and runs[0]["counts"] == runs[1]["counts"]
