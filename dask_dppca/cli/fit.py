"""``dask-dppca fit STORE``: fit g-DPPCA on a Zarr array and write the private result."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any


def add_parser(commands) -> None:
    """Register ``fit`` on the ``dask-dppca`` sub-command parser."""
    fit = commands.add_parser(
        "fit",
        help="fit g-DPPCA on a Zarr store and write the private result",
        description="Fit g-DPPCA on the records (rows) of a Zarr array and release the result.",
    )
    fit.add_argument("store", help="Zarr store (local path or fsspec URL reachable by the "
                     "workers) holding an n x d array, one record per row")
    fit.add_argument("--component", help="array name inside a Zarr group")
    fit.add_argument("-k", "--n-components", type=int, default=2,
                     help="number of private principal directions (default 2)")
    fit.add_argument("--epsilon", type=float, default=1.0, help="privacy epsilon > 0 (default 1)")
    fit.add_argument("--delta", type=float, default=1e-6, help="privacy delta in (0, 1) (default 1e-6)")
    fit.add_argument("--transform", default="sphere", choices=["sphere", "winsor"],
                     help="generalized spatial sign (default sphere)")
    fit.add_argument("--radius", type=float,
                     help="public winsorization radius (with --transform winsor); never tune it on the data")
    fit.add_argument("--calibration", default="analytic", choices=["analytic", "classical"],
                     help="noise calibration (default analytic: tight, any epsilon)")
    fit.add_argument("--design", default="auto", choices=["auto", "complete", "regular"],
                     help="which pairs are averaged: auto (complete while the work is modest, "
                     "else regular), complete (all pairs), regular (within-block pairs plus "
                     "--partners partner blocks per block)")
    fit.add_argument("--partners", type=int, metavar="K",
                     help="partner blocks per block for --design regular")
    fit.add_argument("--block-size", type=int, metavar="B",
                     help="rows per block for --design regular")
    fit.add_argument("--design-seed", type=int, default=0,
                     help="public seed of the regular design's block graph (default 0)")
    fit.add_argument("--scheduler",
                     help="Dask scheduler address, e.g. tls://host:8786 (default: embedded LocalCluster)")
    fit.add_argument("--trusted-worker", help="worker address that adds the noise when none offers "
                     "the 'dppca-trusted' resource")
    fit.add_argument("--require-trusted", action="store_true",
                     help="refuse to release unless a worker offers 'dppca-trusted' (or "
                     "--trusted-worker names one); by default such a fit warns and releases "
                     "on any worker, recorded in the result's privacy.released_on")
    fit.add_argument("--tls-ca-file", help="CA certificate (PEM) for a tls:// scheduler "
                     "(default: the Dask configuration, distributed.comm.tls.ca-file)")
    fit.add_argument("--tls-cert", help="client certificate (PEM) for a tls:// scheduler "
                     "(default: distributed.comm.tls.client.cert)")
    fit.add_argument("--tls-key", help="client private key (PEM) for a tls:// scheduler "
                     "(default: distributed.comm.tls.client.key)")
    fit.add_argument("--budget", metavar="LEDGER", help="privacy budget ledger to charge (made "
                     "with 'dask-dppca budget create'); the fit is refused if it does not fit")
    fit.add_argument("--output", default="result.json", help="result file (default result.json)")
    fit.add_argument("--no-progress", action="store_true",
                     help="hide the progress bar (shown when the output is a terminal)")
    fit.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Fit on a store and write the private result atomically."""
    from contextlib import nullcontext

    from .. import DPPCA, RegularDesign
    from ..cluster import tls_config
    from .budget import open_ledger

    design = args.design
    if design == "regular":
        if args.partners is None or args.block_size is None:
            raise ValueError("--design regular needs --partners K and --block-size B")
        design = RegularDesign(k=args.partners, block_size=args.block_size, seed=args.design_seed)
    elif args.partners is not None or args.block_size is not None:
        raise ValueError("--partners and --block-size go with --design regular")
    est = DPPCA(
        n_components=args.n_components, epsilon=args.epsilon, delta=args.delta,
        transform=args.transform, radius=args.radius, design=design,
        calibration=args.calibration, scheduler=args.scheduler,
        trusted_worker=args.trusted_worker, require_trusted=args.require_trusted,
        progress=not args.no_progress and sys.stdout.isatty(),
    )
    budget = open_ledger(args.budget) if args.budget else nullcontext()
    with budget, tls_config(args.tls_ca_file, args.tls_cert, args.tls_key):
        est.fit(args.store, component=args.component)
    result = {
        "components": est.components_.tolist(),
        "eigenvalues": est.eigenvalues_.tolist(),
        "explained_variance_ratio": est.explained_variance_ratio_.tolist(),
        "privacy": est.privacy_,
    }
    write_json_atomically(args.output, result)
    print(f"wrote {args.output}: {args.n_components} private components of "
          f"{est.n_features_in_} features from {est.n_samples_} records "
          f"(epsilon={args.epsilon:g}, delta={args.delta:g}, sigma={est.privacy_['sigma']:.3g})")
    if args.budget:
        print(f"budget {args.budget}: epsilon {budget.remaining():.6g} left for one more "
              f"release at delta={budget.delta:g}")
    return 0


def write_json_atomically(path: str, payload: Any) -> None:
    """Write JSON to a temporary file beside ``path`` and rename it into place."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(handle, "w") as stream:
            json.dump(payload, stream, indent=2, default=_json_default)
            stream.write("\n")
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
