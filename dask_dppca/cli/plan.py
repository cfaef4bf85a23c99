"""``dask-dppca plan STORE``: what a fit would do, before a core turns or a budget is spent.

``dask-dppca plan STORE --analysis`` plans what ``dask-dppca analyze STORE`` would run,
with ``analyze``'s defaults (k, epsilon, delta, methods, score map): each stage's passes,
tasks, time and peak memory, and the split table the analysis shows
(:func:`dask_dppca.analysis.plan.plan_analysis`).  Without a model saved by ``dask-dppca
bench --save`` the time figures come from a short calibration, kept per machine; the
plan says which model it used.

Reads the store's public metadata only (shape, chunks, dtype, codec; never a chunk, never
a ledger; a Parquet or CSV table as ``analyze`` opens it, with the same flags, its rows
counted by :func:`~dask_dppca.io.tables.table_row_counts`) and prints the design, blocks
and tasks, bytes read, peak memory per worker, predicted wall time and, for a stated
spectrum or a public pilot, the expected accuracy
(:class:`dask_dppca.planning.fit_plan.FitPlan`).  A plan that does not fit the cluster is
printed, then refused with one line naming what to change (exit 2).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .fit import add_mechanism_arguments, estimator_parameters
from .inputs import (
    STORE_OPTION_HELP,
    add_input_arguments,
    add_stage_arguments,
    chosen_stages,
    open_input,
    shares,
)

#: A plain plan's defaults: a fit's ('dask-dppca fit'); with --analysis, analyze's.
FIT_DEFAULTS = {"n_components": 2, "epsilon": 1.0, "delta": 1e-6}


def add_parser(commands) -> None:
    """Register ``plan`` on the ``dask-dppca`` sub-command parser."""
    plan = commands.add_parser(
        "plan",
        help="predict a fit's design, tasks, memory, time and accuracy (reads no data)",
        description=(
            "Plan a fit of the records (rows) of a Zarr array or a Parquet or CSV table "
            "from public metadata only (a Parquet or CSV table's rows counted in one "
            "pass over one column that keeps no value): "
            "the design 'auto' picks, blocks and tasks, bytes read, peak memory per worker, "
            "the scheduler's task count, predicted wall time (machine model from "
            "'dask-dppca bench --save', else a built-in default) and, with --spectrum or "
            "--pilot, the expected accuracy. With --analysis: the whole 'analyze' run "
            "(directions, scree, score map) stage by stage with analyze's defaults, and its "
            "privacy split. Without a saved model, a short calibration of this machine "
            "(kept) gives the times. Exit 2 when the plan does not fit."
        ),
    )
    # The input and its flags as 'analyze' and 'fit' read them.
    add_input_arguments(plan, STORE_OPTION_HELP, "the fit or analysis")
    plan.add_argument(
        "--analysis",
        action="store_true",
        help="plan 'dask-dppca analyze STORE' (directions, scree, score map) with analyze's "
        "defaults, stage by stage, and its privacy split",
    )
    _add_privacy_arguments(plan)
    _add_analysis_arguments(plan)
    add_mechanism_arguments(plan)
    _add_cluster_arguments(plan)
    plan.add_argument(
        "--spectrum",
        help="eigenvalues of the records' scatter matrix, comma-separated (public "
        "knowledge), for the expected accuracy",
    )
    plan.add_argument(
        "--pilot",
        metavar="STORE",
        help="a PUBLIC pilot Zarr array whose covariance stands in for --spectrum",
    )
    plan.add_argument(
        "--machine", metavar="FILE", help="machine model file (default: the saved one)"
    )
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(run=run)


def _add_privacy_arguments(parser: argparse.ArgumentParser) -> None:
    """``-k``, ``--epsilon`` and ``--delta``, no default in the parser: a fit's
    (:data:`FIT_DEFAULTS`), or with ``--analysis`` analyze's.
    """
    parser.add_argument(
        "-k",
        "--n-components",
        type=int,
        help=f"private directions (default {FIT_DEFAULTS['n_components']}; with --analysis, "
        "analyze's)",
    )
    parser.add_argument(
        "--epsilon",
        type=float,
        help=f"privacy epsilon (default {FIT_DEFAULTS['epsilon']:g}; with --analysis, the "
        "total, analyze's default)",
    )
    parser.add_argument(
        "--delta",
        type=float,
        help=f"privacy delta (default {FIT_DEFAULTS['delta']:g}; with --analysis, the total, "
        "analyze's default)",
    )


def _add_analysis_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of an analysis's plan, as for 'analyze'."""
    analysis = parser.add_argument_group("analysis", "with --analysis, as for 'analyze'")
    analysis.add_argument(
        "--split", metavar="STAGE=SHARE", action="append", default=[], help="a stage's share"
    )
    analysis.add_argument("--methods", help="comma-separated scree estimators")
    analysis.add_argument("--no-score-map", action="store_true", help="plan no score map")
    add_stage_arguments(analysis)
    analysis.add_argument(
        "--groups",
        metavar="LABELS",
        help="a per-group score map, as for 'analyze' (a table's column: not a feature; the "
        "labels are not read)",
    )
    analysis.add_argument(
        "--group-domain",
        metavar="A,B,C",
        help="the PUBLIC labels of --groups, as for 'analyze' (the plan does not depend on them)",
    )


