"""The package's layers (dask_dppca/layers.py, CONTRIBUTING.md's "Layout"): no module imports
from a layer above it, the privacy layer imports no Dask, and that table says the same."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from dask_dppca.layers import FORBIDDEN_IMPORTS, LAYERS, MAX_MODULES_PER_FOLDER, ROOMS

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dask_dppca"


def layer(module: str, layers=LAYERS) -> int:
    """Index of the layer holding ``module`` (a dotted name inside the package)."""
    top = module.split(".")[0]
    (index,) = [i for i, (_, names, _) in enumerate(layers) if top in names]
    return index


def imports(path: Path, root: Path = PACKAGE) -> tuple[set[str], set[str]]:
    """``(package-relative names, outside top-level packages)`` imported anywhere in
    ``path`` (function bodies and TYPE_CHECKING blocks included), for ``path`` inside
    the package folder ``root``."""
    package = path.relative_to(root).with_suffix("").parts[:-1]
    inside, outside = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = list(package[: len(package) - node.level + 1])
            if node.module:
                inside.add(".".join(base + [node.module]))
                continue
            for alias in node.names:  # `from . import x`: a module x, or a name of the package
                is_module = (
                    root.joinpath(*base, alias.name).with_suffix(".py").exists()
                    or root.joinpath(*base, alias.name).is_dir()
                )
                inside.add(
                    ".".join(base + [alias.name]) if is_module else ".".join(base) or "__init__"
                )
        elif isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if name.startswith(f"{root.name}."):
                inside.add(name.removeprefix(f"{root.name}."))
            else:
                outside.add(name.split(".")[0])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(f"{root.name}."):
                    inside.add(alias.name.removeprefix(f"{root.name}."))
                else:
                    outside.add(alias.name.split(".")[0])
    return inside, outside


def violations(
    root: Path = PACKAGE, layers=LAYERS, forbidden=FORBIDDEN_IMPORTS
) -> tuple[list[str], int]:
    """The imports in ``root`` that go up a layer or reach a forbidden package, and how
    many imports were checked."""
    found, checked = [], 0
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        inside, outside = imports(path, root)
        for imported in sorted(inside):
            if imported in {"", "__init__"} or imported.startswith("__init__"):
                continue
            if layer(imported, layers) > layer(module, layers):
                found.append(f"{module} imports {imported} (a layer above)")
            checked += 1
        banned = forbidden.get(layers[layer(module, layers)][0], frozenset())
        for name in sorted(outside & banned):
            found.append(f"{module} imports {name} (forbidden in its layer)")
        checked += len(outside)
    return found, checked


def test_every_module_belongs_to_a_layer_and_imports_only_downwards():
    found, checked = violations()
    assert found == []
    assert checked > 100


def test_privacy_imports_no_dask_in_fact():
    """Importing the privacy layer alone loads neither dask nor distributed."""
    code = (
        "import sys, dask_dppca.privacy, dask_dppca.privacy.mechanisms.mechanism, "
        "dask_dppca.privacy.budget.charging; "
        "print(sorted(m for m in ('dask', 'distributed') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=True,
    ).stdout
    assert out.strip() == "[]"


def test_the_check_catches_an_upward_import_and_a_planted_distributed(tmp_path):
    """The same check on a tiny package: kernel imports privacy (up); privacy imports
    distributed (forbidden); privacy imports kernel (down, allowed)."""
    root = tmp_path / "dask_dppca"
    (root / "privacy").mkdir(parents=True)
    (root / "privacy" / "__init__.py").write_text("from ..kernel import helper\n\nx = 1\n")
    (root / "privacy" / "runner.py").write_text("def run():\n    import distributed\n")
    (root / "kernel.py").write_text("from .privacy import x\n\n\ndef helper():\n    return x\n")
    layers = (("kernel", frozenset({"kernel"}), ""), ("privacy", frozenset({"privacy"}), ""))
    forbidden = {"privacy": frozenset({"dask", "distributed"})}
    assert imports(root / "kernel.py", root) == ({"privacy"}, set())
    assert imports(root / "privacy" / "runner.py", root) == (set(), {"distributed"})
    found, _ = violations(root, layers, forbidden)
    assert found == [
        "kernel imports privacy (a layer above)",
        "privacy.runner imports distributed (forbidden in its layer)",
    ]
    assert layer("graph") > layer("kernel")
    assert layer("compute.trusted.release") > layer("privacy.mechanisms.mechanism")
    assert not layer("decomposition.estimator") <= layer("privacy.mechanisms.mechanism")


def test_the_readme_layer_table_is_the_package_s():
    """CONTRIBUTING.md's "Layout" table lists the layers of dask_dppca/layers.py, in order, and
    every top-level module of the package belongs to exactly one layer."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    names = [row.split("|")[1].strip() for row in rows[1:]]
    assert names == [name for name, _, _ in LAYERS]
    for row, (_, modules, _) in zip(rows[1:], LAYERS):
        listed = set(re.findall(r"`([a-z_]+)[/.]?(?:py)?`", row.split("|")[2]))
        assert listed == set(modules) - {"__init__", "__main__"}, row
    tops = {p.stem for p in PACKAGE.glob("*.py")} | {
        p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()
    }
    owners = [sum(top in modules for _, modules, _ in LAYERS) for top in tops]
    assert owners == [1] * len(tops), sorted(tops)


