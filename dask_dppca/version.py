"""The installed version, read once on first use (``dask_dppca.__version__``).

Its own module at the base so that every layer can name the version without importing
the package root (whose public names import the layers above).
"""

from __future__ import annotations

import functools

__all__ = ["installed_version"]


@functools.cache
def installed_version() -> str:
    """The installed dask-dppca version (``"0+unknown"`` from a source tree).

    Read on first use: importlib.metadata is most of what the command line pays before
    it can put in its signal handlers (``cli.console``).
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dask-dppca")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0+unknown"
