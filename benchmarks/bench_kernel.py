"""Benchmark of the kernel, dask_dppca.kernel.block_pair_sum, against its own roofline.

A script, not a test:

    python benchmarks/bench_kernel.py            # full run, n = 8000
    python benchmarks/bench_kernel.py --quick    # smaller sizes
    python benchmarks/bench_kernel.py --smoke    # tiny sizes, seconds (the test suite runs it)

It prints, in one run,

 1. numpy float64 GEMM rates: a square 2048 GEMM single-threaded and with all threads,
    and the kernel's own dominant product shape (n x d) @ (d x n) (one tile, and a whole
    block), single-threaded;
 2. the kernel's effective rate for a complete within-block sum of n rows, counting
    2 n^2 d flops (n^2 / 2 pairs, about 4 d flops each: docs/method.md, section 7), at d = 32
    and d = 256, as a fraction of the square GEMM rate: single-threaded, and with all
    threads (two block pairs at once on concurrent.futures threads, BLAS single-threaded
    in each; the kernel releases the GIL in numba and BLAS), against all-thread GEMM;
 3. the speed-up over a per-row vectorised numpy loop at d = 50, and over a pure
    pair-by-pair Python loop on a small n;
 4. the time of adversarial blocks (50% exact duplicates, far rows) relative to a clean
    block of the same size: the cost of the exact path;
 5. a tile-size sweep (the kernel caps its tiles at 384 rows, measured here);
 6. end to end on one thread: ``block_pair_sum``, ``kendall_matrix`` and ``DPPCA.fit``
    (``scheduler="synchronous"``) at n = 6000 and 8000, d = 32 and 256, each round
    against a square GEMM timed just before it (the figures of the history in
    benchmarks/README.md), then ``kendall_matrix`` and ``fit`` as a fraction of
    ``block_pair_sum`` alone on the same rows, the headline: goals 0.90 and 0.85
    (``--end-to-end`` runs this section alone);
 7. the kernel against its own roofline, one thread, d = 32 and 256: a within-block sum
    of n rows and a cross-block pair of two n-row blocks.  The roofline is the time of
    the very BLAS products the kernel makes (recorded from one call: the tile pairs'
    ``A B^T`` and ``[B 1]^T W^T``, and the d x d ``side @ rows`` per tile; replayed with
    numpy on the same shapes, layouts and buffers, in the same number) plus the time of
    its fused numba weight pass alone (the same compiled pass, replayed on the same
    tiles).  Printed: each part's time, the kernel's, and roofline / kernel (goal 0.90;
    ``--roofline`` runs this section alone).  What the roofline leaves out is the
    kernel's own overhead: row preparation (finite, distinct, centring, scale classes),
    tile loads, the partner and weight-sum additions, the Python of the tile loop.

A closing summary repeats the headline verdicts: the kernel against its roofline
(section 7) and the end-to-end steps against the kernel alone (section 6).  The
GEMM-relative figures (sections 2, 5 and 6) are kept for the history; at d = 32 a square
GEMM is faster than this host's BLAS on the kernel's own product shapes, so they are no
limit the kernel could reach.

Timings are the best of a few repeats, after a warm-up call that compiles the numba
pass: single-threaded ones in the thread's CPU time (time.thread_time, so other load on
the machine does not count), all-thread ones in wall time.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from dask_dppca.kernel import block_pair_sum
from dask_dppca.kernel.rounding import MAX_TILE_ROWS
from dask_dppca.kernel.spatial_sign import winsor

GOALS = {
    32: (0.60, 0.70),
    256: (0.85, 0.90),
}  # d: (goal, stretch), fraction of GEMM (the kernel's goals)
ADVERSARIAL_GOAL = 3.0  # an adversarial block at most this many times a clean one (the same goals)


def best_time(fn, repeats=3, min_time=0.0, clock=time.perf_counter):
    """Best time of ``repeats`` calls (more calls while the total is under min_time).

    Single-threaded figures pass ``clock=ONE_THREAD`` (this thread's CPU time), so that
    other load on the machine does not count; all-thread figures use wall time.
    """
    times = []
    start = time.perf_counter()
    while len(times) < repeats or (time.perf_counter() - start) < min_time:
        t0 = clock()
        fn()
        times.append(clock() - t0)
        if len(times) >= 50:
            break
    return min(times)


ONE_THREAD = time.thread_time


def gflops(flops, seconds):
    return flops / seconds / 1e9


def header(title):
    print()
    print(title)
    print("-" * len(title))


def verdict(ratio, goal, stretch):
    if ratio >= stretch:
        return "meets goal and stretch"
    if ratio >= goal:
        return "meets goal"
    return "BELOW GOAL"


# ---------------------------------------------------------------------------------------
# 1. GEMM
# ---------------------------------------------------------------------------------------


def square_gemm_rate(size, repeats, clock=time.perf_counter):
    rng = np.random.default_rng(0)
    a = rng.normal(size=(size, size))
    b = rng.normal(size=(size, size))
    out = np.empty((size, size))
    seconds = best_time(
        lambda: np.matmul(a, b, out=out), repeats, min_time=min(1.0, size / 2048), clock=clock
    )
    return gflops(2.0 * size**3, seconds)


def product_shape_rate(n, d, repeats):
    """(n x d) @ (d x n): the kernel's a_tile @ b_tile.T, 2 n^2 d flops."""
    rng = np.random.default_rng(1)
    a = rng.normal(size=(n, d))
    b = rng.normal(size=(n, d))
    out = np.empty((n, n))
    seconds = best_time(lambda: np.matmul(a, b.T, out=out), repeats, clock=ONE_THREAD)
    return gflops(2.0 * n * n * d, seconds)


def section_gemm(args):
    header("1. numpy float64 GEMM")
    with threadpool_limits(1):
        single = square_gemm_rate(args.gemm_size, args.repeats, clock=ONE_THREAD)
    every = square_gemm_rate(args.gemm_size, args.repeats)
    print(f"square {args.gemm_size} GEMM, 1 thread      : {single:8.1f} GFLOP/s")
    print(
        f"square {args.gemm_size} GEMM, all threads   : {every:8.1f} GFLOP/s  ({every / single:.2f}x)"
    )
    n_cpus = os.cpu_count() or 1
    if n_cpus > 1 and every < 1.3 * single:
        print(
            f"  WARNING: all-thread GEMM is only {every / single:.2f}x single-threaded on {n_cpus}"
            " CPUs: is the machine busy? Multi-thread ratios below are unreliable."
        )
    with threadpool_limits(1):
        for d in (32, 256):
            for n in (512, args.n):
                rate = product_shape_rate(n, d, args.repeats)
                label = "one 512-row tile" if n == 512 else "whole block"
                print(
                    f"({n} x {d}) @ ({d} x {n}), 1 thread: {rate:8.1f} GFLOP/s"
                    f"  = {rate / single:5.1%} of square GEMM  [{label}]"
                )
    return single, every


# ---------------------------------------------------------------------------------------
# 2. Kernel rate
# ---------------------------------------------------------------------------------------


def kernel_flops(n, d):
    return 2.0 * n * n * d


def section_kernel_rate(args, gemm_single, gemm_all, n_threads):
    header(f"2. kernel effective rate (within-block sum, n = {args.n}, sphere, 2 n^2 d flops)")
    rng = np.random.default_rng(2)
    rows = []
    for d in (32, 256):
        x = rng.normal(size=(args.n, d))
        y = rng.normal(size=(args.n, d))
        with threadpool_limits(1):
            t1 = best_time(lambda: block_pair_sum(x), args.repeats, clock=ONE_THREAD)
        rate1 = gflops(kernel_flops(args.n, d), t1)

        # All threads, one call: BLAS may use every core inside the call.
        t_one = best_time(lambda: block_pair_sum(x), args.repeats)
        rate_one = gflops(kernel_flops(args.n, d), t_one)

        # All threads, two block pairs at once, BLAS single-threaded in each.
        with ThreadPoolExecutor(max_workers=2) as pool, threadpool_limits(1):

            def two_concurrent():
                futures = [pool.submit(block_pair_sum, x), pool.submit(block_pair_sum, y)]
                for f in futures:
                    f.result()

            two_concurrent()  # start the pool's threads
            t2 = best_time(two_concurrent, args.repeats + 2)
        rate2 = gflops(2 * kernel_flops(args.n, d), t2)
        rows.append((d, t1, rate1, rate_one, rate2))

    print(
        f"{'d':>4} {'1-thread time':>14} {'1-thread rate':>14} {'of 1-thr GEMM':>14}"
        f" {'all-thr 1 call':>15} {'2 concurrent':>13} {'of all-thr GEMM':>16}"
    )
    for d, t1, rate1, rate_one, rate2 in rows:
        print(
            f"{d:>4} {t1:>12.3f} s {rate1:>8.1f} GF/s {rate1 / gemm_single:>14.1%}"
            f" {rate_one:>9.1f} GF/s {rate2:>7.1f} GF/s {rate2 / gemm_all:>16.1%}"
        )
    print()
    print(f"Ratios against goals (threads available: {n_threads}):")
    for d, _, rate1, rate_one, rate2 in rows:
        goal, stretch = GOALS[d]
        r1 = rate1 / gemm_single
        r2 = rate2 / gemm_all
        r_one = rate_one / gemm_all
        print(
            f"  d = {d:>3}: single-threaded {r1:6.1%} of GEMM -> {verdict(r1, goal, stretch)}"
            f"  (goal {goal:.0%}, stretch {stretch:.0%})"
        )
        print(
            f"           all threads, 2 concurrent block pairs {r2:6.1%} of all-thread GEMM"
            f" -> {verdict(r2, goal, stretch)}"
        )
        print(f"           all threads, 1 call (BLAS-threaded)   {r_one:6.1%} of all-thread GEMM")


# ---------------------------------------------------------------------------------------
# 3. Speed-up over loops
# ---------------------------------------------------------------------------------------


def per_row_loop(x):
    """For each i, vectorise over j > i: T = (x_i - x_j) / sqrt2, w = 1 / ||T||^2."""
    d = x.shape[1]
    total = np.zeros((d, d))
    for i in range(len(x) - 1):
        t = (x[i] - x[i + 1 :]) / math.sqrt(2.0)
        w = 1.0 / np.einsum("ij,ij->i", t, t)
        total += (t * w[:, None]).T @ t
    return total


def pair_loop(x):
    """One pair at a time: g = t / ||t||, S += g g^T."""
    d = x.shape[1]
    total = np.zeros((d, d))
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            t = (x[i] - x[j]) / math.sqrt(2.0)
            g = t / np.linalg.norm(t)
            total += np.outer(g, g)
    return total


def section_loops(args):
    header("3. speed-up over loops (sphere, single-threaded)")
    rng = np.random.default_rng(3)
    d = 50
    n = args.loop_n
    x = rng.normal(size=(n, d))
    with threadpool_limits(1):
        t_kernel = best_time(lambda: block_pair_sum(x), args.repeats, clock=ONE_THREAD)
        t_row = best_time(lambda: per_row_loop(x), 1, clock=ONE_THREAD)
        err = np.linalg.norm(block_pair_sum(x) - per_row_loop(x)) / np.linalg.norm(per_row_loop(x))
    speed = t_row / t_kernel
    print(
        f"per-row vectorised loop, n = {n}, d = {d}: loop {t_row:.3f} s, kernel {t_kernel:.4f} s"
        f" -> {speed:.0f}x  (goal >= 30x: {'met' if speed >= 30 else 'NOT MET'});"
        f" relative difference {err:.1e}"
    )
    loop_rate = gflops(float(n) * n * d * d, t_row)  # sum over i of 2 (n - i) d^2 flops
    kernel_rate = gflops(kernel_flops(n, d), t_kernel)
    print(
        f"  the loop does n^2 d^2 flops in BLAS ({loop_rate:.1f} GF/s), the kernel 2 n^2 d"
        f" ({kernel_rate:.1f} GF/s): speed-up = flop ratio d/2 x rate ratio ="
        f" {d / 2:.0f} x {kernel_rate / loop_rate:.2f}"
    )

    # The whole machine for both, as a user would run them: the loop with BLAS on all
    # threads; the kernel as three block pairs on two threads (what a Dask fit does).
    half = n // 2

    def kernel_two_threads():
        with threadpool_limits(1), ThreadPoolExecutor(2) as pool:
            cross = pool.submit(block_pair_sum, x[:half], x[half:])
            within = pool.submit(lambda: block_pair_sum(x[:half]) + block_pair_sum(x[half:]))
            return cross.result() + within.result()

    t_kernel_all = best_time(kernel_two_threads, args.repeats)
    t_row_threaded = best_time(lambda: per_row_loop(x), 1)
    # The loop's best configuration: threaded BLAS can be slower on its small products.
    t_row_all = min(t_row, t_row_threaded)
    speed_all = t_row_all / t_kernel_all
    print(
        f"whole machine: loop at its best {t_row_all:.3f} s (BLAS threaded {t_row_threaded:.3f} s,"
        f" single {t_row:.3f} s), kernel (2 block-pair threads) {t_kernel_all:.4f} s ->"
        f" {speed_all:.0f}x  (goal >= 30x: {'met' if speed_all >= 30 else 'NOT MET'})"
    )

    n_small = args.pair_n
    xs = rng.normal(size=(n_small, d))
    with threadpool_limits(1):
        t_pair = best_time(lambda: pair_loop(xs), 1, clock=ONE_THREAD)
        t_kernel_small = best_time(
            lambda: block_pair_sum(xs), args.repeats, min_time=0.2, clock=ONE_THREAD
        )
        t_kernel_big = best_time(lambda: block_pair_sum(x), args.repeats, clock=ONE_THREAD)
    pairs_small = n_small * (n_small - 1) / 2
    pairs_big = n * (n - 1) / 2
    print(
        f"pair-by-pair Python loop, n = {n_small}, d = {d}: loop {t_pair:.3f} s, kernel"
        f" {t_kernel_small * 1e3:.2f} ms -> {t_pair / t_kernel_small:.0f}x"
    )
    print(
        f"  per pair: loop {t_pair / pairs_small * 1e9:.0f} ns, kernel at n = {n_small}"
        f" {t_kernel_small / pairs_small * 1e9:.1f} ns, kernel at n = {n}"
        f" {t_kernel_big / pairs_big * 1e9:.2f} ns -> {t_pair / pairs_small / (t_kernel_big / pairs_big):.0f}x"
        f" per pair"
    )


# ---------------------------------------------------------------------------------------
# 4. Adversarial blocks
# ---------------------------------------------------------------------------------------


def section_adversarial(args):
    n, d = args.adv_n, 32
    header(f"4. adversarial blocks vs a clean block (n = {n}, d = {d}, single-threaded)")
    rng = np.random.default_rng(4)
    clean = rng.normal(size=(n, d))
    cases = {"clean N(0, I)": clean}

    twice = clean.copy()
    twice[n // 2 :] = twice[: n - n // 2]  # 50% of the rows are exact copies of the others
    cases["50% exact duplicates (every row twice)"] = twice[rng.permutation(n)]

    one = clean.copy()
    one[: n // 2] = clean[0]  # 50% of the rows are one repeated record: 25% of pairs
    cases["50% exact duplicates (one record)"] = one[rng.permutation(n)]

    near = clean.copy()
    near[n // 2 :] = clean[: n - n // 2] + 1e-9 * rng.normal(size=(n - n // 2, d))
    cases["50% near duplicates (1e-9)"] = near

    cases["common offset 1e8"] = clean + 1e8

    far = clean.copy()
    far[rng.choice(n, size=int(0.3 * n), replace=False)] *= 1e300
    cases["30% rows at 1e300"] = far

    with threadpool_limits(1):
        base = None
        print(f"{'block':44s} {'time':>9} {'x clean':>8} {'goal':>6}")
        for label, x in cases.items():
            t = best_time(lambda: block_pair_sum(x), args.repeats, clock=ONE_THREAD)
            base = t if base is None else base
            verdict_ = "met" if t / base <= ADVERSARIAL_GOAL else "NOT MET"
            print(f"{label:44s} {t:7.3f} s {t / base:8.2f} {verdict_:>7}")
    print(f"(goal: at most {ADVERSARIAL_GOAL:g}x a clean block of the same size)")


# ---------------------------------------------------------------------------------------
# 5. Tile size
# ---------------------------------------------------------------------------------------


def section_tiles(args, gemm_single):
    header(f"5. tile-size sweep (within-block sum, n = {args.n}, single-threaded, sphere)")
    rng = np.random.default_rng(5)
    sizes = (128, 256, 384, 512, 1024, 2048)
    print(f"{'d':>4} " + " ".join(f"{f'tile {s}':>11}" for s in sizes))
    for d in (32, 256):
        x = rng.normal(size=(args.n, d))
        cells = []
        with threadpool_limits(1):
            for s in sizes:
                t = best_time(
                    lambda: block_pair_sum(x, tile_rows=s), args.repeats, clock=ONE_THREAD
                )
                cells.append(f"{gflops(kernel_flops(args.n, d), t) / gemm_single:>11.1%}")
        print(f"{d:>4} " + " ".join(cells))
    print(f"(fraction of single-threaded square GEMM; the default tile is {MAX_TILE_ROWS} rows)")


# ---------------------------------------------------------------------------------------
# 6. End to end on one thread
# ---------------------------------------------------------------------------------------

END_TO_END_GOALS = {32: 0.70, 256: 0.82}  # d: kendall_matrix and fit, fraction of GEMM
# The headline: kendall_matrix and fit as a fraction of block_pair_sum alone on the same rows.
OF_KERNEL_GOALS = {"kendall_matrix": 0.90, "fit": 0.85}


def section_end_to_end(args):
    """The kernel, ``kendall_matrix`` and ``fit`` on one thread against square GEMM, then
    ``kendall_matrix`` and ``fit`` against the kernel alone (the headline).

    Rounds alternate square GEMM and the three, so that a drift of this machine's speed
    (a third within minutes on a shared host) reaches both sides: the ratio of the best
    times over the rounds is printed, and the median of the rounds' own ratios.  Returns
    the headline verdict lines.
    """
    import dask_dppca as dd

    header(f"6. end to end on one thread (n = {', '.join(map(str, args.e2e_n))}, 2 n^2 d flops)")
    rng = np.random.default_rng(6)
    gemm = np.empty((args.gemm_size, args.gemm_size))
    a, b = rng.normal(size=gemm.shape), rng.normal(size=gemm.shape)
    gemm_flops = 2.0 * args.gemm_size**3
    print(f"{'d':>4} {'n':>6} {'kernel':>15} {'kendall_matrix':>15} {'fit':>15}  goal")
    of_kernel = []  # (d, n, {name: (best, median)}): the headline, printed after the table
    for d in (32, 256):
        for n in args.e2e_n:
            x = rng.normal(size=(n, d))
            est = dd.DPPCA(2, epsilon=1.0, delta=1e-6, scheduler="synchronous")
            steps = {
                "kernel": lambda: block_pair_sum(x),
                "kendall_matrix": lambda: dd.kendall_matrix(x, scheduler="synchronous"),
                "fit": lambda: est.fit(x),
            }
            gemm_times, times = [], {name: [] for name in steps}
            with threadpool_limits(1):
                for step in steps.values():
                    step()  # warm: compile, import OpenDP, thread scratch
                for _ in range(args.e2e_rounds):
                    gemm_times.append(
                        best_time(lambda: np.matmul(a, b, out=gemm), 2, clock=ONE_THREAD)
                    )
                    for name, step in steps.items():
                        times[name].append(best_time(step, 1, clock=ONE_THREAD))
            cells = []
            for seconds in times.values():
                best = kernel_flops(n, d) / min(seconds) / (gemm_flops / min(gemm_times))
                rounds = [
                    kernel_flops(n, d) / s / (gemm_flops / g) for s, g in zip(seconds, gemm_times)
                ]
                cells.append(f"{best:>7.3f} ({float(np.median(rounds)):.3f})")
            print(f"{d:>4} {n:>6} {' '.join(cells)}  {END_TO_END_GOALS[d]:.2f}")
            kernel = times["kernel"]
            of_kernel.append(
                (
                    d,
                    n,
                    {
                        name: (
                            min(kernel) / min(times[name]),
                            float(np.median([k / s for k, s in zip(kernel, times[name])])),
                        )
                        for name in OF_KERNEL_GOALS
                    },
                )
            )
    print(
        "(best time against best GEMM time over the rounds, the rounds' median ratio in\n"
        " brackets; thread CPU time; kernel is block_pair_sum(X), the others run with\n"
        " scheduler='synchronous'; fit at epsilon 1 with the default private sampler)"
    )
    print()
    print("Against block_pair_sum(X) alone on the same rows (the headline; same rounds):")
    print(f"{'d':>4} {'n':>6} " + " ".join(f"{name + ' / kernel':>23}" for name in OF_KERNEL_GOALS))
    lines = []
    for d, n, fractions in of_kernel:
        cells = []
        for name, (best, median) in fractions.items():
            cells.append(f"{best:>15.3f} ({median:.3f})")
            goal = OF_KERNEL_GOALS[name]
            lines.append(
                f"end to end, d = {d:>3}, n = {n:>5}: {name:14s} {best:6.3f} of block_pair_sum"
                f" alone -> {verdict(best, goal, math.inf)} (goal {goal:.2f})"
            )
        print(f"{d:>4} {n:>6} {' '.join(cells)}")
    print(
        "(kernel time / step time, best over the rounds and the rounds' median in brackets;\n"
        f" goals: {', '.join(f'{k} >= {v:.2f}' for k, v in OF_KERNEL_GOALS.items())})"
    )
    return lines


# ---------------------------------------------------------------------------------------
# 7. The kernel against its own roofline
# ---------------------------------------------------------------------------------------

ROOFLINE_GOAL = 0.90  # the kernel's time at most 1 / 0.90 of its products and weight pass


def record_kernel_calls(block_a, block_b=None):
    """The BLAS products and fused weight passes of one ``block_pair_sum`` call.

    For that call the tile loop's module (dask_dppca.kernel.tiles) is wrapped: its
    ``np.matmul`` (a tile pair's ``A B^T`` and ``[B 1]^T W^T``), ``TileSummer._side``
    (the operand of the d x d product ``side @ rows`` that follows it, per tile) and its
    two compiled weight passes.  What is kept are the kernel's own views of its
    per-thread scratch buffers, so a replay runs the same products and passes, on the
    same shapes, strides and memory, and nothing else.  Returns (products, passes):
    ``(x, y, out)`` for ``np.matmul(x, y, out=out)``, and ``(compiled pass, args)``.
    """
    from dask_dppca.kernel import tiles

    products, passes = [], []

    class RecordingNumpy:
        """numpy for tiles.py, with matmul recorded."""

        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def matmul(x, y, out=None):
            products.append((x, y, out))
            return np.matmul(x, y, out=out)

    def recording_side(self, tile, half_weight, subtract=False):
        side = original_side(self, tile, half_weight, subtract)
        products.append((side, tile.rows, None))  # the tile loop's `side @ tile.rows`
        return side

    def recording(weights_pass):
        def run(*args):
            passes.append((weights_pass, args))
            return weights_pass(*args)

        return run

    original_side = tiles.TileSummer._side
    saved = (tiles.np, tiles._unit_sphere_weights, tiles._fast_path_weights)
    tiles.np = RecordingNumpy()
    tiles.TileSummer._side = recording_side
    tiles._unit_sphere_weights = recording(saved[1])
    tiles._fast_path_weights = recording(saved[2])
    try:
        block_pair_sum(block_a, block_b)
    finally:
        tiles.np, tiles._unit_sphere_weights, tiles._fast_path_weights = saved
        tiles.TileSummer._side = original_side
    return products, passes


def replay_products(products):
    for x, y, out in products:
        np.matmul(x, y, out=out)


def replay_passes(passes):
    # The pass rewrites its tile in place (products into weights): replayed on the
    # weights, it does the same work (no branch on the data in its inner loop).
    for weights_pass, args in passes:
        weights_pass(*args)


def section_roofline(args):
    """``block_pair_sum`` against the same-shape products and weight pass it is made of."""
    n = args.n
    header(f"7. the kernel against its own roofline (one thread, n = {n} rows a block, sphere)")
    print(
        "roofline = the kernel's own BLAS products (recorded from one call, replayed with\n"
        "numpy on the same shapes, layouts and buffers) + its fused numba weight pass alone"
    )
    rng = np.random.default_rng(7)
    results = []
    print(
        f"{'d':>4} {'block pair':>14} {'products':>19} {'weight pass':>19} {'roofline':>10}"
        f" {'kernel':>10} {'roofline/kernel':>16}"
    )
    for d in (32, 256):
        x = rng.normal(size=(n, d))
        y = rng.normal(size=(n, d))
        for label, blocks in (("within-block", (x,)), ("cross-block", (x, y))):
            with threadpool_limits(1):
                block_pair_sum(*blocks)  # warm: this thread's scratch for this d
                products, passes = record_kernel_calls(*blocks)
                steps = {
                    "kernel": lambda: block_pair_sum(*blocks),
                    "products": lambda: replay_products(products),
                    "passes": lambda: replay_passes(passes),
                }
                times = {name: [] for name in steps}
                for _ in range(args.roofline_rounds):
                    for name, step in steps.items():
                        times[name].append(best_time(step, 1, clock=ONE_THREAD))
            kernel, prod, pass_ = (min(times[k]) for k in ("kernel", "products", "passes"))
            fraction = (prod + pass_) / kernel
            median = float(np.median([(p + w) / k for k, p, w in zip(*(times[k] for k in steps))]))
            flops = sum(2.0 * x_.shape[0] * x_.shape[1] * y_.shape[1] for x_, y_, _ in products)
            print(
                f"{d:>4} {label:>14} {prod * 1e3:>9.1f} ms ({len(products):>4})"
                f" {pass_ * 1e3:>9.1f} ms ({len(passes):>4}) {(prod + pass_) * 1e3:>7.1f} ms"
                f" {kernel * 1e3:>7.1f} ms {fraction:>8.3f} ({median:.3f})"
            )
            results.append((d, label, fraction, flops / (2.0 * n * n * d) / len(blocks)))
    print(
        "(best over the rounds, the rounds' median in brackets; thread CPU time; the calls\n"
        " recorded in brackets after each part; the roofline leaves out the kernel's row\n"
        " preparation, tile loads, partner-sum additions and the Python of its tile loop)"
    )
    products_note = ", ".join(f"d = {d} {label} {ratio:.2f}" for d, label, _, ratio in results)
    print(f"the products' flops over 4 d a pair (tile waste, d x d products): {products_note}")
    return [
        f"roofline,   d = {d:>3}, {label:>12}: kernel at {fraction:6.3f} of its own roofline"
        f" -> {verdict(fraction, ROOFLINE_GOAL, math.inf)} (goal {ROOFLINE_GOAL:.2f})"
        for d, label, fraction, _ in results
    ]


def section_summary(lines, smoke):
    header("Headline verdicts" + (" (--smoke: sizes too small to judge)" if smoke else ""))
    for line in lines:
        print(line)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (under a minute)")
    parser.add_argument("--n", type=int, default=None, help="rows of the rate benchmark block")
    parser.add_argument("--repeats", type=int, default=None, help="repeats per timing (best of)")
    parser.add_argument("--skip-tiles", action="store_true", help="skip the tile-size sweep")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds (no verdicts)")
    parser.add_argument(
        "--end-to-end", action="store_true", help="only section 6 (one thread end to end)"
    )
    parser.add_argument(
        "--roofline", action="store_true", help="only section 7 (the kernel against its roofline)"
    )
    args = parser.parse_args(argv)
    if args.n is None:
        args.n = 400 if args.smoke else 4000 if args.quick else 8000
    if args.repeats is None:
        args.repeats = 1 if args.smoke else 2 if args.quick else 3
    args.loop_n = 200 if args.smoke else 1000 if args.quick else 2000
    args.pair_n = 20 if args.smoke else 100 if args.quick else 200
    args.adv_n = 300 if args.smoke else 2000 if args.quick else 4000
    args.gemm_size = 256 if args.smoke else 2048
    args.e2e_n = (400,) if args.smoke else (6000, 8000)
    args.e2e_rounds = 1 if args.smoke else 3 if args.quick else 7
    args.roofline_rounds = 1 if args.smoke else 3 if args.quick else 5

    blas = [
        f"{i.get('internal_api')} {i.get('version')} ({i.get('num_threads')} threads)"
        for i in threadpool_info()
        if i.get("user_api") == "blas"
    ]
    n_threads = max(
        [i.get("num_threads", 1) for i in threadpool_info() if i.get("user_api") == "blas"] or [1]
    )
    print(
        f"bench_kernel: python {platform.python_version()}, numpy {np.__version__},"
        f" {os.cpu_count()} CPUs, BLAS: {', '.join(blas) or 'unknown'}"
        f"{'  [--quick]' if args.quick else ''}"
    )
    # Warm up: compile the numba pass (cached on disk after the first run).
    block_pair_sum(np.random.default_rng(9).normal(size=(64, 4)))
    block_pair_sum(np.random.default_rng(9).normal(size=(64, 4)), spatial_sign=winsor(1.0))

    start = time.perf_counter()
    headline = []
    if args.end_to_end or args.roofline:
        if args.end_to_end:
            headline += section_end_to_end(args)
        if args.roofline:
            headline = section_roofline(args) + headline
    else:
        gemm_single, gemm_all = section_gemm(args)
        section_kernel_rate(args, gemm_single, gemm_all, n_threads)
        section_loops(args)
        section_adversarial(args)
        if not args.skip_tiles:
            section_tiles(args, gemm_single)
        headline += section_end_to_end(args)
        headline = section_roofline(args) + headline
    section_summary(headline, args.smoke)
    print(f"\ntotal benchmark time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