def _add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """The cluster to plan for (read by :func:`cluster_options`)."""
    cluster = parser.add_argument_group(
        "cluster",
        "the cluster to plan for: --workers and --threads (and --memory-limit), or a running "
        "--scheduler (its workers are read, nothing runs); default: the embedded cluster a "
        "fit would start on this machine",
    )
    cluster.add_argument("--workers", type=int, help="worker processes")
    cluster.add_argument("--threads", type=int, help="threads per worker")
    cluster.add_argument(
        "--memory-limit", help="memory limit per worker, e.g. 4GiB (default: unlimited)"
    )
    cluster.add_argument("--scheduler", help="a running scheduler's address, e.g. tcp://host:8786")


def run(args: argparse.Namespace) -> int:
    """Print the plan; exit 2 (after printing it) when it does not fit."""
    from .. import DPPCA
    from ..planning.machine import planning_model

    if args.scheduler is not None and (args.workers or args.threads or args.memory_limit):
        raise ValueError("--scheduler: give a scheduler or --workers/--threads, not both")
    spectrum = None
    if args.spectrum is not None:
        try:
            spectrum = [float(v) for v in args.spectrum.split(",") if v.strip()]
        except ValueError:
            raise ValueError("--spectrum: expected comma-separated numbers") from None
    if args.analysis:
        return _run_analysis(args, cluster_options(args))
    for name, default in FIT_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    asked = args.split or args.methods or args.no_score_map or args.groups or args.group_domain
    if asked or args.scale != "none" or chosen_stages(args):
        raise ValueError(
            "--split, --methods, --no-score-map, --groups, --group-domain, --scale and the "
            "optional stages go with --analysis"
        )
    pilot = None
    if args.pilot is not None:
        import zarr

        pilot = zarr.open_array(os.path.expanduser(args.pilot), mode="r")[:]
    est = DPPCA(**estimator_parameters(args), scheduler=args.scheduler)
    plan = est.plan(
        _records(args),
        spectrum=spectrum,
        pilot=pilot,
        machine=planning_model(args.machine),
        check=False,
        **cluster_options(args),
    )
    print(plan.to_json() if args.json else plan)
    if not plan.fits:
        problems = "; ".join(plan.problems)
        print(f"dask-dppca: error: the plan does not fit: {problems}", file=sys.stderr)
        return 2
    return 0


def cluster_options(args: argparse.Namespace) -> dict:
    """The cluster the flags give (workers, threads, memory limit); empty: the default."""
    if args.workers is None and args.threads is None and args.memory_limit is None:
        return {}
    return {
        "workers": args.workers if args.workers is not None else 1,
        "threads": args.threads if args.threads is not None else (os.cpu_count() or 1),
        "memory_limit": args.memory_limit,
    }


def _records(args: argparse.Namespace) -> Any:
    """STORE opened as 'analyze' and 'fit' open it, with the same flags (metadata only; a
    table's rows counted here: :func:`~dask_dppca.io.tables.table_row_counts`).  A table's
    ``--groups`` column is checked and kept out of the features; its labels are not read.
    """
    from ..io.tables import table_format
    from .inputs import input_location, input_storage_options

    options = input_storage_options(args)
    is_table = table_format(input_location(args.store)) is not None
    label_column = args.groups if is_table else None
    records, _ = open_input(args, options or None, label_column=label_column, count_rows=True)
    return records


def _run_analysis(args: argparse.Namespace, cluster: dict) -> int:
    """``plan --analysis``: print the analysis's plan; exit 2 when it does not fit."""
    from ..analysis.options import Compute
    from ..analysis.plan import plan_analysis

    if args.spectrum is not None or args.pilot is not None:
        raise ValueError("--spectrum and --pilot: a fit's accuracy, not with --analysis")
    if args.calibration != "analytic":
        raise ValueError("--calibration: an analysis calibrates its own parts (drop it)")
    if args.groups is not None and args.no_score_map:
        raise ValueError("--groups: needs the score map (drop --no-score-map)")
    if args.group_domain is not None and args.groups is None:
        raise ValueError("--group-domain: given without --groups")
    grouped = _grouped(args)
    plan = plan_analysis(
        _records(args),
        args.n_components,
        epsilon=args.epsilon,
        delta=args.delta,
        split=shares(args.split),
        stages=_planned_stages(args, grouped),
        groups=True if grouped else None,
        scale=args.scale,
        compute=Compute(scheduler=args.scheduler),
        machine=args.machine,
        **cluster,
    )
    print(plan.to_json() if args.json else plan)
    if not plan.fits:
        problems = "; ".join(plan.problems)
        print(f"dask-dppca: error: the plan does not fit: {problems}", file=sys.stderr)
        return 2
    return 0


def _planned_stages(args: argparse.Namespace, grouped: bool | tuple[str, ...]) -> list[Any]:
    """The stage objects the flags ask for, as ``analyze`` builds them (a flag left out:
    the stage's default).
    """
    from ..analysis.options import shell_stages
    from .fit import design_of

    methods = args.methods and tuple(m.strip() for m in args.methods.split(",") if m.strip())
    flat = {
        "methods": methods,
        "spatial_sign": args.spatial_sign,
        "radius": args.radius,
        "design": design_of(args),
        "group_domain": grouped if isinstance(grouped, tuple) else None,
    }
    flat = {name: value for name, value in flat.items() if value is not None}
    if args.no_score_map:
        flat["score_map"] = False
    return shell_stages(chosen_stages(args), flat)


def _grouped(args: argparse.Namespace) -> bool | tuple[str, ...]:
    """``plan_analysis``'s ``grouped``: the typed ``--group-domain`` labels when given (the
    plan then says whether they are too many for the budget), else whether ``--groups``.
    """
    if args.groups is None:
        return False
    if args.group_domain is None:
        return True
    return tuple(v.strip() for v in args.group_domain.split(",") if v.strip())
