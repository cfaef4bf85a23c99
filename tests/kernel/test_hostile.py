"""Bad records: every case of docs/robustness.md's first table, and Hypothesis mixtures.

Data values are private, so they are handled, never refused.  For each case the exact
K_hat (``kendall_matrix``, several row blocks so the cross-block path runs too) equals
the independent pair-by-pair loop of tests/reference.py to 1e-10 (relative Frobenius),
respects the per-pair bound G^2, and ``DPPCA.fit`` gives finite orthonormal components
and finite, decreasing eigenvalues.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dask_dppca as dd
from dask_dppca.kernel import block_pair_sum
from dask_dppca.kernel.spatial_sign import sphere, winsor
from dask_dppca.privacy.mechanisms.noise import NonPrivateRandomStateWarning
from tests.reference import reference_pair_sum, relative_error

TOL = 1e-10
RADIUS = 0.7
TRANSFORMS = {  # name -> (kernel spatial_sign, estimator params, scalar xi, G)
    "sphere": (sphere(), {"spatial_sign": "sphere"}, lambda s: 1.0, 1.0),
    "winsor": (
        winsor(RADIUS),
        {"spatial_sign": "winsor", "radius": RADIUS},
        lambda s: min(RADIUS, s),
        RADIUS,
    ),
}
D = 4


def _rng(seed):
    return np.random.default_rng(seed)  # test data only


def _normal(n=24, seed=0):
    return _rng(seed).standard_normal((n, D))


def _case_nan():
    x = _normal(seed=1)
    x[[0, 5, 6]] = np.nan
    x[9, 2] = np.nan
    return x


def _case_inf():
    x = _normal(seed=2)
    x[3, 0] = np.inf
    x[4] = -np.inf
    x[20, 1] = -np.inf
    return x


def _case_far():
    x = _normal(seed=3)
    far = [1, 7, 8, 19]
    x[far] *= 1e300 / np.linalg.norm(x[far], axis=1, keepdims=True)
    x[2] = [np.finfo(float).max, -np.finfo(float).max, 0, 1]
    return x


def _case_subnormal():
    x = _normal(seed=4)
    x[::2] *= 1e-310
    return x


def _case_duplicates():
    x = _normal(12, seed=5)
    return np.vstack([x, x])[_rng(6).permutation(24)]


def _case_all_identical():
    return np.tile([1.5, -2.0, 1e8, 3.0], (24, 1))


def _case_single_distinct():
    x = np.tile([1.0, 2.0, 3.0, 4.0], (24, 1))
    x[17] = [1.0, 2.0, 3.0, -4.0]
    return x


def _case_int64():
    return _rng(7).integers(-(2**62), 2**62, size=(24, D), dtype=np.int64)


def _case_small_integers():
    return _rng(8).integers(-2, 3, size=(24, D)).astype(np.int32)  # many duplicates


def _case_float32():
    return _normal(seed=9).astype(np.float32)


def _case_float16():
    return (_normal(seed=10) * 100).astype(np.float16)


def _case_bool():
    return _rng(11).integers(0, 2, size=(24, D)).astype(bool)


def _case_longdouble_overflow():
    x = _normal(seed=12).astype(np.longdouble)
    if np.finfo(np.longdouble).max <= np.finfo(np.float64).max:
        pytest.skip("long double is float64 on this platform")
    x[[2, 3]] *= np.longdouble(10) ** 400  # beyond float64: +-inf after conversion
    return x


def _case_mixture():
    x = _case_far()
    x[[0, 1]] = np.nan
    x[10] = x[11]
    x[12] = x[13] + 1e-12
    x[14] = 5e-324
    x[15:18] += 1e8
    return x


CASES = {
    "nan": _case_nan,
    "inf": _case_inf,
    "far_1e300": _case_far,
    "subnormal": _case_subnormal,
    "duplicates": _case_duplicates,
    "all_identical": _case_all_identical,
    "single_distinct": _case_single_distinct,
    "int64": _case_int64,
    "small_integers": _case_small_integers,
    "float32": _case_float32,
    "float16": _case_float16,
    "bool": _case_bool,
    "longdouble_overflow": _case_longdouble_overflow,
    "mixture": _case_mixture,
}


def _reference_k_hat(x, name):
    with np.errstate(over="ignore"):
        x64 = np.asarray(x).astype(np.float64)  # the documented conversion (long double: +-inf)
    n = len(x64)
    return reference_pair_sum(x64, xi=TRANSFORMS[name][2]) / (n * (n - 1) / 2)


def _fit(x, name, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateRandomStateWarning)
        return dd.DPPCA(
            n_components=params.pop("n_components", 2),
            scheduler="synchronous",
            random_state=params.pop("random_state", 0),
            **TRANSFORMS[name][1],
            **params,
        ).fit(x)


def _assert_release_is_well_formed(est, d, m):
    v = est.components_
    assert v.shape == (m, d) and np.all(np.isfinite(v))
    np.testing.assert_allclose(v @ v.T, np.eye(m), atol=1e-10)
    values = est.eigenvalues_
    assert values.shape == (d,) and np.all(np.isfinite(values))
    assert np.all(np.diff(values) <= 0)
    ratio = est.kendall_eigenvalue_ratio_
    assert np.all(np.isfinite(ratio)) and np.all(ratio >= 0) and ratio.sum() <= 1 + 1e-12


def _assert_per_pair_bound(k_hat, x, bound):
    """||K_hat||_2 <= G^2 (an average of terms of norm <= G^2), eigenvalues >= 0."""
    values = np.linalg.eigvalsh(k_hat)
    assert values[-1] <= bound**2 * (1 + 1e-12)
    assert values[0] >= -1e-12 * bound**2


@pytest.mark.parametrize("name", list(TRANSFORMS))
@pytest.mark.parametrize("case", list(CASES))
def test_bad_record_case(case, name):
    x = CASES[case]()
    want = _reference_k_hat(x, name)
    chunks = (7, -1)  # 4 row blocks: within and cross blocks, ragged last block
    got = dd.kendall_matrix(
        da.from_array(x, chunks=chunks),
        spatial_sign=TRANSFORMS[name][1]["spatial_sign"],
        radius=TRANSFORMS[name][1].get("radius"),
        scheduler="synchronous",
    )
    assert np.all(np.isfinite(got))
    assert relative_error(got, want) <= TOL, f"{case}/{name}: {relative_error(got, want):.2e}"
    _assert_per_pair_bound(got, x, TRANSFORMS[name][3])
    est = _fit(x, name)
    _assert_release_is_well_formed(est, D, 2)
    assert est.n_samples_ == len(x)
    if case == "all_identical":
        assert np.all(got == 0.0)
    if case == "single_distinct":
        # 23 pairs (of 276) each G^2 e_4 e_4^T (winsor: the difference is 8/sqrt2 > r)
        want_single = np.zeros((D, D))
        want_single[3, 3] = 23 * TRANSFORMS[name][3] ** 2 / 276
        np.testing.assert_allclose(got, want_single, rtol=1e-14, atol=1e-300)


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_non_finite_rows_count_in_n_and_contribute_nothing(name):
    x = _case_nan()
    x[12, 3] = np.inf
    finite = np.isfinite(x).all(axis=1)
    n, n_finite = len(x), int(finite.sum())
    spatial_sign, params = TRANSFORMS[name][0], TRANSFORMS[name][1]
    got = dd.kendall_matrix(x, scheduler="synchronous", **params)
    only_finite = block_pair_sum(x[finite], None, spatial_sign) / (n * (n - 1) / 2)
    np.testing.assert_allclose(got, only_finite, rtol=1e-13, atol=0)
    # the release is calibrated on the public n (non-finite rows included), never on n_finite
    est = _fit(x, name)
    assert est.n_samples_ == n and est.privacy_["n_samples"] == n != n_finite
    clean = _fit(
        x[finite][:n] if n_finite >= n else np.vstack([x[finite], x[finite][: n - n_finite]]), name
    )
    assert est.privacy_["sigma"] == clean.privacy_["sigma"]


def test_sphere_trace_counts_distinct_finite_pairs():
    x = _case_mixture()
    finite = np.isfinite(x).all(axis=1)
    n = len(x)
    distinct = sum(
        bool(finite[i] and finite[j] and np.any(x[i] != x[j]))
        for i in range(n)
        for j in range(i + 1, n)
    )
    k_hat = dd.kendall_matrix(da.from_array(x, chunks=(5, -1)), scheduler="synchronous")
    assert np.trace(k_hat) == pytest.approx(distinct / (n * (n - 1) / 2), rel=1e-13)


def test_bad_values_raise_no_warning():
    """Warnings would depend on the private values: the kernel and the fit emit none."""
    for case in ["nan", "inf", "far_1e300", "subnormal", "longdouble_overflow", "mixture"]:
        try:
            x = CASES[case]()
        except pytest.skip.Exception:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            warnings.simplefilter("ignore", NonPrivateRandomStateWarning)
            block_pair_sum(x, None, sphere())
            block_pair_sum(x[:9], x[9:], winsor(RADIUS))
            dd.kendall_matrix(da.from_array(x, chunks=(7, -1)), scheduler="synchronous")


def test_bad_records_do_not_change_the_code_path_of_the_release():
    """A NaN record and an exact duplicate of another record give the same K_hat: both
    contribute exactly 0 to their pairs, whatever their values (same rule, same output)."""
    x = _normal(seed=20)
    with_nan, with_inf = x.copy(), x.copy()
    with_nan[4] = np.nan
    with_inf[4] = [np.inf, -np.inf, np.nan, 1.0]
    a = dd.kendall_matrix(with_nan, scheduler="synchronous")
    b = dd.kendall_matrix(with_inf, scheduler="synchronous")
    np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------------------
# Hypothesis: hostile matrices (mixtures of the cases above)
# ---------------------------------------------------------------------------------------

ROW_KINDS = [
    "normal",
    "nan",
    "inf",
    "far",
    "float_max",
    "subnormal",
    "tiny",
    "duplicate",
    "near",
    "offset",
    "zero",
    "integer",
]


@st.composite
def hostile_matrices(draw, min_rows=2, max_rows=14, max_dim=5):
    """Rows of mixed kinds; a whole-matrix dtype (float64, float32, int64) on top.

    float32 casts rows at 1e300 to inf (then non-finite); int64 keeps only finite rows
    at moderate scale (an integer matrix cannot hold NaN).
    """
    d = draw(st.integers(1, max_dim))
    n = draw(st.integers(min_rows, max_rows))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dtype = draw(st.sampled_from(["float64", "float64", "float32", "int64"]))
    rows = []
    for _ in range(n):
        kind = draw(st.sampled_from(ROW_KINDS)) if rows else "normal"
        if dtype == "int64" and kind not in {"normal", "duplicate", "zero", "integer", "offset"}:
            kind = "integer"
        z = rng.standard_normal(d)
        if kind == "normal":
            row = z
        elif kind == "nan":
            row = z.copy()
            row[draw(st.integers(0, d - 1))] = np.nan
        elif kind == "inf":
            row = z.copy()
            row[draw(st.integers(0, d - 1))] = draw(st.sampled_from([np.inf, -np.inf]))
        elif kind == "far":
            row = z / np.linalg.norm(z) * draw(st.sampled_from([1e150, 1e200, 1e300, 1.7e308]))
        elif kind == "float_max":
            row = np.sign(z) * np.finfo(float).max
        elif kind == "subnormal":
            row = z * 1e-310
        elif kind == "tiny":
            row = z * draw(st.sampled_from([1e-160, 1e-200, 1e-300]))
        elif kind == "duplicate":
            row = rows[draw(st.integers(0, len(rows) - 1))].copy()
        elif kind == "near":
            base = rows[draw(st.integers(0, len(rows) - 1))]
            size = np.abs(base[np.isfinite(base)]).max(initial=0.0) or 1.0
            with np.errstate(over="ignore", invalid="ignore"):
                row = base + draw(st.sampled_from([1e-14, 1e-10, 1e-6])) * size * z
        elif kind == "offset":
            row = np.round(1e8 + z * 10)
        elif kind == "zero":
            row = np.zeros(d)
        else:
            row = np.round(z * 5)
        rows.append(np.asarray(row, dtype=float))
    x = np.array(rows)
    if dtype == "float32":
        with np.errstate(over="ignore"):
            x = x.astype(np.float32)
    elif dtype == "int64":
        x = x.astype(np.int64)
    return x


HYP = dict(
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@settings(max_examples=120, **HYP)
@given(
    hostile_matrices(),
    st.sampled_from(list(TRANSFORMS)),
    st.sampled_from([None, 1, 3, 5]),
    st.booleans(),
)
def test_hostile_matrices_kernel_matches_reference(x, name, tile_rows, cross):
    spatial_sign, _, xi, bound = TRANSFORMS[name]
    x64 = x.astype(np.float64)
    if cross:
        k = len(x) // 2
        got = block_pair_sum(x[:k], x[k:], spatial_sign, tile_rows=tile_rows)
        want = reference_pair_sum(x64[:k], x64[k:], xi=xi)
        n_pairs = max(k * (len(x) - k), 1)
    else:
        got = block_pair_sum(x, None, spatial_sign, tile_rows=tile_rows)
        want = reference_pair_sum(x64, xi=xi)
        n_pairs = len(x) * (len(x) - 1) // 2
    assert np.all(np.isfinite(got))
    np.testing.assert_array_equal(got, got.T)
    assert relative_error(got, want) <= TOL
    _assert_per_pair_bound(got / n_pairs, x64, bound)


@settings(max_examples=30, **HYP)
@given(
    hostile_matrices(max_rows=12),
    st.sampled_from(list(TRANSFORMS)),
    st.integers(1, 5),
    st.integers(0, 2**31 - 1),
)
def test_hostile_matrices_estimator_outputs(x, name, block, seed):
    d = x.shape[1]
    m = min(2, d)
    data = da.from_array(x, chunks=(block, -1))
    est = _fit(data, name, n_components=m, random_state=seed, design="complete")
    _assert_release_is_well_formed(est, d, m)
    k_hat = dd.kendall_matrix(data, scheduler="synchronous", **TRANSFORMS[name][1])
    want = _reference_k_hat(x, name)
    assert relative_error(k_hat, want) <= TOL


def test_documented_tests_exist():
    """Every test the bad-records table of docs/robustness.md cites exists."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "robustness.md").read_text()
    table = doc.split("## Bad records", 1)[1].split("## Bad parameters", 1)[0]
    cited = re.findall(r"`(tests/[\w/]+\.py)::(\w+)(?:\[(\w+)\])?`", table)
    assert len(cited) >= 15
    root = Path(__file__).resolve().parents[2]
    for path, function, param in cited:
        source = (root / path).read_text()
        assert f"def {function}(" in source, f"{path}::{function} is cited but missing"
        if param and path.endswith("test_hostile.py") and function == "test_bad_record_case":
            assert param in CASES, f"case {param} is cited but missing"


