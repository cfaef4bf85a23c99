"""Pair designs and block planning: which pairs the U-statistic averages, how the rows
are cut into blocks, and the sensitivity that follows.

This module is the one owner of block planning: :func:`plan_blocks` turns the public
shape, the input's own row chunks (or none, for data in memory), the ``design``
parameter and the compute target's thread count into a design and its
:class:`DesignPlan`.  The estimator, the non-private reference ``kendall_matrix`` and
the planner's ``release_sigma`` all call it, so they cannot drift apart.

A design turns the row blocks of the input into a list of block pairs ``(I, J)`` with
``I <= J`` (``I == J``: the pairs ``i < j`` inside block I; ``I < J``: all of
``I x J``), and reports the two numbers the privacy layer needs (docs/method.md, section 4):
the number of pairs ``|P|`` and the largest number of pairs any one record sits in,
``max_degree``.  Both depend on the public n and the block layout only, never on the
data.  Then

    ``Delta_F = sqrt(2) * G^2 * max_degree / |P|``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, SupportsInt

import numpy as np
from numpy.typing import NDArray

from .kernel import DEFAULT_MEMORY_BUDGET, rounding_error_bound, tile_rows_for_budget

__all__ = [
    "AUTO_MAX_BLOCK_PAIRS",
    "MAX_BLOCKS_PER_CHUNK",
    "SCHEDULER_TASK_LIMIT",
    "CompleteDesign",
    "Design",
    "DesignPlan",
    "RegularDesign",
    "auto_design",
    "block_rows",
    "check_design",
    "check_task_count",
    "chunk_aligned_rows",
    "complete_blocks",
    "merge_chunks",
    "plan_blocks",
    "planned_tasks",
    "resolve_design",
    "smallest_block_rows",
    "task_limit",
]


@dataclass(frozen=True)
class DesignPlan:
    """A concrete set of block pairs over given row blocks, and the kernel's tiles.

    Every number the sensitivity proof uses lives here: ``|P|``, the largest degree,
    and the block and tile sizes that bound the kernel's rounding error.  The graph
    runs the kernel with exactly ``tile_rows``, and the privacy layer computes the
    rounding slack from the same value (:meth:`rounding_error`).

    Attributes
    ----------
    block_sizes : tuple of int
        Rows in each block, in order.
    block_pairs : tuple of (int, int)
        The block pairs ``(I, J)``, ``I <= J``, in a fixed order.
    n_pairs : int
        ``|P|``, the number of record pairs averaged.
    max_degree : int
        The largest number of pairs that contain one record.
    n_features : int
        d, the width of every block.
    tile_rows : int
        Rows per kernel tile (from the kernel's default scratch budget and d).
    task_sizes : tuple of int
        How many consecutive block pairs each graph task computes (empty: one each).
        Their sums are added in a balanced tree inside the task (at most
        ``log2(#block pairs) + 1`` roundings deep); the graph adds the tasks' sums
        exactly (:mod:`dask_dppca.kernel.exact_sum`) and rounds the total once.
    """

    block_sizes: tuple[int, ...]
    block_pairs: tuple[tuple[int, int], ...]
    n_pairs: int
    max_degree: int
    n_features: int
    tile_rows: int
    task_sizes: tuple[int, ...] = ()

    def tasks(self) -> list[tuple[tuple[int, int], ...]]:
        """The block pairs of each graph task, in order."""
        sizes = self.task_sizes or (1,) * len(self.block_pairs)
        bounds = np.cumsum((0,) + tuple(sizes))
        return [self.block_pairs[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    @property
    def n_samples(self) -> int:
        """n, the number of records."""
        return sum(self.block_sizes)

    def rounding_error(self) -> float:
        """Worst-case ``||K_hat_computed - K_hat_exact||_F / G^2`` for these blocks and tiles."""
        return rounding_error_bound(
            self.n_features, max(self.block_sizes), len(self.block_pairs), self.tile_rows
        )

    def sensitivity(self, bound: float) -> float:
        """Frobenius sensitivity ``sqrt(2) G^2 max_degree / |P|`` of the averaged K_hat."""
        return math.sqrt(2.0) * bound * bound * self.max_degree / self.n_pairs

    def paper_sensitivity(self, bound: float) -> float:
        """The paper's looser bound, ``2 G^2`` per changed term: ``4 G^2 / n`` when complete."""
        return 2.0 * bound * bound * self.max_degree / self.n_pairs

    def describe(self) -> dict[str, Any]:
        """Public summary for the privacy report."""
        return {
            "n_blocks": len(self.block_sizes),
            "n_block_pairs": len(self.block_pairs),
            "n_pairs": self.n_pairs,
            "max_degree": self.max_degree,
            "tile_rows": self.tile_rows,
        }


@dataclass(frozen=True)
class CompleteDesign:
    """Every pair ``i < j`` of the n records: the full U-statistic.

    Blocks are the row chunks of the input merged up to the block rule's smallest block
    (:func:`merge_chunks`), or for an input without its own (numpy) the blocks of
    :func:`block_rows` (the result does not depend on them beyond rounding); every block
    pair ``I <= J`` is one task.  ``|P| = n (n - 1) / 2`` and
    every record is in ``n - 1`` pairs, so ``Delta_F = 2 sqrt(2) G^2 / n``.

    Examples
    --------
    >>> import dask_dppca as dd
    >>> plan = dd.CompleteDesign().plan((100, 100), n_features=3)
    >>> plan.n_pairs  # every pair of the 200 records
    19900
    """

    name = "complete"

    def plan(self, block_sizes: tuple[int, ...], n_features: int) -> DesignPlan:
        """Block pairs over the given row blocks of ``n_features`` columns."""
        sizes = tuple(int(s) for s in block_sizes if int(s) > 0)
        n = sum(sizes)
        if n < 2:
            raise ValueError(f"X: needs at least 2 rows for a pair, got n = {n}")
        pairs = tuple((i, j) for i in range(len(sizes)) for j in range(i, len(sizes)))
        return _plan(sizes, pairs, n * (n - 1) // 2, n - 1, n_features)

    def describe(self) -> dict[str, Any]:
        """Public parameters of the design."""
        return {"design": self.name}


@dataclass(frozen=True)
class RegularDesign:
    """Incomplete U-statistic over a data-independent regular graph of blocks.

    The rows are cut into blocks of ``block_size`` (the last one may be shorter).
    Every pair inside a block is kept, and all the pairs between each block and its
    ``k`` partner blocks in a random k-regular graph on the blocks (a circulant
    graph along a random walk of the blocks drawn from the public ``seed``; the block
    pairs are listed in walk order, so partners share their blocks while they are in
    memory).  With equal
    blocks every record sits in ``(block_size - 1) + k block_size`` pairs, so
    ``Delta_F = 2 sqrt(2) G^2 / n`` exactly as for the complete design, for about
    ``n (k + 1) block_size / 2`` pairs instead of ``n^2 / 2`` (docs/method.md, section 8).
    A ragged tail (or, for an odd ``k``, the end of the walk) breaks regularity
    slightly; the sensitivity is then computed from the actual degrees.

    Parameters
    ----------
    k : int
        Partner blocks per block (>= 1).  ``k >= n_blocks - 1`` is the complete design.
    block_size : int
        Rows per block (>= 2).
    seed : int
        Public seed of the block graph (not of any noise).  Reported in ``privacy_``.
    walk_group : int, default 1
        Consecutive blocks that stay together, in order, in the walk: the walk is a random
        order of these groups (the last may be shorter).  ``design="auto"`` sets it to the
        blocks one store chunk holds, so that a chunk's blocks are run by one worker task
        and the chunk is decoded once there.  The degrees, hence the sensitivity, do not
        depend on it.

    Examples
    --------
    >>> import dask_dppca as dd
    >>> design = dd.RegularDesign(k=2, block_size=100)  # a public graph, not a noise seed
    >>> design.block_sizes(1050)
    (100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 50)
    """

    k: int
    block_size: int
    seed: int = 0
    walk_group: int = 1

    name = "regular"

    def __post_init__(self) -> None:
        for field_name, low in (("k", 1), ("block_size", 2)):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{field_name}: must be an integer >= {low}, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed: must be an integer >= 0, got {self.seed!r}")
        group = self.walk_group
        if isinstance(group, bool) or not isinstance(group, int) or group < 1:
            raise ValueError(f"walk_group: must be an integer >= 1, got {group!r}")

    def block_sizes(self, n: int) -> tuple[int, ...]:
        """Rows per block for n records."""
        full, tail = divmod(n, self.block_size)
        return (self.block_size,) * full + ((tail,) if tail else ())

    def walk(self, n_blocks: int) -> NDArray[np.int64]:
        """The blocks in walk order: a random relabelling drawn from the public ``seed``.

        The block graph is a circulant graph along this walk, so a block's partners are
        near it in the walk (within ``k // 2 + 1`` steps, but for the circle's wrap).
        With ``walk_group`` g > 1 the random order is of the groups of g consecutive
        blocks, each group's blocks kept in order.
        """
        if self.walk_group == 1:
            return np.random.default_rng(self.seed).permutation(n_blocks)
        groups = np.random.default_rng(self.seed).permutation(-(-n_blocks // self.walk_group))
        order = (groups[:, None] * self.walk_group + np.arange(self.walk_group)).ravel()
        return order[order < n_blocks]

    def partner_edges(self, n_blocks: int) -> tuple[tuple[int, int], ...]:
        """Edges ``(I, J)``, ``I < J``, of the block graph (data-independent)."""
        if self.k >= n_blocks - 1:
            return tuple((i, j) for i in range(n_blocks) for j in range(i + 1, n_blocks))
        label = self.walk(n_blocks)
        edges = set()
        for offset in range(1, self.k // 2 + 1):
            for i in range(n_blocks):
                edges.add(_edge(label[i], label[(i + offset) % n_blocks]))
        if self.k % 2:
            # Odd k: one more partner each, at the next offset m: runs of m steps along the
            # walk alternately reach forward and are reached (a matching).  Blocks in a last
            # forward run with no one m steps ahead keep k - 1 partners: the degrees, hence
            # the sensitivity, are counted exactly in plan().  Partners stay near in the
            # walk, so a worker's blocks in memory stay bounded (graph.py).
            m = self.k // 2 + 1
            for i in range(n_blocks - m):
                if (i // m) % 2 == 0:
                    edges.add(_edge(label[i], label[i + m]))
        return tuple(sorted(edges))

    def plan(self, row_chunks: tuple[int, ...], n_features: int) -> DesignPlan:
        """Block pairs for the records of ``row_chunks`` (only their total n matters)."""
        n = sum(int(c) for c in row_chunks)
        if n < 2:
            raise ValueError(f"X: needs at least 2 rows for a pair, got n = {n}")
        sizes = self.block_sizes(n)
        edges = self.partner_edges(len(sizes))
        degree = [size - 1 for size in sizes]
        n_pairs = sum(size * (size - 1) // 2 for size in sizes)
        for i, j in edges:
            degree[i] += sizes[j]
            degree[j] += sizes[i]
            n_pairs += sizes[i] * sizes[j]
        # In walk order: each block's own pairs, then its edges to blocks met before it.
        step = np.empty(len(sizes), dtype=int)
        step[self.walk(len(sizes))] = np.arange(len(sizes))
        pairs = sorted(
            [(i, i) for i in range(len(sizes))] + list(edges),
            key=lambda pair: (
                max(step[pair[0]], step[pair[1]]),
                pair[0] != pair[1],
                min(step[pair[0]], step[pair[1]]),
            ),
        )
        plan = _plan(sizes, tuple(pairs), n_pairs, max(degree), n_features)
        return dataclasses.replace(plan, task_sizes=_walk_tasks(plan))

    def describe(self) -> dict[str, Any]:
        """Public parameters of the design."""
        described: dict[str, Any] = {
            "design": self.name,
            "partners_k": self.k,
            "block_size": self.block_size,
            "design_seed": self.seed,
        }
        if self.walk_group > 1:  # only then: reports of ungrouped designs keep their keys
            described["walk_group"] = self.walk_group
        return described


def _plan(
    sizes: tuple[int, ...],
    pairs: tuple[tuple[int, int], ...],
    n_pairs: int,
    max_degree: int,
    n_features: int,
) -> DesignPlan:
    d = int(n_features)
    return DesignPlan(
        sizes,
        pairs,
        n_pairs=n_pairs,
        max_degree=max_degree,
        n_features=d,
        tile_rows=tile_rows_for_budget(DEFAULT_MEMORY_BUDGET, d),
    )


#: Work a graph task of a regular design aims at (flops, 4 d per pair: about 100 ms of a
#: core).  Consecutive block pairs of the walk share blocks, so they are grouped into one
#: task up to it: a Dask task costs about a millisecond of its own (scheduling,
#: messages), which small blocks would otherwise pay per block pair.
TASK_FLOPS = 4e9
#: Most distinct blocks one task reads (what it holds in memory).
MAX_TASK_BLOCKS = 6


def _walk_tasks(plan: DesignPlan) -> tuple[int, ...]:
    """Consecutive block pairs per task: until ``TASK_FLOPS`` of work or ``MAX_TASK_BLOCKS``."""
    sizes, d = plan.block_sizes, plan.n_features
    counts: list[int] = [0]
    blocks: set[int] = set()
    work = 0.0
    for i, j in plan.block_pairs:
        if counts[-1] and (work >= TASK_FLOPS or len(blocks | {i, j}) > MAX_TASK_BLOCKS):
            counts.append(0)
            blocks, work = set(), 0.0
        counts[-1] += 1
        blocks |= {i, j}
        work += 4.0 * d * (sizes[i] * (sizes[i] - 1) / 2 if i == j else sizes[i] * sizes[j])
    return tuple(counts)


def _edge(i: SupportsInt, j: SupportsInt) -> tuple[int, int]:
    i, j = int(i), int(j)
    return (i, j) if i < j else (j, i)


#: Block pairs per worker thread the block rule aims at, so that every thread has work
#: and the last tasks to finish are short.
BLOCK_PAIRS_PER_THREAD = 4
#: Least pair work of a block pair, 2 b^2 d flops (about a millisecond of one core), so
#: that a task's fixed cost stays small next to its work.
MIN_BLOCK_PAIR_FLOPS = 4e7
#: Largest block of the rule: this many rows, and at most MAX_BLOCK_BYTES of float64.
MAX_BLOCK_ROWS = 16384
MAX_BLOCK_BYTES = 32 * 2**20


def block_rows(n_samples: int, n_features: int, n_threads: int) -> int:
    """Rows per block of the complete design when the input imposes no row chunks.

    The public rule on n, d and the compute target's thread count: as many blocks as
    give ``BLOCK_PAIRS_PER_THREAD`` block pairs per thread, as long as each block pair
    keeps ``MIN_BLOCK_PAIR_FLOPS`` of work, and never blocks above ``MAX_BLOCK_ROWS``
    rows or ``MAX_BLOCK_BYTES``; in whole kernel tiles where that keeps the count and
    the last block at least half the others.  One thread has no other thread to balance
    against: it gets one block while the rows fit in the largest block, since every
    further block adds the d x d products of its block pairs and a graph task
    (measured, n = 8000, d = 256, one thread: 3 blocks ran at 0.74 of GEMM, one block
    at 0.86; benchmarks/bench_cores.py).
    """
    n, d = int(n_samples), max(int(n_features), 1)
    tile = tile_rows_for_budget(DEFAULT_MEMORY_BUDGET, d)
    largest = max(tile, min(MAX_BLOCK_ROWS, MAX_BLOCK_BYTES // (8 * d)) // tile * tile)
    smallest = smallest_block_rows(d)
    threads = max(int(n_threads), 1)
    wanted = 1 if threads == 1 else BLOCK_PAIRS_PER_THREAD * threads
    n_blocks = math.ceil((math.sqrt(8.0 * wanted + 1.0) - 1.0) / 2.0)  # B (B + 1) / 2 >= wanted
    n_blocks = max(min(n_blocks, n // smallest), math.ceil(n / largest), 1)
    if n_blocks == 1:
        return max(n, 1)
    rows = math.ceil(n / n_blocks)
    aligned = math.ceil(rows / tile) * tile
    last = n - (n_blocks - 1) * aligned
    return aligned if 2 * last >= aligned else rows


def smallest_block_rows(n_features: int) -> int:
    """The block rule's smallest block: whole kernel tiles, and at least the rows whose
    block pair keeps ``MIN_BLOCK_PAIR_FLOPS`` of work (public: d only).
    """
    d = max(int(n_features), 1)
    tile = tile_rows_for_budget(DEFAULT_MEMORY_BUDGET, d)
    return max(tile, math.ceil(math.sqrt(MIN_BLOCK_PAIR_FLOPS / (2.0 * d))))


def merge_chunks(row_chunks: tuple[int, ...], n_features: int) -> tuple[int, ...]:
    """The complete design's blocks for an input with row chunks of its own.

    Consecutive chunks are merged until a block holds at least
    :func:`smallest_block_rows` rows; a last block below it joins the one before.  A
    chunk is never split, so each is read once, inside the read of its block; chunks at
    least that large stay blocks of their own, as before (the same blocks, hence the
    same bits, on any cluster: the rule uses d and the chunks, never the thread count).
    1-row chunks of an n x d array give the blocks of a one-chunk input, not n blocks
    and ``n (n + 1) / 2`` block-pair tasks.
    """
    least = smallest_block_rows(n_features)
    blocks: list[int] = []
    rows = 0
    for chunk in (int(c) for c in row_chunks):
        if chunk <= 0:
            continue
        rows += chunk
        if rows >= least:
            blocks.append(rows)
            rows = 0
    if rows:
        if blocks:
            blocks[-1] += rows
        else:
            blocks.append(rows)
    return tuple(blocks)


def complete_blocks(n_samples: int, n_features: int, n_threads: int) -> tuple[int, ...]:
    """Row blocks of the complete design for an input without row chunks of its own:
    blocks of :func:`block_rows`, the last one shorter.
    """
    target = block_rows(n_samples, n_features, n_threads)
    full, tail = divmod(int(n_samples), target)
    return (target,) * full + ((tail,) if tail else ())


#: Pair work (flops, 4 d per pair) per worker thread under which "auto" keeps every pair:
#: about a minute of one core at the kernel's measured rate.
AUTO_FLOPS_PER_THREAD = 2e12
#: Block size "auto" uses for a regular design, in rows (clipped to [1024, 16384]).
_AUTO_BLOCK_BYTES = 32 * 2**20


#: Block pairs "auto" lets a regular design have; beyond it, blocks grow.  Set for the
#: scheduler when every block pair was a task; the graph now has a few segment tasks a
#: thread (dask_dppca.graph.segment_bounds), and the limit stays for what it does to the
#: reads and the plan: twice the limit would halve a terabyte's pair work at the same
#: accuracy but double the chunks a 32 MiB-chunked store decodes (docs/scale.md, "The
#: auto rule").
AUTO_MAX_BLOCK_PAIRS = 500_000


def auto_design(
    n_samples: int,
    n_features: int,
    n_threads: int,
    row_chunks: tuple[int, ...] | None = None,
) -> CompleteDesign | RegularDesign:
    """The public rule behind ``design="auto"``: depends on n, d, the cluster and the
    store's row chunks only.

    Keep every pair while the pair work ``2 n^2 d`` flops fits in
    ``AUTO_FLOPS_PER_THREAD`` per worker thread.  Otherwise use a
    :class:`RegularDesign` (seed 0, public like the rule) whose work,
    about ``2 n (k + 1) block d`` flops, fits the same budget: blocks as large as the
    budget allows with one partner, between 1024 rows and ``32 MiB / (8 d)`` rows,
    rounded down to whole kernel tiles, then as many partners ``k >= 1`` as the budget
    still allows.

    While the design's block pairs, about ``n_blocks (1 + k / 2)``, exceed
    :data:`AUTO_MAX_BLOCK_PAIRS`, the blocks double (up to ``32 MiB`` of float64, in whole
    tiles) and ``k`` is recomputed from the budget (at least 1): fewer, larger blocks,
    more work than the budget per thread.  Below that count (n up to about 3 x 10^8 on
    any cluster) the rule is unchanged.

    A store whose row chunks are equal (but the last) then gets blocks that follow its
    chunks (:func:`chunk_aligned_rows`: whole chunks, or a chunk cut into equal blocks
    that stay together in the walk, ``walk_group``), and ``k`` recomputed for them: a
    worker task decodes a chunk once for all its blocks instead of the chunks each block
    straddles.
    """
    budget = AUTO_FLOPS_PER_THREAD * max(int(n_threads), 1)
    d = max(int(n_features), 1)
    if 2.0 * n_samples * n_samples * d <= budget:
        return CompleteDesign()
    tile = tile_rows_for_budget(DEFAULT_MEMORY_BUDGET, d)
    largest = int(min(16384, max(1024, _AUTO_BLOCK_BYTES // (8 * d))))
    block = int(min(largest, max(1024, budget / (4.0 * d * n_samples))))
    block = max(tile, block // tile * tile)  # whole kernel tiles: no ragged tile per block
    k, n_blocks = _auto_partners(n_samples, d, block, budget)
    cap = max(block, _AUTO_BLOCK_BYTES // (8 * d) // tile * tile)
    while n_blocks * (1.0 + k / 2.0) > AUTO_MAX_BLOCK_PAIRS and block < cap:
        block = min(cap, 2 * block)
        k, n_blocks = _auto_partners(n_samples, d, block, budget)
    aligned = chunk_aligned_rows(block, row_chunks, max(_AUTO_BLOCK_BYTES // (8 * d), block))
    if aligned != block:
        block = aligned
        k, n_blocks = _auto_partners(n_samples, d, block, budget)
    chunk = int((row_chunks or (0,))[0])
    group = chunk // block if chunk > block and chunk % block == 0 else 1
    return RegularDesign(k=k, block_size=block, seed=0, walk_group=group)


#: Most blocks the auto rule cuts one store chunk into (they stay together in the walk,
#: so a worker task decodes the chunk once for all of them).
MAX_BLOCKS_PER_CHUNK = 64


def chunk_aligned_rows(block: int, row_chunks: tuple[int, ...] | None, largest: int) -> int:
    """Rows of a regular design's blocks that follow a store's equal row chunks.

    Chunks of ``c`` rows no larger than ``block``: the most whole chunks a block holds.
    Larger chunks: ``c / m`` for the ``m`` (a divisor of ``c``, at most
    ``MAX_BLOCKS_PER_CHUNK``, with ``c / m`` at most ``largest``) that brings it nearest
    ``block`` (by ratio); the design then keeps a chunk's ``m`` blocks together in its
    walk (``walk_group``).  Otherwise (unequal chunks, none given, no such ``m``)
    ``block`` as it is.  Public: the rule's block and the chunks only.
    """
    chunks = [int(c) for c in row_chunks or () if int(c) > 0]
    if len(chunks) < 2 or len(set(chunks[:-1])) != 1 or chunks[-1] > chunks[0]:
        return block
    c = chunks[0]
    if c <= block:
        return c * (block // c)
    fitting = [
        c // m for m in range(1, MAX_BLOCKS_PER_CHUNK + 1) if c % m == 0 and c // m <= largest
    ]
    if not fitting:
        return block
    return min(fitting, key=lambda rows: abs(math.log(rows / block)))


def _auto_partners(n_samples: int, d: int, block: int, budget: float) -> tuple[int, int]:
    """``(k, n_blocks)`` of the auto rule for blocks of ``block`` rows."""
    k = int(budget / (2.0 * n_samples * block * d)) - 1
    n_blocks = -(-n_samples // block)
    return max(1, min(k, n_blocks - 1)), n_blocks


def check_design(design: object) -> str | CompleteDesign | RegularDesign:
    """``design`` if it is a value :func:`resolve_design` takes, else a ValueError."""
    if isinstance(design, (CompleteDesign, RegularDesign)):
        return design
    if isinstance(design, str) and design in ("auto", "complete"):
        return design
    raise ValueError(
        f"design: unknown value {design!r}; expected 'auto', 'complete' or "
        "dask_dppca.RegularDesign(k=..., block_size=..., seed=...)"
    )


def resolve_design(
    design: str | CompleteDesign | RegularDesign,
    n_samples: int = 0,
    n_features: int = 1,
    n_threads: int = 1,
    row_chunks: tuple[int, ...] | None = None,
) -> CompleteDesign | RegularDesign:
    """Turn the estimator's ``design`` parameter into a design object.

    ``"auto"`` applies :func:`auto_design` to the public n, d, thread count and the
    input's row chunks (None for rows in memory).
    """
    design = check_design(design)
    if design == "complete":
        return CompleteDesign()
    if isinstance(design, str):  # "auto", the one other name check_design passes
        return auto_design(n_samples, n_features, n_threads, row_chunks)
    return design


#: A pair design object.
Design = CompleteDesign | RegularDesign


def plan_blocks(
    n_samples: int,
    n_features: int,
    row_chunks: tuple[int, ...] | None,
    design: str | Design,
    n_threads: int,
) -> tuple[Design, DesignPlan]:
    """The design for this input and compute target, and its plan (public inputs only).

    Parameters
    ----------
    n_samples, n_features : int
        The public shape (n, d).
    row_chunks : tuple of int or None
        The input's own row chunks (a dask array, a Zarr store), or None when the rows
        are in memory and free to cut (numpy).
    design : {"auto", "complete"} or Design
        The estimator's ``design`` parameter.
    n_threads : int
        Worker threads of the compute target (the cluster's size is public).

    Returns
    -------
    (Design, DesignPlan)
        The complete design merges the input's row chunks into blocks of at least the
        rule's smallest block (:func:`merge_chunks`: each chunk read once, the same bits
        on any cluster) or, for rows in memory, cuts them by :func:`block_rows`; a
        regular design cuts its own blocks of ``block_size``.  The data are then given
        one chunk per block of ``plan.block_sizes``.

    Raises
    ------
    ValueError
        If the plan would have more graph tasks than :func:`task_limit` allows for n,
        d and the thread count (a regular design with tiny blocks), naming what to change.
    """
    n, d = int(n_samples), int(n_features)
    chosen = resolve_design(design, n, d, n_threads, row_chunks)
    if isinstance(chosen, CompleteDesign):
        chunks = (
            complete_blocks(n, d, n_threads) if row_chunks is None else merge_chunks(row_chunks, d)
        )
    else:
        chunks = (n,)
    plan = chosen.plan(chunks, d)
    check_task_count(chosen, plan, n_threads)
    return chosen, plan


#: Graph tasks any plan may have, whatever its work (a few seconds of scheduling).
MIN_TASK_LIMIT = 4096
#: Graph tasks allowed per worker thread, whatever the work.
TASKS_PER_THREAD = 64
#: Pair work (flops) a task must carry on average beyond those (about 1 ms of a core,
#: the order of a task's own cost in Dask).
MIN_TASK_FLOPS = 4e7


#: Graph tasks one fit should give a Dask scheduler, whatever the work: at the
#: scheduler's cost of about a millisecond a task (docs/scale.md measures it) a quarter
#: of an hour of scheduling, and some GB of scheduler memory.  ``dask-dppca plan``
#: refuses a plan above it.
SCHEDULER_TASK_LIMIT = 1_000_000


def planned_tasks(plan: DesignPlan) -> int:
    """Units of work of a plan: its block-pair groups and its blocks.

    Each costs the kernel a call and a block its read whatever the graph (the graph
    runs them in a few segment tasks a thread, :func:`dask_dppca.graph.lanes.segment_bounds`);
    a plan of very many tiny ones is slow for nothing, which :func:`check_task_count`
    refuses.
    """
    return len(plan.tasks()) + len(plan.block_sizes)


def task_limit(n_samples: int, n_features: int, n_threads: int, n_pairs: int) -> int:
    """Most graph tasks a fit may plan: ``max(MIN_TASK_LIMIT, TASKS_PER_THREAD * threads,
    pair work / MIN_TASK_FLOPS)``, the pair work being ``4 d |P|`` flops (public).
    """
    work = 4.0 * max(int(n_features), 1) * float(n_pairs)
    return int(
        max(MIN_TASK_LIMIT, TASKS_PER_THREAD * max(int(n_threads), 1), work / MIN_TASK_FLOPS)
    )


def check_task_count(design: Design, plan: DesignPlan, n_threads: int) -> None:
    """Refuse a plan whose task count exceeds :func:`task_limit`, saying what to change.

    Dask spends about a millisecond and some kilobytes of scheduler memory per task: a
    plan of many tasks of little work (600 one-row blocks gave 180300 tasks and a 1.2 GB
    scheduler) is slow for nothing.  The complete design's blocks never come near the
    limit; a regular design with tiny blocks can.
    """
    tasks = planned_tasks(plan)
    limit = task_limit(plan.n_samples, plan.n_features, n_threads, plan.n_pairs)
    if tasks <= limit:
        return
    advice = (
        f"use a larger block_size (RegularDesign(k={design.k}, block_size=...)) or fewer partners k"
        if isinstance(design, RegularDesign)
        else "use design='auto' or a RegularDesign with larger blocks"
    )
    raise ValueError(
        f"design: the plan has {tasks} graph tasks ({len(plan.block_sizes)} blocks), above "
        f"the limit of {limit} for n = {plan.n_samples}, d = {plan.n_features} and "
        f"{n_threads} threads (each task must carry about {MIN_TASK_FLOPS:.0e} flops of "
        f"pair work beyond {MIN_TASK_LIMIT} tasks); {advice}"
    )
