"""The scale stage: private robust scaling, first in the analysis under its one budget.

One pass over the records counts, per column, the rows at or below every public
candidate; one release on the trusted worker draws the column's quantiles
(:class:`~dask_dppca.privacy.mechanisms.scale.RobustScale`, its sensitivity in docs/privacy.md), and
the public rule turns them into a centre and a scale per column
(:func:`~dask_dppca.privacy.mechanisms.scale.robust_scaling`, post-processing).  Every later stage
then reads ``(x - centre) / scale`` inside its own block reads
(:meth:`~dask_dppca.io.records.Records.scaled`): the directions are unit vectors in the
scaled coordinates.  ``analyze(..., scale="robust")`` or ``dask-dppca analyze --scale
robust``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...compute.trusted.release import release_statistic
from ...graph.score_stats import quantile_counts_graph
from ...privacy.mechanisms.accounting import BudgetSplit, PlannedPart
from ...privacy.mechanisms.contract import make_sampler
from ...privacy.mechanisms.parts import PureDPPart
from ...privacy.mechanisms.scale import LEVELS, RobustScale, robust_scaling
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

__all__ = ["ScaleStage", "scale_mechanism"]

_STAGE = "scale"
_RELEASE = "scale quantiles"


def scale_mechanism(split: BudgetSplit, n_samples: int, n_features: int) -> RobustScale:
    """The stage's mechanism at the split's per-quantile epsilon (public inputs only)."""
    part = split.part(_STAGE, _RELEASE)
    assert isinstance(part, PureDPPart)
    return RobustScale(n_samples, n_features, part.epsilon)


@dataclass
class ScaleStage(StageBase):
    """Private robust scaling of every feature, as the analysis's first stage.

    Parameters
    ----------
    random_state : int, optional
        NOT PRIVATE: seeds the noise, for tests and examples only; the analysis binds its
        own ``random_state`` here.

    Examples
    --------
    >>> import dask_dppca as dd
    >>> dd.ScaleStage().after  # the first stage: every other one reads the scaled records
    ()
    """

    random_state: int | None = None
    name: str = _STAGE
    #: The first stage: every later one reads the scaled records (``rereads``).
    after = ()

    def meta(self) -> dict[str, Any]:
        """The analysis's scaling."""
        return {"scaling": "robust"}

    def planned_parts(self, n_components: int, n_features: int) -> list[PlannedPart]:
        """One pure-DP part per quantile of every feature."""
        return [PlannedPart(_STAGE, _RELEASE, "pure", count=len(LEVELS) * n_features)]

    def accuracy(self, split: BudgetSplit, n_samples: int, n_features: int) -> dict[str, Any]:
        """Its public accuracy: each level's rank bound and the levels it cannot locate."""
        mechanism = scale_mechanism(split, n_samples, n_features)
        resolved = [
            f"q{round(q * 100)}" for q, ok in zip(LEVELS, mechanism.resolved_levels()) if ok
        ]
        return {
            "rank_error_95": mechanism.rank_errors(),
            "useless": mechanism.useless_levels(),
            "resolved": resolved,
        }

    def plan(self, setting: PlanSetting) -> StagePlan:
        """One counting pass over the rows, then ``7 d`` quantile scans on the trusted worker."""
        mechanism = scale_mechanism(
            setting.split, setting.design.n_samples, setting.design.n_features
        )
        return counts_plan(self.title, setting, mechanism)

    def run(self, context: StageContext) -> StageOutput:
        """Count every column below every candidate (one pass); release and scale."""
        mechanism = scale_mechanism(context.split, context.n_samples, context.n_features)
        seed = self.random_state
        sampler = make_sampler("discrete_laplace", seed)

        def release(exact_counts: Any) -> Any:
            return mechanism.release(exact_counts, sampler)

        with claim_stage_parts(context, _STAGE):
            quantiles, where = release_statistic(
                context.target,
                release,
                quantile_counts_graph(context.pass_blocks(), mechanism.candidates),
                f"{context.stage_id}-scale",
                charge=mechanism,
                stage_id=context.stage_id,
            )
        scaling = robust_scaling(quantiles, mechanism.resolved_levels())
        row = release_row(_STAGE, _RELEASE, mechanism.describe(), where)
        value = {**scaling.to_dict(), "private": seed is None}
        return StageOutput(
            value, [row], rereads=lambda records: records.scaled(scaling.centre, scaling.scale)
        )

    @staticmethod
    def summary(value: Any, feature_names: Any = None) -> str:
        """One line per feature: its released centre, scale and rule (post-processing)."""
        centre, scale = list(value.get("centre", [])), list(value.get("scale", []))
        rules = list(value.get("rule", [""] * len(centre)))
        names = list(feature_names) if feature_names else [f"x{j}" for j in range(len(centre))]
        return "\n".join(
            f"{name}: centre {c:.6g}, scale {s:.6g} ({rule})"
            for name, c, s, rule in zip(names, centre, scale, rules)
        )
