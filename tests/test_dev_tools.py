"""The project's own checks, as .ci/run runs them: each fails on a planted violation.

That they pass on the tree is .ci/run's own run of each, before the tests
(``test_ci_runs_the_check_before_the_tests``); ruff's is repeated here as it is quick.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CI = (ROOT / ".ci" / "run").read_text()


def _copy_tree(tmp_path: Path, *parts: str) -> Path:
    """The checkout's package, docs and configuration in ``tmp_path`` (what a check reads)."""
    for name in ("dask_dppca", "docs", "examples"):
        if name in parts:
            shutil.copytree(
                ROOT / name,
                tmp_path / name,
                ignore=shutil.ignore_patterns("__pycache__", "_build", "examples"),
            )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _run(args: list[str], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    """``args`` in ``cwd``, importing the package found there."""
    return subprocess.run(
        args,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(cwd)},
    )


@pytest.mark.parametrize(
    "command",
    ["ruff check .", "ruff format --check .", "mypy", "python3 -m sphinx -E -W --keep-going -n"],
)
def test_ci_runs_the_check_before_the_tests(command):
    assert command in CI
    assert CI.index(command) < CI.index("python3 -m pytest")


def test_ruff_passes_on_the_tree_and_fails_on_a_planted_violation(tmp_path):
    ruff = [sys.executable, "-m", "ruff"]
    assert _run([*ruff, "check", "--quiet", str(ROOT)], ROOT).returncode == 0
    root = _copy_tree(tmp_path, "dask_dppca")
    target = root / "dask_dppca" / "privacy" / "mechanisms" / "noise.py"
    target.write_text(target.read_text() + "\n\ndef _planted():\n    unused = 1\n")
    done = _run([*ruff, "check", "--quiet", "."], root)
    assert done.returncode != 0 and "F841" in done.stdout
    formatted = _run([*ruff, "format", "--check", "."], root)
    assert formatted.returncode == 0, formatted.stdout
    target.write_text(target.read_text() + "\nx = {  'a':1}\n")
    assert _run([*ruff, "format", "--check", "."], root).returncode != 0


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_mypy_fails_on_an_unannotated_privacy_function(tmp_path):
    """The strict flags hold on privacy/: an unannotated function there fails mypy."""
    root = _copy_tree(tmp_path, "dask_dppca")
    if (ROOT / ".mypy_cache").is_dir():  # .ci/run's own mypy run leaves it: incremental here
        shutil.copytree(ROOT / ".mypy_cache", root / ".mypy_cache")
    mypy = [sys.executable, "-m", "mypy"]
    target = root / "dask_dppca" / "privacy" / "mechanisms" / "calibration.py"
    target.write_text(target.read_text() + "\n\ndef planted(x):\n    return x\n")
    done = _run(mypy, root, timeout=540)
    assert (
        done.returncode != 0 and "calibration.py" in done.stdout and "no-untyped-def" in done.stdout
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_docs_build_fails_on_a_broken_cross_reference(tmp_path):
    """Warnings are errors and every cross-reference is checked: a docstring that names a
    function that does not exist stops the build, naming it."""
    root = _copy_tree(tmp_path, "dask_dppca", "docs")
    shutil.copytree(
        ROOT / "examples", root / "examples", ignore=shutil.ignore_patterns("__pycache__", "*.py")
    )
    sphinx = [
        sys.executable,
        "-m",
        "sphinx",
        "-E",
        "-W",
        "--keep-going",
        "-n",
        "-q",
        "-b",
        "html",
        "docs",
        str(tmp_path / "html"),
    ]
    target = root / "dask_dppca" / "kernel" / "rounding.py"
    text = target.read_text()
    target.write_text(
        text.replace('"""The kernel', '"""See :func:`no_such_function`.  The kernel', 1)
    )
    done = _run(sphinx, root, timeout=540)
    assert done.returncode != 0 and "no_such_function" in done.stderr
    # Only the planted reference: the rest of the tree builds clean (the same warnings
    # and errors would otherwise make this pass for the wrong reason).
    assert done.stderr.count("WARNING") == 1, done.stderr[-3000:]
