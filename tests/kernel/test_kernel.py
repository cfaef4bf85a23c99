"""Tests of the kernel, dask_dppca.kernel.block_pair_sum (docs/method.md, sections 3, 4, 7).

Every result is checked against the independent pair-by-pair loop of tests/reference.py
(relative Frobenius error <= 1e-10), for the sphere, winsor and bounded custom
transforms, within-block (pairs i < j) and cross-block (all of A x B), with the default
tiles and with tiny tiles (tile_rows = 7, 2) so that tile boundaries, the diagonal-tile
triangle and the exact path's chunking are all exercised.

Then the invariants of docs/method.md, section 7 on adversarial matrices drawn by Hypothesis,
the per-pair bound ||g g^T||_F <= G^2 that the privacy proof needs (section 4), and the
memory promise of the tiling.
"""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dask_dppca.kernel import (
    DEFAULT_MEMORY_BUDGET,
    block_pair_sum,
    rounding_error_bound,
    tile_rows_for_budget,
)
from dask_dppca.kernel import pair_sum as kernel_module
from dask_dppca.kernel import rows as rows_module
from dask_dppca.kernel import tiles as tiles_module
from dask_dppca.kernel.rounding import MAX_TILE_ROWS
from dask_dppca.kernel.spatial_sign import custom, identity, sphere, winsor
from tests.reference import reference_pair_sum, relative_error

TOL = 1e-10  # relative Frobenius error against the reference loop
TILES = [None, 7]
RADIUS = 0.8
SMOOTH_BOUND = 1.5


def _smooth_xi(s):
    """A bounded custom xi: 1.5 (1 - e^-s), a smooth winsorization; finite at s = inf."""
    return SMOOTH_BOUND * -np.expm1(-np.asarray(s, dtype=float))


def _redescending_xi(s):
    """A bounded custom xi that goes back to 0 at both ends: min(s, 1/s), G = 1."""
    s = np.asarray(s, dtype=float)
    with np.errstate(divide="ignore"):
        return np.minimum(s, 1.0 / s)


# name -> (kernel spatial_sign, scalar xi for the reference loop, bound G)
TRANSFORMS = {
    "sphere": (sphere(), lambda s: 1.0, 1.0),
    "winsor": (winsor(RADIUS), lambda s: min(RADIUS, s), RADIUS),
    "custom": (
        custom(_smooth_xi, SMOOTH_BOUND),
        lambda s: SMOOTH_BOUND * -math.expm1(-s),
        SMOOTH_BOUND,
    ),
    "redescending": (custom(_redescending_xi, 1.0), lambda s: min(s, 1.0 / s), 1.0),
}
BOUNDED = ["sphere", "winsor", "custom"]


def _reference(a, b, name):
    return reference_pair_sum(a, b, xi=TRANSFORMS[name][1])


def _assert_matches_reference(a, b, name, tiles=TILES, tol=TOL):
    spatial_sign = TRANSFORMS[name][0]
    want = _reference(a, b, name)
    for tile_rows in tiles:
        got = block_pair_sum(a, b, spatial_sign, tile_rows=tile_rows)
        assert got.shape == want.shape
        assert np.all(np.isfinite(got)), f"non-finite result (tile_rows={tile_rows})"
        np.testing.assert_array_equal(got, got.T)
        err = relative_error(got, want)
        assert err <= tol, f"{name}, tile_rows={tile_rows}: relative error {err:.3e}"
    return want


# ---------------------------------------------------------------------------------------
# Deterministic adversarial data sets (about 40 rows, d = 5)
# ---------------------------------------------------------------------------------------

N, D = 40, 5


def _rng(seed=0):
    return np.random.default_rng(seed)


def _random():
    return _rng(1).normal(size=(N, D))


