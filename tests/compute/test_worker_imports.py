"""A worker that runs a fit's segment tasks and its release imports only what they use.

Dask pauses a worker at 80 % of its memory limit; ``import dask.array`` alone brings
xarray, pandas and pyarrow where they are installed (about 100 MiB), which a segment task
(numpy, numba, zarr) and a release (numpy, the sampler) never use.  Fresh worker
processes, so nothing else loaded them first.  The data are test data (fixed seed).
"""

from __future__ import annotations

import sys
import warnings

import pytest

import dask_dppca as dd
from tests.cli import write_store
from tests.live import one_trusted_worker

#: What the graph builders on the client use and a worker running a fit must not load.
CLIENT_ONLY = ("dask.array", "xarray", "pandas", "pyarrow", "sklearn", "dask_dppca.graph.lanes")


def _loaded(names: tuple[str, ...]) -> list[str]:
    return sorted(name for name in names if name in sys.modules)


@pytest.mark.cluster
@pytest.mark.timeout(180)
def test_a_fit_loads_no_graph_builder_stack_on_its_workers(tmp_path):
    store = write_store(tmp_path / "x.zarr", n=600, d=4)
    with one_trusted_worker() as client:
        assert list(client.run(_loaded, CLIENT_ONLY).values()) == [[]]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", dd.NoisyReleaseWarning)
            fitted = dd.DPPCA(2, epsilon=5.0, delta=1e-5, scheduler=client).fit(store)
        assert fitted.privacy_["released_on"].startswith("tcp://")  # the worker drew it
        (loaded,) = client.run(_loaded, CLIENT_ONLY).values()
        ran = client.run(_loaded, ("dask_dppca.graph.lane_task", "dask_dppca.io.zarr_blocks"))
    assert loaded == []
    assert list(ran.values()) == [["dask_dppca.graph.lane_task", "dask_dppca.io.zarr_blocks"]]


@pytest.mark.timeout(120)
def test_an_analysis_release_loads_no_scipy_stats_on_its_worker():
    """What a worker unpickles for the analysis's releases (each stage's module and the
    trusted release) loads neither scipy.stats nor sklearn: scipy.stats alone cost a
    worker about half a second at its first scree release (the plan's fixed costs are
    those of warm workers)."""
    import subprocess

    code = (
        "import sys, dask_dppca.analysis.stages.scree, dask_dppca.analysis.stages.score_map, "
        "dask_dppca.analysis.stages.scale, dask_dppca.analysis.stages.median, "
        "dask_dppca.compute.trusted.release, dask_dppca.compute.trusted.score_map; "
        "print(sorted(m for m in ('scipy.stats', 'sklearn') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=100, check=True
    ).stdout
    assert out.strip() == "[]"
