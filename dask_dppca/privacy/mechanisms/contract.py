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

tests/privacy/test_mechanism_conformance.py holds the conformance suite every mechanism's
test class subclasses (docs/privacy.md, "The mechanism contract").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeVar, runtime_checkable

from .parts import PrivacyPart

__all__ = [
    "NOISE_KEYS",
    "ChargedGaussian",
    "CompositeMechanism",
    "GaussianChargeFields",
    "Mechanism",
    "given_noise",
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
