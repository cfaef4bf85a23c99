"""Remote-storage sessions that read tasks open on a worker, closed when it shuts down.

s3fs and gcsfs hold an aiohttp session per filesystem.  Zarr uses their asynchronous
form, for which the libraries leave closing to the caller; left open, the session is
collected at interpreter exit and aiohttp prints "Unclosed client session" into the
user's terminal (the embedded cluster's workers share it).  The read tasks register
their filesystem here; a worker plugin closes every one in the worker's shutdown,
while Zarr's event loop still runs.  In the client's own process (local schedulers)
the sessions end with the process, as they do for any Zarr user.
"""

from __future__ import annotations

import threading
from typing import Any

import distributed
from distributed.diagnostics.plugin import WorkerPlugin
from zarr.storage import WrapperStore

__all__ = ["PLUGIN_NAME", "close_at_worker_shutdown"]

PLUGIN_NAME = "dppca-close-storage-sessions"
#: Seconds each session may take to close at shutdown.
CLOSE_TIMEOUT = 5.0

_open: dict[int, Any] = {}
_state = {"installed": False}
_lock = threading.Lock()


def close_at_worker_shutdown(store: Any) -> None:
    """Have this worker close ``store``'s remote session when it shuts down."""
    while isinstance(store, WrapperStore):
        store = store._store  # documented access to the wrapped store
    fs = getattr(store, "fs", None)
    if fs is None or not hasattr(fs, "set_session"):
        return  # a local store, or a backend without a session to close
    try:
        worker = distributed.get_worker()
    except ValueError:
        return  # the client's process
    with _lock:
        _open.setdefault(id(fs), fs)
        install = not _state["installed"]
        _state["installed"] = True
    if install:
        worker.loop.add_callback(worker.plugin_add, plugin=_CloseSessions(), name=PLUGIN_NAME)


class _CloseSessions(WorkerPlugin):
    """Closes the registered sessions in the worker's teardown."""

    def teardown(self, worker) -> None:
        from zarr.core.sync import sync  # the loop Zarr opened the sessions on

        with _lock:
            filesystems = list(_open.values())
            _open.clear()
            _state["installed"] = False
        for fs in filesystems:
            try:
                sync(_close(fs), timeout=CLOSE_TIMEOUT)
            except Exception:
                pass


async def _close(fs: Any) -> None:
    session = await fs.set_session()
    await session.close()
