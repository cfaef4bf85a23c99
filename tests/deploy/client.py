"""The client of a live recipe run: connects as the recipe's notebook does, fits, reports.

Run inside the recipe's topology (tests/deploy/namespace.py), e.g. in the compose
notebook's container with its environment.  Connects to ``--scheduler`` or
``DASK_DPPCA_SCHEDULER`` with the TLS settings of the Dask configuration (as
examples/quickstart.ipynb does), waits for the workers, writes test data into
``DASK_DPPCA_DATA_DIR`` (the folder the workers share; required, so that a run never
leaves a store in this machine's /tmp), fits with a fixed
``random_state`` (TEST ONLY: reproducible noise, so the test can compare it with a
local fit bit for bit), and writes ``result.json``: the store, the release, where the
release ran, and each worker's certificate name as the scheduler saw it.  With
``--notebook`` it then executes the quickstart notebook in the same environment.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import warnings


def data_folder() -> str:
    """``DASK_DPPCA_DATA_DIR``: where the workers read the test store (the test's own
    folder), never a default such as /tmp that nothing cleans."""
    folder = os.environ.get("DASK_DPPCA_DATA_DIR")
    if not folder or not os.path.isdir(folder):
        raise SystemExit(
            f"client.py: DASK_DPPCA_DATA_DIR must name an existing folder the workers share, "
            f"got {folder!r}"
        )
    return folder


def fit(scheduler: str, n_workers: int, timeout: float, data: str) -> dict:
    from distributed import Client

    import dask_dppca as dd
    from dask_dppca.compute.tickets import RELEASE_METADATA_KEY
    from dask_dppca.compute.trust import worker_identities
    from dask_dppca.datasets import random_directions, spiked_spectrum, write_elliptical_zarr

    folder = tempfile.mkdtemp(prefix="dppca-live-", dir=data)
    store = os.path.join(folder, "x.zarr")
    # Seeds generate TEST DATA.
    write_elliptical_zarr(
        store,
        3000,
        spiked_spectrum(6, 2, 8.0),
        random_directions(6, seed=1),
        df=1.0,
        chunk_rows=500,
        seed=2,
    )
    with Client(scheduler, timeout=30) as client:  # TLS from the Dask configuration
        client.wait_for_workers(n_workers, timeout=timeout)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # NonPrivateRandomStateWarning: on purpose here
            est = dd.DPPCA(n_components=2, random_state=7, scheduler=client).fit(store)
        ticket = client.get_metadata([*RELEASE_METADATA_KEY, est.privacy_["fit_id"]])
        workers = client.scheduler_info(n_workers=-1)["workers"]
        identities = client.run_on_scheduler(worker_identities)
    return {
        "store": store,
        "components": est.components_.tolist(),
        "eigenvalues": est.eigenvalues_.tolist(),
        "release_worker": ticket["worker"],
        "workers": {
            address: {
                "name": str(info.get("name")),
                "resources": info.get("resources") or {},
                "certificate": identities[address]["common_name"],
            }
            for address, info in workers.items()
        },
    }


def run_notebook(path: str, timeout: float) -> dict:
    import nbclient
    import nbformat

    notebook = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(notebook, timeout=timeout, kernel_name="python3").execute()
    outputs = [
        o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])
    ]
    return {
        "errors": [o.get("ename", "") for o in outputs if o.get("output_type") == "error"],
        "text": "".join(o.get("text", "") for o in outputs),
        "results": [
            o.get("data", {}).get("text/plain", "")
            for o in outputs
            if o.get("output_type") == "execute_result"
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scheduler", default=os.environ.get("DASK_DPPCA_SCHEDULER"))
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--results", required=True, help="folder for result.json")
    parser.add_argument("--notebook", help="a notebook to execute afterwards")
    parser.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args()
    data = data_folder()  # before anything is imported or connected
    result = fit(args.scheduler, args.workers, args.timeout, data)
    if args.notebook:
        result["notebook"] = run_notebook(args.notebook, args.timeout)
    with open(os.path.join(args.results, "result.json"), "w") as out:
        json.dump(result, out)


if __name__ == "__main__":
    main()
