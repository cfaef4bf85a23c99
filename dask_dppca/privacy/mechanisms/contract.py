"""The mechanism contract: what every noisy release of this package offers.

A *mechanism* is built from public parameters only and holds everything its privacy
proof needs before any data is read.  It offers three things (:class:`Mechanism`):

* ``parts``: exactly what it charges, as privacy parts (:mod:`.parts`), for an
  accountant to compose with every other release (:func:`.charges.charge_of` reads them);
* ``release(exact, sampler=None)``: the one step that sees the exact statistic and draws
  the noise.  ``sampler`` is the noise source: a mechanism that binds its own at
  construction (the g-DPPCA release, the scree statistics) takes ``None`` and refuses a
  different one (:func:`own_noise`); the others need one (:func:`given_noise`);
* ``describe()``: the public record, with what the privacy table reads
  (:data:`NOISE_KEYS`, ``"sensitivity"`` and its parts' parameters).

A stage whose releases come one after another, each exact statistic computed from the
data and the values released before it (the score map: the centre, then the radius about
the released centre, then the histograms on the released frame), cannot release its whole
statistic in one call.  It is a :class:`CompositeMechanism`: its ``parts`` are its
sub-mechanisms' parts, in order, and ``mechanisms`` names each sub-mechanism, every one a
:class:`Mechanism` the compute layer runs in turn.

Every noise source is made by :func:`make_sampler`, the one sampler factory: given the
kind of noise, the number of noised values and the user's ``random_state``, it returns
the private sampler of a real release (``random_state=None``: OS entropy) or, for an
integer, the seeded one that exists for tests and examples only (NOT private; it warns
:class:`~.noise.NonPrivateRandomStateWarning`).  tests/privacy/test_sampler_factory.py
checks that no other module of the package constructs a sampler.

tests/privacy/test_mechanism_conformance.py holds the conformance suite every mechanism's
test class subclasses (docs/privacy.md, "The mechanism contract").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol, TypeVar, overload, runtime_checkable

import numpy as np

from .laplace import (
    DiscreteLaplaceSampler,
    IntegerNoise,
    SeededDiscreteLaplace,
    SeededSelector,
    Selector,
    opendp_selector,
)
from .noise import (
    DEFAULT_LATTICE_BITS,
    OPENDP_MAX_ENTRIES,
    LatticeSampler,
    NoiseSampler,
    OpenDPSampler,
    SeededSampler,
)
from .parts import PrivacyPart

__all__ = [
    "NOISE_KEYS",
    "SAMPLER_KINDS",
    "ChargedGaussian",
    "CompositeMechanism",
    "GaussianChargeFields",
    "Mechanism",
    "given_noise",
    "make_sampler",
    "own_noise",
]

#: The noise scale in :meth:`Mechanism.describe`, under one of these names: a Gaussian
#: sigma, a noisy max's scale, a discrete Laplace scale in counts.
NOISE_KEYS = ("sigma", "scale", "laplace_scale_counts")

_Noise = TypeVar("_Noise")


@runtime_checkable
class Mechanism(Protocol):
    """One noisy release, planned from public parameters.

    Attributes
    ----------
    parts : tuple of PrivacyPart
        Exactly what the release costs (at least one part).
    """

    @property
    def parts(self) -> tuple[PrivacyPart, ...]:
        """Exactly what the release costs."""
        ...

    def release(self, exact: Any, sampler: Any = None) -> Any:
        """The released value of the exact statistic ``exact`` (the only step that sees it).

        Parameters
        ----------
        exact : array or object
            The exact statistic (computed on the trusted worker).
        sampler : noise source, optional
            Needed by a mechanism that binds none; a mechanism that binds its own at
            construction takes ``None`` (or that same object) and refuses any other.
        """
        ...

    def describe(self) -> dict[str, Any]:
        """The public record: parameters, sensitivity, noise scale (JSON-ready)."""
        ...


class GaussianChargeFields(Protocol):
    """What a Gaussian charge holds (:class:`~.charges.GaussianCharge`; the budget imports
    this module, so the contract names the fields, not the class).
    """

    @property
    def sensitivity(self) -> float:
        """The l2 sensitivity the noise is calibrated to (slack included)."""
        ...

    @property
    def sigma(self) -> float:
        """The noise scale."""
        ...

    @property
    def excess(self) -> float:
        """The sampler's privacy excess (0 for an exact sampler)."""
        ...


