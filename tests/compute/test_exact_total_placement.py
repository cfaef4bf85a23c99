"""The exact total exists only inside the release task: no Dask key holds it, and nothing
named like a total is spilled.

Every value a worker holds is recorded as it reaches memory (a worker plugin), with
memory targets so low that every result is spilled to disk: each segment's sum is
a partial sum (its exact value differs from the segments' total), the only other key is the
release, whose value is the private release, and no spilled file is named like a total.
"""

from __future__ import annotations

import os

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import WorkerPlugin

import dask_dppca as dd
from dask_dppca.compute import TRUSTED_RESOURCE
from dask_dppca.graph import LaneState
from dask_dppca.kernel import ExactSum

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.filterwarnings(
        "ignore::dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning"
    ),
]

SPILL_EVERYTHING = {
    "distributed.worker.memory.target": 1e-9,
    "distributed.worker.memory.spill": 1e-9,
    "distributed.worker.memory.pause": False,
    "distributed.worker.memory.terminate": False,
}


class _Recorder(WorkerPlugin):
    """Each key that reaches a worker's memory: its type, its lane sum, the spilled files."""

    name = "dppca-test-recorder"

    def setup(self, worker) -> None:
        self.worker = worker
        self.seen: list[tuple] = []
        self.files: set[str] = set()

    def transition(self, key, start, finish, **kwargs) -> None:
        if finish != "memory":
            return
        value = self.worker.data[key]
        total = value.total if isinstance(value, LaneState) else None  # an ExactSum
        self.seen.append((str(key), type(value).__name__, total))
        for _, _, names in os.walk(self.worker.local_directory):
            self.files |= set(names)


def test_no_key_but_the_release_holds_the_total_and_no_total_is_spilled():
    x = np.random.default_rng(4).standard_t(2, size=(6000, 4))  # test data only
    with (
        dask.config.set(SPILL_EVERYTHING),
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            memory_limit="2GiB",
            resources={TRUSTED_RESOURCE: 1},  # both may release; placement picks one
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        client.register_plugin(_Recorder())
        est = dd.DPPCA(2, scheduler=client, random_state=0, design="complete").fit(x)
        seen, files = _recorded(client)
        # The check has teeth: kendall_matrix (non-private) computes the total as a key.
        dd.kendall_matrix(x, scheduler=client)
        seen_by_kendall, _ = _recorded(client)
    assert _keys_beside_the_lanes(seen) == {f"dppca-release-{est.privacy_['fit_id']}"}
    assert any(key.startswith("lanes_total-") for key in _keys_beside_the_lanes(seen_by_kendall))
    lanes = [(key, total) for key, kind, total in seen if kind == "LaneState"]
    assert all(key.startswith("dppca-pairs-") for key, _ in lanes)
    # The total, from the segments' sums (each segment a task, its sum a key).
    segments = dict(lanes)
    assert len(segments) >= 2
    total = ExactSum.merge(*segments.values()).to_float()
    assert all(not np.array_equal(partial.to_float(), total) for _, partial in lanes)
    assert files, "nothing was spilled: the check saw no files"
    named_like_a_total = [n for n in files if any(w in n.lower() for w in ("total", "trusted"))]
    assert named_like_a_total == []
    assert not [n for n in files if "dppca-sum" in n or "lanes_total" in n]


def _recorded(client) -> tuple[list, set]:
    """What the workers' recorders saw so far (then cleared), and the files they saw."""

    def take(dask_worker):
        recorder = dask_worker.plugins["dppca-test-recorder"]
        seen, recorder.seen = recorder.seen, []
        return seen, sorted(recorder.files)

    records = client.run(take)
    seen = [item for worker_seen, _ in records.values() for item in worker_seen]
    return seen, {name for _, worker_files in records.values() for name in worker_files}


def _keys_beside_the_lanes(seen) -> set[str]:
    """Keys that are neither lane sums nor the input's own blocks."""
    return {
        key
        for key, kind, _ in seen
        if kind != "LaneState" and not (kind == "ndarray" and key.startswith(_INPUT_KEYS))
    }


#: The input's rows on the workers: dask's blocks, or rows in memory scattered a piece a
#: block (``ndarray-`` keys) and their block views.
_INPUT_KEYS = ("('array-", "ndarray-", "('from-value-", "('concatenate-")
