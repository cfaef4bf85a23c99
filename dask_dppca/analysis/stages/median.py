"""The median stage: a private coordinate-wise median of the records (the published centre).

One pass over the records counts, per column, the rows at or below every public
candidate; one release on the trusted worker draws the ``d`` medians
(:class:`~dask_dppca.privacy.mechanisms.median.CoordinateMedian`, its sensitivity in
docs/privacy.md).  Off by default: ``analyze(..., stages=["median"])`` or
``dask-dppca analyze --median``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...compute.trusted.release import release_statistic
from ...graph.score_stats import quantile_counts_graph
from ...privacy.mechanisms.accounting import BudgetSplit, PlannedPart
from ...privacy.mechanisms.contract import make_sampler
from ...privacy.mechanisms.median import CoordinateMedian
from ...privacy.mechanisms.parts import PureDPPart
from ..stage import (
    PlanSetting,
    StageBase,
    StageContext,
    StageOutput,
    StagePlan,
    claim_stage_parts,
    counts_plan,
    release_row,
)

__all__ = ["MedianStage", "median_mechanism"]

_STAGE = "median"
_RELEASE = "coordinate medians"


def median_mechanism(split: BudgetSplit, n_samples: int, n_features: int) -> CoordinateMedian:
    """The stage's mechanism at the split's per-column epsilon (public inputs only)."""
    part = split.part(_STAGE, _RELEASE)
    assert isinstance(part, PureDPPart)
    return CoordinateMedian(n_samples, n_features, part.epsilon)


@dataclass
class MedianStage(StageBase):
    """The private median of every feature, as one analysis stage.

    Parameters
    ----------
    random_state : int, optional
        NOT PRIVATE: seeds the noise, for tests and examples only; the analysis binds its
        own ``random_state`` here.

    Examples
    --------
    >>> import dask_dppca as dd
    >>> [part.count for part in dd.MedianStage().planned_parts(2, 3)]  # one per feature
    [3]
    """

    random_state: int | None = None
    name: str = _STAGE

    def planned_parts(self, n_components: int, n_features: int) -> list[PlannedPart]:
        """One pure-DP part per feature."""
        return [PlannedPart(_STAGE, _RELEASE, "pure", count=n_features)]

    def accuracy(self, split: BudgetSplit, n_samples: int, n_features: int) -> dict[str, Any]:
        """Its public accuracy: the medians' rank bound, and whether it is useless."""
        column = median_mechanism(split, n_samples, n_features).column
        return {
            "rank_error_95": {"q50": column.rank_error()},
            "useless": ["q50"] if column.is_useless() else [],
        }

    def plan(self, setting: PlanSetting) -> StagePlan:
        """One counting pass over the rows, then ``d`` quantile scans on the trusted worker."""
        n, d = setting.design.n_samples, setting.design.n_features
        return counts_plan(self.title, setting, median_mechanism(setting.split, n, d))

    def run(self, context: StageContext) -> StageOutput:
        """Count every column below every candidate (one pass); release the medians."""
        mechanism = median_mechanism(context.split, context.n_samples, context.n_features)
        seed = self.random_state
        sampler = make_sampler("discrete_laplace", seed)

        def release(exact_counts: Any) -> list[float]:
            return [float(v) for v in mechanism.release(exact_counts, sampler)]

        with claim_stage_parts(context, _STAGE):
            values, where = release_statistic(
                context.target,
                release,
                quantile_counts_graph(context.pass_blocks(), mechanism.candidates),
                f"{context.stage_id}-medians",
                charge=mechanism,
                stage_id=context.stage_id,
            )
        row = release_row(_STAGE, _RELEASE, mechanism.describe(), where)
        return StageOutput({"values": list(values), "private": seed is None}, [row])

    @staticmethod
    def summary(value: Any, feature_names: Any = None) -> str:
        """One line per feature: its private median (post-processing, free)."""
        values = list(value.get("values", []))
        names = list(feature_names) if feature_names else [f"x{j}" for j in range(len(values))]
        return "\n".join(f"{name}: {v:.6g}" for name, v in zip(names, values))
