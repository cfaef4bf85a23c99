"""DPPCA: the scikit-learn style estimator, a thin shell over the layers below.

``fit`` reads top to bottom: validate every parameter once (nothing started, nothing
read), open the input (metadata only), plan the blocks and the release from public
inputs, reserve it in every active budget, build the graph, run the release on the
compute target, commit the reservation, set the fitted attributes.

This module imports neither Dask nor distributed, Zarr or fsspec: the inputs, the graph
and the compute target are imported inside the methods, after the parameters are
checked, so a bad parameter is refused at once (as scikit-learn validates at the top of
``fit``), not after a second of imports (``tests/estimator/test_validation_first.py``).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from ..compute.schedulers import check_scheduler
from ..design import Design, DesignPlan, check_design, plan_blocks
from ..kernel import SpatialSign, resolve_spatial_sign
from ..privacy import PrivacyTarget, PrivateRelease, ReleaseMechanism
from ..privacy.budget.charging import BudgetCarrier, reserve_release, transaction_stage_id
from ..privacy.mechanisms.advice import release_warnings
from ..privacy.mechanisms.contract import make_sampler
from ..privacy.mechanisms.noise import NoiseSampler
from ..privacy.report import PrivacyReport
from ..validation import boolean, integer_at_least, optional_string

if TYPE_CHECKING:
    from dask.delayed import Delayed

    from ..compute import ComputeTarget
    from ..io import Records

__all__ = ["DPPCA", "PARAMETER_CONSTRAINTS"]

#: Fit start and end, the plan, where the noise was drawn: public metadata only (never a
#: data value, never a storage option).  ``logging.getLogger("dask_dppca")`` is its parent.
logger = logging.getLogger(__name__)


def _check_random_state(name: str, value: Any) -> int | None:
    return None if value is None else integer_at_least(name, value, 0)


def _check_scheduler(name: str, value: Any) -> Any:
    check_scheduler(value)
    return value


#: Every parameter's constraint but the privacy target and the spatial sign (checked
#: together, see :meth:`DPPCA._validated`): ``check(name, value) -> value`` raises a
#: ValueError that names the parameter.  Booleans are never taken as numbers.
PARAMETER_CONSTRAINTS: dict[str, Callable[[str, Any], Any]] = {
    "n_components": lambda name, value: integer_at_least(name, value, 1),
    "design": lambda name, value: check_design(value),
    "scheduler": _check_scheduler,
    "trusted_worker": optional_string,
    "require_trusted": boolean,
    "random_state": _check_random_state,
    "progress": boolean,
}


@dataclass(frozen=True)
class _Parameters:
    """The estimator's parameters, each checked once."""

    n_components: int
    target: PrivacyTarget
    spatial_sign: SpatialSign
    design: str | Design
    scheduler: Any
    trusted_worker: str | None
    require_trusted: bool
    random_state: int | None
    progress: bool


