"""The paths a new user types, with default flags: docs/usage.md's fit line, terminals, scripts.

Nothing here passes --no-progress or a local scheduler unless the docs' line does.
"""

from __future__ import annotations

import json
import os
import pty
import select
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from tests.live import PlainCluster

ROOT = Path(__file__).resolve().parents[2]
USAGE = (ROOT / "docs" / "usage.md").read_text()
CLI = [sys.executable, "-m", "dask_dppca"]
pytestmark = pytest.mark.cluster


def readme_fit_line() -> list[str]:
    """docs/usage.md's `dask-dppca fit data.zarr ...` line, split as a shell would."""
    (line,) = [line for line in USAGE.splitlines() if line.startswith("dask-dppca fit data.zarr")]
    argv = shlex.split(line)
    assert argv[0] == "dask-dppca"
    return argv[1:]


def write_store(folder: Path, n: int = 3000, d: int = 6) -> None:
    """data.zarr in ``folder``: heavy-tailed TEST data with a fixed seed."""
    x = np.random.default_rng(3).standard_t(1, size=(n, d))
    z = zarr.open_array(
        str(folder / "data.zarr"), mode="w", shape=x.shape, chunks=(1000, d), dtype="f8"
    )
    z[:] = x


def check_result(folder: Path, k: int, d: int) -> dict:
    result = json.loads((folder / "result.json").read_text())
    components = np.array(result["components"])
    assert components.shape == (k, d)
    assert np.allclose(components @ components.T, np.eye(k), atol=1e-10)
    assert result["privacy"]["epsilon"] == 1.0 and result["privacy"]["delta"] == 1e-6
    assert result["privacy"]["private"] is True
    return result


def test_readme_cli_line_runs_as_written_on_the_embedded_cluster(tmp_path):
    write_store(tmp_path)
    done = subprocess.run(
        [*CLI, *readme_fit_line()], cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no warning: the embedded worker offers dppca-trusted
    assert done.stdout.startswith(f"wrote {tmp_path / 'result.json'}: 3 private components")
    assert "Completed" not in done.stdout  # no bar when the output is not a terminal
    result = check_result(tmp_path, 3, 6)
    assert result["privacy"]["release_placement"] == "a worker offering 'dppca-trusted'"


def test_readme_cli_line_runs_against_a_live_scheduler_and_worker(tmp_path):
    write_store(tmp_path)
    with PlainCluster(tmp_path) as live:
        live.add_worker("trusted", "--resources", "dppca-trusted=1")
        done = subprocess.run(
            [*CLI, *readme_fit_line(), "--scheduler", live.address],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
        )
    assert done.returncode == 0, done.stderr
    result = check_result(tmp_path, 3, 6)
    assert result["privacy"]["released_on"].startswith("tcp://127.0.0.1:")


def test_untrusted_cluster_warns_in_one_line_and_require_trusted_refuses(tmp_path):
    write_store(tmp_path)
    with PlainCluster(tmp_path) as live:
        live.add_worker("ordinary")
        warned = subprocess.run(
            [*CLI, *readme_fit_line(), "--scheduler", live.address],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
        )
        privacy = json.loads((tmp_path / "result.json").read_text())["privacy"]
        (tmp_path / "result.json").unlink()
        refused = subprocess.run(
            [*CLI, *readme_fit_line(), "--scheduler", live.address, "--require-trusted"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
        )
    assert warned.returncode == 0, warned.stderr
    assert warned.stderr.count("\n") == 1 and warned.stderr.startswith(
        "dask-dppca: warning: no worker"
    )
    # The command line names its flag: it said "pass require_trusted=True".
    assert "pass --require-trusted" in warned.stderr and "require_trusted=" not in warned.stderr
    assert privacy["release_placement"] == "any worker (none offers 'dppca-trusted')"
    assert privacy["released_on"].startswith("tcp://127.0.0.1:")
    assert refused.returncode == 2 and "require_trusted" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "result.json").exists()


def run_in_terminal(argv: list[str], cwd: Path, timeout: float = 240) -> tuple[int, str]:
    """Run ``argv`` with a pseudo-terminal as stdout/stderr; (exit code, everything shown)."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal, close_fds=True
    )
    os.close(terminal)
    shown = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([controller], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal closed: the process ended
                break
            if not chunk:
                break
            shown += chunk
        elif process.poll() is not None:
            break
    else:
        process.kill()
    os.close(controller)
    return process.wait(timeout=30), shown.decode(errors="replace")


@pytest.mark.parametrize("extra", [[], ["--scheduler", "threads"]], ids=["embedded", "threads"])
def test_cli_shows_a_text_bar_in_a_terminal(tmp_path, extra):
    write_store(tmp_path)
    code, shown = run_in_terminal([*CLI, *readme_fit_line(), *extra], tmp_path)
    assert code == 0, shown
    assert "% Completed" in shown and "#" in shown, shown
    assert f"wrote {tmp_path / 'result.json'}" in shown
    assert "No clients found" not in shown and "Traceback" not in shown


def test_a_plain_script_without_a_main_guard_fits_on_the_default_path(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text(
        "import numpy as np\n"
        "import dask_dppca as dd\n"
        "x = np.random.default_rng(0).standard_t(1, size=(4000, 5))  # test data\n"
        "est = dd.DPPCA(2, progress=True).fit(x)\n"
        "print('fitted', est.components_.shape, est.privacy_['release_placement'])\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr
    assert "fitted (2, 5) a worker offering 'dppca-trusted'" in done.stdout
    assert "Completed" in done.stdout  # progress=True draws its bar even without a terminal