def test_rows_near_the_float_range_raise_no_warning_from_the_centring_point():
    """Audit item d: the centring point was np.median of a sample, whose average of the two
    middle values overflowed for rows near 1.8e308 and warned (a warning that depends on
    the private values).  The lower median is one of the values: no arithmetic at all."""
    big = np.finfo(float).max
    x = _normal(seed=30)
    x[:16] = big * (1 - np.arange(16)[:, None] * [1e-3, 2e-3, 3e-3, 0])  # 16 of 24 rows near max
    x[:16, 3] *= -1
    with pytest.warns(RuntimeWarning, match="overflow"):  # the data does make np.median warn
        np.median(x, axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", NonPrivateRandomStateWarning)
        # Advice from public quantities (24 records are few for d = 4), not from values.
        warnings.simplefilter("ignore", dd.PrivacyWarning)
        for name in TRANSFORMS:
            got = block_pair_sum(x, None, TRANSFORMS[name][0])
            assert np.all(np.isfinite(got))
            assert relative_error(got, reference_pair_sum(x, xi=TRANSFORMS[name][2])) <= TOL
        _assert_release_is_well_formed(_fit(da.from_array(x, chunks=(7, -1)), "sphere"), D, 2)


@pytest.fixture
def raising_errstate():
    """The user's ``np.seterr(all="raise")``, restored afterwards."""
    previous = np.seterr(all="raise")
    yield
    np.seterr(**previous)


@pytest.mark.parametrize("scheduler", ["synchronous", None])
@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_a_users_raising_errstate_cannot_turn_a_far_record_into_an_exception(
    raising_errstate, scheduler, name
):
    """Under np.seterr(all="raise") (inherited by Dask's worker threads) the far records'
    harmless underflow raised FloatingPointError for this data set and not for its
    neighbour; the numerics run under their own error state, so the fit is the one made
    under numpy's defaults, bit for bit (embedded cluster and synchronous scheduler)."""
    x = _case_far()
    neighbour = x.copy()
    neighbour[[1, 2, 7, 8, 19]] = _normal(seed=30)[:5]
    params = dict(n_components=2, random_state=0, scheduler=scheduler, **TRANSFORMS[name][1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateRandomStateWarning)
        fits = [dd.DPPCA(**params).fit(data).components_ for data in (x, neighbour)]
        reference = dd.kendall_matrix(x, scheduler="synchronous", **TRANSFORMS[name][1])
        with np.errstate(all="warn", under="ignore"):  # numpy's defaults
            plain = dd.DPPCA(**params).fit(x).components_
            plain_reference = dd.kendall_matrix(x, scheduler="synchronous", **TRANSFORMS[name][1])
    assert np.array_equal(fits[0], plain) and np.all(np.isfinite(fits[1]))
    assert np.array_equal(reference, plain_reference)
