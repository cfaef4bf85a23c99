"""One machine: every core busy on a moderate n, and the fixed cost of a small K_hat.

A script, not a test:

    python benchmarks/bench_cores.py             # n = 8000 (d = 256), 16000 (d = 32); R at n = 2000
    python benchmarks/bench_cores.py --smoke     # tiny sizes, seconds (the test suite runs it)

It prints, in one run,

 1. ``kendall_matrix(X)`` with its defaults on a numpy input, counting ``2 n^2 d`` flops
    (n^2 / 2 pairs, about 4 d flops each), against the same-shape GEMM
    ``(n x d) @ (d x n)`` (also ``2 n^2 d`` flops; computed in row blocks of 1024 so its
    output fits in memory) on one thread and on all threads; and the same
    ``kendall_matrix`` on one core (``scheduler="synchronous"``) against all cores;
 2. the fixed overhead: ``kendall_matrix`` on n = 2000, d = 20 against the authors' R
    package (dppca's ``tau_sph``, a pair-by-pair loop in R) on the same data, with the
    agreement of the two matrices.  Needs ``Rscript`` and the package: installed
    (``library(dppca)``) or a checkout of its repository (github.com/yejinjo0220/dppca)
    named by ``--dppca-source`` or ``DPPCA_R_SOURCE`` (its ``R/pc_dir.R`` is sourced).
    Without them the section says so and is skipped.

Timings are the best of a few repeats (R: one run, it takes seconds): one-thread ones
in the thread's CPU time, so that other load on the machine does not count; all-core
ones (and R against kendall_matrix) in wall time.  The data are
Gaussian rows from a fixed seed (benchmark data only).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

import dask_dppca as dd

GEMM_ROW_BLOCK = 1024


def best_time(fn, repeats, clock=time.perf_counter):
    """Best of ``repeats`` calls; one-thread figures pass ``time.thread_time`` (this
    thread's CPU time: other load on the machine does not count), all-thread ones wall."""
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return min(times)


def same_shape_gemm_seconds(n, d, repeats, clock=time.perf_counter):
    """Seconds of (n x d) @ (d x n), in row blocks of GEMM_ROW_BLOCK (bounded output)."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((n, d))
    bt = np.ascontiguousarray(rng.standard_normal((n, d)).T)
    out = np.empty((min(GEMM_ROW_BLOCK, n), n))

    def product():
        for r0 in range(0, n, GEMM_ROW_BLOCK):
            rows = a[r0 : r0 + GEMM_ROW_BLOCK]
            np.matmul(rows, bt, out=out[: len(rows)])

    product()
    return best_time(product, repeats, clock)


def section_cores(sizes, repeats):
    print("1. kendall_matrix(X) on numpy X (defaults) vs same-shape GEMM, 2 n^2 d flops each")
    print(
        f"{'n':>6} {'d':>4} {'all cores':>10} {'one core':>9} {'speed-up':>9}"
        f" {'GEMM 1 thr':>11} {'GEMM all':>9} {'of 1-thr GEMM':>14} {'of all-thr GEMM':>16}"
    )
    for n, d in sizes:
        x = np.random.default_rng(2).standard_normal((n, d))
        dd.kendall_matrix(x[:64])  # compile / load the kernel
        every = best_time(lambda: dd.kendall_matrix(x), repeats)
        one = best_time(
            lambda: dd.kendall_matrix(x, scheduler="synchronous"), repeats, time.thread_time
        )
        with threadpool_limits(1):
            gemm_one = same_shape_gemm_seconds(n, d, repeats, time.thread_time)
        gemm_all = same_shape_gemm_seconds(n, d, repeats)
        print(
            f"{n:>6} {d:>4} {every:>8.3f} s {one:>7.3f} s {one / every:>8.2f}x"
            f" {gemm_one:>9.3f} s {gemm_all:>7.3f} s {gemm_one / every:>14.2f} {gemm_all / every:>16.2f}"
        )
    print(
        f"  ({os.cpu_count()} CPUs; a ratio of 1 means kendall_matrix runs at that GEMM's rate;"
        " one core and one-thread GEMM in thread CPU time, all cores in wall time)"
    )


R_SCRIPT = """
args <- commandArgs(trailingOnly = TRUE)
n <- as.integer(args[2]); d <- as.integer(args[3])
if (requireNamespace("dppca", quietly = TRUE)) {
  tau_sph <- get("tau_sph", envir = asNamespace("dppca"))
} else if (nzchar(args[4])) {
  source(file.path(args[4], "R", "pc_dir.R"))
} else {
  cat("NO-PACKAGE\\n"); quit(status = 0)
}
X <- matrix(readBin(args[1], "double", n * d, endian = "little"), n, d, byrow = TRUE)
elapsed <- system.time(K <- tau_sph(X))[["elapsed"]]
writeBin(as.vector(K), args[5], endian = "little")
cat(sprintf("ELAPSED %.6f\\n", elapsed))
"""


def run_r(x, source):
    """(seconds, K) from R dppca's tau_sph on x, or (None, reason)."""
    rscript = shutil.which("Rscript")
    if rscript is None:
        return None, "Rscript not found (apt-get install r-base-core)"
    if source and not (Path(source) / "R" / "pc_dir.R").exists():
        return None, f"{source} holds no R/pc_dir.R"
    n, d = x.shape
    with tempfile.TemporaryDirectory(prefix="dppca-r-") as scratch:
        data, result, script = (os.path.join(scratch, name) for name in ("x.bin", "k.bin", "run.R"))
        x.astype("<f8").tofile(data)
        Path(script).write_text(R_SCRIPT)
        done = subprocess.run(
            [rscript, script, data, str(n), str(d), source or "", result],
            capture_output=True,
            text=True,
            timeout=3600,
        )
        if "NO-PACKAGE" in done.stdout:
            return None, (
                "the dppca R package is neither installed nor given "
                "(--dppca-source or DPPCA_R_SOURCE: a checkout of github.com/yejinjo0220/dppca)"
            )
        if done.returncode != 0:
            return None, f"Rscript failed: {done.stderr.strip()[-300:]}"
        seconds = float(done.stdout.split("ELAPSED")[1].split()[0])
        k = np.fromfile(result, dtype="<f8").reshape(d, d, order="F")
    return seconds, k


def section_r(n, d, repeats, source):
    print(f"\n2. fixed overhead: kendall_matrix vs R dppca tau_sph, n = {n}, d = {d}")
    x = np.random.default_rng(3).standard_normal((n, d))
    dd.kendall_matrix(x)
    seconds = best_time(lambda: dd.kendall_matrix(x), repeats)
    r_seconds, r_k = run_r(x, source)
    if r_seconds is None:
        print(f"  kendall_matrix {seconds * 1e3:.2f} ms; R comparison skipped: {r_k}")
        return
    k = dd.kendall_matrix(x)
    agreement = np.linalg.norm(k - r_k) / np.linalg.norm(r_k)
    print(
        f"  kendall_matrix {seconds * 1e3:.2f} ms (best of {repeats}), R tau_sph {r_seconds:.2f} s:"
        f" {r_seconds / seconds:.0f}x faster; relative difference {agreement:.1e}"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    parser.add_argument("--repeats", type=int, default=None, help="repeats per timing (best of)")
    parser.add_argument(
        "--dppca-source",
        default=os.environ.get("DPPCA_R_SOURCE"),
        help="checkout of the dppca R package (if it is not installed)",
    )
    args = parser.parse_args(argv)
    sizes = [(600, 16), (900, 8)] if args.smoke else [(8000, 256), (16000, 32)]
    repeats = args.repeats or (1 if args.smoke else 3)
    section_cores(sizes, repeats)
    section_r(*((200, 5) if args.smoke else (2000, 20)), max(repeats, 21), args.dppca_source)


if __name__ == "__main__":
    main()
