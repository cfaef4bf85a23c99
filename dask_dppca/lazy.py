"""A package's public names imported on first use (PEP 562).

A Dask worker that unpickles one task function imports that function's package first.
An ``__init__`` importing every sibling would load, on a worker that only runs a
segment task, what the client-side siblings need: the graph builders' ``dask.array``
(with xarray, pandas and pyarrow when installed, about 100 MiB), the budget's scipy.
The packages below the shells therefore name their public objects in a table and import
each one's module when it is first asked for.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, table: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose public names are ``table``'s keys.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    table : mapping of str to str
        Public name -> the submodule defining it, relative (``".budget"``).
    """

    def __getattr__(name: str) -> Any:
        try:
            module = table[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(table))

    return __getattr__, __dir__
