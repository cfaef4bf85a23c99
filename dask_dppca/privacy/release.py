"""The trusted release: exact sum -> K_hat -> K_tilde = K_hat + noise -> eigenvectors.

:func:`private_release` is the only function that sees the exact K_hat and the only
one that draws noise.  It runs once per fit: on a distributed cluster as a single task
(``pure=False``, ``retries=0``) on the trusted worker, guarded by a release ticket held
on the scheduler so that a re-execution (a lost worker, a recomputed key) refuses to
draw a second time instead of releasing twice.  It returns only quantities computed
from K_tilde.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from distributed.diagnostics.plugin import WorkerPlugin

from ..cluster import TRUSTED_RESOURCE, in_this_process
from .noise import NoiseSampler, add_symmetric_noise
from .trust import verified_placement

__all__ = [
    "PrivateRelease",
    "TrustedSum",
    "ExactSumLeakError",
    "register_sealing",
    "ReleaseAlreadyDrawnError",
    "private_release",
    "release_placement",
    "placement_available",
    "mark_release_dispatched",
    "abandon_release",
    "TRUSTED_RESOURCE",
    "RELEASE_METADATA_KEY",
    "ABANDONED_METADATA_KEY",
]

#: Scheduler metadata prefix under which release tickets are recorded, one per fit id.
RELEASE_METADATA_KEY = ("dask-dppca", "releases")
#: Scheduler metadata prefix of the releases a failed fit abandoned before they drew.
ABANDONED_METADATA_KEY = ("dask-dppca", "abandoned")

_local_tickets: set[str] = set()
_local_tickets_lock = threading.Lock()
# Fit ids whose release was dispatched from this process: called here, or submitted as a
# task (runner).  For the budget: see abandon_release.
_dispatched: set[str] = set()


class ReleaseAlreadyDrawnError(RuntimeError):
    """The release of this fit already ran once; noise is never drawn twice."""


@dataclass(frozen=True)
class PrivateRelease:
    """What leaves the trusted node: functions of K_tilde only.

    Attributes
    ----------
    eigenvalues : ndarray, shape (d,)
        Eigenvalues of K_tilde, decreasing.
    components : ndarray, shape (n_components, d)
        Matching unit eigenvectors as rows, sign fixed so the largest-magnitude entry
        is positive (a deterministic post-processing).
    released_on : str
        Address of the worker that drew the noise, or ``"this process"``.
    """

    eigenvalues: np.ndarray
    components: np.ndarray
    released_on: str = "this process"


class TrustedSum:
    """The exact pair sum, sealed: it can be unpickled on a Dask worker only.

    On a distributed cluster the graph's last task wraps the exact sum in this type.
    Moving it between workers works as usual; deserialising it anywhere else (the
    client, a notebook) raises :class:`ExactSumLeakError`.  A tripwire that makes the
    "exact K_hat never reaches the client" property checkable (defence in depth, not
    a wall: docs/privacy.md, threat model).
    """

    def __init__(self, value: np.ndarray) -> None:
        self.value = value

    def __reduce__(self):
        return (_unseal_on_worker, (self.value, _PROCESS_TOKEN))


class ExactSumLeakError(RuntimeError):
    """The exact K_hat sum was about to be deserialised outside a Dask worker."""


# Set in worker processes by SealingPlugin.  Data moving between workers is deserialised
# by the worker's communication code, outside any task, so "inside a task" cannot be
# the test: "in a process that hosts a worker" is.
_WORKER_PROCESS = {"sealing": False}
# A random name of this process, written into every sealed pickle made here: bytes that
# never left the process (an in-process worker spilling to disk and reading back) may be
# reopened here, bytes from anywhere else only in a worker process.
_PROCESS_TOKEN = secrets.token_hex(16)


def _unseal_on_worker(value: np.ndarray, origin: str | None = None) -> TrustedSum:
    if not (_WORKER_PROCESS["sealing"] or origin == _PROCESS_TOKEN):
        raise ExactSumLeakError(
            "the exact K_hat sum may only be deserialised on a Dask worker, never on a client"
        )
    return TrustedSum(value)


def register_sealing(client: Any, attempts: int = 5) -> None:
    """Let this cluster's worker processes (present and future) open a :class:`TrustedSum`.

    A worker killed an instant earlier can make the broadcast fail before the
    scheduler notices the loss; the scheduler keeps the plugin, so registering again
    once the dead worker is gone is safe.
    """
    for attempt in range(attempts):
        try:
            client.register_plugin(SealingPlugin(), name="dask-dppca-sealing")
            return
        except OSError:  # CommClosedError: a worker died during the broadcast
            if attempt == attempts - 1:
                raise
            time.sleep(0.5 * (attempt + 1))


class SealingPlugin(WorkerPlugin):
    """Worker plugin marking worker processes as allowed to open the sealed sum.

    Workers inside the client's own process (``inproc://`` addresses: the embedded
    cluster, ``LocalCluster(processes=False)``) do not mark it: they exchange objects
    without pickling, and what they spill carries this process's token.  So a process
    that once ran the embedded cluster still refuses a sealed sum sent by a remote
    cluster.
    """

    def setup(self, worker) -> None:  # noqa: D102 - distributed.WorkerPlugin protocol
        if not in_this_process(worker.address):
            _WORKER_PROCESS["sealing"] = True


def private_release(
    kernel_sum: np.ndarray,
    n_pairs: int,
    sigma: float,
    n_components: int,
    sampler: NoiseSampler,
    fit_id: str,
) -> PrivateRelease:
    """Normalise the exact sum, add the noise once, and eigendecompose.

    Parameters
    ----------
    kernel_sum : ndarray, shape (d, d), or TrustedSum
        Exact ``sum_P g g^T`` (never leaves the cluster).
    n_pairs : int
        ``|P|``.
    sigma : float
        Calibrated noise scale (vecd law: diagonal sigma^2, off-diagonal sigma^2 / 2).
    n_components : int
        Number of leading eigenvectors to return.
    sampler : NoiseSampler
        Float-safe noise source.
    fit_id : str
        Public random identifier of the fit; the ticket that makes the draw unique.

    Raises
    ------
    ReleaseAlreadyDrawnError
        If a release for ``fit_id`` already ran.
    """
    mark_release_dispatched(fit_id)
    worker = claim_release_ticket(fit_id)
    if isinstance(kernel_sum, TrustedSum):
        kernel_sum = kernel_sum.value
    k_hat = np.asarray(kernel_sum, dtype=np.float64) / float(n_pairs)
    k_tilde = add_symmetric_noise(k_hat, sigma, sampler)
    del k_hat
    eigenvalues, eigenvectors = np.linalg.eigh(k_tilde)
    order = np.argsort(eigenvalues)[::-1]
    eigenvalues = eigenvalues[order]
    components = eigenvectors[:, order[:n_components]].T.copy()
    peaks = np.argmax(np.abs(components), axis=1)
    components *= np.sign(components[np.arange(len(peaks)), peaks])[:, None]
    return PrivateRelease(eigenvalues=eigenvalues, components=components,
                          released_on=worker.address if worker is not None else "this process")


def mark_release_dispatched(fit_id: str) -> None:
    """Record, before it can draw, that the release of ``fit_id`` is called or submitted here."""
    _dispatched.add(fit_id)


#: Seconds :func:`abandon_release` waits for the ticket's lock before proving nothing.
ABANDON_TIMEOUT = 10.0


def abandon_release(fit_id: str, target: Any) -> bool:
    """For a failed fit: make sure its release can never draw; True if it never did.

    A release never called or submitted from this process (:func:`mark_release_dispatched`)
    cannot have drawn.  On a local scheduler (``target`` a name) one that was called drew
    or was about to, in this thread.  On a cluster (``target`` a client) a submitted
    release may not have started: if its ticket is free, the release is marked abandoned
    (under the lock :func:`claim_release_ticket` takes, which refuses an abandoned
    release), so a release task that starts late refuses to draw; a ticket already taken
    means it drew.  A scheduler that cannot be reached
    proves nothing (False).
    """
    if fit_id not in _dispatched:
        return True
    if target is None or isinstance(target, str):
        return False
    import distributed

    lock = distributed.Lock(f"dask-dppca-release-{fit_id}", scheduler_rpc=target.scheduler,
                            loop=target.loop)
    try:
        if not lock.acquire(timeout=ABANDON_TIMEOUT):
            return False
        try:
            if target.get_metadata([*RELEASE_METADATA_KEY, fit_id], default=None) is not None:
                return False
            target.set_metadata([*ABANDONED_METADATA_KEY, fit_id], {"time": time.time()})
            return True
        finally:
            lock.release()
    except (OSError, TimeoutError, RuntimeError):
        return False


def claim_release_ticket(fit_id: str):
    """Record that the release of ``fit_id`` is drawing its noise; refuse a second time.

    On a distributed worker the ticket lives in the scheduler's metadata, under a
    distributed lock, so it survives the loss of the worker that claimed it.
    Elsewhere it lives in this process.  Returns the worker (None outside one).
    """
    worker = _current_worker()
    if worker is None:
        with _local_tickets_lock:
            if fit_id in _local_tickets:
                raise ReleaseAlreadyDrawnError(f"release {fit_id} already drew its noise")
            _local_tickets.add(fit_id)
        return None
    import distributed

    client = distributed.get_client()
    key = [*RELEASE_METADATA_KEY, fit_id]
    with distributed.Lock(f"dask-dppca-release-{fit_id}"):
        if client.get_metadata([*ABANDONED_METADATA_KEY, fit_id], default=None) is not None:
            raise ReleaseAlreadyDrawnError(f"release {fit_id} was abandoned by its failed fit; "
                                           "refusing to draw")
        ticket = client.get_metadata(key, default=None)
        if ticket is not None:
            raise ReleaseAlreadyDrawnError(
                f"release {fit_id} already drew its noise (on {ticket['worker']}); "
                "refusing to draw again"
            )
        client.set_metadata(key, {"worker": worker.address, "time": time.time()})
    return worker


def placement_available(placement: dict, workers: dict) -> bool:
    """Whether a worker in ``workers`` (the scheduler's worker info) can run a task
    placed by :func:`release_placement`'s ``placement``."""
    if "workers" in placement:  # pinned (a named or a certificate-verified trusted worker)
        workers = {address: workers[address] for address in placement["workers"] if address in workers}
    if "resources" in placement:
        return any(TRUSTED_RESOURCE in (info.get("resources") or {}) for info in workers.values())
    return bool(workers)


def release_placement(client: Any, trusted_worker: str | None) -> dict:
    """``client.submit`` keywords that put the release on the trusted node.

    A worker offering the ``dppca-trusted`` resource wins (on a TLS cluster, only one
    whose certificate names the trusted worker: :mod:`.trust`); otherwise the named
    ``trusted_worker``; otherwise any worker.
    """
    workers = client.scheduler_info(n_workers=-1)["workers"]
    trusted = {"resources": {TRUSTED_RESOURCE: 1}}
    if placement_available(trusted, workers):
        return verified_placement(client, trusted, TRUSTED_RESOURCE)
    if trusted_worker is not None:
        if trusted_worker not in workers:
            raise ValueError(
                f"trusted_worker: {trusted_worker!r} is not a worker of this cluster "
                f"(workers: {sorted(workers)})"
            )
        return {"workers": [trusted_worker], "allow_other_workers": False}
    return {}


def _current_worker():
    try:
        from distributed import get_worker
    except ImportError:  # pragma: no cover - distributed is a dependency
        return None
    try:
        return get_worker()
    except ValueError:
        return None
