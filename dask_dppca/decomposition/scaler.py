"""A scikit-learn transformer that scales each column by a privately released centre and
scale: :class:`PrivateRobustScaler`, for a ``Pipeline`` before :class:`~.estimator.DPPCA`.

Its fit is one release of :class:`~dask_dppca.privacy.mechanisms.scale.RobustScale` (per column the
median and the quantiles of the public rule, docs/privacy.md "Private robust scaling"),
charged to every active budget like any release; ``transform`` is post-processing of the
released centre and scale (free).  The analysis's scale stage
(``analyze(..., scale="robust")``) releases the same under the analysis's one budget.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ..compute import compute_target
from ..compute.budget_config import budgets_to_charge
from ..compute.trusted.placement import ReleaseOptions
from ..compute.trusted.release import release_statistic
from ..graph.score_stats import quantile_counts_graph
from ..io import open_records
from ..io.records import scale_rows
from ..privacy.budget.charging import BudgetCarrier, reserve_release
from ..privacy.mechanisms.accounting import PlannedPart, split_budget
from ..privacy.mechanisms.calibration import validate_privacy_parameters
from ..privacy.mechanisms.contract import make_sampler
from ..privacy.mechanisms.parts import PureDPPart
from ..privacy.mechanisms.scale import LEVELS, RobustScale, robust_scaling

__all__ = ["PrivateRobustScaler"]


# scikit-learn ships no type information: its bases are Any to mypy (misc: subclassing Any).
class PrivateRobustScaler(BudgetCarrier, OneToOneFeatureMixin, TransformerMixin, BaseEstimator):  # type: ignore[misc]
    """Scale each column by a private median and a private quantile range.

    ``transform(X) = (X - centre_) / scale_``; the centre is each column's private median,
    the scale its private ``q75 - q25``, else ``q95 - q5``, else ``q99 - q1``, else 1 (a
    public rule on released values).  Fitting releases ``7 d`` bound-free private
    quantiles composed exactly to (``epsilon``, ``delta``), charged to every active
    budget.

    Parameters
    ----------
    epsilon : float, default 1.0
        The whole fit's epsilon (its ``7 d`` pure parts composed exactly).
    delta : float, default 1e-9
        The delta at which the parts compose to ``epsilon``.
    scheduler : None, str or distributed.Client, optional
        As for :class:`~.estimator.DPPCA` (default: the embedded cluster).
    random_state : int, optional
        NOT PRIVATE: seeds the noise, for tests and examples only.

    Attributes
    ----------
    centre_, scale_ : ndarray, shape (n_features,)
        The released centre and scale (finite, ``scale_ > 0``).
    rule_ : list of str
        Which range each column's scale is (``"q75-q25"``, ...; ``"1"``: every range
        collapsed).
    quantiles_ : ndarray, shape (n_features, 7)
        The released quantiles at levels 0.5, 0.25, 0.75, 0.05, 0.95, 0.01, 0.99.
    privacy_ : dict
        The release's public record (mechanism, parts, accuracy, where it was drawn).
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.pipeline import make_pipeline
    >>> import dask_dppca as dd
    >>> age, income = np.linspace(20, 60, 5000), np.linspace(8e4, 2e4, 5000)
    >>> X = np.column_stack([age, income])  # two columns in their own units
    >>> scaler = dd.PrivateRobustScaler(epsilon=2.0, scheduler="threads")
    >>> scaler.fit(X).scale_.shape
    (2,)
    >>> pipeline = make_pipeline(scaler, dd.DPPCA(1, epsilon=2.0, scheduler="threads"))
    """

    def __init__(
        self,
        epsilon: float = 1.0,
        delta: float = 1e-9,
        *,
        scheduler: Any = None,
        random_state: int | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.delta = delta
        self.scheduler = scheduler
        self.random_state = random_state

    def fit(self, X: Any, y: Any = None) -> PrivateRobustScaler:
        """Release the centre and scale of every column of ``X`` (one pass, one release).

        Parameters
        ----------
        X : array-like, dask array, Zarr store or path, table path
            As for :meth:`~.estimator.DPPCA.fit`.
        y : ignored

        Returns
        -------
        self
        """
        epsilon, delta = validate_privacy_parameters(self.epsilon, self.delta)
        records = open_records(X)
        fit_id = uuid.uuid4().hex
        with compute_target(self.scheduler, ReleaseOptions(), runs_kernel=False) as target:
            records = records.counted(target)
            n, d = records.shape
            mechanism = _mechanism(epsilon, delta, int(n), int(d))
            seed = self.random_state
            sampler = make_sampler("discrete_laplace", seed)

            def release(exact_counts: Any) -> Any:
                return mechanism.release(exact_counts, sampler)

            with reserve_release(
                mechanism,
                fit_id=fit_id,
                label=f"robust scaler {fit_id}",
                dataset=records.dataset,
                budgets=budgets_to_charge(self.carried_budgets),
            ):
                quantiles, where = release_statistic(
                    target,
                    release,
                    quantile_counts_graph(records.array, mechanism.candidates),
                    f"{fit_id}-scale",
                    charge=mechanism,
                    dataset=records.dataset,
                    stage_id=fit_id,
                )
        scaling = robust_scaling(quantiles, mechanism.resolved_levels())
        self.centre_, self.scale_ = scaling.centre, scaling.scale
        self.rule_, self.quantiles_ = scaling.rule, scaling.quantiles
        self.privacy_ = {**mechanism.describe(), "fit_id": fit_id, "released_on": where}
        self.n_features_in_ = int(d)
        if records.feature_names is not None:
            self.feature_names_in_ = np.asarray(records.feature_names, dtype=object)
        return self

    def transform(self, X: Any) -> Any:
        """``(X - centre_) / scale_`` (post-processing of the release: free).

        Parameters
        ----------
        X : array-like or dask array, shape (n, n_features)

        Returns
        -------
        ndarray or dask array, float64
        """
        check_is_fitted(self, "scale_")
        if hasattr(X, "map_blocks"):  # a dask array stays lazy
            if X.shape[1] != self.n_features_in_:
                raise ValueError(f"X: has {X.shape[1]} features, expected {self.n_features_in_}")
            return X.map_blocks(scale_rows, self.centre_, self.scale_, dtype=np.float64)
        rows = np.asarray(X, dtype=np.float64)
        if rows.ndim != 2 or rows.shape[1] != self.n_features_in_:
            raise ValueError(f"X: expected shape (n, {self.n_features_in_}), got {rows.shape}")
        return scale_rows(rows, self.centre_, self.scale_)


def _mechanism(epsilon: float, delta: float, n: int, d: int) -> RobustScale:
    """The release whose ``7 d`` pure parts compose exactly to (epsilon, delta)."""
    planned = [PlannedPart("scale", "scale quantiles", "pure", count=len(LEVELS) * d)]
    part = split_budget(epsilon, delta, planned, {"scale": 1.0}).part("scale", "scale quantiles")
    assert isinstance(part, PureDPPart)
    return RobustScale(n, d, part.epsilon)
