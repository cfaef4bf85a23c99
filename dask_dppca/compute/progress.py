"""Progress display for a compute: a text bar in a terminal, a widget in Jupyter.

Works on every compute target without a default client: the distributed bars are
given the target's scheduler address explicitly (``distributed.progress`` would look
for a default client, which the embedded cluster and address clients do not set).
The distributed bar listens on its own thread and event loop, so the caller keeps
watching the cluster (bounded waits) while the bar updates, in a terminal and in a
notebook whose kernel is busy with the fit.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

__all__ = ["STAGES", "cluster_progress", "in_notebook", "local_progress", "stage_of"]

#: What a reader sees next to each bar of the notebook widget: the fit's stages, by the
#: prefix of their task keys, in the order they run.  Keys of none of them (a user's own
#: dask array, a rechunk of the input) are "prepare the input".
STAGES = (
    ("dppca-read", "read the records"),
    ("original-dppca-read", "read the records"),
    ("dppca-reader", "read the records"),
    ("dppca-pairs", "pair sums (the kernel)"),
    ("dppca-sum", "add the exact sums"),
    ("dppca-release", "add the noise and release (trusted worker)"),
)
OTHER_STAGE = "prepare the input"

#: Seconds the bar's thread may take to draw its last state after the work ended.
_FINAL_DRAW_WAIT = 2.0
#: The scheduler sends the bar an update this often (seconds).
_UPDATE_INTERVAL = 0.1


def in_notebook() -> bool:
    """True inside a Jupyter (IPython) kernel, where a widget can be displayed."""
    if "IPython" not in sys.modules:
        return False
    from IPython import get_ipython

    return getattr(get_ipython(), "kernel", None) is not None


def local_progress(enabled: bool):
    """``dask.diagnostics.ProgressBar`` for a local-scheduler compute, when enabled."""
    if not enabled:
        return nullcontext()
    from dask.diagnostics import ProgressBar

    return ProgressBar()


def stage_of(key: Any) -> str:
    """The stage a task key belongs to, in words (the widget's bar label)."""
    return str(_stage_grouping()(key))


def _stage_grouping():
    """:func:`stage_of` as a closure: sent to the scheduler by value (the scheduler need
    not have dask-dppca installed to group the bars).
    """
    stages, other = STAGES, OTHER_STAGE

    def group(key):
        name = key[0] if isinstance(key, tuple) and key else key
        name = name.decode() if isinstance(name, bytes) else str(name)
        for prefix, stage in stages:
            if name.startswith(prefix):
                return stage
        return other

    return group


@contextmanager
def cluster_progress(client: Any, futures: list, enabled: bool) -> Iterator[None]:
    """Show the progress of ``futures`` (and everything they depend on) while the block runs.

    A ``MultiProgressWidget`` displayed in the notebook, else a text bar on stdout.
    """
    if not enabled:
        yield
        return
    from distributed.diagnostics.progressbar import MultiProgressWidget, TextProgressBar

    address = client.scheduler.address
    bar: MultiProgressWidget | TextProgressBar
    if in_notebook():
        from IPython.display import display

        bar = MultiProgressWidget(
            futures,
            scheduler=address,
            complete=True,
            interval=_UPDATE_INTERVAL,
            group_by=_stage_grouping(),
        )
        display(bar.widget)
    else:
        bar = TextProgressBar(
            futures, scheduler=address, complete=True, start=False, interval=_UPDATE_INTERVAL
        )
    listener = threading.Thread(
        target=asyncio.run, args=(bar.listen(),), name="dask-dppca-progress", daemon=True
    )
    listener.start()
    try:
        yield
    finally:
        listener.join(timeout=_FINAL_DRAW_WAIT)
