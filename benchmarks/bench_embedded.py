"""Which embedded cluster: in-process threads or spawned worker processes?

Each configuration runs in a fresh interpreter, so "first fit" includes starting the
cluster and compiling or loading the kernel, as a user's first fit does.  Configurations:

* ``threads``: Dask's local threaded scheduler (the reference: no cluster at all);
* ``in-process``: the embedded default, a LocalCluster with one in-process worker and a
  thread per core (``processes=False``);
* ``processes``: the previous default, one spawned worker process per core with one
  thread each.

Prints seconds for the first and the second fit of n x d t_1 data (numpy input), and
each as a ratio to ``threads`` measured in the same run.

    python benchmarks/bench_embedded.py            # n = 20000, d = 30, 3 repeats
    python benchmarks/bench_embedded.py --quick    # n = 4000, d = 10, 1 repeat
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import json, os, sys, time, warnings
    import numpy as np
    import distributed
    import dask_dppca as dd

    def main():
        kind, n, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
        x = np.random.default_rng(0).standard_t(1, size=(n, d))  # benchmark data
        started = time.perf_counter()  # the first fit pays for starting its cluster
        if kind == "threads":
            scheduler = "threads"
        elif kind == "in-process":
            scheduler = None
        else:
            cluster = distributed.LocalCluster(n_workers=os.cpu_count(), threads_per_worker=1,
                                               processes=True, dashboard_address=None,
                                               resources={"dppca-trusted": 1})
            scheduler = distributed.Client(cluster, set_as_default=False)
        times = []
        for _ in range(2):
            dd.DPPCA(2, scheduler=scheduler).fit(x)
            times.append(time.perf_counter() - started)
            started = time.perf_counter()
        print(json.dumps(times))

    if __name__ == "__main__":
        warnings.simplefilter("ignore")
        main()
""")
KINDS = ("threads", "in-process", "processes")


def run(kind: str, n: int, d: int) -> tuple[float, float]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, kind, str(n), str(d)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    first, second = json.loads(done.stdout.strip().splitlines()[-1])
    return first, second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--d", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="n = 4000, d = 10, one repeat")
    args = parser.parse_args()
    if args.quick:
        args.n, args.d, args.repeats = 4000, 10, 1
    best = {}
    for _ in range(args.repeats):
        for kind in KINDS:
            first, second = run(kind, args.n, args.d)
            old = best.get(kind, (float("inf"), float("inf")))
            best[kind] = (min(old[0], first), min(old[1], second))
    print(f"n = {args.n}, d = {args.d}, best of {args.repeats} fresh interpreters (seconds):")
    print(
        f"{'cluster':<12} {'first fit':>10} {'second fit':>11} {'first/threads':>14} {'second/threads':>15}"
    )
    ref_first, ref_second = best["threads"]
    for kind in KINDS:
        first, second = best[kind]
        print(
            f"{kind:<12} {first:>10.2f} {second:>11.2f} {first / ref_first:>14.2f} {second / ref_second:>15.2f}"
        )
    print(
        f"first in-process fit costs {best['in-process'][0] - ref_first:+.2f} s over threads "
        "(goal for the embedded cluster: at most +1.5 s)"
    )


if __name__ == "__main__":
    main()
