"""Results to a local path or any fsspec URL: checked before a fit, written whole, never
a file you did not ask for.

* :func:`check_writable` runs before any data is read or any cluster starts: a
  location that cannot be written is refused then, naming the user's path, rather than
  after the private release was computed (and its budget spent).  Its folder must exist
  (nothing is created on the way), and an existing file is refused unless
  ``overwrite=True`` (``--force``).
* :func:`write_json` writes atomically where the store allows and returns where the
  result went:

  - a regular local file (new, or replaced with ``overwrite=True``) is written beside
    its target and renamed into place.  A symlink is written through: its final target
    is replaced and the link stays.  A new file gets mode 0600 (only its owner reads
    it); a replaced file keeps its mode;
  - a device, a named pipe or a path under ``/dev`` or ``/proc`` (``/dev/stdout``,
    ``/dev/fd/3``) is written in place, in one write, and never counts as an existing
    file (it is not replaced, so there is nothing to overwrite);
  - on an object store (S3, GCS, Azure) one PUT creates the object whole, so readers see
    the old object or the new one, never a part.  Other fsspec filesystems get a single
    write.

  A file that appears at the target while the fit runs is not replaced: the result is
  kept beside it and the error names both.
* ``~`` at the start of a local path is the user's home folder.
"""

from __future__ import annotations

import json
import os
import stat
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

__all__ = ["check_writable", "local_path", "write_bytes", "write_json", "writes_in_place"]

#: Folders whose entries are devices or descriptors, never files to replace.
_SPECIAL_FOLDERS = ("/dev/", "/proc/")
#: What a new result file's permission bits are (a replaced one keeps its own).
NEW_FILE_MODE = 0o600


def check_writable(
    location: str | os.PathLike,
    storage_options: dict | None = None,
    name: str = "output",
    *,
    overwrite: bool = False,
    overwrite_hint: str = "pass overwrite=True to replace it",
) -> None:
    """Refuse a result location that cannot be written, without writing the result.

    A local path needs an existing folder where a file can be made, and no file there
    unless ``overwrite``; a URL's folder gets a probe object that is deleted again.

    Parameters
    ----------
    location : str or os.PathLike
        A local path (``~`` expanded) or an fsspec URL.
    storage_options : dict, optional
        fsspec options for a URL.
    name : str
        What to call the location in messages (``"--output"``, ``"path"``).
    overwrite : bool, default=False
        Whether an existing file may be replaced.
    overwrite_hint : str
        How to say "replace it" in the caller's words (``"pass --force to replace it"``).

    Raises
    ------
    ValueError
        Naming ``name`` and the location, with the reason in one line.
    """
    options = check_storage_options(storage_options, location, name)
    local = local_path(location)
    if local is not None:
        _check_local(local, location, name, overwrite, overwrite_hint)
        return
    fs, path = filesystem(os.fspath(location), options, name)
    shown = display_location(location)
    try:
        if fs.isdir(path):
            raise IsADirectoryError("a folder is in the way")
        exists = fs.exists(path)
    except Exception as error:
        raise ValueError(
            f"{name}: cannot write {shown!r} ({remote_error(error, options)})"
        ) from None
    if exists and not overwrite:
        raise ValueError(f"{name}: {shown!r} exists; {overwrite_hint}")
    try:
        probe = f"{path.rsplit('/', 1)[0]}/.dppca-probe-{uuid.uuid4().hex}"
        fs.pipe_file(probe, b"")
        try:
            fs.rm_file(probe)
        except Exception:
            pass
    except Exception as error:
        raise ValueError(
            f"{name}: cannot write {shown!r} ({remote_error(error, options)})"
        ) from None


def write_json(
    location: str | os.PathLike,
    payload: Any,
    storage_options: dict | None = None,
    name: str = "output",
    *,
    overwrite: bool = False,
) -> str:
    """Write ``payload`` as JSON to a local path or fsspec URL, atomically where possible.

    Returns
    -------
    str
        Where the result went, as it may be shown: the absolute path of a local file
        (a symlink's target), the device's path, or the URL with its secrets masked.

    Raises
    ------
    ValueError
        If the location cannot be written, or (without ``overwrite``) a file appeared
        there since :func:`check_writable`; the result is then kept beside it.
    """
    data = (json.dumps(payload, indent=2, default=_json_default) + "\n").encode()
    return write_bytes(location, data, storage_options, name, overwrite=overwrite)


