"""One conformance class that every mechanism passes (as test_sampler_conformance.py does
for the samplers); docs/privacy.md, "The mechanism contract".

A mechanism's test class subclasses :class:`MechanismConformance` and says how to build
the mechanism, how its exact statistic follows from data, how the change between two
exact statistics is measured in the units of its claimed sensitivity, the worst-case
neighbours its black-box audit releases on, and how its noise is halved.  Every claim the
budget and the report rely on is then checked for it:

(a) it is a :class:`~dask_dppca.privacy.mechanisms.contract.Mechanism` and its parts are
    privacy parts;
(b) what a budget charges (:func:`~dask_dppca.privacy.mechanisms.charges.charge_of`, and
    the ledger row) is exactly its parts;
(c) hostile neighbours (one record replaced by +-1e300, +-inf, NaN, 1e-300, a subnormal,
    a far record on another axis) move the exact statistic by at most the claimed
    sensitivity, and by more than half of it (so a halved claim fails);
(d) the black-box audit (tests/privacy/audit_tools.py) on neighbours at the claimed
    sensitivity certifies no more than the claim, and certifies more for the same
    mechanism with half its noise (its sensitivity halved);
(e) ``describe()`` is JSON and holds what the privacy table reads: the sensitivity, the
    noise scale (:data:`~dask_dppca.privacy.mechanisms.contract.NOISE_KEYS`) and its parts'
    parameters;
and ``release`` takes the one signature ``release(exact, sampler=None)``.

A composite (the frame, the score map: releases one after another, each from values
released before) subclasses :class:`CompositeConformance`: its parts are its
sub-mechanisms' parts, each sub-mechanism has its own class here.

Seeds make TEST DATA only; the audited noise comes from the real samplers (OpenDP, OS
entropy).  Each audit is flagged for a correct mechanism with probability <= 1e-3
(Clopper-Pearson, audit_tools.ALPHA).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import math
import pkgutil
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dask_dppca as dd
import dask_dppca.privacy
from dask_dppca.kernel.score_stats import count_at_most, group_codes, histogram_counts
from dask_dppca.kernel.scree_stats import (
    block_histograms,
    block_sums,
    grid_values,
    scree_design,
    summation_slack,
)
from dask_dppca.privacy.budget.privacy_budget import GaussianCharge, PrivacyBudget, charge_of
from dask_dppca.privacy.mechanisms.contract import NOISE_KEYS, CompositeMechanism, Mechanism
from dask_dppca.privacy.mechanisms.frame import Frame, FrameMechanism
from dask_dppca.privacy.mechanisms.histogram import AdditiveHistogram, GroupCounts, SparseHistogram
from dask_dppca.privacy.mechanisms.laplace import DiscreteLaplaceSampler, IntegerNoise
from dask_dppca.privacy.mechanisms.median import CoordinateMedian
from dask_dppca.privacy.mechanisms.noise import OpenDPSampler
from dask_dppca.privacy.mechanisms.parts import ApproxDPPart, GaussianPart, PureDPPart
from dask_dppca.privacy.mechanisms.quantile import PrivateQuantile
from dask_dppca.privacy.mechanisms.scale import LEVELS, RobustScale
from dask_dppca.privacy.mechanisms.score_map import ScoreMapMechanism
from dask_dppca.privacy.mechanisms.scree import GaussianStatistic, PairQuantiles, huber_ranges
from tests.privacy.audit_tools import audit, epsilon_bound, mu_bound
from tests.releases import mechanism_for

pytestmark = pytest.mark.filterwarnings(
    "ignore::dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning"
)

SQRT2 = math.sqrt(2.0)
#: What one record is replaced by (docs/privacy.md gives each its bounded treatment).
HOSTILE = {
    "+1e300": 1e300,
    "-1e300": -1e300,
    "+inf": math.inf,
    "-inf": -math.inf,
    "nan": math.nan,
    "1e-300": 1e-300,
    "subnormal": 5e-324,
    "zero": 0.0,
}
#: Both neighbours hostile: the record goes from one extreme to another.
HOSTILE_PAIRS = [("+1e300", "-1e300"), ("nan", "+inf"), ("1e-300", "-1e300"), ("-inf", "zero")]


def base_data(n: int, width: int) -> dict[str, np.ndarray]:
    """Data sets the changed record is hostile to: a tight cluster at 0 (one far record
    moves every pair it is in), a spread, and ties (most records equal)."""
    rng = np.random.default_rng(20261206)  # test data only
    ties = np.zeros((n, width))
    ties[: n // 4] = rng.integers(0, 3, size=(n // 4, width))
    return {
        "cluster": 1e-6 * rng.standard_normal((n, width)),
        "spread": rng.standard_normal((n, width)),
        "ties": ties,
    }


def hostile_neighbours(base: np.ndarray, row: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Replace-one neighbours of ``base``: record ``row`` replaced by each hostile value,
    from one hostile value to another, and (for two columns or more) a far record moved to
    another axis."""
    cases = {}
    for name, value in HOSTILE.items():
        other = base.copy()
        other[row] = value
        cases[f"to {name}"] = (base, other)
    for a, b in HOSTILE_PAIRS:
        s, t = base.copy(), base.copy()
        s[row], t[row] = HOSTILE[a], HOSTILE[b]
        cases[f"{a} to {b}"] = (s, t)
    if base.ndim == 2 and base.shape[1] > 1:
        s, t = base.copy(), base.copy()
        s[row], t[row] = 0.0, 0.0
        s[row, 0], t[row, 1] = 1e6, 1e6
        cases["far, to another axis"] = (s, t)
    return cases


