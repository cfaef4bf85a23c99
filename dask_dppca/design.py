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

__all__ = ["CompleteDesign", "DesignPlan", "resolve_design"]


@dataclass(frozen=True)
class DesignPlan:
    """A concrete set of block pairs over given row blocks.

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
    """

    block_sizes: tuple[int, ...]
    block_pairs: tuple[tuple[int, int], ...]
    n_pairs: int
    max_degree: int

    @property
    def n_samples(self) -> int:
        """Total number of records n."""
        return sum(self.block_sizes)

    def sensitivity(self, bound: float) -> float:
        """Frobenius sensitivity ``sqrt(2) G^2 max_degree / |P|`` of the averaged K_hat."""
        return math.sqrt(2.0) * bound * bound * self.max_degree / self.n_pairs

    def describe(self) -> dict:
        """Public summary for the privacy report."""
        return {
            "n_blocks": len(self.block_sizes),
            "n_block_pairs": len(self.block_pairs),
            "n_pairs": self.n_pairs,
            "max_degree": self.max_degree,
        }


@dataclass(frozen=True)
class CompleteDesign:
    """Every pair ``i < j`` of the n records: the full U-statistic.

    Blocks are the row chunks of the input (the result does not depend on them beyond
    rounding); every block pair ``I <= J`` is one task.  ``|P| = n (n - 1) / 2`` and
    every record is in ``n - 1`` pairs, so ``Delta_F = 2 sqrt(2) G^2 / n``.
    """

    name = "complete"

    def plan(self, block_sizes: tuple[int, ...]) -> DesignPlan:
        """Block pairs over the given row blocks."""
        sizes = tuple(int(s) for s in block_sizes if int(s) > 0)
        n = sum(sizes)
        if n < 2:
            raise ValueError(f"X: needs at least 2 rows for a pair, got n = {n}")
        pairs = tuple((i, j) for i in range(len(sizes)) for j in range(i, len(sizes)))
        return DesignPlan(sizes, pairs, n_pairs=n * (n - 1) // 2, max_degree=n - 1)

    def describe(self) -> dict:
        """Public parameters of the design."""
        return {"design": self.name}


def resolve_design(design: str | CompleteDesign) -> CompleteDesign:
    """Turn the estimator's ``design`` parameter into a design object.

    ``"auto"`` currently always chooses the complete design.
    """
    if isinstance(design, CompleteDesign):
        return design
    if design in ("auto", "complete"):
        return CompleteDesign()
    raise ValueError(f"design: unknown value {design!r}; expected 'auto' or 'complete'")
