"""One conformance class that every NoiseSampler passes (after zarr's store tests).

A new sampler gets its test class by subclassing :class:`NoiseSamplerConformance` and
saying how to build it; every claim the release relies on is then checked for it: the
vecd law (statistical, paired with broken laws in test_noise.py), exact symmetry,
validation, pickling (it travels to the trusted worker), its privacy flag and where its
randomness comes from, and a non-negative slack and excess.  Seeds here are TEST-ONLY.
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest

from dask_dppca.privacy.mechanisms.noise import (
    LatticeSampler,
    NoiseSampler,
    NonPrivateRandomStateWarning,
    OpenDPSampler,
    SeededSampler,
    add_symmetric_noise,
)
from tests.privacy.test_noise import MATRIX, draw_many, law_rejected


class NoiseSamplerConformance:
    """Checks every sampler must pass; subclasses set ``make`` and ``law_draws``."""

    #: Draws of the 4 x 4 test matrix for the law check (more for coarser samplers).
    law_draws = 1500
    private = True

    def make(self) -> NoiseSampler:
        raise AssertionError("subclasses say how to build their sampler")

    @pytest.mark.statistical
    def test_symmetric_noise_has_the_vecd_law(self):
        sampler, sigma = self.make(), 0.05
        draws = draw_many(lambda m: add_symmetric_noise(m, sigma, sampler), self.law_draws)
        assert np.array_equal(draws, np.transpose(draws, (0, 2, 1)))  # exactly symmetric
        assert not law_rejected(draws, MATRIX, sigma)

    def test_add_noise_validates(self):
        sampler = self.make()
        with pytest.raises(ValueError, match="sigma"):
            sampler.add_noise(np.zeros(3), float("nan"))
        with pytest.raises(ValueError, match="sigma"):
            sampler.add_noise(np.zeros(3), 0.0)
        with pytest.raises(ValueError, match="values"):
            sampler.add_noise(np.array([0.0, np.inf]), 1.0)
        with pytest.raises(ValueError, match="values"):
            sampler.add_noise(np.zeros((2, 2)), 1.0)
        assert sampler.add_noise(np.zeros(0), 1.0).shape == (0,)

    def test_keeps_its_input_and_returns_finite_values(self):
        x = np.linspace(-1, 1, 7)
        kept = x.copy()
        out = self.make().add_noise(x, 0.3)
        np.testing.assert_array_equal(x, kept)
        assert out.shape == x.shape and np.all(np.isfinite(out)) and not np.array_equal(out, x)

    def test_pickles(self):
        sampler = self.make()
        clone = pickle.loads(pickle.dumps(sampler))
        assert repr(clone) == repr(sampler)
        assert clone.add_noise(np.zeros(3), 1.0).shape == (3,)

    def test_privacy_flag_and_randomness(self):
        sampler = self.make()
        assert sampler.is_private is self.private
        x = np.zeros(50)
        np.random.seed(0)  # numpy's global state must not make a private sampler repeat
        first = self.make().add_noise(x, 1.0)
        np.random.seed(0)
        second = self.make().add_noise(x, 1.0)
        assert np.array_equal(first, second) is not self.private

    def test_slack_and_excess_are_finite_and_non_negative(self):
        sampler = self.make()
        for n_entries, sigma in [(1, 1e-6), (10, 1.0), (4_501_500, 1e3)]:
            slack = sampler.sensitivity_slack(n_entries, sigma)
            excess = sampler.privacy_excess(n_entries, sigma)
            assert 0.0 <= slack < 1e-6 * sigma * np.sqrt(n_entries) + 1e-300
            assert 0.0 <= excess < 1e-6


class TestOpenDPSampler(NoiseSamplerConformance):
    def make(self):
        return OpenDPSampler()


class TestOpenDPSamplerOnACoarseGrid(NoiseSamplerConformance):
    def make(self):
        return OpenDPSampler(lattice_bits=40)


class TestLatticeSampler(NoiseSamplerConformance):
    law_draws = 3000

    def make(self):
        return LatticeSampler()


class TestSeededSampler(NoiseSamplerConformance):
    """NOT private: conforms to the law, and says it is not private."""

    law_draws = 3000
    private = False

    def make(self):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NonPrivateRandomStateWarning)
            return SeededSampler(7)


def test_every_sampler_in_the_package_has_a_conformance_class():
    tested = {type(cls().make()) for cls in NoiseSamplerConformance.__subclasses__()}
    assert tested == set(_concrete(NoiseSampler))


def _concrete(base: type) -> list[type]:
    found = []
    for sub in base.__subclasses__():
        if not getattr(sub, "__abstractmethods__", None) and sub.__module__.startswith(
            "dask_dppca"
        ):
            found.append(sub)
        found += _concrete(sub)
    return found
