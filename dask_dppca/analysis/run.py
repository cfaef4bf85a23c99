"""A private PCA analysis under one budget: directions, scree values, a score-map slot.

:func:`analyze` reads top to bottom: check every parameter, plan the parts of every
stage and split the total (epsilon, delta) over them by the public rule
(:func:`~dask_dppca.privacy.accounting.split_budget`), show the split (logged, and in the
result) and check that every active budget can pay for the whole analysis before
anything is read; then release the directions (a :class:`~.DPPCA` fit at its share), and
along them the scree statistics (:mod:`dask_dppca.privacy.scree`), each stage one Dask
reduction released on the trusted worker.  The score map is one more stage with its own
parts (:class:`ScoreMapStage`; by default
:class:`~dask_dppca.analysis.stages.score_map.PrivateScoreMapStage`, per group with ``groups``).

The result, :class:`PrivateAnalysis`, holds only released values and public parameters:
re-plotting, choosing k, saving and loading never recompute or spend anything.
"""

from __future__ import annotations

import html
import json
import logging
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..compute import ClusterTarget, compute_target
from ..compute.budget_config import budgets_to_charge
from ..compute.failures import lost_scheduler
from ..compute.placement import untrusted_warning_given
from ..compute.release import release_statistic
from ..decomposition.estimator import DPPCA
from ..graph import pass_block_sizes
from ..graph.scree import scree_histogram_graph, scree_sums_graph
from ..io import open_records
from ..io.fingerprint import check_unchanged, store_fingerprint
from ..io.output import write_bytes, write_json
from ..kernel import resolve_spatial_sign
from ..kernel.scree_stats import scree_design, sub_block_pairs_per_record, summation_slack
from ..privacy.accounting import BudgetSplit, PlannedPart, compose, split_budget
from ..privacy.budget import PartsCharge
from ..privacy.calibration import gaussian_dp_epsilon, gaussian_dp_mu, validate_privacy_parameters
from ..privacy.charging import reserve_release, reserve_transaction
from ..privacy.noise import NoiseSampler, OpenDPSampler, SeededSampler
from ..privacy.notices import directions_note, release_notices, scree_default
from ..privacy.parts import part_to_dict
from ..privacy.score_map import ScoreMap
from ..privacy.scree import (
    CLIP_MULTIPLE,
    HUBER_MULTIPLE,
    METHODS,
    WINSOR_LEVEL,
    GaussianStatistic,
    PairQuantiles,
    gaussian_consistent_winsorized,
    huber_ranges,
    monotone,
    opendp_selector,
    robust_from_quantile,
    robust_from_quantiles,
    scree_floor,
    scree_scales,
    winsorizing_level,
)
from ..validation import integer_at_least
from .report import input_feature_names
from .stages.score_map import PrivateScoreMapStage, plot_scores, resample_synthetic, resolve_groups

__all__ = ["PrivateAnalysis", "ScoreMapStage", "analyze"]

logger = logging.getLogger(__name__)

#: Noisy steps of the Huber scree estimator: one.  With the lower clamp idle (see
#: ``HUBER_MULTIPLE``) a step from ``m`` lands at ``E min(s, m + tau)`` whatever ``m``;
#: a second step only moves the clamp by ``m_2 - m_1`` and halves each step's budget.
HUBER_STEPS = 1
#: Weights of the scree stage's parts (public): each quantile 1, the means these.
SCREE_WEIGHTS = {"clipped": 8.0, "winsorized": 4.0, "huber": 4.0}
_FORMAT = "dask-dppca private analysis 1"


class ScoreMapStage(Protocol):
    """What a score-map stage offers the analysis (the score-map mechanisms fill it)."""

    def planned_parts(self, n_components: int) -> list[PlannedPart]:
        """The stage's parts before scaling (stage ``"score_map"``)."""
        ...

    def run(self, context: dict[str, Any], split: BudgetSplit) -> tuple[Any, list[dict]]:
        """Release the score map; its result and its rows of the privacy table."""
        ...


def _upper_quantile(methods: Sequence[str]) -> bool:
    """Whether the scree releases the ``1 - WINSOR_LEVEL`` pair quantile (the winsorizing
    level's, and the robust value's).
    """
    return "winsorized" in methods or "robust" in methods


def _scree_plan(k: int, methods: Sequence[str]) -> list[PlannedPart]:
    levels = 2 * k + 1 if _upper_quantile(methods) else k + 1
    plan = [PlannedPart("scree", "quantiles", "pure", count=levels)]
    if "clipped" in methods:
        plan.append(PlannedPart("scree", "clipped", "gaussian", weight=SCREE_WEIGHTS["clipped"]))
    if "winsorized" in methods:
        plan.append(
            PlannedPart("scree", "winsorized", "gaussian", weight=SCREE_WEIGHTS["winsorized"])
        )
    if "huber" in methods:
        plan.append(
            PlannedPart(
                "scree",
                "huber",
                "gaussian",
                count=HUBER_STEPS,
                weight=SCREE_WEIGHTS["huber"] / HUBER_STEPS,
            )
        )
    return plan


