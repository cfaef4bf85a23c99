"""Zarr inputs: open the store, find the array, read it in checked blocks on the workers.

Zarr answers a read of a chunk that is not in the store with the array's fill value.
Where the workers cannot see the store the client opened (a path mounted only on the
client, a notebook's own /tmp, chunks deleted or not yet written), that turns into a
confident, wrong release.  So every Zarr input is read through
:class:`~.zarr_blocks.ChunkCheckingStore`: in the task that reads it, on the worker, a
chunk the store does not have raises :class:`~.zarr_blocks.MissingChunkError` (naming the
store and the worker) instead.
Whether a chunk exists is store metadata (a listing shows it), never a data value;
nothing is released and no budget is charged when a read fails, because the release
depends on every read.

A store written sparsely on purpose (Zarr skips chunks equal to the fill value unless
``write_empty_chunks=True``) is read with ``allow_fill_values=True``: the fill value is
then data, as if it had been written.

The reads are made in the design's blocks (:func:`read_in_blocks`: one read per block,
of all columns and the chunks or shards it overlaps; the complete design's blocks are
runs of whole chunks, :func:`dask_dppca.design.merge_chunks`, so each chunk is read once
there).  :func:`chunk_reader` gives the graph the reader itself, so that the fit's
segment tasks read their blocks inside (no read task, no held key).

The read tasks' names are unique to each opening of the store (a random token): a store
rewritten with the same shape is a new input, never answered from the keys of an
earlier read still held on a cluster (a persisted ``transform``, say).
"""

from __future__ import annotations

import os
import uuid
import weakref
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import zarr
from zarr.abc.store import Store
from zarr.storage import FsspecStore, LocalStore, StorePath

from .storage import describe_error, display_location, filesystem, is_url, remote_error
from .tables import FORMATS_READ
from .zarr_blocks import (
    ChunkCheckingStore,
    ZarrBlocks,
)

__all__ = [
    "chunk_reader",
    "is_zarr_input",
    "open_zarr_input",
    "read_in_blocks",
]


def is_zarr_input(data: Any) -> bool:
    """A path or URL, or a zarr Array, Group or store object (fsspec mappers included)."""
    if isinstance(data, (str, os.PathLike)):
        return True
    if isinstance(data, (zarr.Array, zarr.Group, Store)):
        return True
    return type(data).__name__ == "FSMap" and type(data).__module__.startswith("fsspec")


def open_zarr_input(
    data: Any, component: str | None, storage_options: dict | None, allow_fill_values: bool
) -> da.Array:
    """A Zarr input as a dask array whose read tasks check that every chunk exists."""
    if isinstance(data, (zarr.Array, zarr.Group)):
        node, label = data, _store_label(data.store, data.path)
    else:
        node, label = _open_node(data, storage_options), _location_label(data)
    array, name = _select_array(node, component, label)
    if name:
        label = f"{label} (array {name!r})"
    if not allow_fill_values:
        array = _with_store(array, ChunkCheckingStore(array.store))
    return _read_tasks(array, label, allow_fill_values)


def _with_store(array, store):
    """``array`` read through ``store``, from the metadata already read (no request)."""
    # ``Array.config`` (the runtime settings, e.g. memory order) is public from zarr 3.1.6;
    # before it, the array gets zarr's defaults, which are what ``zarr.open`` gave it.
    return zarr.Array(
        zarr.AsyncArray(
            metadata=array.metadata,
            config=getattr(array, "config", None),
            store_path=StorePath(store, array.path),
        )
    )


def _open_node(data: Any, storage_options: dict | None):
    store = _open_store(data, storage_options)
    try:
        return zarr.open(store=store, mode="r")
    except Exception as error:
        raise ValueError(
            f"X: cannot open {_location_label(data)} as a Zarr store "
            f"({describe_error(error, storage_options)}); read: {FORMATS_READ}"
        ) from None


def _open_store(data: Any, storage_options: dict | None):
    if isinstance(data, Store):
        return data
    if not isinstance(data, (str, os.PathLike)):  # an fsspec mapper
        return FsspecStore.from_mapper(data, read_only=True)
    location = os.fspath(data)
    if not is_url(location):
        # Resolved here: the workers must not read a relative path against their own cwd
        # (nor a ~ against their own home).
        try:
            path = Path(location).expanduser().resolve()
            exists = path.exists()
        except (OSError, RuntimeError) as error:  # a name too long, a symlink loop
            reason = getattr(error, "strerror", None) or describe_error(error)
            raise ValueError(
                f"X: cannot use the path {_shortened(location)!r} as a Zarr store ({reason})"
            ) from None
        if exists and path.is_file():  # a local store is a folder
            raise ValueError(
                f"X: {_shortened(location)!r} is a file, not a Zarr store nor a table by its "
                f"name; read: {FORMATS_READ}"
            )
        if not exists:
            raise ValueError(
                f"X: Zarr store {_shortened(location)!r} does not exist (read: {FORMATS_READ})"
            )
        return LocalStore(path, read_only=True)
    fs, path = _reachable_filesystem(location, storage_options)
    if "::" in location:
        # A chain (simplecache::s3://...) is a synchronous filesystem over the backend;
        # zarr's from_url would make the backend asynchronous under it, which breaks.
        from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper

        return FsspecStore(AsyncFileSystemWrapper(fs, asynchronous=True), path=path, read_only=True)
    return FsspecStore.from_url(location, storage_options=storage_options, read_only=True)


