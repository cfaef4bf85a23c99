"""The score-map stage of a private analysis: planned from public parameters, one budget.

:class:`PrivateScoreMapStage` is the analysis' default
:class:`~dask_dppca.analysis.stage.Stage`.  Before anything is read it states its parts
(:meth:`~PrivateScoreMapStage.planned_parts`), from public parameters only (the bins,
the methods, whether there are groups); the analysis splits its ONE total over these
and every other part
(:func:`~dask_dppca.privacy.mechanisms.accounting.split_budget`).  After the
directions are released, :meth:`~PrivateScoreMapStage.run` builds the mechanism with
exactly the split's parameters
(:meth:`~dask_dppca.privacy.mechanisms.score_map.ScoreMapMechanism.of_parts`),
charges its parts to every active budget and releases the map on the trusted worker
(:func:`~dask_dppca.compute.trusted.score_map.release_score_map`).

The public rule inside the stage (weights of the squared strengths, as
:func:`~dask_dppca.privacy.mechanisms.accounting.split_budget` uses them): the frame's four
quantiles 1 (a quarter each), the histograms 3 (shared equally by the methods); with
groups, the noisy group sizes take
:data:`~dask_dppca.privacy.mechanisms.score_map.GROUP_COUNTS_SHARE`
of the additive histogram's weight.  A sparse histogram's delta is
:data:`SPARSE_DELTA_SHARE` of the total delta.

Groups (:func:`resolve_groups`): a label array, Series, xarray coordinate or Zarr array,
or the NAME of a DataFrame column, Dataset variable or array in the same Zarr group;
the label domain is PUBLIC and given by the user, labels outside it (missing ones too)
count in the group ``"other"``; group sizes are released only as noisy counts.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from typing import Any

from ...compute.trusted.score_map import release_score_map
from ...graph.score_stats import project_scores
from ...privacy.budget.charging import reserve_release
from ...privacy.mechanisms.accounting import BudgetSplit, PlannedPart
from ...privacy.mechanisms.contract import make_sampler
from ...privacy.mechanisms.frame import FrameMechanism
from ...privacy.mechanisms.histogram import GroupCounts
from ...privacy.mechanisms.parts import ApproxDPPart, GaussianPart, PureDPPart
from ...privacy.mechanisms.score_map import (
    GROUP_COUNTS_SHARE,
    OTHER_GROUP,
    ScoreMap,
    ScoreMapMechanism,
)
from ...privacy.notices import NOISE_MULTIPLE
from ..stage import (
    PlanSetting,
    StageBase,
    StageContext,
    StageOutput,
    StagePlan,
    StageSetup,
    row_pass_plan,
    row_runs,
)

__all__ = [
    "AUTO_BINS_NOISE_TV",
    "AUTO_BINS_RANGE",
    "FRAME_WEIGHT",
    "HISTOGRAM_WEIGHT",
    "SCORE_MAP_PASSES",
    "SPARSE_DELTA_SHARE",
    "PrivateScoreMapStage",
    "ScoreMapStage",
    "auto_bins",
    "group_domain_from_text",
    "plot_scores",
    "resample_synthetic",
    "resolve_groups",
]

#: The frame's four quantiles' weight in the stage (a quarter each).
FRAME_WEIGHT = 1.0
#: The histograms' weight in the stage (shared equally by the released methods).
HISTOGRAM_WEIGHT = 3.0
#: A sparse histogram's delta, as a share of the analysis' total delta.
SPARSE_DELTA_SHARE = 0.1
#: The automatic grid's side is kept within these (public constants).
AUTO_BINS_RANGE = (10, 100)
#: The total variation the histogram's noise alone may add, in the automatic grid's rule
#: (:func:`auto_bins`; about what the 10 x 10 grid costs at n = 5000 in the benchmark).
AUTO_BINS_NOISE_TV = 0.05
_METHODS = ("additive", "sparse")
_STAGE = "score_map"
#: The score map's passes over the scores (centre, radius, histograms), after the one
#: that projects the rows (``compute/trusted/score_map.release_score_map``).
SCORE_MAP_PASSES = 3


def auto_bins(n_samples: int, noise_scale: float) -> tuple[int, int]:
    """The score map's grid from public parameters only: ``m x m`` cells growing with n eps.

    Every cell, empty or not, carries noise of mean absolute value about ``0.8 sigma``
    (``sigma`` the histogram's per-cell noise scale), so the noise alone moves the
    normalised histogram by about ``0.4 m^2 sigma / n`` in total variation.  The side is
    the largest ``m`` keeping that at :data:`AUTO_BINS_NOISE_TV`, within
    :data:`AUTO_BINS_RANGE`: 10 x 10 at n = 5000 and a score map of epsilon 0.75, about
    80 x 80 at n = 300 000 and epsilon 0.5.

    Parameters
    ----------
    n_samples : int
        The public number of records.
    noise_scale : float
        The histogram's per-cell noise scale (public: from its budget).

    Returns
    -------
    (int, int)
    """
    low, high = AUTO_BINS_RANGE
    if not (math.isfinite(noise_scale) and noise_scale > 0):
        return (low, low)
    side = math.floor(math.sqrt(AUTO_BINS_NOISE_TV * n_samples / (0.4 * noise_scale)))
    side = min(max(side, low), high)
    return (side, side)


def _check_axes(axes: Any) -> tuple[int, int]:
    try:
        a, b = (int(v) for v in axes)
    except (TypeError, ValueError):
        raise ValueError(f"score_axes: expected two component indices, got {axes!r}") from None
    if a < 0 or b < 0 or a == b or (a, b) != tuple(axes):
        raise ValueError(f"score_axes: expected two distinct indices >= 0, got {axes!r}")
    return a, b


def _check_methods(methods: Any) -> tuple[str, ...]:
    if isinstance(methods, str):
        methods = (methods,)
    chosen = tuple(dict.fromkeys(methods))
    if not chosen or any(m not in _METHODS for m in chosen):
        raise ValueError(f"score_methods: expected a subset of {_METHODS}, got {methods!r}")
    return chosen


#: The most labels a group domain may have: each group is a map of bins x bins cells in
#: the result (at 25 x 25 bins, 1000 groups are about 5 MB of it), and the budget's
#: noise is the same for each group however small.  Larger domains: merge labels first.
MAX_GROUP_DOMAIN = 1000


def _check_domain(domain: Any) -> tuple[Any, ...]:
    if domain is None or isinstance(domain, (str, bytes)):
        raise ValueError(
            "group_domain: groups need their PUBLIC label domain, a sequence of labels "
            f"(e.g. ('a', 'b', 'c')), got {domain!r}"
        )
    values = tuple(domain)
    if not values or len(set(values)) != len(values) or OTHER_GROUP in values:
        raise ValueError(
            f"group_domain: expected distinct labels, none of them {OTHER_GROUP!r}, got {domain!r}"
        )
    if len(values) > MAX_GROUP_DOMAIN:
        raise ValueError(
            f"group_domain: {len(values)} labels, more than the {MAX_GROUP_DOMAIN} a score map "
            "by group takes (a bins x bins map each, with the same noise however small the "
            "group); merge labels into fewer groups (--group-domain), or analyze subsets"
        )
    return values


def _check_bins(bins: Any) -> tuple[int, int] | None:
    """The grid, checked (None: chosen in ``mechanism()`` from public n and the split)."""
    if bins is None:
        return None
    try:
        mx, my = (int(v) for v in bins)
    except (TypeError, ValueError):
        raise ValueError(f"bins: expected two integers >= 1, got {bins!r}") from None
    if mx < 1 or my < 1:
        raise ValueError(f"bins: expected two integers >= 1, got {bins!r}")
    return (mx, my)


@dataclasses.dataclass
class ScoreMapStage(StageBase):
    """The private score map of two components (per group with the analysis's ``groups``).

    The stage object ``analyze(stages=[...])`` takes; the analysis binds it to its groups
    and seed (:meth:`bound`: a :class:`PrivateScoreMapStage`).

    Parameters
    ----------
    axes : (int, int), default (0, 1)
        The components of the map (0-based).
    bins : (int, int), optional
        The grid; by default one that grows with n epsilon, from public parameters only
        (:func:`auto_bins`).
    methods : sequence of str, default ("additive",)
        The histograms: ``"additive"`` (Gaussian counts) and/or ``"sparse"`` (thresholded).
    group_domain : sequence, optional
        The PUBLIC labels of the analysis's ``groups`` (required with them); others count
        as ``"other"``.

    Examples
    --------
    >>> from dask_dppca.analysis.stages.score_map import ScoreMapStage
    >>> ScoreMapStage(axes=(0, 2), methods="sparse").bound_to(None, None).methods
    ('sparse',)
    """

    axes: tuple[int, int] = (0, 1)
    bins: tuple[int, int] | None = None
    methods: Sequence[str] = ("additive",)
    group_domain: Sequence[Any] | None = None
    name: str = _STAGE

    def __post_init__(self) -> None:
        self.axes = _check_axes(self.axes)
        self.methods = _check_methods(self.methods)
        self.bins = _check_bins(self.bins)
        if self.group_domain is not None:
            self.group_domain = _check_domain(self.group_domain)

    def bound_to(self, labels: Any, random_state: int | None) -> PrivateScoreMapStage:
        """The stage that releases the map of ``labels`` (None: one map) seeded so."""
        return PrivateScoreMapStage(
            labels, self.group_domain, self.axes, self.bins, self.methods, random_state
        )

    def bound(self, setup: StageSetup) -> PrivateScoreMapStage:
        """The stage of one analysis: its groups (the plan's stand-in) and its seed."""
        if not setup.planning or setup.groups is None or self.group_domain is not None:
            return self.bound_to(setup.groups, setup.random_state)
        # A plan of groups whose domain it was not told: its parts hold the noisy group
        # sizes all the same; no advice on a stand-in domain.
        stand_in = dataclasses.replace(self, group_domain=("group",))
        return dataclasses.replace(stand_in.bound_to(True, None), domain_known=False)

    def planned_parts(self, n_components: int, n_features: int = 0) -> list[PlannedPart]:
        """Its parts without groups (the analysis plans the bound stage's)."""
        return self.bound_to(None, None).planned_parts(n_components, n_features)

    def run(self, context: StageContext) -> StageOutput:
        """The map without groups (the analysis runs the bound stage instead)."""
        return self.bound_to(None, context.random_state).run(context)


@dataclasses.dataclass
class PrivateScoreMapStage(StageBase):
    """A private score map (PC ``a`` against PC ``b``, per group) as one analysis stage.

    Parameters
    ----------
    labels : array-like, optional
        One label per row (:func:`resolve_groups` gives them from a column name).
    domain : sequence, optional
        The PUBLIC labels (required with ``labels``).
    axes : (int, int), default (0, 1)
        The components to map (0-based).
    bins : (int, int) or None, default None
        The grid; None: :func:`auto_bins` of the public n and the histogram's noise.
    methods : sequence of str, default ("additive",)
        ``"additive"`` (Gaussian counts) and/or ``"sparse"`` (thresholded).
    random_state : int, optional
        NOT PRIVATE: seeds the noise, for tests and examples only.
    """

    labels: Any = None
    domain: Sequence[Any] | None = None
    axes: tuple[int, int] = (0, 1)
    bins: tuple[int, int] | None = None
    methods: Sequence[str] = ("additive",)
    random_state: int | None = None
    name: str = _STAGE
    domain_known: bool = True

    def __post_init__(self) -> None:
        self.axes = _check_axes(self.axes)
        self.methods = _check_methods(self.methods)
        if self.labels is None and self.domain is not None:
            raise ValueError("groups: a group_domain was given without groups")
        self.domain = None if self.labels is None else _check_domain(self.domain)
        self.bins = _check_bins(self.bins)

    @property
    def grouped(self) -> bool:
        """Whether the map is split by groups."""
        return self.labels is not None

    def planned_parts(self, n_components: int, n_features: int = 0) -> list[PlannedPart]:
        """The stage's parts from public parameters only (before the split scales them)."""
        if max(self.axes) >= n_components:
            raise ValueError(
                f"score_axes: {self.axes} needs n_components > {max(self.axes)}, got "
                f"{n_components} (or pass score_map=False)"
            )
        per_method = HISTOGRAM_WEIGHT / len(self.methods)
        plan = [PlannedPart(_STAGE, "frame quantiles", "pure", count=4, weight=FRAME_WEIGHT / 4)]
        for method in self.methods:
            if method == "additive":
                weight = per_method * (1.0 - GROUP_COUNTS_SHARE if self.grouped else 1.0)
                plan.append(PlannedPart(_STAGE, "additive histogram", "gaussian", weight=weight))
                if self.grouped:
                    plan.append(
                        PlannedPart(
                            _STAGE,
                            "noisy group sizes",
                            "gaussian",
                            weight=per_method * GROUP_COUNTS_SHARE,
                        )
                    )
            else:
                plan.append(
                    PlannedPart(
                        _STAGE,
                        "sparse histogram",
                        "approx",
                        weight=per_method,
                        delta_share=SPARSE_DELTA_SHARE,
                    )
                )
        return plan

    def accuracy(self, split: BudgetSplit, n_samples: int, n_features: int) -> dict[str, Any]:
        """The frame's public accuracy: its centre's and radius's rank bounds.

        Never refused for it: a coarse frame still frames the map (its cells are wider),
        and the notices say how coarse.
        """
        mechanism = _frame_mechanism(split, n_samples)
        bounds = {"centre": mechanism.centre.rank_error(), "radius": mechanism.radius.rank_error()}
        stated: dict[str, Any] = {"rank_error_95": bounds, "useless": []}
        known = self.domain if self.domain_known else None
        if self.grouped and known is not None and "additive" in self.methods:
            sizes = split.part(_STAGE, "noisy group sizes")
            assert isinstance(sizes, GaussianPart)
            groups = len(known) + 1  # and "other"
            noise = GroupCounts(groups, sizes.mu).sigma
            average = n_samples / groups
            stated["groups"] = {
                "count": groups,
                "average_size": average,
                "size_noise": noise,
                "below_noise": average < NOISE_MULTIPLE * noise,
            }
        return stated

    def mechanism(self, n_samples: int, split: BudgetSplit) -> ScoreMapMechanism:
        """The map's mechanism with exactly the split's parameters (public)."""
        frame = split.part(_STAGE, "frame quantiles")
        assert isinstance(frame, PureDPPart)
        additive = group = sparse = None
        if "additive" in self.methods:
            part = split.part(_STAGE, "additive histogram")
            assert isinstance(part, GaussianPart)
            additive = part.mu
            if self.grouped:
                sizes = split.part(_STAGE, "noisy group sizes")
                assert isinstance(sizes, GaussianPart)
                group = sizes.mu
        if "sparse" in self.methods:
            part = split.part(_STAGE, "sparse histogram")
            assert isinstance(part, ApproxDPPart)
            sparse = (part.epsilon, part.delta)

        def build(bins: tuple[int, int]) -> ScoreMapMechanism:
            return ScoreMapMechanism.of_parts(
                n_samples,
                frame_epsilon=4.0 * frame.epsilon,
                additive_mu=additive,
                group_counts_mu=group,
                sparse=sparse,
                bins=bins,
                domain=None if self.domain is None else tuple(self.domain),
                composition=(
                    "parts set by the analysis' public split; composed exactly with every "
                    "other part of the analysis (privacy loss distributions)"
                ),
            )

        if self.bins is not None:
            mechanism = build(self.bins)
        else:  # the grid from public n and the first histogram's public noise scale
            first = next(iter(build((1, 1)).histograms.values())).describe()
            scale = first.get("sigma") or first.get("laplace_scale_counts") or 0.0
            mechanism = build(auto_bins(n_samples, float(scale)))
        if sorted(map(repr, mechanism.parts)) != sorted(map(repr, split.stage_parts(_STAGE))):
            raise AssertionError("the score map's parts differ from its share of the split")
        return mechanism

    def run(self, context: StageContext) -> StageOutput:
        """Charge the stage's parts, release the map; the map and its privacy rows."""
        blocks = context.pass_blocks()
        mechanism = self.mechanism(int(blocks.shape[0]), context.split)
        seeded = self.random_state is not None
        gaussian = make_sampler("gaussian", self.random_state) if seeded else None
        integer = make_sampler("discrete_laplace", self.random_state) if seeded else None
        with reserve_release(  # its rows, reserved by the analysis
            mechanism,
            fit_id=context.stage_id,
            label=f"analysis {context.analysis_id} score map",
            dataset=context.dataset,
        ):
            scores = project_scores(blocks, context.released_directions, self.axes)
            score_map = release_score_map(
                context.target,
                scores,
                mechanism,
                labels=self.labels,
                axes=self.axes,
                gaussian_sampler=gaussian,
                integer_sampler=integer,
                stage_id=context.stage_id,
            )
        return StageOutput(score_map, _rows(mechanism, score_map))

    def plan(self, setting: PlanSetting) -> StagePlan:
        """A projection of the rows in runs, then the light passes over the scores."""
        fit = setting.fit
        runs = len(row_runs(setting)[0])
        scores = 16 * setting.design.n_samples // max(fit.cluster.workers, 1)  # (n, 2) scores
        frame = _frame_mechanism(setting.split, setting.design.n_samples)
        return row_pass_plan(
            "score map",
            setting,
            light_passes=SCORE_MAP_PASSES,
            held_bytes=scores,
            detail=f"a projection of the rows in {runs} runs, then {SCORE_MAP_PASSES} passes "
            "(centre, radius, histograms)",
            draws=frame.planned_draws,
        )

    def summary(self, value: Any, feature_names: Sequence[str] | None = None) -> str:
        """The map's own summary (its frame, bins and groups)."""
        return str(value.summary())


def _frame_mechanism(split: BudgetSplit, n_samples: int) -> FrameMechanism:
    """The frame's four quantiles at the split's part (``epsilon / 4`` each)."""
    frame = split.part(_STAGE, "frame quantiles")
    assert isinstance(frame, PureDPPart)
    return FrameMechanism(n_samples, 4.0 * frame.epsilon)


def _rows(mechanism: ScoreMapMechanism, score_map: ScoreMap) -> list[dict[str, Any]]:
    where = str(score_map.privacy.get("released_on", ""))
    frame = mechanism.frame
    rows: list[dict[str, Any]] = [
        {
            "stage": _STAGE,
            "release": f"frame: {name} of PC{axis + 1}",
            "mechanism": "bound-free private quantile (AboveThreshold, discrete Laplace on counts)",
            "guarantee": "epsilon-DP",
            "epsilon": frame.epsilon / 4.0,
            "sensitivity": 1,
            "noise": None,
            "released_on": where,
            "count": 1,
        }
        for name in ("median", f"{frame.radius.target_quantile:.4g} quantile of |y - c|")
        for axis in score_map.axes
    ]
    for name, histogram in mechanism.histograms.items():
        described = histogram.describe()
        row: dict[str, Any] = {
            "stage": _STAGE,
            "release": f"{name} histogram {mechanism.bins[0]} x {mechanism.bins[1]}"
            + (f", {len(mechanism.group_names)} groups" if mechanism.domain is not None else ""),
            "mechanism": described.get("mechanism", name),
            "sensitivity": 2**0.5 if name == "additive" else 1,
            "released_on": where,
            "count": 1,
        }
        if isinstance(histogram.parts[0], GaussianPart):
            row.update(guarantee="mu-GDP", mu=histogram.parts[0].mu, noise=described["sigma"])
        else:
            part = histogram.parts[0]
            assert isinstance(part, ApproxDPPart)
            row.update(
                guarantee="(epsilon, delta)-DP",
                epsilon=part.epsilon,
                delta=part.delta,
                noise=described.get("noise_scale"),
            )
        rows.append(row)
    if mechanism.group_counts is not None:
        rows.append(
            {
                "stage": _STAGE,
                "release": f"noisy group sizes ({len(mechanism.group_names)} groups)",
                "mechanism": "Gaussian noise on each group's size",
                "guarantee": "mu-GDP",
                "mu": mechanism.group_counts.mu,
                "sensitivity": 2**0.5,
                "noise": mechanism.group_counts.sigma,
                "released_on": where,
                "count": 1,
            }
        )
    return rows


def group_domain_from_text(text: str | None, labels: Any) -> tuple[Any, ...] | None:
    """The public labels typed as ``A,B,C`` (``--group-domain``, the app's field), typed
    like the label array (public metadata: its dtype); None for no text.
    """
    if text is None:
        return None
    values = [v.strip() for v in text.split(",") if v.strip()]
    kind = getattr(getattr(labels, "dtype", None), "kind", "O")
    try:
        if kind in "iu":
            return tuple(int(v) for v in values)
        if kind == "f":
            return tuple(float(v) for v in values)
    except ValueError:
        raise ValueError(
            f"--group-domain: the labels are numbers ({labels.dtype}), got {text!r}"
        ) from None
    return tuple(values)


def resolve_groups(X: Any, groups: Any, component: str | None = None) -> tuple[Any, Any]:
    """``(X, labels)``: the records without the label column, and one label per row.

    Parameters
    ----------
    X : as for :func:`~dask_dppca.analysis.run.analyze`
    groups : array-like, str or None
        A label array (numpy, list, pandas or dask Series, xarray DataArray, dask or Zarr
        array, or a Zarr array's path), or the NAME of a column of a (dask) DataFrame
        ``X`` (dropped from the records), of a variable or coordinate of an xarray
        Dataset ``X`` (dropped), or of an array in the Zarr group ``X`` (beside
        ``component``).
    component : str, optional
        The records' array in a Zarr group.

    Returns
    -------
    tuple
        ``(X, labels)``; ``labels`` is None without groups.
    """
    if groups is None:
        return X, None
    if not isinstance(groups, str):
        return X, groups
    columns = getattr(X, "columns", None)
    if columns is not None and groups in list(columns):  # a DataFrame's column
        return X.drop(columns=[groups]), X[groups]
    if hasattr(X, "data_vars") and (groups in X.data_vars or groups in X.coords):  # xarray
        labels = X[groups]
        return (X.drop_vars(groups) if groups in X.data_vars else X), labels
    if isinstance(X, (str, os.PathLike)) and component is not None:
        import dask.array as da

        try:  # an array beside the records in the same Zarr group
            # dask.array ships no annotations: its from_zarr is untyped.
            return X, da.from_zarr(os.fspath(X), component=groups)  # type: ignore[no-untyped-call]
        except Exception:  # not in the group: try it as a path below
            pass
    if os.path.exists(groups) or "://" in groups:
        import dask.array as da

        # A Zarr array of labels: lazy, its dtype public (from_zarr is untyped, as above).
        return X, da.from_zarr(groups)  # type: ignore[no-untyped-call]
    raise ValueError(
        f"groups: {groups!r} is neither a column of X, an array of its Zarr group, nor a "
        "Zarr array's path"
    )


def _released(score_map: Any) -> ScoreMap:
    if not isinstance(score_map, ScoreMap):
        raise ValueError("score_map: this analysis released no score map (score_map=False)")
    return score_map


def plot_scores(
    score_map: Any,
    *,
    by_group: bool | None = None,
    method: str | None = None,
    floor_sigmas: float = 0.0,
    synthetic: bool = False,
    reference: Any = None,
    reference_groups: Any = None,
    ax: Any = None,
    rng: Any = None,
    ncols: int = 3,
) -> Any:
    """The released score map: private only, unless a ``reference`` is passed.

    Parameters
    ----------
    score_map : ScoreMap
    by_group : bool, optional
        One panel per group (:func:`~dask_dppca.analysis.plots.plot_group_panels`); the
        default when the map has groups.  Otherwise the pooled map
        (:func:`~dask_dppca.analysis.plots.plot_score_map`).
    method, floor_sigmas, synthetic, ax, rng
        As for :func:`~dask_dppca.analysis.plots.plot_score_map` (``synthetic`` and ``ax``
        for the pooled map only).
    reference, reference_groups : array-like, optional
        Raw scores (and their labels) the USER supplies, drawn labelled NOT PRIVATE.
    ncols : int, default 3
        Panels per row (by group).

    Returns
    -------
    matplotlib.figure.Figure
    """
    from ..plots import plot_group_panels, plot_score_map

    released = _released(score_map)
    if by_group is None:
        by_group = len(released.groups) > 1
    if by_group:
        return plot_group_panels(
            released,
            method=method,
            floor_sigmas=floor_sigmas,
            ncols=ncols,
            reference=reference,
            reference_groups=reference_groups,
        )
    return plot_score_map(
        released,
        method=method,
        floor_sigmas=floor_sigmas,
        synthetic=synthetic,
        reference=reference,
        ax=ax,
        rng=rng,
    )


def resample_synthetic(score_map: Any, size: int | None = None, **kwargs: Any) -> dict[str, Any]:
    """Fresh synthetic points per group from the released map (post-processing, free).

    ``size`` and ``kwargs`` as for
    :meth:`~dask_dppca.privacy.mechanisms.score_map.ScoreMap.synthetic`.
    """
    return _released(score_map).synthetic(size, **kwargs)
