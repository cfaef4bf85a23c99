"""The budgets of this process's ancestors: how a child process finds what its parent charges.

An environment variable reaches only the children started after it was set, and only
if nothing in between (a pool's start method, a reused worker) drops it.  So each
process that has a default budget or an open ``with`` block also *registers* them:
one small file per process in a private folder (:func:`registry_folder`), naming the
process by its id and start time and listing its ledgers (and whether an in-memory
budget, which no other process can charge, is open).  A fit in any process reads the
files of its ancestors (parent, grandparent, ...) at fit time and charges every ledger
they list, or refuses when one of them holds an in-memory budget.  Whatever started
the child (fork, spawn, forkserver, loky workers started before the budget was set,
``subprocess``, a ``LocalCluster``'s worker processes) and whenever it started, its fit
charges what its ancestors charge now.

Limits: only ancestors that still run are seen (a daemon that detached itself from its
parent, or a process on another machine, is not a descendant: name the ledger there, or
configure it where the noise is drawn); the folder is ``/tmp/dask-dppca-<uid>`` on POSIX
(not ``$TMPDIR``, which a child may change), refused unless it is this user's and closed
to others.  A registration that cannot be written is reported with a ``RuntimeWarning``
(the process's own fits are unaffected; its children still see the environment variable).
"""

from __future__ import annotations

import atexit
import json
import os
import stat
import tempfile
import threading
import warnings
from dataclasses import dataclass

__all__ = ["AncestorBudgets", "ancestor_budgets", "register", "registry_folder"]

_LOCK = threading.Lock()


def registry_folder() -> str:
    """The folder holding the registrations of this user's processes."""
    base = "/tmp" if os.name == "posix" else tempfile.gettempdir()
    user = os.getuid() if hasattr(os, "getuid") else os.getlogin()
    return os.path.join(base, f"dask-dppca-{user}")


def _safe_folder(create: bool) -> str | None:
    """The registry folder if it is this user's own and closed to others (else None)."""
    folder = registry_folder()
    if create:
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
        except OSError:
            return None
    try:
        info = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode):
        return None
    if hasattr(os, "getuid") and (info.st_uid != os.getuid() or info.st_mode & 0o077):
        return None
    return folder


def _identity(pid: int) -> float | None:
    """A process's start time (with its pid it names the process: pids are reused)."""
    import psutil

    try:
        return round(float(psutil.Process(pid).create_time()), 2)
    except (psutil.Error, OSError):
        return None


def register(ledgers: list[str], memory: bool) -> None:
    """Record (or, both empty, remove) this process's default and open budgets."""
    pid = os.getpid()
    with _LOCK:
        folder = _safe_folder(create=bool(ledgers or memory))
        if folder is None:
            if ledgers or memory:
                warnings.warn(
                    f"could not register this process's budgets in {registry_folder()} "
                    "(missing, not this user's, or open to others): child processes "
                    "started before now cannot see them",
                    RuntimeWarning,
                    stacklevel=3,
                )
            return
        path = os.path.join(folder, f"{pid}.json")
        if not (ledgers or memory):
            try:
                os.unlink(path)
            except OSError:
                pass
            return
        _remove_stale(folder)
        record = {"pid": pid, "started": _identity(pid), "ledgers": ledgers, "memory": memory}
        temporary = f"{path}.{threading.get_ident()}.tmp"
        try:
            with open(temporary, "w") as out:
                json.dump(record, out)
            os.replace(temporary, path)  # readers see the old record or the new one
        except OSError as error:
            warnings.warn(
                f"could not register this process's budgets ({error})",
                RuntimeWarning,
                stacklevel=3,
            )


def _remove_stale(folder: str) -> None:
    """Remove the records of processes that ended without removing theirs (killed)."""
    import psutil

    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        stem = name.removesuffix(".json")
        if name.endswith(".json") and stem.isdigit() and not psutil.pid_exists(int(stem)):
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass


@dataclass(frozen=True)
class AncestorBudgets:
    """What this process's ancestors charge: ledger paths, and which hold in-memory budgets."""

    ledgers: tuple[str, ...]
    memory_in: tuple[int, ...]  # ancestors with an in-memory budget open


def ancestor_budgets() -> AncestorBudgets:
    """The ledgers every running ancestor of this process registered (closest first)."""
    folder = _safe_folder(create=False)
    if folder is None:
        return AncestorBudgets((), ())
    import psutil

    try:
        parents = psutil.Process().parents()
    except (psutil.Error, OSError):
        return AncestorBudgets((), ())
    ledgers: list[str] = []
    memory: list[int] = []
    for parent in parents:
        try:
            with open(os.path.join(folder, f"{parent.pid}.json")) as stream:
                record = json.load(stream)
            started = round(float(parent.create_time()), 2)
        except (OSError, ValueError, psutil.Error):
            continue
        if not isinstance(record, dict) or record.get("started") != started:
            continue  # a file left by an earlier process with the same pid
        ledgers += [path for path in record.get("ledgers", []) if isinstance(path, str)]
        if record.get("memory"):
            memory.append(parent.pid)
    return AncestorBudgets(tuple(dict.fromkeys(ledgers)), tuple(memory))


def _unregister_at_exit() -> None:
    try:
        os.unlink(os.path.join(registry_folder(), f"{os.getpid()}.json"))
    except OSError:
        pass


atexit.register(_unregister_at_exit)  # every process removes its record when it exits
