"""The arithmetic of a privacy budget: which releases fit in its (epsilon, delta).

:class:`BudgetArithmetic` composes a budget's counted rows (:class:`~.ledger_rows.Release`)
exactly: Gaussian releases in closed form (Gaussian DP, ``mu = sqrt(sum mu_i^2)``), rows
with other parts through :mod:`.accounting`; the sampler excesses add and are charged as
in calibration.  It admits or refuses one more release, and finds the smallest sigma,
what is left and what was spent.  A :class:`~.privacy_budget.PrivacyBudget` runs it on the rows
its ledger holds; docs/ledger.md holds the design.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..mechanisms.accounting import Composition, compose
from ..mechanisms.calibration import (
    DELTA_RELATIVE_ERROR,
    apply_excess,
    gaussian_dp_epsilon,
    gaussian_dp_mu,
    log_delta,
)
from ..mechanisms.parts import GaussianPart, PrivacyPart, part_text
from .ledger_rows import Release

__all__ = ["BudgetArithmetic", "BudgetExceededError"]

# sqrt(sum mu_i^2) is rounded up by this factor so that float rounding never
# under-reports the composition; calibration allows for twice as much
# (calibration.MU_ROUND_UP), so a sigma calibrated to the whole budget fits.
_ROUND_UP = 1.0 + 8.0 * 2.0**-53


class BudgetExceededError(RuntimeError):
    """A release would exceed the (epsilon, delta) of a privacy budget.

    Examples
    --------
    >>> import dask_dppca as dd
    >>> budget = dd.PrivacyBudget(epsilon=0.1, delta=1e-6)
    >>> try:
    ...     budget.spend(dd.GaussianCharge(sensitivity=1.0, sigma=0.5))
    ... except dd.BudgetExceededError:
    ...     print("refused, nothing charged:", budget.releases)
    refused, nothing charged: 0
    """


def _is_discrete(part: PrivacyPart) -> bool:
    return not isinstance(part, GaussianPart)


class BudgetArithmetic:
    """The composition of releases against an (epsilon, delta) budget.

    Parameters
    ----------
    epsilon : float
        > 0.
    delta : float
        In (0, 1).
    where : str, default ""
        Where the budget lives, as its refusals name it (``", ledger PATH"``).
    """

    def __init__(self, epsilon: float, delta: float, where: str = "") -> None:
        self.epsilon, self.delta, self.where = epsilon, delta, where

    # -- composing -------------------------------------------------------------------------

    @staticmethod
    def composed(
        rows: Sequence[Release], extra: Sequence[tuple[float, float]] = ()
    ) -> tuple[float, float]:
        """(mu, excess) of ``rows`` plus extra (mu, excess) pairs, mu rounded up."""
        squares = [r.mu**2 for r in rows] + [mu**2 for mu, _ in extra]
        squares += [p.mu**2 for r in rows for p in r.parts if isinstance(p, GaussianPart)]
        excess = [r.excess for r in rows] + [exc for _, exc in extra]
        return math.sqrt(math.fsum(squares)) * _ROUND_UP, math.fsum(excess)

    @staticmethod
    def mixed(rows: Sequence[Release], extra: Sequence[PrivacyPart] = ()) -> bool:
        """Whether ``rows`` and ``extra`` hold any non-Gaussian part (exact accountant)."""
        return any(_is_discrete(p) for p in extra) or any(
            _is_discrete(p) for r in rows for p in r.parts
        )

    @staticmethod
    def composition(
        rows: Sequence[Release], extra: Sequence[PrivacyPart] = ()
    ) -> tuple[Composition, float]:
        """The exact composition of ``rows`` and ``extra`` parts, and the summed excess."""
        parts: list[PrivacyPart] = [GaussianPart(r.mu) for r in rows if r.mu > 0.0]
        parts += [p for r in rows for p in r.parts]
        parts += list(extra)
        return compose(parts), math.fsum(r.excess for r in rows)

    def target(self, excess: float) -> tuple[float, float] | None:
        """(epsilon, delta) the ideal Gaussian must meet; None if the excess leaves none."""
        try:
            return apply_excess(self.epsilon, self.delta, excess)
        except ValueError:
            return None

    def fits(self, mu: float, excess: float) -> bool:
        """Whether a composition of Gaussian DP ``mu`` (and ``excess``) meets the budget."""
        target = self.target(excess)
        if target is None:
            return False
        eps, dlt = target
        return log_delta(eps, mu) <= math.log(dlt * (1.0 - DELTA_RELATIVE_ERROR))

    def fits_parts(
        self, rows: Sequence[Release], extra: Sequence[PrivacyPart], excess: float = 0.0
    ) -> bool:
        """Whether ``rows`` plus ``extra`` parts (plus ``excess``) meet the budget."""
        if not self.mixed(rows, extra):
            squares = [p.mu for p in extra if isinstance(p, GaussianPart)]
            mu, total = self.composed(rows, [(m, 0.0) for m in squares])
            return self.fits(mu, total + excess)
        composition, total = self.composition(rows, extra)
        target = self.target(total + excess)
        if target is None:
            return False
        eps, dlt = target
        return composition.delta(eps) <= dlt * (1.0 - DELTA_RELATIVE_ERROR)

    # -- admitting one more release ------------------------------------------------------------

    def admit(self, sens: float, sig: float, exc: float, rows: Sequence[Release]) -> None:
        """Raise BudgetExceededError unless one more release fits after ``rows``."""
        mu, total_excess = self.composed(rows, [(sens / sig, exc)])
        if self.mixed(rows):
            if sens > 0.0 and not self.fits_parts(rows, [GaussianPart(sens / sig)], exc):
                composition, excess = self.composition(rows, [GaussianPart(sens / sig)])
                target = self.target(excess + exc)
                needed = (
                    math.inf
                    if target is None
                    else composition.epsilon(target[1]) + 2.0 * (excess + exc)
                )
                raise self.refusal(needed, rows, f"sensitivity={sens:.6g}, sigma={sig:.6g}")
            return
        if not self.fits(mu, total_excess):
            needed = gaussian_dp_epsilon(mu, self.delta) + 2.0 * total_excess
            raise self.refusal(needed, rows, f"sensitivity={sens:.6g}, sigma={sig:.6g}")

    def admit_parts(self, parts: Sequence[PrivacyPart], rows: Sequence[Release]) -> None:
        """Raise BudgetExceededError unless a release of ``parts`` fits after ``rows``."""
        if not self.fits_parts(rows, parts):
            composition, excess = self.composition(rows, parts)
            target = self.target(excess)
            needed = math.inf if target is None else composition.epsilon(target[1]) + 2.0 * excess
            raise self.refusal(needed, rows, ", ".join(part_text(p) for p in parts))

    def admit_rows(self, new: Sequence[Release], counted: Sequence[Release]) -> None:
        """Raise BudgetExceededError unless every row of ``new`` fits after ``counted``."""
        together = [*counted, *new]
        if self.mixed(together):
            fits = self.fits_parts(together, [])
        else:
            fits = self.fits(*self.composed(together))
        if fits:
            return
        composition, excess = self.composition(together)
        target = self.target(excess)
        needed = math.inf if target is None else composition.epsilon(target[1]) + 2.0 * excess
        parts = [p for row in new for p in (row.parts or (GaussianPart(row.mu),))]
        raise self.refusal(
            needed, counted, f"{len(parts)} part(s), {', '.join(part_text(p) for p in parts)}"
        )

    def refusal(self, needed: float, counted: Sequence[Release], asked: str) -> BudgetExceededError:
        """The refusal of a release (``asked``: its parts) after ``counted``: the need
        first, then what is left, then the parts.
        """
        return BudgetExceededError(
            f"needs epsilon={needed:.6g} at delta={self.delta:g} with the {len(counted)} "
            f"release(s) so far, which would exceed the budget (epsilon={self.epsilon:g}, "
            f"delta={self.delta:g}{self.where}){self._left(counted)}; nothing was "
            f"reserved. Asked for: {asked}"
        )

    def _left(self, rows: Sequence[Release]) -> str:
        """What a refusal after ``rows`` says is left (:meth:`remaining`'s own number)."""
        return (
            f"; left: one more release of epsilon <= {self.remaining(rows, 1):.6g} at "
            f"delta={self.delta:g}"
        )

    def _no_room(self) -> BudgetExceededError:
        return BudgetExceededError(
            f"the budget (epsilon={self.epsilon:g}, delta={self.delta:g}{self.where}) "
            "has no room left"
        )

    # -- the smallest sigma, what is left, what was spent ----------------------------------------

    def min_sigma(self, rows: Sequence[Release], sens: float, exc: float) -> float:
        """Smallest sigma a release of sensitivity ``sens`` > 0 (excess ``exc``) may have
        after ``rows``; BudgetExceededError if none fits.
        """
        if self.mixed(rows):
            return self._min_sigma_mixed(rows, sens, exc)
        spent_mu, spent_excess = self.composed(rows)
        target = self.target(spent_excess + exc)
        room = 0.0
        if target is not None:
            room = gaussian_dp_mu(*target) ** 2 - spent_mu**2
        if not room > 0.0:
            raise self._no_room()
        sigma = sens / math.sqrt(room)
        for _ in range(10_000):  # raise sigma until the exact check accepts it
            mu, total = self.composed(rows, [(sens / sigma, exc)])
            if self.fits(mu, total):
                return sigma
            sigma *= 1.0 + 2.0**-40
        raise BudgetExceededError("min_sigma: no sigma found within the budget")  # pragma: no cover

    def _min_sigma_mixed(self, rows: Sequence[Release], sens: float, exc: float) -> float:
        """:meth:`min_sigma` after releases with non-Gaussian parts: bisection on mu."""
        if not self.fits_parts(rows, [GaussianPart(1e-300)], exc):
            raise self._no_room()
        lo, hi = 0.0, 1.0
        while self.fits_parts(rows, [GaussianPart(hi)], exc):
            lo, hi = hi, 2.0 * hi
        for _ in range(80):
            mid = 0.5 * (lo + hi)
            if mid in (lo, hi):
                break
            if mid > 0.0 and self.fits_parts(rows, [GaussianPart(mid)], exc):
                lo = mid
            else:
                hi = mid
        sigma = sens / lo if lo > 0.0 else math.inf
        for _ in range(10_000):  # the check a reservation makes, on the rounded mu
            if self.fits_parts(rows, [GaussianPart(sens / sigma)], exc):
                return sigma
            sigma *= 1.0 + 2.0**-40
        raise BudgetExceededError("min_sigma: no sigma found within the budget")  # pragma: no cover

    def remaining(self, rows: Sequence[Release], k: int) -> float:
        """The largest epsilon each of ``k`` more releases at the budget's delta may have
        after ``rows`` (0.0 when there is no room left).
        """
        if self.mixed(rows):
            return self._remaining_mixed(rows, k)
        spent_mu, spent_excess = self.composed(rows)
        target = self.target(spent_excess)
        if target is None:
            return 0.0
        room = (gaussian_dp_mu(*target) / _ROUND_UP) ** 2 - spent_mu**2
        if not room > 0.0:
            return 0.0
        # The epsilon at which a Gaussian of the room left per release meets delta, then
        # lowered until k such releases (the largest mu an (eps, delta) Gaussian may
        # have, gaussian_dp_mu) pass the same check a reservation makes.
        eps = gaussian_dp_epsilon(math.sqrt(room / k), self.delta)
        for _ in range(200):
            if not eps > 0.0:
                return 0.0
            mu, excess = self.composed(rows, [(gaussian_dp_mu(eps, self.delta), 0.0)] * k)
            if self.fits(mu, excess):
                return eps
            eps *= 1.0 - 2.0**-42
        return 0.0  # pragma: no cover - the first candidate is within a few ulps

    def _remaining_mixed(self, rows: Sequence[Release], k: int) -> float:
        """:meth:`remaining` after releases with non-Gaussian parts: bisection on epsilon,
        with the same exact check a reservation makes (largest epsilon that fits).
        """

        def fits(eps: float) -> bool:
            return self.fits_parts(rows, [GaussianPart(gaussian_dp_mu(eps, self.delta))] * k)

        lo, hi = 0.0, self.epsilon
        if fits(hi):
            return hi
        for _ in range(80):
            mid = 0.5 * (lo + hi)
            if mid in (lo, hi) or hi - lo <= 1e-12 * hi:
                break
            if fits(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def spent_mu(self, rows: Sequence[Release]) -> float:
        """Gaussian-DP parameter of the Gaussian releases of ``rows`` (0.0 for none)."""
        return self.composed(rows)[0] if rows else 0.0

    def spent_epsilon(self, rows: Sequence[Release]) -> float:
        """Smallest epsilon the composition of ``rows`` satisfies at the budget's delta."""
        if not rows:
            return 0.0
        if self.mixed(rows):
            composition, total = self.composition(rows)
            found = self.target(total)
            if found is None:
                return math.inf
            return composition.epsilon(found[1]) + 2.0 * total
        mu, excess = self.composed(rows)
        target = self.target(excess)
        if target is None:
            return math.inf
        return gaussian_dp_epsilon(mu, target[1]) + 2.0 * excess
