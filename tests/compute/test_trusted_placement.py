"""Trusted worker, explicit: warn once and record where, or refuse with require_trusted."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import dask_dppca as dd
from dask_dppca.compute import cluster
from dask_dppca.compute.trusted.tickets import RELEASE_METADATA_KEY

X = np.random.default_rng(4).standard_t(1, size=(800, 4))  # test data only


@pytest.mark.cluster
def test_no_trusted_worker_warns_once_and_records_the_releasing_worker(cluster_client):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = dd.DPPCA(2, scheduler=cluster_client).fit(X)
    untrusted = [w for w in caught if issubclass(w.category, dd.UntrustedReleaseWarning)]
    assert len(untrusted) == 1
    workers = set(cluster_client.scheduler_info(n_workers=-1)["workers"])
    assert est.privacy_["released_on"] in workers
    assert est.privacy_["release_placement"] == "any worker (none offers 'dppca-trusted')"
    ticket = cluster_client.get_metadata([*RELEASE_METADATA_KEY, est.privacy_["fit_id"]])
    assert ticket["worker"] == est.privacy_["released_on"]


@pytest.mark.cluster
def test_require_trusted_refuses_before_computing_and_charges_nothing(cluster_client):
    tickets_before = set(cluster_client.get_metadata(list(RELEASE_METADATA_KEY), default={}))
    with dd.PrivacyBudget(epsilon=4, delta=1e-5) as budget:
        with pytest.raises(ValueError, match="^require_trusted: no worker offers"):
            dd.DPPCA(2, scheduler=cluster_client, require_trusted=True).fit(X)
    assert budget.releases == 0
    assert (
        set(cluster_client.get_metadata(list(RELEASE_METADATA_KEY), default={})) == tickets_before
    )


@pytest.mark.cluster
def test_an_error_on_the_active_client_leaves_as_itself(cluster_client):
    """The default target (the active client): an error inside the fit is not read as
    "no active client" (which started the embedded cluster and raised RuntimeError)."""
    cluster.close_embedded_cluster()
    with cluster_client.as_current():
        with pytest.raises(ValueError, match="^require_trusted: no worker offers"):
            dd.DPPCA(2, require_trusted=True).fit(X)
    assert "client" not in cluster._embedded


@pytest.mark.cluster
def test_require_trusted_accepts_a_named_trusted_worker(cluster_client):
    named = sorted(cluster_client.scheduler_info(n_workers=-1)["workers"])[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", dd.UntrustedReleaseWarning)
        est = dd.DPPCA(2, scheduler=cluster_client, trusted_worker=named, require_trusted=True).fit(
            X
        )
    assert est.privacy_["released_on"] == named


def test_require_trusted_refuses_a_local_scheduler():
    with pytest.raises(ValueError, match="^require_trusted: the local scheduler 'threads'"):
        dd.DPPCA(2, scheduler="threads", require_trusted=True).fit(X)


def test_local_scheduler_records_this_process():
    est = dd.DPPCA(2, scheduler="threads").fit(X)
    assert est.privacy_["released_on"] == "this process"
    assert est.privacy_["release_placement"] == "this process (local scheduler 'threads')"


def test_an_analysis_without_a_trusted_worker_says_so_once(cluster_client):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dd.analyze(X, 2, epsilon=2.0, scheduler=cluster_client)
    untrusted = [w for w in caught if issubclass(w.category, dd.UntrustedReleaseWarning)]
    assert len(untrusted) == 1  # 5 releases (directions, 3 scree, score map), one warning