def _check_methods(methods: Any) -> tuple[str, ...]:
    if isinstance(methods, str):
        methods = (methods,)
    chosen = tuple(dict.fromkeys(methods))
    unknown = [m for m in chosen if m not in METHODS]
    if unknown or not chosen:
        raise ValueError(f"methods: expected a subset of {METHODS}, got {methods!r}")
    return chosen


def _check_spatial_sign(spatial_sign: Any, radius: Any) -> Any:
    """The directions' spatial sign, checked before anything is read (as the fit does)."""
    sign = resolve_spatial_sign(spatial_sign, radius)
    if not sign.is_bounded:
        raise ValueError(f"spatial_sign: {sign.name!r} is unbounded and has no finite sensitivity")
    return sign


def _directions_target(mu: float, delta: float) -> tuple[float, float]:
    """(epsilon, delta) for the directions' fit such that its mu stays <= ``mu``."""
    eps = gaussian_dp_epsilon(mu, delta)
    while gaussian_dp_mu(eps, delta) > mu:
        eps *= 1.0 - 1e-9
    return eps, delta


@dataclass
class PrivateAnalysis:
    """The released analysis: directions, scree values and the privacy table.

    Everything here is released or public: plotting, choosing k, saving and loading
    cost nothing and recompute nothing.

    Attributes
    ----------
    directions : ndarray, shape (k, d)
        The private principal directions (rows), largest first.
    kendall_eigenvalues : ndarray, shape (d,)
        Eigenvalues of the noisy Kendall matrix (released with the directions).
    scree : dict
        ``scree["values"][method]``: the k released scree values per method;
        ``scree["pve_total"]``: clipped values over the private trace (PVE over all d);
        ``scree["pve_topk"][method]``: each method's values over their own sum (PVE over
        the top k only); ``scree["trace"]``: the private trace; ``scree["default"]``: the
        method to read (:data:`~dask_dppca.privacy.notices.SCREE_DEFAULT_ORDER`, why:
        :func:`~dask_dppca.privacy.notices.scree_default_note`); ``scree["quantiles"]``:
        the released pair quantiles (per component, then the trace's).
    privacy : list of dict
        The split table: one row per release (stage, release, mechanism, guarantee,
        epsilon/delta or mu, sensitivity, sigma or scale, where drawn).
    score_map : ScoreMap or None
        The private score map (:class:`~dask_dppca.privacy.score_map.ScoreMap`), when
        one was released.
    meta : dict
        Totals, shares, n, d, the composed epsilon, the analysis id, the spatial sign
        (and radius) and ``directions_estimate``: what the directions estimate.
    notices : list of str
        Plain sentences on what in the release is pure noise
        (:func:`~dask_dppca.privacy.notices.release_notices`, from released values only).
    """

    directions: np.ndarray
    kendall_eigenvalues: np.ndarray
    scree: dict[str, Any]
    privacy: list[dict[str, Any]]
    score_map: Any = None
    meta: dict[str, Any] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)

    # -- plots -------------------------------------------------------------------------

    def plot_scree(
        self,
        methods: Sequence[str] | None = None,
        *,
        kind: str = "scree",
        reference: Sequence[float] | None = None,
        ax: Any = None,
    ) -> Any:
        """A matplotlib scree (or PVE) plot of the released values: private only by default.

        Parameters
        ----------
        methods : sequence of str, optional
            Which released methods to draw (default: all).
        kind : {"scree", "pve_topk", "pve_total"}
            Scree values, PVE over the top k, or PVE over all d (clipped only).
        reference : sequence of float, optional
            A non-private reference the USER supplies (never computed here); drawn
            dashed and labelled NOT PRIVATE.
        ax : matplotlib Axes, optional

        Returns
        -------
        matplotlib.axes.Axes
        """
        import matplotlib.pyplot as plt

        if kind not in ("scree", "pve_topk", "pve_total"):
            raise ValueError(f"kind: expected 'scree', 'pve_topk' or 'pve_total', got {kind!r}")
        if ax is None:
            _, ax = plt.subplots(figsize=(5, 3.5))
        chosen = list(self.scree["values"]) if methods is None else list(methods)
        k = self.directions.shape[0]
        x = np.arange(1, k + 1)
        default = self.scree.get("default")
        if kind == "pve_total":
            series = {"clipped": self.scree.get("pve_total")}
        else:
            source = self.scree["values"] if kind == "scree" else self.scree["pve_topk"]
            series = {m: source[m] for m in chosen}
        for name, values in series.items():
            if values is not None:
                ax.plot(x, values, **_scree_style(name, name == default))
        if reference is not None:
            ax.plot(
                x[: len(reference)],
                np.asarray(reference)[:k],
                linestyle="--",
                color="black",
                marker="x",
                label="reference: NOT PRIVATE",
            )
        ax.set_xticks(x)
        ax.set_xlabel("component")
        ax.set_ylabel(
            {"scree": "scree value", "pve_topk": "PVE (top k)", "pve_total": "PVE (all d)"}[kind]
        )
        eps, dlt = self.meta.get("epsilon"), self.meta.get("delta")
        ax.set_title(f"private scree, total epsilon={eps:g}, delta={dlt:g}")
        # An explicit place: "best" searches the data, and matplotlib warns when slow.
        ax.legend(frameon=False, loc="upper right")  # decreasing values leave it free
        return ax

    def plot_scores(self, **kwargs: Any) -> Any:
        """The private score map (per group when it has groups); a non-private reference
        only when passed, labelled NOT PRIVATE.  Free: see
        :func:`~dask_dppca.analysis.stages.score_map.plot_scores` for the options.
        """
        return plot_scores(self.score_map, **kwargs)

    def resample_synthetic(self, size: int | None = None, **kwargs: Any) -> dict[str, Any]:
        """Synthetic points per group from the released map (post-processing, free).

        See :func:`~dask_dppca.analysis.stages.score_map.resample_synthetic`.
        """
        return resample_synthetic(self.score_map, size, **kwargs)

    # -- records -----------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary (lossless for :meth:`from_dict`)."""
        return {
            "format": _FORMAT,
            "directions": self.directions.tolist(),
            "kendall_eigenvalues": self.kendall_eigenvalues.tolist(),
            "scree": _jsonable(self.scree),
            "privacy": _jsonable(self.privacy),
            "score_map": _jsonable(getattr(self.score_map, "to_dict", lambda: self.score_map)()),
            "meta": _jsonable(self.meta),
            "notices": list(self.notices),
        }

    def to_json(self, **kwargs: Any) -> str:
        """The analysis as JSON text."""
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> PrivateAnalysis:
        """The analysis a :meth:`to_dict` record describes."""
        if record.get("format") != _FORMAT:
            raise ValueError(f"record: not a {_FORMAT!r} record")
        scree = dict(record["scree"])
        if "default" not in scree and scree.get("values"):  # saved before defaults existed
            scree["default"] = scree_default(list(scree["values"]))
        result = cls(
            directions=np.asarray(record["directions"], dtype=np.float64),
            kendall_eigenvalues=np.asarray(record["kendall_eigenvalues"], dtype=np.float64),
            scree=scree,
            privacy=list(record["privacy"]),
            score_map=_score_map_of(record.get("score_map")),
            meta=dict(record["meta"]),
        )
        notices = record.get("notices")
        # A record from before the notices: derived from its released values (free).
        result.notices = list(notices) if notices is not None else release_notices(result)
        return result

    def save(
        self,
        path: str | os.PathLike[str],
        *,
        overwrite: bool = True,
        storage_options: dict | None = None,
    ) -> str:
        """Write the analysis to a JSON file (a local path or an fsspec URL), whole.

        A local file is written beside its target and moved into place (a full disk
        leaves the old file, never half a new one); a new one gets mode 0600, like a
        fit's result (:func:`~dask_dppca.io.output.write_json`).

        Parameters
        ----------
        path : str or os.PathLike
            A local path (``file://`` and ``~`` too) or an fsspec URL.
        overwrite : bool, default True
            Whether an existing file may be replaced (False: the result is kept beside
            it and the error names both).
        storage_options : dict, optional
            fsspec options for a URL.

        Returns
        -------
        str
            Where it went, as it may be shown (secrets masked).
        """
        return write_json(path, self.to_dict(), storage_options, name="path", overwrite=overwrite)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> PrivateAnalysis:
        """Read an analysis written by :meth:`save` (nothing is recomputed)."""
        with open(os.path.expanduser(path), encoding="utf-8") as handle:
            return cls.from_dict(json.load(handle))

    def to_html(self, path: str | os.PathLike[str] | None = None, **kwargs: Any) -> str:
        """The publishable, self-contained HTML report (:mod:`dask_dppca.analysis.report`).

        Parameters
        ----------
        path : str or os.PathLike, optional
            Write the report there (one file: plots inline, no network at view time).
        **kwargs
            ``budget`` (the ledger charged: its rows and what remains), ``reference``
            (non-private scree values YOU supply, labelled NOT PRIVATE), ``title``.

        Returns
        -------
        str
            The HTML text.
        """
        from .report import render_report

        text = render_report(self, **kwargs)
        if path is not None:  # whole, mode 0600 when new: as save()
            write_bytes(path, text.encode("utf-8"), name="path", overwrite=True)
        return text

    def privacy_table(self) -> str:
        """The split table as plain text."""
        return _table(self.privacy)

    def _repr_html_(self) -> str:
        k = self.directions.shape[0]
        head = "".join(f"<th>PC{i + 1}</th>" for i in range(k))
        rows = "".join(
            f"<tr><th>{html.escape(m)}</th>"
            + "".join(f"<td>{v:.4g}</td>" for v in values)
            + "</tr>"
            for m, values in self.scree["values"].items()
        )
        cols = ["stage", "release", "guarantee", "parameter", "sensitivity", "noise", "drawn on"]
        prows = "".join(
            "<tr>" + "".join(f"<td>{html.escape(str(r.get(c, '')))}</td>" for c in cols) + "</tr>"
            for r in _display_rows(self.privacy)
        )
        meta = self.meta
        summary = (
            f"<pre>{html.escape(self.score_map.summary())}</pre>"
            if isinstance(self.score_map, ScoreMap)
            else ""
        )
        return (
            f"<div><b>Private PCA analysis</b> (n={meta.get('n_samples')}, "
            f"d={meta.get('n_features')}, total epsilon={meta.get('epsilon')}, "
            f"delta={meta.get('delta')}; composed epsilon {meta.get('composed_epsilon', 0):.6g})"
            f"<table><tr><th>scree</th>{head}</tr>{rows}</table>{summary}"
            f"<table><tr>{''.join(f'<th>{c}</th>' for c in cols)}</tr>{prows}</table></div>"
        )

    def __repr__(self) -> str:
        k, d = self.directions.shape
        return (
            f"PrivateAnalysis(k={k}, d={d}, methods={list(self.scree['values'])}, "
            f"epsilon={self.meta.get('epsilon')}, delta={self.meta.get('delta')})"
        )


