"""``dask-dppca fit STORE``: fit g-DPPCA on a Zarr array and write the private result."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .inputs import add_input_arguments, input_location, open_input, storage_options


def add_parser(commands) -> None:
    """Register ``fit`` on the ``dask-dppca`` sub-command parser."""
    fit = commands.add_parser(
        "fit",
        help="fit g-DPPCA on a Zarr store or a Parquet/CSV table and write the private result",
        description="Fit g-DPPCA on the records (rows) of a Zarr array or a Parquet or CSV "
        "table and release the result.",
    )
    add_input_arguments(
        fit,
        "fsspec option for URLs (input and --output), repeatable; nested "
        "keys with dots (client_kwargs.endpoint_url=http://host:9000); VALUE is "
        "read as JSON when it parses (true, 3), else as text. Secrets are better "
        "kept in --storage-options-json or the backend's own configuration",
        "the fit",
    )
    _add_privacy_arguments(fit)
    add_mechanism_arguments(fit)
    _add_cluster_arguments(fit)
    _add_output_arguments(fit)
    fit.set_defaults(run=run)


def _add_privacy_arguments(parser: argparse.ArgumentParser) -> None:
    """``-k``, ``--epsilon`` and ``--delta`` with a fit's defaults."""
    parser.add_argument(
        "-k",
        "--n-components",
        type=int,
        default=2,
        help="number of private principal directions (default 2)",
    )
    parser.add_argument(
        "--epsilon", type=float, default=1.0, help="privacy epsilon > 0 (default 1)"
    )
    parser.add_argument(
        "--delta", type=float, default=1e-6, help="privacy delta in (0, 1) (default 1e-6)"
    )


def _add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the fit runs: the scheduler, the trusted worker, TLS."""
    parser.add_argument(
        "--scheduler",
        help="Dask scheduler address, e.g. tls://host:8786 (default: embedded LocalCluster)",
    )
    parser.add_argument(
        "--trusted-worker",
        help="worker address that adds the noise when none offers the 'dppca-trusted' resource",
    )
    parser.add_argument(
        "--require-trusted",
        action="store_true",
        help="refuse to release unless a worker offers 'dppca-trusted' (or "
        "--trusted-worker names one); by default such a fit warns and releases "
        "on any worker, recorded in the result's privacy.released_on",
    )
    for flag, what, default in (
        ("--tls-ca-file", "CA certificate", "the Dask configuration, distributed.comm.tls.ca-file"),
        ("--tls-cert", "client certificate", "distributed.comm.tls.client.cert"),
        ("--tls-key", "client private key", "distributed.comm.tls.client.key"),
    ):
        parser.add_argument(flag, help=f"{what} (PEM) for a tls:// scheduler (default: {default})")


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """The budget charged, the result file, and the progress bar."""
    parser.add_argument(
        "--budget",
        metavar="LEDGER",
        help="privacy budget ledger to charge (made "
        "with 'dask-dppca budget create'); the fit is refused if it does not fit",
    )
    parser.add_argument(
        "--output",
        default="result.json",
        help="result file: local path or fsspec URL (default result.json); its folder must "
        "exist; checked before the fit, written atomically where the store allows (a "
        "symlink is written through, a device such as /dev/stdout in place); a new file "
        "gets mode 0600",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace an existing --output file (by default an existing file is refused)",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="hide the progress bar (shown when the output is a terminal)",
    )


def add_mechanism_arguments(parser: argparse.ArgumentParser) -> None:
    """The spatial sign, calibration and design flags ``fit`` and ``plan`` share."""
    parser.add_argument(
        "--spatial-sign",
        default="sphere",
        choices=["sphere", "winsor"],
        help="generalized spatial sign g (default sphere)",
    )
    parser.add_argument(
        "--radius",
        type=float,
        help="public winsorization radius (with --spatial-sign winsor); never tune it on the data",
    )
    parser.add_argument(
        "--calibration",
        default="analytic",
        choices=["analytic", "classical"],
        help="noise calibration (default analytic: tight, any epsilon)",
    )
    parser.add_argument(
        "--design",
        default="auto",
        choices=["auto", "complete", "regular"],
        help="which pairs are averaged: auto (complete while the work is modest, "
        "else regular), complete (all pairs), regular (within-block pairs plus "
        "--partners partner blocks per block)",
    )
    parser.add_argument(
        "--partners", type=int, metavar="K", help="partner blocks per block for --design regular"
    )
    parser.add_argument(
        "--block-size", type=int, metavar="B", help="rows per block for --design regular"
    )
    parser.add_argument(
        "--design-seed",
        type=int,
        default=0,
        help="public seed of the regular design's block graph (default 0)",
    )


def estimator_parameters(args: argparse.Namespace) -> dict[str, Any]:
    """The estimator's parameters the shared flags give (``-k``, privacy, sign, design)."""
    return {
        "n_components": args.n_components,
        "epsilon": args.epsilon,
        "delta": args.delta,
        "spatial_sign": args.spatial_sign,
        "radius": args.radius,
        "design": design_of(args),
        "calibration": args.calibration,
    }


