"""The deploy recipes, run: compose's services and SLURM's jobs as processes, then a fit.

No Docker engine or SLURM controller here: the exact command lines of the recipes run
in a loopback-only network namespace (tests/deploy/namespace.py; root and ``unshare``),
with the certificates as deploy/tls/make-certs.sh leaves them.  Compose services run as
the image's user (uid 1000) in containers of their own that see only their volumes;
SLURM jobs run through stand-in ``sbatch`` / ``scancel`` (tests/deploy/standins).  The
client fits with a fixed ``random_state`` (TEST ONLY, so the release is reproducible)
and the release must equal the same fit made here, bit for bit, and run on the trusted
worker, the one whose certificate names it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from dask_dppca.compute.trusted.trust import TRUSTED_WORKER_COMMON_NAME
from tests.deploy.live import (
    CLIENT,
    MACHINE_ENV,
    PYTHON_BIN,
    SLURM_DRIVER,
    STANDINS,
    client_tls_env,
    compose_services,
    image_environment,
    kubernetes_services,
    local_release,
    require_namespaces,
    run_plan,
)
from tests.deploy.recipes import (
    COMMANDS,
    DEPLOY,
    ROOT,
    helm_binary,
    make_certs,
    operator_built_objects,
    render_helm_chart,
    require_deploy_tools,
)

pytestmark = pytest.mark.cluster

RANDOM_STATE = 7  # client.py's fixed noise seed (TEST ONLY)
TIMEOUT = 150


def check_fit(result: dict, host_path, n_workers: int) -> None:
    """The release equals the local fit, ran on the trusted worker, and every worker
    showed the certificate of its role."""
    components, eigenvalues = local_release(host_path(result["store"]), RANDOM_STATE)
    assert np.array_equal(np.array(result["components"]), components)
    assert np.array_equal(np.array(result["eigenvalues"]), eigenvalues)
    workers = result["workers"]
    assert len(workers) == n_workers
    trusted = [a for a, w in workers.items() if COMMANDS["trusted_resource"] in w["resources"]]
    assert trusted == [result["release_worker"]]
    for address, worker in workers.items():
        expected = TRUSTED_WORKER_COMMON_NAME if address in trusted else "dask-dppca worker"
        assert worker["certificate"] == expected, (address, worker)


def test_compose_topology_runs_and_fits_like_a_local_fit(tmp_path):
    """deploy/docker/compose.yaml: scheduler, 2 workers, trusted worker, each as uid 1000
    seeing only its own TLS folder and the data volume; the notebook's environment runs
    a fit and then examples/quickstart.ipynb, which writes its store in the shared
    volume (not in its own /tmp, where the workers would read nothing)."""
    require_namespaces()
    project = tmp_path / "project"  # plays deploy/docker: ./tls is made there
    make_certs(project / "tls", "scheduler", "localhost", "127.0.0.1")
    data, results = tmp_path / "data", tmp_path / "results"
    for folder in (data, results):  # /data as the image leaves it for a new named volume
        folder.mkdir()
        os.chown(folder, 1000, 1000)
    client_argv = [
        sys.executable,
        str(CLIENT),
        "--workers",
        "3",
        "--results",
        "/results",
        "--notebook",
        str(ROOT / "examples" / "quickstart.ipynb"),
        "--timeout",
        "90",
    ]
    services, client, hosts = compose_services(
        DEPLOY / "docker" / "compose.yaml", project, data, client_argv, results
    )
    client["env"].update(DASK_DPPCA_EXAMPLE_N="2000", MPLBACKEND="Agg")
    summary = run_plan(tmp_path, services, client, hosts, TIMEOUT)
    assert summary["client"] == 0 and not summary["exited_early"], summary
    result = json.loads((results / "result.json").read_text())
    assert result["store"].startswith("/data/")
    check_fit(result, lambda path: str(data / Path(path).relative_to("/data")), n_workers=3)

    notebook = result["notebook"]
    assert notebook["errors"] == []
    (store,) = [r for r in notebook["results"] if "data.zarr" in r]
    assert store.strip("'").startswith("/data/"), store
    sin_theta = float(re.search(r"sin theta to the truth: ([0-9.]+)", notebook["text"]).group(1))
    assert sin_theta < 0.5, notebook["text"]  # fill values (a store the workers cannot see) give ~1
    print(f"compose topology: {summary['seconds']:.1f} s")


def test_compose_scheduler_killed_mid_fit_restarts_and_the_next_fit_works(tmp_path):
    """compose.yaml's restart policies: the scheduler SIGKILLed while a fit computes; the
    fit fails with one line saying nothing was released, the scheduler comes back at the
    same address, the workers (which exit with it) come back and rejoin, and the next fit
    is the local fit bit for bit."""
    require_namespaces()
    project = tmp_path / "project"
    make_certs(project / "tls", "scheduler", "localhost", "127.0.0.1")
    data, results = tmp_path / "data", tmp_path / "results"
    for folder in (data, results):
        folder.mkdir()
        os.chown(folder, 1000, 1000)
    client_argv = [sys.executable, str(CLIENT), "--workers", "3", "--results", "/results",
                   "--timeout", "120", "--kill-scheduler"]  # fmt: skip
    services, client, hosts = compose_services(
        DEPLOY / "docker" / "compose.yaml", project, data, client_argv, results
    )
    summary = run_plan(tmp_path, services, client, hosts, 3 * TIMEOUT)
    assert summary["client"] == 0, summary
    assert summary["restarts"]["scheduler-0"] >= 1, summary["restarts"]
    killed = json.loads((results / "result.json").read_text())["scheduler_killed"]
    assert killed["killed"], killed
    error = killed["error"]
    assert error["type"] == "SchedulerLostError" and "\n" not in error["text"], error
    assert "went away" in error["text"] and "nothing was released" in error["text"], error
    to_local = lambda path: str(data / Path(path).relative_to("/data"))  # noqa: E731
    check_fit(killed["after_restart"], to_local, n_workers=3)
    print(f"compose scheduler restart: {summary['seconds']:.1f} s, {summary['restarts']}")


def test_slurm_launch_script_and_jobqueue_run_and_fit_like_a_local_fit(tmp_path):
    """deploy/slurm/launch.sh (paths with spaces) and deploy/slurm/slurm_cluster.py
    (jobqueue.yaml and SLURMCluster's own job script) with stand-in sbatch/scancel."""
    require_namespaces()
    require_deploy_tools()  # dask-jobqueue
    base = tmp_path / "shared fs"
    tls = make_certs(base / "dppca tls", "localhost", "127.0.0.1")
    state = base / "state dir"
    results = tmp_path / "results"
    results.mkdir()
    driver = [sys.executable, str(SLURM_DRIVER), str(tls), str(state), str(results)]
    env = {
        **MACHINE_ENV,
        "PATH": ":".join([str(STANDINS), PYTHON_BIN, os.environ["PATH"]]),
        "HOME": str(base),
        "SBATCH_STANDIN_STATE": str(base / "sbatch"),
        "PYTHONPATH": str(ROOT),
    }
    client = {"name": "slurm-driver", "argv": driver, "env": env, "workdir": str(base)}
    summary = run_plan(tmp_path, [], client, ["dppca-node"], 2 * TIMEOUT, hostname="dppca-node")
    assert summary["client"] == 0, summary
    runs = json.loads((results / "runs.json").read_text())
    for run in ("launch", "jobqueue"):
        check_fit(json.loads((results / run / "result.json").read_text()), str, n_workers=3)
        assert runs[run]["left_running"] == [], runs[run]
    # launch.sh: the trusted worker's job carries DPPCA_TRUSTED_SBATCH's flags.
    assert runs["launch"]["trusted_flags"] == [
        "--job-name=dppca-trusted",
        "--cpus-per-task=2",
        "--mem=16G",
        "--time=08:00:00",
        "--nodelist=secure01",
    ]
    print(f"SLURM runs: {summary['seconds']:.1f} s")


@pytest.mark.parametrize("recipe", ["helm", "operator"])
def test_kubernetes_pods_run_and_fit_like_a_local_fit(recipe, tmp_path):
    """The pods of deploy/kubernetes as the dask chart renders them (helm template) or as
    the dask-kubernetes operator builds them (its own build_*_spec), run as a kubelet
    would run them, with the secrets made from make-certs.sh's folders; a client
    connects as after `kubectl port-forward` (tls://localhost:8786)."""
    require_namespaces()
    require_deploy_tools()  # helm, the dask-kubernetes operator
    tls = make_certs(tmp_path / "tls", "localhost", "127.0.0.1")
    if recipe == "helm":
        objects = render_helm_chart(helm_binary(tmp_path))
    else:
        objects = operator_built_objects(one_per_replica=True)
    data, results = tmp_path / "data", tmp_path / "results"
    for folder in (data, results):
        folder.mkdir()
        os.chown(folder, 1000, 1000)
    services, hosts = kubernetes_services(objects, tls, data)
    assert len(services) == 4  # scheduler, 2 workers, the trusted worker
    # The client: a container of the same image with the client's folder and the data.
    client = {
        **services[-1],
        "name": "client",
        "argv": [
            sys.executable,
            str(CLIENT),
            "--scheduler",
            "tls://localhost:8786",
            "--workers",
            "3",
            "--results",
            "/results",
        ],
        "env": {
            **image_environment(),
            "DASK_DPPCA_DATA_DIR": "/data",
            **client_tls_env(Path("/tls")),
        },
        "mounts": [
            [str(tls / "client"), "/tls", True],
            [str(data), "/data", False],
            [str(results), "/results", False],
        ],
    }
    summary = run_plan(tmp_path, services, client, hosts, TIMEOUT)
    assert summary["client"] == 0 and not summary["exited_early"], summary
    check_fit(
        json.loads((results / "result.json").read_text()),
        lambda path: str(data / Path(path).relative_to("/data")),
        n_workers=3,
    )
    print(f"{recipe} pods: {summary['seconds']:.1f} s")
