"""``dask-dppca app [--ledger LEDGER] [STORE]``: the interactive page on 127.0.0.1."""

from __future__ import annotations

import argparse


def add_parser(commands) -> None:
    """Register ``app`` on the ``dask-dppca`` sub-command parser."""
    app = commands.add_parser(
        "app",
        help="serve the interactive private-analysis page on 127.0.0.1 (needs the app extra)",
        description=(
            "Serve a page (Panel) on 127.0.0.1 only: open a store, set k, the budget of the "
            "next release and its split, see the cost and the ledger's remaining budget, "
            "release; re-plotting a release spends nothing. A release that would exceed the "
            "ledger is refused and nothing is charged. Releases are kept in LEDGER.releases/."
        ),
    )
    app.add_argument("store", nargs="?", help="a store to open at once (path or fsspec URL)")
    app.add_argument(
        "--ledger",
        help="ledger charged by every release (dask-dppca budget create); default: a budget "
        "of this process only (--epsilon, --delta)",
    )
    app.add_argument(
        "--columns",
        metavar="A,B,C",
        help="the feature columns of a Parquet or CSV STORE, comma-separated (default: all "
        "its numeric columns); the page's column picker starts with them",
    )
    app.add_argument("--component", help="the array inside a Zarr group STORE (as for analyze)")
    app.add_argument("--port", type=int, default=5006, help="port (default 5006; 0: any free)")
    app.add_argument(
        "--scheduler", help="Dask scheduler address (default: embedded LocalCluster per release)"
    )
    app.add_argument(
        "--epsilon", type=float, default=3.0, help="total epsilon without --ledger (default 3)"
    )
    app.add_argument(
        "--delta", type=float, default=1e-5, help="total delta without --ledger (default 1e-5)"
    )
    app.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted."""
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port: expected 0..65535, got {args.port}")
    try:
        import panel  # noqa: F401
    except ImportError:
        raise ValueError(
            "app: needs Panel; install the app extra: pip install 'dask-dppca[app]'"
        ) from None
    from ..app import serve
    from ..io.tables import parse_columns
    from ..privacy.mechanisms.calibration import validate_privacy_parameters
    from .budget import open_ledger

    parse_columns(args.columns)  # an empty list: one line now, not on the page
    if args.ledger is not None:
        open_ledger(args.ledger)  # a missing ledger: one line naming the command to create it
    else:
        validate_privacy_parameters(args.epsilon, args.delta)
    serve(
        args.ledger,
        args.store,
        port=args.port,
        scheduler=args.scheduler,
        epsilon=args.epsilon,
        delta=args.delta,
        columns=args.columns,
        component=args.component,
        announce=lambda line: print(line, flush=True),
    )
    return 0
