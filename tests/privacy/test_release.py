"""The trusted release: sealed exact sum, drawn-once ticket, placement on the trusted worker."""

from __future__ import annotations

import subprocess
import sys
import uuid

import numpy as np
import pytest
from distributed import Client, LocalCluster

import dask_dppca as dd
from dask_dppca.privacy.noise import SeededSampler
from dask_dppca.privacy import release as release_module
from dask_dppca.privacy.release import (
    RELEASE_METADATA_KEY,
    TRUSTED_RESOURCE,
    ExactSumLeakError,
    ReleaseAlreadyDrawnError,
    TrustedSum,
    private_release,
    register_sealing,
)

pytestmark = pytest.mark.filterwarnings("ignore::dask_dppca.privacy.noise.NonPrivateRandomStateWarning")


def test_release_is_drawn_once_per_fit_id_locally():
    fit_id = uuid.uuid4().hex
    private_release(np.eye(3), 3, 0.1, 2, SeededSampler(0), fit_id)
    with pytest.raises(ReleaseAlreadyDrawnError):
        private_release(np.eye(3), 3, 0.1, 2, SeededSampler(0), fit_id)


def test_release_returns_only_functions_of_the_noisy_matrix():
    release = private_release(np.diag([3.0, 2.0, 1.0]), 1, 1e-9, 2, SeededSampler(1), uuid.uuid4().hex)
    # Functions of K_tilde, and where the noise was drawn (public placement, no data).
    assert set(vars(release)) == {"eigenvalues", "components", "released_on"}
    assert release.released_on == "this process"
    assert np.allclose(release.eigenvalues, [3, 2, 1], atol=1e-6)
    assert np.allclose(np.abs(release.components), np.eye(3)[:2], atol=1e-6)


@pytest.mark.cluster
def test_sealed_exact_sum_cannot_reach_the_client(cluster_client):
    # This process first runs the embedded in-process cluster (which also registers the
    # sealing plugin, on a worker inside this process): that must not open the seal here.
    dd.DPPCA(2).fit(np.random.default_rng(1).standard_normal((300, 3)))  # test data
    assert not release_module._WORKER_PROCESS["sealing"]
    register_sealing(cluster_client)
    workers = sorted(cluster_client.scheduler_info(n_workers=-1)["workers"])
    sealed = cluster_client.submit(TrustedSum, np.eye(2), workers=workers[:1], pure=False)
    with pytest.raises(ExactSumLeakError):
        sealed.result()
    # Between workers it moves freely: a task on the other worker can open it.
    opened = cluster_client.submit(lambda s: float(s.value.sum()), sealed, pure=False,
                                   workers=workers[1:], allow_other_workers=False)
    assert opened.result() == 2.0


@pytest.mark.cluster
def test_cluster_fit_draws_once_and_a_rerun_refuses(cluster_client, elliptical):
    x, _ = elliptical
    est = dd.DPPCA(n_components=2, scheduler=cluster_client).fit(x[:600])
    fit_id = est.privacy_["fit_id"]
    tickets = cluster_client.get_metadata(list(RELEASE_METADATA_KEY))
    assert fit_id in tickets  # exactly one ticket per fit id: a dict key
    again = cluster_client.submit(private_release, np.eye(6), 15, 0.1, 2, SeededSampler(0), fit_id,
                                  pure=False, retries=0)
    with pytest.raises(ReleaseAlreadyDrawnError):
        again.result()


@pytest.mark.cluster
def test_release_runs_on_the_worker_offering_the_trusted_resource(tmp_path):
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster, set_as_default=False) as client:
        worker = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address,
             "--nthreads", "1", "--resources", f"{TRUSTED_RESOURCE}=1", "--no-dashboard",
             "--local-directory", str(tmp_path)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            client.wait_for_workers(2, timeout=60)
            info = client.scheduler_info(n_workers=-1)["workers"]
            trusted = [a for a, w in info.items() if TRUSTED_RESOURCE in (w.get("resources") or {})]
            assert len(trusted) == 1
            rng = np.random.default_rng(3)  # test data only
            est = dd.DPPCA(n_components=1, scheduler=client).fit(rng.standard_normal((300, 4)))
            ticket = client.get_metadata([*RELEASE_METADATA_KEY, est.privacy_["fit_id"]])
            assert ticket["worker"] == trusted[0]
        finally:
            worker.terminate()
            worker.wait(timeout=30)


@pytest.mark.cluster
def test_named_trusted_worker_is_used_and_unknown_one_refused(cluster_client):
    workers = sorted(cluster_client.scheduler_info(n_workers=-1)["workers"])
    rng = np.random.default_rng(4)  # test data only
    x = rng.standard_normal((200, 3))
    est = dd.DPPCA(n_components=1, scheduler=cluster_client, trusted_worker=workers[-1]).fit(x)
    ticket = cluster_client.get_metadata([*RELEASE_METADATA_KEY, est.privacy_["fit_id"]])
    assert ticket["worker"] == workers[-1]
    with pytest.raises(ValueError, match="trusted_worker"):
        dd.DPPCA(scheduler=cluster_client, trusted_worker="tcp://127.0.0.1:9").fit(x)


def test_sealed_bytes_made_here_reopen_here_and_foreign_ones_do_not(monkeypatch):
    """An in-process worker's spill (pickled and read back in this process) reopens;
    the same bytes made by another process (another token) are refused here."""
    import pickle

    here = pickle.dumps(TrustedSum(np.eye(2)))
    assert np.array_equal(pickle.loads(here).value, np.eye(2))
    monkeypatch.setattr(release_module, "_PROCESS_TOKEN", "another process")
    foreign = pickle.dumps(TrustedSum(np.eye(2)))
    monkeypatch.undo()
    with pytest.raises(ExactSumLeakError):
        pickle.loads(foreign)
