"""Every test has a timeout, so a hang is a failure (pytest-timeout, pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_suite_has_a_default_timeout(pytestconfig):
    assert float(pytestconfig.getini("timeout")) >= 60


@pytest.mark.slow
def test_a_hanging_test_fails_instead_of_waiting(tmp_path):
    (tmp_path / "test_hang.py").write_text(
        "import threading\n\ndef test_hang():\n    threading.Event().wait()\n"
    )
    started = time.monotonic()
    # The project's configuration, with the limit shortened to keep this test quick.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-c",
            str(ROOT / "pyproject.toml"),
            "--rootdir",
            str(tmp_path),
            "-o",
            "timeout=2",
            str(tmp_path / "test_hang.py"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout[-2000:]
    assert "Timeout" in done.stdout and "1 failed" in done.stdout
    assert time.monotonic() - started < 60