def charged_parts(charge: Any) -> tuple:
    """The parts a charge composes (a Gaussian charge: its one Gaussian part)."""
    if isinstance(charge, GaussianCharge):
        return (GaussianPart(charge.sensitivity / charge.sigma),)
    return tuple(charge.parts)


def _budget_charges(mechanism: Any) -> tuple:
    """The parts a budget's ledger row records for ``mechanism``."""
    budget = PrivacyBudget(50.0, 0.1)
    budget.spend(mechanism, label="conformance")
    (row,) = budget.spent
    return tuple(row.parts) or (GaussianPart(row.mu),)


class MechanismConformance:
    """Checks every mechanism must pass; subclasses fill in the hooks below."""

    #: Records and columns of the hostile data sets.
    n_records, width = 40, 3
    #: (choosing, certifying) draws per neighbour: the audit of the mechanism, and of its
    #: version with half the noise.
    audit_sizes = (300, 1000)
    broken_audit_sizes = (300, 1000)

    def make(self) -> Mechanism:
        raise AssertionError("subclasses say how to build their mechanism")

    def audited(self) -> Mechanism:
        """The mechanism the audit releases (:meth:`make`'s by default)."""
        return self.make()

    def noise(self) -> Any:
        """The noise source ``release`` is given (None: the mechanism binds its own)."""
        return None

    def other_noise(self) -> Any:
        """A noise source the mechanism must refuse (one binding its own only)."""
        raise AssertionError("subclasses binding their noise say what they refuse")

    def exact_of(self, mechanism: Any, data: np.ndarray) -> Any:
        """The exact statistic of ``data``."""
        raise AssertionError("subclasses say how their exact statistic follows from data")

    def change(self, mechanism: Any, exact: Any, other: Any) -> Any:
        """The change between two exact statistics, in the claim's units."""
        raise AssertionError("subclasses say how the change is measured")

    def claimed(self, mechanism: Any) -> Any:
        """The claimed sensitivity (describe()'s by default)."""
        return np.asarray(mechanism.describe()["sensitivity"], dtype=float)

    def audit_draws(self, mechanism: Any) -> Callable[[int, int], np.ndarray]:
        """``draw(side, n)``: a scalar statistic of ``n`` releases on worst-case neighbour
        ``side`` (0 or 1), exact statistics at the claimed sensitivity."""
        raise AssertionError("subclasses say how they are audited")

    def audit_bound(self, mechanism: Any) -> tuple[Callable, float]:
        """The bound the audit certifies, and the claim it is compared with."""
        (part,) = set(mechanism.parts)
        if isinstance(part, GaussianPart):
            return mu_bound, part.mu
        delta = getattr(part, "delta", 0.0)
        return (lambda a, b, t: epsilon_bound(a, b, t, delta)), part.epsilon

    def broken_audit_draws(self, broken: Any) -> Callable[[int, int], np.ndarray]:
        """The audit's draws from the version with half the noise (:meth:`audit_draws`'s)."""
        return self.audit_draws(broken)

    def half_noise(self, mechanism: Any) -> Any:
        """BROKEN on purpose: the same mechanism with its noise calibrated to half the
        sensitivity (the same parts claimed)."""
        raise AssertionError("subclasses say how their noise is halved")

    # -- (a) the contract ------------------------------------------------------------------

    def test_is_a_mechanism_with_privacy_parts(self):
        mechanism = self.make()
        assert isinstance(mechanism, Mechanism)
        assert isinstance(mechanism.parts, tuple) and mechanism.parts
        assert all(isinstance(p, (GaussianPart, PureDPPart, ApproxDPPart)) for p in mechanism.parts)

    def test_release_takes_the_one_signature(self):
        mechanism = self.make()
        exact = self.exact_of(mechanism, base_data(self.n_records, self.width)["spread"])
        assert mechanism.release(exact, self.noise()) is not None
        if self.noise() is None:  # binds its own: refuses another
            with pytest.raises(ValueError, match="sampler"):
                mechanism.release(exact, self.other_noise())
        else:  # binds none: needs one
            with pytest.raises(TypeError, match="sampler"):
                mechanism.release(exact)

    # -- (b) charge equals parts -----------------------------------------------------------

    def test_the_charge_is_exactly_its_parts(self):
        mechanism = self.make()
        assert charged_parts(charge_of(mechanism)) == mechanism.parts
        assert _budget_charges(mechanism) == mechanism.parts

    # -- (c) hostile neighbours ------------------------------------------------------------

    def neighbours(self, mechanism: Any) -> dict[str, tuple[Any, Any]]:
        cases = {}
        for name, base in base_data(self.n_records, self.width).items():
            for case, (s, t) in hostile_neighbours(base).items():
                cases[f"{name}: {case}"] = (
                    self.exact_of(mechanism, s),
                    self.exact_of(mechanism, t),
                )
        return cases

    def test_hostile_neighbours_stay_within_the_claimed_sensitivity(self):
        mechanism = self.make()
        claimed = self.claimed(mechanism)
        for name, (a, b) in self.neighbours(mechanism).items():
            change = np.asarray(self.change(mechanism, a, b), dtype=float)
            assert np.all(change <= claimed), (name, change, claimed)

    def test_hostile_neighbours_reach_more_than_half_the_claim(self):
        """So a claim of half the sensitivity fails the test above."""
        mechanism = self.make()
        claimed = self.claimed(mechanism)
        worst = max(
            float(np.max(np.asarray(self.change(mechanism, a, b)) / claimed))
            for a, b in self.neighbours(mechanism).values()
        )
        assert worst > 0.5, worst

    # -- (d) the black-box audit -----------------------------------------------------------

    @pytest.mark.statistical
    def test_the_audit_certifies_no_more_than_the_claim(self):
        mechanism = self.audited()
        bound, claim = self.audit_bound(mechanism)
        certified = audit(self.audit_draws(mechanism), *self.audit_sizes, bound)
        assert certified < claim, (certified, claim)

    @pytest.mark.statistical
    def test_the_audit_catches_half_the_noise(self):
        mechanism = self.audited()
        bound, claim = self.audit_bound(mechanism)
        broken = self.half_noise(mechanism)
        certified = audit(self.broken_audit_draws(broken), *self.broken_audit_sizes, bound)
        assert certified > claim, (certified, claim)

    # -- (e) what the privacy table reads ----------------------------------------------------

    def test_describe_holds_what_the_privacy_table_reads(self):
        mechanism = self.make()
        record = mechanism.describe()
        json.dumps(record, allow_nan=False)
        assert "sensitivity" in record
        assert any(key in record for key in NOISE_KEYS), sorted(record)
        guarantee = {GaussianPart: "mu-GDP", PureDPPart: "epsilon-DP", ApproxDPPart: None}
        for part in set(mechanism.parts):
            if isinstance(part, GaussianPart):
                mu = record["mu"] if "mu" in record else record["sensitivity"] / record["sigma"]
                assert mu == pytest.approx(part.mu, rel=1e-12)
            else:
                assert record["epsilon"] == part.epsilon
                assert record.get("delta", 0.0) == getattr(part, "delta", 0.0)
            if "guarantee" in record and guarantee[type(part)] is not None:
                assert record["guarantee"] == guarantee[type(part)]


