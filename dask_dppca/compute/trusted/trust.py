"""Who may run the release: the trusted worker's TLS certificate, checked on the scheduler.

A worker's ``--resources dppca-trusted=1`` is self-declared: anyone holding an ordinary
worker certificate could start a worker claiming it and receive the release task, that
is the exact ``K_hat`` and the noise draw.  On a TLS cluster the scheduler knows more:
every worker registered over a mutual-TLS connection whose peer certificate the
cluster's CA signed, and the subject of that certificate is an identity the worker
cannot choose.  :func:`verified_placement` keeps the release on the workers that claim
the resource *and* whose certificate's common name is :data:`TRUSTED_WORKER_COMMON_NAME`
(the certificate ``deploy/tls/make-certs.sh`` makes for the trusted worker); a claimant
without it stops the fit with :class:`UntrustedWorkerError` before anything runs.

Without TLS there are no identities to check: placement stays as it was (the resource
alone), which is what the embedded LocalCluster uses.  docs/privacy.md, threat model.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = [
    "TRUSTED_WORKER_COMMON_NAME",
    "UntrustedWorkerError",
    "verified_placement",
    "worker_identities",
]

#: Common name of the trusted worker's certificate subject (``CN=dask-dppca trusted-worker``).
TRUSTED_WORKER_COMMON_NAME = "dask-dppca trusted-worker"
#: Seconds to wait for a just-registered worker's connection to show its certificate.
IDENTITY_WAIT = 10.0


class UntrustedWorkerError(RuntimeError):
    """A worker claims the trusted resource without the trusted worker's certificate,
    or the scheduler could not tell who its workers are.
    """


def worker_identities(dask_scheduler=None) -> dict[str, dict[str, Any]]:
    """On the scheduler (``client.run_on_scheduler``): each worker's certificate and resources.

    Returns ``{address: {"common_name": str or None, "resources": dict}}``;
    ``common_name`` is None while the worker's connection is still being set up, or
    when it is not a TLS connection.

    Reads the peer certificate of the connection each worker registered over
    (``Scheduler.stream_comms[address].comm.extra_info["peercert"]``): the certificate
    that connection was verified with, not anything the worker says about itself.
    """
    identities = {}
    for address, state in dask_scheduler.workers.items():
        stream = dask_scheduler.stream_comms.get(address)
        comm = getattr(stream, "comm", None)
        peercert = comm.extra_info.get("peercert") if comm is not None else None
        identities[address] = {
            "common_name": _common_name(peercert),
            "resources": dict(state.resources),
        }
    return identities


def _common_name(peercert: dict | None) -> str | None:
    """The subject's common name in :meth:`ssl.SSLSocket.getpeercert`'s dictionary."""
    for rdn in (peercert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return value
    return None


def verified_placement(client: Any, placement: dict, resource: str) -> dict:
    """``placement`` (``client.submit`` keywords asking for ``resource``), narrowed on a
    TLS cluster to the claimants whose certificate names the trusted worker.

    Raises
    ------
    UntrustedWorkerError
        If a worker claims ``resource`` with another certificate, or the scheduler
        cannot run the check (dask-dppca must be importable on a TLS scheduler).
    """
    if not client.scheduler_info(n_workers=0)["address"].startswith("tls://"):
        return placement
    deadline = time.monotonic() + IDENTITY_WAIT
    while True:
        try:
            identities = client.run_on_scheduler(worker_identities)
        except Exception as error:  # the scheduler cannot import or run the check
            raise UntrustedWorkerError(
                "the scheduler could not check the workers' TLS certificates "
                f"({type(error).__name__}: {error}); install dask-dppca where the scheduler "
                "runs: the release is not placed on an unverified worker"
            ) from None
        claimants = {
            a: i["common_name"] for a, i in identities.items() if resource in i["resources"]
        }
        impostors = {
            a: n for a, n in claimants.items() if n is not None and n != TRUSTED_WORKER_COMMON_NAME
        }
        if impostors:
            raise UntrustedWorkerError(
                f"worker(s) {sorted(impostors)} claim the {resource!r} resource but their TLS "
                f"certificate names {sorted(set(impostors.values()))}, not "
                f"{TRUSTED_WORKER_COMMON_NAME!r}: the release is not run there and this fit "
                "is stopped (a worker started with the ordinary worker key claiming the "
                "trusted resource; deploy/README.md, trust model)"
            )
        if None not in claimants.values() or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    verified = sorted(a for a, name in claimants.items() if name == TRUSTED_WORKER_COMMON_NAME)
    if not verified:
        raise UntrustedWorkerError(
            f"no worker claiming {resource!r} showed its certificate within {IDENTITY_WAIT:g} s"
        )
    return {**placement, "workers": verified, "allow_other_workers": False}
