"""The registry of the analysis's stages: one entry per stage, in the order they run.

Everything that lists stages iterates :data:`REGISTRY`:
:func:`~dask_dppca.analysis.run.analyze` and
:func:`~dask_dppca.analysis.plan.plan_analysis` (the stages that run by default:
:func:`default_stages`, each stage's default share and title), the CLI's ``--split``
help and one ``--NAME`` flag per optional stage, the report, the app and the privacy
table.  The entries are plain data (importing this module imports no Dask: the command
line's ``--help`` stays light); :func:`build_stage` imports a stage's module when it
runs.  The order a stage runs in is its own (``Stage.after``).
Adding a stage is one module here and one entry below (CONTRIBUTING.md, "Adding a
private statistic").
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "REGISTRY",
    "SCALINGS",
    "StageInfo",
    "build_stage",
    "check_scale",
    "chosen_optional",
    "default_shares",
    "default_stages",
    "optional_stages",
    "stage_info",
]


@dataclass(frozen=True)
class StageInfo:
    """One registered stage (public metadata only).

    Parameters
    ----------
    name : str
        Its key in the split, the ledger, ``--split`` and the result.
    title : str
        What a reader calls it.
    default_share : float
        Its share of the total when the user gives none (renormalised over the stages
        that run).
    optional : bool
        Off unless asked for (``analyze(stages=[name])``, ``dask-dppca analyze --NAME``).
    help : str
        One line for the CLI and the app.
    factory : str
        ``"module:Class"`` of the stage object (:func:`build_stage`), relative to this
        package.
    """

    name: str
    title: str
    default_share: float
    optional: bool
    help: str
    factory: str


#: The registered stages, in the order they are listed (the optional ones run only when
#: asked for; each runs after the stages its ``after`` names).
REGISTRY: tuple[StageInfo, ...] = (
    StageInfo(
        "scale", "scale", 0.2, True,
        "private robust scaling: per column a private median and quantile range, read by "
        "every later stage (analyze(scale='robust'), --scale robust)",
        ".scale:ScaleStage",
    ),
    StageInfo(
        "directions", "directions", 0.5, False,
        "the private principal directions (a DPPCA fit)", ".directions:DirectionsStage",
    ),
    StageInfo(
        "scree", "scree", 0.25, False,
        "private scree values along the directions", ".scree:ScreeStage",
    ),
    StageInfo(
        "score_map", "score map", 0.25, False,
        "a private score map (per group with groups)", ".score_map:ScoreMapStage",
    ),
    StageInfo(
        "median", "median", 0.1, True,
        "a private coordinate-wise median (the centre, one value per feature)",
        ".median:MedianStage",
    ),
)  # fmt: skip


#: ``analyze(scale=...)``: private robust scaling (the scale stage), or the data as they are.
SCALINGS = ("robust", "none")


def check_scale(scale: object) -> str:
    """``scale`` checked: one of :data:`SCALINGS` (a clear error naming the parameter)."""
    if scale not in SCALINGS:
        raise ValueError(f"scale: expected one of {', '.join(map(repr, SCALINGS))}, got {scale!r}")
    return str(scale)


def stage_info(name: str) -> StageInfo:
    """The registered stage called ``name`` (a clear error naming the known ones)."""
    for info in REGISTRY:
        if info.name == name:
            return info
    known = ", ".join(info.name for info in REGISTRY)
    raise ValueError(f"stages: no stage {name!r} (known: {known})")


def chosen_optional(names: str | Sequence[str]) -> list[str]:
    """The optional stages asked for (``analyze(stages=...)``), each checked against the
    registry, once each, in the order given.
    """
    chosen = [names] if isinstance(names, str) else list(names)
    for name in chosen:
        if not stage_info(name).optional:
            raise ValueError(f"stages: {name!r} always runs; name only optional stages")
    return list(dict.fromkeys(chosen))


def optional_stages() -> tuple[StageInfo, ...]:
    """The stages that run only when asked for, in order."""
    return tuple(info for info in REGISTRY if info.optional)


def default_shares(names: Mapping[str, Any] | list[str] | tuple[str, ...]) -> dict[str, float]:
    """Each named stage's default share (0 for a stage not registered)."""
    return {name: _share(name) for name in names}


def _share(name: str) -> float:
    for info in REGISTRY:
        if info.name == name:
            return info.default_share
    return 0.0  # a stage of your own needs its share in ``split`` (split_budget says so)


def stage_class(name: str) -> Any:
    """The class of the registered stage ``name`` (its module imported now)."""
    module, _, attribute = stage_info(name).factory.partition(":")
    return getattr(importlib.import_module(module, __name__), attribute)


def build_stage(name: str, **parameters: Any) -> Any:
    """A new stage object of the registered stage ``name`` with ``parameters``."""
    return stage_class(name)(**parameters)


def default_stages() -> list[Any]:
    """The stages an analysis runs when not told which: every registered stage that is
    not optional, with its defaults, in the registry's order.
    """
    return [build_stage(info.name) for info in REGISTRY if not info.optional]