class CompositeConformance:
    """Checks every composite mechanism must pass."""

    def make(self) -> CompositeMechanism:
        raise AssertionError("subclasses say how to build their composite")

    def test_is_a_composite_of_mechanisms(self):
        composite = self.make()
        assert isinstance(composite, CompositeMechanism)
        assert not isinstance(composite, Mechanism)  # no single release: it has steps
        assert composite.mechanisms
        tested = _tested_types()
        for name, mechanism in composite.mechanisms.items():
            assert isinstance(mechanism, Mechanism), name
            assert type(mechanism) in tested, name

    def test_the_charge_is_exactly_the_parts_of_its_mechanisms(self):
        composite = self.make()
        parts = tuple(p for m in composite.mechanisms.values() for p in m.parts)
        assert composite.parts == parts
        assert charged_parts(charge_of(composite)) == parts
        assert _budget_charges(composite) == parts

    def test_describe_holds_every_mechanism_record(self):
        composite = self.make()
        record = composite.describe()
        json.dumps(record, allow_nan=False)
        nested = list(_values(record))
        for name, mechanism in composite.mechanisms.items():
            assert mechanism.describe() in nested, name


def _values(record: Any):
    """Every dictionary nested in ``record``."""
    if isinstance(record, dict):
        yield record
        for value in record.values():
            yield from _values(value)


