"""``dask-dppca plan STORE``: what a fit would do, before a core turns or a budget is spent.

Reads the store's public metadata only (shape, chunks, dtype, codec; never a chunk, never
a ledger) and prints the design, blocks and tasks, bytes read, peak memory per worker,
predicted wall time and, for a stated spectrum or a public pilot, the expected accuracy
(:class:`dask_dppca.fit_plan.FitPlan`).  A plan that does not fit the cluster is printed,
then refused with one line naming what to change (exit 2).
"""

from __future__ import annotations

import argparse
import os
import sys

from .fit import add_mechanism_arguments, estimator_parameters


def add_parser(commands) -> None:
    """Register ``plan`` on the ``dask-dppca`` sub-command parser."""
    plan = commands.add_parser(
        "plan",
        help="predict a fit's design, tasks, memory, time and accuracy (reads no data)",
        description=(
            "Plan a fit of the records (rows) of a Zarr array without reading any of them: "
            "the design 'auto' picks, blocks and tasks, bytes read, peak memory per worker, "
            "the scheduler's task count, predicted wall time (machine model from "
            "'dask-dppca bench --save', else a built-in default) and, with --spectrum or "
            "--pilot, the expected accuracy. Exit 2 when the plan does not fit."
        ),
    )
    plan.add_argument("store", help="Zarr store (local path or fsspec URL) holding an n x d array")
    plan.add_argument("--component", help="array inside a Zarr group (nested paths: sub/X)")
    plan.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="fsspec option for a URL, repeatable (as for 'fit')",
    )
    plan.add_argument(
        "--storage-options-json", metavar="FILE", help="JSON object of fsspec options"
    )
    plan.add_argument(
        "-k", "--n-components", type=int, default=2, help="private directions (default 2)"
    )
    plan.add_argument("--epsilon", type=float, default=1.0, help="privacy epsilon (default 1)")
    plan.add_argument("--delta", type=float, default=1e-6, help="privacy delta (default 1e-6)")
    add_mechanism_arguments(plan)
    cluster = plan.add_argument_group(
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


def run(args: argparse.Namespace) -> int:
    """Print the plan; exit 2 (after printing it) when it does not fit."""
    from .. import DPPCA
    from ..io.storage import is_url
    from .fit import storage_options

    options = storage_options(args.storage_options_json, args.storage_option)
    if args.scheduler is not None and (args.workers or args.threads or args.memory_limit):
        raise ValueError("--scheduler: give a scheduler or --workers/--threads, not both")
    spectrum = None
    if args.spectrum is not None:
        try:
            spectrum = [float(v) for v in args.spectrum.split(",") if v.strip()]
        except ValueError:
            raise ValueError("--spectrum: expected comma-separated numbers") from None
    pilot = None
    if args.pilot is not None:
        import zarr

        pilot = zarr.open_array(os.path.expanduser(args.pilot), mode="r")[:]
    est = DPPCA(**estimator_parameters(args), scheduler=args.scheduler)
    store = args.store if is_url(args.store) else os.path.expanduser(args.store)
    cluster = {}
    if args.workers is not None or args.threads is not None or args.memory_limit is not None:
        cluster = {
            "workers": args.workers if args.workers is not None else 1,
            "threads": args.threads if args.threads is not None else (os.cpu_count() or 1),
            "memory_limit": args.memory_limit,
        }
    plan = est.plan(
        store,
        component=args.component,
        storage_options=options if is_url(args.store) else None,
        spectrum=spectrum,
        pilot=pilot,
        machine=args.machine,
        check=False,
        **cluster,
    )
    print(plan.to_json() if args.json else plan)
    if not plan.fits:
        problems = "; ".join(plan.problems)
        print(f"dask-dppca: error: the plan does not fit: {problems}", file=sys.stderr)
        return 2
    return 0
