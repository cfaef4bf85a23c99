"""``dask-dppca budget create|show`` and ``fit --budget``, and docs/usage.md's budget lines
as written."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from dask_dppca.cli import EXIT_CLUSTER, EXIT_USAGE, main
from dask_dppca.privacy.budget.charging import BUDGET_ENV
from dask_dppca.privacy.budget.privacy_budget import PrivacyBudget
from tests.cli import run_cli, write_store

USAGE = Path(__file__).resolve().parents[2] / "docs" / "usage.md"


def _clean_env() -> dict:
    return {name: value for name, value in os.environ.items() if name != BUDGET_ENV}


@pytest.mark.slow
def test_create_show_and_fit_until_the_budget_refuses(tmp_path, capsys):
    ledger, store = str(tmp_path / "study.ledger"), write_store(tmp_path / "x.zarr")
    assert main(["budget", "create", ledger, "--epsilon", "2", "--delta", "1e-5"]) == 0
    assert "remaining: one more release of epsilon <= 2 " in capsys.readouterr().out
    fit = [
        "fit",
        store,
        "--epsilon",
        "1",
        "--scheduler",
        "threads",
        "--no-progress",
        "--output",
        str(tmp_path / "r.json"),
        "--force",  # each fit replaces the last one's result
        "--budget",
        ledger,
    ]
    # Exact composition: four (1, 1e-6) fits fit in (2, 1e-5), the fifth does not.
    for _ in range(4):
        assert main(fit) == 0
        assert "left for one more release at delta=1e-05" in capsys.readouterr().out
    assert main(fit) == EXIT_CLUSTER
    assert "would exceed the budget" in capsys.readouterr().err
    assert main(["budget", "show", ledger]) == 0
    shown = capsys.readouterr().out
    assert "4 counted (4 committed, 0 reserved), 0 cancelled" in shown
    assert shown.count(store) == 4 and PrivacyBudget.open(ledger).releases == 4


@pytest.mark.parametrize(
    "args, needle",
    [
        (["budget", "show", "LEDGER.missing"], "does not exist"),
        (["budget", "create", "LEDGER", "--epsilon", "2", "--delta", "1e-5"], "already exists"),
        (["budget", "create", "LEDGER.new", "--epsilon", "0", "--delta", "1e-5"], "epsilon"),
        (["budget", "create", "LEDGER.new", "--epsilon", "1", "--delta", "2"], "delta"),
        (
            ["fit", "STORE", "--budget", "LEDGER.missing", "--scheduler", "threads"],
            "does not exist",
        ),
    ],
)
@pytest.mark.slow
def test_budget_errors_are_one_line_with_exit_2(tmp_path, args, needle):
    ledger = tmp_path / "l.ledger"
    PrivacyBudget(2.0, 1e-5, ledger=ledger, create=True)
    store = write_store(tmp_path / "x.zarr")
    args = [a.replace("LEDGER", str(ledger)).replace("STORE", store) for a in args]
    done = run_cli(*args, timeout=120, cwd=tmp_path, env=_clean_env())
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and needle in done.stderr
    assert not (tmp_path / "l.ledger.new").exists()


def _readme_block(language: str, marker: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", USAGE.read_text(), flags=re.S)
    (block,) = [b for b in blocks if marker in b]
    return block


@pytest.mark.cluster
def test_the_readme_budget_lines_run_as_written(tmp_path):
    """docs/usage.md's three commands, then its Python lines, in one folder with data.zarr
    (fits on the default embedded cluster, as a user's would), after its first
    fit line has left its result.json there (a user reads the page top to bottom)."""
    write_store(tmp_path / "data.zarr")
    (tmp_path / "result.json").write_text("{}")  # left by the page's first fit line
    for line in _readme_block("bash", "budget create").strip().splitlines():
        done = subprocess.run(
            shlex.split(line),
            capture_output=True,
            text=True,
            timeout=240,
            cwd=tmp_path,
            env=_clean_env(),
        )
        assert done.returncode == 0, (line, done.stderr)
    assert "1 counted (1 committed" in done.stdout and "data.zarr" in done.stdout
    assert (tmp_path / "result.json").read_text() == "{}"  # never overwritten silently
    code = (
        "import numpy as np\nimport dask_dppca as dd\n"
        "X = np.random.default_rng(1).standard_normal((300, 4))  # test data only\n"
        + _readme_block("python", "set_default_budget")
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=_clean_env(),
    )
    assert done.returncode == 0, done.stderr
    budget = PrivacyBudget.open(tmp_path / "study.ledger")
    assert budget.releases == 2 and done.stdout.startswith(repr(budget.remaining()))
    assert "2 counted (2 committed" in done.stdout


def test_ledger_arguments_take_file_urls_as_the_ledger_does(tmp_path, capsys):
    ledger = tmp_path / "study.ledger"
    url = ledger.as_uri()
    assert main(["budget", "create", url, "--epsilon", "2", "--delta", "1e-5"]) == 0
    assert ledger.is_file()
    capsys.readouterr()
    assert main(["budget", "show", url]) == 0
    assert "0 counted" in capsys.readouterr().out
    assert main(["budget", "create", url, "--epsilon", "2", "--delta", "1e-5"]) == EXIT_USAGE
    assert "already exists" in capsys.readouterr().err


def test_budget_show_says_why_the_spent_total_is_less_than_the_releases_added_up(tmp_path, capsys):
    """The ledger explains its spent total: an analysis (two stages, one release) and a
    fit; the spent line says they compose tightly at the ledger's delta, beside their
    epsilons added up."""
    from dask_dppca.privacy.budget.privacy_budget import GaussianCharge, PartsCharge
    from dask_dppca.privacy.mechanisms.parts import GaussianPart

    ledger = str(tmp_path / "study.ledger")
    assert main(["budget", "create", ledger, "--epsilon", "20", "--delta", "1e-5"]) == 0
    analysis = [
        ("a1.directions", PartsCharge((GaussianPart(0.5),)), "directions"),
        ("a1.scree", PartsCharge((GaussianPart(0.3),)), "scree"),
    ]
    fit = GaussianCharge(1.0, 2.0)
    budget = PrivacyBudget.open(ledger)
    budget.reserve_together(analysis)
    budget.spend(fit, label="a fit")
    # Each release alone, in a budget of its own: their epsilons at the same delta.
    alone = PrivacyBudget(20.0, 1e-5)
    alone.reserve_together(analysis)
    other = PrivacyBudget(20.0, 1e-5)
    other.spend(fit)
    added = alone.spent_epsilon + other.spent_epsilon
    capsys.readouterr()
    assert main(["budget", "show", ledger]) == 0
    (spent,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("spent:")]
    assert spent.startswith(f"spent:     epsilon={PrivacyBudget.open(ledger).spent_epsilon:.6g} ")
    assert (
        "the 2 releases compose tightly at the ledger's delta, so this is less than their "
        f"epsilons at that delta added up ({added:.6g})"
    ) in spent
    assert PrivacyBudget.open(ledger).spent_epsilon < added
