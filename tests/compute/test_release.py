"""The trusted release: sealed lane sums, drawn-once ticket, placement on the trusted worker."""

from __future__ import annotations

import subprocess
import sys
import uuid

import numpy as np
import pytest
from distributed import Client, LocalCluster

import dask_dppca as dd
from dask_dppca.compute import TRUSTED_RESOURCE
from dask_dppca.compute.trusted.release import release_task
from dask_dppca.compute.trusted.tickets import RELEASE_METADATA_KEY, ReleaseAlreadyDrawnError
from dask_dppca.compute.workers import prepare_workers
from dask_dppca.graph import ExactSumLeakError
from dask_dppca.graph import sealed as sealed_module
from tests.releases import lane_of, mechanism_for

pytestmark = pytest.mark.filterwarnings(
    "ignore::dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning"
)


def _mechanism(d: int, n: int = 6, sigma: float = 0.1):
    return mechanism_for(n, d, sigma)


_lane = lane_of


def test_release_is_drawn_once_per_fit_id_locally():
    fit_id = uuid.uuid4().hex
    release_task(_mechanism(3), 2, fit_id, _lane(np.eye(3)))
    with pytest.raises(ReleaseAlreadyDrawnError):
        release_task(_mechanism(3), 2, fit_id, _lane(np.eye(3)))


def test_the_release_task_adds_the_lanes_then_releases_once():
    """Its input is the lanes' sums, their exact total is what the mechanism normalises."""
    release = release_task(
        _mechanism(3, n=2, sigma=1e-9),
        3,
        uuid.uuid4().hex,
        _lane(np.diag([1.0, 0.5, 0.0])),
        _lane(np.diag([2.0, 1.5, 1.0])),
    )
    assert np.allclose(release.eigenvalues, [3.0, 2.0, 1.0], atol=1e-6)  # |P| = 1
    assert release.released_on == "this process"


@pytest.mark.cluster
def test_sealed_lane_sums_cannot_reach_the_client(cluster_client):
    # This process first runs the embedded in-process cluster (which also registers the
    # worker plugin, on a worker inside this process): that must not open the seal here.
    dd.DPPCA(2).fit(np.random.default_rng(1).standard_normal((300, 3)))  # test data
    assert not sealed_module.unsealing_allowed()
    prepare_workers(cluster_client)
    workers = sorted(cluster_client.scheduler_info(n_workers=-1)["workers"])
    sealed = cluster_client.submit(_lane, np.eye(2), workers=workers[:1], pure=False)
    with pytest.raises(ExactSumLeakError):
        sealed.result()
    # Between workers it moves freely: a task on the other worker can open it.
    opened = cluster_client.submit(
        lambda s: float(s.total.to_float().sum()),
        sealed,
        pure=False,
        workers=workers[1:],
        allow_other_workers=False,
    )
    assert opened.result() == 2.0


@pytest.mark.cluster
def test_cluster_fit_draws_once_and_a_rerun_refuses(cluster_client, elliptical):
    x, _ = elliptical
    est = dd.DPPCA(n_components=2, scheduler=cluster_client).fit(x[:600])
    fit_id = est.privacy_["fit_id"]
    tickets = cluster_client.get_metadata(list(RELEASE_METADATA_KEY))
    assert fit_id in tickets  # exactly one ticket per fit id: a dict key
    again = cluster_client.submit(
        release_task, _mechanism(6), 2, fit_id, _lane(np.eye(6)), pure=False, retries=0
    )
    with pytest.raises(ReleaseAlreadyDrawnError):
        again.result()


@pytest.mark.cluster
def test_release_runs_on_the_worker_offering_the_trusted_resource(tmp_path):
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_worker",
                cluster.scheduler_address,
                "--nthreads",
                "1",
                "--resources",
                f"{TRUSTED_RESOURCE}=1",
                "--no-dashboard",
                "--local-directory",
                str(tmp_path),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
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
    """Sealed bytes pickled and read back in this process reopen; the same bytes made by
    another worker process (another token) are refused here; a process that hosts no
    cluster worker pickles lane sums plainly (the local "processes" scheduler's pool)."""
    import pickle

    assert pickle.loads(pickle.dumps(_lane(np.eye(2)))).total.to_float().sum() == 2.0
    monkeypatch.setitem(sealed_module._STATE, "worker_process", True)
    here = pickle.dumps(_lane(np.eye(2)))
    assert b"_unseal" in here
    monkeypatch.setattr(sealed_module, "_PROCESS_TOKEN", "another process")
    foreign = pickle.dumps(_lane(np.eye(2)))
    monkeypatch.undo()
    assert pickle.loads(here).total.to_float().sum() == 2.0
    with pytest.raises(ExactSumLeakError):
        pickle.loads(foreign)