# -- the g-DPPCA release -------------------------------------------------------------------


class TestReleaseMechanism(MechanismConformance):
    """The noisy Kendall matrix: l2 (Frobenius) sensitivity of K_hat = sum / |P|."""

    n_records, width = 40, 6

    def make(self):
        planned = mechanism_for(self.n_records, self.width, 1.0, OpenDPSampler())
        return dataclasses.replace(planned, sigma=planned.sensitivity)  # mu = 1

    def other_noise(self):
        return OpenDPSampler()

    def exact_of(self, mechanism, data):
        return dd.kendall_matrix(data, scheduler="synchronous") * mechanism.plan.n_pairs

    def change(self, mechanism, exact, other):
        return np.linalg.norm(exact - other) / mechanism.plan.n_pairs

    def audit_draws(self, mechanism):
        """Every vecd entry is its own neighbour pair: side 1 moves each entry so that its
        matrix moves by the sensitivity in Frobenius norm (a diagonal entry by s, an
        off-diagonal pair by s / sqrt 2 each); each entry's noise is independent of the
        others', so one release gives d (d + 1) / 2 draws of the optimal test's statistic
        (the entry over its noise's scale)."""
        d, s = self.width, mechanism.sensitivity
        shift = np.full((d, d), s / SQRT2)
        np.fill_diagonal(shift, s)
        rows, cols = np.triu_indices(d, 1)

        def draw(side, n):
            out: list[float] = []
            exact = side * shift * mechanism.plan.n_pairs
            while len(out) < n:
                r = mechanism.release(exact)
                k = r.components.T @ (r.eigenvalues[:, None] * r.components)
                out.extend(np.diag(k))
                out.extend(SQRT2 * (k[rows, cols] + k[cols, rows]) / 2.0)
            return np.array(out[:n])

        return draw

    def half_noise(self, mechanism):
        return dataclasses.replace(mechanism, sigma=mechanism.sigma / 2.0)


# -- the scree statistics ------------------------------------------------------------------

SCREE_N = 256
SCREE_CLIP, SCREE_UPPER = np.array([1.0, 2.0, 3.0]), np.array([0.5, 4.0])
SCREE_CENTRE, SCREE_TAU = np.array([0.1, 1.0]), np.array([0.2, 2.0])


def _scree_directions() -> np.ndarray:
    rng = np.random.default_rng(20261201)  # test data only
    return np.linalg.qr(rng.standard_normal((3, 2)))[0].T


class _HalfNoiseStatistic(GaussianStatistic):
    """BROKEN on purpose: half the noise it claims."""

    @property
    def sigma(self) -> float:
        return super().sigma / 2.0


class TestGaussianStatistic(MechanismConformance):
    """The scree sums (clipped with the trace, winsorized, Huber): each entry moves by at
    most its own sensitivity."""

    n_records, width = SCREE_N, 3

    def make(self):
        n_pairs, degree = scree_design((SCREE_N,))
        ranges = np.concatenate([SCREE_CLIP, SCREE_UPPER, huber_ranges(SCREE_CENTRE, SCREE_TAU)])
        return GaussianStatistic(
            "all",
            tuple(float(r) for r in ranges),
            1.0,
            n_pairs,
            degree,
            summation_slack(n_pairs, 1),
            OpenDPSampler(),
        )

    def other_noise(self):
        return OpenDPSampler()

    def exact_of(self, mechanism, data):
        v = _scree_directions()
        return block_sums(data, v, SCREE_CLIP, SCREE_UPPER, SCREE_CENTRE, SCREE_TAU).to_float()

    def change(self, mechanism, exact, other):
        return np.abs(exact - other)

    def claimed(self, mechanism):
        return mechanism.sensitivities  # in the sums' units (describe(): the means')

    def audit_draws(self, mechanism):
        """Every entry moved by its full sensitivity; the statistic is the optimal test's,
        the scaled entries' sum."""
        sens, m = mechanism.sensitivities, len(mechanism.ranges)

        def draw(side, n):
            exact = side * sens
            return np.array(
                [
                    float(np.sum(mechanism.release(exact) * mechanism.n_pairs / sens))
                    / math.sqrt(m)
                    for _ in range(n)
                ]
            )

        return draw

    def half_noise(self, mechanism):
        fields = {f.name: getattr(mechanism, f.name) for f in dataclasses.fields(mechanism)}
        return _HalfNoiseStatistic(**fields)


class _HalfScaleQuantiles(PairQuantiles):
    """BROKEN on purpose: the noisy max at half its claimed scale."""

    @property
    def scale(self) -> float:
        return super().scale / 2.0


