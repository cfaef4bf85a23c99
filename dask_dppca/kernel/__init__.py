"""Layer 1, the kernel: exact sums of g(t) g(t)^T over block pairs (numpy + numba, no Dask).

* :mod:`.spatial_sign`: the generalized spatial signs g (sphere, winsor, custom, and the
  non-private identity) and their bound G.
* :mod:`.pair_sum`: :func:`.block_pair_sum`, the exact sum over the pairs of two row
  blocks (or within one), and :func:`.pairwise_sum`, the balanced tree the graph uses.
* :mod:`.rows`, :mod:`.tiles`, :mod:`.exact_path`: preparing rows, the fast path's tile
  loop and the exact path for ill-conditioned pairs.
* :mod:`.rounding`: the tile size rule and the worst-case rounding bound the privacy
  layer adds to the sensitivity.
* :mod:`.exact_sum`: exact, order-free addition of float64 arrays (the lanes' totals).
* :mod:`.jit`: numba compilation with its cache outside the installed package.
* :mod:`.fp_state`: the floating-point error state every computation on data runs under.
* :mod:`.score_stats`: the score map's exact counts on one block of scores.
"""

from .exact_sum import ExactSum
from .pair_sum import block_pair_sum, pairwise_sum
from .rounding import (
    DEFAULT_MEMORY_BUDGET,
    rounding_error_bound,
    tile_rows_for_budget,
    tile_scratch_bytes,
)
from .spatial_sign import (
    MAX_BOUND,
    MIN_BOUND,
    SpatialSign,
    custom,
    identity,
    resolve_spatial_sign,
    sphere,
    winsor,
)

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "MAX_BOUND",
    "MIN_BOUND",
    "ExactSum",
    "SpatialSign",
    "block_pair_sum",
    "custom",
    "identity",
    "pairwise_sum",
    "resolve_spatial_sign",
    "rounding_error_bound",
    "sphere",
    "tile_rows_for_budget",
    "tile_scratch_bytes",
    "winsor",
]