@runtime_checkable
class ChargedGaussian(Mechanism, Protocol):
    """A Gaussian release whose ledger row keeps its sensitivity, sigma and the sampler's
    privacy excess (:class:`~.mechanism.ReleaseMechanism`).

    A part states the ideal Gaussian's ``mu`` only; the budget charges a lattice sampler's
    excess on top (:mod:`.budget`), so such a mechanism offers its charge whole.  Its
    ``parts`` are the one Gaussian part of that charge's ``sensitivity / sigma``
    (:func:`.charges.charge_of` checks it).
    """

    @property
    def charge(self) -> GaussianChargeFields:
        """The Gaussian charge: sensitivity, sigma, the sampler's excess."""
        ...


@runtime_checkable
class CompositeMechanism(Protocol):
    """Several releases made one after another, each from values released before it.

    Attributes
    ----------
    parts : tuple of PrivacyPart
        Every sub-mechanism's parts, in the order of :attr:`mechanisms`.
    mechanisms : mapping of str to Mechanism
        Each release by name, in the order they are made.
    """

    @property
    def parts(self) -> tuple[PrivacyPart, ...]:
        """Every sub-mechanism's parts, in order."""
        ...

    @property
    def mechanisms(self) -> Mapping[str, Mechanism]:
        """The sub-mechanisms by name, in release order."""
        ...

    def describe(self) -> dict[str, Any]:
        """The public record of every sub-mechanism (JSON-ready)."""
        ...


def own_noise(mechanism: object, own: _Noise, given: object | None) -> _Noise:
    """The noise source of a mechanism that bound ``own`` at construction.

    Parameters
    ----------
    mechanism : object
        For the message.
    own : noise source
        What it was built with.
    given : noise source or None
        What the caller passed: ``None`` or ``own`` itself.

    Raises
    ------
    ValueError
        For any other noise source: its privacy was planned with ``own``.
    """
    if given is None or given is own:
        return own
    raise ValueError(
        f"sampler: {type(mechanism).__name__} draws from the noise source it was built with "
        f"({own!r}); pass None, not another ({given!r})"
    )


def given_noise(mechanism: object, given: _Noise | None, kind: type) -> _Noise:
    """The noise source passed to a mechanism that binds none.

    Parameters
    ----------
    mechanism : object
        For the message.
    given : noise source or None
        What the caller passed.
    kind : type
        What the mechanism draws from (its privacy was planned for that law).

    Raises
    ------
    TypeError
        When ``given`` is None or not a ``kind``.
    """
    if given is None or not isinstance(given, kind):
        raise TypeError(
            f"sampler: {type(mechanism).__name__} draws from the {kind.__name__} it is "
            f"given; got {given!r}"
        )
    return given


# -- the one sampler factory ---------------------------------------------------------------

SamplerKind = Literal["gaussian", "exact_gaussian", "discrete_laplace", "noisy_max"]
_Source = NoiseSampler | IntegerNoise | Selector


def _sized_gaussian(n_entries: int | None) -> NoiseSampler:
    """OpenDP's exact sampler on the 40-bit grid up to ``OPENDP_MAX_ENTRIES`` entries
    (d <= 154), the vectorised lattice sampler above (docs/privacy.md has the timings).
    """
    if n_entries is None:
        raise ValueError("n_entries: the private Gaussian sampler needs the number of entries")
    if not (isinstance(n_entries, int | np.integer) and n_entries >= 0):
        raise ValueError(f"n_entries: must be an integer >= 0, got {n_entries!r}")
    if n_entries <= OPENDP_MAX_ENTRIES:
        return OpenDPSampler(lattice_bits=DEFAULT_LATTICE_BITS)
    return LatticeSampler()


