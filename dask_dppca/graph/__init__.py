"""Layer 3, the graph: the Dask task graph of the exact pair sum (no privacy here).

* :mod:`.lanes`: :func:`.kernel_sum_graph` builds the segment tasks of a design plan (a
  few a thread, each running a run of block pairs and reading its own blocks), lazily
  and without reading data; :func:`.segment_bounds` is the public rule that cuts them;
  :func:`.graph_layout` counts the tasks and working set without building them;
  :func:`.pass_block_sizes` cuts the rows of a one-pass reduction (the score map's).
* :mod:`.lane_task`: what runs inside those tasks, and :func:`.lanes_total`, the
  segments' exact total rounded once.
* :mod:`.worker_tasks`: on a cluster, the segments run a worker's worth at a time in
  worker-wide tasks (one a worker, its threads sharing each block's read and a few
  exact sums), cut to fit the workers' memory limit.
* :mod:`.sealed`: partial sums that only Dask workers may open.
* :mod:`.score_stats`: the score map's exact counts as one-pass reductions (sealed too).
"""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

#: Public name -> the submodule defining it (imported on first use: :mod:`dask_dppca.lazy`).
_EXPORTS = {
    "LaneState": ".lane_task",
    "lanes_total": ".lane_task",
    "LANES_PER_SUM_TASK": ".lanes",
    "LANES_PER_THREAD": ".lanes",
    "GraphLayout": ".lanes",
    "graph_layout": ".lanes",
    "kernel_sum_graph": ".lanes",
    "lanes_for": ".lanes",
    "pass_block_sizes": ".lanes",
    "segment_bounds": ".lanes",
    "ExactSumLeakError": ".sealed",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from .lane_task import LaneState, lanes_total
    from .lanes import (
        LANES_PER_SUM_TASK,
        LANES_PER_THREAD,
        GraphLayout,
        graph_layout,
        kernel_sum_graph,
        lanes_for,
        pass_block_sizes,
        segment_bounds,
    )
    from .sealed import ExactSumLeakError

__all__ = [
    "LANES_PER_SUM_TASK",
    "LANES_PER_THREAD",
    "ExactSumLeakError",
    "GraphLayout",
    "LaneState",
    "graph_layout",
    "kernel_sum_graph",
    "lanes_for",
    "lanes_total",
    "pass_block_sizes",
    "segment_bounds",
]