class TestPairQuantiles(MechanismConformance):
    """The scree quantiles: every utility moves by at most ``b D``."""

    n_records, width = SCREE_N, 3
    #: Each release draws a noisy max over the whole grid (about 10 ms), and the output
    #: takes two values (so little to choose): few draws for the audit of the release (its
    #: false alarm stays <= 1e-3 whatever the size).  Half the noise needs 1000 draws or
    #: more to certify above the claim (1.2 to 1.3 against 1 measured at 1000, epsilon = 1
    #: the best epsilon for it): those come from the two candidates that matter
    #: (:meth:`broken_audit_draws`).  The threshold is chosen on 300 of them: on 30 it
    #: missed once in 12 runs (certified 0); on 300, 12 runs certified 1.27 to 1.36.
    audit_sizes = (20, 100)
    broken_audit_sizes = (300, 2000)

    def make(self):
        n_pairs, degree = scree_design((SCREE_N,))
        return PairQuantiles(((0.5, 0.9), (0.5,), (0.5,)), 1.0, n_pairs, degree)

    def other_noise(self):
        return lambda scores, scale: 0

    def exact_of(self, mechanism, data):
        return block_histograms(data, _scree_directions())

    def change(self, mechanism, exact, other):
        return max(
            int(np.max(np.abs(mechanism.utilities(a, q) - mechanism.utilities(b, q))))
            for a, b, levels in zip(exact, other, mechanism.levels)
            for q in levels
        )

    def audit_draws(self, mechanism):
        """One row at the median: two adjacent bins hold all the pairs, ``M +- D`` on one
        side and ``M -+ D`` on the other, so the two candidates' utilities swap between 0
        and ``-2 D = -b D`` (the claimed sensitivity) and every other candidate is far
        below.  The statistic is the released value."""
        grid = grid_values()
        degree, j = mechanism.max_degree, grid.size // 2
        m = 1000 * degree

        def histogram(sign):
            row = np.zeros(grid.size, dtype=np.int64)
            row[j], row[j + 1] = m + sign * degree, m - sign * degree
            return row[None, :]

        exact = (histogram(1), histogram(-1))

        def draw(side, n):
            return np.array([mechanism.release(exact[side])[0][0] for _ in range(n)])

        return draw

    def broken_audit_draws(self, broken):
        """The same neighbours, the noisy max drawn by the mechanism's own selector at its
        own scale over the two candidates that hold the pairs: every other candidate's
        utility is ``-2000 D`` against a scale of ``4 D / epsilon``, so leaving them out
        changes the output's law by less than ``G e^-500`` (and each release costs 0.6 ms
        instead of 10)."""
        grid = grid_values()
        j = grid.size // 2
        full = self.audit_draws(broken)
        assert set(full(0, 5)) <= {grid[j], grid[j + 1]}  # the release picks one of the two
        degree, m = broken.max_degree, 1000 * broken.max_degree
        rows = [np.zeros(grid.size, dtype=np.int64) for _ in range(2)]
        for row, sign in zip(rows, (1, -1)):
            row[j], row[j + 1] = m + sign * degree, m - sign * degree
        utilities = [broken.utilities(row, broken.levels[0][0])[j : j + 2] for row in rows]

        def draw(side, n):
            picks = [broken.selector(utilities[side], broken.scale) for _ in range(n)]
            return grid[j + np.array(picks)]

        return draw

    def audited(self):
        """One row, one level, ``D = 10``: the release the audit draws from."""
        return PairQuantiles(((0.5,),), 1.0, 100, 10)

    def half_noise(self, mechanism):
        fields = {f.name: getattr(mechanism, f.name) for f in dataclasses.fields(mechanism)}
        return _HalfScaleQuantiles(**fields)


# -- the score map's releases ------------------------------------------------------------

MAP_FRAME = Frame((0.0, 0.0), (3.0, 3.0))
MAP_GROUPS = 4  # three public labels and "other"
PAIRS = 100  # independent neighbour pairs of cells in one audited release


def _labels(column: np.ndarray) -> list[Any]:
    """A record's label from its third column: its integer part when finite, else
    missing (a label outside the public domain: "other")."""
    return [str(int(v)) if math.isfinite(v) and abs(v) < 1e9 else None for v in column]


def _counts(bins: tuple[int, int], data: np.ndarray, clamp: bool = False) -> np.ndarray:
    """The count matrix ``counts[group, cell]`` of scores (two columns) and labels (the
    third) on ``bins``."""
    x_edges, y_edges = MAP_FRAME.edges(bins)
    codes = group_codes(_labels(data[:, 2]), ["0", "1", "2"])
    return histogram_counts(data[:, :2], x_edges, y_edges, codes, MAP_GROUPS, clamp=clamp)


