"""Why the first fit on a machine waits: numba compiles the kernel once, then caches it.

When the work runs on this machine (the embedded cluster, a local scheduler) and the
kernel's compiled functions are not yet in numba's cache here, the first compute target
of the process says so once, before the seconds of compilation: through the sink the
command line sets (:func:`compile_notices_to`: its stderr), else at INFO on the logger
``dask_dppca`` (a notebook's cells keep a clean stderr; ``logging.basicConfig(level=
logging.INFO)`` shows it).  Said after every parameter is checked, so a refused call
never says it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["FIRST_COMPILE", "compile_notices_to", "say_before_compiling"]

logger = logging.getLogger("dask_dppca")

#: How the line begins.
FIRST_COMPILE = "first run on this machine: compiling the kernel"

_lock = threading.Lock()
_state: dict[str, object] = {"said": False, "sink": None}


@contextmanager
def compile_notices_to(sink: Callable[[str], object]) -> Iterator[None]:
    """Send the first-compile line to ``sink`` (the command line: its stderr) in the block."""
    with _lock:
        before = _state["sink"]
        _state["sink"] = sink
    try:
        yield
    finally:
        with _lock:
            _state["sink"] = before


def say_before_compiling(on_this_machine: bool) -> None:
    """Say once per process, before the first compute on this machine, that the kernel
    is compiled first when numba's cache here lacks it.

    Parameters
    ----------
    on_this_machine : bool
        Whether the kernel runs on this machine (a remote cluster's workers compile on
        theirs: nothing is said here).
    """
    if not on_this_machine:
        return
    with _lock:
        if _state["said"]:
            return
        _state["said"] = True
        sink = _state["sink"]
    from ..kernel.jit import cache_directory
    from ..kernel.pair_sum import compiled_on_this_machine

    if compiled_on_this_machine():
        return
    line = f"{FIRST_COMPILE} (a few seconds, once; cached in {cache_directory()})"
    if callable(sink):
        sink(line)
    else:
        logger.info(line)
