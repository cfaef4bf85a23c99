"""A privacy budget that composes Gaussian releases tightly.

Accounting.  Every release of this package is a Gaussian mechanism: l2 sensitivity
``Delta_i``, noise ``sigma_i``, i.e. ``mu_i``-Gaussian DP with ``mu_i = Delta_i /
sigma_i``.  Gaussian DP composes *exactly* (Dong, Roth & Su 2022, Corollary 3.3; also
under adaptive choice of the releases): k releases together are ``mu``-GDP with
``mu = sqrt(sum mu_i^2)``, which is (epsilon, delta)-DP exactly when the Balle-Wang
profile ``delta(epsilon; mu)`` is at most delta.  So the budget keeps ``sum mu_i^2``
and evaluates that closed form (:func:`~dask_dppca.privacy.calibration.gaussian_dp_delta`).

Why not dp_accounting's PLD accountant for the bookkeeping: for Gaussian events it is
the same curve computed through a pessimistic discretisation of the privacy-loss
distribution (it over-reports epsilon by ~1e-4 at its default grid), slower, and
would make a release calibrated exactly to the budget fail the check.  It is the
well-kept *independent* implementation, so tests/privacy/test_budget.py checks this closed
form against ``PLDAccountant`` composing ``GaussianDpEvent`` s.

A sampler whose law is within ``e^(+-A)`` of the ideal one
(:meth:`~dask_dppca.privacy.noise.NoiseSampler.privacy_excess`) is recorded with its
``excess``; excesses add under composition and are charged as in
:func:`~dask_dppca.privacy.calibration.calibrate_sigma`.
"""

from __future__ import annotations

import math
import threading
from contextvars import ContextVar, Token
from dataclasses import dataclass

from .calibration import (
    DELTA_RELATIVE_ERROR,
    _apply_excess,
    _log_delta,
    gaussian_dp_epsilon,
    gaussian_dp_mu,
    validate_privacy_parameters,
)
from ..validation import nonnegative_finite, positive_finite

__all__ = ["BudgetExceededError", "PrivacyBudget", "Release", "current_budget"]

# The stack of budgets entered with ``with``; a context variable so that asyncio tasks
# and threads see their own (a new thread starts with no active budget).
_ACTIVE: ContextVar[tuple[PrivacyBudget, ...]] = ContextVar("dask_dppca_active_budgets", default=())

# sqrt(sum mu_i^2) is rounded up by this factor so that float rounding never
# under-reports the composition; calibration allows for twice as much
# (calibration.MU_ROUND_UP), so a sigma calibrated to the whole budget fits.
_ROUND_UP = 1.0 + 8.0 * 2.0**-53


class BudgetExceededError(RuntimeError):
    """A release would exceed the (epsilon, delta) of the active privacy budget."""


@dataclass(frozen=True)
class Release:
    """One recorded Gaussian release.

    Attributes
    ----------
    sensitivity : float
        l2 sensitivity (including any sampler slack).
    sigma : float
        Noise standard deviation.
    label : str
        Free text, e.g. ``"DPPCA fit <id>"``.
    excess : float
        The sampler's privacy excess (0 for an exact sampler).
    """

    sensitivity: float
    sigma: float
    label: str = ""
    excess: float = 0.0

    @property
    def mu(self) -> float:
        """``sensitivity / sigma``: the release's Gaussian-DP parameter."""
        return self.sensitivity / self.sigma


def current_budget() -> PrivacyBudget | None:
    """The innermost budget entered with ``with PrivacyBudget(...)``, or None."""
    active = _ACTIVE.get()
    return active[-1] if active else None


def _check_release(sensitivity: float, sigma: float, excess: float) -> tuple[float, float, float]:
    return (nonnegative_finite("sensitivity", sensitivity), positive_finite("sigma", sigma),
            nonnegative_finite("excess", excess))


