"""What an analysis reads, pinned: a fingerprint of a store's files taken at its start.

An analysis reads its input once per stage (the directions, the scree, the score map).
A store rewritten between two stages would give directions from the old data and scree
values from the new.  :func:`store_fingerprint` lists every file (object) of the store
with its size and its modification stamp (``mtime``, an object store's ``ETag`` or
``LastModified``): metadata only, no chunk is read.  The analysis takes it at the start
and compares before each later stage and at the end (:class:`StoreChangedError`).

Only a store named by a path or URL has one; an array in memory cannot change under
the analysis (its blocks are held on the workers), and an object passed in (a dask
array, a Zarr array) is the caller's to keep still.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from .storage import display_location, filesystem

__all__ = ["StoreChangedError", "check_unchanged", "store_fingerprint"]

#: The listing's keys that say a file changed, whichever the filesystem reports.
_STAMPS = ("size", "mtime", "ETag", "etag", "LastModified", "last_modified", "md5Hash", "crc32c")


class StoreChangedError(RuntimeError):
    """The store an analysis reads changed after the analysis started."""


def store_fingerprint(data: Any, storage_options: dict | None = None) -> str | None:
    """A digest of every file of the store at ``data`` (a path or URL), or None for
    any other input.

    Raises
    ------
    ValueError
        If the location cannot be listed (named, secrets masked).
    """
    if not isinstance(data, str | os.PathLike):
        return None
    location = os.path.expanduser(os.fspath(data))
    fs, path = filesystem(location, storage_options)
    try:
        found = fs.find(path, detail=True, withdirs=False) if fs.isdir(path) else {}
        if not found:
            found = {path: fs.info(path)}
    except FileNotFoundError:
        return "missing"
    digest = hashlib.sha256()
    for name in sorted(found):
        info = found[name]
        stamps = [f"{key}={info[key]}" for key in _STAMPS if info.get(key) is not None]
        digest.update(f"{name[len(path) :]}|{'|'.join(stamps)}\n".encode())
    return digest.hexdigest()


def check_unchanged(
    data: Any, storage_options: dict | None, pinned: str | None, before: str
) -> None:
    """Refuse when the store at ``data`` no longer has the fingerprint ``pinned``.

    Raises
    ------
    StoreChangedError
        Naming the store and the stage it was about to start (``before``).
    """
    if pinned is None:
        return
    if store_fingerprint(data, storage_options) != pinned:
        raise StoreChangedError(
            f"the store {display_location(os.fspath(data))!r} changed since the analysis "
            f"started (its files' sizes or times differ): refused before {before}, so "
            "that no release mixes two versions of the data"
        )
