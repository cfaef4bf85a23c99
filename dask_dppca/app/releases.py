"""The app's past releases: result files in a folder beside the ledger.

Every release the app makes is saved as a :class:`~dask_dppca.analysis.result.PrivateAnalysis`
JSON file in ``LEDGER.releases/`` (or kept in memory without a ledger), so a reload of
the page, or a new app on the same ledger, lists and reopens them.  Reopening reads the
file: it recomputes and spends nothing.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ReleaseStore", "releases_folder"]


def releases_folder(ledger: str) -> str:
    """The folder holding the app's releases of ``ledger``: ``LEDGER.releases``."""
    return os.path.abspath(os.fspath(ledger)) + ".releases"


@dataclass
class ReleaseStore:
    """Saved releases, newest first; on disk when ``folder`` is set, else in memory."""

    folder: str | None = None
    _memory: dict[str, Any] = field(default_factory=dict)

    def add(self, result: Any) -> str:
        """Keep ``result``; its key (file name without ``.json``)."""
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        key = f"{stamp}-{result.meta['analysis_id'][:8]}"
        if self.folder is None:
            self._memory[key] = result
            return key
        os.makedirs(self.folder, exist_ok=True)
        partial = os.path.join(self.folder, f".{key}.json.partial")
        result.save(partial)
        os.replace(partial, os.path.join(self.folder, f"{key}.json"))  # never half a file
        return key

    def keys(self) -> list[str]:
        """Every saved release, newest first."""
        if self.folder is None:
            names = list(self._memory)
        elif os.path.isdir(self.folder):
            names = [f[:-5] for f in os.listdir(self.folder) if f.endswith(".json")]
        else:
            names = []
        return sorted(names, reverse=True)

    def load(self, key: str) -> Any:
        """The release saved under ``key`` (read, not recomputed)."""
        from ..analysis.result import PrivateAnalysis

        if self.folder is None:
            return self._memory[key]
        if os.sep in key or key.startswith("."):
            raise ValueError(f"key: not a release name: {key!r}")
        return PrivateAnalysis.load(os.path.join(self.folder, f"{key}.json"))

    def label(self, key: str, result: Any | None = None) -> str:
        """One line naming a release: when, data set, k, its total (epsilon, delta)."""
        result = result if result is not None else self.load(key)
        meta = result.meta
        when = f"{key[:4]}-{key[4:6]}-{key[6:8]} {key[9:11]}:{key[11:13]}:{key[13:15]} UTC"
        shares = meta.get("shares") or {}
        split = "/".join(f"{name}={value:.2g}" for name, value in shares.items())
        app = meta.get("app") or {}
        groups = f", groups {app['groups']}" if app.get("groups") else ""
        scale = ", scaled" if meta.get("scaling") == "robust" else ""
        return (
            f"{when}: {meta.get('dataset', '?')}, k={meta.get('n_components')}, "
            f"epsilon={meta.get('epsilon'):g}, delta={meta.get('delta'):g}"
            + (f", split {split}" if split else "")
            + groups
            + scale
        )
