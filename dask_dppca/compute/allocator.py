"""glibc's mmap threshold in worker processes: scratch arrays from the heap, not fresh pages.

Dask's nanny starts every worker with ``MALLOC_TRIM_THRESHOLD_=65536``
(``distributed.nanny.pre-spawn-environ``) so that freed memory goes back to the OS.
Setting any of glibc's trim or mmap parameters also switches off its *dynamic* mmap
threshold (mallopt(3), M_MMAP_THRESHOLD), which stays at 128 KiB: every numpy array of
more than 128 KiB (a block read, a tile's weights, a d x d partial sum) is then a fresh
``mmap`` whose pages fault in one by one and a ``munmap`` (with its TLB shootdown on the
other threads) when freed.  Measured on a 2-core machine, a regular-design fit of a
2.2 GiB store (d = 256, blocks of 256 rows) on one nanny worker of 2 threads: 60 s, half
of it system time, against 31 s on in-process workers; 28 s with the threshold set here.

:func:`keep_scratch_on_the_heap` sets the threshold to glibc's largest (32 MiB on 64-bit,
the dynamic threshold's own ceiling) in such a process.  The trim threshold is kept, so
the heap's free top still goes back to the OS; a user's own ``MALLOC_MMAP_THRESHOLD_``
is left as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

__all__ = ["MMAP_THRESHOLD", "keep_scratch_on_the_heap"]

#: glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: mallopt refuses more.
MMAP_THRESHOLD = 32 * 2**20
_M_MMAP_THRESHOLD = -3  # <malloc.h>
# Any of these fixes glibc's mmap threshold at its 128 KiB start (mallopt(3)).
_FIXING_VARIABLES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


def keep_scratch_on_the_heap() -> bool:
    """Raise glibc's mmap threshold where the environment froze it at 128 KiB.

    Returns
    -------
    bool
        True when the threshold was set; False on other C libraries, where none of the
        variables is set, or where the user chose ``MALLOC_MMAP_THRESHOLD_``.
    """
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    if not any(name in os.environ for name in _FIXING_VARIABLES):
        return False  # the dynamic threshold is in effect and grows by itself
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
