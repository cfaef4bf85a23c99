"""The directions stage: a DPPCA fit at the directions' share.

The fit is a :class:`~dask_dppca.decomposition.estimator.DPPCA`; its part is the noisy
Kendall matrix's Gaussian release.  The fit's (epsilon, delta) is the largest whose mu
stays within the split's, and the fit claims the analysis's reservation itself (its
exact release mechanism, planned before anything is read).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...decomposition.estimator import DPPCA
from ...kernel import SpatialSign, resolve_spatial_sign
from ...privacy.mechanisms.accounting import BudgetSplit, PlannedPart
from ...privacy.mechanisms.calibration import gaussian_dp_epsilon, gaussian_dp_mu
from ...privacy.mechanisms.mechanism import ReleaseMechanism
from ...privacy.notices import directions_note
from ..features import input_feature_names
from ..stage import PlanSetting, StageBase, StageContext, StageOutput, StagePlan, StageSetup

__all__ = [
    "DirectionsStage",
    "check_spatial_sign",
    "directions_row",
    "directions_target",
]

_STAGE = "directions"


def check_spatial_sign(spatial_sign: Any, radius: Any) -> SpatialSign:
    """The directions' spatial sign, checked before anything is read (as the fit does)."""
    sign = resolve_spatial_sign(spatial_sign, radius)
    if not sign.is_bounded:
        raise ValueError(f"spatial_sign: {sign.name!r} is unbounded and has no finite sensitivity")
    return sign


def directions_target(mu: float, delta: float) -> tuple[float, float]:
    """(epsilon, delta) for the directions' fit such that its mu stays <= ``mu``."""
    eps = gaussian_dp_epsilon(mu, delta)
    while gaussian_dp_mu(eps, delta) > mu:
        eps *= 1.0 - 1e-9
    return eps, delta


def directions_row(report: Mapping[str, Any]) -> dict[str, Any]:
    """The privacy table's row of the directions' release."""
    return {
        "stage": _STAGE,
        "release": "directions (noisy Kendall matrix)",
        "mechanism": "Gaussian (vecd)",
        "guarantee": "mu-GDP",
        "mu": report["sensitivity"] / report["sigma"],
        "epsilon": report["epsilon"],
        "delta": report["delta"],
        "sensitivity": report["sensitivity"],
        "noise": report["sigma"],
        "released_on": report["released_on"],
        "count": 1,
    }


