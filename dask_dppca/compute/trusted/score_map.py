"""The score map stage on a compute target: three passes, three releases on the trusted worker.

:func:`release_score_map` is the one call an analysis makes for a score map, after the
directions are released: with the scores ``X V`` lazy on the workers (persisted there,
never gathered), it releases

1. the two private medians (one pass: the counts below every public candidate),
2. the two private radii about them (one pass: the counts of the deviations),
3. the histograms on the frame's grid, per group, and the noisy group sizes (one pass),

each through :func:`~.release.release_statistic`, so each exact statistic reaches
only its release task.  What comes back is a
:class:`~dask_dppca.privacy.mechanisms.score_map.ScoreMap`.
The caller charges ``mechanism.parts`` to its budgets before calling.  An analysis
shell, after its directions release, calls (``records``, ``plan``, ``target`` as in
``DPPCA.fit``)::

    mechanism = ScoreMapMechanism(n, epsilon_share, delta_share, bins=(10, 10),
                                  domain=labels_domain)          # public parameters only
    # ... charge mechanism.parts to every active budget ...
    scores = project_scores(records.blocks(plan.block_sizes), release.components, (0, 1))
    score_map = release_score_map(target, scores, mechanism, labels=labels)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import dask.array as da

from ...graph.score_stats import histogram_counts_graph, label_codes, quantile_counts_graph
from ...privacy.mechanisms.charges import PartsCharge
from ...privacy.mechanisms.contract import make_sampler
from ...privacy.mechanisms.frame import Frame
from ...privacy.mechanisms.laplace import IntegerNoise
from ...privacy.mechanisms.noise import NoiseSampler
from ...privacy.mechanisms.score_map import ScoreMap, ScoreMapMechanism
from ..target import ComputeTarget
from .release import release_statistic

__all__ = ["release_score_map"]


def release_score_map(
    target: ComputeTarget,
    scores: da.Array,
    mechanism: ScoreMapMechanism,
    *,
    labels: Any = None,
    axes: tuple[int, int] = (0, 1),
    gaussian_sampler: NoiseSampler | None = None,
    integer_sampler: IntegerNoise | None = None,
    stage_id: str = "",
) -> ScoreMap:
    """Release one private score map of ``scores`` (lazy, shape (n, 2)).

    Parameters
    ----------
    target : ComputeTarget
        Where it runs and releases (its :class:`~.placement.ReleaseOptions`).
    scores : dask.array.Array, shape (n, 2)
        E.g. :func:`~dask_dppca.graph.score_stats.project_scores` of the released
        directions; ``n`` must be ``mechanism.n_samples``.
    mechanism : ScoreMapMechanism
        Planned from public parameters (its ``domain`` when ``labels`` is given).
    labels : array-like, optional
        One label per row (:func:`~dask_dppca.graph.score_stats.label_codes` lists the
        accepted inputs); labels outside the domain count in the group "other".
    axes : (int, int)
        Recorded in the map (which components ``scores`` holds).
    gaussian_sampler, integer_sampler : optional
        The noise (private defaults: :func:`~dask_dppca.privacy.mechanisms.contract.make_sampler`'s
        ``"gaussian"`` and ``"discrete_laplace"``).
    stage_id : str, optional
        The analysis stage whose ledger rows the first release marks dispatched
        (:func:`~.release.release_statistic`).

    Returns
    -------
    ScoreMap
    """
    _check_inputs(scores, mechanism, labels)
    gaussian, integer = _samplers(mechanism, gaussian_sampler, integer_sampler)
    scores = target.persist(scores)  # the scores stay on the workers between passes
    run = functools.partial(release_statistic, target, stage_id=stage_id)
    frame = _release_frame(run, scores, mechanism, integer)
    x_edges, y_edges = frame.edges(mechanism.bins)
    codes = (
        None
        if labels is None
        else label_codes(labels, mechanism.domain or (), tuple(scores.chunks[0]))
    )
    (histograms, group_counts), where = run(
        functools.partial(mechanism.release_histograms, gaussian=gaussian, integer=integer),
        histogram_counts_graph(scores, x_edges, y_edges, codes, len(mechanism.group_names)),
        "score map: histograms",
        charge=PartsCharge(mechanism.parts[len(mechanism.frame.parts) :]),
    )
    privacy = mechanism.describe()
    privacy["released_on"] = where
    privacy["private"] = bool(gaussian.is_private and integer.is_private)
    return ScoreMap(frame, histograms, mechanism.group_names, axes, privacy, group_counts)


def _check_inputs(scores: da.Array, mechanism: ScoreMapMechanism, labels: Any) -> None:
    """Refuse scores of another length than planned, and labels the mechanism does not expect."""
    if scores.shape[0] != mechanism.n_samples:
        raise ValueError(
            f"scores: {scores.shape[0]} rows, but the mechanism was planned for "
            f"n_samples={mechanism.n_samples}"
        )
    if (labels is None) != (mechanism.domain is None):
        raise ValueError("labels: give labels exactly when the mechanism has a group domain")


def _samplers(
    mechanism: ScoreMapMechanism,
    gaussian_sampler: NoiseSampler | None,
    integer_sampler: IntegerNoise | None,
) -> tuple[NoiseSampler, IntegerNoise]:
    """The noise: the samplers given, else the private defaults (one Gaussian draw per cell)."""
    integer = integer_sampler if integer_sampler is not None else make_sampler("discrete_laplace")
    if gaussian_sampler is not None:
        return gaussian_sampler, integer
    n_entries = mechanism.histograms[mechanism.methods[0]].shape
    return make_sampler("gaussian", n_entries=n_entries[0] * n_entries[1]), integer


def _release_frame(
    run: Callable[..., tuple[Any, str]],
    scores: da.Array,
    mechanism: ScoreMapMechanism,
    integer: IntegerNoise,
) -> Frame:
    """Passes 1 and 2: the two private medians, then the two private radii about them;
    ``run`` is :func:`~.release.release_statistic` on the target.
    """
    frame_mechanism = mechanism.frame
    centre, _ = run(
        functools.partial(mechanism.release_centre, sampler=integer),
        quantile_counts_graph(scores, frame_mechanism.centre.candidates),
        "score map: centre",
        charge=PartsCharge(frame_mechanism.centre.parts * 2),
    )
    radius, _ = run(
        functools.partial(mechanism.release_radius, sampler=integer),
        quantile_counts_graph(scores, frame_mechanism.radius.candidates, centre=centre),
        "score map: radius",
        charge=PartsCharge(frame_mechanism.radius.parts * 2),
    )
    return frame_mechanism.frame(centre, radius)
