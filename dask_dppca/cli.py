"""Command line: ``dask-dppca demo`` and ``dask-dppca fit STORE``.

Every user error ends with one line on stderr and a non-zero exit code, never a
traceback: 2 for a bad parameter or input, 3 when the cluster cannot be reached or a
release fails, 1 for anything unexpected (with the exception's one-line summary).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

EXIT_USAGE = 2
EXIT_CLUSTER = 3
EXIT_UNEXPECTED = 1


class _OneLineParser(argparse.ArgumentParser):
    """argparse errors as one line (no usage block), exit code 2 like every user error."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used to document the CLI)."""
    parser = _OneLineParser(
        prog="dask-dppca",
        description=(
            "Robust, differentially private PCA (g-DPPCA). Releases the leading principal "
            "directions of a data set under (epsilon, delta)-differential privacy, robust "
            "to heavy tails and outliers."
        ),
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    demo = commands.add_parser(
        "demo",
        help="fit synthetic heavy-tailed data on an embedded cluster and compare with PCA",
        description=(
            "Writes a synthetic heavy-tailed elliptical data set (multivariate t with 1 "
            "degree of freedom, known principal directions, a few percent gross outliers) "
            "to a local Zarr store, fits g-DPPCA on an embedded LocalCluster and prints the "
            "sin theta error against the truth next to ordinary covariance PCA."
        ),
    )
    demo.add_argument("--n-samples", type=int, default=20_000, help="records (default 20000)")
    demo.add_argument("--n-features", type=int, default=10, help="features (default 10)")
    demo.add_argument("--epsilon", type=float, default=1.0, help="privacy epsilon (default 1)")
    demo.add_argument("--delta", type=float, default=1e-6, help="privacy delta (default 1e-6)")
    demo.add_argument("--store", help="where to write the Zarr store (default: a temporary folder)")
    demo.add_argument("--seed", type=int, default=2025,
                      help="seed of the synthetic DATA only (the privacy noise uses OS entropy)")

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
    fit.add_argument("--tls-ca-file", help="CA certificate (PEM) for a tls:// scheduler "
                     "(default: the Dask configuration, distributed.comm.tls.ca-file)")
    fit.add_argument("--tls-cert", help="client certificate (PEM) for a tls:// scheduler "
                     "(default: distributed.comm.tls.client.cert)")
    fit.add_argument("--tls-key", help="client private key (PEM) for a tls:// scheduler "
                     "(default: distributed.comm.tls.client.key)")
    fit.add_argument("--output", default="result.json", help="result file (default result.json)")
    fit.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``dask-dppca`` console script."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "demo":
            return run_demo(args)
        return run_fit(args)
    except ValueError as error:
        print(f"dask-dppca: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, TimeoutError, RuntimeError) as error:
        print(f"dask-dppca: error: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_CLUSTER
    except KeyboardInterrupt:
        print("dask-dppca: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - one line, never a traceback
        print(f"dask-dppca: unexpected error: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_UNEXPECTED


def run_demo(args: argparse.Namespace) -> int:
    """Synthetic t_1 data with outliers -> Zarr -> g-DPPCA vs covariance PCA."""
    from . import DPPCA, kendall_matrix, sin_theta
    from .datasets import random_directions, spiked_spectrum, write_elliptical_zarr

    n, d, m = args.n_samples, args.n_features, 2
    if n < 2 or d < m:
        raise ValueError(f"--n-samples must be >= 2 and --n-features >= {m}")
    spectrum = spiked_spectrum(d, n_spikes=m, spike=5.0)
    truth = random_directions(d, args.seed)
    with tempfile.TemporaryDirectory(prefix="dask-dppca-demo-") as scratch:
        store = args.store or os.path.join(scratch, "demo.zarr")
        write_elliptical_zarr(store, n, spectrum, truth, df=1.0, outlier_fraction=0.03,
                              chunk_rows=max(1000, n // 8), seed=args.seed)
        print(f"data: {n} records x {d} features, multivariate t (1 d.f.), "
              f"3% gross outliers -> {store}")
        started = time.perf_counter()
        est = DPPCA(n_components=m, epsilon=args.epsilon, delta=args.delta).fit(store)
        fit_seconds = time.perf_counter() - started
        covariance = kendall_matrix(store, transform="identity")
    cov_directions = np.linalg.eigh(covariance)[1][:, ::-1][:, :m]
    rows = [
        (f"g-DPPCA sphere (eps={args.epsilon:g}, delta={args.delta:g})",
         sin_theta(est.components_.T, truth[:, :m])),
        ("covariance PCA (NOT private)", sin_theta(cov_directions, truth[:, :m])),
    ]
    print(f"\nsin theta to the true {m}-dimensional principal subspace (0 = exact, 1 = orthogonal):")
    for name, error in rows:
        print(f"  {name:<44s} {error:.4f}")
    p = est.privacy_
    print(f"\nprivacy: sensitivity {p['sensitivity']:.3g}, sigma {p['sigma']:.3g} "
          f"({p['calibration']} calibration, {p['neighbours']} neighbours, n = {p['n_samples']})")
    print(f"fit: {fit_seconds:.1f} s on the embedded LocalCluster")
    return 0


def run_fit(args: argparse.Namespace) -> int:
    """Fit on a store and write the private result atomically."""
    from . import DPPCA, RegularDesign

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
        trusted_worker=args.trusted_worker, progress=not args.no_progress,
    )
    from .cluster import tls_config

    with tls_config(args.tls_ca_file, args.tls_cert, args.tls_key):
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
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
