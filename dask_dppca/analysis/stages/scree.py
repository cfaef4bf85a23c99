"""The scree stage: private scree values along the released directions.

Three releases, each one Dask pass released on the trusted worker
(:mod:`dask_dppca.privacy.mechanisms.scree` holds the mechanisms and their sensitivity): the pair
quantiles (the scale every clip and threshold is set from, and the robust values), then
the Gaussian means (clipped with the trace, winsorized, the first Huber step), then any
further Huber steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from ...compute.trusted.release import release_statistic
from ...graph.scree import scree_histogram_graph, scree_sums_graph
from ...kernel.scree_stats import scree_design, sub_block_pairs_per_record, summation_slack
from ...privacy.mechanisms.accounting import BudgetSplit, PlannedPart
from ...privacy.mechanisms.charges import PartsCharge
from ...privacy.mechanisms.contract import make_sampler
from ...privacy.mechanisms.noise import NoiseSampler
from ...privacy.mechanisms.parts import GaussianPart, PureDPPart
from ...privacy.mechanisms.scree import (
    CLIP_MULTIPLE,
    HUBER_MULTIPLE,
    METHODS,
    WINSOR_LEVEL,
    GaussianStatistic,
    PairQuantiles,
    gaussian_consistent_winsorized,
    huber_ranges,
    monotone,
    robust_from_quantile,
    robust_from_quantiles,
    scree_floor,
    scree_scales,
    winsorizing_level,
)
from ...privacy.notices import scree_default
from ..stage import (
    PlanSetting,
    StageBase,
    StageContext,
    StageOutput,
    StagePlan,
    claim_stage_parts,
    release_row,
)

__all__ = [
    "HUBER_STEPS",
    "SCREE_WEIGHTS",
    "ScreeStage",
    "check_methods",
    "scree_parts",
    "scree_passes",
]

#: Noisy steps of the Huber scree estimator: one.  With the lower clamp idle (see
#: ``HUBER_MULTIPLE``) a step from ``m`` lands at ``E min(s, m + tau)`` whatever ``m``;
#: a second step only moves the clamp by ``m_2 - m_1`` and halves each step's budget.
HUBER_STEPS = 1
#: Weights of the scree stage's parts (public): each quantile 1, the means these.
SCREE_WEIGHTS = {"clipped": 8.0, "winsorized": 4.0, "huber": 4.0}
_STAGE = "scree"
#: Bins of a scree histogram (the public grid of :mod:`dask_dppca.kernel.scree_stats`).
_SCREE_BINS = 8193

Selector = Callable[[np.ndarray, float], int]


def check_methods(methods: Any) -> tuple[str, ...]:
    """The scree methods asked for, checked (a subset of ``METHODS``, in order, once each)."""
    if isinstance(methods, str):
        methods = (methods,)
    chosen = tuple(dict.fromkeys(methods))
    unknown = [m for m in chosen if m not in METHODS]
    if unknown or not chosen:
        raise ValueError(f"methods: expected a subset of {METHODS}, got {methods!r}")
    return chosen


def _upper_quantile(methods: Sequence[str]) -> bool:
    """Whether the scree releases the ``1 - WINSOR_LEVEL`` pair quantile (the winsorizing
    level's, and the robust value's).
    """
    return "winsorized" in methods or "robust" in methods


def scree_parts(k: int, methods: Sequence[str]) -> list[PlannedPart]:
    """The scree's planned parts for ``k`` components and ``methods`` (public)."""
    levels = 2 * k + 1 if _upper_quantile(methods) else k + 1
    plan = [PlannedPart(_STAGE, "quantiles", "pure", count=levels)]
    for method in ("clipped", "winsorized"):
        if method in methods:
            plan.append(PlannedPart(_STAGE, method, "gaussian", weight=SCREE_WEIGHTS[method]))
    if "huber" in methods:
        weight = SCREE_WEIGHTS["huber"] / HUBER_STEPS
        plan.append(PlannedPart(_STAGE, "huber", "gaussian", count=HUBER_STEPS, weight=weight))
    return plan


def _mu(split: BudgetSplit, release: str) -> float:
    """The split's mu for one of the scree's Gaussian means."""
    part = split.part(_STAGE, release)
    assert isinstance(part, GaussianPart)
    return float(part.mu)


