"""A trusted worker that holds the ledger: every release it draws is charged there.

Real ``dask scheduler`` / ``dask worker`` processes (tests/live.py); the trusted worker
is started with ``DASK_DASK_DPPCA__RELEASE__LEDGER`` (and its totals) in its
environment, as an operator would.  The client in this test process sets no budget at
all, and a fit run *inside* a task on a worker (``client.submit``) sets none either:
both are charged to the worker's ledger, inside the release task, before the draw.  A
release the ledger cannot afford is refused there: no noise drawn (its ticket is never
taken), a ``BudgetExceededError`` reaching the client, and the client's own budget, if
it has one, given back.  Data are test data (fixed seed).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import distributed
import numpy as np
import pytest

import dask_dppca as dd
from dask_dppca.compute.trusted.tickets import RELEASE_METADATA_KEY
from dask_dppca.privacy.budget.charging import BUDGET_ENV
from dask_dppca.privacy.budget.privacy_budget import BudgetExceededError, PrivacyBudget
from tests.live import PlainCluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]


def _x(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((120, 3))  # test data only


def test_a_trusted_worker_charges_its_own_ledger_whatever_the_client_sets(tmp_path):
    ledger = str(tmp_path / "worker.ledger")
    env = {name: value for name, value in os.environ.items() if name != BUDGET_ENV}
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    trusted_env = {
        **env,
        "PYTHONPATH": pythonpath,
        "DASK_DASK_DPPCA__RELEASE__LEDGER": ledger,
        # Room for four releases at epsilon 1 (delta 1e-6): two, then not one at 1.9.
        "DASK_DASK_DPPCA__RELEASE__EPSILON": "2",
        "DASK_DASK_DPPCA__RELEASE__DELTA": "1e-5",
    }
    with PlainCluster(tmp_path, env={**env, "PYTHONPATH": pythonpath}) as cluster:
        cluster.add_worker("worker-a", "--nthreads", "2")  # one for a task that fits
        cluster.env = {**trusted_env, "PYTHONUNBUFFERED": "1"}  # this worker only
        cluster.add_worker("trusted", "--resources", "dppca-trusted=1")
        with distributed.Client(cluster.address, set_as_default=False, timeout=60) as client:
            # 1. A client without any budget: charged on the worker.
            first = dd.DPPCA(epsilon=1.0, scheduler=client, require_trusted=True).fit(_x())
            rows = PrivacyBudget.open(ledger).spent
            assert [(r.fit_id, r.state, r.stage) for r in rows] == [
                (first.privacy_["fit_id"], "committed", "dispatched")
            ]
            assert "charged where drawn: tcp://127.0.0.1" in rows[0].label
            assert rows[0].pid != os.getpid()  # by the worker process

            # 2. A fit inside a task on a worker (its own client, no budget): charged too.
            def fit_in_a_task(x):
                with distributed.worker_client() as own_client:  # seceded: Dask's way
                    est = dd.DPPCA(epsilon=1.0, scheduler=own_client, require_trusted=True)
                    return est.fit(x).privacy_["fit_id"]

            inner = client.submit(fit_in_a_task, _x(1), pure=False).result(timeout=180)
            rows = PrivacyBudget.open(ledger).spent
            assert [r.fit_id for r in rows] == [first.privacy_["fit_id"], inner]

            # 3. Beyond the worker's ledger: refused inside the release task, nothing
            # drawn, and the client's own budget gets its reservation back.
            own = PrivacyBudget(10.0, 1e-5, ledger=tmp_path / "client.ledger", create=True)
            with own, pytest.raises(BudgetExceededError) as refused:
                dd.DPPCA(epsilon=1.9, scheduler=client, require_trusted=True).fit(_x(2))
            message = str(refused.value)
            assert "refused where the noise is drawn" in message and ledger in message
            assert "no noise was drawn" in message
            fit_id = re.search(r"release (\w+) refused", message).group(1)
            assert client.get_metadata([*RELEASE_METADATA_KEY, fit_id], default=None) is None
            assert len(PrivacyBudget.open(ledger).spent) == 2
            assert [r.state for r in own._ledger.rows()] == ["cancelled"]
