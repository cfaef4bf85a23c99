"""Sphinx configuration: the API reference (numpydoc docstrings), the docs pages
(MyST Markdown) and the committed, executed notebooks (rendered, not re-run).

Built in CI with warnings as errors and every cross-reference checked::

    python3 -m sphinx -W --keep-going -n -b html docs docs/_build/html
"""

from __future__ import annotations

import shutil
from importlib.metadata import version as _version
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

project = "dask-dppca"
author = "the dask-dppca developers"
copyright = "2026, the dask-dppca developers"
release = _version("dask-dppca")

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "myst_nb",
]

# The notebooks live in examples/ (run by the tests, committed with their outputs); Sphinx
# reads sources below docs/ only, so they are copied in at each build (not committed).
_NOTEBOOKS = HERE / "examples"
_NOTEBOOKS.mkdir(exist_ok=True)
for notebook in sorted((ROOT / "examples").glob("*.ipynb")):
    shutil.copyfile(notebook, _NOTEBOOKS / notebook.name)

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "results_tables.md", "README.md"]
nb_execution_mode = "off"  # render the committed outputs; the tests execute them
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]  # docs pages number their own sections

autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "none"  # the numpydoc sections say the types
autosummary_generate = False
numpydoc_show_class_members = False
numpydoc_xref_param_type = False
numpydoc_validation_checks = {"GL08"}  # every documented public object has a docstring

# Every cross-reference must resolve (-n); names from other projects are plain text here
# (no network for intersphinx at build time).
nitpicky = True
_OTHER_PROJECTS = "np|numpy|dask|distributed|zarr|xarray|pandas|sklearn|scipy|numba|opendp|fsspec"
_BUILTINS = (
    "int|float|str|bool|dict|list|tuple|object|type|bytes|None|Any|Callable|Iterator|Iterable"
    "|Sequence|Mapping|ValueError|TypeError|RuntimeError|UserWarning|OSError|TimeoutError"
    "|KeyError|Exception"
)
_STDLIB = (
    r"os\.PathLike|pathlib\..*|collections\..*|typing\..*|contextlib\..*|abc\..*|sqlite3\..*"
    r"|logging\..*"
)
nitpick_ignore_regex = [
    (r"py:.*", rf"({_OTHER_PROJECTS})(\..*)?"),
    (r"py:.*", rf"({_BUILTINS})"),
    (r"py:.*", rf"({_STDLIB})"),
]

html_theme = "pydata_sphinx_theme"
html_title = "dask-dppca"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
html_static_path: list[str] = []
