"""The one sampler factory (privacy/mechanisms/contract.py, make_sampler).

Every noise source of the package is made there: no other module constructs a sampler
class or calls the deprecated helpers (an AST scan, which finds a planted construction),
and a seeded source draws exactly what the class it stands for draws.
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import numpy as np
import pytest

import dask_dppca
from dask_dppca.privacy import make_sampler
from dask_dppca.privacy.mechanisms.contract import SAMPLER_KINDS
from dask_dppca.privacy.mechanisms.laplace import (
    DiscreteLaplaceSampler,
    SeededDiscreteLaplace,
    SeededSelector,
    integer_noise,
    opendp_selector,
)
from dask_dppca.privacy.mechanisms.noise import (
    LatticeSampler,
    NonPrivateRandomStateWarning,
    OpenDPSampler,
    SeededSampler,
    default_sampler,
)

PACKAGE = Path(dask_dppca.__file__).parent

#: What makes a noise source: the classes, and the deprecated helpers.
MAKERS = {
    "OpenDPSampler",
    "LatticeSampler",
    "SeededSampler",
    "DiscreteLaplaceSampler",
    "SeededDiscreteLaplace",
    "SeededSelector",
    "default_sampler",
    "integer_noise",
}
#: The only functions allowed to call one: the factory (through its table) and the
#: deprecated helpers, which keep the factory's rule until their removal.
ALLOWED = {
    ("privacy/mechanisms/contract.py", "_sized_gaussian"),
    ("privacy/mechanisms/contract.py", "<module>"),  # the kinds' table
    ("privacy/mechanisms/noise.py", "default_sampler"),
    ("privacy/mechanisms/laplace.py", "integer_noise"),
}


def constructions(root: Path = PACKAGE) -> list[str]:
    """``path:function:name`` of every use of a sampler maker outside :data:`ALLOWED`:
    a call, or a bare reference (a class handed to a table makes samplers as well).
    """
    found = set()
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text())
        for function, node in _named_nodes(tree, "<module>"):
            name = getattr(node, "id", None) or getattr(node, "attr", None)
            if name in MAKERS and (relative, function) not in ALLOWED:
                found.add(f"{relative}:{function}:{name}")
    return sorted(found)


def _named_nodes(node: ast.AST, function: str):
    """``(enclosing function, node)`` of every Name and Attribute below ``node``."""
    for child in ast.iter_child_nodes(node):
        inner = (
            child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else function
        )
        if isinstance(child, ast.Name | ast.Attribute):
            yield function, child
        yield from _named_nodes(child, inner)


def test_no_module_but_the_factory_makes_a_sampler():
    assert constructions() == []


def test_the_scan_finds_a_planted_construction(tmp_path):
    (tmp_path / "stage.py").write_text(
        "from x import SeededSampler, noise\n"
        "def run(seed):\n"
        "    return SeededSampler(seed), noise.integer_noise(seed)\n"
    )
    assert constructions(tmp_path) == ["stage.py:run:SeededSampler", "stage.py:run:integer_noise"]


def test_private_kinds_are_the_release_samplers():
    assert isinstance(make_sampler("gaussian", n_entries=528), OpenDPSampler)
    assert make_sampler("gaussian", n_entries=528).lattice_bits == 40
    assert isinstance(make_sampler("gaussian", n_entries=1000 * 1001 // 2), LatticeSampler)
    assert make_sampler("exact_gaussian").lattice_bits is None
    assert isinstance(make_sampler("discrete_laplace"), DiscreteLaplaceSampler)
    assert make_sampler("noisy_max") is opendp_selector
    assert SAMPLER_KINDS == ("gaussian", "exact_gaussian", "discrete_laplace", "noisy_max")
    with pytest.raises(ValueError, match="n_entries"):
        make_sampler("gaussian")
    with pytest.raises(ValueError, match="kind"):
        make_sampler("laplace")  # type: ignore[call-overload]


def test_seeded_kinds_warn_and_draw_what_the_classes_draw():
    """Bitwise: the factory's seeded source is the class it replaced, same seed, same draws."""
    values = np.zeros(6)
    scores = np.array([3, 1, 4, 1, 5], dtype=np.int64)
    with pytest.warns(NonPrivateRandomStateWarning):
        gaussian, laplace, select = (
            make_sampler("gaussian", 7),
            make_sampler("discrete_laplace", 7),
            make_sampler("noisy_max", 7),
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonPrivateRandomStateWarning)
        np.testing.assert_array_equal(
            gaussian.add_noise(values, 2.0), SeededSampler(7).add_noise(values, 2.0)
        )
        np.testing.assert_array_equal(laplace.draw(5, 9), SeededDiscreteLaplace(7).draw(5, 9))
        rng = np.random.default_rng(7)  # the scree stage's selector before the factory
        expected = int(np.argmax(scores.astype(np.float64) + rng.gumbel(0.0, 1.5, 5)))
        assert select(scores, 3.0) == expected
        assert isinstance(select, SeededSelector) and not select.is_private


def test_the_deprecated_helpers_warn_and_agree_with_the_factory():
    for n in (528, 1000 * 1001 // 2):
        with pytest.deprecated_call():
            old = default_sampler(n)
        assert repr(old) == repr(make_sampler("gaussian", n_entries=n))
    with pytest.deprecated_call():
        assert isinstance(integer_noise(None), DiscreteLaplaceSampler)