class TestAdditiveHistogram(MechanismConformance):
    """The count matrix: two entries move by one (l2 sensitivity sqrt 2)."""

    width = 3  # two scores and a label

    def make(self):
        return AdditiveHistogram((2 * PAIRS - 1, 1), 1.0, MAP_GROUPS)

    def noise(self):
        return OpenDPSampler()

    def exact_of(self, mechanism, data):
        return _counts(mechanism.bins, data)

    def change(self, mechanism, exact, other):
        return np.linalg.norm(exact - other)

    def audit_draws(self, mechanism):
        """Every row is ``PAIRS`` neighbour pairs of cells, ``[5, 0]`` against ``[4, 1]``,
        projected on their difference (the optimal test): each entry's noise is
        independent of the others', so a pair has the law it would have where only it
        differs (test_histogram.py's audit)."""
        neighbours = [np.tile(pair, (mechanism.n_groups, PAIRS)) for pair in ([5, 0], [4, 1])]
        sampler = OpenDPSampler()

        def draw(side, n):
            out: list[float] = []
            while len(out) < n:
                noisy = mechanism.release(neighbours[side], sampler).counts.reshape(-1, 2)
                out.extend((noisy[:, 1] - noisy[:, 0]) / SQRT2)
            return np.array(out[:n])

        return draw

    def half_noise(self, mechanism):
        return AdditiveHistogram(mechanism.bins, 2.0 * mechanism.mu, mechanism.n_groups)


class TestGroupCounts(MechanismConformance):
    """The group sizes: a record changes group, two sizes move by one (sqrt 2)."""

    width = 3

    def make(self):
        return GroupCounts(MAP_GROUPS, 1.0)

    def noise(self):
        return OpenDPSampler()

    def exact_of(self, mechanism, data):
        return _counts((3, 2), data)

    def neighbours(self, mechanism):
        cases = super().neighbours(mechanism)
        data = base_data(self.n_records, self.width)["spread"]
        data[:, 2] = 0.0
        other = data.copy()
        other[0, 2] = 1.0  # the same scores, another group
        cases["to another group"] = (
            self.exact_of(mechanism, data),
            self.exact_of(mechanism, other),
        )
        return cases

    def change(self, mechanism, exact, other):
        return np.linalg.norm(exact.sum(axis=1) - other.sum(axis=1))

    def audit_draws(self, mechanism):
        """``PAIRS`` pairs of groups per release (sizes [5, 0] against [4, 1]), each its own
        neighbour pair: the count matrix of ``2 PAIRS`` groups and one cell."""
        wide = GroupCounts(2 * PAIRS, mechanism.mu)
        neighbours = [np.tile(pair, PAIRS)[:, None] for pair in ([5, 0], [4, 1])]
        sampler = OpenDPSampler()

        def draw(side, n):
            out: list[float] = []
            while len(out) < n:
                noisy = wide.release(neighbours[side], sampler).reshape(-1, 2)
                out.extend((noisy[:, 1] - noisy[:, 0]) / SQRT2)
            return np.array(out[:n])

        return draw

    def half_noise(self, mechanism):
        return GroupCounts(mechanism.n_groups, 2.0 * mechanism.mu)


class TestSparseHistogram(MechanismConformance):
    """The stability histogram: at most two entries move, by one each."""

    width = 3
    #: One release gives 400 draws; half the noise certifies 1.1 to 1.2 at (300, 1000)
    #: draws against the claimed 1 (the event's probability is e^-2 / 4 on one side).
    broken_audit_sizes = (1000, 4000)

    def make(self):
        return SparseHistogram((2 * PAIRS - 1, 1), 1.0, 1e-3, MAP_GROUPS)

    def noise(self):
        return DiscreteLaplaceSampler()

    def exact_of(self, mechanism, data):
        return _counts(mechanism.bins, data)

    def change(self, mechanism, exact, other):
        moved = np.abs(exact - other)
        return float(moved.max()) if np.count_nonzero(moved) <= 2 else math.inf

    def audit_draws(self, mechanism):
        """``PAIRS`` pairs of cells per row, ``[50, 30]`` against ``[49, 31]``; the
        statistic ``min(c_0 - 50, 30 - c_1)`` of each released pair is >= 0 with
        probability ``e^epsilon`` times higher on the first (both entries' noise in one
        event: the whole epsilon)."""
        neighbours = [np.tile(pair, (mechanism.n_groups, PAIRS)) for pair in ([50, 30], [49, 31])]
        sampler = DiscreteLaplaceSampler()

        def draw(side, n):
            out: list[float] = []
            while len(out) < n:
                noisy = mechanism.release(neighbours[side], sampler).counts.reshape(-1, 2)
                out.extend(np.minimum(noisy[:, 0] - 50, 30 - noisy[:, 1]))
            return np.array(out[:n])

        return draw

    def half_noise(self, mechanism):
        return SparseHistogram(
            mechanism.bins, 2.0 * mechanism.epsilon, mechanism.delta, mechanism.n_groups
        )


