"""The package's layers (README, "Layout"): no module imports from a layer above it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dask_dppca"
#: Lowest first.  A module may import its own layer and the ones before it.
LAYERS = [
    {"validation", "datasets"},
    {"transforms", "kernel", "exact_sum", "jit"},
    {"cluster", "progress"},
    {"design", "io", "graph"},
    {"privacy"},
    {"estimator", "theory", "cli", "__init__", "__main__"},
]


def layer(module: str) -> int:
    top = module.split(".")[0]
    (index,) = [i for i, names in enumerate(LAYERS) if top in names]
    return index


def imports(path: Path, root: Path = PACKAGE) -> set[str]:
    """Package-relative names imported anywhere in ``path`` (function bodies included), for
    ``path`` inside the package folder ``root``."""
    package = path.relative_to(root).with_suffix("").parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = list(package[: len(package) - node.level + 1])
            if node.module:
                found.add(".".join(base + [node.module]))
                continue
            for alias in node.names:  # `from . import x`: a module x, or a name of the package
                is_module = root.joinpath(*base, alias.name).with_suffix(".py").exists() or \
                    root.joinpath(*base, alias.name).is_dir()
                found.add(".".join(base + [alias.name]) if is_module else ".".join(base) or "__init__")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(f"{root.name}."):
            found.add(node.module.removeprefix(f"{root.name}."))
    return found


def upward_imports(root: Path = PACKAGE) -> tuple[list[str], int]:
    """The imports in ``root`` that go up a layer, and how many imports were checked."""
    upward, checked = [], 0
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        for imported in sorted(imports(path, root)):
            if imported in {"", "__init__"} or imported.startswith("__init__"):
                continue
            if layer(imported) > layer(module):
                upward.append(f"{module} imports {imported} (a layer above)")
            checked += 1
    return upward, checked


def test_every_module_belongs_to_a_layer_and_imports_only_downwards():
    upward, checked = upward_imports()
    assert upward == []
    assert checked > 30


def test_the_check_catches_an_upward_import(tmp_path):
    """The same check on a tiny package: kernel imports privacy (up), privacy kernel (down)."""
    root = tmp_path / "dask_dppca"
    (root / "privacy").mkdir(parents=True)
    (root / "privacy" / "__init__.py").write_text("from ..kernel import helper\n\nx = 1\n")
    (root / "kernel.py").write_text("from .privacy import x\n\n\ndef helper():\n    return x\n")
    assert imports(root / "kernel.py", root) == {"privacy"}
    assert imports(root / "privacy" / "__init__.py", root) == {"kernel"}
    assert upward_imports(root) == (["kernel imports privacy (a layer above)"], 2)
    assert layer("graph") > layer("kernel")
    assert layer("privacy.runner") > layer("graph")
    assert not layer("estimator") <= layer("privacy.mechanism")
