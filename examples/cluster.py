"""dask-dppca on a cluster, as a script: the steps of examples/quickstart.ipynb.

Connects to the scheduler named by DASK_DPPCA_SCHEDULER (e.g. tls://scheduler:8786,
TLS certificates from the Dask configuration: DASK_DISTRIBUTED__COMM__TLS__CA_FILE,
..._CLIENT__CERT, ..._CLIENT__KEY), or starts a LocalCluster.  Writes a small Zarr
store (in DASK_DPPCA_DATA_DIR, a folder the workers share, if set), fits g-DPPCA with a
privacy budget, saves the private scree and scores plot.

    python examples/cluster.py [--n-samples 4000] [--store data.zarr] [--plot out.png]
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np


def connect():
    """A distributed Client: to DASK_DPPCA_SCHEDULER if set, else a LocalCluster."""
    from distributed import Client, LocalCluster

    address = os.environ.get("DASK_DPPCA_SCHEDULER")
    if address:
        return Client(address, timeout=30)  # TLS settings from the Dask configuration
    return Client(LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None))


def run(n_samples: int, store: str, plot: str | None, progress: bool = False) -> dict:
    import dask_dppca
    from dask_dppca.datasets import random_directions, spiked_spectrum, write_elliptical_zarr

    d = 8
    truth = random_directions(d, seed=1)  # seeds: synthetic DATA only
    write_elliptical_zarr(
        store,
        n_samples,
        spiked_spectrum(d, n_spikes=2, spike=8.0),
        truth,
        df=1.0,
        outlier_fraction=0.02,
        chunk_rows=max(500, n_samples // 4),
        seed=2,
    )
    with connect() as client:
        with dask_dppca.PrivacyBudget(epsilon=2, delta=1e-5) as budget:
            est = dask_dppca.DPPCA(
                n_components=2, epsilon=1.0, delta=1e-6, scheduler=client, progress=progress
            ).fit(store)
        scores = np.asarray(est.transform(store))
    error = dask_dppca.sin_theta(est.components_.T, truth[:, :2])
    print(f"sin theta to the true subspace: {error:.3f}")
    print(f"private eigenvalues: {np.array2string(est.eigenvalues_, precision=4)}")
    print(f"budget: {budget}")
    if plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (scree, scatter) = plt.subplots(1, 2, figsize=(9, 3.5))
        scree.plot(np.arange(1, d + 1), est.eigenvalues_, "o-")
        scree.set(title="private scree", xlabel="component", ylabel="private eigenvalue")
        scatter.scatter(scores[:, 0], scores[:, 1], s=2)
        scatter.set(title="first two scores", xlabel="score 1", ylabel="score 2")
        fig.tight_layout()
        fig.savefig(plot)
        print(f"wrote {plot}")
    return {"sin_theta": error, "eigenvalues": est.eigenvalues_, "scores": scores}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-samples", type=int, default=4000)
    parser.add_argument("--store", help="Zarr store to write (default: a temporary folder)")
    parser.add_argument("--plot", help="PNG file for the scree and scores plot")
    args = parser.parse_args()
    # The workers must read the store: DASK_DPPCA_DATA_DIR names a folder they share
    # (/data in deploy/docker/compose.yaml); without it, a temporary folder here.
    with tempfile.TemporaryDirectory(
        prefix="dask-dppca-example-", dir=os.environ.get("DASK_DPPCA_DATA_DIR")
    ) as scratch:
        run(args.n_samples, args.store or os.path.join(scratch, "data.zarr"), args.plot)


if __name__ == "__main__":
    main()
