"""No fit escapes the budget, however its process was started.

Each way a fit used to run uncharged is tried for real: loky workers started by an
earlier joblib call, a ``spawn`` pool and a ``forkserver`` executor (both started before
the budget), ``subprocess`` (on the default embedded cluster), a worker process of a
``LocalCluster`` running the fit inside a task, and a child of a process with an
in-memory budget (refused).  Then the Dask configuration's default ledger
(``dask-dppca.ledger``) and the ``budget-required`` flag.  Every child's fit is charged
to the parent's ledger (or refused); nothing is mocked.  Data are test data (fixed seeds).
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ProcessPoolExecutor

import dask
import numpy as np
import pytest
from joblib import Parallel, delayed

import dask_dppca as dd
from dask_dppca.privacy.budget.charging import BUDGET_ENV, BudgetRequiredError, set_default_budget
from dask_dppca.privacy.budget.privacy_budget import LedgerError, PrivacyBudget

TIMEOUT = 180


def fit_here(seed: int) -> tuple[int, str]:
    """A fit built and run in whichever process calls it: (its pid, the fit id)."""
    import warnings

    x = np.random.default_rng(seed).standard_normal((40, 3))  # test data only
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the noise swamps 40 rows: not the point here
        est = dd.DPPCA(epsilon=0.5, scheduler="synchronous").fit(x)
    return os.getpid(), est.privacy_["fit_id"]


def fit_here_saying_when_started(seed: int) -> tuple[int, str, float]:
    """:func:`fit_here`, and when its process started (loky may end it afterwards)."""
    import psutil

    return (*fit_here(seed), psutil.Process().create_time())


def refused_here(seed: int) -> str:
    """The error a fit here raises, by name and message ("" if it ran)."""
    try:
        fit_here(seed)
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return ""


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv(BUDGET_ENV, raising=False)
    monkeypatch.delenv("DASK_DASK_DPPCA__LEDGER", raising=False)
    monkeypatch.delenv("DASK_DASK_DPPCA__BUDGET_REQUIRED", raising=False)


@pytest.fixture
def budget(tmp_path, clean_env):
    return PrivacyBudget(20.0, 1e-5, ledger=tmp_path / "study.ledger", create=True)


def _charged(budget: PrivacyBudget) -> list[tuple[int, str]]:
    return [(row.pid, row.fit_id) for row in budget.spent]


@pytest.fixture
def loky_workers():
    yield
    from joblib.externals.loky import get_reusable_executor

    get_reusable_executor().shutdown(wait=True, kill_workers=True)


@pytest.mark.slow
def test_loky_workers_started_by_an_earlier_joblib_call_are_charged(budget, loky_workers):
    """The issue's case: loky's workers exist before the budget; the function builds a
    fresh estimator in the worker (nothing carried), under the default and under ``with``.
    The fits are submitted to joblib's reusable executor itself, so that they provably run
    in the workers started before (``Parallel`` may replace workers between calls)."""
    from joblib.externals.loky import get_reusable_executor

    Parallel(n_jobs=2)(delayed(os.getpid)() for _ in range(4))  # an earlier joblib call
    executor = get_reusable_executor(reuse=True)  # its workers, as they are
    executor.submit(os.getpid).result(timeout=TIMEOUT)
    set_at = time.time()
    set_default_budget(budget)
    try:
        born = [
            executor.submit(fit_here_saying_when_started, seed).result(timeout=TIMEOUT)
            for seed in range(2)
        ]
    finally:
        set_default_budget(None)
    with budget:
        born.append(executor.submit(fit_here_saying_when_started, 2).result(timeout=TIMEOUT))
        fits = Parallel(n_jobs=2)(delayed(fit_here)(seed) for seed in range(3, 5))
    # The first ran in a worker that predates the budget (loky may replace a worker
    # after a task that grew its memory, so later ones may run in fresh workers).
    assert born[0][2] < set_at
    fits += [(pid, fit_id) for pid, fit_id, _ in born]
    assert sorted(_charged(budget)) == sorted(fits) and os.getpid() not in dict(fits)


@pytest.mark.slow
def test_spawn_and_forkserver_pools_started_before_the_block_are_charged(budget):
    spawn = multiprocessing.get_context("spawn").Pool(1)
    forkserver = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("forkserver"))
    try:
        forkserver.submit(os.getpid).result(timeout=TIMEOUT)  # its server and worker exist
        with budget:
            fits = [
                spawn.apply_async(fit_here, (0,)).get(timeout=TIMEOUT),
                forkserver.submit(fit_here, 1).result(timeout=TIMEOUT),
            ]
    finally:
        spawn.terminate()
        forkserver.shutdown(wait=True, cancel_futures=True)
    assert sorted(_charged(budget)) == sorted(fits)
    assert len({pid for pid, _ in fits} | {os.getpid()}) == 3


_CHILD = """
import json, warnings
import numpy as np
import dask_dppca as dd
warnings.simplefilter("ignore")
x = np.random.default_rng(5).standard_normal((40, 3))  # test data only
try:
    est = dd.DPPCA(epsilon=0.5{scheduler}).fit(x)
    print(json.dumps(["ran", est.privacy_["fit_id"]]))
except Exception as error:
    print(json.dumps([type(error).__name__, str(error)]))
