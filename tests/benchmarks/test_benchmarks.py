"""Every documented benchmark command runs: the smallest run of each script, as written.

benchmarks/README.md lists, in its "Smallest runs" block, one command per script in
benchmarks/; each is run here exactly as written (bash, from the repository root) and
must exit 0 within SMOKE_LIMIT seconds.  Timings are printed, never asserted.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "benchmarks" / "README.md"
SMOKE_LIMIT = 240  # seconds per command (under the suite's 300 s test timeout); each takes seconds


def smoke_commands() -> list[str]:
    """The commands of the code block after the "## Smallest runs" heading."""
    section = README.read_text().split("## Smallest runs", 1)[1]
    block = section.split("```", 2)[1]
    return [line.strip() for line in block.splitlines()[1:] if line.strip()]


def test_every_script_has_a_smallest_run():
    scripts = {path.name for path in (ROOT / "benchmarks").glob("*.py")}
    covered = {re.search(r"benchmarks/(\w+\.py)", command).group(1) for command in smoke_commands()}
    assert scripts == covered, f"scripts without a smallest run: {sorted(scripts - covered)}"


@pytest.mark.slow
@pytest.mark.parametrize("command", smoke_commands())
def test_smallest_run_exits_cleanly(command, tmp_path):
    # "python" is the interpreter running the tests (the same environment), even where the
    # system has only python3
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "python"  # a script, not a symlink: a venv is found from its own path
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    env = dict(
        os.environ, TMPDIR=str(tmp_path), PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    )
    try:
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=SMOKE_LIMIT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{command!r} still running after {SMOKE_LIMIT} s")
    assert done.returncode == 0, f"{command!r} exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
