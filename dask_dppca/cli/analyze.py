"""``dask-dppca analyze STORE``: a private analysis (directions, scree, score map) under one
budget.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..analysis.stages import REGISTRY
from .inputs import (
    STORE_OPTION_HELP,
    add_input_arguments,
    add_stage_arguments,
    chosen_stages,
    input_location,
    input_storage_options,
    open_input,
    shares,
)

#: The scree plots ``--plots`` writes (``plot_scree(kind=...)``).
SCREE_PLOTS = ("scree", "pve_topk", "pve_total")


def add_parser(commands) -> None:
    """Register ``analyze`` on the ``dask-dppca`` sub-command parser."""
    analyze = commands.add_parser(
        "analyze",
        help="private directions, scree values and score map of a Zarr store or a Parquet/CSV "
        "table under ONE (epsilon, delta)",
        description=(
            "Release a private PCA analysis of the records (rows) of a Zarr array or a Parquet "
            "or CSV table: the private "
            "directions and, along them, private scree values (clipped, winsorized, Huber, "
            "robust), the PVE and a private score map (per group with --groups), all under one "
            "total (epsilon, delta) split by a public rule (printed before anything is read)."
        ),
    )
    groups = _stage_groups(analyze)
    _add_input_options(groups["input"])
    _add_privacy_options(groups)
    _add_score_map_options(groups["score_map"])
    _add_run_options(groups["run"])
    analyze.set_defaults(run=run)


def _stage_groups(analyze: argparse.ArgumentParser) -> dict[str, Any]:
    """The help's groups of options: the input, what every stage shares, one group per
    registered stage (its title and help from the registry), and where it runs.
    """
    groups: dict[str, Any] = {
        "input": analyze.add_argument_group("input"),
        "analysis": analyze.add_argument_group(
            "the analysis", "what every stage shares: k, the total and its split"
        ),
    }
    for info in REGISTRY:
        groups[info.name] = analyze.add_argument_group(f"{info.title} stage", info.help)
    groups["run"] = analyze.add_argument_group("compute and output")
    return groups


def _add_input_options(analyze: Any) -> None:
    add_input_arguments(analyze, STORE_OPTION_HELP, "the analysis")


def _add_privacy_options(groups: dict[str, Any]) -> None:
    """k, the total, the split (its help from the stage registry) and the directions'
    and scree's options; one ``--NAME`` flag per optional registered stage.
    """
    analysis = groups["analysis"]
    analysis.add_argument(
        "-k", "--n-components", type=int, default=5, help="components (default 5)"
    )
    analysis.add_argument(
        "--epsilon", type=float, default=3.0, help="TOTAL privacy epsilon > 0 (default 3)"
    )
    analysis.add_argument(
        "--delta", type=float, default=1e-5, help="TOTAL privacy delta in (0, 1) (default 1e-5)"
    )
    names = ", ".join(info.name for info in REGISTRY)
    defaults = " ".join(f"{info.name}={info.default_share:g}" for info in REGISTRY)
    analysis.add_argument(
        "--split",
        metavar="STAGE=SHARE",
        action="append",
        default=[],
        help=f"public share of a stage ({names}), repeatable "
        f"(default {defaults}; the shares of the stages that run are renormalised)",
    )
    add_stage_arguments(groups["analysis"], group_of=groups.get)
    groups["scree"].add_argument(
        "--methods",
        default="clipped,winsorized,huber,robust",
        help="comma-separated scree estimators (default clipped,winsorized,huber,robust)",
    )
    directions = groups["directions"]
    directions.add_argument(
        "--spatial-sign",
        choices=("sphere", "winsor"),
        default="sphere",
        help="the directions' spatial sign: sphere (the spatial Kendall matrix's "
        "eigenvectors, the covariance's for elliptical data) or winsor (with --radius: "
        "covariance-like directions on bounded data)",
    )
    directions.add_argument(
        "--radius",
        type=float,
        help="PUBLIC winsorizing radius of --spatial-sign winsor, in the data's units of "
        "(x_i - x_j) / sqrt(2); never tuned on the data",
    )


def _add_score_map_options(analyze: Any) -> None:
    analyze.add_argument(
        "--groups",
        metavar="LABELS",
        help="one label per record: the name of a column of a Parquet or CSV table, a Zarr "
        "array's path, or the name of an array in the store's Zarr group (with "
        "--component); needs --group-domain",
    )
    analyze.add_argument(
        "--group-domain",
        metavar="A,B,C",
        help="the PUBLIC labels of --groups, comma-separated (others count as 'other')",
    )
    analyze.add_argument(
        "--score-axes",
        default="1,2",
        metavar="I,J",
        help="the components of the score map, 1-based (default 1,2)",
    )
    analyze.add_argument(
        "--bins",
        default=None,
        metavar="MX,MY",
        help="score map grid (default: grows with n epsilon, from public parameters only)",
    )
    analyze.add_argument(
        "--score-methods",
        default="additive",
        help="comma-separated score map histograms: additive, sparse (default additive)",
    )
    analyze.add_argument(
        "--no-score-map", action="store_true", help="release no score map (directions and scree)"
    )


def _add_run_options(analyze: Any) -> None:
    """Where it runs, the budget, and what it writes."""
    analyze.add_argument(
        "--scheduler", help="Dask scheduler address (default: embedded LocalCluster)"
    )
    analyze.add_argument("--trusted-worker", help="worker address that adds the noise")
    analyze.add_argument(
        "--require-trusted", action="store_true", help="refuse unless a trusted worker exists"
    )
    analyze.add_argument("--budget", metavar="LEDGER", help="privacy budget ledger to charge")
    analyze.add_argument(
        "--output", default="analysis.json", help="result file (default analysis.json)"
    )
    analyze.add_argument(
        "--plots", metavar="DIR", help="folder for the scree, PVE and score map plots (PNG)"
    )
    analyze.add_argument(
        "--report",
        metavar="HTML",
        help="also write a self-contained HTML report (plots inline, the privacy table, the "
        "ledger's remaining budget)",
    )
    analyze.add_argument(
        "--feature-names",
        metavar="A,B,...",
        help="names of the d features for the report's loadings (default: the input's "
        "column names, else x0, x1, ...)",
    )
    analyze.add_argument("--force", action="store_true", help="replace an existing --output file")
    analyze.add_argument(
        "--no-progress",
        action="store_true",
        help="hide the progress display (one bar in a terminal, else a line on stderr "
        "every 10%% or 30 s)",
    )


def _pair(text: str, flag: str, offset: int = 0) -> tuple[int, int]:
    try:
        a, b = (int(v) - offset for v in text.split(","))
    except ValueError:
        raise ValueError(f"{flag}: expected two integers I,J, got {text!r}") from None
    return a, b


def run(args: argparse.Namespace) -> int:
    """Analyze a store, write the result, optionally the plots."""
    from contextlib import nullcontext

    from ..analysis.options import Compute
    from ..analysis.run import analyze
    from .budget import open_ledger
    from .kept import keep, kept_if_released
    from .signals import signals_deferred

    _check_outputs(args)
    records, score_options = _inputs(args)
    labels = score_options.pop("groups")
    budget = open_ledger(args.budget) if args.budget else None
    args.charged_budgets = [] if budget is None else [budget]  # for a stopped run's line
    with nullcontext() if budget is None else budget, kept_if_released(args):
        result = analyze(
            records,
            n_components=args.n_components,
            epsilon=args.epsilon,
            delta=args.delta,
            split=shares(args.split),
            stages=_stages(args, score_options),
            groups=labels,
            scale=args.scale,
            compute=Compute(
                scheduler=args.scheduler,
                trusted_worker=args.trusted_worker,
                require_trusted=args.require_trusted,
                progress=not args.no_progress,  # a bar in a terminal, else lines on stderr
                allow_fill_values=args.allow_fill_values,
            ),
            show_split=print,
        )
    with signals_deferred():  # a paid-for result is written whole before any stop
        where = keep(result, args.output, args.force)
        if args.budget:  # listed by the app on the same ledger (LEDGER.releases/)
            from ..app.releases import ReleaseStore, releases_folder

            ReleaseStore(releases_folder(os.path.expanduser(args.budget))).add(result)
    _print_summary(args, result, where)
    if args.plots is not None:
        _write_plots(args.plots, result)
    if args.report is not None:
        from ..io.output import write_bytes

        names = args.feature_names and [v.strip() for v in args.feature_names.split(",")]
        html = result.to_html(budget=budget, feature_names=names or None)
        shown = write_bytes(args.report, html.encode(), name="--report", overwrite=args.force)
        print(f"wrote {shown}")
    if budget is not None:
        print(
            f"budget {args.budget}: epsilon {budget.remaining():.6g} left for one more "
            f"release at delta={budget.delta:g}"
        )
    return 0


def _stages(args: argparse.Namespace, score_options: dict[str, Any]) -> list[Any]:
    """The stage objects the flags ask for: the default stages with their options and
    each optional stage flagged (the scale: ``--scale``).
    """
    from ..analysis.options import shell_stages

    flat = {
        "methods": tuple(m.strip() for m in args.methods.split(",") if m.strip()),
        "spatial_sign": args.spatial_sign,
        "radius": args.radius,
        **score_options,
    }
    return shell_stages(chosen_stages(args), flat)


def _check_outputs(args: argparse.Namespace) -> None:
    """Every file and folder the command writes, checked before anything is read."""
    from ..io import check_writable
    from .fit import FORCE_HINT, force_hint

    check_writable(
        args.output, None, name="--output", overwrite=args.force, overwrite_hint=FORCE_HINT
    )
    if args.report is not None:
        check_writable(
            args.report,
            None,
            name="--report",
            overwrite=args.force,
            overwrite_hint=force_hint("--report"),
        )
    if args.plots is not None:
        plots = os.path.expanduser(args.plots)
        parent = os.path.dirname(os.path.abspath(plots))
        if os.path.exists(plots) and not os.path.isdir(plots):
            raise ValueError(f"--plots: {args.plots!r} is a file, not a folder")
        if not os.path.isdir(parent):
            raise ValueError(f"--plots: the folder {parent!r} that would hold it does not exist")
        args.plots = plots


def _inputs(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The records and the score map's options (metadata only, before the split table
    prints and before any cluster starts).
    """
    from ..analysis.stages.score_map import group_domain_from_text, resolve_groups
    from ..io.tables import table_format

    store = input_location(args.store)
    options = input_storage_options(args)
    if args.groups is not None and args.no_score_map:
        raise ValueError("--groups: needs the score map (drop --no-score-map)")
    if args.groups is not None and args.group_domain is None:
        raise ValueError("--group-domain: --groups needs its PUBLIC labels, e.g. a,b,c")
    if args.group_domain is not None and args.groups is None:
        raise ValueError("--group-domain: given without --groups")
    if table_format(store) is not None:  # --groups names one of its columns
        records, labels = open_input(args, options or None, label_column=args.groups)
    else:
        records, _ = open_input(args, options or None)
        groups = args.groups and os.path.expanduser(args.groups)
        _, labels = resolve_groups(store, groups, args.component)
    return records, {
        "score_map": not args.no_score_map,
        "groups": labels,
        "group_domain": group_domain_from_text(args.group_domain, labels),
        "score_axes": _pair(args.score_axes, "--score-axes", offset=1),
        "bins": None if args.bins is None else _pair(args.bins, "--bins"),
        "score_methods": tuple(m.strip() for m in args.score_methods.split(",") if m.strip()),
    }


