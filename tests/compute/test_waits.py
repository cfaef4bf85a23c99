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


@pytest.mark.timeout(30)
def test_a_future_lost_after_it_was_done_is_waited_for_again_not_fetched():
    lost = ScriptedFuture("pending", "finished")
    await_done(None, [ScriptedFuture("finished"), lost], "release test")
    assert lost.callbacks == 2  # waited for a second time


@pytest.mark.timeout(30)
def test_an_erred_future_raises_its_error():
    with pytest.raises(ZeroDivisionError, match="own error"):
        await_done(None, [ScriptedFuture("error")], "release test")
