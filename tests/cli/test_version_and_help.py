"""``dask-dppca --version`` and a ``--help`` that imports none of the heavy libraries."""

from __future__ import annotations

import os
import subprocess
from importlib.metadata import version

import pytest

from tests.cli import CONSOLE_SCRIPT

#: Imported by a fit, never by the parser (they cost seconds together).
HEAVY = {
    "numpy",
    "scipy",
    "dask",
    "distributed",
    "numba",
    "zarr",
    "sklearn",
    "opendp",
    "dp_accounting",
    "pandas",
}


def _console(*args, env=None):
    assert CONSOLE_SCRIPT.exists(), f"{CONSOLE_SCRIPT} missing: pip install -e '.[test]'"
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *args], capture_output=True, text=True, timeout=60, env=env
    )


def test_version_comes_from_the_package_metadata():
    done = _console("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"dask-dppca {version('dask-dppca')}"


@pytest.mark.parametrize("command", [[], ["fit"], ["demo"], ["bench"]])
def test_help_imports_no_heavy_library(command):
    # -X importtime for the console script: every module imported, one per stderr line.
    done = _console(*command, "--help", env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    assert done.returncode == 0, done.stderr
    assert "usage: dask-dppca" in done.stdout
    imported = {
        line.rsplit("|", 1)[-1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "argparse" in imported  # the profile is there to read
    assert not imported & HEAVY, sorted(imported & HEAVY)