# scikit-learn ships no type information: its bases are Any to mypy (misc: subclassing Any).
class DPPCA(BudgetCarrier, ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):  # type: ignore[misc]
    """Robust, differentially private PCA (g-DPPCA, Kim & Jung 2025).

    Releases the leading eigenvectors (and all eigenvalues) of
    ``K_tilde = K_hat + E``, where ``K_hat`` is the U-statistic of
    ``g(t) g(t)^T`` over pairs of records, ``t = (x_i - x_j) / sqrt(2)``, ``g`` a
    bounded generalized spatial sign, and ``E`` symmetric Gaussian noise calibrated to
    the Frobenius sensitivity of ``K_hat`` under replace-one neighbours (n public).

    Parameters
    ----------
    n_components : int, default=2
        Number of private principal directions to keep (1 <= n_components <= d).
    epsilon : float, default=1.0
        Privacy parameter epsilon > 0.
    delta : float, default=1e-6
        Privacy parameter 0 < delta < 1.
    spatial_sign : {"sphere", "winsor"} or SpatialSign, default="sphere"
        The generalized spatial sign g; a bounded custom one from
        :func:`~.custom`.
    radius : float, optional
        Public winsorization radius (``spatial_sign="winsor"``), in the units of
        ``t = (x_i - x_j) / sqrt(2)``.  Never tune it on the data.
    design : {"auto", "complete"} or RegularDesign, default="auto"
        Which pairs are averaged.  ``"auto"`` keeps every pair while the work is
        modest and otherwise picks a regular incomplete design by a public rule on
        n, d and the cluster's thread count (:func:`dask_dppca.design.auto_design`).
    calibration : {"analytic", "classical"}, default="analytic"
        ``"analytic"``: the tight sensitivity ``sqrt(2) G^2 max_degree / |P|`` with the
        analytic Gaussian mechanism (Balle & Wang 2018), valid for every epsilon > 0.
        ``"classical"``: the paper's ``4 G^2 / n`` and ``sqrt(2 ln(1.25/delta))/epsilon``,
        epsilon < 1 only.
    scheduler : None, str or distributed.Client, default=None
        Where to compute: ``None`` uses the active distributed client, else the
        embedded in-process LocalCluster; a local scheduler name (``"threads"``,
        ``"synchronous"``, ``"processes"``); a scheduler address; or a client.
    trusted_worker : str, optional
        Address of the worker that adds the noise when no worker offers the
        ``dppca-trusted`` resource.
    require_trusted : bool, default=False
        Refuse to fit when neither a ``dppca-trusted`` worker nor ``trusted_worker``
        exists.  By default such a fit warns
        (:class:`~.UntrustedReleaseWarning`) and
        releases on any worker, recorded in ``privacy_["released_on"]``.
    random_state : int, optional
        NOT PRIVATE.  Seeds the noise for tests and reproducible examples only; a
        :class:`~dask_dppca.privacy.mechanisms.noise.NonPrivateRandomStateWarning` is issued.
        Leave it ``None`` for real releases (noise from OS entropy).
    progress : bool, default=False
        Show a progress bar: a text bar in a terminal, a widget in Jupyter.

    Attributes
    ----------
    components_ : ndarray, shape (n_components, n_features)
        Private principal directions as orthonormal rows, largest eigenvalue first.
    eigenvalues_ : ndarray, shape (n_features,)
        All private eigenvalues of ``K_tilde``, decreasing.  They are eigenvalues of the
        noisy multivariate Kendall (spatial-sign) matrix, not variances: ``K_hat`` has
        trace at most ``G^2`` (1 for the sphere) whatever the scale of the data.
    kendall_eigenvalue_ratio_ : ndarray, shape (n_components,)
        ``max(lambda_k, 0) / sum_j max(lambda_j, 0)`` over the private Kendall
        eigenvalues (post-processing of the release).  It orders the directions, but it
        is not a share of variance: for elliptical data the Kendall eigenvalues are a
        non-linear, flattening function of the covariance eigenvalues (docs/method.md,
        section 6.2), and under noise the ratio of small ones is mostly noise.  There is
        no ``explained_variance_ratio_``: no variance is estimated.
    privacy_ : PrivacyReport
        A dict of everything needed to re-derive sigma by hand (epsilon, delta,
        sensitivity and its parts, sigma, calibration, design counts, tiles), the
        signal-to-noise figure, the fit id and where the noise was drawn
        (:meth:`~.ReleaseMechanism.describe`); ``print(est.privacy_)`` shows it as text, a
        notebook as a table.
    provenance_ : dict
        Where the result came from: the library version, the fit's start time (UTC, ISO
        8601) and duration, and the input (its location with secrets masked, or its
        type) and shape.  Saved with :meth:`~DPPCA.save`.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Column names of a DataFrame input (only then); ``transform`` checks them.
    n_samples_ : int

    Warns
    -----
    NoisyReleaseWarning
        When the noise's spectral norm exceeds the largest possible signal
        ``||K_hat||_2 <= G^2`` (public quantities only, see :mod:`~.privacy.mechanisms.advice`).
    LargeDeltaWarning
        When delta is above ``1/n``.

    Examples
    --------
    >>> import numpy as np
    >>> import dask_dppca as dd
    >>> X = np.random.default_rng().standard_t(3, size=(600, 4))  # any rows
    >>> est = dd.DPPCA(n_components=2, epsilon=1.0, delta=1e-6, scheduler="threads").fit(X)
    >>> est.components_.shape  # two private directions in 4 features
    (2, 4)
    >>> est.transform(X).shape
    (600, 2)
    >>> est.privacy_["epsilon"], est.privacy_["delta"]
    (1.0, 1e-06)
    """

    def __init__(
        self,
        n_components: int = 2,
        *,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        spatial_sign: str | SpatialSign = "sphere",
        radius: float | None = None,
        design: Any = "auto",
        calibration: str = "analytic",
        scheduler: Any = None,
        trusted_worker: str | None = None,
        require_trusted: bool = False,
        random_state: int | None = None,
        progress: bool = False,
    ) -> None:
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.spatial_sign = spatial_sign
        self.radius = radius
        self.design = design
        self.calibration = calibration
        self.scheduler = scheduler
        self.trusted_worker = trusted_worker
        self.require_trusted = require_trusted
        self.random_state = random_state
        self.progress = progress

    def fit(
        self,
        X: Any,
        y: None = None,
        *,
        component: str | None = None,
        storage_options: dict[str, Any] | None = None,
        allow_fill_values: bool = False,
    ) -> DPPCA:
        """Compute the private principal directions of ``X``.

        Parameters
        ----------
        X : ndarray, dask.array.Array, Zarr (path, URL, Array, Group), xarray or dask DataFrame
            Records as rows; a string or path names a Zarr store (local or fsspec URL).
            Lazy inputs stay lazy (see :func:`~.open_records`).
        y : None
            Ignored.
        component : str, optional
            Array inside a Zarr group (nested paths too), or an xarray Dataset variable.
        storage_options : dict, optional
            fsspec options for a URL (credentials, endpoint); they reach the workers
            inside the task graph and are never printed.
        allow_fill_values : bool, default=False
            Read chunks missing from a Zarr store as its fill value (a store written
            sparsely on purpose).  By default a missing chunk stops the fit before any
            release, naming the store and the worker.

        Returns
        -------
        self
        """
        params = self._validated()  # before the heavy imports below: refused at once
        from ..compute import compute_target
        from ..compute.trusted.placement import ReleaseOptions
        from ..io import open_records
        from .provenance import fit_provenance

        started, clock = datetime.now(UTC), time.monotonic()
        # Inside an analysis, the fit is its "directions" stage, reserved with the rest.
        fit_id = transaction_stage_id("directions") or uuid.uuid4().hex
        records = open_records(
            X, component, storage_options=storage_options, allow_fill_values=allow_fill_values
        )
        self._take_feature_names(X, records)
        n_components = _check_n_components(params.n_components, records.shape[1])
        options = ReleaseOptions(params.trusted_worker, params.require_trusted, params.progress)
        with compute_target(params.scheduler, options) as target:
            records = records.counted(target)
            n, d = records.shape
            _log_start(fit_id, records, params, target)
            _, plan, mechanism = self.planned_release(n, d, records.row_chunks, target.n_threads)
            described = mechanism.describe()
            _log_plan(fit_id, mechanism, described)
            _warn_release(n, d, params.spatial_sign, mechanism)
            # Every active budget reserves the release before any data is read and
            # commits it after the draw (docs/privacy.md, "Budget").  The release is
            # called from here: its warnings point at the caller of fit (stacklevel).
            try:
                with self._reservation(mechanism, fit_id, records.dataset, target):
                    records, lane_sums = _lane_sums(records, target, plan, params, fit_id)
                    release, placement = target.release(
                        mechanism, lane_sums, n_components, fit_id, dataset=records.dataset
                    )
            except BaseException as error:
                _log_failure(fit_id, clock, error)
                raise
        logger.info("fit %s: noise drawn on %s (%s)", fit_id, release.released_on, placement)
        self._take_release(release, n_components, plan)
        self.privacy_ = _privacy_report(described, fit_id, placement, release)
        seconds = time.monotonic() - clock
        self.provenance_ = fit_provenance(
            X, component, records.input_type, (n, d), started, seconds
        )
        logger.info("fit %s: done in %.1f s", fit_id, seconds)
        return self

    def _take_feature_names(self, X: Any, records: Records) -> None:
        """Check and keep the input's column names, from metadata only (a store has none,
        so none is kept from an earlier fit).
        """
        from ..io import is_lazy_input

        if hasattr(X, "shape") or not is_lazy_input(X):  # metadata only: names and width
            validate_data(self, X, reset=True, skip_check_array=True)
        if records.feature_names is not None:  # a table's or dask DataFrame's columns
            self.feature_names_in_ = np.asarray(records.feature_names, dtype=object)
        elif not hasattr(X, "shape"):  # a store: no names (none kept from an earlier fit)
            self.__dict__.pop("feature_names_in_", None)

    def _reservation(
        self, mechanism: ReleaseMechanism, fit_id: str, dataset: str, target: ComputeTarget
    ) -> AbstractContextManager[Any]:
        """The release reserved in every budget this estimator carries or the
        configuration names, committed after the draw (abandoned on the target if not).
        """
        from ..compute.budget_config import budgets_to_charge

        return reserve_release(
            mechanism,
            fit_id=fit_id,
            dataset=dataset,
            budgets=budgets_to_charge(self.carried_budgets),
            abandon=lambda: target.abandon(fit_id),
        )

    def _take_release(self, release: PrivateRelease, n_components: int, plan: DesignPlan) -> None:
        """The fitted attributes of the release: directions, eigenvalues, their share, shape."""
        self.components_ = release.components
        self.eigenvalues_ = release.eigenvalues
        positive = np.clip(release.eigenvalues, 0.0, None)
        total = positive.sum()
        self.kendall_eigenvalue_ratio_ = (
            positive[:n_components] / total if total > 0 else np.zeros(n_components)
        )
        self.n_features_in_ = plan.n_features
        self.n_samples_ = plan.n_samples

    def planned_release(
        self, n_samples: int, n_features: int, row_chunks: Any, n_threads: int
    ) -> tuple[Design, Any, ReleaseMechanism]:
        """The design, block plan and release mechanism a fit of ``n_samples`` x
        ``n_features`` records would use, from public inputs only (nothing is read).

        What :meth:`fit` releases, so that an analysis can reserve the directions'
        exact charge with its other stages before anything is read.

        Parameters
        ----------
        n_samples, n_features : int
            The records' shape.
        row_chunks : tuple of int or None
            The input's row chunks (the auto design follows them).
        n_threads : int
            The compute target's threads.

        Returns
        -------
        (Design, BlockPlan, ReleaseMechanism)
        """
        params = self._validated()
        design, plan = plan_blocks(n_samples, n_features, row_chunks, params.design, n_threads)
        mechanism = ReleaseMechanism.plan_release(
            design,
            plan,
            params.spatial_sign,
            params.target,
            _noise_sampler(n_features, params.random_state),
        )
        return design, plan, mechanism

    def plan(
        self,
        X: Any,
        *,
        workers: int | None = None,
        threads: int | None = None,
        memory_limit: int | str | None = None,
        spectrum: Any = None,
        pilot: Any = None,
        df: float | None = None,
        machine: Any = None,
        component: str | None = None,
        storage_options: dict[str, Any] | None = None,
        allow_fill_values: bool = False,
        check: bool = True,
    ) -> Any:
        """What :meth:`fit` would do on ``X``, predicted before anything runs.

        Reads public metadata only (the shape, the row chunks, the dtype; never a chunk,
        never a privacy budget or ledger) and returns a
        :class:`~dask_dppca.planning.fit_plan.FitPlan`: the design ``design`` resolves to, its
        blocks and pair tasks, the graph's task count, the bytes read, the peak memory of
        a worker, the predicted wall time (on the machine model ``dask-dppca bench
        --save`` measures) and, for a stated ``spectrum`` or a public ``pilot``, the
        expected subspace error.

        Parameters
        ----------
        X
            As in :meth:`fit` (a dask DataFrame needs its partition lengths known).
        workers, threads : int, optional
            The cluster to plan for: ``workers`` of ``threads`` each.  By default the
            target ``scheduler`` names (the active client's cluster, an address's, or
            the embedded cluster a fit would start here, without starting it).
        memory_limit : int or str, optional
            Each worker's memory limit (bytes, or ``"4GiB"``); with ``workers``.
        spectrum : array_like, optional
            Eigenvalues of the records' scatter matrix, stated from public knowledge.
        pilot : array_like, optional
            A PUBLIC pilot data set (n_pilot x d) whose covariance eigenvalues stand in
            for ``spectrum``.  Never the private data.
        df : float, optional
            Degrees of freedom of the utility model's multivariate t (None: Gaussian).
        machine : MachineModel, str or os.PathLike, optional
            The machine model, or the file holding one (default: the saved one, else the
            built-in default, :func:`~dask_dppca.planning.machine.load_machine_model`).
        component, storage_options, allow_fill_values
            As in :meth:`fit`.
        check : bool, default=True
            Raise :class:`~dask_dppca.planning.fit_plan.PlanDoesNotFitError` when the plan does not
            fit (a worker's memory, the scheduler's task count), naming what to change.

        Returns
        -------
        FitPlan
        """
        params = self._validated()
        from ..io import open_records
        from ..planning.fit_plan import PlanDoesNotFitError, plan_fit
        from ..planning.inputs import planned_cluster, planned_machine, planned_spectrum

        records = open_records(
            X, component, storage_options=storage_options, allow_fill_values=allow_fill_values
        )
        d = records.shape[1]
        plan = plan_fit(
            records,
            design=params.design,
            spatial_sign=params.spatial_sign,
            target=params.target,
            n_components=_check_n_components(params.n_components, d),
            shape=planned_cluster(params.scheduler, workers, threads, memory_limit),
            machine=planned_machine(machine),
            spectrum=planned_spectrum(spectrum, pilot, d),
            df=df,
            sampler=_noise_sampler(d, params.random_state),
        )
        if check and not plan.fits:
            raise PlanDoesNotFitError(plan)
        return plan

    def _validated(self) -> _Parameters:
        """Every parameter checked once (the constraint table, the privacy target, the
        spatial sign), before anything starts or is read.
        """
        params = self.get_params(deep=False)
        checked = {name: check(name, params[name]) for name, check in PARAMETER_CONSTRAINTS.items()}
        target = PrivacyTarget.of(params["epsilon"], params["delta"], params["calibration"])
        g = resolve_spatial_sign(params["spatial_sign"], params["radius"])
        if not g.is_bounded:
            raise ValueError(
                f"spatial_sign: {g.name!r} is unbounded and has no finite sensitivity; "
                "use dask_dppca.kendall_matrix for a non-private reference"
            )
        return _Parameters(target=target, spatial_sign=g, **checked)

    def transform(
        self,
        X: Any,
        *,
        component: str | None = None,
        storage_options: dict[str, Any] | None = None,
        allow_fill_values: bool = False,
    ) -> Any:
        """Scores ``X @ components_.T`` (not centred).

        The estimator holds no location estimate (releasing one would need its own
        privacy budget), so scores are not centred: subtract a public or separately
        privatised centre from ``X`` first if centred scores are needed.  The scores
        depend only on the ``X`` given here and the private components.
        ``component``, ``storage_options`` and ``allow_fill_values`` are as in :meth:`fit`.

        Returns
        -------
        ndarray or dask.array.Array, shape (n, n_components)
            A dask array for dask or Zarr input, else numpy.
        """
        check_is_fitted(self, "components_")
        from ..io import is_lazy_input, open_records
        from ..io.records import check_unmasked

        check_unmasked(X)
        if is_lazy_input(X):
            records = open_records(
                X, component, storage_options=storage_options, allow_fill_values=allow_fill_values
            )
            _check_width(records.shape[1], self.n_features_in_)
            # dask.array.Array.astype has no annotations (no-untyped-call).
            scores = records.array.astype(np.float64)  # type: ignore[no-untyped-call]
            return scores @ self.components_.T
        # In memory: scikit-learn's checks (width, column names) and wording.  NaN and
        # inf pass through: their scores are NaN/inf, as the input's.
        data = validate_data(self, X, reset=False, dtype=np.float64, ensure_all_finite=False)
        return data @ self.components_.T

    @property
    def explained_variance_ratio_(self) -> np.ndarray:
        """Not an attribute of DPPCA: see ``kendall_eigenvalue_ratio_``."""
        raise AttributeError(_NO_VARIANCE.format(name="explained_variance_ratio_"))

    @property
    def explained_variance_(self) -> np.ndarray:
        """Not an attribute of DPPCA: see ``eigenvalues_``."""
        raise AttributeError(_NO_VARIANCE.format(name="explained_variance_"))

    def save(
        self,
        path: str | os.PathLike[str],
        *,
        overwrite: bool = False,
        storage_options: dict[str, Any] | None = None,
    ) -> str:
        """Save the fitted release as a result file (JSON), as ``dask-dppca fit`` writes it.

        The file holds the release (components, eigenvalues), the privacy report, the
        parameters, the library version, the time and the input (its location with
        secrets masked); no data.  :func:`~dask_dppca.decomposition.loading.load_result` (or
        :meth:`load`) reads it back, in this version or a later one.

        Parameters
        ----------
        path : str or os.PathLike
            A local path (its folder must exist) or an fsspec URL.
        overwrite : bool, default=False
            Replace an existing file; by default an existing file is refused.
        storage_options : dict, optional
            fsspec options for a URL.

        Returns
        -------
        str
            Where the file went (an absolute path, or the URL with secrets masked).
        """
        from .results import save_result

        return save_result(self, path, overwrite=overwrite, storage_options=storage_options)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None
    ) -> DPPCA:
        """A fitted DPPCA from a result file (:meth:`save`, ``dask-dppca fit --output``).

        See :func:`~dask_dppca.decomposition.loading.load_result`.
        """
        from .results import read_result, restore_fitted, result_parameters

        payload, shown = read_result(path, storage_options)
        try:
            fitted: DPPCA = restore_fitted(cls(**result_parameters(payload)), payload)
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(
                f"path: {shown!r} is not a valid result file ({type(error).__name__}: {error})"
            ) from None
        return fitted

    @property
    def _n_features_out(self) -> int:
        """Output columns (``get_feature_names_out``: ``dppca0``, ``dppca1``, ...)."""
        return int(self.components_.shape[0])

    def __sklearn_tags__(self) -> Any:  # scikit-learn's Tags
        tags = super().__sklearn_tags__()
        # NaN/inf records are accepted by design: such a row contributes 0 to K_hat and
        # still counts in n (docs/robustness.md), so the sensitivity is unchanged.
        tags.input_tags.allow_nan = True
        tags.transformer_tags.preserves_dtype = ["float64"]
        return tags


