"""Pair designs: exact pair counts and degrees (brute force), sensitivity, the auto rule."""

from __future__ import annotations

import math

import dask.array as da
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dask_dppca as dd
from dask_dppca.design import (
    AUTO_FLOPS_PER_THREAD,
    AUTO_MAX_BLOCK_PAIRS,
    BLOCK_PAIRS_PER_THREAD,
    MAX_BLOCK_BYTES,
    MAX_BLOCK_ROWS,
    MAX_TASK_BLOCKS,
    MIN_BLOCK_PAIR_FLOPS,
    TASK_FLOPS,
    CompleteDesign,
    RegularDesign,
    auto_design,
    block_rows,
    complete_blocks,
)
from dask_dppca.kernel import DEFAULT_MEMORY_BUDGET, tile_rows_for_budget
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
        a = x[edges[bi] : edges[bi + 1]]
        want += (
            reference_pair_sum(a)
            if bi == bj
            else reference_pair_sum(a, x[edges[bj] : edges[bj + 1]])
        )
    got = dd.kendall_matrix(
        da.from_array(x, chunks=(13, 3)), design=design, scheduler="synchronous"
    )
    assert relative_error(got, want / plan.n_pairs) <= 1e-10


def test_fit_reports_the_public_design():
    rng = np.random.default_rng(9)  # test data only
    est = dd.DPPCA(
        n_components=1, design=RegularDesign(k=1, block_size=50, seed=7), scheduler="synchronous"
    ).fit(rng.standard_normal((500, 3)))
    p = est.privacy_
    assert p["design"] == "regular" and p["partners_k"] == 1 and p["design_seed"] == 7
    assert p["block_size"] == 50 and p["n_blocks"] == 10
    assert math.isclose(
        p["sensitivity"] - p["rounding_slack"] - p["sampler_slack"],
        2 * math.sqrt(2) / 500,
        rel_tol=1e-12,
    )