def _module_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package modules it imports (function bodies and TYPE_CHECKING too)."""
    paths = {
        ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
        for p in sorted(root.rglob("*.py"))
    }
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        targets = set()
        for name in imports(path, root)[0]:
            parts = name.removesuffix(".__init__").split(".")
            while parts and ".".join(parts) not in paths:
                parts.pop()  # `from .pkg.mod import name`: the module
            if parts and ".".join(parts) != module:
                targets.add(".".join(parts))
        graph[module] = targets
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle():
    """No circle: the result files' module reads and writes results without the
    estimator, which imports it (DPPCA.save, load_result)."""
    assert _circles(_module_graph()) == []
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_another_s_private_name():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                found += [
                    f"{path.relative_to(PACKAGE)}: {alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_") and not alias.name.startswith("__")
                ]
    assert found == []


def test_the_package_root_holds_at_most_six_modules_besides_init_and_main():
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert len(modules) <= 6, sorted(modules)


def test_no_file_over_700_lines_and_no_function_over_80():
    """Docstrings included: a long function does several jobs or documents a public API
    of too many parameters (analyze and plan_analysis take stage objects instead)."""
    big, long = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > 700:
            big.append(str(path.relative_to(PACKAGE)))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.end_lineno - node.lineno + 1 > 80:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    assert big == []
    assert long == []


def room_violations(root: Path = PACKAGE, rooms=ROOMS) -> tuple[list[str], int]:
    """Imports from a room of a layer to a room above it, or to the layer's modules
    beside its rooms; and how many imports between a layer's own modules were checked."""
    found, checked = [], 0
    for top, ordered in rooms.items():
        names = [name for name, _ in ordered]
        for path in sorted((root / top).rglob("*.py")):
            module = ".".join(path.relative_to(root).with_suffix("").parts)
            parts = module.split(".")
            if len(parts) < 3 or parts[1] not in names:
                continue  # beside the rooms: may import from any room
            for imported in sorted(imports(path, root)[0]):
                target = imported.split(".")
                if target[0] != top or len(target) < 2:
                    continue
                checked += 1
                if target[1] not in names:
                    if target[1] != "__init__":
                        found.append(f"{module} imports {imported} (beside the rooms)")
                elif names.index(target[1]) > names.index(parts[1]):
                    found.append(f"{module} imports {imported} (a room above)")
    return found, checked


def test_a_room_imports_only_from_its_own_room_and_those_below():
    found, checked = room_violations()
    assert found == []
    assert checked > 50


def test_room_check_sees_an_arrow_going_up(tmp_path):
    """The room check on a tiny package: mechanisms importing the budget is found."""
    root = tmp_path / "pkg"
    for room in ("mechanisms", "budget"):
        (root / "privacy" / room).mkdir(parents=True)
        (root / "privacy" / room / "__init__.py").write_text("")
    (root / "privacy" / "mechanisms" / "noise.py").write_text("from ..budget.ledger import x\n")
    (root / "privacy" / "budget" / "ledger.py").write_text("from ..mechanisms.noise import y\n")
    rooms = {"privacy": (("mechanisms", ""), ("budget", ""))}
    assert room_violations(root, rooms)[0] == [
        "privacy.mechanisms.noise imports privacy.budget.ledger (a room above)"
    ]


def test_no_folder_holds_more_than_the_most_modules_side_by_side():
    crowded = {
        str(folder.relative_to(PACKAGE)): count
        for folder in [PACKAGE, *[p for p in PACKAGE.rglob("*") if p.is_dir()]]
        if (count := len([p for p in folder.glob("*.py") if p.name != "__init__.py"]))
        > MAX_MODULES_PER_FOLDER
    }
    assert crowded == {}


def test_a_moved_module_s_old_path_still_imports_with_a_deprecation_warning():
    """The old path gives the new module itself (one class, not a copy) and warns once."""
    code = (
        "import warnings, sys\n"
        "warnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    import dask_dppca.privacy.noise as old\n"
        "    from dask_dppca.compute.placement import UntrustedReleaseWarning\n"
        "import dask_dppca.privacy.mechanisms.noise as new\n"
        "import dask_dppca.compute.trusted.placement as placement\n"
        "assert old is new, (old, new)\n"
        "assert UntrustedReleaseWarning is placement.UntrustedReleaseWarning\n"
        "messages = [str(w.message) for w in caught if w.category is DeprecationWarning]\n"
        "assert any('privacy.mechanisms.noise' in m for m in messages), messages\n"
        "assert any('compute.trusted.placement' in m for m in messages), messages\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
