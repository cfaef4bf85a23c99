"""A real headless Chromium (Debian's ``chromium`` and ``chromium-driver``) via Selenium.

The browser tests skip, saying why, where Chromium or its driver is not installed
(.ci/run installs both).  Set ``DASK_DPPCA_SCREENSHOTS=DIR`` to keep the screenshots.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


def screenshot_dir() -> Path | None:
    """Where to keep screenshots (``DASK_DPPCA_SCREENSHOTS``), or None."""
    where = os.environ.get("DASK_DPPCA_SCREENSHOTS")
    if not where:
        return None
    path = Path(where)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    """One headless Chromium for the session, its console log kept; quit at the end."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install -y ...)")
    webdriver = pytest.importorskip("selenium.webdriver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1000",
        "--no-first-run",
        "--disable-extensions",
        # its own profile: two Chromiums (parallel test files) cannot share one
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Chromium puts its singleton socket in TMPDIR: a long one overflows the socket path
    # limit and the browser exits at once; give it a short one.
    short = tempfile.mkdtemp(prefix="chr-", dir="/tmp" if os.path.isdir("/tmp") else None)
    service = webdriver.ChromeService(
        executable_path=CHROMEDRIVER, env={**os.environ, "TMPDIR": short}
    )
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(short, ignore_errors=True)


def console_errors(driver) -> list[str]:
    """The browser console's SEVERE entries since the last call."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def not_blank(png: bytes) -> float:
    """Share of pixels that differ from the most common colour of a screenshot."""
    import io

    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("L"))
    values, counts = np.unique(pixels, return_counts=True)
    return 1.0 - counts.max() / pixels.size