def _exact_duplicates():
    base = _rng(2).normal(size=(N // 4, D))
    x = np.repeat(base, 4, axis=0)
    return x[_rng(3).permutation(N)]


def _near_duplicates():
    base = _rng(4).normal(size=(N // 2, D))
    near = base + 1e-9 * _rng(5).normal(size=base.shape)
    return np.vstack([base, near])[_rng(6).permutation(N)]


def _offset():
    return _rng(7).normal(size=(N, D)) + 1e8


def _offset_near_duplicates():
    x = _rng(8).normal(size=(N // 2, D)) * 1e-3 + 1e8
    return np.vstack([x, x + 1e-7 * _rng(9).normal(size=x.shape)])  # ~7 ulps of 1e8 apart


def _mixed_scales():
    scales = np.logspace(-150, 150, N)
    return _rng(10).normal(size=(N, D)) * scales[_rng(11).permutation(N), None]


def _squared_norm_underflows():
    """Rows whose squared norms are subnormal or zero (1e-165..1e-150): 1/||t||^2 overflows."""
    scales = np.logspace(-165, -150, N)
    return _rng(28).normal(size=(N, D)) * scales[_rng(29).permutation(N), None]


def _far_rows():
    """30% of the rows at +-1e300 along random directions, the rest N(0, I)."""
    x = _rng(12).normal(size=(N, D))
    far = _rng(13).choice(N, size=int(0.3 * N), replace=False)
    x[far] *= 1e300 / np.linalg.norm(x[far], axis=1, keepdims=True)
    return x


def _far_rows_mixed_with_tiny():
    x = _far_rows()
    x[::5] *= 1e-300
    return x


def _float_extremes():
    big, tiny = np.finfo(float).max, 5e-324
    x = _rng(14).normal(size=(12, 3))
    x[0] = [big, 0, 0]
    x[1] = [-big, 0, 0]
    x[2] = [big, big, -big]
    x[3] = [-big, -big, big]
    x[4] = [tiny, 0, 0]
    x[5] = [0, tiny, 0]
    x[6] = 0.0
    x[7] = [big, tiny, 1.0]
    return x


def _subnormal():
    return _rng(15).normal(size=(N, D)) * 1e-310  # every value subnormal


def _float32():
    return _rng(16).normal(size=(N, D)).astype(np.float32)


def _integer():
    return _rng(17).integers(-5, 6, size=(N, D))  # integers: many exact duplicate pairs too


def _big_integer():
    return _rng(18).integers(-(2**62), 2**62, size=(N, D), dtype=np.int64)


DATASETS = {
    "random": _random,
    "exact_duplicates": _exact_duplicates,
    "near_duplicates_1e-9": _near_duplicates,
    "offset_1e8": _offset,
    "offset_1e8_near_duplicates": _offset_near_duplicates,
    "scales_1e-150_to_1e150": _mixed_scales,
    "squared_norm_underflows": _squared_norm_underflows,
    "far_rows_1e300": _far_rows,
    "far_and_tiny_rows": _far_rows_mixed_with_tiny,
    "float_extremes": _float_extremes,
    "subnormal": _subnormal,
    "float32": _float32,
    "integer": _integer,
    "int64_2e62": _big_integer,
}


@pytest.mark.parametrize("name", list(TRANSFORMS))
@pytest.mark.parametrize("data", list(DATASETS))
def test_within_block_matches_reference(data, name):
    _assert_matches_reference(DATASETS[data](), None, name)


@pytest.mark.parametrize("name", list(TRANSFORMS))
@pytest.mark.parametrize("data", list(DATASETS))
def test_cross_block_matches_reference(data, name):
    x = DATASETS[data]()
    k = len(x) * 3 // 8  # unequal blocks
    _assert_matches_reference(x[:k], x[k:], name)


@pytest.mark.parametrize("name", BOUNDED)
def test_cross_block_with_different_offsets_and_scales(name):
    rng = _rng(19)
    a = rng.normal(size=(17, 4)) + 1e8
    b = rng.normal(size=(23, 4)) * 1e-3 - 5e7
    _assert_matches_reference(a, b, name)
    _assert_matches_reference(b, a, name)
    # The centring point comes from block_a: a block_b far from it, with near-duplicates.
    c = rng.normal(size=(11, 4))
    d = np.vstack([a[:5], a[:5] + 1e-8, b[:5]])
    _assert_matches_reference(c, d, name)


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_larger_block_with_many_tiles(name):
    """150 rows: several full 7-row and 64-row tiles, and a ragged last tile."""
    rng = _rng(20)
    x = rng.standard_t(1.0, size=(150, 6))  # Cauchy: heavy tails, no moments
    x[::10] = x[1::10]  # exact duplicates across tiles
    x[5::17] += 1e-10  # near duplicates of nothing in particular
    _assert_matches_reference(x, None, name, tiles=[None, 7, 64])


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_n_equals_two_and_degenerate_sizes(name):
    spatial_sign = TRANSFORMS[name][0]
    x = _rng(21).normal(size=(2, 3))
    want = _assert_matches_reference(x, None, name, tiles=[None, 1, 7])
    np.testing.assert_allclose(block_pair_sum(x[:1], x[1:], spatial_sign), want, rtol=1e-14)
    for n in (0, 1):
        np.testing.assert_array_equal(block_pair_sum(np.ones((n, 3)), None, spatial_sign), 0.0)
    np.testing.assert_array_equal(block_pair_sum(np.ones((0, 3)), x, spatial_sign), 0.0)
    assert block_pair_sum(np.ones((4, 1)) * [[1], [2], [3], [4]], None, spatial_sign).shape == (
        1,
        1,
    )


@pytest.mark.parametrize("name", list(TRANSFORMS))
@pytest.mark.parametrize("tile_rows", [None, 7, 2])
def test_all_rows_identical_gives_exactly_zero(name, tile_rows):
    spatial_sign = TRANSFORMS[name][0]
    for row in ([1.0, -2.0, 3.0], [1e8, 1e8 + 2, 0.0], [1e300, -1e-300, 0.0], [5e-324, 0, 0]):
        x = np.tile(row, (30, 1))
        assert np.all(block_pair_sum(x, None, spatial_sign, tile_rows=tile_rows) == 0.0)
        assert np.all(block_pair_sum(x[:10], x[10:], spatial_sign, tile_rows=tile_rows) == 0.0)


@pytest.mark.parametrize("name", list(TRANSFORMS))
@pytest.mark.parametrize("tile_rows", TILES)
def test_non_finite_rows_contribute_nothing(name, tile_rows):
    spatial_sign = TRANSFORMS[name][0]
    x = _far_rows()
    bad = [0, 3, 4, 11, 12, 13, 39]
    x[0, 1] = np.nan
    x[3] = np.inf
    x[4, 4] = -np.inf
    x[11:14] = np.nan
    x[39, 0] = np.inf
    good = np.setdiff1d(np.arange(N), bad)
    got = block_pair_sum(x, None, spatial_sign, tile_rows=tile_rows)
    assert np.all(np.isfinite(got))
    # equal to the sum over the finite rows' pairs only
    np.testing.assert_allclose(
        got, block_pair_sum(x[good], None, spatial_sign, tile_rows=tile_rows), rtol=1e-12, atol=0
    )
    assert relative_error(got, _reference(x[good], None, name)) <= TOL
    cross = block_pair_sum(x[:20], x[20:], spatial_sign, tile_rows=tile_rows)
    ga, gb = good[good < 20], good[good >= 20]
    assert relative_error(cross, _reference(x[ga], x[gb], name)) <= TOL
    # a block with no finite row at all
    assert np.all(block_pair_sum(x[bad], None, spatial_sign, tile_rows=tile_rows) == 0.0)
    assert np.all(block_pair_sum(x[bad], x[good], spatial_sign, tile_rows=tile_rows) == 0.0)


@pytest.mark.parametrize("name", BOUNDED)
@pytest.mark.parametrize("tile_rows", TILES)
def test_far_rows_count_in_their_direction(name, tile_rows):
    """30% of rows at +-1e300 e_1: they count, along e_1, and the result stays finite.

    The other rows are N(0, I) in the coordinates 2..d, so the far rows' pairs are the only
    ones reaching e_1: the leading eigenvector is e_1 exactly (up to 1e-300).
    """
    spatial_sign, _, bound = TRANSFORMS[name]
    rng = _rng(22)
    n, d, n_far = 50, 4, 15
    x = rng.normal(size=(n, d))
    x[:, 0] = 0.0
    far = rng.choice(n, size=n_far, replace=False)
    x[far] = 0.0
    x[far, 0] = rng.choice([-1e300, 1e300], size=n_far) * rng.uniform(1, 1.7, size=n_far)
    got = block_pair_sum(x, None, spatial_sign, tile_rows=tile_rows)
    assert np.all(np.isfinite(got))
    assert relative_error(got, _reference(x, None, name)) <= TOL
    values, vectors = np.linalg.eigh(got)
    assert abs(vectors[0, -1]) > 1 - 1e-12  # leading eigenvector is e_1
    # Every pair with a far row has g(t) = +-G e_1 (to 1e-300 relative): far-normal and
    # far-far pairs (all far values distinct), G^2 each.
    far_pairs = n_far * (n - n_far) + n_far * (n_far - 1) // 2
    assert got[0, 0] == pytest.approx(far_pairs * bound**2, rel=1e-12)
    assert values[-1] == pytest.approx(got[0, 0], rel=1e-12)
    # With the other rows fully random the direction is still e_1 (to the normal pairs' pull).
    x[np.setdiff1d(np.arange(n), far), 0] = rng.normal(size=n - n_far)
    got = block_pair_sum(x, None, spatial_sign, tile_rows=tile_rows)
    assert np.all(np.isfinite(got)) and relative_error(got, _reference(x, None, name)) <= TOL
    assert abs(np.linalg.eigh(got)[1][0, -1]) > 0.99
    assert got[0, 0] >= far_pairs * bound**2 * (1 - 1e-12)


@pytest.mark.parametrize("name", BOUNDED)
def test_float32_and_integer_input_equal_their_float64_values(name):
    spatial_sign = TRANSFORMS[name][0]
    x32 = _float32()
    np.testing.assert_array_equal(
        block_pair_sum(x32, None, spatial_sign),
        block_pair_sum(x32.astype(np.float64), None, spatial_sign),
    )
    xi = _integer()
    np.testing.assert_array_equal(
        block_pair_sum(xi, None, spatial_sign),
        block_pair_sum(xi.astype(np.float64), None, spatial_sign),
    )
    np.testing.assert_array_equal(
        block_pair_sum(xi[:9], x32[:7], spatial_sign),
        block_pair_sum(xi[:9].astype(float), x32[:7].astype(float), spatial_sign),
    )
    # non-contiguous and Fortran-ordered views
    xf = np.asfortranarray(_random())
    np.testing.assert_allclose(
        block_pair_sum(xf, None, spatial_sign),
        block_pair_sum(np.ascontiguousarray(xf), None, spatial_sign),
        rtol=1e-14,
    )
    view = _random()[::2, ::2]
    assert (
        relative_error(block_pair_sum(view, None, spatial_sign), _reference(view, None, name))
        <= TOL
    )


def test_default_transform_is_the_sphere():
    x = _random()
    np.testing.assert_array_equal(block_pair_sum(x), block_pair_sum(x, None, sphere()))


def test_identity_gives_the_scaled_sample_covariance():
    """identity: sum_{i<j} t t^T = (n^2 / 2) * biased covariance = n(n-1)/2 * unbiased cov."""
    x = _random()
    got = block_pair_sum(x, None, identity())
    n = len(x)
    want = np.cov(x, rowvar=False) * n * (n - 1) / 2
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    assert relative_error(got, reference_pair_sum(x, xi=lambda s: s)) <= TOL


def test_cross_block_of_a_block_with_itself_is_twice_the_within_sum():
    x = _exact_duplicates()
    for name in BOUNDED:
        spatial_sign = TRANSFORMS[name][0]
        np.testing.assert_allclose(
            block_pair_sum(x, x, spatial_sign),
            2 * block_pair_sum(x, None, spatial_sign),
            rtol=1e-12,
        )


def test_input_validation():
    x = _random()
    with pytest.raises(ValueError, match="block_b"):
        block_pair_sum(x, x[:, :3])
    with pytest.raises(ValueError, match="2-D"):
        block_pair_sum(x[0])
    with pytest.raises(ValueError, match="2-D"):
        block_pair_sum(x, x[0])


@pytest.mark.parametrize("tile_rows", [0, -1, -512])
def test_non_positive_tile_rows_is_refused(tile_rows):
    """Known bug (reported): tile_rows=-1 silently returns the zero matrix (the tile loops
    are empty), and tile_rows=0 fails inside range() with no mention of the parameter."""
    with pytest.raises(ValueError, match="tile_rows"):
        block_pair_sum(_random(), None, sphere(), tile_rows=tile_rows)


def test_complex_input_is_refused():
    """Known bug (reported): a complex block is cast to float64, silently dropping the
    imaginary part (only a ComplexWarning is emitted)."""
    x = _random() + 1j * _random()
    with pytest.raises((TypeError, ValueError)):
        block_pair_sum(x)


# ---------------------------------------------------------------------------------------
# Hypothesis: adversarial matrices
# ---------------------------------------------------------------------------------------

SCALES = [1e-300, 1e-200, 1e-160, 1e-155, 1e-150, 1e-9, 1.0, 1e3, 1e8, 1e150, 1e200, 1e300]
NEAR = [1e-15, 1e-12, 1e-9, 1e-6, 1e-3]
KINDS = ["normal", "scaled", "duplicate", "near", "axis", "offset", "zero"]


@st.composite
def adversarial_rows(draw, min_rows=2, max_rows=10, max_dim=4, dim=None, non_finite=False):
    """Mixtures of normal rows, exact and near duplicates, huge and tiny scales, offsets.

    The rows are built from numpy draws (seeded by Hypothesis) combined by Hypothesis'
    choices of row kind, scale and nearness, so shrinking keeps the structure.
    """
    d = dim if dim is not None else draw(st.integers(1, max_dim))
    n = draw(st.integers(min_rows, max_rows))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kinds = KINDS + (["nan", "inf"] if non_finite else [])
    rows = []
    for _ in range(n):
        kind = (
            draw(st.sampled_from(kinds))
            if rows
            else draw(st.sampled_from(["normal", "scaled", "offset"]))
        )
        z = rng.normal(size=d)
        if kind == "normal":
            row = z
        elif kind == "scaled":
            row = z * draw(st.sampled_from(SCALES))
        elif kind == "duplicate":
            row = rows[draw(st.integers(0, len(rows) - 1))].copy()
        elif kind == "near":
            base = rows[draw(st.integers(0, len(rows) - 1))]
            size = np.abs(base[np.isfinite(base)]).max(initial=0.0) or 1.0
            row = base + draw(st.sampled_from(NEAR)) * size * z
        elif kind == "axis":
            row = np.zeros(d)
            row[draw(st.integers(0, d - 1))] = draw(st.sampled_from([-1.0, 1.0])) * draw(
                st.sampled_from(SCALES)
            )
        elif kind == "offset":
            row = 1e8 + z
        elif kind == "zero":
            row = np.zeros(d)
        elif kind == "nan":
            row = z.copy()
            row[draw(st.integers(0, d - 1))] = np.nan
        else:
            row = z * draw(st.sampled_from(SCALES))
            row[draw(st.integers(0, d - 1))] = draw(st.sampled_from([np.inf, -np.inf]))
        rows.append(np.asarray(row, dtype=float))
    return np.array(rows)


HYP = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NAMES = st.sampled_from(BOUNDED)
TILE_CHOICE = st.sampled_from([None, 1, 2, 3, 7])


def _distinct_finite_pairs(a, b=None):
    fa = np.isfinite(a).all(axis=1)
    if b is None:
        count = 0
        for i in range(len(a)):
            for j in range(i + 1, len(a)):
                count += bool(fa[i] and fa[j] and np.any(a[i] != a[j]))
        return count
    fb = np.isfinite(b).all(axis=1)
    return sum(
        bool(fa[i] and fb[j] and np.any(a[i] != b[j])) for i in range(len(a)) for j in range(len(b))
    )


@settings(max_examples=200, **HYP)
@given(adversarial_rows(max_rows=12, non_finite=True), NAMES, TILE_CHOICE, st.booleans())
def test_adversarial_blocks_match_reference(x, name, tile_rows, cross):
    spatial_sign = TRANSFORMS[name][0]
    a, b = (x[: len(x) // 2], x[len(x) // 2 :]) if cross else (x, None)
    got = block_pair_sum(a, b, spatial_sign, tile_rows=tile_rows)
    assert np.all(np.isfinite(got))
    want = _reference(a, b, name)
    assert relative_error(got, want) <= TOL
    # The documented worst case (per pair, in units of G^2) holds with a wide margin.
    bound, n_pairs = TRANSFORMS[name][2], (len(a) * len(b) if cross else len(a) * (len(a) - 1) // 2)
    tiles = tile_rows or tile_rows_for_budget(DEFAULT_MEMORY_BUDGET, a.shape[1])
    worst = rounding_error_bound(a.shape[1], len(x), 1, tiles) * bound**2 * max(n_pairs, 1)
    assert np.linalg.norm(got - want) <= worst


@settings(max_examples=200, **HYP)
@given(adversarial_rows(max_rows=12, non_finite=True), TILE_CHOICE, st.booleans())
def test_sphere_trace_counts_distinct_pairs(x, tile_rows, cross):
    """tr(S_sphere) = number of pairs with x_i != x_j (finite rows), to 1e-12 relative."""
    a, b = (x[: len(x) // 2], x[len(x) // 2 :]) if cross else (x, None)
    got = np.trace(block_pair_sum(a, b, sphere(), tile_rows=tile_rows))
    count = _distinct_finite_pairs(a, b)
    assert abs(got - count) <= 1e-12 * max(count, 1)


def _norm_t(u, v):
    """||(u - v) / sqrt2|| without overflow (an independent formula: math.hypot)."""
    diff = [float(p) - float(q) for p, q in zip(u, v)]
    if all(math.isfinite(c) for c in diff):
        return math.hypot(*diff) / math.sqrt(2.0)
    return (
        2.0 * math.hypot(*[0.5 * float(p) - 0.5 * float(q) for p, q in zip(u, v)]) / math.sqrt(2.0)
    )


@settings(max_examples=150, **HYP)
@given(adversarial_rows(max_rows=12), st.sampled_from([1e-3, 0.5, 1.0, 1e4]), TILE_CHOICE)
def test_winsor_trace_is_sum_of_min_r2_and_squared_distance(x, radius, tile_rows):
    """tr(S_winsor) = sum over pairs of min(r^2, ||t||^2)."""
    got = np.trace(block_pair_sum(x, None, winsor(radius), tile_rows=tile_rows))
    with np.errstate(under="ignore"):
        want = math.fsum(
            min(radius, _norm_t(x[i], x[j])) ** 2
            for i in range(len(x))
            for j in range(i + 1, len(x))
        )
    assert abs(got - want) <= 1e-12 * max(want, radius**2)


@settings(max_examples=100, **HYP)
@given(
    adversarial_rows(min_rows=3, max_rows=12, non_finite=True),
    NAMES,
    st.randoms(use_true_random=False),
)
def test_row_order_invariance(x, name, random):
    spatial_sign = TRANSFORMS[name][0]
    order = list(range(len(x)))
    random.shuffle(order)
    want = block_pair_sum(x, None, spatial_sign)
    assert relative_error(block_pair_sum(x[order], None, spatial_sign, tile_rows=3), want) <= 1e-12
    k = len(x) // 2
    cross = block_pair_sum(x[:k], x[k:], spatial_sign)
    swapped = block_pair_sum(x[k:][::-1], x[:k], spatial_sign, tile_rows=2)  # pairs (j, i)
    assert relative_error(swapped, cross) <= 1e-12


@settings(max_examples=100, **HYP)
@given(
    adversarial_rows(min_rows=2, max_rows=12, non_finite=True),
    NAMES,
    st.integers(1, 11),
    TILE_CHOICE,
)
def test_cross_plus_within_sums_equal_within_sum_of_concatenation(x, name, k, tile_rows):
    spatial_sign = TRANSFORMS[name][0]
    k = min(k, len(x) - 1)
    a, b = x[:k], x[k:]
    parts = (
        block_pair_sum(a, b, spatial_sign, tile_rows=tile_rows)
        + block_pair_sum(a, None, spatial_sign, tile_rows=tile_rows)
        + block_pair_sum(b, None, spatial_sign, tile_rows=tile_rows)
    )
    whole = block_pair_sum(x, None, spatial_sign)
    assert relative_error(parts, whole) <= 1e-12


@settings(max_examples=100, **HYP)
@given(adversarial_rows(max_rows=12), NAMES, st.data())
def test_signed_permutation_equivariance_exact_data(x, name, data):
    """K(X Q) = Q^T K(X) Q for Q a signed permutation (XQ is exact even for adversarial X)."""
    spatial_sign = TRANSFORMS[name][0]
    d = x.shape[1]
    perm = data.draw(st.permutations(range(d)))
    signs = np.array(data.draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=d, max_size=d)))
    q = np.zeros((d, d))
    q[np.arange(d), perm] = signs
    xq = np.empty_like(x)
    xq[:, perm] = x * signs  # = x @ q, computed without sums (exact for infinities too)
    got = block_pair_sum(xq, None, spatial_sign, tile_rows=3)
    want = q.T @ block_pair_sum(x, None, spatial_sign) @ q
    assert relative_error(got, want) <= 1e-12


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_rotation_equivariance_random_orthogonal(name):
    """K(X Q) = Q^T K(X) Q for a random orthogonal Q (rounding of XQ only: ~1e-15)."""
    spatial_sign = TRANSFORMS[name][0]
    rng = _rng(23)
    x = rng.standard_t(2.0, size=(60, 5))
    x[::6] = x[1::6]  # exact duplicates stay exact duplicates after XQ
    q, _ = np.linalg.qr(rng.normal(size=(5, 5)))
    got = block_pair_sum(x @ q, None, spatial_sign, tile_rows=7)
    want = q.T @ block_pair_sum(x, None, spatial_sign) @ q
    assert relative_error(got, want) <= 1e-12
    far = _far_rows()
    got = block_pair_sum(far @ q, None, spatial_sign)
    want = q.T @ block_pair_sum(far, None, spatial_sign) @ q
    assert relative_error(got, want) <= 1e-12


@pytest.mark.parametrize("name", list(TRANSFORMS))
@pytest.mark.parametrize("shift", [1.0, -37.25, 2.0**26, 1e8, -3e11])
def test_translation_invariance(name, shift):
    """K(X + v) = K(X).  X lies on a dyadic grid so that X + v is exact in float64."""
    spatial_sign = TRANSFORMS[name][0]
    rng = _rng(24)
    x = np.round(rng.normal(size=(50, 4)) * 256) / 1024  # multiples of 2^-10, |x| < 2^3
    x[::5] = x[2::5]  # duplicates
    x[1::7] = x[3::7] + 2.0**-10  # near-duplicates: one grid step apart
    v = shift * np.array([1.0, -1.0, 0.5, 3.0])
    assert np.array_equal((x + v) - v, x)  # the shift is exact
    want = block_pair_sum(x, None, spatial_sign)
    for tile_rows in TILES:
        assert (
            relative_error(block_pair_sum(x + v, None, spatial_sign, tile_rows=tile_rows), want)
            <= 1e-12
        )
    assert (
        relative_error(
            block_pair_sum(x[:20] + v, x[20:] + v, spatial_sign),
            block_pair_sum(x[:20], x[20:], spatial_sign),
        )
        <= 1e-12
    )


@pytest.mark.parametrize("scale", [1e-200, 1e-100, 1e-20, 1e20, 1e100, 1e200])
def test_sphere_is_scale_invariant(scale):
    x = _exact_duplicates()
    assert relative_error(block_pair_sum(x * scale), block_pair_sum(x)) <= 1e-12


# ---------------------------------------------------------------------------------------
# Every pair term is bounded: ||g g^T||_F <= G^2 (the sensitivity proof, section 4)
# ---------------------------------------------------------------------------------------


def _pair_bound_ok(result, bound):
    return np.linalg.norm(result) <= bound**2 * (1 + 1e-12)


@settings(max_examples=300, **HYP)
@given(adversarial_rows(min_rows=2, max_rows=2, max_dim=6), NAMES, TILE_CHOICE)
def test_two_row_block_is_bounded_by_G_squared(x, name, tile_rows):
    spatial_sign, _, bound = TRANSFORMS[name]
    within = block_pair_sum(x, None, spatial_sign, tile_rows=tile_rows)
    cross = block_pair_sum(x[:1], x[1:], spatial_sign, tile_rows=tile_rows)
    assert np.all(np.isfinite(within)) and np.all(np.isfinite(cross))
    assert _pair_bound_ok(within, bound)
    assert _pair_bound_ok(cross, bound)
    want = _reference(x, None, name)
    assert relative_error(within, want) <= TOL
    assert relative_error(cross, want) <= TOL


ADVERSARIAL_PAIRS = {
    "near_1e-9": ([1.0, 2.0, 3.0], [1.0 + 1e-9, 2.0, 3.0 - 1e-9]),
    "one_ulp": ([1.0, 2.0, 3.0], [np.nextafter(1.0, 2.0), 2.0, 3.0]),
    "one_ulp_at_1e8": ([1e8, 1e8, 0.0], [np.nextafter(1e8, 2e8), 1e8, 0.0]),
    "min_subnormal_apart": ([0.0, 0.0], [5e-324, 0.0]),
    "both_1e300_opposite": ([1e300, 0.0], [-1e300, 0.0]),
    "max_float_opposite": ([np.finfo(float).max] * 3, [-np.finfo(float).max] * 3),
    "huge_and_tiny": ([1e300, 1e-300], [1e-300, -1e300]),
    "mixed_scales": ([1e150, 1.0, 1e-150], [1e-150, 1.0, 1e150]),
    "1e300_near": ([1e300, 1.0], [1e300 * (1 + 1e-15), 1.0]),
}


@pytest.mark.parametrize("name", BOUNDED)
@pytest.mark.parametrize("pair", list(ADVERSARIAL_PAIRS))
def test_adversarial_two_row_blocks_are_bounded(pair, name):
    spatial_sign, _, bound = TRANSFORMS[name]
    x = np.array(ADVERSARIAL_PAIRS[pair], dtype=float)
    for result in (
        block_pair_sum(x, None, spatial_sign),
        block_pair_sum(x[:1], x[1:], spatial_sign),
    ):
        assert np.all(np.isfinite(result))
        assert _pair_bound_ok(result, bound)
        assert relative_error(result, _reference(x, None, name)) <= TOL
    if name == "sphere":  # x_i != x_j: the term is a unit-trace projector
        assert np.trace(block_pair_sum(x, None, spatial_sign)) == pytest.approx(1.0, rel=1e-12)


@settings(max_examples=300, **HYP)
@given(
    st.integers(1, 24),
    st.integers(0, 2**32 - 1),
    st.sampled_from([1e-200, 1e-158, 1e-5, 1.0, 1e5, 1e120, 1e155, 1e200]),
    st.floats(min_value=-16.0, max_value=0.0),
    NAMES,
)
def test_pair_far_from_the_centre_is_bounded(d, seed, scale, log10_ratio, name):
    """A pair (c, c + delta) far from the block's centring point, with
    ||delta||^2 / (||c||^2 + ||c + delta||^2) = 10^log10_ratio: that ratio is what the
    kernel uses to choose the fast (expanded) or the exact path, so this sweeps the switch.

    The block is [0, 0, c] x [c + delta]: the centre (coordinate median of block_a) is 0,
    and the two (0, c + delta) terms are known, so the (c, c + delta) term is isolated.
    """
    spatial_sign, xi, bound = TRANSFORMS[name]
    rng = np.random.default_rng(seed)
    c = rng.normal(size=d)
    c *= scale / np.linalg.norm(c)
    delta = rng.normal(size=d)
    delta *= scale * math.sqrt(2 * 10.0**log10_ratio) / np.linalg.norm(delta)
    partner = c + delta
    assume(np.any(partner != c))
    a = np.array([np.zeros(d), np.zeros(d), c])
    total = block_pair_sum(a, partner[None], spatial_sign)
    assert np.all(np.isfinite(total))
    known = 2 * reference_pair_sum(np.zeros((1, d)), partner[None], xi=xi)
    term = total - known
    want = reference_pair_sum(c[None], partner[None], xi=xi)
    # the isolated term's error is that of the sum, relative to the sum
    assert np.linalg.norm(term - want) <= 1e-12 * max(np.linalg.norm(total), np.linalg.norm(want))
    assert np.linalg.norm(want) <= bound**2 * (1 + 1e-12)
    assert np.linalg.norm(term) <= bound**2 * (1 + 1e-12) + 1e-12 * np.linalg.norm(known)
    if name == "sphere":
        assert np.trace(total) == pytest.approx(3.0, rel=1e-12)


# ---------------------------------------------------------------------------------------
# Memory: the tiling bounds the scratch memory
# ---------------------------------------------------------------------------------------


def test_tile_rows_for_budget():
    assert tile_rows_for_budget(DEFAULT_MEMORY_BUDGET, 8) == MAX_TILE_ROWS == 384  # cache cap
    small = tile_rows_for_budget(2**16, 8)
    assert 16 <= small < 100
    assert tile_rows_for_budget(0, 8) == 16  # floor
    assert tile_rows_for_budget(1, 10_000) == 16
    sizes = [tile_rows_for_budget(2**k, 32) for k in range(10, 32)]
    assert sizes == sorted(sizes)  # monotone in the budget
    for budget in (2**16, 2**18, 2**20):
        t = tile_rows_for_budget(budget, 8)
        assert 16 < t < MAX_TILE_ROWS and 8 * t * t <= budget / 2  # a float64 tile fits, twice


@pytest.mark.parametrize("name", BOUNDED)
def test_small_memory_budget_gives_small_tiles_and_the_same_result(name):
    spatial_sign = TRANSFORMS[name][0]
    x = _rng(25).standard_t(1.0, size=(300, 5))
    x[0:290:9] = x[4:294:9]  # exact duplicates
    budget = 2**14
    assert tile_rows_for_budget(budget, 5) < 32  # so 300 rows make 10+ tiles
    small = block_pair_sum(x, None, spatial_sign, memory_budget=budget)
    default = block_pair_sum(x, None, spatial_sign)
    assert relative_error(small, default) <= 1e-12
    assert (
        relative_error(
            block_pair_sum(x[:100], x[100:], spatial_sign, memory_budget=budget),
            block_pair_sum(x[:100], x[100:], spatial_sign),
        )
        <= 1e-12
    )


def _peak_scratch(x, spatial_sign, budget):
    block_pair_sum(x[:50], None, spatial_sign, memory_budget=budget)  # compile / warm up
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        block_pair_sum(x, None, spatial_sign, memory_budget=budget)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_peak_scratch_memory_of_a_large_block_stays_within_budget():
    """20000 x 8 within-block sum, memory_budget = 8 MiB: a full n x n weight matrix would
    take 3.2 GB; the traced peak (numpy allocations included) stays under the budget."""
    n, d = 20_000, 8
    budget = 8 * 2**20
    x = _rng(26).normal(size=(n, d))
    peak = _peak_scratch(x, sphere(), budget)
    full_matrix = 8 * n * n
    assert peak < full_matrix / 100
    assert peak <= budget, f"peak {peak / 2**20:.1f} MiB over the {budget / 2**20:.0f} MiB budget"


@pytest.mark.parametrize(
    "case",
    [
        "custom_transform",  # custom xi evaluated on whole tiles: ~6 tile-sized temporaries
        "exact_path_heavy",  # exact-path pairs gathered as (pairs x d) arrays before chunking
    ],
)
@pytest.mark.slow
def test_peak_scratch_memory_within_budget_adversarial(case):
    """Known bug (reported): the budget is exceeded by a custom spatial_sign (12.7 MiB for an
    8 MiB budget) and by blocks whose pairs mostly take the exact path (rows at 1e300:
    ~24 MiB), because tile_rows_for_budget models only 2 tile-sized arrays."""
    budget = 8 * 2**20
    rng = _rng(27)
    if case == "custom_transform":
        x = rng.normal(size=(4_000, 8))
        spatial_sign = TRANSFORMS["custom"][0]
    else:
        x = rng.normal(size=(1_200, 8))
        x[::3] *= 1e300  # a third of the rows: every pair they are in takes the exact path
        spatial_sign = sphere()
    peak = _peak_scratch(x, spatial_sign, budget)
    assert peak <= budget, f"peak {peak / 2**20:.1f} MiB over the {budget / 2**20:.0f} MiB budget"


# ---------------------------------------------------------------------------------------
# The public radius range: the rounding bound holds at every data scale (audit item c)
# ---------------------------------------------------------------------------------------

SCALES_ALL = [10.0**e for e in range(-300, 301, 12)]


def _worst_error_over_scales(radius, n=16, d=3):
    """Largest ||computed - exact||_F / (G^2 |P|) over data sets at every scale 1e-300..1e300."""
    g = winsor(radius)
    worst = 0.0
    for k, scale in enumerate(SCALES_ALL):
        x = scale * _rng(100 + k).standard_normal((n, d))
        x[3] = x[7]  # and a duplicate
        got = block_pair_sum(x, None, g)
        want = reference_pair_sum(x, xi=lambda s: min(radius, s))
        # divided by G^2 before the norm: K's entries at r = 1e100 square to overflow
        worst = max(worst, np.linalg.norm((got - want) / radius**2) / (n * (n - 1) / 2))
    return worst


@pytest.mark.parametrize("radius", [1e-100, 1.13e-37, 1.0, 1e100])
def test_radius_in_its_range_keeps_the_rounding_bound_at_every_data_scale(radius):
    """The release adds 2 G^2 rounding_error_bound to the sensitivity: the computed K_hat
    must be that close to the exact one for every data set.  Before the scale classes,
    winsor weights r^2 / ||t||^2 underflowed for far rows at small r (r = 1.13e-37, rows at
    1e124: 1.7e-3 G^2 per pair; r = 1e-100: 0.6 G^2), the audit's 1.93x sensitivity."""
    worst = _worst_error_over_scales(radius)
    assert np.isfinite(worst) and worst <= rounding_error_bound(
        3, 16, 1, tile_rows_for_budget(DEFAULT_MEMORY_BUDGET, 3)
    )


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the broken kernel overflows too
def test_the_scale_sweep_catches_weights_that_underflow(monkeypatch):
    """The sweep above has teeth: with every row in one scale class (the kernel before the
    classes) the weights underflow at r = 1e-100 and the bound is broken."""
    monkeypatch.setattr(
        kernel_module,
        "scale_classes",
        lambda rows, index, centre, scaled: np.zeros(index.shape[0], dtype=np.int64),
    )
    assert _worst_error_over_scales(1e-100) > 1e3 * rounding_error_bound(
        3, 16, 1, tile_rows_for_budget(DEFAULT_MEMORY_BUDGET, 3)
    )


@pytest.mark.parametrize("within", [True, False])
@pytest.mark.parametrize("name", ["sphere", "custom"])
def test_column_weight_sums_are_accumulated_as_the_rounding_bound_counts(monkeypatch, name, within):
    """rounding_error_bound counts T + B/T roundings for a weight sum: at most T terms
    within a tile pair, then one addition per tile pair.  So every fused pass (and a custom
    xi's weights) must add its weights into a zeroed tile-sized buffer, never into the
    block's running column sums: those, added row after row over a whole block, were B
    roundings deep (2170 u against 544 u counted at B = 16384).  The result is unchanged."""
    g, xi, _ = TRANSFORMS[name]
    tile, n = 16, 200  # 13 tiles: the running sums would grow across 12 of them
    seen = []
    custom_pass = tiles_module.TileSummer._custom_weights

    def checked(fused_pass):
        def checked_pass(prod, norm2_a, norm2_b, count_a, count_b, *rest):
            colsum = rest[-1]
            seen.append((prod.shape, len(colsum), bool(np.any(colsum))))
            return fused_pass(prod, norm2_a, norm2_b, count_a, count_b, *rest)

        return checked_pass

    def checked_custom(self, weights, count_a, count_b, scale, colsum):
        seen.append((weights.shape, len(colsum), bool(np.any(colsum))))
        return custom_pass(self, weights, count_a, count_b, scale, colsum)

    for fused in ("_fast_path_weights", "_unit_sphere_weights"):
        monkeypatch.setattr(tiles_module, fused, checked(getattr(tiles_module, fused)))
    monkeypatch.setattr(tiles_module.TileSummer, "_custom_weights", checked_custom)
    x = _rng(7).standard_normal((n, 3))
    y = None if within else _rng(8).standard_normal((n, 3))
    got = block_pair_sum(x, y, g, tile_rows=tile)
    assert relative_error(got, reference_pair_sum(x, y, xi=xi)) < TOL
    assert len(seen) >= 13 * 7
    for shape, length, holds_earlier_sums in seen:
        assert shape[0] <= tile and length == shape[1] <= tile
        assert not holds_earlier_sums, "weights added to the block's running column sums"


@pytest.mark.parametrize("diagonal", [True, False])
def test_the_unit_sphere_pass_gives_the_general_passs_weights_bit_for_bit(diagonal):
    """The sphere's own pass for tiles of distinct rows leaves out the multiplicities:
    its weights, exact-path marks and column sums must be the general pass's at counts 1,
    bit for bit, on a tile with pairs of every kind (ordinary, duplicates, near
    duplicates and far pairs marked for the exact path)."""
    rng = _rng(11)
    a = rng.standard_normal((40, 5))
    a[7] *= 1e150  # far from every other row
    b = a if diagonal else rng.standard_normal((40, 5))
    b[4] = a[3]  # a zero distance
    b[6] = a[5] + 1e-9  # ill-conditioned
    norm2_a, norm2_b = (a * a).sum(1), (b * b).sum(1)
    ones = np.ones(40)
    results = []
    for fused in (tiles_module._fast_path_weights, tiles_module._unit_sphere_weights):
        prod, colsum = a @ b.T, np.zeros(40)
        n_exact = fused(prod, norm2_a, norm2_b, ones, ones, diagonal, 0, 1.0, 0.0, colsum)
        results.append((n_exact, prod, colsum))
    (n_general, w_general, c_general), (n_unit, w_unit, c_unit) = results
    assert n_general == n_unit >= 2
    np.testing.assert_array_equal(w_unit, w_general)
    np.testing.assert_array_equal(c_unit, c_general)
    assert np.count_nonzero(w_general > 0) > 700


def test_the_unit_sphere_pass_runs_only_on_tiles_of_distinct_rows(monkeypatch):
    """The kernel takes the pass without multiplicities for the sphere on tiles whose rows
    are all distinct, and never where a tile holds a merged row (count > 1): the result
    equals the reference either way, and the calls are where they should be."""
    calls = []

    def counting(name):
        fused_pass = getattr(tiles_module, name)

        def counted_pass(*args):
            calls.append((name, bool(np.all(args[3] == 1.0) and np.all(args[4] == 1.0))))
            return fused_pass(*args)

        return counted_pass

    for fused in ("_fast_path_weights", "_unit_sphere_weights"):
        monkeypatch.setattr(tiles_module, fused, counting(fused))
    rng = _rng(12)
    distinct = rng.standard_normal((30, 4))
    _assert_matches_reference(distinct, None, "sphere", tiles=[8])
    assert calls and {name for name, _ in calls} == {"_unit_sphere_weights"}
    calls.clear()
    repeated = np.vstack([distinct, distinct[:5]])  # five rows twice: counts of 2
    _assert_matches_reference(repeated, None, "sphere", tiles=[8])
    assert ("_fast_path_weights", False) in calls
    assert all(unit for name, unit in calls if name == "_unit_sphere_weights")
    calls.clear()
    _assert_matches_reference(distinct, None, "winsor", tiles=[8])
    assert {name for name, _ in calls} == {"_fast_path_weights"}


# ---------------------------------------------------------------------------------------
# Identical rows are merged, and only identical rows
# ---------------------------------------------------------------------------------------


def test_rows_are_grouped_exactly_even_when_every_hash_collides():
    """The merge groups rows by a hash, then compares them: with one hash for all rows
    (every pair a collision) only identical rows are merged (-0.0 equals 0.0), NaN rows
    are left out, and the counts add up."""
    x = np.array(
        [
            [1.0, 2.0],
            [1.0, 2.0 + 1e-15],
            [0.0, -0.0],
            [-0.0, 0.0],
            [np.nan, 1.0],
            [1.0, 2.0],
            [3.0, 4.0],
            [0.0, 0.0],
            [1.0, 2.0],
        ]
    )
    finite = rows_module._finite_rows(x)
    assert list(finite) == [0, 1, 2, 3, 5, 6, 7, 8]
    colliding = np.zeros(len(finite), dtype=np.uint64)
    everything = np.arange(len(finite))  # the stable order of equal hashes
    index, counts = rows_module._group_rows(x, finite, colliding, everything)
    assert list(index) == [0, 1, 2, 6] and list(counts) == [3.0, 1.0, 3.0, 1.0]
    hashes = rows_module._row_hashes(x, finite)
    assert hashes[2] == hashes[3] == hashes[6] and len(set(hashes.tolist())) == 4
    order = np.argsort(hashes, kind="stable")
    assert np.array_equal(rows_module._group_rows(x, finite, hashes, order)[0], index)
    assert np.array_equal(rows_module.distinct_finite_rows(x)[0], index)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 100_000), st.integers(16, 512))
def test_tiles_are_of_equal_size_and_as_many_as_the_tile_size_gives(rows, tile):
    """A block of 2667 rows at tiles of 512 is 5 tiles of 448 and one of 427 (never 5 of
    512 and a thin one of 107); the count, hence the depth rounding_error_bound counts,
    is unchanged."""
    assert tiles_module._even_tile(2667, 512) == 448
    size = tiles_module._even_tile(rows, tile)
    count = math.ceil(rows / size)
    assert size <= tile and count == math.ceil(rows / tile)
    last = rows - (count - 1) * size
    assert 1 <= last and last >= size - 16 * count  # the last tile is nearly as large
