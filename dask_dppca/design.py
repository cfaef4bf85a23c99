"""Pair designs: which pairs the U-statistic averages, and the sensitivity that follows.

A design turns the row blocks of the input into a list of block pairs ``(I, J)`` with
``I <= J`` (``I == J``: the pairs ``i < j`` inside block I; ``I < J``: all of
``I x J``), and reports the two numbers the privacy layer needs (method.md section 4):
the number of pairs ``|P|`` and the largest number of pairs any one record sits in,
``max_degree``.  Both depend on the public n and the block layout only, never on the
data.  Then

    Delta_F = sqrt(2) * G^2 * max_degree / |P|.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .kernel import DEFAULT_MEMORY_BUDGET, rounding_error_bound, tile_rows_for_budget

__all__ = ["CompleteDesign", "RegularDesign", "DesignPlan", "auto_design", "check_design",
           "resolve_design"]


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
    """

    block_sizes: tuple[int, ...]
    block_pairs: tuple[tuple[int, int], ...]
    n_pairs: int
    max_degree: int
    n_features: int
    tile_rows: int

    @property
    def n_samples(self) -> int:
        """n, the number of records."""
        return sum(self.block_sizes)

    def rounding_error(self) -> float:
        """Worst-case ``||K_hat_computed - K_hat_exact||_F / G^2`` for these blocks and tiles."""
        return rounding_error_bound(self.n_features, max(self.block_sizes),
                                    len(self.block_pairs), self.tile_rows)

    def sensitivity(self, bound: float) -> float:
        """Frobenius sensitivity ``sqrt(2) G^2 max_degree / |P|`` of the averaged K_hat."""
        return math.sqrt(2.0) * bound * bound * self.max_degree / self.n_pairs

    def paper_sensitivity(self, bound: float) -> float:
        """The paper's looser bound, ``2 G^2`` per changed term: ``4 G^2 / n`` when complete."""
        return 2.0 * bound * bound * self.max_degree / self.n_pairs

    def describe(self) -> dict:
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

    Blocks are the row chunks of the input (the result does not depend on them beyond
    rounding); every block pair ``I <= J`` is one task.  ``|P| = n (n - 1) / 2`` and
    every record is in ``n - 1`` pairs, so ``Delta_F = 2 sqrt(2) G^2 / n``.
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

    def describe(self) -> dict:
        """Public parameters of the design."""
        return {"design": self.name}


@dataclass(frozen=True)
class RegularDesign:
    """Incomplete U-statistic over a data-independent regular graph of blocks.

    The rows are cut into blocks of ``block_size`` (the last one may be shorter).
    Every pair inside a block is kept, and all the pairs between each block and its
    ``k`` partner blocks in a random k-regular graph on the blocks (a circulant
    graph under a random relabelling drawn from the public ``seed``).  With equal
    blocks every record sits in ``(block_size - 1) + k block_size`` pairs, so
    ``Delta_F = 2 sqrt(2) G^2 / n`` exactly as for the complete design, for about
    ``n (k + 1) block_size / 2`` pairs instead of ``n^2 / 2`` (method.md section 8).
    A ragged tail (or an odd ``k`` with an odd number of blocks) breaks regularity
    slightly; the sensitivity is then computed from the actual degrees.

    Parameters
    ----------
    k : int
        Partner blocks per block (>= 1).  ``k >= n_blocks - 1`` is the complete design.
    block_size : int
        Rows per block (>= 2).
    seed : int
        Public seed of the block graph (not of any noise).  Reported in ``privacy_``.
    """

    k: int
    block_size: int
    seed: int = 0

    name = "regular"

    def __post_init__(self) -> None:
        for field_name, low in (("k", 1), ("block_size", 2)):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{field_name}: must be an integer >= {low}, got {value!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed: must be an integer >= 0, got {self.seed!r}")

    def block_sizes(self, n: int) -> tuple[int, ...]:
        """Rows per block for n records."""
        full, tail = divmod(n, self.block_size)
        return (self.block_size,) * full + ((tail,) if tail else ())

    def partner_edges(self, n_blocks: int) -> tuple[tuple[int, int], ...]:
        """Edges ``(I, J)``, ``I < J``, of the block graph (data-independent)."""
        if self.k >= n_blocks - 1:
            return tuple((i, j) for i in range(n_blocks) for j in range(i + 1, n_blocks))
        import numpy as np

        label = np.random.default_rng(self.seed).permutation(n_blocks)
        edges = set()
        for offset in range(1, self.k // 2 + 1):
            for i in range(n_blocks):
                edges.add(_edge(label[i], label[(i + offset) % n_blocks]))
        if self.k % 2:
            # Odd k: add the "diameter" matching; with an odd block count one block is left out.
            half = n_blocks // 2
            for i in range(half):
                edges.add(_edge(label[i], label[i + half]))
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
        pairs = tuple(sorted([(i, i) for i in range(len(sizes))] + list(edges)))
        return _plan(sizes, pairs, n_pairs, max(degree), n_features)

    def describe(self) -> dict:
        """Public parameters of the design."""
        return {"design": self.name, "partners_k": self.k, "block_size": self.block_size,
                "design_seed": self.seed}


def _plan(sizes, pairs, n_pairs, max_degree, n_features) -> DesignPlan:
    d = int(n_features)
    return DesignPlan(sizes, pairs, n_pairs=n_pairs, max_degree=max_degree, n_features=d,
                      tile_rows=tile_rows_for_budget(DEFAULT_MEMORY_BUDGET, d))


def _edge(i, j) -> tuple[int, int]:
    i, j = int(i), int(j)
    return (i, j) if i < j else (j, i)


#: Pair work (flops, 4 d per pair) per worker thread under which "auto" keeps every pair:
#: about a minute of one core at the kernel's measured rate.
AUTO_FLOPS_PER_THREAD = 2e12
#: Block size "auto" uses for a regular design, in rows (clipped to [1024, 16384]).
_AUTO_BLOCK_BYTES = 32 * 2**20


def auto_design(n_samples: int, n_features: int, n_threads: int) -> CompleteDesign | RegularDesign:
    """The public rule behind ``design="auto"``: depends on n, d and the cluster only.

    Keep every pair while the pair work ``2 n^2 d`` flops fits in
    ``AUTO_FLOPS_PER_THREAD`` per worker thread.  Otherwise use a
    :class:`RegularDesign` (seed 0, public like the rule) whose work,
    about ``2 n (k + 1) block d`` flops, fits the same budget: blocks as large as the
    budget allows with one partner, between 1024 rows and ``32 MiB / (8 d)`` rows,
    then as many partners ``k >= 1`` as the budget still allows.
    """
    budget = AUTO_FLOPS_PER_THREAD * max(int(n_threads), 1)
    d = max(int(n_features), 1)
    if 2.0 * n_samples * n_samples * d <= budget:
        return CompleteDesign()
    largest = int(min(16384, max(1024, _AUTO_BLOCK_BYTES // (8 * d))))
    block = int(min(largest, max(1024, budget / (4.0 * d * n_samples))))
    k = int(budget / (2.0 * n_samples * block * d)) - 1
    n_blocks = -(-n_samples // block)
    return RegularDesign(k=max(1, min(k, n_blocks - 1)), block_size=block, seed=0)


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
) -> CompleteDesign | RegularDesign:
    """Turn the estimator's ``design`` parameter into a design object.

    ``"auto"`` applies :func:`auto_design` to the public n, d and thread count.
    """
    design = check_design(design)
    if design == "complete":
        return CompleteDesign()
    if design == "auto":
        return auto_design(n_samples, n_features, n_threads)
    return design