class PrivacyBudget:
    """An (epsilon, delta) budget over a sequence of Gaussian releases.

    Use as a context manager so that :class:`~dask_dppca.DPPCA` fits inside the block
    check and record their release automatically, or call :meth:`check` and
    :meth:`spend` directly::

        with PrivacyBudget(epsilon=2.0, delta=1e-5) as budget:
            DPPCA(epsilon=1.0, delta=1e-6).fit(X)
            print(budget.remaining_epsilon)

    Composition is exact Gaussian-DP composition (module docstring): four releases at
    (1, 1e-6) each fit in (2.5, 1e-5), where summing epsilons would claim 4.

    Parameters
    ----------
    epsilon : float
        > 0.
    delta : float
        In (0, 1).
    """

    def __init__(self, epsilon: float, delta: float) -> None:
        self.epsilon, self.delta = validate_privacy_parameters(epsilon, delta)
        self._records: list[Release] = []
        self._lock = threading.Lock()
        self._tokens: list[Token] = []

    # -- context manager --------------------------------------------------------------

    def __enter__(self) -> PrivacyBudget:
        self._tokens.append(_ACTIVE.set(_ACTIVE.get() + (self,)))
        return self

    def __exit__(self, *exc_info: object) -> None:
        _ACTIVE.reset(self._tokens.pop())

    # -- accounting -----------------------------------------------------------------------

    def _composed(self, extra: tuple[float, float] | None = None) -> tuple[float, float]:
        """(mu, excess) of the recorded releases plus an optional extra (mu, excess)."""
        squares = [r.mu**2 for r in self._records]
        excess = [r.excess for r in self._records]
        if extra is not None:
            squares.append(extra[0] ** 2)
            excess.append(extra[1])
        return math.sqrt(math.fsum(squares)) * _ROUND_UP, math.fsum(excess)

    def _target(self, excess: float) -> tuple[float, float] | None:
        """(epsilon, delta) the ideal Gaussian must meet; None if the excess leaves none."""
        try:
            return _apply_excess(self.epsilon, self.delta, excess)
        except ValueError:
            return None

    def _fits(self, mu: float, excess: float) -> bool:
        target = self._target(excess)
        if target is None:
            return False
        eps, dlt = target
        return _log_delta(eps, mu) <= math.log(dlt * (1.0 - DELTA_RELATIVE_ERROR))

    def check(self, sensitivity: float, sigma: float, excess: float = 0.0) -> None:
        """Raise if one more Gaussian release would exceed the budget.

        Parameters
        ----------
        sensitivity : float
            l2 sensitivity >= 0 (including sampler slack).
        sigma : float
            Noise standard deviation > 0.
        excess : float, default 0.0
            The sampler's privacy excess.

        Raises
        ------
        BudgetExceededError
            If the composition with this release is not (epsilon, delta)-DP.
        """
        self._check(*_check_release(sensitivity, sigma, excess))

    def _check(self, sens: float, sig: float, exc: float) -> None:
        """:meth:`check` on values already validated."""
        mu, total_excess = self._composed((sens / sig, exc))
        if not self._fits(mu, total_excess):
            needed = gaussian_dp_epsilon(mu, self.delta) + 2.0 * total_excess
            raise BudgetExceededError(
                f"release (sensitivity={sens:.6g}, sigma={sig:.6g}) would exceed the budget "
                f"(epsilon={self.epsilon:g}, delta={self.delta:g}): with the {len(self._records)} "
                f"release(s) so far it needs epsilon={needed:.6g} at this delta"
            )

    def spend(self, sensitivity: float, sigma: float, label: str = "", excess: float = 0.0) -> None:
        """Check, then record one Gaussian release.

        Parameters
        ----------
        sensitivity, sigma, excess
            As in :meth:`check`.
        label : str
            Free text stored with the record.

        Raises
        ------
        BudgetExceededError
            Nothing is recorded then.
        """
        with self._lock:  # check and record atomically
            sens, sig, exc = _check_release(sensitivity, sigma, excess)
            self._check(sens, sig, exc)
            self._records.append(Release(sens, sig, str(label), exc))

    def min_sigma(self, sensitivity: float, excess: float = 0.0) -> float:
        """Smallest sigma that :meth:`check` accepts now for this sensitivity.

        Parameters
        ----------
        sensitivity : float
            > 0.
        excess : float, default 0.0

        Returns
        -------
        float

        Raises
        ------
        BudgetExceededError
            If no sigma fits (the budget is spent).
        """
        sens, _, exc = _check_release(sensitivity, 1.0, excess)
        if not sens > 0.0:
            raise ValueError(f"sensitivity: must be > 0, got {sens!r}")
        spent_mu, spent_excess = self._composed()
        target = self._target(spent_excess + exc)
        room = 0.0
        if target is not None:
            room = gaussian_dp_mu(*target) ** 2 - spent_mu**2
        if not room > 0.0:
            raise BudgetExceededError(
                f"the budget (epsilon={self.epsilon:g}, delta={self.delta:g}) has no room left"
            )
        sigma = sens / math.sqrt(room)
        for _ in range(10_000):  # raise sigma until the exact check accepts it
            mu, total = self._composed((sens / sigma, exc))
            if self._fits(mu, total):
                return sigma
            sigma *= 1.0 + 2.0**-40
        raise BudgetExceededError("min_sigma: no sigma found within the budget")  # pragma: no cover

    # -- reporting -------------------------------------------------------------------------

    @property
    def spent(self) -> list[Release]:
        """The recorded releases, oldest first (a copy)."""
        return list(self._records)

    @property
    def releases(self) -> int:
        """Number of recorded releases."""
        return len(self._records)

    @property
    def spent_mu(self) -> float:
        """Gaussian-DP parameter of the composition so far, ``sqrt(sum mu_i^2)``."""
        return self._composed()[0] if self._records else 0.0

    @property
    def spent_epsilon(self) -> float:
        """Smallest epsilon the composition so far satisfies at the budget's delta."""
        if not self._records:
            return 0.0
        mu, excess = self._composed()
        target = self._target(excess)
        if target is None:
            return math.inf
        return gaussian_dp_epsilon(mu, target[1]) + 2.0 * excess

    @property
    def remaining_epsilon(self) -> float:
        """``epsilon - spent_epsilon`` (>= 0), reported at the budget's delta.

        For information only: under tight composition budgets do not subtract, so use
        :meth:`check` or :meth:`min_sigma` to decide whether a release fits.
        """
        return max(0.0, self.epsilon - self.spent_epsilon)

    def __repr__(self) -> str:
        return (
            f"PrivacyBudget(epsilon={self.epsilon!r}, delta={self.delta!r}, "
            f"releases={self.releases}, spent_epsilon={self.spent_epsilon:.6g})"
        )
