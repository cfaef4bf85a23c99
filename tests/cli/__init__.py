"""Command-line tests, and what they share: a small store and the CLI run as a module."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import zarr

#: The console script pip installs beside this interpreter: the command as a user types it.
CONSOLE_SCRIPT = Path(sys.executable).with_name("dask-dppca")


def write_store(path: Path, n: int = 300, d: int = 4) -> str:
    """A small Zarr array of Gaussian rows at ``path`` (test data only, fixed seed)."""
    z = zarr.open_array(str(path), mode="w", shape=(n, d), chunks=(100, d), dtype="f8")
    z[:] = np.random.default_rng(0).standard_normal((n, d))  # test data only
    return str(path)


def write_labels(path: Path, n: int = 300, n_codes: int = 4) -> np.ndarray:
    """A Zarr array of integer group labels ``0..n_codes-1`` at ``path`` (test data only)."""
    codes = np.random.default_rng(3).integers(0, n_codes, n)  # test data only
    z = zarr.open_array(str(path), mode="w", shape=(n,), chunks=(500,), dtype="i8")
    z[:] = codes
    return codes


def run_cli(*args: str, timeout: float = 240, **options) -> subprocess.CompletedProcess:
    """``python -m dask_dppca.cli ARGS`` in a subprocess, output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "dask_dppca.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        **options,
    )
