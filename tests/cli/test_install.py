"""The installed package imports from any directory, not only from the checkout.

CI (.ci/run) runs the README's two commands in order in one fresh virtual environment,
``pip install .`` (and the demo) and then ``pip install -e ".[test]"``, before this suite:
a file the first install leaves behind in site-packages (numba's cache once did) makes
Python import an empty namespace package there, and this test fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_package_imports_from_outside_the_checkout(tmp_path):
    code = (
        "import json, dask_dppca as dd; from dask_dppca import DPPCA, PrivacyBudget; "
        "print(json.dumps({'file': dd.__file__, 'version': dd.__version__}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    # None (a namespace package) when a leftover folder shadows the install.
    assert found["file"] is not None
    # The tests test this checkout: README's editable install points back here.
    assert Path(found["file"]).resolve() == ROOT / "dask_dppca" / "__init__.py"
    assert found["version"] != "0+unknown"
