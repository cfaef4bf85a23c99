"""Partial exact sums that can be opened on Dask workers only (a tripwire, not a wall).

A lane's running sum is part of the exact K_hat.  It moves between workers and may be
spilled to a worker's disk like any result; pickled in a worker process of a cluster it
is *sealed*: unpickling it anywhere but in a process that hosts such a worker (the
client, a notebook) raises :class:`ExactSumLeakError`.  That makes "no exact sum reaches the client"
checkable (docs/privacy.md, threat model): a Dask client can still run code on the
workers.

Which processes host workers is set by the compute layer's worker plugin
(:func:`allow_unsealing`).  Workers inside the client's own process (``inproc://``
addresses: the embedded cluster) never set it: they exchange objects without pickling,
and what they spill carries this process's random token, so such a process still
refuses a sealed sum sent by a remote cluster.  Processes without the mark (the
client, the local ``"processes"`` scheduler's pool) pickle sums plainly: what they
pickle never goes to another party.
"""

from __future__ import annotations

import secrets
from typing import Any

__all__ = ["ExactSumLeakError", "allow_unsealing", "seal", "unsealing_allowed"]


class ExactSumLeakError(RuntimeError):
    """An exact (partial) K_hat sum was about to be deserialised outside a Dask worker."""


_STATE = {"worker_process": False}
#: A random name of this process, written into every sealed pickle made here: bytes
#: that never left the process (an in-process worker spilling to disk and reading back)
#: may be reopened here, bytes from anywhere else only in a worker process.
_PROCESS_TOKEN = secrets.token_hex(16)


def allow_unsealing() -> None:
    """Mark this process as hosting a Dask worker (called by the worker plugin)."""
    _STATE["worker_process"] = True


def unsealing_allowed() -> bool:
    """Whether this process hosts a worker of another process's cluster."""
    return _STATE["worker_process"]


def seal(rebuild: Any, state: tuple) -> tuple:
    """``__reduce__`` value for an object rebuilt as ``rebuild(*state)``, sealed when
    pickled in a worker process of a cluster (Data moving between workers is
    serialised by the worker's communication code, outside any task, so "inside a
    task" cannot be the test: "in a process that hosts a worker" is.)
    """
    if unsealing_allowed():
        return (_unseal, (rebuild, state, _PROCESS_TOKEN))
    return (rebuild, state)


def _unseal(rebuild: Any, state: tuple, origin: str | None = None) -> Any:
    if not (unsealing_allowed() or origin == _PROCESS_TOKEN):
        raise ExactSumLeakError(
            "an exact K_hat (partial) sum may only be deserialised on a Dask worker, never on "
            "a client"
        )
    return rebuild(*state)
