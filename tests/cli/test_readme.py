"""The README is a first page: short, a table command early, and its curator's path (the
plan, the analysis, the report) and its Python path run exactly as written, with default
flags, on the embedded cluster."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.cli import CONSOLE_SCRIPT
from tests.cli.test_quiet_output import THIRD_PARTY

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
MAX_LINES = 150
FIRST_TABLE_BY = 60
TABLE = re.compile(r"^dask-dppca \w+ \S+\.(parquet|pq|csv)(\.\w+)?\b")


def _commands() -> list[tuple[int, str]]:
    """(line number, command) of every ``dask-dppca`` line of a bash block, continuations
    joined."""
    found, block, pending = [], False, None
    for number, line in enumerate(README.splitlines(), start=1):
        if line.startswith("```"):
            block = line == "```bash"
            continue
        if not block:
            continue
        if pending is not None:
            pending = (pending[0], pending[1] + " " + line.strip())
        elif line.startswith("dask-dppca "):
            pending = (number, line)
        if pending is not None and not pending[1].endswith("\\"):
            found.append(pending)
            pending = None
        elif pending is not None:
            pending = (pending[0], pending[1][:-1].rstrip())
    return found


def test_the_readme_is_short_and_shows_a_table_command_early():
    assert len(README.splitlines()) <= MAX_LINES
    tables = [number for number, line in _commands() if TABLE.match(line)]
    assert tables and tables[0] <= FIRST_TABLE_BY, tables


def _write_survey(folder: Path) -> None:
    """survey.parquet as the README assumes: three numeric columns and a region column
    with a label outside the public domain (TEST data, a fixed seed)."""
    x = np.random.default_rng(11).standard_t(3, size=(3000, 3))  # test data only
    table = pd.DataFrame(x, columns=["age", "income", "hours"])
    table["region"] = np.array(["north", "south", "east"])[np.arange(3000) % 3]
    table.to_parquet(folder / "survey.parquet")


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(280)
def test_the_readme_curator_path_runs_as_written(tmp_path):
    _write_survey(tmp_path)
    lines = [line for _, line in _commands() if "survey.parquet" in line]
    assert [shlex.split(line)[1] for line in lines] == ["plan", "analyze"]
    outputs = []
    for line in lines:
        argv = shlex.split(line)
        done = subprocess.run(
            [str(CONSOLE_SCRIPT), *argv[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, (line, done.stderr)
        assert not THIRD_PARTY.findall(done.stderr), done.stderr  # the project's words only
        outputs.append(done.stdout)
    assert "privacy split of the total" in outputs[0]
    assert "privacy split of the total" in outputs[1]
    report = (tmp_path / "survey-report.html").read_text()
    assert (tmp_path / "survey-analysis.json").is_file()
    assert "age" in report and "income" in report
    # the report is titled by the table's name, never by a path of this machine
    assert str(tmp_path) not in report


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(280)
def test_the_readme_python_path_runs_as_written(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", README, flags=re.S)
    assert len(blocks) == 2
    setup = (
        "import numpy as np\n"
        "rng = np.random.default_rng(5)  # test data only\n"
        "X = rng.standard_t(3, size=(2000, 4))\n"
        "labels = np.array(['a', 'b', 'c'])[np.arange(2000) % 3]\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", setup + "\n".join(blocks)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert "privacy split" in done.stdout or "directions" in done.stdout
    assert (tmp_path / "report.html").is_file()