@pytest.mark.cluster
def test_a_submitted_release_that_never_started_is_abandoned_and_can_never_draw(cluster_client):
    """On a cluster a failed fit proves "never drew" by taking the release's ticket first:
    a release task that starts afterwards refuses; a ticket already taken proves nothing."""
    from dask_dppca.compute import ClusterTarget, LocalScheduler
    from dask_dppca.compute.trusted.tickets import mark_release_dispatched

    target = ClusterTarget(cluster_client)
    never_sent = uuid.uuid4().hex
    assert target.abandon(never_sent)  # nothing was ever dispatched
    late = uuid.uuid4().hex
    mark_release_dispatched(late)
    assert target.abandon(late)
    task = cluster_client.submit(release_task, _mechanism(3), 3, late, _lane(np.eye(3)), pure=False)
    with pytest.raises(ReleaseAlreadyDrawnError, match="abandoned"):
        task.result(timeout=120)
    drawn = uuid.uuid4().hex
    mark_release_dispatched(drawn)
    cluster_client.submit(
        release_task, _mechanism(3), 3, drawn, _lane(np.eye(3)), pure=False
    ).result(timeout=120)
    assert not target.abandon(drawn)
    assert not LocalScheduler("threads").abandon(drawn)  # local: dispatched means drawn


@pytest.mark.cluster
def test_a_fit_stopped_after_its_release_returned_stays_charged(
    cluster_client, tmp_path, monkeypatch
):
    """An interrupt (SIGINT, SIGTERM) after the release came back, while the client prunes
    its tickets: the release drew, so the reservation must stay spent (it was given back
    before: a settled release no longer counted as dispatched)."""
    import dask_dppca as dd
    from dask_dppca.compute.trusted import release as release_module
    from dask_dppca.privacy.budget.privacy_budget import PrivacyBudget

    def interrupted(client):
        raise KeyboardInterrupt

    monkeypatch.setattr(release_module, "prune_release_tickets", interrupted)
    budget = PrivacyBudget(2.0, 1e-5, ledger=tmp_path / "l.ledger", create=True)
    x = np.random.default_rng(0).standard_normal((60, 3))  # test data only
    with budget, pytest.raises(KeyboardInterrupt):
        dd.DPPCA(epsilon=0.5, scheduler=cluster_client).fit(x)
    (row,) = budget.spent
    assert row.state == "reserved" and row.stage == "dispatched"


def test_a_cluster_target_repr_names_its_scheduler_or_a_closed_client():
    """A closed client has no scheduler (``client.scheduler is None``): the repr says so."""
    from types import SimpleNamespace

    from dask_dppca.compute import ClusterTarget

    open_client = SimpleNamespace(scheduler=SimpleNamespace(address="tcp://10.0.0.1:8786"))
    assert repr(ClusterTarget(open_client)) == "ClusterTarget('tcp://10.0.0.1:8786')"
    assert repr(ClusterTarget(SimpleNamespace(scheduler=None))) == "ClusterTarget(<closed client>)"


def test_stage_names_and_the_log_filter_cover_every_task_of_a_fit():
    """Every key prefix a fit's graph uses gets a bar label for people; the filter drops
    distributed's report of our own failed tasks and nothing else."""
    import logging

    from dask_dppca.compute.logs import OwnTaskFailureFilter
    from dask_dppca.compute.progress import stage_of

    assert stage_of(("dppca-read-0123456789abcdef0123456789abcdef", 2, 0)) == "read the records"
    assert stage_of("original-dppca-read-0123456789abcdef") == "read the records"
    assert stage_of("dppca-pairs-0123456789abcdef-1-3") == "pair sums (the kernel)"
    assert stage_of(("rechunk-merge-0123456789abcdef", 0, 0)) == "prepare the input"
    assert stage_of("dppca-release-0123").startswith("add the noise")

    def record(message, *args):
        return logging.LogRecord(
            "distributed.worker", logging.ERROR, "w.py", 1, message, args, None
        )

    quiet = OwnTaskFailureFilter()
    failed = "Compute Failed\nKey:       %s\nState:     %s\n"
    assert not quiet.filter(record(failed, ("dppca-read-abc", 2, 0), "executing"))
    assert quiet.filter(record(failed, ("user-task-abc", 2, 0), "executing"))
    cancelled = (
        "Async instruction for <Task cancelled name=\"execute('dppca-pairs-a-0-0')\"> "
        "ended with CancelledError"
    )
    assert not quiet.filter(record(cancelled))
    assert quiet.filter(record(cancelled.replace("dppca-pairs", "user")))
    assert quiet.filter(record("Stopping worker at inproc://x"))
