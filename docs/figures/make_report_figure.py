"""Regenerate docs/figures/report.png, the README's picture of the HTML report.

    python docs/figures/make_report_figure.py            # writes docs/figures/report.png
    python docs/figures/make_report_figure.py --out DIR  # elsewhere (a test's folder)

A demo analysis as the README's lines make it (directions, scree, a score map per group,
charged to a ledger) on DEMO data (fixed seed; the noise is private, so the picture
changes from run to run), its report written with :meth:`PrivateAnalysis.to_html` and
photographed by a headless Chromium (Debian's chromium and chromium-driver, Selenium).

Beside the picture, ``report.sections.txt`` lists the report's section headings and
figure captions (alt texts) at the time of the picture: tests/cli/test_readme_figures.py
renders the report of the same demo (no browser) and fails when they differ, so the
README's picture cannot silently show an older report: rerun this script then.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SECTIONS = "report.sections.txt"


def demo_report(folder: Path) -> str:
    """The demo analysis's report, written to ``folder/report.html``; its HTML."""
    import dask_dppca as dd

    rng = np.random.default_rng(5)  # DEMO data only
    n = 4000
    X = rng.standard_normal((n, 6)) * np.sqrt([9.0, 4.0, 1.0, 1.0, 1.0, 1.0])
    labels = np.array(["north", "south", "east"])[np.arange(n) % 3]
    X[labels == "south", 0] += 3.0  # the groups differ along PC1
    budget = dd.PrivacyBudget(5.0, 1e-5, ledger=folder / "study.ledger", create=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the demo's small n: a noisy release, said in it
        with budget:
            result = dd.analyze(
                X,
                n_components=3,
                epsilon=3.0,
                delta=1e-5,
                groups=labels,
                group_domain=("north", "south"),
                scheduler="synchronous",
            )
    return result.to_html(folder / "report.html", budget=budget)


def sections(html: str) -> str:
    """The report's section headings and figure alt texts, one a line."""
    heads = re.findall(r"<h[12][^>]*>(.*?)</h[12]>", html)
    alts = re.findall(r'<img [^>]*alt="([^"]*)"', html)
    return "\n".join([*(f"section: {h}" for h in heads), *(f"figure: {a}" for a in alts)]) + "\n"


def photograph(page: Path, png: Path) -> None:
    """A headless Chromium's picture of ``page`` (1280 px wide, the report's first screen)."""
    from selenium import webdriver

    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        raise SystemExit("needs Debian's chromium and chromium-driver (apt-get install -y ...)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    profile = tempfile.mkdtemp(prefix="chr-", dir="/tmp" if os.path.isdir("/tmp") else None)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1600"):
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    service = webdriver.ChromeService(executable_path=driver_path, env={**os.environ})
    browser = webdriver.Chrome(options=options, service=service)
    try:
        browser.get(page.as_uri())
        png.write_bytes(browser.get_screenshot_as_png())
    finally:
        browser.quit()
        shutil.rmtree(profile, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Write report.png and report.sections.txt."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder (default docs/figures)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        html = demo_report(Path(scratch))
        photograph(Path(scratch) / "report.html", args.out / "report.png")
    (args.out / SECTIONS).write_text(sections(html))
    print(f"wrote {args.out / 'report.png'} and {args.out / SECTIONS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
