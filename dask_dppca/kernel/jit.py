"""numba compilation with the on-disk cache kept out of the installed package.

numba's ``cache=True`` writes its index and machine code beside the module, in
``dask_dppca/__pycache__``.  In site-packages those files are not in pip's record of the
install, so replacing the install (``pip install -e .`` over ``pip install .``, or
``pip uninstall``) leaves that folder behind, and Python then imports the leftover
folder as an empty namespace package: ``cannot import name 'DPPCA' from 'dask_dppca'
(unknown location)``.  The cache therefore lives in the user's cache directory,
``$XDG_CACHE_HOME/dask-dppca/numba`` (default ``~/.cache/dask-dppca/numba``), or in the
directory the user gave numba with ``NUMBA_CACHE_DIR``.

numba picks a function's cache directory once, when the function is decorated, from
``numba.config.CACHE_DIR``; :func:`njit` sets that value only while decorating, so it
works whether or not numba was imported (and configured) before, and it leaves the
user's own numba functions alone.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any, TypeVar

import numba

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["cache_directory", "compiled_here", "njit"]


def cache_directory() -> str:
    """Where the compiled kernel is cached: ``NUMBA_CACHE_DIR`` if set, else a user cache.

    The user cache is ``$XDG_CACHE_HOME/dask-dppca/numba`` (``~/.cache/...`` by
    default); when that cannot be created (a read-only home), a per-user folder in the
    temporary directory.
    """
    users_choice = _numba_cache_dir()
    if users_choice:
        return users_choice
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    candidates = [
        os.path.join(base, "dask-dppca", "numba"),
        os.path.join(tempfile.gettempdir(), f"dask-dppca-numba-{_user_id()}"),
    ]
    for path in candidates:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError:
            continue
        if os.access(path, os.W_OK):
            return path
    # Neither is writable: numba then falls back to its own locations (or no cache).
    return candidates[0]


def njit(**options: Any) -> Callable[[F], F]:
    """``numba.njit(cache=True, **options)`` caching in :func:`cache_directory`.

    Typed as returning the function unchanged, so callers keep its signature: the numba
    dispatcher is called exactly like the Python function it compiles.
    """

    def decorate(function: F) -> F:
        users_choice = _numba_cache_dir()
        _set_numba_cache_dir(cache_directory())
        try:
            compiled: F = numba.njit(cache=True, **options)(function)
            return compiled
        finally:
            _set_numba_cache_dir(users_choice)

    return decorate


# ``numba.config`` creates its settings at import time, from the environment
# (``numba.core.config._readenv``), so numba's module has no declaration of them that a
# type checker can see: the two ignores below are for that, and only that.


def compiled_here(*functions: Any) -> bool:
    """Whether numba's on-disk cache on this machine holds an index for every function
    (dispatchers made by :func:`njit`): when not, their first call compiles them, seconds
    of waiting that a user should be told about once.

    The index file is named as numba names it (``module.qualname-line.pyXY.nbi``, in the
    dispatcher's ``stats.cache_path``); if numba ever names it otherwise, this says "not
    compiled" and the user reads one needless line, nothing worse.
    """
    version = f"py{sys.version_info.major}{sys.version_info.minor}"
    for function in functions:
        py_func = function.py_func
        module = py_func.__module__.rsplit(".", 1)[-1]
        name = f"{module}.{py_func.__qualname__}-{py_func.__code__.co_firstlineno}.{version}.nbi"
        if not os.path.isfile(os.path.join(function.stats.cache_path, name)):
            return False
    return True


def _numba_cache_dir() -> str:
    value: str = numba.config.CACHE_DIR  # type: ignore[attr-defined]
    return value


def _set_numba_cache_dir(value: str) -> None:
    numba.config.CACHE_DIR = value  # type: ignore[attr-defined]


def _user_id() -> str:
    return str(os.getuid()) if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
