"""The app's times in a real headless Chromium: page load, and Release to plots.

Run:  python benchmarks/bench_app.py [--n 100000] [--d 20] [--k 5] [--scheduler ADDR]
                                     [--screenshots DIR]
      python benchmarks/bench_app.py --smoke   # 2000 x 6, k = 2, synchronous scheduler

Writes a Zarr store of ``n x d`` Gaussian rows (fixed seed: TEST DATA) and a ledger in a
temporary folder, starts ``dask-dppca app --ledger LEDGER STORE`` on a free loopback
port (the default compute path: an embedded cluster per release, unless
``--scheduler``), and drives it with Selenium and Debian's chromium / chromium-driver:

* ``page load``: from the navigation to the store's n and d on the page;
* ``release to plots``: from the press of Release to the plots of the release loaded in
  the page (every image complete), with the ledger's remaining budget updated;
* ``re-render``: a free post-processing step (PVE instead of scree values) to its plot.

Prints the three times and their ratio to the release's own compute (``analyze`` in
this process on the same store and scheduler, run once before).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import zarr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.browser import panel_dom as dom  # noqa: E402


def _browser():
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1400,1100",
        f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-profile-')}",  # its own profile
    ):
        options.add_argument(flag)
    # Chromium puts its singleton socket in TMPDIR: a long TMPDIR (a test's) overflows the
    # socket path limit and the browser exits at once; give it a short one.
    short = tempfile.mkdtemp(prefix="chr-", dir="/tmp" if os.path.isdir("/tmp") else None)
    service = webdriver.ChromeService(
        shutil.which("chromedriver"), env={**os.environ, "TMPDIR": short}
    )
    return webdriver.Chrome(options=options, service=service)


def _images(driver):
    return driver.execute_script(
        dom._BOOT + "const h = window.__dpFind(document, 'dp-plots');"
        "function all(r){let out=[...r.querySelectorAll('img')];"
        "for(const e of r.querySelectorAll('*')){if(e.shadowRoot) out=out.concat(all(e.shadowRoot));}"
        "return out;}"
        "return h ? all(h.shadowRoot || h).map(i => [i.complete && i.naturalWidth > 0, i.src.slice(-30)]) : [];"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--d", type=int, default=20)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--scheduler")
    parser.add_argument("--screenshots")
    parser.add_argument("--smoke", action="store_true", help="2000 x 6, k=2, synchronous")
    args = parser.parse_args()
    if args.smoke:
        args.n, args.d, args.k, args.scheduler = 2000, 6, 2, "synchronous"

    import dask_dppca as dd

    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        print("bench_app: needs Debian's chromium and chromium-driver; nothing measured")
        return
    folder = Path(tempfile.mkdtemp(prefix="bench-app-"))
    store = str(folder / "x.zarr")
    z = zarr.open_array(
        store, mode="w", shape=(args.n, args.d), chunks=(max(args.n // 4, 1), args.d), dtype="f8"
    )
    rng = np.random.default_rng(0)  # test data only
    z[:] = rng.standard_normal((args.n, args.d)) * np.sqrt(np.linspace(9.0, 1.0, args.d))
    ledger = str(folder / "study.ledger")
    dd.PrivacyBudget(10.0, 1e-5, ledger=ledger, create=True)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clock = time.monotonic()
        dd.analyze(
            store,
            n_components=args.k,
            epsilon=1.0,
            delta=1e-6,
            compute=dd.Compute(scheduler=args.scheduler),
        )
        compute_s = time.monotonic() - clock

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "dask_dppca.cli",
        "app",
        "--ledger",
        ledger,
        store,
        "--port",
        str(port),
    ]
    if args.scheduler:
        command += ["--scheduler", args.scheduler]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    driver = None
    try:
        print(proc.stdout.readline().strip())
        driver = _browser()
        clock = time.monotonic()
        driver.get(f"http://127.0.0.1:{port}/")
        dom.wait_for(lambda: f"n = {args.n}" in dom.text(driver, "dp-store-info"), 120, "the page")
        load_s = time.monotonic() - clock
        dom.set_value(driver, "dp-k", args.k)
        dom.wait_for(
            lambda: dom.inner(driver, "dp-k", "input").get_attribute("value") == str(args.k),
            20,
            "k",
        )
        time.sleep(0.5)
        remaining = dom.text(driver, "dp-remaining-epsilon")
        clock = time.monotonic()
        dom.click(driver, "dp-release")

        def plotted():
            images = _images(driver)
            return (
                images
                and all(ok for ok, _ in images)
                and dom.text(driver, "dp-remaining-epsilon") != remaining
            )

        dom.wait_for(lambda: plotted() or dom.text(driver, "dp-error"), 600, "the plots")
        release_s = time.monotonic() - clock
        assert not dom.text(driver, "dp-error"), dom.text(driver, "dp-error")
        first = _images(driver)
        clock = time.monotonic()
        dom.click(driver, "dp-kind", "button:not(.bk-active)")
        dom.wait_for(
            lambda: _images(driver) != first and all(ok for ok, _ in _images(driver)), 60, "PVE"
        )
        rerender_s = time.monotonic() - clock
        if args.screenshots:
            Path(args.screenshots).mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(Path(args.screenshots) / "app-bench.png"))
    finally:
        if driver is not None:
            driver.quit()
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    print(
        f"store {args.n} x {args.d}, k={args.k}, scheduler={args.scheduler or 'embedded cluster'}"
    )
    print(f"page load          {load_s:7.2f} s")
    print(
        f"release to plots   {release_s:7.2f} s   ({release_s / compute_s:.2f} x analyze alone, {compute_s:.2f} s)"
    )
    print(f"re-render (free)   {rerender_s:7.2f} s")


if __name__ == "__main__":
    main()