def _print_summary(args: argparse.Namespace, result: Any, where: str) -> None:
    """The privacy table, what was written, every further stage's release, the notices."""
    from ..analysis.stages import stage_class, stage_info
    from .notices import notice_lines

    print(result.privacy_table())
    print(
        f"wrote {where}: {args.n_components} private directions, "
        f"scree values ({', '.join(result.scree['values'])})"
        f"{' and a score map' if result.score_map is not None else ''} of "
        f"{result.meta['n_features']} "
        f"features from {result.meta['n_samples']} records; total epsilon={args.epsilon:g}, "
        f"delta={args.delta:g} (composed: {result.meta['composed_epsilon']:.6g})"
    )
    print(f"scree to read: {result.scree['default']} (the default)")
    names = result.meta.get("feature_names")
    for name, value in result.stages.items():
        print(f"private {stage_info(name).title}:")
        print(stage_class(name).summary(value, names))
    for line in notice_lines(result.notices, where):  # many groups' notices: one line
        print(line)


def _write_plots(folder: str, result: Any) -> None:
    """The scree, PVE and score map plots as PNG files in ``folder``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..analysis.plots import plot_synthetic

    os.makedirs(folder, exist_ok=True)
    figures = [(kind, result.plot_scree(kind=kind).figure) for kind in SCREE_PLOTS]
    if result.score_map is not None:
        figures.append(("score_map", result.plot_scores(by_group=False)))
        if len(result.score_map.groups) > 1:
            figures.append(("score_map_groups", result.plot_scores(by_group=True)))
        figures.append(("synthetic", plot_synthetic(result.score_map)))
    for name, figure in figures:
        path = os.path.join(folder, f"{name}.png")
        figure.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(figure)
        print(f"wrote {os.path.abspath(path)}")
