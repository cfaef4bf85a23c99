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
import contextvars
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, TextIO

__all__ = [
    "LINE_EVERY_SECONDS",
    "LINE_EVERY_SHARE",
    "STAGES",
    "RunProgress",
    "cluster_progress",
    "in_notebook",
    "local_progress",
    "run_progress",
    "stage_of",
]

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


#: Without a terminal, a line at every this much more of the run ...
LINE_EVERY_SHARE = 0.10
#: ... or after this many seconds without one.
LINE_EVERY_SECONDS = 30.0
#: The run whose display the computes of this context report to (:func:`run_progress`).
_RUN: contextvars.ContextVar[RunProgress | None] = contextvars.ContextVar(
    "dask_dppca_run_progress", default=None
)


class RunProgress:
    """One progress display for a whole run of stages (an analysis): labelled by stage,
    never going backwards.

    Each stage has an equal share of the run.  A stage's computes are not known in
    advance: after its j-th compute it stands at ``j / (j + 1)`` of its share, and a
    running compute moves it towards ``(j + 1) / (j + 2)`` as its tasks finish; it
    reaches its whole share when the stage ends.  In a terminal (``stream.isatty()``) one
    line redrawn in place; else a line when the run has moved :data:`LINE_EVERY_SHARE`
    further, or :data:`LINE_EVERY_SECONDS` after the last line (a job's or a notebook's
    log).
    """

    def __init__(
        self, stages: Sequence[str], stream: TextIO | None = None, clock: Any = time.monotonic
    ) -> None:
        self.stages = list(stages)
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty()) if callable(isatty) else False
        self.clock = clock
        self.started = clock()
        self.shown = -1.0  # the share last shown (never decreases)
        self.last_line = self.started
        self.index = -1
        self.computes = 0
        self.lock = threading.Lock()

    @property
    def label(self) -> str:
        """The current stage's title ("starting" before the first, "done" after the last)."""
        if 0 <= self.index < len(self.stages):
            return self.stages[self.index]
        return "done" if self.index >= len(self.stages) else "starting"

    def begin(self, stage: str) -> None:
        """The run enters ``stage`` (one of ``stages``; the stages before it are done)."""
        with self.lock:
            self.index = self.stages.index(stage) if stage in self.stages else self.index + 1
            self.computes = 0
        self.update(0.0, force=True)

    def update(self, fraction: float, *, force: bool = False) -> None:
        """The running compute of the current stage is ``fraction`` done."""
        with self.lock:
            share = self._share(min(max(float(fraction), 0.0), 1.0))
            if share < self.shown:
                share = self.shown  # never backwards
            now = self.clock()
            if self.tty:
                if share > self.shown or force:
                    self._draw(share, now)
            elif (
                force
                or share >= 1.0 > self.shown
                or share - max(self.shown, 0.0) >= LINE_EVERY_SHARE - 1e-12
                or now - self.last_line >= LINE_EVERY_SECONDS
            ):
                self._line(share, now)
            self.shown = max(self.shown, share)

    def compute_done(self) -> None:
        """One compute of the current stage has ended."""
        with self.lock:
            self.computes += 1
        self.update(0.0)

    def finish(self) -> None:
        """Every stage is done: 100 %, and the terminal's line ended."""
        with self.lock:
            self.index = len(self.stages)
        self.update(1.0, force=True)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def _share(self, fraction: float) -> float:
        n = max(len(self.stages), 1)
        if self.index >= len(self.stages):
            return 1.0
        if self.index < 0:
            return 0.0
        j = self.computes
        low, high = j / (j + 1), (j + 1) / (j + 2)
        return (self.index + low + (high - low) * fraction) / n

    def _text(self, share: float, now: float) -> str:
        step = f"{min(self.index + 1, len(self.stages))}/{len(self.stages)}"
        return f"{share:4.0%} {self.label} (stage {step}, {now - self.started:.0f} s)"

    def _draw(self, share: float, now: float) -> None:
        width = 24
        filled = int(round(share * width))
        bar = "#" * filled + " " * (width - filled)
        self.stream.write(f"\r[{bar}] {self._text(share, now)}\x1b[K")
        self.stream.flush()

    def _line(self, share: float, now: float) -> None:
        self.stream.write(f"analysis: {self._text(share, now)}\n")
        self.stream.flush()
        self.last_line = now


@contextmanager
def run_progress(
    stages: Sequence[str], enabled: bool, stream: TextIO | None = None
) -> Iterator[RunProgress | None]:
    """One display (:class:`RunProgress`) for every compute of the block: the computes'
    own bars (:func:`cluster_progress`, :func:`local_progress`) report to it instead.
    """
    if not enabled:
        yield None
        return
    run = RunProgress(stages, stream)
    token = _RUN.set(run)
    try:
        yield run
        run.finish()
    finally:
        _RUN.reset(token)


def local_progress(enabled: bool):
    """``dask.diagnostics.ProgressBar`` for a local-scheduler compute, when enabled (or
    its tasks reported to the run's display, when one is active).
    """
    if not enabled:
        return nullcontext()
    run = _RUN.get()
    if run is not None:
        return _local_to_run(run)
    from dask.diagnostics import ProgressBar

    return ProgressBar()


@contextmanager
def _local_to_run(run: RunProgress) -> Iterator[None]:
    from dask.callbacks import Callback

    counts = {"done": 0, "all": 1}

    def start(dsk: Any) -> None:
        counts["all"] = max(len(dsk), 1)

    def posttask(key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        counts["done"] += 1
        run.update(counts["done"] / counts["all"])

    with Callback(start=start, posttask=posttask):
        yield
    run.compute_done()


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
    run = _RUN.get()
    if run is not None:
        with _cluster_to_run(run, futures):
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


@contextmanager
def _cluster_to_run(run: RunProgress, futures: list) -> Iterator[None]:
    """The share of ``futures`` done, polled (``Future.done``) into the run's display."""
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(0.5):
            done = sum(1 for future in futures if future.done())
            run.update(done / max(len(futures), 1))

    watcher = threading.Thread(target=poll, name="dask-dppca-run-progress", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join(timeout=_FINAL_DRAW_WAIT)
    run.compute_done()
