"""Where the release runs: the trusted worker, or a warning (or a refusal) when none exists.

A worker offering the ``dppca-trusted`` resource wins (on a TLS cluster, only one whose
certificate names the trusted worker: :mod:`.trust`); otherwise the named
``trusted_worker``; otherwise any worker, with :class:`UntrustedReleaseWarning`, or a
refusal under ``require_trusted``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ..cluster import TRUSTED_RESOURCE
from .trust import verified_placement

__all__ = [
    "DEFAULT_OPTIONS",
    "ReleaseOptions",
    "UntrustedReleaseWarning",
    "choose_placement",
    "describe_placement",
    "placement_available",
    "placement_unavailable",
    "release_placement",
    "untrusted_warning_given",
]


@dataclass(frozen=True)
class ReleaseOptions:
    """Where a compute target releases, bound once when the target is made
    (:func:`~.target.compute_target`): every release on it reads them.

    Parameters
    ----------
    trusted_worker : str, optional
        The worker every release runs on (else a ``dppca-trusted`` worker, if any).
    require_trusted : bool, default False
        Refuse to release anywhere but a trusted worker.
    progress : bool, default False
        Show a progress bar for each pass and release.
    """

    trusted_worker: str | None = None
    require_trusted: bool = False
    progress: bool = False


#: No trusted worker named, none required, no progress bar.
DEFAULT_OPTIONS = ReleaseOptions()


class UntrustedReleaseWarning(UserWarning):
    """No worker offers the ``dppca-trusted`` resource: the release may run on any worker.

    Examples
    --------
    >>> import warnings
    >>> import dask_dppca as dd
    >>> issubclass(dd.UntrustedReleaseWarning, UserWarning)
    True
    >>> warnings.simplefilter("error", dd.UntrustedReleaseWarning)  # refuse, as require_trusted
    """


def placement_available(placement: dict, workers: dict) -> bool:
    """Whether a worker in ``workers`` (the scheduler's worker info) can run a task
    placed by :func:`release_placement`'s ``placement``.
    """
    if "workers" in placement:  # pinned (a named or a certificate-verified trusted worker)
        workers = {
            address: workers[address] for address in placement["workers"] if address in workers
        }
    if "resources" in placement:
        return any(TRUSTED_RESOURCE in (info.get("resources") or {}) for info in workers.values())
    return bool(workers)


def placement_unavailable(
    placement: dict, workers: dict, described: str, paused: bool = True
) -> str | None:
    """Why no worker can run a task placed by ``placement`` now, or None.

    Gone (left the cluster), or (with ``paused``: while the release itself waits)
    present but paused over its memory pause threshold: a release placed there waits
    for it, bounded by the stall timeout of :mod:`.waits`.
    """
    if not placement_available(placement, workers):
        return f"the trusted worker ({described}) left the cluster"
    if not paused:
        return None
    if "workers" in placement:
        workers = {a: workers[a] for a in placement["workers"] if a in workers}
    if "resources" in placement:
        workers = {
            a: info
            for a, info in workers.items()
            if TRUSTED_RESOURCE in (info.get("resources") or {})
        }
    if workers and all(info.get("status") == "paused" for info in workers.values()):
        return (
            f"the trusted worker ({described}) is paused (over its memory pause threshold; "
            "raise --memory-limit)"
        )
    return None


def release_placement(client: Any, trusted_worker: str | None) -> dict:
    """``client.submit`` keywords that put the release on the trusted node (empty: anywhere)."""
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


#: Set while the later stages of an analysis run: its first release gave the warning.
_SAID: ContextVar[bool] = ContextVar("dask_dppca_untrusted_said", default=False)


@contextmanager
def untrusted_warning_given() -> Iterator[None]:
    """While the block runs, :class:`UntrustedReleaseWarning` is not given again (in this
    thread or task): an analysis's later stages, after its first release warned.
    """
    token = _SAID.set(True)
    try:
        yield
    finally:
        _SAID.reset(token)


def choose_placement(client: Any, trusted_worker: str | None, require_trusted: bool) -> dict:
    """:func:`release_placement`, refused or warned about when it names no trusted node."""
    placement = release_placement(client, trusted_worker)
    if not placement:
        if require_trusted:
            raise ValueError(
                f"require_trusted: no worker offers the {TRUSTED_RESOURCE!r} resource and no "
                "trusted_worker was named; start one with "
                f"`dask worker ... --resources {TRUSTED_RESOURCE}=1` (deploy/README.md)"
            )
        if _SAID.get():  # said once already for this analysis (it releases several times)
            return placement
        warnings.warn(
            f"no worker offers the {TRUSTED_RESOURCE!r} resource and no trusted_worker was "
            "named: the noise is added on whichever worker the scheduler picks (recorded in "
            "privacy_['released_on']); pass require_trusted=True to refuse instead",
            UntrustedReleaseWarning,
            stacklevel=5,
        )
    return placement


def describe_placement(placement: dict) -> str:
    """The placement in words, for ``privacy_["release_placement"]``."""
    if "resources" in placement and "workers" in placement:
        return f"a worker offering {TRUSTED_RESOURCE!r} with the trusted worker's TLS certificate"
    if "resources" in placement:
        return f"a worker offering {TRUSTED_RESOURCE!r}"
    if "workers" in placement:
        return f"trusted_worker {placement['workers'][0]}"
    return f"any worker (none offers {TRUSTED_RESOURCE!r})"