@dataclass
class _Pass:
    """What every scree release shares: the design, the noise and where it runs."""

    context: StageContext
    n_pairs: int
    degree: int
    slack: float
    sampler: NoiseSampler

    def release(self, release: Any, graph: Any, label: str, charge: Any) -> tuple[Any, str]:
        context = self.context
        return release_statistic(
            context.target,
            release,
            graph,
            f"{context.stage_id}-{label}",
            charge=charge,
            stage_id=context.stage_id,
        )

    def statistic(self, name: str, ranges: np.ndarray, mu: float) -> GaussianStatistic:
        return GaussianStatistic(
            name,
            tuple(float(r) for r in ranges),
            mu,
            self.n_pairs,
            self.degree,
            self.slack,
            self.sampler,
        )


@dataclass
class ScreeStage(StageBase):
    """Private scree values of the released directions (one analysis stage).

    Parameters
    ----------
    methods : sequence of str
        Any of ``"clipped"``, ``"winsorized"``, ``"huber"``, ``"robust"`` (the robust one
        costs nothing beyond the quantiles all need).
    mono : bool, default False
        Monotone (non-increasing) post-processing of each method's values.
    random_state : int, optional
        NOT PRIVATE: seeds the noise, for tests and examples only; the analysis binds its
        own ``random_state`` here.

    Examples
    --------
    >>> from dask_dppca.analysis.stages.scree import ScreeStage
    >>> ScreeStage(methods=("clipped", "clipped", "robust")).methods  # checked, once each
    ('clipped', 'robust')
    """

    methods: Sequence[str] = ("clipped", "winsorized", "huber", "robust")
    mono: bool = False
    random_state: int | None = None
    name: str = _STAGE

    def __post_init__(self) -> None:
        self.methods = check_methods(self.methods)

    def planned_parts(self, n_components: int, n_features: int) -> list[PlannedPart]:
        """The quantiles and the chosen means (public)."""
        return scree_parts(n_components, self.methods)

    def meta(self) -> dict[str, Any]:
        """The scree's methods."""
        return {"methods": list(self.methods)}

    def plan(self, setting: PlanSetting) -> StagePlan:
        """Its passes over the same segments :mod:`dask_dppca.graph.scree` builds."""
        return _scree_plan(setting, self.methods)

    def run(self, context: StageContext) -> StageOutput:
        """Release the quantiles, then the means, then any further Huber steps."""
        seed = self.random_state
        sampler = make_sampler("exact_gaussian", seed)
        selector = make_sampler("noisy_max", seed)
        sizes, pairs = tuple(context.block_sizes), tuple(context.block_pairs)
        n_pairs, degree = scree_design(sizes, pairs)
        slack = summation_slack(n_pairs, sub_block_pairs_per_record(len(sizes), pairs))
        runner = _Pass(context, n_pairs, degree, slack, sampler)
        with claim_stage_parts(context, _STAGE):
            quantiles, rows = self._quantiles(runner, selector)
            scree = self._means(runner, quantiles, rows)
        if self.mono:
            scree["values"] = {m: monotone(v).tolist() for m, v in scree["values"].items()}
        return StageOutput(scree, rows)

    def _quantiles(
        self, runner: _Pass, selector: Selector
    ) -> tuple[list[list[float]], list[dict[str, Any]]]:
        """The pair quantiles (median, and the upper level when a method needs it)."""
        context = runner.context
        directions = context.released_directions
        k, d = directions.shape
        upper = _upper_quantile(self.methods)
        levels = tuple(((0.5, 1.0 - WINSOR_LEVEL) if upper else (0.5,)) for _ in range(k))
        quantile = context.split.part(_STAGE, "quantiles")
        assert isinstance(quantile, PureDPPart)
        mechanism = PairQuantiles(
            (*levels, (0.5,)), quantile.epsilon, runner.n_pairs, runner.degree, selector,
            n_features=d,
        )  # fmt: skip
        graph = scree_histogram_graph(
            context.blocks,
            directions,
            context.block_pairs,
            trace=True,
            n_threads=context.target.n_threads,
        )
        released, where = runner.release(mechanism.release, graph, "quantiles", mechanism)
        what = "pair quantiles (median; upper level)" if upper else "pair quantiles (median)"
        return released, [release_row(_STAGE, what, mechanism.describe(), where)]

    def _means(
        self, runner: _Pass, released: list[list[float]], rows: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The Gaussian means set from the released quantiles, and the scree record."""
        context = runner.context
        directions = context.released_directions
        k, d = directions.shape
        # The scale the clip and the Huber threshold are set from (post-processing).
        robust = scree_scales(released, d)
        values: dict[str, list[float]] = {}
        if "robust" in self.methods:
            values["robust"] = [robust_from_quantiles(r[0], r[1]) for r in released[:k]]
        trace_scale = robust_from_quantile(released[k][0])
        clip = np.concatenate([CLIP_MULTIPLE * robust, [CLIP_MULTIPLE * trace_scale]])
        # The winsorizing level, not below the clip's floor (the clip's reason, scree_scales).
        floor = CLIP_MULTIPLE * scree_floor(released[k][0], d)
        upper = (
            np.array([max(winsorizing_level(r[1]), floor) for r in released[:k]])
            if "winsorized" in self.methods
            else None
        )
        tau = HUBER_MULTIPLE * robust
        centre = robust.copy()
        mechanisms = self._mean_mechanisms(runner, k, clip, upper, centre, tau)
        trace = None
        if mechanisms:
            huber = "huber" in self.methods
            graph = scree_sums_graph(
                context.blocks, context.block_pairs, directions, clip, upper,
                centre if huber else None, tau if huber else None,
                n_threads=context.target.n_threads,
            )  # fmt: skip

            def release_means(total: Any) -> list[np.ndarray]:
                sums = total.to_float()
                return [mech.release(sums[s]) for _, mech, s in mechanisms]

            charge = PartsCharge(tuple(p for _, mech, _ in mechanisms for p in mech.parts))
            out, where = runner.release(release_means, graph, "means", charge)
            for (name, mech, _), noisy in zip(mechanisms, out):
                rows.append(release_row(_STAGE, mech.name, mech.describe(), where))
                if name == "clipped":
                    values["clipped"] = noisy[:k].tolist()
                    trace = float(noisy[k])
                elif name == "winsorized":
                    assert upper is not None
                    values["winsorized"] = [
                        gaussian_consistent_winsorized(float(m), float(u))
                        for m, u in zip(noisy, upper)
                    ]
                else:
                    centre = centre + noisy
        if "huber" in self.methods:
            values["huber"] = self._huber_steps(runner, centre, tau, rows).tolist()
        return self._record(values, released, runner, trace)

    def _mean_mechanisms(
        self,
        runner: _Pass,
        k: int,
        clip: np.ndarray,
        upper: np.ndarray | None,
        centre: np.ndarray,
        tau: np.ndarray,
    ) -> list[tuple[str, GaussianStatistic, slice]]:
        """The Gaussian means of one pass, with the slice of the sums each reads."""
        split = runner.context.split
        mechanisms: list[tuple[str, GaussianStatistic, slice]] = []
        # The clipped vector (k scree values and the trace) is always computed: the
        # trace gives the PVE over all d.
        if "clipped" in self.methods:
            mu = _mu(split, "clipped")
            mechanisms.append(("clipped", runner.statistic("clipped", clip, mu), slice(0, k + 1)))
        start = k + 1
        if upper is not None:
            mu = _mu(split, "winsorized")
            statistic = runner.statistic("winsorized", upper, mu)
            mechanisms.append(("winsorized", statistic, slice(start, start + k)))
            start += k
        if "huber" in self.methods:
            mu = _mu(split, "huber")
            statistic = runner.statistic("huber step 1", huber_ranges(centre, tau), mu)
            mechanisms.append(("huber", statistic, slice(start, start + k)))
        return mechanisms

    def _huber_steps(
        self, runner: _Pass, centre: np.ndarray, tau: np.ndarray, rows: list[dict[str, Any]]
    ) -> np.ndarray:
        """Huber steps 2..HUBER_STEPS, each its own pass (the Huber scores alone)."""
        context = runner.context
        mu = _mu(context.split, "huber")
        for step in range(2, HUBER_STEPS + 1):
            mech = runner.statistic(f"huber step {step}", huber_ranges(centre, tau), mu)

            def release_step(total: Any, mech: GaussianStatistic = mech) -> np.ndarray:
                return mech.release(total.to_float())

            graph = scree_sums_graph(
                context.blocks, context.block_pairs, context.released_directions,
                None, None, centre, tau, n_threads=context.target.n_threads,
            )  # fmt: skip
            noisy, where = runner.release(release_step, graph, f"huber-{step}", mech)
            rows.append(release_row(_STAGE, mech.name, mech.describe(), where))
            centre = centre + noisy
        return centre

    def _record(
        self,
        values: dict[str, list[float]],
        released: list[list[float]],
        runner: _Pass,
        trace: float | None,
    ) -> dict[str, Any]:
        """The scree's released record (values, default, quantiles, design, PVE)."""
        scree: dict[str, Any] = {
            "values": values,
            "default": scree_default(self.methods),
            "quantiles": [list(r) for r in released],
            "design": {"n_pairs": runner.n_pairs, "max_degree": runner.degree},
        }
        if trace is not None:
            scree["trace"] = trace
            clipped = np.asarray(values["clipped"])
            scree["pve_total"] = (clipped / trace).tolist() if trace > 0 else None
        return scree


@cache
def _scree_pairs(a: int, b: int, same: bool) -> int:
    """Record pairs of the scree sub-design of one block pair (blocks of ``a``, ``b`` rows)."""
    return scree_design((a,), ((0, 0),))[0] if same else scree_design((a, b), ((0, 1),))[0]


def scree_passes(methods: Sequence[str]) -> int:
    """The scree's passes over its pair sub-design: the quantiles' histograms, the
    Gaussian means (clipped, winsorized, Huber step 1) together, and each later Huber step.
    """
    means = any(m in methods for m in ("clipped", "winsorized", "huber"))
    return 1 + int(means) + (HUBER_STEPS - 1 if "huber" in methods else 0)


def _pass_pair_seconds(setting: PlanSetting, methods: Sequence[str]) -> list[float]:
    """Each pass's seconds per sub-design pair: the histograms' ``k + 1`` values (the
    trace's too), the means' sums (the clipped ``k + 1``, the winsorized and Huber ``k``
    each), each later Huber step's ``k``.
    """
    k, d, model = setting.n_components, setting.design.n_features, setting.model
    passes = scree_passes(methods)
    seconds = [(k + 1) * model.scree_value_seconds("histograms", d)]
    sums = model.scree_value_seconds("sums", d)
    if passes > 1:  # the means, then each later Huber step
        seconds.append((k + 1 + k * sum(m in methods for m in ("winsorized", "huber"))) * sums)
    return seconds + [k * sums] * (passes - len(seconds))


def _segment_seconds(
    setting: PlanSetting, segments: Any, reads: bool, pair_seconds: float
) -> list[float]:
    """Each segment's modelled seconds: its pairs' work at ``pair_seconds`` a pair, its
    block pairs' set-up as the kernel's and, when the segments read their own blocks, the
    reads (else the input's reads spread like the work).
    """
    fit, plan, model = setting.fit, setting.design, setting.model
    d, sizes = plan.n_features, plan.block_sizes
    per_row, call = model.row_cost(d), model.kernel_call_seconds
    read_rate, key = model.read_rate(fit.input["storage"], fit.input["codec"])
    seconds = []
    for segment in segments:
        work = 0.0
        for i, j in segment.pairs.tolist():
            pairs = _scree_pairs(sizes[i], sizes[j], i == j)
            rows = sizes[i] if i == j else sizes[i] + sizes[j]
            work += pairs * pair_seconds + call + per_row * rows
        if reads:
            rows = int(sum(sizes[b] for b in segment.blocks.tolist()))
            work += rows * d * setting.itemsize / read_rate + model.read_call(key) * len(
                segment.blocks
            )
        seconds.append(work)
    if not reads:  # the input's own tasks read every block once, spread like the work
        whole = plan.n_samples * d * setting.itemsize / read_rate
        seconds = [s + whole / len(seconds) for s in seconds]
    return seconds


def _scree_plan(setting: PlanSetting, methods: Sequence[str]) -> StagePlan:
    """The scree's passes over the same segments :mod:`dask_dppca.graph.scree` builds."""
    from ...graph.scree import merge_task_count, scree_segments
    from ...planning.fit_plan import makespan

    fit, plan, model = setting.fit, setting.design, setting.model
    threads = fit.cluster.n_threads
    reads = bool(fit.graph["reads_in_tasks"])
    segments = scree_segments(plan.block_sizes, plan.block_pairs, plan.n_features, threads, reads)
    n_pairs, degree = scree_design(tuple(plan.block_sizes), tuple(plan.block_pairs))
    passes = scree_passes(methods)
    per_pass = len(segments) + merge_task_count(len(segments)) + 1  # and its release
    if not reads:
        per_pass += int(fit.graph["input_tasks"])
    work = sum(
        makespan(_segment_seconds(setting, segments, reads, pair), threads)
        for pair in _pass_pair_seconds(setting, methods)
    )
    m = fit.memory
    histograms = 2 * (setting.n_components + 1) * _SCREE_BINS * 8  # a segment's and a merge's
    per_task = (m["held_blocks"] + 2) * m["block_bytes"] + histograms
    running = min(m["running_tasks"], len(segments))
    peak = int(m["parts"]["baseline"] + m["parts"]["input_in_process"] + running * per_task)
    return StagePlan(
        _STAGE,
        passes,
        passes * per_pass,
        len(segments),
        work + passes * per_pass * model.task_seconds + model.stage_fixed(_STAGE),
        peak,
        f"{passes} passes ({'+'.join(methods)}) over {n_pairs:.4g} sub-design pairs "
        "(64-row sub-blocks)",
        facts={"scree_design": {"n_pairs": int(n_pairs), "max_degree": int(degree)}},
    )