def _auto_rule_before_the_scheduler_limit(n, d, threads):
    """The auto rule as it was before its block growth (the oracle: unchanged below the limit)."""
    budget = AUTO_FLOPS_PER_THREAD * max(int(threads), 1)
    if 2.0 * n * n * d <= budget:
        return CompleteDesign()
    tile = tile_rows_for_budget(DEFAULT_MEMORY_BUDGET, d)
    largest = int(min(16384, max(1024, 32 * 2**20 // (8 * d))))
    block = int(min(largest, max(1024, budget / (4.0 * d * n))))
    block = max(tile, block // tile * tile)
    k = int(budget / (2.0 * n * block * d)) - 1
    n_blocks = -(-n // block)
    return RegularDesign(k=max(1, min(k, n_blocks - 1)), block_size=block, seed=0)


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(2, 400_000_000),
    d=st.sampled_from([1, 2, 7, 32, 100, 256, 1000, 5000]),
    threads=st.integers(1, 100_000),
)
def test_the_auto_rule_is_unchanged_below_the_scheduler_limit(n, d, threads):
    before = _auto_rule_before_the_scheduler_limit(n, d, threads)
    if isinstance(before, RegularDesign):
        blocks = -(-n // before.block_size)
        if blocks * (1 + before.k / 2) > AUTO_MAX_BLOCK_PAIRS:
            return  # the scheduler limit's rule changes it (the next test)
    assert auto_design(n, d, threads) == before


def test_the_auto_rule_grows_blocks_to_stay_under_the_scheduler_limit(monkeypatch):
    from dask_dppca import design

    # Scaled down: a limit of 1000 block pairs, met at n = 10^7 by blocks of 24576 rows.
    before = auto_design(10_000_000, 32, 2)
    monkeypatch.setattr(design, "AUTO_MAX_BLOCK_PAIRS", 1000)
    after = auto_design(10_000_000, 32, 2)
    assert after.block_size > before.block_size and after.k >= 1
    assert after.block_size % tile_rows_for_budget(DEFAULT_MEMORY_BUDGET, 32) == 0
    plan = after.plan((10_000_000,), 32)
    assert len(plan.block_pairs) <= 1000
    # The smallest doubling that meets it: half the blocks would not.
    half = RegularDesign(k=after.k, block_size=after.block_size // 2).plan((10_000_000,), 32)
    assert len(half.block_pairs) > 1000
    # At a terabyte (n = 4 x 10^9, d = 32) on 10 to 1000 workers of 16 threads, the
    # public rule stays under the real limit, from n, d and the thread count alone.
    monkeypatch.setattr(design, "AUTO_MAX_BLOCK_PAIRS", 500_000)
    for threads in (160, 1600, 16000):
        big = auto_design(4_000_000_000, 32, threads)
        blocks = -(-4_000_000_000 // big.block_size)
        assert blocks * (1 + big.k / 2) <= AUTO_MAX_BLOCK_PAIRS
        assert big.block_size * 8 * 32 <= MAX_BLOCK_BYTES


def test_auto_rule_depends_on_public_sizes_only():
    assert isinstance(auto_design(10_000, 20, 2), CompleteDesign)
    big = auto_design(10_000_000, 32, 2)
    assert isinstance(big, RegularDesign) and big.k >= 1 and big.seed == 0
    # The regular design's work stays within the same budget.
    plan_pairs = 10_000_000 * (big.k + 1) * big.block_size / 2
    assert 4 * 32 * plan_pairs <= AUTO_FLOPS_PER_THREAD * 2
    # More threads buy more pairs.
    assert auto_design(2_000_000, 32, 64).k > auto_design(2_000_000, 32, 2).k


# ---------------------------------------------------------------------------------------
# The block rule: blocks for every thread when the input imposes no row chunks
# ---------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 10**8), st.integers(1, 4000), st.integers(1, 4096))
def test_block_rule_gives_work_to_every_thread_within_its_limits(n, d, threads):
    blocks = complete_blocks(n, d, threads)
    tile = tile_rows_for_budget(DEFAULT_MEMORY_BUDGET, d)
    largest = max(tile, min(MAX_BLOCK_ROWS, MAX_BLOCK_BYTES // (8 * d)) // tile * tile)
    smallest = max(tile, math.ceil(math.sqrt(MIN_BLOCK_PAIR_FLOPS / (2 * d))))
    assert sum(blocks) == n and min(blocks) > 0
    assert len(set(blocks[:-1])) <= 1 and blocks[-1] <= blocks[0] == block_rows(n, d, threads)
    assert max(blocks) <= largest or (len(blocks) == 1 and n <= largest)
    if len(blocks) > 1:
        assert blocks[0] >= smallest  # every task worth its fixed cost
    n_block_pairs = len(blocks) * (len(blocks) + 1) // 2
    # enough block pairs for every thread, unless the blocks are already near the least work
    wanted = 1 if threads == 1 else BLOCK_PAIRS_PER_THREAD * threads
    assert n_block_pairs >= wanted or blocks[0] < 2 * smallest
    if threads == 1:  # nothing to balance: as few blocks as the largest block allows
        assert len(blocks) == math.ceil(n / largest)
    assert len(complete_blocks(n, d, threads + 1)) >= len(blocks)  # more threads, more blocks


@pytest.mark.parametrize(
    "n, d, threads, want",
    [
        (
            8000,
            256,
            2,
            (2000, 2000, 2000, 2000),
        ),  # one block on one core before the block rule: 10 tasks now (whole tiles of
        # 384 would leave a last block under half the others: plain quarters)
        (16000, 32, 2, (4224, 4224, 4224, 3328)),
        (2000, 20, 2, (1152, 848)),
        (1000, 20, 2, (1000,)),  # too little work to split
        (8000, 256, 1, (8000,)),  # one thread: one block while the rows fit in one
        (40000, 32, 1, (13440, 13440, 13120)),  # three blocks of whole 384-row tiles
        (100_000, 64, 2, (14592,) * 6 + (12448,)),  # capped at 16384 rows
    ],
)
def test_block_rule_examples(n, d, threads, want):
    assert complete_blocks(n, d, threads) == want


def test_auto_regular_blocks_are_whole_tiles():
    design = auto_design(10_000_000, 32, 2)
    tile = tile_rows_for_budget(DEFAULT_MEMORY_BUDGET, 32)
    assert isinstance(design, RegularDesign) and design.block_size % tile == 0
    assert design.block_size == 3072 and design.k == 1  # was 3125: a 53-row tile per block


# ---------------------------------------------------------------------------------------
# Walk order: a regular design's blocks are needed for a bounded stretch of its tasks
# ---------------------------------------------------------------------------------------


def _most_blocks_live(block_pairs):
    """Most blocks between their first and last task, taking the tasks in plan order."""
    first, last = {}, {}
    for step, pair in enumerate(block_pairs):
        for block in pair:
            first.setdefault(block, step)
            last[block] = step
    return max(sum(first[b] <= step <= last[b] for b in first) for step in range(len(block_pairs)))


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 8])
def test_regular_plan_keeps_a_bounded_number_of_blocks_live(k):
    """Each block's tasks are close together in the plan's order, whatever the number of
    blocks: what a worker must hold depends on k and the block size, not on n."""
    for n_blocks in (20, 101, 400, 2000):
        plan = RegularDesign(k=k, block_size=2, seed=5).plan((2 * n_blocks,), 1)
        assert _most_blocks_live(plan.block_pairs) <= k + 2, (k, n_blocks)
    # the lexicographic order of the same pairs (as before the walk) grows with n
    assert _most_blocks_live(sorted(plan.block_pairs)) > 10 * (k + 2)


@pytest.mark.parametrize("k, n_blocks", [(1, 8), (3, 12), (5, 24), (3, 13), (5, 40)])
def test_odd_k_degrees(k, n_blocks):
    degree = np.bincount(
        np.array(RegularDesign(k=k, block_size=5, seed=2).partner_edges(n_blocks)).ravel(),
        minlength=n_blocks,
    )
    m = k // 2 + 1
    assert set(degree) <= {k - 1, k}
    assert np.sum(degree == k - 1) <= m  # at most the end of the walk
    if n_blocks % (2 * m) == 0:
        assert np.all(degree == k)


@pytest.mark.parametrize(
    "k, block, n", [(1, 64, 6400), (3, 300, 30_000), (2, 3072, 10**6), (1, 16384, 10**7)]
)
def test_regular_tasks_group_consecutive_pairs_within_their_limits(k, block, n):
    """A task takes consecutive block pairs of the walk while under TASK_FLOPS of work and
    MAX_TASK_BLOCKS blocks: public (the plan only), and every pair in exactly one task."""
    plan = RegularDesign(k=k, block_size=block, seed=1).plan((n,), 32)
    tasks = plan.tasks()
    assert [pair for task in tasks for pair in task] == list(plan.block_pairs)
    sizes = plan.block_sizes

    def work(pair):
        i, j = pair
        return 4.0 * 32 * (sizes[i] * (sizes[i] - 1) / 2 if i == j else sizes[i] * sizes[j])

    for task in tasks:
        assert len({b for pair in task for b in pair}) <= MAX_TASK_BLOCKS
        assert sum(work(p) for p in task[:-1]) < TASK_FLOPS  # full only with its last pair
    if work(plan.block_pairs[1]) >= TASK_FLOPS:  # big blocks: one pair a task,
        assert len(tasks) >= len(plan.block_pairs) - 2  # but the ragged tail block's
    else:
        assert len(tasks) < len(plan.block_pairs) / 1.5
    assert CompleteDesign().plan((100, 100, 50), 3).tasks() == [
        (p,) for p in CompleteDesign().plan((100, 100, 50), 3).block_pairs
    ]
