"""Every public name of ``dask_dppca`` carries a numpydoc ``Examples`` section, and each
example runs as a doctest: small data, OS-entropy noise, only noise-independent facts
(shapes, units, types) in the expected output."""

from __future__ import annotations

import doctest
import io
import warnings

import pytest

import dask_dppca as dd
from dask_dppca.analysis.report import dataset_name
from dask_dppca.compute.cluster import where_drawn
from dask_dppca.privacy.mechanisms.score_map import noisy_size_text
from dask_dppca.privacy.notices import below_noise

#: Further documented helpers whose examples run too (the report's shared wording).
EXTRA = {
    "dataset_name": dataset_name,
    "where_drawn": where_drawn,
    "below_noise": below_noise,
    "noisy_size_text": noisy_size_text,
}
OBJECTS = {**{name: getattr(dd, name) for name in dd.__all__}, **EXTRA}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(OBJECTS))
def test_the_public_example_runs(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an example that writes a file writes it here
    monkeypatch.delenv("DASK_DPPCA_BUDGET", raising=False)
    obj = OBJECTS[name]
    tests = [
        test
        for test in doctest.DocTestFinder(recurse=False).find(obj, name, module=False, globs={})
        if test.examples
    ]
    assert tests and "Examples\n" in (obj.__doc__ or ""), f"{name}: no Examples section"
    runner = doctest.DocTestRunner(
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
    )
    out = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a thread pool's release warns it is untrusted
        for test in tests:
            runner.run(test, out=out.write)
    assert runner.failures == 0, out.getvalue()
    assert dd.active_budgets() == ()  # an example leaves no default budget behind