def design_of(args: argparse.Namespace) -> Any:
    """The design the design flags name (a RegularDesign for ``--design regular``)."""
    from .. import RegularDesign

    if args.design == "regular":
        if args.partners is None or args.block_size is None:
            raise ValueError("--design regular needs --partners K and --block-size B")
        return RegularDesign(k=args.partners, block_size=args.block_size, seed=args.design_seed)
    if args.partners is not None or args.block_size is not None:
        raise ValueError("--partners and --block-size go with --design regular")
    return args.design


def run(args: argparse.Namespace) -> int:
    """Fit on a store and write the private result atomically."""
    from contextlib import nullcontext

    from .. import DPPCA
    from ..compute import tls_config
    from ..decomposition.results import save_result
    from ..io import check_writable
    from ..io.output import local_path, writes_in_place
    from ..io.storage import is_url
    from .budget import open_ledger

    options = storage_options(args.storage_options_json, args.storage_option)
    if options and not (is_url(args.store) or is_url(args.output)):
        raise ValueError(
            "--storage-option: fsspec options apply to URLs (s3://, gs://, ...); "
            "neither STORE nor --output is one"
        )
    input_options = options if is_url(input_location(args.store)) else None
    output_options = options if is_url(args.output) else None
    check_writable(  # before any data is read or any cluster starts
        args.output,
        output_options,
        name="--output",
        overwrite=args.force,
        overwrite_hint=FORCE_HINT,
    )

    est = DPPCA(
        **estimator_parameters(args),
        scheduler=args.scheduler,
        trusted_worker=args.trusted_worker,
        require_trusted=args.require_trusted,
        progress=not args.no_progress and sys.stdout.isatty(),
    )
    # Metadata only, before any cluster starts: a missing path fails at once.
    records, _ = open_input(args, input_options)
    budget = open_ledger(args.budget) if args.budget else None
    args.charged_budgets = [] if budget is None else [budget]  # for a stopped fit's line
    with (
        nullcontext() if budget is None else budget,
        tls_config(args.tls_ca_file, args.tls_cert, args.tls_key),
    ):
        if records.frame is not None:  # a table: its features, opened with --columns
            est.fit(records)
        else:  # a Zarr store: opened again by the fit, as it always was (metadata only)
            est.fit(
                input_location(args.store),
                component=args.component,
                storage_options=input_options,
                allow_fill_values=args.allow_fill_values,
            )
    where = save_result(
        est,
        args.output,
        overwrite=args.force,
        storage_options=output_options,
        name="--output",
        overwrite_hint=FORCE_HINT,
        checked=True,
    )
    # The summary goes to stderr when the result itself goes to a device (/dev/stdout):
    # stdout then holds the JSON alone.
    local = local_path(args.output)
    summary = sys.stderr if local is not None and writes_in_place(local) else sys.stdout
    print(
        f"wrote {where}: {args.n_components} private components of "
        f"{est.n_features_in_} features from {est.n_samples_} records "
        f"(epsilon={args.epsilon:g}, delta={args.delta:g}, sigma={est.privacy_['sigma']:.3g}, "
        f"signal to noise at most {est.privacy_['signal_to_noise']:.3g})",
        file=summary,
    )
    if budget is not None:
        print(
            f"budget {args.budget}: epsilon {budget.remaining():.6g} left for one more "
            f"release at delta={budget.delta:g}",
            file=summary,
        )
    return 0


def force_hint(flag: str) -> str:
    """How the command line says "replace it", for the file ``flag`` names."""
    return f"pass --force to replace it (or choose another {flag})"


#: How the command line says "replace it" of the ``--output`` file.
FORCE_HINT = force_hint("--output")