#: Each kind of noise: (its private source from the number of entries, its seeded one).
_KINDS: dict[str, tuple[Callable[[int | None], _Source], Callable[[int], _Source]]] = {
    # The vecd Gaussian of a release (the g-DPPCA matrix, the score map's histograms).
    "gaussian": (_sized_gaussian, SeededSampler),
    # OpenDP on every float (k = -1074, no rounding slack): the scree statistics.
    "exact_gaussian": (lambda _: OpenDPSampler(), SeededSampler),
    # Integer noise on integer counts (medians, scales, the score map's frame).
    "discrete_laplace": (lambda _: DiscreteLaplaceSampler(), SeededDiscreteLaplace),
    # The noisy arg-max of integer scores (the scree's pair quantiles).
    "noisy_max": (lambda _: opendp_selector, SeededSelector),
}

#: The kinds of noise :func:`make_sampler` makes.
SAMPLER_KINDS: tuple[str, ...] = tuple(_KINDS)


@overload
def make_sampler(
    kind: Literal["gaussian", "exact_gaussian"],
    random_state: int | None = None,
    *,
    n_entries: int | None = None,
) -> NoiseSampler: ...
@overload
def make_sampler(
    kind: Literal["discrete_laplace"],
    random_state: int | None = None,
    *,
    n_entries: int | None = None,
) -> IntegerNoise: ...
@overload
def make_sampler(
    kind: Literal["noisy_max"], random_state: int | None = None, *, n_entries: int | None = None
) -> Selector: ...
def make_sampler(
    kind: SamplerKind, random_state: int | None = None, *, n_entries: int | None = None
) -> _Source:
    """The noise source of a release: the one place the package makes a sampler.

    Parameters
    ----------
    kind : {"gaussian", "exact_gaussian", "discrete_laplace", "noisy_max"}
        ``"gaussian"``: float-safe Gaussian noise of ``n_entries`` values (OpenDP's exact
        sampler on a grid ``2^-40 sigma`` up to ``OPENDP_MAX_ENTRIES`` entries, the
        vectorised :class:`~.noise.LatticeSampler` above); ``"exact_gaussian"``: OpenDP's
        Gaussian on every float (no rounding slack); ``"discrete_laplace"``: integer noise
        (:class:`~.laplace.IntegerNoise`); ``"noisy_max"``: a noisy arg-max of integer
        scores (a ``Selector``: ``select(scores, scale) -> index``).
    random_state : int, optional
        None (a real release): the private source, from OS entropy.  An integer: the
        seeded source, reproducible and NOT private (tests and examples only; it warns
        :class:`~.noise.NonPrivateRandomStateWarning`).
    n_entries : int, optional
        The number of noised values; the private ``"gaussian"`` needs it (``d (d + 1) / 2``
        for a ``d x d`` symmetric matrix), the other kinds ignore it.

    Returns
    -------
    NoiseSampler, IntegerNoise or Selector
        As ``kind`` says.

    Raises
    ------
    ValueError
        For an unknown ``kind``, or a private ``"gaussian"`` without ``n_entries``.

    Examples
    --------
    >>> from dask_dppca.privacy import make_sampler
    >>> make_sampler("gaussian", n_entries=10)
    OpenDPSampler(lattice_bits=40)
    >>> make_sampler("discrete_laplace")
    DiscreteLaplaceSampler()
    """
    if kind not in _KINDS:
        raise ValueError(f"kind: expected one of {SAMPLER_KINDS}, got {kind!r}")
    private, seeded = _KINDS[kind]
    if random_state is None:
        return private(n_entries)
    return seeded(random_state)
