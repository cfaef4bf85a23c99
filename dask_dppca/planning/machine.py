"""The machine model behind a plan's times: what one core and one task cost here.

A :class:`MachineModel` holds the few rates a fit's wall time follows from
(benchmarks/README.md, bench_plan.py, checks the prediction against measured fits):

* the kernel's rate on one core, in pairs per second, for a few widths d (between them
  interpolated in log-log, beyond them the nearest one scaled by ``d``), and its cost per
  row of the blocks it is given (their preparation: at 1024-row blocks about a fifth of
  the pairs' time at d = 32);
* the read rate of one thread, in decoded bytes per second, per storage and codec
  (``"local/zstd"``, ``"s3/none"``, ``"memory"``);
* the cost of one graph task (the scheduler's, and the worker's around the task),
  and a fit's fixed cost (graph, submission, the release);
* the memory of an idle worker after its first task (the imports, numba's code);
* what an analysis adds (:mod:`dask_dppca.cli.measure_analysis`): the scree's cost per
  record pair and value, one noise draw of the quantile scans (the private sampler), and
  each stage's fixed cost on warm workers (its releases' round trips, the client's
  post-processing) and the analysis's own (the split, the reservations).

``dask-dppca bench --save`` measures them on this machine and saves them as JSON in the
user's configuration folder (:func:`model_path`: ``$XDG_CONFIG_HOME/dask-dppca/machine.json``
or the platform's equivalent, or the file the Dask configuration key
:data:`MODEL_PATH_KEY` names); :func:`load_machine_model` reads it back, or gives
:data:`DEFAULT_MODEL` (figures measured on a 2-core development machine) when none is
saved.  A plan (:func:`planning_model`) does not trust those constants: with no saved
model it calibrates them once per machine (a second's kernel run, kept next to the saved
model in ``calibration.json``) and says which model its figures came from.  No figure is
ever taken from data: the model is about the machine.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_MODEL",
    "MODEL_PATH_KEY",
    "MachineModel",
    "calibration_path",
    "kernel_rate",
    "load_machine_model",
    "model_path",
    "planning_model",
    "save_machine_model",
]

#: Dask configuration key naming the machine model's file (environment variable
#: ``DASK_DASK_DPPCA__MACHINE_MODEL``); by default :func:`model_path`.
MODEL_PATH_KEY = "dask-dppca.machine-model"


@dataclass(frozen=True)
class MachineModel:
    """What one core, one read and one task cost on a machine (see the module docstring).

    Attributes
    ----------
    kernel_pairs_per_second : dict of int to float
        The kernel's rate on one core (pairs per second) by width d.
    read_bytes_per_second : dict of str to float
        One thread's read rate (decoded bytes per second) by ``"storage/codec"``
        (``"local/zstd"``, ``"s3/zstd"``, ...) or ``"memory"`` (an array in memory).
    task_seconds : float
        The cost of one graph task beyond its work (scheduler, messages, the worker).
    fixed_seconds : float
        A fit's fixed cost (building and submitting the graph, the release, eigh).
    worker_baseline_bytes : int
        A worker's resident memory after a first small fit (imports, compiled code).
    source : str
        Where the figures come from ("built-in default", or the machine and time).
    storage_seconds : dict of str to float
        A fit's extra fixed cost by storage (``"s3"``: the workers' sessions and first
        requests), beyond ``fixed_seconds`` on a local disk.
    kernel_call_seconds : float
        The kernel's fixed cost per block pair (the exact-sum addition, the tiles'
        set-up), beyond its pairs and rows.
    kernel_row_seconds : dict of int to float
        The kernel's cost per row of a block pair's blocks, by width d: each block's
        preparation (the finite-row check, row hashes and groups, scale classes, the
        centring point, tile loads), beyond its pairs.  A within-block pair has the
        block's rows, a cross-block pair both blocks'.
    read_call_seconds : dict of str to float
        The fixed cost of one read by the keys of ``read_bytes_per_second``, beyond its
        bytes.
    stage_seconds : dict of str to float
        An analysis stage's fixed cost on warm workers by its title (``"scree"``,
        ``"score map"``, ...), beyond its passes' work and its noise draws; ``"analysis"``:
        the analysis's own (the split, the reservations).  A title not in it:
        ``fixed_seconds``.
    noise_draw_seconds : float
        One discrete Laplace draw of the private sampler in a quantile scan's batches
        (the trusted worker's time per draw).
    scree_histogram_seconds, scree_sum_seconds : dict of int to float
        The scree's cost per record pair and value on one core, by width d: its
        histogram pass (k + 1 values a pair) and its sums pass (the means: 3 k + 1).
    start_seconds : float
        What a fresh process's first analysis adds on the embedded cluster it starts:
        the start, the imports and compiled code its first run loads (the command line
        pays it every run, a notebook once).
    """

    kernel_pairs_per_second: dict[int, float]
    read_bytes_per_second: dict[str, float]
    task_seconds: float
    fixed_seconds: float
    worker_baseline_bytes: int
    source: str = "built-in default"
    path: str | None = field(default=None, compare=False)
    storage_seconds: dict[str, float] = field(default_factory=dict)
    kernel_call_seconds: float = 0.0
    read_call_seconds: dict[str, float] = field(default_factory=dict)
    kernel_row_seconds: dict[int, float] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    noise_draw_seconds: float = 0.0
    scree_histogram_seconds: dict[int, float] = field(default_factory=dict)
    scree_sum_seconds: dict[int, float] = field(default_factory=dict)
    start_seconds: float = 0.0

    def stage_fixed(self, title: str) -> float:
        """A stage's fixed cost (``stage_seconds``; else a fit's, ``fixed_seconds``)."""
        return self.stage_seconds.get(title, self.fixed_seconds)

    def scree_value_seconds(self, kind: str, n_features: int) -> float:
        """The scree's seconds per record pair and value at width ``n_features``, for
        ``kind`` "histograms" or "sums" (interpolated as :meth:`row_cost`; unmeasured: a
        kernel pair's).
        """
        values = self.scree_histogram_seconds if kind == "histograms" else self.scree_sum_seconds
        if not values:
            return 1.0 / self.pair_rate(n_features)
        return _by_width(values, n_features, 1)

    def read_call(self, key: str) -> float:
        """The fixed cost of one read (a block's chunks) at a ``read_rate`` key."""
        return self.read_call_seconds.get(key, 0.0)

    def pair_rate(self, n_features: int) -> float:
        """The kernel's pairs per second on one core at width ``n_features``.

        Interpolated in log-log between the measured widths; beyond them the nearest
        one's pair rate scaled by ``d`` (the work per pair is about ``4 d`` flops).
        """
        return _by_width(self.kernel_pairs_per_second, n_features, -1)

    def row_cost(self, n_features: int) -> float:
        """The kernel's seconds per block row at width ``n_features`` (0 when unmeasured).

        Interpolated in log-log between the measured widths; beyond them the nearest
        one's cost, scaled by ``d`` above the widest (the work per row is about ``d``).
        """
        if not self.kernel_row_seconds:
            return 0.0
        return _by_width(self.kernel_row_seconds, n_features, 1)

    def read_rate(self, storage: str, codec: str) -> tuple[float, str]:
        """One thread's read rate for ``storage`` ("local", "s3", ..., "memory") and
        ``codec``, and the key it came from: the exact key, else the same codec on a
        local disk, else the storage's any codec, else the slowest one measured.
        """
        rates = self.read_bytes_per_second
        if storage == "memory":
            keys = ["memory"]
        else:
            keys = [f"{storage}/{codec}", f"local/{codec}"]
            keys += sorted(k for k in rates if k.startswith(f"{storage}/"))
        for key in keys:
            if key in rates:
                return rates[key], key
        slowest = min(rates, key=rates.__getitem__)
        return rates[slowest], slowest

    def describe(self) -> dict[str, Any]:
        """The model as a JSON-ready dict (what :func:`save_machine_model` writes)."""
        out = asdict(self)
        out.pop("path")
        out["kernel_pairs_per_second"] = {
            str(d): r for d, r in sorted(self.kernel_pairs_per_second.items())
        }
        for name in ("kernel_row_seconds", "scree_histogram_seconds", "scree_sum_seconds"):
            out[name] = {str(d): c for d, c in sorted(getattr(self, name).items())}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], path: str | None = None) -> MachineModel:
        """A model from :meth:`describe`'s dict; a ValueError naming what is wrong."""
        where = f" in {path}" if path else ""
        try:
            kernel = {int(d): float(r) for d, r in data["kernel_pairs_per_second"].items()}
            reads = {str(k): float(r) for k, r in data["read_bytes_per_second"].items()}
            model = cls(
                kernel,
                reads,
                float(data["task_seconds"]),
                float(data["fixed_seconds"]),
                int(data["worker_baseline_bytes"]),
                str(data.get("source", "saved")),
                path,
                {str(k): float(v) for k, v in data.get("storage_seconds", {}).items()},
                float(data.get("kernel_call_seconds", 0.0)),
                {str(k): float(v) for k, v in data.get("read_call_seconds", {}).items()},
                {int(d): float(c) for d, c in data.get("kernel_row_seconds", {}).items()},
                {str(k): float(v) for k, v in data.get("stage_seconds", {}).items()},
                float(data.get("noise_draw_seconds", 0.0)),
                {int(d): float(c) for d, c in data.get("scree_histogram_seconds", {}).items()},
                {int(d): float(c) for d, c in data.get("scree_sum_seconds", {}).items()},
                float(data.get("start_seconds", 0.0)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ValueError(
                f"machine model: cannot read the saved model{where} ({type(error).__name__}: "
                f"{error}); run 'dask-dppca bench --save' again"
            ) from None
        rates = [*kernel.values(), *reads.values()]
        if not kernel or not reads or not all(r > 0 and math.isfinite(r) for r in rates):
            raise ValueError(
                f"machine model: the saved model{where} needs positive finite rates; run "
                "'dask-dppca bench --save' again"
            )
        costs = [
            *model.kernel_row_seconds.values(),
            *model.scree_histogram_seconds.values(),
            *model.scree_sum_seconds.values(),
        ]
        if not all(c > 0 and math.isfinite(c) for c in costs):
            raise ValueError(
                f"machine model: the saved model{where} needs positive finite row costs and scree "
                "pair costs; run 'dask-dppca bench --save' again"
            )
        fixed = [*model.stage_seconds.values(), model.noise_draw_seconds, model.start_seconds]
        if not all(c >= 0 and math.isfinite(c) for c in fixed):
            raise ValueError(
                f"machine model: the saved model{where} needs non-negative finite stage and "
                "noise costs (and start); run 'dask-dppca bench --save' again"
            )
        return model


def _by_width(values: dict[int, float], n_features: int, power: int) -> float:
    """``values`` (by width) at width ``n_features``: interpolated in log-log between the
    measured widths, the narrowest's value below them, and above them the widest's times
    ``(d / widest) ** power``.
    """
    d = max(int(n_features), 1)
    points = sorted(values.items())
    if d <= points[0][0]:
        return points[0][1]
    if d >= points[-1][0]:
        return points[-1][1] * (d / points[-1][0]) ** power
    for (d0, v0), (d1, v1) in zip(points[:-1], points[1:]):
        if d0 <= d <= d1:
            w = (math.log(d) - math.log(d0)) / (math.log(d1) - math.log(d0))
            return math.exp((1 - w) * math.log(v0) + w * math.log(v1))
    raise AssertionError("unreachable: d lies between the measured widths")


#: Figures measured on the development machine (2 shared cores, 2026-12-01,
#: benchmarks/README.md): the model used when none is saved.
DEFAULT_MODEL = MachineModel(
    kernel_pairs_per_second={4: 1.1e9, 8: 9.0e8, 32: 3.4e8, 128: 1.0e8, 256: 5.2e7, 512: 2.6e7},
    read_bytes_per_second={"memory": 4.0e9, "local/zstd": 6.0e8, "local/none": 1.5e9},
    task_seconds=1.5e-3,
    fixed_seconds=0.3,
    worker_baseline_bytes=300 * 2**20,
    kernel_call_seconds=5e-4,
    read_call_seconds={"local/zstd": 2e-3, "local/none": 1e-3},
    kernel_row_seconds={8: 1.7e-7, 32: 3.0e-7, 128: 1.5e-6, 512: 1.35e-5},  # 2026-12-03
    # 2026-12-07, two single-threaded worker processes (benchmarks/bench_plan.py --analysis)
    stage_seconds={
        "analysis": 0.025,
        "scree": 0.16,
        "score map": 0.12,
        "median": 0.045,
        "scale": 0.44,
    },
    noise_draw_seconds=2.2e-7,
    start_seconds=2.1,  # 2026-12-07, idle (2.9-3.0 s at load 1.3-1.8)
    scree_histogram_seconds={8: 4.0e-9, 32: 4.3e-9, 128: 6.5e-9, 512: 1.5e-8},
    scree_sum_seconds={8: 2.1e-9, 32: 2.1e-9, 128: 3.1e-9, 512: 6.1e-9},
)


def model_path() -> Path:
    """Where the machine model is saved: the file the Dask configuration key
    :data:`MODEL_PATH_KEY` names, else ``machine.json`` in the user's configuration
    folder for dask-dppca (``platformdirs.user_config_dir``: ``~/.config/dask-dppca`` on
    Linux, honouring ``XDG_CONFIG_HOME``).
    """
    import dask

    configured = dask.config.get(MODEL_PATH_KEY, None)
    if configured:
        return Path(os.path.expanduser(str(configured)))
    import platformdirs

    return Path(platformdirs.user_config_dir("dask-dppca")) / "machine.json"


def load_machine_model(path: str | os.PathLike[str] | None = None) -> MachineModel:
    """The saved machine model (``path``, else :func:`model_path`), or
    :data:`DEFAULT_MODEL` when none is saved there.

    Raises
    ------
    ValueError
        If a file is there but is not a machine model.
    """
    where = Path(path) if path is not None else model_path()
    if not where.exists():
        if path is not None:
            raise ValueError(f"machine model: no file {os.fspath(where)!r}")
        return DEFAULT_MODEL
    try:
        data = json.loads(where.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(
            f"machine model: cannot read {os.fspath(where)!r} ({type(error).__name__}: {error})"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"machine model: {os.fspath(where)!r} does not hold a JSON object")
    return MachineModel.from_dict(data, os.fspath(where))


def save_machine_model(model: MachineModel, path: str | os.PathLike[str] | None = None) -> Path:
    """Write ``model`` as JSON to ``path`` (default :func:`model_path`), its folder made
    if needed; the file is replaced whole (a rename).  Returns where it went.
    """
    where = Path(path) if path is not None else model_path()
    where.parent.mkdir(parents=True, exist_ok=True)
    partial = where.with_name(f".{where.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(model.describe(), indent=2) + "\n")
    os.replace(partial, where)
    return where


# -- a plan's model: saved, else calibrated once per machine ---------------------------

#: The width and rows of the calibration's kernel run (a within-block sum, best of 3,
#: about a second with its compile-cache load).
CALIBRATION_WIDTH = 32
CALIBRATION_ROWS = 2048


def kernel_rate(d: int, rows: int, row_seconds: float) -> float:
    """One core's kernel rate at width ``d`` in pairs per second: a within-block sum of
    ``rows`` random rows, best of 3 in the thread's CPU time, less its rows' cost.
    """
    import numpy as np
    from threadpoolctl import threadpool_limits

    from ..kernel import block_pair_sum

    x = np.random.default_rng().standard_normal((rows, d))  # benchmark data (any values, no seed)
    block_pair_sum(x[:64])  # compile, or load from the cache
    best = math.inf
    with threadpool_limits(1):
        for _ in range(3):  # in this thread's CPU time: other load on the machine is not ours
            started = time.thread_time()
            block_pair_sum(x)
            best = min(best, time.thread_time() - started)
    # The block's own preparation is the row cost's, not the pairs'.
    return rows * (rows - 1) / 2 / max(best - rows * row_seconds, best / 2)


def calibration_path() -> Path:
    """Where calibrations are kept: ``calibration.json`` beside :func:`model_path`,
    one entry per machine (its host name).
    """
    return model_path().with_name("calibration.json")


def planning_model(path: str | os.PathLike[str] | None = None) -> MachineModel:
    """The machine model a plan uses: the file ``path``, else the model ``dask-dppca
    bench --save`` saved, else this machine's calibration (:data:`DEFAULT_MODEL` with its
    kernel figures scaled to a short measurement, made once per machine and kept).

    The model's ``source`` says which: "saved by bench --save (...)", "calibrated now:
    N s (...)" or "calibrated on DATE (...)".  A calibration that cannot be kept (a
    read-only folder) is used all the same.
    """
    if path is not None:
        return load_machine_model(path)
    if model_path().exists():
        model = load_machine_model()
        return replace(model, source=f"saved by bench --save ({model.source})")
    return _calibrated_model()


def _calibrated_model() -> MachineModel:
    where = calibration_path()
    host = platform.node() or "this machine"
    entries = _read_calibrations(where)
    entry = entries.get(host)
    if isinstance(entry, dict) and _valid_ratio(entry.get("ratio")):
        return _scaled(
            DEFAULT_MODEL,
            float(entry["ratio"]),
            f"calibrated on {entry.get('at', '?')} ({where}; built-in figures scaled by the "
            f"kernel's measured rate, x{float(entry['ratio']):.3g}; "
            "'dask-dppca bench --save' measures them all)",
        )
    started = time.perf_counter()
    rate = _calibration_rate()
    seconds = time.perf_counter() - started
    ratio = rate / DEFAULT_MODEL.pair_rate(CALIBRATION_WIDTH)
    entries[host] = {
        "ratio": ratio,
        "pairs_per_second": {str(CALIBRATION_WIDTH): rate},
        "seconds": seconds,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    try:
        save = where.with_name(f".{where.name}.{os.getpid()}.tmp")
        where.parent.mkdir(parents=True, exist_ok=True)
        save.write_text(json.dumps(entries, indent=2) + "\n")
        os.replace(save, where)
        kept = f"kept in {where}"
    except OSError as error:  # a read-only configuration folder: used, not kept
        kept = f"not kept: {type(error).__name__}"
    return _scaled(
        DEFAULT_MODEL,
        ratio,
        f"calibrated now: {seconds:.2g} s ({kept}; built-in figures scaled by the kernel's "
        f"measured rate, x{ratio:.3g}; 'dask-dppca bench --save' measures them all)",
    )


def _read_calibrations(where: Path) -> dict[str, Any]:
    """The kept calibrations by host; an unreadable file counts as none (it is redone)."""
    try:
        data = json.loads(where.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _valid_ratio(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _calibration_rate() -> float:
    """The kernel's pairs per second on one core at ``CALIBRATION_WIDTH`` (CPU time: the
    machine's rate, not its load at the moment), as ``bench --save`` measures it.
    """
    rows = DEFAULT_MODEL.row_cost(CALIBRATION_WIDTH)
    return kernel_rate(CALIBRATION_WIDTH, CALIBRATION_ROWS, rows)


def _scaled(model: MachineModel, ratio: float, source: str) -> MachineModel:
    """``model`` with its kernel figures for a kernel ``ratio`` times as fast."""
    return replace(
        model,
        kernel_pairs_per_second={d: r * ratio for d, r in model.kernel_pairs_per_second.items()},
        kernel_row_seconds={d: c / ratio for d, c in model.kernel_row_seconds.items()},
        kernel_call_seconds=model.kernel_call_seconds / ratio,
        scree_histogram_seconds={d: c / ratio for d, c in model.scree_histogram_seconds.items()},
        scree_sum_seconds={d: c / ratio for d, c in model.scree_sum_seconds.items()},
        source=source,
    )