def _shortened(location: str, limit: int = 200) -> str:
    """A path as a message shows it: a very long one cut in the middle."""
    if len(location) <= limit:
        return location
    return f"{location[: limit // 2]}...{location[-limit // 2 :]} ({len(location)} characters)"


def _reachable_filesystem(location: str, storage_options: dict | None):
    """``(fs, path)`` of a URL, after one request to the store's root.

    Zarr opens a store with several reads at once; when the first fails (no such
    endpoint, refused credentials) the others are abandoned mid-request and print
    "Exception ignored" tracebacks as they are collected.  One plain request first turns
    those cases into a single clean error.
    """
    fs, path = filesystem(location, storage_options)
    try:
        fs.info(path)
        return fs, path
    except FileNotFoundError:
        raise ValueError(f"X: Zarr store {display_location(location)!r} does not exist") from None
    except Exception as error:
        raise ValueError(
            f"X: cannot read {display_location(location)!r} "
            f"({remote_error(error, storage_options)})"
        ) from None


def _select_array(node, component: str | None, label: str):
    """(array, its path in the group or '') for the node and ``component``."""
    if isinstance(node, zarr.Array):
        if component is not None:
            raise ValueError(f"component: {label} holds a single array, not a group")
        return node, ""
    arrays = sorted(
        name for name, member in node.members(max_depth=None) if isinstance(member, zarr.Array)
    )
    if component is None:
        if len(arrays) == 1:
            return node[arrays[0]], arrays[0]
        raise ValueError(f"component: {label} is a Zarr group; name one of its arrays {arrays}")
    name = component.strip("/")
    try:
        member = node[name]
    except KeyError:
        raise ValueError(
            f"component: no array {component!r} in {label}; it holds {arrays}"
        ) from None
    if not isinstance(member, zarr.Array):
        inside = [a for a in arrays if a.startswith(name + "/")]
        raise ValueError(
            f"component: {component!r} in {label} is a group, not an array; "
            f"name one of its arrays {inside}"
        )
    return member, name


def _read_tasks(array, label: str, allow_fill_values: bool) -> da.Array:
    blocks = ZarrBlocks(array, label)
    shape = blocks.shape
    chunk_shape = tuple(array.shards or array.chunks)
    chunks = (chunk_shape[0], *shape[1:]) if shape else ()
    return _reads(blocks, chunks)


def _reads(blocks: ZarrBlocks, chunks: tuple) -> da.Array:
    """The read tasks of ``blocks`` in ``chunks``, under a name of their own (see above)."""
    name = f"dppca-read-{uuid.uuid4().hex}"
    _readers[name] = blocks
    return da.from_array(
        blocks,
        chunks=chunks,
        name=name,
        meta=np.empty((0,) * len(blocks.shape), dtype=blocks.dtype),
        inline_array=False,
    )


def read_in_blocks(data: da.Array, block_sizes: tuple[int, ...]) -> da.Array | None:
    """A Zarr input's reads made in ``block_sizes`` (one read per block, of the chunks it
    overlaps); None when ``data`` is not a Zarr input's reads.

    Blocks that are runs of whole chunks read each chunk once; a block that splits a
    chunk decodes the whole chunk (a chunk is decoded whole), so a chunk of c rows cut
    into blocks of b rows is decoded about c / b + 1 times over the blocks that overlap it.
    That costs reads, not tasks: a rechunk would add a task per chunk and per piece.
    """
    reader = chunk_reader(data)
    if reader is None or len(data.chunks) != 2 or len(data.chunks[1]) != 1:
        return None
    if sum(int(b) for b in block_sizes) != data.shape[0]:
        return None
    return _reads(reader, (tuple(int(b) for b in block_sizes), data.chunks[1]))


#: The reader behind each Zarr input's read tasks, by the dask array's name (weakly: the
#: array's graph holds the reader, so it lives as long as the array can be computed).
_readers: weakref.WeakValueDictionary[str, ZarrBlocks] = weakref.WeakValueDictionary()


def chunk_reader(data: da.Array) -> ZarrBlocks | None:
    """The reader of ``data``'s chunks when ``data`` is a Zarr input's own read tasks.

    ``reader[start:stop]`` is then exactly what the read task of rows ``start:stop``
    computes, chunk checks included.  None for any other array (numpy, a rechunk, a
    user's dask array): its blocks are computed by their own tasks.
    """
    return _readers.get(data.name)


def _location_label(data: Any) -> str:
    if isinstance(data, (str, os.PathLike)):
        return repr(display_location(data))
    return _store_label(data, "")


def _store_label(store, path: str) -> str:
    text = str(store)  # zarr stores print their location, never their options
    return repr(f"{text}/{path}" if path else text)
