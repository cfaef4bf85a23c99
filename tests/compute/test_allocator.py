"""Worker processes keep scratch arrays on the heap (dask_dppca.compute.allocator).

The nanny's MALLOC_TRIM_THRESHOLD_ freezes glibc's mmap threshold at 128 KiB, so every
array over it is a mapping of its own (fresh pages, faulted in one by one).  Observed
through glibc's own count of mmapped blocks (mallinfo2) while a 4 MiB array is alive.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from distributed import Client, LocalCluster

import dask_dppca as dd
from dask_dppca.compute import TRUSTED_RESOURCE

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")


def mapped_blocks_of_a_4_mib_array() -> int:
    """How many mmapped blocks glibc adds for a live 4 MiB numpy array (0: on the heap)."""
    import ctypes

    import numpy

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )]  # fmt: skip

    mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    mallinfo2.restype = Mallinfo2
    numpy.ones(2**19).sum()  # once first: a heap that must grow for it has grown
    before = mallinfo2().hblks
    held = numpy.ones(2**19)
    during = mallinfo2().hblks
    del held
    return during - before


def _in_a_fresh_process(env: dict[str, str], set_threshold: bool) -> dict:
    code = (
        "import json; from tests.compute.test_allocator import mapped_blocks_of_a_4_mib_array; "
        "from dask_dppca.compute.allocator import keep_scratch_on_the_heap; "
        f"done = keep_scratch_on_the_heap() if {set_threshold} else None; "
        "print(json.dumps({'set': done, 'mapped': mapped_blocks_of_a_4_mib_array()}))"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


@pytest.mark.slow
def test_a_frozen_threshold_maps_each_array_and_the_raised_one_uses_the_heap():
    frozen = _in_a_fresh_process({"MALLOC_TRIM_THRESHOLD_": "65536"}, set_threshold=False)
    assert frozen["mapped"] == 1  # the cost this module removes
    raised = _in_a_fresh_process({"MALLOC_TRIM_THRESHOLD_": "65536"}, set_threshold=True)
    assert raised == {"set": True, "mapped": 0}


@pytest.mark.slow
def test_the_threshold_is_left_alone_where_glibc_or_the_user_sets_it():
    assert _in_a_fresh_process({}, set_threshold=True)["set"] is False  # dynamic: grows
    user = {"MALLOC_TRIM_THRESHOLD_": "65536", "MALLOC_MMAP_THRESHOLD_": "131072"}
    assert _in_a_fresh_process(user, set_threshold=True) == {"set": False, "mapped": 1}


@pytest.mark.cluster
def test_nanny_workers_reuse_the_heap_once_a_fit_has_set_them_up():
    """A worker process as Dask's nanny starts it (with its MALLOC_TRIM_THRESHOLD_): the
    fit's worker setup raises the threshold there."""
    X = np.random.default_rng(0).standard_normal((400, 4))  # test data only
    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            dashboard_address=":0",
            resources={TRUSTED_RESOURCE: 1},
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        assert list(client.run(os.environ.get, "MALLOC_TRIM_THRESHOLD_").values()) == ["65536"]
        (before,) = client.run(mapped_blocks_of_a_4_mib_array).values()
        dd.DPPCA(1, scheduler=client, random_state=0).fit(X)  # random_state: TEST ONLY
        (after,) = client.run(mapped_blocks_of_a_4_mib_array).values()
    assert (before, after) == (1, 0)
