"""Real ``dask scheduler`` / ``dask worker`` processes on 127.0.0.1 (plain tcp) for tests.

Each process runs in its own process group and dies with the test process (Linux
PR_SET_PDEATHSIG), so an interrupted test run leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

DASK = [sys.executable, "-m", "dask"]
#: Seconds a scheduler or worker may take to start on a loaded 2-core machine.
START_TIMEOUT = 90


@contextmanager
def one_trusted_worker(**options: Any) -> Iterator[Any]:
    """A client of a LocalCluster of one worker process, one thread, offering the
    ``dppca-trusted`` resource (``options``: more LocalCluster arguments, e.g.
    ``memory_limit``).  A fresh process: nothing a test ran before is loaded in it.
    """
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            resources={"dppca-trusted": 1},
            **options,
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        yield client


def die_with_parent() -> None:
    """In the child: SIGKILL when the test process dies (Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class PlainCluster:
    """A ``dask scheduler`` and workers as separate processes, plain tcp on loopback.

    Use as a context manager; ``env`` replaces the processes' environment (to start
    workers without credentials, for example).
    """

    def __init__(self, folder: Path, env: dict[str, str] | None = None) -> None:
        self.folder = folder
        self.env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
        self.processes: list[subprocess.Popen] = []
        self.address = ""

    def __enter__(self) -> PlainCluster:
        scheduler_file = self.folder / "scheduler.json"
        process = self._spawn(
            "scheduler",
            [
                *DASK,
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(scheduler_file),
            ],
        )
        deadline = time.monotonic() + START_TIMEOUT
        while not self.address:
            if process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"scheduler did not start: {self.log('scheduler')}")
            try:
                self.address = json.loads(scheduler_file.read_text())["address"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.1)
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def add_worker(self, name: str, *extra: str) -> None:
        """Start ``dask worker`` (one thread) and wait until the scheduler knows it."""
        local = self.folder / name
        local.mkdir()
        self._spawn(
            name,
            [
                *DASK,
                "worker",
                self.address,
                "--nthreads",
                "1",
                "--host",
                "127.0.0.1",
                "--no-dashboard",
                "--name",
                name,
                "--local-directory",
                str(local),
                "--death-timeout",
                "30",
                *extra,
            ],
        )
        from distributed import Client

        with Client(self.address, timeout=START_TIMEOUT, set_as_default=False) as client:
            deadline = time.monotonic() + START_TIMEOUT
            while name not in {
                w["name"] for w in client.scheduler_info(n_workers=-1)["workers"].values()
            }:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"worker {name} did not join: {self.log(name)}")
                time.sleep(0.2)

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        with open(self.folder / f"{name}.log", "wb") as log:
            process = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                cwd=self.folder,
                preexec_fn=die_with_parent,
            )
        self.processes.append(process)
        return process

    def log(self, name: str) -> str:
        path = self.folder / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def close(self) -> None:
        stop(self.processes)


def stop(processes: list[subprocess.Popen]) -> None:
    """SIGTERM each process group started with ``start_new_session``, SIGKILL after 15 s."""
    for process in processes:
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    for process in processes:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=15)
