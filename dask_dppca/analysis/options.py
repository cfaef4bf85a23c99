"""What an analysis runs: its stage objects, its compute options, and the old keywords.

:func:`~dask_dppca.analysis.run.analyze` and
:func:`~dask_dppca.analysis.plan.plan_analysis` take the common parameters flat (k, the
total, the split, the groups, the scaling, the seed) and the rest on objects: each stage
its own (``stages=[ScreeStage(methods=...), ScoreMapStage(bins=...)]``) and :class:`Compute` where
and how it reads and computes.  :func:`chosen_stages` turns what they were given into the
stage objects to bind; the keywords they took before (``methods=``, ``score_map=``,
``scheduler=``, ``stages=["median"]``, ...) still work for one release, each with a
:class:`DeprecationWarning` naming its new place (:data:`MOVED`).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..privacy.mechanisms.accounting import BudgetSplit, split_budget
from .stage import StageSetup, ordered, stage_bound, stage_share
from .stages import build_stage, check_scale, chosen_optional, default_stages, stage_class

__all__ = [
    "MOVED",
    "Compute",
    "analysis_split",
    "bound_stages",
    "chosen_stages",
    "shell_stages",
]


@dataclass(frozen=True)
class Compute:
    """Where and how an analysis reads its input and computes (no privacy parameter).

    Parameters
    ----------
    scheduler : str, Client or None
        As for :class:`~dask_dppca.decomposition.estimator.DPPCA`: a scheduler address, a
        ``distributed.Client``, ``"threads"``/``"synchronous"``, or None (an embedded
        ``LocalCluster``).
    trusted_worker : str, optional
        The worker address that adds the noise.
    require_trusted : bool, default False
        Refuse unless a trusted worker exists.
    progress : bool, default False
        Show the run's progress (a bar in a notebook or terminal).
    component : str, optional
        The array inside a Zarr group (nested paths: ``"sub/X"``).
    storage_options : dict, optional
        Fsspec options for a URL input.
    allow_fill_values : bool, default False
        Read chunks missing from a Zarr store as its fill value (a store written sparsely
        on purpose).

    Examples
    --------
    >>> from dask_dppca.analysis.options import Compute
    >>> Compute(scheduler="threads").fit_options()
    {'trusted_worker': None, 'require_trusted': False, 'progress': False}
    """

    scheduler: Any = None
    trusted_worker: str | None = None
    require_trusted: bool = False
    progress: bool = False
    component: str | None = None
    storage_options: dict[str, Any] | None = None
    allow_fill_values: bool = False

    def opened(self, X: Any) -> Any:
        """``X``'s records as these options read them (public metadata only)."""
        from ..io import open_records

        return open_records(
            X,
            self.component,
            storage_options=self.storage_options,
            allow_fill_values=self.allow_fill_values,
        )

    def fit_options(self) -> dict[str, Any]:
        """The release options the directions' fit takes (its placement and progress)."""
        return {
            "trusted_worker": self.trusted_worker,
            "require_trusted": self.require_trusted,
            "progress": self.progress,
        }


#: Each old keyword of ``analyze`` and ``plan_analysis`` -> (the registered stage whose
#: object now holds it, or ``"compute"`` for :class:`Compute`; its field there).
MOVED: dict[str, tuple[str, str]] = {
    "methods": ("scree", "methods"),
    "mono": ("scree", "mono"),
    "score_axes": ("score_map", "axes"),
    "bins": ("score_map", "bins"),
    "score_methods": ("score_map", "methods"),
    "group_domain": ("score_map", "group_domain"),
    "design": ("directions", "design"),
    "spatial_sign": ("directions", "spatial_sign"),
    "radius": ("directions", "radius"),
    **{
        name: ("compute", name)
        for name in (
            "scheduler",
            "trusted_worker",
            "require_trusted",
            "progress",
            "component",
            "storage_options",
            "allow_fill_values",
        )
    },
}

#: The stage every analysis has (added when ``stages`` leaves it out): the others read it.
_ALWAYS = "directions"
#: The stage ``scale="robust"`` adds.
_SCALE = "scale"


def _warn(caller: str, old: str, new: str, level: int = 4) -> None:
    if not caller:  # a shell's own translation (the app's cost line): no warning
        return
    # stacklevel: this function, chosen_stages, analyze/plan_analysis, their caller.
    warnings.warn(
        f"{caller}({old}=...) is deprecated and will be removed in 0.3: pass {new} instead",
        DeprecationWarning,
        stacklevel=level,
    )


def _new_way(name: str) -> str:
    """Where the old keyword ``name`` now goes, as a user writes it."""
    owner, attribute = MOVED[name]
    if owner == "compute":
        return f"compute=Compute({attribute}=...)"
    return f"stages=[{stage_class(owner).__name__}({attribute}=...), ...]"


