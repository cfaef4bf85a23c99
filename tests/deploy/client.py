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
    from dask_dppca.compute.trusted.tickets import RELEASE_METADATA_KEY
    from dask_dppca.compute.trusted.trust import worker_identities
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


def _scheduler_pids() -> list[int]:
    """The ``dask scheduler`` processes on this machine (other containers' too: the same
    process namespace and user, as on one Docker host)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                argv = cmdline.read().split(b"\0")
        except OSError:
            continue
        if b"scheduler" in argv and any(a.endswith(b"dask") for a in argv[:2]):
            pids.append(int(entry))
    return pids


def kill_scheduler_mid_fit(scheduler: str, n_workers: int, timeout: float, data: str) -> dict:
    """Kill the scheduler while a fit computes; then wait for the recipe to restart it and
    its workers, and fit again.  Returns the error the first fit raised (type, text) and
    the second fit's release (the same data and TEST-ONLY seed as :func:`fit`)."""
    import signal
    import threading
    import time

    from distributed import Client

    import dask_dppca as dd
    from dask_dppca.datasets import random_directions, spiked_spectrum, write_elliptical_zarr

    folder = tempfile.mkdtemp(prefix="dppca-kill-", dir=data)
    big = os.path.join(folder, "big.zarr")
    write_elliptical_zarr(  # test data: lanes that compute for seconds
        big, 40_000, spiked_spectrum(6, 2, 8.0), random_directions(6, seed=1), df=1.0,
        chunk_rows=5000, seed=3,
    )  # fmt: skip
    outcome: dict = {}

    def run() -> None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dd.DPPCA(n_components=2, scheduler=scheduler, design="complete").fit(big)
            outcome["error"] = None
        except BaseException as error:
            outcome["error"] = {"type": type(error).__name__, "text": str(error)}

    with Client(scheduler, timeout=30) as watcher:
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout
        while not any(watcher.processing().values()):
            assert time.monotonic() < deadline, "the fit never started"
            time.sleep(0.05)
        pids = _scheduler_pids()
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
    thread.join(timeout)
    deadline = time.monotonic() + timeout
    while True:  # the recipe restarts the scheduler, and the workers rejoin it
        try:
            with Client(scheduler, timeout=10) as client:
                client.wait_for_workers(n_workers, timeout=max(1.0, deadline - time.monotonic()))
                break
        except (OSError, TimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    again = fit(scheduler, n_workers, timeout, data)
    return {"killed": pids, "error": outcome.get("error", "no outcome"), "after_restart": again}


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
    parser.add_argument(
        "--kill-scheduler",
        action="store_true",
        help="then kill the scheduler mid-fit, wait for its restart and fit again",
    )
    args = parser.parse_args()
    data = data_folder()  # before anything is imported or connected
    result = fit(args.scheduler, args.workers, args.timeout, data)
    if args.kill_scheduler:
        result["scheduler_killed"] = kill_scheduler_mid_fit(
            args.scheduler, args.workers, args.timeout, data
        )
    if args.notebook:
        result["notebook"] = run_notebook(args.notebook, args.timeout)
    with open(os.path.join(args.results, "result.json"), "w") as out:
        json.dump(result, out)


if __name__ == "__main__":
    main()