_NO_VARIANCE = (
    "DPPCA has no {name}: its eigenvalues are of the noisy Kendall (spatial-sign) matrix, "
    "not variances; use eigenvalues_ and kendall_eigenvalue_ratio_ (their share, not a "
    "share of variance)"
)


def _log_start(fit_id: str, records: Records, params: _Parameters, target: ComputeTarget) -> None:
    """Log a fit's start: its input (location or type, shape), privacy target and where."""
    n, d = records.shape
    logger.info(
        "fit %s: start: %s (%d x %d), epsilon=%g, delta=%g, spatial_sign=%s, calibration=%s, on %r",
        fit_id,
        records.location or records.input_type,
        n,
        d,
        params.target.epsilon,
        params.target.delta,
        params.spatial_sign.name,
        params.target.calibration,
        target,
    )


def _log_plan(fit_id: str, mechanism: ReleaseMechanism, described: dict[str, Any]) -> None:
    """Log a fit's plan: design and counts, sensitivity, sigma, signal to noise."""
    logger.info(
        "fit %s: plan: %s design, %d blocks, %d block pairs, %d pairs; "
        "sensitivity %.4g, sigma %.4g, signal to noise at most %.3g",
        fit_id,
        described["design"],
        described["n_blocks"],
        described["n_block_pairs"],
        described["n_pairs"],
        mechanism.sensitivity,
        mechanism.sigma,
        described["signal_to_noise"],
    )


