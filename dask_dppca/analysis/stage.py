"""The stage contract: what one stage of a private analysis declares and how it runs.

A stage (:class:`Stage`) is one release of an analysis: the directions, the scree, the
score map, the coordinate-wise median, or one of your own.  Before anything is read it
declares its name, its default share of the total and its planned parts for a given k
and d (public parameters only: :meth:`Stage.planned_parts`); the analysis splits the
total over every stage's parts, reserves them all in one transaction, and then runs each
stage in turn from a typed :class:`StageContext` to a :class:`StageOutput` (its released
value and its rows of the privacy table).  Everything that lists stages (the analysis,
its plan, the CLI's flags and ``--split`` help, the report, the app) iterates the
registry of :mod:`dask_dppca.analysis.stages` instead of naming them.

docs/CONTRIBUTING.md's "Adding a private statistic" walks through adding one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..compute.target import ComputeTarget
from ..privacy.budget.charging import reserve_release
from ..privacy.mechanisms.accounting import BudgetSplit, PlannedPart
from ..privacy.mechanisms.charges import PartsCharge

__all__ = [
    "Stage",
    "StageContext",
    "StageOutput",
    "claim_stage_parts",
    "release_row",
    "stage_accuracy",
]


@dataclass(frozen=True)
class StageContext:
    """What a stage reads and where it releases: public values and lazy data only.

    Parameters
    ----------
    records : Records
        The input (:class:`~dask_dppca.io.records.Records`): the directions' fit reads it.
    blocks : dask.array.Array, shape (n, d)
        The rows in the directions' blocks (one chunk per block of ``block_sizes``).
    pass_blocks : callable
        The rows for one pass in a few tasks a thread (rows in memory: ``blocks``).
    block_sizes, block_pairs : tuple
        The directions' public plan (the scree's U-statistic follows its design).
    directions : ndarray, shape (k, d), optional
        The released directions (None while the directions stage runs).
    split : BudgetSplit
        The analysis's split of the total: each stage reads its own parts from it.
    target : ComputeTarget
        The compute target every stage shares; its release options (trusted worker,
        progress) are bound to it.
    analysis_id, stage_id : str
        The analysis and the ledger's id of this stage's reservation.
    dataset : str
        The input's public name (for the ledger).
    n_samples, n_features : int
        Public.
    random_state : int, optional
        NOT PRIVATE: seeds the stage's noise, for tests and examples only.
    """

    records: Any
    blocks: Any
    pass_blocks: Callable[[], Any]
    block_sizes: tuple[int, ...]
    block_pairs: Any
    directions: np.ndarray | None
    split: BudgetSplit
    target: ComputeTarget
    analysis_id: str
    stage_id: str
    dataset: str
    n_samples: int
    n_features: int
    random_state: int | None = None

    @property
    def released_directions(self) -> np.ndarray:
        """The released directions (a stage after the directions reads them)."""
        if self.directions is None:
            raise RuntimeError("the directions are not released yet")
        return self.directions


@dataclass
class StageOutput:
    """A stage's release: its value (released or public only) and its privacy-table rows.

    ``rereads``, when a stage changes what the later stages read (the scale stage), maps
    the records to the records they read instead (a function of released values only,
    applied inside every later block read: :meth:`~dask_dppca.io.records.Records.scaled`).
    """

    value: Any
    rows: list[dict[str, Any]]
    rereads: Callable[[Any], Any] | None = None


@runtime_checkable
class Stage(Protocol):
    """One stage of a private analysis.

    Its title, default share and help live in the registry
    (:data:`dask_dppca.analysis.stages.REGISTRY`), so that listing the stages imports none.

    Attributes
    ----------
    name : str
        The key of its parts in the split, the ledger and ``--split`` (``"scree"``); a
        registered stage's name is its registry entry's.
    """

    name: str

    def planned_parts(self, n_components: int, n_features: int) -> list[PlannedPart]:
        """Its parts before the split scales them, from public parameters only."""
        ...

    def run(self, context: StageContext) -> StageOutput:
        """Claim its reservation, release, and return what it released."""
        ...


def stage_accuracy(stage: Any, split: BudgetSplit, n_samples: int, n_features: int) -> Any:
    """A stage's public accuracy statement (its ``accuracy(split, n, d)``), or None.

    A stage whose release can be useless at a small ``n epsilon`` (a private quantile
    whose rank bound reaches its scan's start) says so here, from public values only,
    before anything is reserved: ``{"rank_error_95": ..., "useless": [...]}``.
    """
    accuracy = getattr(stage, "accuracy", None)
    return None if accuracy is None else accuracy(split, n_samples, n_features)


@contextmanager
def claim_stage_parts(context: StageContext, stage: str) -> Iterator[None]:
    """Claim the analysis's reservation of ``stage``'s parts for this stage's releases.

    The analysis reserved every stage's parts together before reading; the stage claims
    its own (charged when the block ends, kept charged if it fails: conservative).
    """
    with reserve_release(
        PartsCharge(context.split.stage_parts(stage)),
        fit_id=context.stage_id,
        dataset=context.dataset,
    ):
        yield


def release_row(stage: str, release: str, described: dict[str, Any], where: str) -> dict[str, Any]:
    """One row of the privacy table from a mechanism's ``describe()`` and where it was drawn."""
    row = {"stage": stage, "release": release, **described, "released_on": where}
    if "sigma" in row:
        row["noise"] = row.pop("sigma")
    elif "scale" in row:
        row["noise"] = row.pop("scale")
    return row
