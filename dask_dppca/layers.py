"""The package's layers, lowest first: the one source of the layer table.

A module imports only from its own layer and the layers below it; tests/test_layering.py
checks every import against :data:`LAYERS`, and that CONTRIBUTING.md's "Layout" table lists
the same layers in the same order.  The privacy layer imports neither dask nor
distributed (:data:`FORBIDDEN_IMPORTS`): its proof can be read, and its math tested,
without a cluster.
"""

from __future__ import annotations

__all__ = ["FORBIDDEN_IMPORTS", "LAYERS", "MAX_MODULES_PER_FOLDER", "ROOMS"]

#: ``(layer name, top-level modules of dask_dppca in it, what it holds)``, lowest first.
LAYERS: tuple[tuple[str, frozenset[str], str], ...] = (
    (
        "base",
        frozenset({"validation", "datasets", "layers", "lazy", "version"}),
        "parameter checks, synthetic data sets, packages' names imported on first use, the "
        "installed version",
    ),
    (
        "kernel",
        frozenset({"kernel"}),
        "spatial signs; exact block-pair sums of g g^T (numpy + numba); exact summation; "
        "the rounding bound",
    ),
    (
        "design",
        frozenset({"design"}),
        "pair designs, block planning and the plan (pairs, degrees, blocks, tiles)",
    ),
    (
        "graph",
        frozenset({"io", "graph"}),
        "inputs (numpy, dask, Zarr, xarray, DataFrames; storage, result files); the lanes of "
        "block-pair tasks",
    ),
    (
        "privacy",
        frozenset({"privacy"}),
        "calibration, float-safe noise, the mechanisms (privacy/mechanisms/); the budget and "
        "its ledger one room above them (privacy/budget/); no Dask",
    ),
    (
        "compute",
        frozenset({"compute"}),
        "compute targets (embedded cluster, addresses, clients), bounded waits, progress, "
        "BLAS policy, the trusted release, tickets, placement",
    ),
    (
        "planning",
        frozenset({"planning"}),
        "the utility model (release_sigma), a fit's plan before it runs, the machine model "
        "its times come from, population eigenvalues",
    ),
    (
        "decomposition",
        frozenset({"decomposition"}),
        "DPPCA and its result files, the non-private kendall_matrix and breakdown bound, sin theta",
    ),
    (
        "analysis",
        frozenset({"analysis"}),
        "the private analysis: the stage contract and its registry, one module per stage, "
        "analyze, its plan, plots and the HTML report",
    ),
    (
        "shells",
        frozenset({"app", "cli", "__init__", "__main__"}),
        "the app (Panel) and the command line (one module per command)",
    ),
)

#: Rooms inside a layer, lowest first: ``{layer: ((room, what it holds), ...)}``.  A module
#: in a room imports nothing from a room above it, nor from the layer's modules beside the
#: rooms (which may import from both).
ROOMS: dict[str, tuple[tuple[str, str], ...]] = {
    "privacy": (
        ("mechanisms", "the mathematics: mechanisms, sensitivities, calibration, accounting"),
        ("budget", "the books: composition, the ledger, charging, registry, lineage, reports"),
    ),
}

#: Most modules one folder of the package holds side by side (``__init__`` not counted).
MAX_MODULES_PER_FOLDER = 16

#: Top-level packages a layer may not import at all.
FORBIDDEN_IMPORTS: dict[str, frozenset[str]] = {
    "privacy": frozenset({"dask", "distributed"}),
    "kernel": frozenset({"dask", "distributed"}),
    "design": frozenset({"dask", "distributed"}),
}
