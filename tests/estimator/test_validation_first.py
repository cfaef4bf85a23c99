"""Every bad parameter is refused before anything starts: no cluster, no data read."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dask_dppca as dd
from dask_dppca import compute, io
from dask_dppca.compute import target as target_module
from dask_dppca.decomposition import estimator
from tests.estimator.test_parameters import MAY_HANG, ROWS, _needles, evaluate_input

#: ValueError rows of docs/robustness.md that can only be refused once the input is opened
#: (its shape) or a cluster is reached; all other parameter-only rows are checked here.
NEEDS_DATA_OR_CLUSTER = {"n_components-above-d", "scheduler-refused"} | MAY_HANG
#: Cases the table lacks, as (input, the parameter the message starts with).
EXTRA = [
    ("calibration=None", "calibration"),
    ("design=3", "design"),
    ("n_components=True", "n_components"),
    ("epsilon=True", "epsilon"),
    ("delta=1.5", "delta"),
    ("scheduler=8786", "scheduler"),
    ("random_state=1.5", "random_state"),
]


def _bad_cases() -> list:
    """Every parameter-only ValueError row of the table (no ``X=``), then EXTRA."""
    cases = []
    for row in ROWS:
        if row["outcome"] != "ValueError" or "X=" in row["input"]:
            continue
        if row["case"] in NEEDS_DATA_OR_CLUSTER:
            continue
        cases.append(pytest.param(row["input"], _needles(row), id=row["case"]))
    cases += [
        pytest.param(source, [name], id=f"{name}-{source.split('=', 1)[1]}")
        for source, name in EXTRA
    ]
    return cases


BAD = _bad_cases()


@pytest.fixture
def nothing_may_start(monkeypatch):
    """Fail loudly if fit opens its input or asks for a compute target."""
    started = []

    def refuse(*args, **kwargs):
        started.append(args)
        raise AssertionError("fit started something before validating its parameters")

    # fit imports them after validating (from the packages: patched there).
    monkeypatch.setattr(compute, "compute_target", refuse)
    monkeypatch.setattr(target_module, "embedded_client", refuse)
    monkeypatch.setattr(io, "open_records", refuse)
    return started


def test_the_table_gives_the_cases():
    """docs/robustness.md, not this file, lists the cases; EXTRA holds only what it lacks."""
    table_cases = {row["case"] for row in ROWS}
    assert sum(case.id in table_cases for case in BAD) >= 30
    table_inputs = {row["input"].strip("`") for row in ROWS}
    assert [source for source, _ in EXTRA if source in table_inputs] == []


@pytest.mark.parametrize("source, needles", BAD)
def test_bad_parameter_is_refused_before_any_cluster_or_read(
    source, needles, nothing_may_start, tmp_path
):
    """The row's input (``custom(...)`` refuses as it is built) and then ``fit`` on records
    that are never opened: the message starts with the parameter's name."""
    with pytest.raises(ValueError, match=f"^{needles[0]}: ") as error:
        dd.DPPCA(**evaluate_input(source, tmp_path)).fit(np.eye(5))
    for needle in needles:
        assert needle in str(error.value), (needle, str(error.value))
    assert nothing_may_start == []


def test_the_guard_itself_would_catch_a_late_check(nothing_may_start):
    """With valid parameters fit reaches the input: the fixture above can fail."""
    with pytest.raises(AssertionError, match="started something"):
        dd.DPPCA(2).fit(np.eye(5))
    assert len(nothing_may_start) == 1


def test_every_parameter_has_a_constraint():
    names = set(dd.DPPCA().get_params())
    # the privacy target (PrivacyTarget.of) and the spatial sign (resolve_spatial_sign)
    checked_elsewhere = {"epsilon", "delta", "calibration", "spatial_sign", "radius"}
    assert names == set(estimator.PARAMETER_CONSTRAINTS) | checked_elsewhere


#: What a refusal must not wait for: the input, graph and cluster libraries.
HEAVY = ("dask", "distributed", "zarr", "fsspec")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_bad_parameter_is_refused_before_dask_zarr_or_fsspec_is_imported():
    """In a fresh interpreter, as a user's script: fit and plan refuse a bad calibration
    before the heavy libraries load (the issue measured 1.1-2.9 s and 856-2107 modules)."""
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        from dask_dppca import DPPCA
        for method in ("fit", "plan"):
            try:
                getattr(DPPCA(2, calibration="loose"), method)(np.ones((10, 3)))
            except ValueError as error:
                print(method, error)
        print("imported:", [name for name in {HEAVY!r} if name in sys.modules])
        from dask_dppca.io import open_records  # what a valid fit opens first
        open_records(np.ones((10, 3)))
        print("then:", [name for name in {HEAVY!r} if name in sys.modules])
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for method, line in zip(("fit", "plan"), lines, strict=False):
        assert line.startswith(f"{method} calibration: unknown value 'loose'"), done.stdout
    assert lines[-2] == "imported: []", done.stdout
    assert lines[-1] == f"then: {list(HEAVY)}", done.stdout  # the check can fail