"""


def _child(scheduler: str = "", env: dict | None = None) -> list[str]:
    import json

    code = textwrap.dedent(_CHILD.format(scheduler=scheduler))
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.cluster
def test_a_subprocess_fit_on_the_default_embedded_cluster_is_charged(budget):
    with budget:  # an open block: nothing in the child's environment names the ledger
        outcome, fit_id = _child()
    assert outcome == "ran" and [f for _, f in _charged(budget)] == [fit_id]


@pytest.mark.cluster
def test_a_fit_inside_a_task_on_local_worker_processes_started_before_is_charged(
    budget, cluster_client
):
    cluster_client.submit(os.getpid).result(timeout=TIMEOUT)  # the workers exist already
    with budget:
        pid, fit_id = cluster_client.submit(fit_here, 7, pure=False).result(timeout=TIMEOUT)
    assert _charged(budget) == [(pid, fit_id)] and pid != os.getpid()


@pytest.mark.slow
def test_a_child_of_a_process_with_an_in_memory_budget_is_refused(clean_env):
    with PrivacyBudget(2.0, 1e-5) as in_memory:
        outcome, message = _child(', scheduler="synchronous"')
    assert outcome == "LedgerError" and f"process {os.getpid()}, an ancestor" in message
    assert in_memory.releases == 0


_CONFIGURED_CHILD = """
import json, os, warnings
import numpy as np
import dask_dppca as dd
warnings.simplefilter("ignore")
x = np.random.default_rng(5).standard_normal((40, 3))  # test data only
out = [dd.DPPCA(epsilon=0.5, scheduler="synchronous").fit(x).privacy_["fit_id"]]
# Read at fit time: a variable set after Dask read its configuration counts.
import dask
dask.config.set({"dask-dppca.ledger": None})
del os.environ["DASK_DASK_DPPCA__LEDGER"]
os.environ["DASK_DASK_DPPCA__BUDGET_REQUIRED"] = "1"
try:
    dd.DPPCA(epsilon=0.5, scheduler="synchronous").fit(x)
except Exception as error:
    out.append(f"{type(error).__name__}: {error}")
print(json.dumps(out))
"""


@pytest.mark.slow
def test_the_dask_configuration_names_a_default_ledger_and_can_require_one(budget, tmp_path):
    import json

    with dask.config.set({"dask-dppca.ledger": budget.ledger}):
        _, here = fit_here(0)
        with budget:
            fit_here(1)  # named twice: charged once
    missing = str(tmp_path / "missing.ledger")
    with dask.config.set({"dask-dppca.ledger": missing}):
        with pytest.raises(LedgerError, match=r"dask-dppca.ledger='.*missing.ledger'"):
            fit_here(2)
    with dask.config.set({"dask-dppca.budget-required": True}):
        with pytest.raises(BudgetRequiredError, match="budget-required flag is set"):
            fit_here(3)
        with budget:
            fit_here(4)  # with a budget it runs, charged
    with dask.config.set({"dask-dppca.budget-required": "sometimes"}):
        with pytest.raises(ValueError, match="dask-dppca.budget-required: expected true"):
            fit_here(5)
    done = subprocess.run(
        [sys.executable, "-c", _CONFIGURED_CHILD],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "DASK_DASK_DPPCA__LEDGER": budget.ledger},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    there, refused = json.loads(done.stdout.strip().splitlines()[-1])
    assert refused.startswith("BudgetRequiredError") and "nothing was released" in refused
    charged = [f for _, f in _charged(budget)]
    assert len(charged) == 4 and charged[0] == here and charged[-1] == there


def test_the_ledger_where_the_noise_is_drawn_charges_a_local_fit_once_and_refuses_beyond(
    tmp_path, clean_env
):
    """dask-dppca.release.ledger in the process that draws (here: a local scheduler):
    charged inside the release, once when it is also the client's budget, and a release
    it cannot afford refused before any noise."""
    from dask_dppca.privacy.budget.privacy_budget import BudgetExceededError
    from dask_dppca.privacy.mechanisms import mechanism

    site = str(tmp_path / "site.ledger")
    keys = {
        "dask-dppca.release.ledger": site,
        "dask-dppca.release.epsilon": 1.2,
        "dask-dppca.release.delta": 1e-5,
    }
    with dask.config.set(keys):
        _, alone = fit_here(0)  # no budget on the client's side at all
        ledger = PrivacyBudget.open(site)
        with ledger:
            _, both = fit_here(1)  # the client's budget is the same file: one row
        draws = []
        original = mechanism.add_symmetric_noise
        mechanism.add_symmetric_noise = lambda *a, **k: draws.append(1) or original(*a, **k)
        try:
            with pytest.raises(BudgetExceededError, match="refused where the noise is drawn"):
                for seed in range(2, 12):  # until the site ledger is spent
                    fit_here(seed)
        finally:
            mechanism.add_symmetric_noise = original
    rows = ledger._ledger.rows()
    assert [r.fit_id for r in rows[:2]] == [alone, both]
    assert "charged where drawn" in rows[0].label and "charged where drawn" not in rows[1].label
    assert {r.state for r in rows} == {"committed"}  # the refused one left no row
    assert len(draws) == len(rows) - 2  # the refused release drew nothing
    with dask.config.set({"dask-dppca.release.ledger": site, "dask-dppca.release.delta": 1e-5}):
        with pytest.raises(ValueError, match="set both totals"):
            fit_here(20)