@dataclass
class DirectionsStage(StageBase):
    """The private directions: a DPPCA fit whose mu is the split's (every analysis has it).

    Parameters
    ----------
    spatial_sign : {"sphere", "winsor"}, default "sphere"
        The directions' spatial sign (:class:`~dask_dppca.decomposition.estimator.DPPCA`):
        "sphere" estimates the spatial Kendall matrix's eigenvectors (the covariance's for
        elliptical data); "winsor" with a PUBLIC ``radius`` in the data's units (of
        ``(x_i - x_j) / sqrt 2``) counts pairs closer than it with their full difference:
        covariance-like directions on bounded data (docs/method.md).
    radius : float, optional
        The winsorizing radius (``spatial_sign="winsor"``).  Never tune it on the data.
    design : "auto", str or Design, default "auto"
        As for :class:`~dask_dppca.decomposition.estimator.DPPCA`: the pair design every
        stage's passes follow.
    fit_parameters : dict
        ``DPPCA``'s further parameters (placement, ``random_state``, progress), bound by
        the analysis (:meth:`bound`); ``scheduler`` is the analysis's.

    Examples
    --------
    >>> from dask_dppca.analysis.stages.directions import DirectionsStage
    >>> DirectionsStage(spatial_sign="winsor", radius=1.0).sign.name
    'winsor'
    """

    spatial_sign: str = "sphere"
    radius: float | None = None
    design: Any = "auto"
    fit_parameters: dict[str, Any] = field(default_factory=dict)
    name: str = _STAGE
    estimator: DPPCA | None = None
    #: Runs after the scale (it reads the scaled records), before the stages that read it.
    after = ("scale",)

    @property
    def sign(self) -> SpatialSign:
        """The spatial sign, checked (as the fit checks it)."""
        return check_spatial_sign(self.spatial_sign, self.radius)

    def bound(self, setup: StageSetup) -> DirectionsStage:
        """A fresh copy with the analysis's seed and compute options (the fit's placement)."""
        check_spatial_sign(self.spatial_sign, self.radius)  # refused before any plan
        compute = setup.compute
        placement = {} if compute is None else compute.fit_options()
        parameters = {**placement, "random_state": setup.random_state, **self.fit_parameters}
        return dataclasses.replace(self, fit_parameters=parameters, estimator=None)

    def meta(self) -> dict[str, Any]:
        """The spatial sign (and radius) and what the directions estimate."""
        sign = self.sign
        return {
            "spatial_sign": sign.name,
            "radius": sign.radius,
            "directions_estimate": directions_note(sign.name, sign.radius),
        }

    def planned_parts(self, n_components: int, n_features: int) -> list[PlannedPart]:
        """One Gaussian part: the noisy Kendall matrix."""
        return [PlannedPart(_STAGE, "directions", "gaussian")]

    def _estimator(self, n_components: int, split: BudgetSplit, scheduler: Any) -> DPPCA:
        """The fit at the split's mu (the largest (epsilon, delta) within it)."""
        part = split.part(_STAGE, "directions")
        assert hasattr(part, "mu")
        epsilon, delta = directions_target(part.mu, split.delta / 2.0)
        return DPPCA(
            n_components=n_components,
            epsilon=epsilon,
            delta=delta,
            scheduler=scheduler,
            spatial_sign=self.spatial_sign,
            radius=self.radius,
            design=self.design,
            **self.fit_parameters,
        )

    def planned_release(
        self, n_components: int, split: BudgetSplit, scheduler: Any, records: Any, n_threads: int
    ) -> tuple[Any, ReleaseMechanism]:
        """Build the fit at the split's mu; its block plan and exact release (nothing read).

        The release is what the analysis reserves for this stage, with the others; the
        block plan is the design every stage's passes follow.
        """
        self.estimator = self._estimator(n_components, split, scheduler)
        n, d = records.shape
        _, plan, release = self.estimator.planned_release(n, d, records.row_chunks, n_threads)
        return plan, release

    def planned_fit(
        self, X: Any, n_components: int, split: BudgetSplit, records: Any, **options: Any
    ) -> tuple[Any, Any]:
        """The fit's plan at the split's mu (``DPPCA.plan``, nothing read) and the
        design plan it was made from (the same ``plan_blocks`` call): what every stage's
        plan follows.  ``options``: ``DPPCA.plan``'s (``scheduler`` the analysis's).
        """
        from ...design import plan_blocks

        estimator = self._estimator(n_components, split, options.pop("scheduler", None))
        fit = estimator.plan(X, check=False, **options)
        n, d = fit.input["shape"]
        _, design = plan_blocks(n, d, records.row_chunks, self.design, fit.cluster.n_threads)
        return fit, design

    def plan(self, setting: PlanSetting) -> StagePlan:
        """The fit's one pass over the record pairs (its plan's figures)."""
        fit = setting.fit
        return StagePlan(
            _STAGE,
            1,
            fit.n_tasks,
            int(fit.graph["segment_tasks"]),
            fit.wall_seconds,
            fit.peak_worker_bytes,
            f"{fit.design['n_pairs']:.4g} record pairs over {fit.design['n_blocks']} blocks",
        )

    def run(self, context: StageContext) -> StageOutput:
        """Fit: the estimator claims its reservation and releases the directions."""
        assert self.estimator is not None, "planned_release comes first"
        self.estimator.fit(context.records)
        named = context.records.feature_names
        names = (
            list(named)
            if named is not None
            else input_feature_names(context.source, self.estimator)
        )
        return StageOutput(
            self.estimator,
            [directions_row(self.estimator.privacy_)],
            directions=np.asarray(self.estimator.components_, dtype=np.float64),
            meta={"feature_names": names},
        )