#: Each scree method's line and marker: distinct, so no line hides another (the clipped
#: and Huber values often coincide).
_SCREE_STYLES = {
    "clipped": ("-", "o", "C0"),
    "huber": ("--", "s", "C1"),
    "winsorized": (":", "^", "C2"),
    "robust": ("-.", "D", "C3"),
}


def _scree_style(method: str, default: bool) -> dict[str, Any]:
    """The plot style of a method's line: the default drawn thick and on top."""
    line, marker, colour = _SCREE_STYLES.get(method, ("-", "o", None))
    label = f"{method} (private)" + (", default: read this" if default else "")
    return {
        "linestyle": line,
        "marker": marker,
        "color": colour,
        "linewidth": 2.8 if default else 1.3,
        "markersize": 7 if default else 5,
        "markerfacecolor": colour if default else "none",
        "zorder": 3 if default else 2,
        "label": label,
    }


def _score_map_of(record: Any) -> Any:
    if isinstance(record, Mapping) and "frame" in record and "histograms" in record:
        return ScoreMap.from_dict(dict(record))
    return record


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return value


def _display_rows(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    out = []
    for r in rows:
        if "mu" in r:
            param = f"mu={r['mu']:.4g}"
        elif "delta" in r and r.get("delta") is not None:
            param = f"epsilon={r['epsilon']:.4g}, delta={r['delta']:.3g}"
        else:
            param = f"epsilon={r.get('epsilon', 0):.4g}"
        if r.get("count", 1) > 1:
            param += f" (x{r['count']})"
        out.append(
            {
                "stage": r["stage"],
                "release": r["release"],
                "guarantee": r["guarantee"],
                "parameter": param,
                "sensitivity": _short(r.get("sensitivity")),
                "noise": _short(r.get("noise")),
                "drawn on": str(r.get("released_on", "")),
            }
        )
    return out


def _short(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(f"{v:.3g}" for v in value[:3]) + (", ..." if len(value) > 3 else "")
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _table(rows: list[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    shown = _display_rows(rows)
    if not shown:
        return ""
    cols = list(shown[0]) if columns is None else list(columns)
    widths = {c: max(len(c), *(len(r[c]) for r in shown)) for c in cols}
    lines = ["  ".join(c.ljust(widths[c]) for c in cols).rstrip()]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in cols).rstrip() for r in shown]
    return "\n".join(lines)


def _sampler(random_state: int | None) -> NoiseSampler:
    return OpenDPSampler() if random_state is None else SeededSampler(random_state)


def _seeded_selector(seed: int):  # NOT PRIVATE: tests and examples only
    rng = np.random.default_rng(seed)

    def select(scores: np.ndarray, scale: float) -> int:
        noisy = np.asarray(scores, dtype=np.float64) + rng.gumbel(0.0, scale / 2.0, len(scores))
        return int(np.argmax(noisy))

    return select


def analyze(
    X: Any,
    n_components: int = 5,
    *,
    epsilon: float = 3.0,
    delta: float = 1e-5,
    split: Mapping[str, float] | None = None,
    methods: Sequence[str] = ("clipped", "winsorized", "huber", "robust"),
    score_map: ScoreMapStage | bool | None = True,
    groups: Any = None,
    group_domain: Sequence[Any] | None = None,
    score_axes: tuple[int, int] = (0, 1),
    bins: tuple[int, int] | None = None,
    score_methods: Sequence[str] = ("additive",),
    mono: bool = False,
    design: Any = "auto",
    spatial_sign: str = "sphere",
    radius: float | None = None,
    scheduler: Any = None,
    trusted_worker: str | None = None,
    require_trusted: bool = False,
    random_state: int | None = None,
    progress: bool = False,
    component: str | None = None,
    storage_options: dict | None = None,
    allow_fill_values: bool = False,
    show_split: Callable[[str], Any] | None = None,
) -> PrivateAnalysis:
    """Release a private PCA analysis of ``X`` under ONE total (epsilon, delta).

    Parameters
    ----------
    X : array-like, dask array, Zarr store or path, xarray, dask DataFrame
        As for :meth:`~dask_dppca.decomposition.estimator.DPPCA.fit`.
    n_components : int, default 5
        k, the directions and scree values released.
    epsilon, delta : float
        The total the whole analysis spends (exact composition of all its parts).
    split : mapping of str to float, optional
        Public stage shares (default directions 1/2, scree 1/4, score map 1/4; stages
        not run drop out and the rest are renormalised).
    methods : sequence of str
        Scree estimators: any of ``"clipped"``, ``"winsorized"``, ``"huber"``,
        ``"robust"`` (the robust one costs nothing beyond the quantiles all need).
    score_map : ScoreMapStage or bool, default True
        True: the private score map of components ``score_axes``
        (:class:`~dask_dppca.analysis.stages.score_map.PrivateScoreMapStage`); False or None: none;
        or a stage of your own.  Its parts join the split.
    groups : array-like or str, optional
        One label per row, or the name of a column / variable / array of ``X``
        (:func:`~dask_dppca.analysis.stages.score_map.resolve_groups`): per-group score maps.
    group_domain : sequence, optional
        The PUBLIC labels of ``groups`` (required with it); others count as "other".
    score_axes : (int, int), default (0, 1)
        The components of the score map (0-based).
    bins : (int, int), optional
        The score map's grid; by default one that grows with n epsilon, from public
        parameters only (:func:`~dask_dppca.analysis.stages.score_map.auto_bins`).
    score_methods : sequence of str, default ("additive",)
        The score map's histograms: ``"additive"`` and/or ``"sparse"``.
    mono : bool, default False
        Monotone (non-increasing) post-processing of each method's values.
    spatial_sign : {"sphere", "winsor"}, default "sphere"
        The directions' spatial sign (:class:`~dask_dppca.decomposition.estimator.DPPCA`): "sphere"
        estimates the spatial Kendall matrix's eigenvectors (the covariance's for
        elliptical data); "winsor" with a PUBLIC ``radius`` in the data's units (of
        ``(x_i - x_j) / sqrt 2``) counts pairs closer than it with their full
        difference: covariance-like directions on bounded data (docs/method.md).
    radius : float, optional
        The winsorizing radius (``spatial_sign="winsor"``).  Never tune it on the data.
    design, scheduler, trusted_worker, require_trusted, progress, component, storage_options
        As for :class:`~dask_dppca.decomposition.estimator.DPPCA` and its ``fit``.
    random_state : int, optional
        NOT PRIVATE: seeds every noise draw, for tests and examples only.
    allow_fill_values : bool, default False
        As for :meth:`~dask_dppca.decomposition.estimator.DPPCA.fit`: read
        chunks missing from a Zarr store as its fill value (a store written sparsely on purpose).
    show_split : callable, optional
        Called with the split table (text) before anything is read (``print`` shows it).

    Returns
    -------
    PrivateAnalysis
    """
    k = integer_at_least("n_components", n_components, 1)
    eps, dlt = validate_privacy_parameters(epsilon, delta)
    chosen = _check_methods(methods)
    sign = _check_spatial_sign(spatial_sign, radius)
    if score_map is True:
        X, labels = resolve_groups(X, groups, component)
        score_map = PrivateScoreMapStage(
            labels, group_domain, score_axes, bins, score_methods, random_state
        )
    elif groups is not None or group_domain is not None:  # no stage, or a stage of its own
        raise ValueError("groups: only the default score map (score_map=True) takes groups")
    elif score_map is False or score_map is None:
        score_map = None
    analysis_id = uuid.uuid4().hex
    planned = [PlannedPart("directions", "directions", "gaussian"), *_scree_plan(k, chosen)]
    if score_map is not None:
        planned += score_map.planned_parts(k)
    divided = split_budget(eps, dlt, planned, split)
    shown = _table(_split_rows(divided), ("stage", "release", "guarantee", "parameter"))
    logger.info("analysis %s: split\n%s", analysis_id, shown)
    if show_split is not None:
        show_split(f"privacy split of the total (epsilon={eps:g}, delta={dlt:g}):\n{shown}")
    # Every budget this analysis charges, resolved once (budgets_to_charge: the same
    # resolution as a fit's); the whole analysis must fit before any cluster starts.
    budgets = budgets_to_charge()
    for budget in budgets:
        budget.check(PartsCharge(divided.all_parts))

    mu_dir = divided.part("directions", "directions")
    assert hasattr(mu_dir, "mu")
    eps_dir, dlt_dir = _directions_target(mu_dir.mu, dlt / 2.0)
    sampler = _sampler(random_state)
    selector = opendp_selector if random_state is None else _seeded_selector(random_state)
    scree_charge = PartsCharge(divided.stage_parts("scree"))
    map_stage = None if score_map is None else score_map.planned_parts(k)[0].stage

    records = open_records(  # metadata only
        X, component, storage_options=storage_options, allow_fill_values=allow_fill_values
    )
    pinned = store_fingerprint(X, storage_options)  # each later stage reads the same data

    def unchanged(before: str) -> None:
        check_unchanged(X, storage_options, pinned, before)

    # What each stage released, as it is released: whatever stops the analysis later,
    # what was drawn (and paid for) goes out with the error (``partial_analysis``).
    released: dict[str, Any] = {"rows": []}

    def result(complete: bool) -> PrivateAnalysis:
        meta = {
            "analysis_id": analysis_id,
            "epsilon": eps,
            "delta": dlt,
            "shares": divided.shares,
            "scale": divided.scale,
            "composed_epsilon": compose(divided.all_parts).epsilon(dlt),
            "n_components": k,
            "methods": list(chosen),
            "private": random_state is None,
            "parts": [part_to_dict(p) for p in divided.all_parts],
            "spatial_sign": sign.name,
            "radius": sign.radius,
            "directions_estimate": directions_note(sign.name, sign.radius),
            **released.get("meta", {}),
        }
        if not complete:
            meta["released_stages"] = [
                s for s in ("directions", "scree", "score map") if s in released
            ]
        return _assembled(released, k, meta)

    try:
        # One compute target for every stage, the directions' fit included: the same
        # client (one connection to a scheduler address), and rows in memory sent once.
        with compute_target(scheduler) as target:
            records = records.counted(target)
            n, d = records.shape
            released["meta"] = {
                "n_samples": n,
                "n_features": d,
                "dataset": records.dataset,
                "row_chunks": None if records.row_chunks is None else list(records.row_chunks),
            }
            estimator = DPPCA(
                n_components=k,
                epsilon=eps_dir,
                delta=dlt_dir,
                spatial_sign=spatial_sign,
                radius=radius,
                design=design,
                scheduler=target.client if isinstance(target, ClusterTarget) else scheduler,
                trusted_worker=trusted_worker,
                require_trusted=require_trusted,
                random_state=random_state,
                progress=progress,
            )
            _, plan, directions_release = estimator.planned_release(
                n, d, records.row_chunks, target.n_threads
            )
            stages: list[tuple[str, Any]] = [
                ("directions", directions_release),
                ("scree", scree_charge),
            ]
            if map_stage is not None:
                stages.append((map_stage, PartsCharge(divided.stage_parts(map_stage))))
            # Every stage reserved together, before anything is read: concurrent analyses
            # are admitted whole or refused whole; a stage never started is given back.
            transaction = reserve_transaction(
                stages,
                transaction_id=analysis_id,
                label=f"analysis {analysis_id}",
                dataset=records.dataset,
                budgets=budgets,
            )
            try:
                with transaction as reserved, ExitStack() as later_stages:
                    if records.in_memory:
                        # Kept on the workers for the whole analysis: the fit and every later
                        # pass read these blocks (a lazy input is read by each pass, never held).
                        records = records.kept_on(target, plan.block_sizes)  # scattered
                    blocks = records.blocks(plan.block_sizes)
                    estimator.fit(records)  # the directions stage: it claims its reservation
                    released["directions"] = estimator
                    named = records.feature_names  # a table's columns (public), else None
                    released["meta"]["feature_names"] = (
                        list(named) if named is not None else input_feature_names(X, estimator)
                    )
                    released["rows"].append(_directions_row(estimator.privacy_))
                    directions = np.asarray(estimator.components_, dtype=np.float64)
                    # The directions' release warned of an untrusted worker, if any: once.
                    later_stages.enter_context(untrusted_warning_given())
                    unchanged("the scree")
                    with reserve_release(
                        scree_charge, fit_id=reserved.stage_id("scree"), dataset=records.dataset
                    ):
                        scree, scree_rows = _scree_stage(
                            blocks,
                            plan.block_sizes,
                            plan.block_pairs,
                            directions,
                            divided,
                            chosen,
                            sampler,
                            selector,
                            target,
                            trusted_worker,
                            require_trusted,
                            progress,
                            reserved.stage_id("scree"),
                        )
                    if mono:
                        scree["values"] = {
                            m: monotone(v).tolist() for m, v in scree["values"].items()
                        }
                    released["scree"] = scree
                    released["rows"] += scree_rows
                    if score_map is not None:
                        assert map_stage is not None  # the score map's parts name its stage
                        unchanged("the score map")
                        # A pass over the records in a few tasks a thread, not one per block
                        # (rows in memory stay in the blocks resident on the workers).
                        rows_in = (
                            blocks
                            if records.in_memory
                            else records.blocks(
                                pass_block_sizes(plan.block_sizes, d, target.n_threads)
                            )
                        )
                        result_map, map_rows = score_map.run(
                            {
                                "blocks": rows_in,
                                "directions": directions,
                                "target": target,
                                "trusted_worker": trusted_worker,
                                "require_trusted": require_trusted,
                                "analysis_id": analysis_id,
                                "fit_id": reserved.stage_id(map_stage),
                                "dataset": records.dataset,
                                "progress": progress,
                            },
                            divided,
                        )
                        released["score map"] = result_map
                        released["rows"] += map_rows
                        del rows_in
                    unchanged("handing back the result (a stage may have read the new version)")
            except Exception as error:  # any stage, whatever the surface error
                lost = lost_scheduler(error, target, f"analysis {analysis_id}")
                if lost is None:
                    raise
                raise lost from None
            del blocks, records  # the resident blocks leave the workers (before a client closes)
    except BaseException as error:
        if "directions" in released:
            _attach_partial(error, result(complete=False), score_map is not None)
        raise
    return result(complete=True)


def _directions_row(report: Mapping[str, Any]) -> dict[str, Any]:
    """The privacy table's row of the directions' release."""
    return {
        "stage": "directions",
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


def _assembled(released: dict[str, Any], k: int, meta: dict[str, Any]) -> PrivateAnalysis:
    """The analysis of what ``released`` holds (every stage, or those released so far)."""
    estimator = released["directions"]
    scree = released.get("scree") or {"values": {}, "design": None}
    scree["pve_topk"] = {
        m: (
            np.maximum(v, 0) / s if (s := float(np.maximum(v, 0).sum())) > 0 else np.zeros(k)
        ).tolist()
        for m, v in ((m, np.asarray(v)) for m, v in scree["values"].items())
    }
    meta["directions_fit_id"] = estimator.privacy_.get("fit_id")
    result = PrivateAnalysis(
        directions=np.asarray(estimator.components_, dtype=np.float64),
        kendall_eigenvalues=np.asarray(estimator.eigenvalues_, dtype=np.float64),
        scree=scree,
        privacy=list(released["rows"]),
        score_map=released.get("score map"),
        meta=meta,
    )
    result.notices = release_notices(result)  # post-processing of the released values
    return result


def _attach_partial(error: BaseException, partial: PrivateAnalysis, with_map: bool) -> None:
    """Give ``error`` the stages released before it (``error.partial_analysis``) and a
    note naming what was released and what was not.
    """
    done = partial.meta.get("released_stages", [])
    stages = ["directions", "scree"] + (["score map"] if with_map else [])
    missing = [s for s in stages if s not in done]
    if not missing:
        partial.meta.pop("released_stages", None)  # all drawn: only the return was cut short
    try:
        error.partial_analysis = partial  # type: ignore[attr-defined]
    except AttributeError:  # an exception type without a __dict__: the note says it
        pass
    error.add_note(
        f"the analysis released {', '.join(done)}"
        + (f"; not released: {', '.join(missing)}" if missing else "")
    )


def _split_rows(split: BudgetSplit) -> list[dict[str, Any]]:
    return [dict(row) for row in split.table()]


def _scree_stage(
    blocks,
    block_sizes,
    block_pairs,
    directions,
    split,
    methods,
    sampler,
    selector,
    target,
    trusted_worker,
    require_trusted,
    progress,
    stage_id,
):
    """The scree stages: quantiles, then the Gaussian means, then the Huber steps."""
    k = directions.shape[0]
    n_pairs, degree = scree_design(tuple(block_sizes), tuple(block_pairs))
    slack = summation_slack(
        n_pairs, sub_block_pairs_per_record(len(block_sizes), tuple(block_pairs))
    )
    place = {
        "trusted_worker": trusted_worker,
        "require_trusted": require_trusted,
        "progress": progress,
        "stage_id": stage_id,
    }
    winsorized = "winsorized" in methods
    upper_level = _upper_quantile(methods)
    levels = tuple(((0.5, 1.0 - WINSOR_LEVEL) if upper_level else (0.5,)) for _ in range(k)) + (
        (0.5,),
    )
    quantile = split.part("scree", "quantiles")
    q_mech = PairQuantiles(
        levels, quantile.epsilon, n_pairs, degree, selector, n_features=directions.shape[1]
    )
    released, where = release_statistic(
        target,
        q_mech.release,
        scree_histogram_graph(
            blocks, directions, block_pairs, trace=True, n_threads=target.n_threads
        ),
        f"{stage_id}-quantiles",
        charge=q_mech,
        **place,
    )
    what = "pair quantiles (median; upper level)" if upper_level else "pair quantiles (median)"
    rows = [_row("scree", what, q_mech.describe(), where)]
    # The scale the clip and the Huber threshold are set from (post-processing).
    robust = scree_scales(released, directions.shape[1])
    robust_trace = robust_from_quantile(released[k][0])
    values: dict[str, list[float]] = {}
    if "robust" in methods:
        values["robust"] = [robust_from_quantiles(r[0], r[1]) for r in released[:k]]
    clip = np.concatenate([CLIP_MULTIPLE * robust, [CLIP_MULTIPLE * robust_trace]])
    # The winsorizing level, not below the clip's floor (the clip's reason, scree_scales).
    floor = CLIP_MULTIPLE * scree_floor(released[k][0], directions.shape[1])
    upper = (
        np.array([max(winsorizing_level(r[1]), floor) for r in released[:k]])
        if winsorized
        else None
    )
    huber = "huber" in methods
    tau = HUBER_MULTIPLE * robust
    centre = robust.copy()
    mechanisms: list[tuple[str, GaussianStatistic, slice]] = []
    start = 0

    def statistic(name: str, ranges: np.ndarray, mu: float) -> GaussianStatistic:
        return GaussianStatistic(
            name, tuple(float(r) for r in ranges), mu, n_pairs, degree, slack, sampler
        )

    # The clipped vector (k scree values and the trace) is always computed: the trace
    # gives the PVE over all d.
    clipped_mu = split.part("scree", "clipped").mu if "clipped" in methods else None
    if clipped_mu is not None:
        mechanisms.append(("clipped", statistic("clipped", clip, clipped_mu), slice(0, k + 1)))
    start = k + 1
    if winsorized:
        assert upper is not None
        mu = split.part("scree", "winsorized").mu
        mechanisms.append(
            ("winsorized", statistic("winsorized", upper, mu), slice(start, start + k))
        )
        start += k
    huber_mu = float(split.part("scree", "huber").mu) if huber else 0.0
    if huber:
        mechanisms.append(
            (
                "huber",
                statistic("huber step 1", huber_ranges(centre, tau), huber_mu),
                slice(start, start + k),
            )
        )

    def release_means(total):
        sums = total.to_float()
        return [mech.release(sums[s]) for _, mech, s in mechanisms]

    if mechanisms:
        out, where = release_statistic(
            target,
            release_means,
            scree_sums_graph(
                blocks,
                block_pairs,
                directions,
                clip,
                upper,
                centre if huber else None,
                tau if huber else None,
                n_threads=target.n_threads,
            ),
            f"{stage_id}-means",
            charge=PartsCharge(tuple(p for _, mech, _ in mechanisms for p in mech.parts)),
            **place,
        )
        for (name, mech, _), noisy in zip(mechanisms, out):
            rows.append(_row("scree", mech.name, mech.describe(), where))
            if name == "clipped":
                values["clipped"] = noisy[:k].tolist()
                trace = float(noisy[k])
            elif name == "winsorized":
                assert upper is not None
                values["winsorized"] = [
                    gaussian_consistent_winsorized(float(m), float(u)) for m, u in zip(noisy, upper)
                ]
            else:
                centre = centre + noisy
    if huber:
        for step in range(2, HUBER_STEPS + 1):
            mech = statistic(f"huber step {step}", huber_ranges(centre, tau), huber_mu)

            def release_step(total, mech=mech):
                return mech.release(total.to_float())

            # The Huber scores alone: the clipped sums were released with step 1.
            noisy, where = release_statistic(
                target,
                release_step,
                scree_sums_graph(
                    blocks,
                    block_pairs,
                    directions,
                    None,
                    None,
                    centre,
                    tau,
                    n_threads=target.n_threads,
                ),
                f"{stage_id}-huber-{step}",
                charge=mech,
                **place,
            )
            rows.append(_row("scree", mech.name, mech.describe(), where))
            centre = centre + noisy
        values["huber"] = centre.tolist()
    scree: dict[str, Any] = {
        "values": values,
        "default": scree_default(methods),
        "quantiles": [list(r) for r in released],
        "design": {"n_pairs": n_pairs, "max_degree": degree},
    }
    if clipped_mu is not None:
        scree["trace"] = trace
        scree["pve_total"] = (np.asarray(values["clipped"]) / trace).tolist() if trace > 0 else None
    return scree, rows


def _row(stage: str, release: str, described: dict[str, Any], where: str) -> dict[str, Any]:
    row = {"stage": stage, "release": release, **described, "released_on": where}
    if "sigma" in row:
        row["noise"] = row.pop("sigma")
    elif "scale" in row:
        row["noise"] = row.pop("scale")
    return row