def _log_failure(fit_id: str, clock: float, error: BaseException) -> None:
    """Log a failed fit: its time since ``clock`` and the error's type (not its text)."""
    logger.warning(
        "fit %s: failed after %.1f s: %s",
        fit_id,
        time.monotonic() - clock,
        type(error).__name__,
    )


def _warn_release(n: int, d: int, spatial_sign: SpatialSign, mechanism: ReleaseMechanism) -> None:
    """Warn of a release the public quantities show to be poor (noise above any signal,
    delta above 1/n), at the caller of :meth:`DPPCA.fit`.
    """
    for category, message in release_warnings(
        n, d, spatial_sign.bound, mechanism.sigma, mechanism.delta
    ):
        warnings.warn(message, category, stacklevel=3)  # fit's caller: helper, fit, caller


def _lane_sums(
    records: Records, target: ComputeTarget, plan: DesignPlan, params: _Parameters, fit_id: str
) -> tuple[Records, list[Delayed]]:
    """The records (rows in memory kept on a cluster, in the plan's blocks) and the
    graph of their exact pair sums.
    """
    from ..compute import ClusterTarget
    from ..graph import kernel_sum_graph

    if isinstance(target, ClusterTarget):  # rows in memory: scattered
        records = records.kept_on(target, plan.block_sizes)
    lane_sums = kernel_sum_graph(
        records.blocks(plan.block_sizes),
        plan,
        params.spatial_sign,
        target.n_threads,
        fit_id=fit_id,
        cluster=target.worker_tasks,
    )
    return records, lane_sums


def _privacy_report(
    described: dict[str, Any], fit_id: str, placement: str, release: PrivateRelease
) -> PrivacyReport:
    """``privacy_``: the mechanism's description, the fit id and where the noise was drawn."""
    return PrivacyReport(
        {
            **described,
            "fit_id": fit_id,
            "release_placement": placement,
            "released_on": release.released_on,
        }
    )


def _noise_sampler(n_features: int, random_state: int | None) -> NoiseSampler:
    """OS-entropy noise for real releases; a seeded, NOT private sampler for tests."""
    return make_sampler("gaussian", random_state, n_entries=n_features * (n_features + 1) // 2)


def _check_n_components(n_components: int, d: int) -> int:
    if n_components > d:
        raise ValueError(f"n_components: must be in 1..{d} (d = {d}), got {n_components}")
    return n_components


def _check_width(width: int, expected: int) -> None:
    if width != expected:
        raise ValueError(f"X: has {width} features, the estimator was fitted on {expected}")
