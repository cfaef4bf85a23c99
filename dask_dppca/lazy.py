"""A package's public names imported on first use (PEP 562).

A Dask worker that unpickles one task function imports that function's package first.
An ``__init__`` importing every sibling would load, on a worker that only runs a
segment task, what the client-side siblings need: the graph builders' ``dask.array``
(with xarray, pandas and pyarrow when installed, about 100 MiB), the budget's scipy.
The packages below the shells therefore name their public objects in a table and import
each one's module when it is first asked for.

:func:`moved_modules` keeps a module's old path importing, with a DeprecationWarning,
after it moved inside its package.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

__all__ = ["lazy_exports", "moved_modules"]


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


def moved_modules(package: str, moved: Mapping[str, str], *, removed_in: str) -> None:
    """Keep ``package.<old>`` importing after the module moved to ``package.<new>``.

    ``import package.old`` (and ``from package.old import x``) warns once with a
    DeprecationWarning naming the new path and gives the new module itself (the same
    object: a class defined there is the same class).

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    moved : mapping of str to str
        Old submodule name -> its new dotted path below ``package``.
    removed_in : str
        The release in which the old paths stop importing (said in the warning).
    """
    finder = _MovedModules(package, dict(moved), removed_in)
    if not any(getattr(f, "package", None) == package for f in sys.meta_path):
        sys.meta_path.append(finder)


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A finder and loader of a package's moved modules' old names (:func:`moved_modules`)."""

    def __init__(self, package: str, moved: dict[str, str], removed_in: str) -> None:
        self.package, self.moved, self.removed_in = package, moved, removed_in

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        head, _, name = fullname.rpartition(".")
        if head != self.package or name not in self.moved:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = f"{self.package}.{self.moved[spec.name.rpartition('.')[2]]}"
        warnings.warn(
            f"{spec.name} moved to {new}; the old path stops importing in {self.removed_in}",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module is the new one, already imported."""
