"""The parts a release's cost is stated in: checked values, and a lossless record."""

import math

import pytest

from dask_dppca.privacy.mechanisms.parts import (
    ApproxDPPart,
    GaussianPart,
    PureDPPart,
    part_from_dict,
    part_to_dict,
)

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("part", [GaussianPart(0.7), PureDPPart(0.25), ApproxDPPart(0.5, 1e-9)])
def test_a_part_survives_its_record(part):
    record = part_to_dict(part)
    assert record["kind"] in {"gaussian", "pure", "approximate"}
    assert part_from_dict(record) == part


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda: GaussianPart(0.0), "mu"),
        (lambda: GaussianPart(math.inf), "mu"),
        (lambda: PureDPPart(-1.0), "epsilon"),
        (lambda: ApproxDPPart(math.nan, 1e-6), "epsilon"),
        (lambda: ApproxDPPart(1.0, 0.0), "delta"),
        (lambda: part_from_dict({"kind": "laplace", "epsilon": 1.0}), "kind"),
    ],
)
def test_a_bad_part_names_its_parameter(build, name):
    with pytest.raises(ValueError, match=rf"^{name}:"):
        build()