class TestPrivateQuantile(MechanismConformance):
    """The bound-free quantile: every count moves by at most one, all one way."""

    n_records, width = 30, 1
    audit_sizes = (100, 400)

    def make(self):
        return PrivateQuantile(self.n_records, 0.5, 1.0, True, 2)

    def noise(self):
        return DiscreteLaplaceSampler()

    def exact_of(self, mechanism, data):
        return count_at_most(data[:, 0], mechanism.candidates)[0]

    def change(self, mechanism, exact, other):
        moved = other - exact
        monotone = moved.min() >= 0 or moved.max() <= 0
        return float(np.abs(moved).max()) if monotone else math.inf

    def audit_draws(self, mechanism):
        """A cluster at 1 and one record moved far out (1e6): the counts between move by
        one.  The statistic is the released value."""
        rng = np.random.default_rng(2)  # test data only
        s = 1.0 + 0.01 * rng.standard_normal(self.n_records)
        s_prime = s.copy()
        s_prime[0] = 1e6
        exact = [self.exact_of(mechanism, x[:, None]) for x in (s, s_prime)]
        sampler = DiscreteLaplaceSampler()

        def draw(side, n):
            return np.array([mechanism.release(exact[side], sampler) for _ in range(n)])

        return draw

    @pytest.mark.statistical
    def test_the_audit_catches_half_the_noise(self):
        pytest.skip(
            "AboveThreshold's epsilon is loose about twice for a threshold test on its "
            "output (a simulation of worst-case runs certifies about epsilon / 2): half "
            "the noise stays below the claim.  test_quantile.py pins the noise's scale "
            "instead, and (c) catches a halved sensitivity."
        )

    def half_noise(self, mechanism):
        raise AssertionError("not audited: see test_the_audit_catches_half_the_noise")


class TestCoordinateMedian(MechanismConformance):
    """The median of every column: each column's counts move by at most one, all one way."""

    n_records, width = 30, 3
    audit_sizes = (100, 400)

    def make(self):
        return CoordinateMedian(self.n_records, self.width, 1.0, steps_per_octave=2)

    def noise(self):
        return DiscreteLaplaceSampler()

    def exact_of(self, mechanism, data):
        return count_at_most(data, mechanism.candidates)

    def change(self, mechanism, exact, other):
        moved = other - exact
        per_column = [
            float(np.abs(row).max()) if row.min() >= 0 or row.max() <= 0 else math.inf
            for row in moved
        ]
        return max(per_column)

    def audit_draws(self, mechanism):
        """A cluster at 1 in every column and one record moved far out in column 0; the
        statistic is column 0's released median (each column is one part)."""
        rng = np.random.default_rng(5)  # test data only
        s = 1.0 + 0.01 * rng.standard_normal((self.n_records, self.width))
        s_prime = s.copy()
        s_prime[0, 0] = 1e6
        exact = [self.exact_of(mechanism, x) for x in (s, s_prime)]
        sampler = DiscreteLaplaceSampler()

        def draw(side, n):
            return np.array([mechanism.release(exact[side], sampler)[0] for _ in range(n)])

        return draw

    @pytest.mark.statistical
    def test_the_audit_catches_half_the_noise(self):
        pytest.skip(
            "each column is the bound-free quantile's AboveThreshold, loose about twice for "
            "a threshold test (TestPrivateQuantile); test_median.py pins every draw's scale "
            "and audits the exact median, which fails."
        )

    def half_noise(self, mechanism):
        raise AssertionError("not audited: see test_the_audit_catches_half_the_noise")


