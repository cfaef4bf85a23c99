"""What a worker runs to read a Zarr input: checked reads of whole chunks.

:class:`ZarrBlocks` is the array-like the read tasks slice (pickled into the graph);
reading through :class:`ChunkCheckingStore` turns a chunk the store does not have into
:class:`MissingChunkError` and one that does not decode into :class:`CorruptChunkError`
(both naming the store, the chunk and the worker), never a fill value
(:mod:`.zarr_input` says why).  No dask.array here: a worker that runs only segment
tasks imports this module and not the graph builders' dask.array stack.
"""

from __future__ import annotations

import itertools
import os
import socket
from typing import Any

import numpy as np
from zarr.storage import WrapperStore

from .sessions import close_at_worker_shutdown
from .storage import describe_error

__all__ = [
    "METADATA_KEYS",
    "ChunkCheckingStore",
    "CorruptChunkError",
    "MissingChunkError",
    "ZarrBlocks",
]

#: Keys holding Zarr metadata: a missing one is how Zarr tells v2 from v3, not an error.
METADATA_KEYS = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})


class MissingChunkError(ValueError):
    """A chunk of a Zarr input is missing where a worker reads it.

    Raised in the read task instead of letting Zarr substitute the fill value; the fit
    fails before anything is released and nothing is charged to a privacy budget.
    """


class CorruptChunkError(ValueError):
    """A chunk of a Zarr input exists but cannot be decoded (a damaged store).

    Raised in the read task, naming the store, the chunk and the worker; like a missing
    chunk it stops the fit before anything is released.  A chunk that decodes is data,
    whatever it holds; one that does not is a storage fault, not a data value.
    """


class _ChunkAbsent(Exception):
    """Raised inside Zarr's read for a chunk key the store does not have."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class ChunkCheckingStore(WrapperStore):
    """A Zarr store wrapper for which a missing chunk is an error, never a fill value."""

    async def get(self, key, prototype, byte_range=None):
        """The wrapped store's value for ``key``; a missing chunk raises."""
        value = await self._store.get(key, prototype, byte_range)
        if value is None and not _is_metadata(key):
            raise _ChunkAbsent(key)
        return value

    async def get_partial_values(self, prototype, key_ranges):
        """The wrapped store's values for ``key_ranges``; a missing chunk raises."""
        key_ranges = list(key_ranges)
        values = await self._store.get_partial_values(prototype, key_ranges)
        for (key, _), value in zip(key_ranges, values):
            if value is None and not _is_metadata(key):
                raise _ChunkAbsent(key)
        return values


def _is_metadata(key: str) -> bool:
    return key.rsplit("/", 1)[-1] in METADATA_KEYS


class ZarrBlocks:
    """The array-like behind the read tasks (``dask.array.from_array`` slices it).

    Holds the opened ``zarr.Array`` (its store, and so the storage options, travel to
    the workers with it) and a label for messages.  Its repr shows no storage option:
    dashboards, logs and error reports may print it.
    """

    def __init__(self, array, label: str) -> None:
        self.array = array
        self.label = label
        self.shape = tuple(array.shape)
        self.dtype = np.dtype(array.dtype)
        self.ndim = len(self.shape)
        #: Rows of one chunk, the unit a read decodes whole (a shard's inner chunks are
        #: read one by one).
        self.chunk_rows = int(array.chunks[0]) if self.shape else 0

    def __getitem__(self, selection):
        try:
            block = self.array[selection]
        except _ChunkAbsent as absent:
            raise self._missing(absent) from None
        except (MemoryError, OSError):  # the worker or the storage, not the chunk's bytes
            raise
        except Exception as error:  # a codec refused the bytes: name the chunk
            raise self._corrupt(selection, error) from None
        close_at_worker_shutdown(self.array.store)
        return block

    def _corrupt(self, selection, error: Exception) -> CorruptChunkError:
        key, cause = _first_bad_chunk(self.array, selection, error)
        return CorruptChunkError(
            f"X: chunk {key!r} of {self.label} cannot be decoded where {_reader()} reads it "
            f"({describe_error(cause)}); the store is damaged: rewrite that chunk. The fit "
            "stopped before any release"
        )

    def _missing(self, absent: _ChunkAbsent) -> MissingChunkError:
        return MissingChunkError(
            f"X: chunk {absent.key!r} of {self.label} is missing where {_reader()} reads "
            "it (store not visible there, chunk deleted, or not written); the fit stopped "
            "before any release. If the array was written sparsely on purpose (Zarr skips "
            "chunks equal to the fill value), pass allow_fill_values=True "
            f"(--allow-fill-values) to read missing chunks as the fill value "
            f"{_plain(self.array.fill_value)!r}"
        )

    def __repr__(self) -> str:
        return f"ZarrBlocks({self.label}, shape={self.shape}, dtype={self.dtype})"


def _first_bad_chunk(array, selection, error: Exception) -> tuple[str, Exception]:
    """The storage key of the first chunk in ``selection`` that fails to read, and why.

    Read tasks cover whole chunks (or shards) along the rows and all columns; each is
    read again alone until one fails.  If none does (a failure of the whole read only),
    the rows are named instead.
    """
    shape = tuple(array.shards or array.chunks)
    ranges = []
    for part, size, length in zip(selection, shape, array.shape):
        start, stop, _ = part.indices(length) if isinstance(part, slice) else (0, length, 1)
        ranges.append(range(start // size, max(start // size, (stop - 1) // size) + 1))
    for coords in itertools.product(*ranges):
        chunk = tuple(
            slice(c * size, min((c + 1) * size, n))
            for c, size, n in zip(coords, shape, array.shape)
        )
        try:
            array[chunk]
        except (MemoryError, OSError):
            raise
        except Exception as cause:
            try:
                return str(array.metadata.encode_chunk_key(coords)), cause
            except Exception:  # pragma: no cover - every zarr 3 metadata encodes keys
                return f"at chunk coordinates {coords}", cause
    rows = selection[0] if selection else slice(None)
    return f"holding rows {rows.start}:{rows.stop}", error


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python number it holds (for messages)."""
    return value.item() if isinstance(value, np.generic) else value


def _reader() -> str:
    import distributed

    try:
        return f"worker {distributed.get_worker().address}"
    except ValueError:  # a local scheduler: the client's own process
        return f"process {os.getpid()} on {socket.gethostname()} (local scheduler)"
