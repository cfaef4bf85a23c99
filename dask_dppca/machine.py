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
* the memory of an idle worker after its first task (the imports, numba's code).

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
    "load_machine_model",
    "measure_machine_model",
    "measure_reads",
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
        out["kernel_row_seconds"] = {str(d): c for d, c in sorted(self.kernel_row_seconds.items())}
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
        if not all(c > 0 and math.isfinite(c) for c in model.kernel_row_seconds.values()):
            raise ValueError(
                f"machine model: the saved model{where} needs positive finite row costs; run "
                "'dask-dppca bench --save' again"
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


def load_machine_model(path: str | os.PathLike | None = None) -> MachineModel:
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


def save_machine_model(model: MachineModel, path: str | os.PathLike | None = None) -> Path:
    """Write ``model`` as JSON to ``path`` (default :func:`model_path`), its folder made
    if needed; the file is replaced whole (a rename).  Returns where it went.
    """
    where = Path(path) if path is not None else model_path()
    where.parent.mkdir(parents=True, exist_ok=True)
    partial = where.with_name(f".{where.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(model.describe(), indent=2) + "\n")
    os.replace(partial, where)
    return where


# -- measuring -------------------------------------------------------------------------


def measure_machine_model(
    widths: tuple[int, ...] = (8, 32, 128, 512),
    *,
    quick: bool = False,
    client: Any = None,
) -> MachineModel:
    """Measure this machine's model (a few seconds; ``quick``: smaller loops).

    The kernel on one thread (a within-block sum, best of a few, in the thread's CPU
    time: the machine's rate, not its load at the moment) and its cost per call, Zarr
    reads of one thread from a local store per codec (none, zstd) and their cost per
    read (on one of ``client``'s workers when given), a no-op task's cost on a cluster
    (``client``'s, else a fresh in-process LocalCluster like the embedded one), a small
    fit's fixed cost there, and an idle worker's memory after that fit.  Seeds generate
    benchmark data only.
    """
    if client is None:
        kernel, call, rows, reads, read_calls = _kernel_and_reads(widths, quick)
    else:
        first = sorted(client.scheduler_info(n_workers=-1)["workers"])[0]
        measured = client.run(_kernel_and_reads, widths, quick, workers=[first])
        kernel, call, rows, reads, read_calls = measured[first]
    task, fixed, baseline = _cluster_costs(client, quick)
    return MachineModel(
        kernel,
        reads,
        task,
        fixed,
        baseline,
        f"measured on {platform.node() or 'this machine'} ({os.cpu_count()} CPUs) at "
        f"{datetime.now(UTC).isoformat(timespec='seconds')}",
        kernel_call_seconds=call,
        read_call_seconds=read_calls,
        kernel_row_seconds=rows,
    )


def _best(call, repeats: int) -> float:
    best = math.inf
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best


def _kernel_rate(d: int, rows: int, row_seconds: float) -> float:
    import numpy as np
    from threadpoolctl import threadpool_limits

    from .kernel import block_pair_sum

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


def _kernel_row_seconds(d: int, quick: bool) -> float:
    """The kernel's cost per block row: a block of ``b`` fresh rows against one row, for
    two sizes ``b`` (the slope; the pairs are ``b``, negligible), median of several, in
    CPU time.  Fresh blocks each call, as in a fit (each block is read anew).
    """
    import numpy as np
    from threadpoolctl import threadpool_limits

    from .kernel import block_pair_sum

    small, large, count = 128, (1024 if quick else 4096), (8 if quick else 20)
    rng = np.random.default_rng()  # benchmark data (any values, no seed)
    blocks = [rng.standard_normal((large, d)) for _ in range(count)]
    one = rng.standard_normal((1, d))
    block_pair_sum(blocks[0][:64])  # compile, or load from the cache

    def median_seconds(rows: int) -> float:
        times = []
        for block in blocks:
            started = time.thread_time()
            block_pair_sum(block[:rows], one)
            times.append(time.thread_time() - started)
        return float(np.median(times))

    with threadpool_limits(1):
        slope = (median_seconds(large) - median_seconds(small)) / (large - small)
    return max(slope, 1e-9)


def _kernel_call_seconds(d: int, rate: float, row_seconds: float) -> float:
    """The kernel's cost per call beyond its pairs and rows: two 128-row blocks, best of
    20, in CPU time.
    """
    import numpy as np

    from .kernel import block_pair_sum

    x = np.random.default_rng().standard_normal((256, d))  # benchmark data (any values, no seed)
    best = math.inf
    for _ in range(20):
        started = time.thread_time()
        block_pair_sum(x[:128], x[128:])
        best = min(best, time.thread_time() - started)
    return max(0.0, best - 128 * 128 / rate - 256 * row_seconds)


def _read_rates(quick: bool) -> tuple[dict[str, float], dict[str, float]]:
    """One thread's read rates and fixed costs per read: memory, and a local disk per codec."""
    import tempfile

    import numpy as np

    rows, d = (20_000 if quick else 80_000), 32
    x = np.random.default_rng().standard_normal((rows // 2, d))  # benchmark data, no seed
    rates = {"memory": x.nbytes / _best(lambda: np.array(x, copy=True), 3)}
    calls: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        for codec in ("none", "zstd"):
            key = f"local/{codec}"
            rates[key], calls[key] = measure_reads(
                os.path.join(folder, codec), codec=codec, quick=quick
            )
    return rates, calls


def measure_reads(
    location: str,
    *,
    storage_options: dict[str, Any] | None = None,
    codec: str = "zstd",
    quick: bool = False,
) -> tuple[float, float]:
    """One thread's Zarr read rate at ``location`` and the fixed cost of one read.

    Writes two small stores of random benchmark rows under ``location`` (a local folder
    or an fsspec URL the caller may write, e.g. ``s3://bucket/scratch``; the same
    ``storage_options`` as a fit), times their reads through the fit's own chunk
    reader, and removes them.  The rate comes from chunks of ``rows / 4`` rows, every
    chunk read, best of several (a read of a few milliseconds varied 3x from run to run
    as two reads, best of 3); the fixed cost of a read from 40 chunks of 64 rows, less
    their bytes at that rate (on an object store: a request's round trip, which blocks
    of a few hundred KiB pay once each).  No user data is read.

    Parameters
    ----------
    location : str
        Where the benchmark stores go, under ``dask-dppca-read-rate.zarr`` and
        ``dask-dppca-read-call.zarr``.
    storage_options : dict, optional
        fsspec options for a URL.
    codec : {"zstd", "none"}, default "zstd"
        The stores' compressor.
    quick : bool, default False
        20 000 rows instead of 80 000, fewer repeats.

    Returns
    -------
    (float, float)
        Decoded bytes per second, and seconds per read beyond its bytes.
    """
    import numpy as np
    import zarr
    from zarr.codecs import ZstdCodec

    from .io import open_records
    from .io.storage import filesystem
    from .io.zarr_input import chunk_reader

    if codec not in ("zstd", "none"):
        raise ValueError(f"codec: must be 'zstd' or 'none', got {codec!r}")
    compressors = [ZstdCodec()] if codec == "zstd" else None
    rows, d = (20_000 if quick else 80_000), 32
    x = np.random.default_rng().standard_normal((rows, d))  # benchmark data (any values, no seed)
    base = location.rstrip("/")
    rate_store, call_store = (f"{base}/dask-dppca-read-{name}.zarr" for name in ("rate", "call"))

    def reader(store: str, shape: tuple[int, int], chunk: int) -> Any:
        z = zarr.create_array(
            store,
            shape=shape,
            chunks=(chunk, d),
            dtype="f8",
            compressors=compressors,
            overwrite=True,
            storage_options=storage_options,
        )
        z[:] = x[: shape[0]]
        blocks = chunk_reader(open_records(store, storage_options=storage_options).array)
        assert blocks is not None  # a Zarr store's own reads
        return blocks

    try:
        big = reader(rate_store, x.shape, rows // 4)
        seconds = _best(
            lambda: [big[k : k + rows // 4, :] for k in range(0, rows, rows // 4)],
            3 if quick else 9,
        )
        rate = x.nbytes / seconds
        small = reader(call_store, (2560, d), 64)
        each = _best(lambda: [small[k : k + 64, :] for k in range(0, 2560, 64)], 3) / 40
    finally:
        for store in (rate_store, call_store):
            fs, path = filesystem(store, storage_options)
            if fs.exists(path):
                fs.rm(path, recursive=True)
    return rate, max(0.0, each - 64 * d * 8 / rate)


def _kernel_and_reads(
    widths: tuple[int, ...], quick: bool
) -> tuple[dict[int, float], float, dict[int, float], dict[str, float], dict[str, float]]:
    """The kernel's rates, call and row costs, and the reads' rates and call costs, where it runs
    (a worker's process, when measured through a client: a worker's allocator and threads).
    """
    rows = {d: _kernel_row_seconds(d, quick) for d in widths}
    kernel = {d: _kernel_rate(d, 1024 if quick else 2048, rows[d]) for d in widths}
    call = _kernel_call_seconds(widths[0], kernel[widths[0]], rows[widths[0]])
    reads, read_calls = _read_rates(quick)
    return kernel, call, rows, reads, read_calls


def _cluster_costs(client: Any, quick: bool) -> tuple[float, float, int]:
    """(seconds per no-op task, a fit's fixed seconds, an idle worker's bytes)."""
    import distributed
    import numpy as np

    own = client is None
    if own:
        cluster = distributed.LocalCluster(
            n_workers=1,
            threads_per_worker=os.cpu_count() or 1,
            processes=False,
            dashboard_address="127.0.0.1:0",
        )
        client = distributed.Client(cluster, set_as_default=False)
    try:
        count = 200 if quick else 2000
        import dask

        def no_op_graph():
            return [dask.delayed(_no_op, pure=False)(k) for k in range(count)]

        dask.compute(*no_op_graph(), scheduler=client)  # warm
        per_task = _best(lambda: dask.compute(*no_op_graph(), scheduler=client), 2) / count
        import tempfile
        import warnings

        import zarr

        from .estimator import DPPCA

        est = DPPCA(n_components=1, scheduler=client, random_state=0)
        with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # seeded (non-private) noise: timing only
            store = os.path.join(folder, "small.zarr")
            z = zarr.create_array(store, shape=(1000, 4), chunks=(500, 4), dtype="f8")
            z[:] = np.random.default_rng().standard_normal(
                (1000, 4)
            )  # benchmark data (any values, no seed)
            est.fit(store)
            fixed = _best(lambda: est.fit(store), 2)
        baseline = max(int(v) for v in client.run(_rss).values())
    finally:
        if own:
            client.close()
            cluster.close()
    return per_task, fixed, baseline


def _no_op(k: int) -> int:
    return k


def _rss() -> int:
    """The resident memory of the process it runs in, now, in bytes."""
    import psutil

    return int(psutil.Process().memory_info().rss)


# -- a plan's model: saved, else calibrated once per machine ---------------------------

#: The width and rows of the calibration's kernel run (a within-block sum, best of 3,
#: about a second with its compile-cache load).
CALIBRATION_WIDTH = 32
CALIBRATION_ROWS = 2048


def calibration_path() -> Path:
    """Where calibrations are kept: ``calibration.json`` beside :func:`model_path`,
    one entry per machine (its host name).
    """
    return model_path().with_name("calibration.json")


def planning_model(path: str | os.PathLike | None = None) -> MachineModel:
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
    return _kernel_rate(CALIBRATION_WIDTH, CALIBRATION_ROWS, rows)


def _scaled(model: MachineModel, ratio: float, source: str) -> MachineModel:
    """``model`` with its kernel figures for a kernel ``ratio`` times as fast."""
    return replace(
        model,
        kernel_pairs_per_second={d: r * ratio for d, r in model.kernel_pairs_per_second.items()},
        kernel_row_seconds={d: c / ratio for d, c in model.kernel_row_seconds.items()},
        kernel_call_seconds=model.kernel_call_seconds / ratio,
        source=source,
    )