class _HalfScaleNoise(IntegerNoise):
    """BROKEN on purpose: discrete Laplace at half the scale it is asked for."""

    is_private = False

    def __init__(self) -> None:
        self.inner = DiscreteLaplaceSampler()

    def _draw(self, scale, size):
        return self.inner.draw(max(1, scale // 2), size)


class _HalfNoiseScale:
    """BROKEN on purpose: the scale mechanism drawing half the noise it claims."""

    def __init__(self, mechanism):
        self.mechanism = mechanism
        self.quantile_releases = mechanism.quantile_releases
        self.parts = mechanism.parts

    def release(self, exact, sampler=None):
        return self.mechanism.release(exact, _HalfScaleNoise())


def _reference_scan(counts, grid, q, rng):
    """An independent AboveThreshold at the CLAIMED scale (the mechanism's public
    multiplier and noise scale), discrete Laplace as a difference of geometrics, the scan
    candidate by candidate: the oracle of the noise law."""
    t, s = q.noise_scale, q.multiplier
    p = 1.0 - math.exp(-1.0 / t)

    def laplace():
        return int(rng.geometric(p)) - int(rng.geometric(p))

    n = int(q.n_samples)
    scanned = (n - counts[::-1]) if q.from_top else counts
    level = q.threshold + laplace()
    for j, c in enumerate(scanned):
        if int(c) * s + laplace() >= level:
            if not q.from_top:
                return float(grid[j])
            return float(grid[grid.size - j]) if j > 0 else math.inf
    return -math.inf if q.from_top else math.inf


class TestRobustScale(MechanismConformance):
    """Private robust scaling: every level of every column scans one column's counts
    (or the counts above), which move by at most one, all one way."""

    n_records, width = 30, 2
    audit_sizes = (100, 400)

    def make(self):
        return RobustScale(self.n_records, self.width, 1.0, steps_per_octave=2)

    def noise(self):
        return DiscreteLaplaceSampler()

    def exact_of(self, mechanism, data):
        return count_at_most(data, mechanism.candidates)

    def change(self, mechanism, exact, other):
        n = self.n_records
        per_column = []
        for moved in [*(other - exact), *((n - other) - (n - exact))]:
            monotone = moved.min() >= 0 or moved.max() <= 0
            per_column.append(float(np.abs(moved).max()) if monotone else math.inf)
        return max(per_column)

    def audit_draws(self, mechanism):
        """A cluster at 1 and one record moved far out in column 0; the statistic is
        column 0's released q25 (scanned from the top; each level is one part)."""
        rng = np.random.default_rng(6)  # test data only
        s = 1.0 + 0.01 * rng.standard_normal((self.n_records, self.width))
        s_prime = s.copy()
        s_prime[0, 0] = -1e6
        exact = [self.exact_of(mechanism, x) for x in (s, s_prime)]
        sampler = DiscreteLaplaceSampler()
        q25 = mechanism.quantile_releases[LEVELS.index(0.25)]  # what release() runs for it

        def draw(side, n):
            return np.array([q25.release(exact[side][0], sampler) for _ in range(n)])

        return draw

    @pytest.mark.statistical
    def test_the_audit_catches_half_the_noise(self):
        """AboveThreshold's epsilon is loose about twice for a threshold test on its output
        (TestPrivateQuantile), so this audit tests the noise LAW instead, black box: the
        released q25 and median of a column whose records sit one on each candidate,
        drawn 1500 times, against an independent scan at the claimed scales (a two-sample
        Kolmogorov-Smirnov test).  The mechanism passes; half its noise fails."""
        from scipy.stats import ks_2samp

        mechanism = RobustScale(self.n_records, 1, 1.0, steps_per_octave=1)
        grid = mechanism.candidates
        start = int(np.searchsorted(grid, 1.0))
        x = grid[start : start + self.n_records, None]  # one record on each candidate
        exact = self.exact_of(mechanism, x)
        rng = np.random.default_rng(7)  # the reference's noise: test only
        draws = 1000
        for level in (LEVELS.index(0.25), LEVELS.index(0.5)):
            q = mechanism.quantile_releases[level]
            reference = [_reference_scan(exact[0], grid, q, rng) for _ in range(draws)]
            sampler = DiscreteLaplaceSampler()
            ours = [q.release(exact[0], sampler) for _ in range(draws)]
            broken = [q.release(exact[0], _HalfScaleNoise()) for _ in range(draws)]
            assert ks_2samp(ours, reference).pvalue > 1e-4, level
            assert ks_2samp(broken, reference).pvalue < 1e-8, level

    def half_noise(self, mechanism):
        return _HalfNoiseScale(mechanism)


# -- the composites ------------------------------------------------------------------------


class TestFrameMechanism(CompositeConformance):
    def make(self):
        return FrameMechanism(500, 0.8)


class TestScoreMapMechanism(CompositeConformance):
    def make(self):
        return ScoreMapMechanism(500, 1.0, 1e-6, (4, 3), ("a", "b"), ("additive", "sparse"))


# -- every mechanism has its class ---------------------------------------------------------


def _tested_types() -> set[type]:
    leaves = {type(cls().make()) for cls in MechanismConformance.__subclasses__()}
    return leaves | {type(cls().make()) for cls in CompositeConformance.__subclasses__()}


def _package_mechanisms() -> set[type]:
    """Every class of dask_dppca.privacy offering the contract (or the composite's)."""
    found = set()
    for info in pkgutil.walk_packages(dask_dppca.privacy.__path__, "dask_dppca.privacy."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__ or getattr(cls, "_is_protocol", False):
                continue
            offers = all(hasattr(cls, name) for name in ("parts", "describe"))
            if offers and (hasattr(cls, "release") or hasattr(cls, "mechanisms")):
                found.add(cls)
    return found


def test_every_mechanism_in_the_package_has_a_conformance_class():
    assert _package_mechanisms() == _tested_types()
