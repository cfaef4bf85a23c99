"""await_done never fetches a result, even for a future lost after it was done.

A worker killed after a lane task finished loses its key: the future, already counted
done, goes back to pending while the key is computed again.  Fetching it then
(``future.result()``) brought a sealed lane sum to the client, where it refuses to open
(ExactSumLeakError; seen in tests/system/test_drawn_once.py).  Here with stand-in
futures whose status is scripted, so the race is hit every time.
"""

from __future__ import annotations

import pytest

from dask_dppca.compute.waits import await_done


class ScriptedFuture:
    """A future done at once each time it is waited for, its status then ``statuses[k]``
    at the k-th wait (the last one from there on)."""

    def __init__(self, *statuses: str) -> None:
        self.statuses = statuses
        self.callbacks = 0
        self.status = "pending"

    def add_done_callback(self, callback) -> None:
        self.status = self.statuses[min(self.callbacks, len(self.statuses) - 1)]
        self.callbacks += 1
        callback(self)

    def result(self, timeout=None):
        if self.status == "error":
            raise ZeroDivisionError("the task's own error")
        raise AssertionError("await_done fetched a result")


class LostThenRecomputed:
    """Counted done at once (its callback fires), then lost: ``pending`` for its next
    ``pending_looks`` status looks, ``finished`` after (computed again)."""

    def __init__(self, pending_looks: int) -> None:
        self.pending_looks = pending_looks
        self.looks = 0

    def add_done_callback(self, callback) -> None:
        callback(self)

    @property
    def status(self) -> str:
        self.looks += 1
        return "pending" if self.looks <= self.pending_looks else "finished"

    def result(self, timeout=None):
        raise AssertionError("await_done fetched a result")


class RunningCluster:
    """A client whose scheduler always answers with one running worker."""

    def scheduler_info(self, n_workers=-1):
        return {"workers": {"tcp://w": {"status": "running"}}}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("pending_looks", [1, 5, 2000])
def test_a_future_lost_after_it_was_done_is_waited_for_again_not_fetched(pending_looks):
    """Waited for by its status, in a loop (a recursion went 1000 deep under kills)."""
    lost = LostThenRecomputed(pending_looks)
    await_done(RunningCluster(), [ScriptedFuture("finished"), lost], "release test")
    assert lost.looks > pending_looks  # waited until it was finished again


@pytest.fixture(autouse=True)
def _fast_polls(monkeypatch):
    from dask_dppca.compute import waits

    monkeypatch.setattr(waits, "_POLL", 0.001)


@pytest.mark.timeout(30)
def test_an_erred_future_raises_its_error():
    with pytest.raises(ZeroDivisionError, match="own error"):
        await_done(None, [ScriptedFuture("error")], "release test")
