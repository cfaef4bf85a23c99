"""Results to a local path or any fsspec URL, checked before a fit and written whole.

* :func:`check_writable` runs before any data is read or any cluster starts: a
  location that cannot be written is refused then, naming the user's path, rather than
  after the private release was computed (and its budget spent).
* :func:`write_json` writes atomically where the store allows: a local file is written
  beside the target and renamed into place; on an object store (S3, GCS, Azure) one PUT
  creates the object whole, so readers see the old object or the new one, never a part.
  Other fsspec filesystems get a single write.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

from .storage import (
    check_storage_options,
    describe_error,
    display_location,
    filesystem,
    is_url,
    remote_error,
)

__all__ = ["check_writable", "write_json"]


def check_writable(
    location: str | os.PathLike, storage_options: dict | None = None, name: str = "output"
) -> None:
    """Refuse a result location that cannot be written, without writing the result.

    A local path needs an existing folder (or a creatable one) where a file can be made;
    a URL's folder gets a probe object that is deleted again.

    Raises
    ------
    ValueError
        Naming ``name`` and the location, with the reason in one line.
    """
    options = check_storage_options(storage_options, location, name)
    local = _local_path(location)
    if local is not None:
        _check_local(local, location, name)
        return
    fs, path = filesystem(os.fspath(location), options, name)
    try:
        if fs.isdir(path):
            raise IsADirectoryError("a folder is in the way")
        probe = f"{path.rsplit('/', 1)[0]}/.dppca-probe-{uuid.uuid4().hex}"
        fs.pipe_file(probe, b"")
        try:
            fs.rm_file(probe)
        except Exception:
            pass
    except Exception as error:
        raise ValueError(
            f"{name}: cannot write {display_location(location)!r} ({remote_error(error, options)})"
        ) from None


def write_json(
    location: str | os.PathLike,
    payload: Any,
    storage_options: dict | None = None,
    name: str = "output",
) -> None:
    """Write ``payload`` as JSON to a local path or fsspec URL, atomically where possible."""
    options = check_storage_options(storage_options, location, name)
    data = (json.dumps(payload, indent=2, default=_json_default) + "\n").encode()
    local = _local_path(location)
    if local is not None:
        _replace_file(local, data)
        return
    fs, path = filesystem(os.fspath(location), options, name)
    try:
        fs.pipe_file(path, data)
    except Exception as error:
        raise ValueError(
            f"{name}: cannot write {display_location(location)!r} ({remote_error(error, options)})"
        ) from None


def _local_path(location: str | os.PathLike) -> Path | None:
    text = os.fspath(location)
    if text.startswith("file://"):
        return Path(text.removeprefix("file://"))
    return None if is_url(text) else Path(text)


def _check_local(path: Path, location, name: str) -> None:
    shown = display_location(location)
    if path.is_dir():
        raise ValueError(f"{name}: cannot write {shown!r} (a folder is in the way)")
    folder = path.absolute().parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise ValueError(f"{name}: cannot write {shown!r} ({str(folder)!r} is not a folder)")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise ValueError(f"{name}: cannot write {shown!r} ({describe_error(error)})") from None


def _replace_file(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
