"""Pair designs: exact pair counts and degrees (brute force), sensitivity, the auto rule."""

from __future__ import annotations

import math

import dask.array as da
import numpy as np
import pytest

import dask_dppca as dd
from dask_dppca.design import AUTO_FLOPS_PER_THREAD, CompleteDesign, RegularDesign, auto_design

from tests.reference import reference_pair_sum, relative_error


def _brute_force_pairs(plan):
    edges = np.cumsum((0,) + plan.block_sizes)
    pairs = set()
    for bi, bj in plan.block_pairs:
        for i in range(edges[bi], edges[bi + 1]):
            for j in range(edges[bj], edges[bj + 1]):
                if bi != bj or i < j:
                    pairs.add((min(i, j), max(i, j)))
    return pairs


@pytest.mark.parametrize(
    "n, k, block",
    [(100, 2, 10), (103, 3, 10), (95, 1, 10), (50, 10, 10), (77, 4, 7), (99, 3, 11), (64, 5, 8)],
)
def test_regular_design_counts_match_brute_force(n, k, block):
    plan = RegularDesign(k=k, block_size=block, seed=3).plan((n,), 4)
    pairs = _brute_force_pairs(plan)
    degree = np.zeros(n, dtype=int)
    for i, j in pairs:
        degree[i] += 1
        degree[j] += 1
    assert plan.n_pairs == len(pairs)
    assert plan.max_degree == degree.max()
    assert math.isclose(plan.sensitivity(1.0), math.sqrt(2) * degree.max() / len(pairs))
    # Blocks are split exactly, with one ragged tail at most.
    assert sum(plan.block_sizes) == n and all(s == block for s in plan.block_sizes[:-1])


@pytest.mark.parametrize("n, k, block", [(100, 2, 10), (120, 3, 10), (96, 1, 12)])
def test_equal_blocks_give_the_complete_design_sensitivity(n, k, block):
    plan = RegularDesign(k=k, block_size=block, seed=0).plan((n,), 4)
    assert math.isclose(plan.sensitivity(1.0), 2 * math.sqrt(2) / n, rel_tol=1e-12)
    assert plan.n_pairs < n * (n - 1) // 2


def test_block_graph_is_k_regular_and_seeded():
    design = RegularDesign(k=4, block_size=5, seed=9)
    edges = design.partner_edges(12)
    degree = np.bincount(np.array(edges).ravel(), minlength=12)
    assert np.all(degree == 4)
    assert edges == RegularDesign(k=4, block_size=5, seed=9).partner_edges(12)
    assert edges != RegularDesign(k=4, block_size=5, seed=10).partner_edges(12)


def test_large_k_is_the_complete_design():
    plan = RegularDesign(k=50, block_size=10, seed=0).plan((95,), 4)
    assert plan.n_pairs == 95 * 94 // 2 and plan.max_degree == 94


def test_complete_design_counts():
    plan = CompleteDesign().plan((3, 4, 5), 4)
    assert plan.n_pairs == len(_brute_force_pairs(plan)) == 66
    assert plan.max_degree == 11


@pytest.mark.parametrize("field, value", [("k", 0), ("block_size", 1), ("seed", -1), ("k", 2.5)])
def test_regular_design_parameters_are_validated(field, value):
    params = {"k": 2, "block_size": 10, "seed": 0, field: value}
    with pytest.raises(ValueError, match=field):
        RegularDesign(**params)


def test_regular_design_estimate_matches_the_pair_by_pair_reference():
    rng = np.random.default_rng(8)  # test data only
    x = rng.standard_normal((70, 3)) * [3.0, 1.0, 0.3]
    design = RegularDesign(k=2, block_size=9, seed=4)
    plan = design.plan((70,), 3)
    edges = np.cumsum((0,) + plan.block_sizes)
    want = np.zeros((3, 3))
    for bi, bj in plan.block_pairs:
        a = x[edges[bi]:edges[bi + 1]]
        want += reference_pair_sum(a) if bi == bj else reference_pair_sum(a, x[edges[bj]:edges[bj + 1]])
    got = dd.kendall_matrix(da.from_array(x, chunks=(13, 3)), design=design, scheduler="synchronous")
    assert relative_error(got, want / plan.n_pairs) <= 1e-10


def test_fit_reports_the_public_design():
    rng = np.random.default_rng(9)  # test data only
    est = dd.DPPCA(n_components=1, design=RegularDesign(k=1, block_size=50, seed=7),
                   scheduler="synchronous").fit(rng.standard_normal((500, 3)))
    p = est.privacy_
    assert p["design"] == "regular" and p["partners_k"] == 1 and p["design_seed"] == 7
    assert p["block_size"] == 50 and p["n_blocks"] == 10
    assert math.isclose(p["sensitivity"] - p["rounding_slack"] - p["sampler_slack"],
                        2 * math.sqrt(2) / 500, rel_tol=1e-12)


def test_auto_rule_depends_on_public_sizes_only():
    assert isinstance(auto_design(10_000, 20, 2), CompleteDesign)
    big = auto_design(10_000_000, 32, 2)
    assert isinstance(big, RegularDesign) and big.k >= 1 and big.seed == 0
    # The regular design's work stays within the same budget.
    plan_pairs = 10_000_000 * (big.k + 1) * big.block_size / 2
    assert 4 * 32 * plan_pairs <= AUTO_FLOPS_PER_THREAD * 2
    # More threads buy more pairs.
    assert auto_design(2_000_000, 32, 64).k > auto_design(2_000_000, 32, 2).k