def write_bytes(
    location: str | os.PathLike,
    data: bytes,
    storage_options: dict | None = None,
    name: str = "output",
    *,
    overwrite: bool = False,
) -> str:
    """Write ``data`` to a local path or fsspec URL, atomically where possible (as
    :func:`write_json`; a new local file gets mode 0600).

    Returns
    -------
    str
        Where it went, as it may be shown.

    Raises
    ------
    ValueError
        As for :func:`write_json`.
    """
    options = check_storage_options(storage_options, location, name)
    local = local_path(location)
    if local is not None:
        if writes_in_place(local):
            _write_in_place(local, data)
            return str(local)
        target = Path(os.path.realpath(local))
        _replace_file(target, data, overwrite, name, display_location(location))
        return str(target)
    fs, path = filesystem(os.fspath(location), options, name)
    try:
        fs.pipe_file(path, data)
    except Exception as error:
        raise ValueError(
            f"{name}: cannot write {display_location(location)!r} ({remote_error(error, options)})"
        ) from None
    return display_location(location)


def local_path(location: str | os.PathLike) -> Path | None:
    """The local path of ``location`` (``file://`` stripped, ``~`` expanded), or None
    for an fsspec URL.
    """
    text = os.fspath(location)
    if text.startswith("file://"):
        text = text.removeprefix("file://")
    elif is_url(text):
        return None
    return Path(text).expanduser()


def writes_in_place(path: Path) -> bool:
    """Whether a result goes into ``path`` in place: a device, a pipe, a socket, or
    anything under ``/dev`` or ``/proc`` (``/dev/stdout``), never a file to replace.
    """
    absolute = os.path.abspath(path)
    if absolute.startswith(_SPECIAL_FOLDERS):
        return True
    try:
        mode = os.stat(path).st_mode  # follows symlinks: what a write would reach
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _check_local(path: Path, location, name: str, overwrite: bool, overwrite_hint: str) -> None:
    shown = display_location(location)
    if writes_in_place(path):
        if not os.path.exists(path):
            raise ValueError(f"{name}: cannot write {shown!r} (no such device)")
        if not os.access(path, os.W_OK):
            raise ValueError(f"{name}: cannot write {shown!r} (permission denied)")
        return
    target = Path(os.path.realpath(path))  # a symlink is written through
    if target.is_dir():
        raise ValueError(f"{name}: cannot write {shown!r} (a folder is in the way)")
    folder = target.parent
    if not folder.is_dir():
        existing = folder
        while not existing.exists():
            existing = existing.parent
        if existing.is_dir():
            raise ValueError(
                f"{name}: cannot write {shown!r} (the folder {str(folder)!r} does not exist; "
                "create it first)"
            )
        raise ValueError(f"{name}: cannot write {shown!r} ({str(existing)!r} is not a folder)")
    if target.exists() and not overwrite:
        raise ValueError(f"{name}: {shown!r} exists; {overwrite_hint}")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise ValueError(f"{name}: cannot write {shown!r} ({describe_error(error)})") from None


def _write_in_place(path: Path, data: bytes) -> None:
    """One write into a device or pipe (O_APPEND: a shell's ``>>`` file behind
    ``/dev/stdout`` keeps what it had).
    """
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(descriptor, view) :]
    finally:
        os.close(descriptor)


def _replace_file(target: Path, data: bytes, overwrite: bool, name: str, shown: str) -> None:
    """Write ``data`` beside ``target`` and move it into place (never creating folders)."""
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        if overwrite:
            try:
                os.chmod(temporary, stat.S_IMODE(os.stat(target).st_mode))
            except FileNotFoundError:
                pass
            os.replace(temporary, target)
            return
        try:
            os.link(temporary, target)  # fails if a file appeared there meanwhile
        except FileExistsError:
            kept = target.with_name(f"{target.name}.{uuid.uuid4().hex[:8]}")
            os.replace(temporary, kept)
            raise ValueError(
                f"{name}: {shown!r} appeared while the fit ran and was left as it is; "
                f"the result is in {str(kept)!r}"
            ) from None
        except OSError:  # a filesystem without hard links: replace (checked just before)
            if target.exists():
                raise
            os.replace(temporary, target)
            return
        Path(temporary).unlink()
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