def chosen_stages(
    caller: str,
    stages: Sequence[Any] | None,
    compute: Compute | None,
    old: Mapping[str, Any],
    scale: str = "none",
) -> tuple[list[Any], Compute]:
    """The stage objects and the compute options of one call, the old keywords ``old``
    mapped onto them (each with a :class:`DeprecationWarning` naming the new way; none
    when ``caller`` is empty).

    ``stages`` None or empty: the registry's default stages (the directions alone:
    ``[DirectionsStage()]``); otherwise exactly those, the directions added when
    missing.  A name (``"median"``) in ``stages`` is the registered stage with its
    defaults (deprecated); names only add to the default stages.
    ``scale="robust"`` adds the scale stage when they have none.
    """
    robust = check_scale(scale) == "robust"
    unknown = sorted(set(old) - set(MOVED) - {"score_map"})
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
    chosen = _stage_objects(caller, stages)
    if "score_map" in old:
        _warn(
            caller, "score_map", "stages=[...] with or without ScoreMapStage(...) or your own stage"
        )
        chosen = _with_score_map(chosen, old["score_map"])
    moved: dict[str, dict[str, Any]] = {}
    for name in (n for n in MOVED if n in old):  # in the table's order
        _warn(caller, name, _new_way(name))
        owner, attribute = MOVED[name]
        moved.setdefault(owner, {})[attribute] = old[name]
    compute = dataclasses.replace(compute or Compute(), **moved.pop("compute", {}))
    for owner, values in moved.items():
        chosen = _with_values(chosen, owner, values)
    if not any(stage.name == _ALWAYS for stage in chosen):
        chosen.insert(0, build_stage(_ALWAYS))
    if robust and not any(stage.name == _SCALE for stage in chosen):
        chosen.append(build_stage(_SCALE))  # it runs first all the same (its ``after``)
    return chosen, compute


def shell_stages(
    optional: Sequence[str], flat: Mapping[str, Any], scale: str = "none"
) -> list[Any]:
    """The stage objects of a shell's flat options (the command line's, the app's): the
    default stages and the optional ones named, ``flat`` (keywords of :data:`MOVED` and
    ``score_map``) set on them without a warning.
    """
    chosen = [*default_stages(), *(build_stage(name) for name in chosen_optional(optional))]
    return chosen_stages("", chosen, None, flat, scale)[0]


def _stage_objects(caller: str, stages: Sequence[Any] | str | None) -> list[Any]:
    """The stage objects ``stages`` names (names: the default stages and those)."""
    given = [stages] if isinstance(stages, str) else list(stages or ())
    if not given:  # ``()`` was the old default: no optional stage
        return default_stages()
    names = [s for s in given if isinstance(s, str)]
    if not names:
        return given
    chosen_optional(names)  # checked: optional registered stages only
    built = {name: build_stage(name) for name in names}
    if len(names) == len(given):
        chosen = [*default_stages(), *built.values()]
    else:
        chosen = [built[s] if isinstance(s, str) else s for s in given]
    objects = ", ".join(f"{type(stage).__name__}()" for stage in chosen)
    _warn(caller, "stages", f"stage objects (stages=[{objects}])", level=5)
    return chosen


def _with_score_map(chosen: list[Any], score_map: Any) -> list[Any]:
    """``chosen`` with the old ``score_map=`` applied: True keeps the default map, False
    or None drops it, a stage of your own takes its place.
    """
    if score_map is True:
        return chosen
    place = [i for i, stage in enumerate(chosen) if stage.name == "score_map"]
    rest = [stage for stage in chosen if stage.name != "score_map"]
    if score_map is False or score_map is None:
        return rest
    at = place[0] if place else len(rest)
    return [*rest[:at], score_map, *rest[at:]]


def _with_values(chosen: list[Any], owner: str, values: dict[str, Any]) -> list[Any]:
    """``chosen`` with the registered stage ``owner``'s object given ``values`` (ignored,
    as before, when that stage does not run or is a stage of your own).
    """
    kind = stage_class(owner)
    if values.get("group_domain") is not None and not any(isinstance(s, kind) for s in chosen):
        raise ValueError("groups: only the default score map (score_map=True) takes groups")
    return [
        dataclasses.replace(stage, **values) if isinstance(stage, kind) else stage
        for stage in chosen
    ]


def bound_stages(stages: Sequence[Any], setup: StageSetup) -> list[Any]:
    """The stages of one analysis (or its plan), bound to what they share, in the order
    they run; groups need a stage that takes them (a score map).
    """
    chosen = ordered([stage_bound(stage, setup) for stage in stages])
    if setup.groups is not None and not any(getattr(s, "grouped", False) for s in chosen):
        raise ValueError(
            "groups: only a score map stage takes groups (stages=[ScoreMapStage(...)])"
        )
    return chosen


def analysis_split(
    chosen: Sequence[Any],
    k: int,
    d: int,
    epsilon: float,
    delta: float,
    split: Mapping[str, float] | None,
) -> BudgetSplit:
    """Every part of an analysis of ``chosen`` stages with its parameters: the split of
    the total (epsilon, delta) by the public rule (public parameters only).
    """
    if k > d:  # before the split is shown or any budget reserves it
        raise ValueError(f"n_components: must be in 1..{d} (d = {d}), got {k}")
    planned = [part for stage in chosen for part in stage.planned_parts(k, d)]
    shares = split if split is not None else {stage.name: stage_share(stage) for stage in chosen}
    return split_budget(epsilon, delta, planned, shares)
