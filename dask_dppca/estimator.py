"""DPPCA: the scikit-learn style estimator, a thin shell over kernel, graph and privacy."""

from __future__ import annotations

import numbers
import time
import types
import uuid
from contextlib import nullcontext
from typing import Any, NamedTuple

import dask
import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from . import cluster
from .design import resolve_design
from .graph import kernel_sum_graph, single_threaded_blas
from .io import as_dask_array, is_lazy_input
from .kernel import rounding_error_bound
from .privacy.budget import current_budget
from .privacy.calibration import calibrate_sigma, validate_privacy_parameters
from .privacy.noise import SeededSampler, default_sampler
from .privacy.release import (
    PrivateRelease,
    TrustedSum,
    placement_available,
    private_release,
    register_sealing,
    release_placement,
)
from .transforms import Transform, resolve_transform

__all__ = ["DPPCA", "kendall_matrix"]


class _TransformParameterAndMethod:
    """``DPPCA.transform`` is both a parameter and a method.

    The issue's API names the spatial sign ``transform=`` (as in the paper's
    "transformation g") while scikit-learn names the scoring method ``transform(X)``.
    Assigning the parameter stores the value; reading the attribute gives the bound
    scoring method, so ``est.transform(X)`` and Pipelines work, while
    ``get_params``/``set_params``/``clone`` see the parameter value.
    """

    def __set__(self, estimator, value) -> None:
        estimator.__dict__["_transform_parameter"] = value

    def __get__(self, estimator, owner=None):
        if estimator is None:
            return owner._scores
        return types.MethodType(owner._scores, estimator)


class ReleaseNoise(NamedTuple):
    """The noise of one release, from public quantities only (see :func:`calibrate_release`)."""

    sensitivity: float  # total: the design's, plus rounding and sampler slack
    rounding_slack: float
    sampler_slack: float
    sampler_excess: float
    sigma: float


def calibrate_release(plan, g: Transform, d: int, epsilon: float, delta: float,
                      calibration: str, sampler) -> ReleaseNoise:
    """Sensitivity and sigma of a release of ``plan``'s K_hat, as ``DPPCA.fit`` uses them.

    Public inputs only (the plan's block sizes and pairs, G, d, the budget, the sampler),
    so ``theory.release_sigma`` calls this too and the two cannot drift apart.

    * ``"analytic"``: the design's tight sensitivity plus room for floating point,
      2 G^2 times the kernel's worst-case error (docs/privacy.md).
    * ``"classical"``: the paper's sensitivity, already loose by sqrt(2), no rounding room.

    The sampler's lattice step can double when sigma crosses a power of two, so its slack
    and excess are taken at twice a first sigma: an upper bound for the final, barely
    larger, sigma.
    """
    if calibration == "classical":
        rounding, design_sensitivity = 0.0, plan.paper_sensitivity(g.bound)
    else:
        error = rounding_error_bound(d, max(plan.block_sizes), len(plan.block_pairs))
        rounding, design_sensitivity = 2.0 * g.bound**2 * error, plan.sensitivity(g.bound)
    sensitivity = design_sensitivity + rounding
    n_entries = d * (d + 1) // 2
    first_sigma = calibrate_sigma(sensitivity, epsilon, delta, calibration)
    slack = sampler.sensitivity_slack(n_entries, 2.0 * first_sigma)
    excess = sampler.privacy_excess(n_entries, 2.0 * first_sigma)
    sigma = calibrate_sigma(sensitivity + slack, epsilon, delta, calibration, excess=excess)
    return ReleaseNoise(sensitivity + slack, rounding, slack, excess, sigma)


class DPPCA(TransformerMixin, BaseEstimator, auto_wrap_output_keys=None):
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
    transform : {"sphere", "winsor"} or Transform, default="sphere"
        The generalized spatial sign; a bounded custom one from
        :func:`dask_dppca.transforms.custom`.
    radius : float, optional
        Public winsorization radius (``transform="winsor"``), in the units of
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
        embedded LocalCluster; a local scheduler name (``"threads"``,
        ``"synchronous"``, ``"processes"``); a scheduler address; or a client.
    trusted_worker : str, optional
        Address of the worker that adds the noise when no worker offers the
        ``dppca-trusted`` resource.
    random_state : int, optional
        NOT PRIVATE.  Seeds the noise for tests and reproducible examples only; a
        :class:`~dask_dppca.privacy.noise.NonPrivateRandomStateWarning` is issued.
        Leave it ``None`` for real releases (noise from OS entropy).
    progress : bool, default=False
        Show a progress bar (the distributed progress widget in notebooks).

    Attributes
    ----------
    components_ : ndarray, shape (n_components, n_features)
        Private principal directions as orthonormal rows, largest eigenvalue first.
    eigenvalues_ : ndarray, shape (n_features,)
        All private eigenvalues of ``K_tilde``, decreasing.
    explained_variance_ : ndarray, shape (n_components,)
        The leading private eigenvalues.
    explained_variance_ratio_ : ndarray, shape (n_components,)
        ``max(lambda_k, 0) / sum_j max(lambda_j, 0)`` from the private eigenvalues only.
    privacy_ : dict
        Everything needed to re-derive sigma by hand: epsilon, delta, sensitivity,
        sigma, calibration, n_samples, neighbours, transform bound, design counts.
    n_features_in_ : int
    n_samples_ : int
    """

    def __init__(
        self,
        n_components: int = 2,
        *,
        epsilon: float = 1.0,
        delta: float = 1e-6,
        transform: str | Transform = "sphere",
        radius: float | None = None,
        design: Any = "auto",
        calibration: str = "analytic",
        scheduler: Any = None,
        trusted_worker: str | None = None,
        random_state: int | None = None,
        progress: bool = False,
    ) -> None:
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.transform = transform
        self.radius = radius
        self.design = design
        self.calibration = calibration
        self.scheduler = scheduler
        self.trusted_worker = trusted_worker
        self.random_state = random_state
        self.progress = progress

    transform = _TransformParameterAndMethod()

    def get_params(self, deep: bool = True) -> dict:
        """Parameters of this estimator (``transform`` is the spatial sign's value)."""
        params = super().get_params(deep=deep)
        params["transform"] = self.__dict__.get("_transform_parameter", "sphere")
        return params

    def fit(self, X: Any, y: None = None, *, component: str | None = None,
            storage_options: dict | None = None, allow_fill_values: bool = False) -> DPPCA:
        """Compute the private principal directions of ``X``.

        Parameters
        ----------
        X : ndarray, dask.array.Array, Zarr (path, URL, Array, Group), xarray or dask DataFrame
            Records as rows; a string or path names a Zarr store (local or fsspec URL).
            Lazy inputs stay lazy (see :func:`dask_dppca.io.as_dask_array`).
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
        g = resolve_transform(self.get_params(deep=False)["transform"], self.radius)
        if not g.is_bounded:
            raise ValueError(
                f"transform: {g.name!r} is unbounded and has no finite sensitivity; "
                "use dask_dppca.kendall_matrix for a non-private reference"
            )
        validate_privacy_parameters(self.epsilon, self.delta)
        data = as_dask_array(X, component, storage_options=storage_options,
                             allow_fill_values=allow_fill_values, scheduler=self.scheduler)
        n, d = data.shape
        m = _check_n_components(self.n_components, d)
        with cluster.compute_target(self.scheduler) as target:
            data, plan, design = _plan_blocks(data, self.design, target)

            sampler = self._sampler(d * (d + 1) // 2)
            noise = calibrate_release(plan, g, d, self.epsilon, self.delta, self.calibration, sampler)
            budget = current_budget()
            if budget is not None:
                budget.check(noise.sensitivity, noise.sigma, excess=noise.sampler_excess)  # before any data is read

            fit_id = uuid.uuid4().hex
            graph = kernel_sum_graph(data, plan, g)
            release = self._run(target, graph, plan.n_pairs, noise.sigma, m, sampler, fit_id)
        if budget is not None:
            budget.spend(noise.sensitivity, noise.sigma, label=f"DPPCA fit {fit_id}",
                         excess=noise.sampler_excess)

        self.components_ = release.components
        self.eigenvalues_ = release.eigenvalues
        self.explained_variance_ = release.eigenvalues[:m].copy()
        positive = np.clip(release.eigenvalues, 0.0, None)
        total = positive.sum()
        self.explained_variance_ratio_ = positive[:m] / total if total > 0 else np.zeros(m)
        self.n_features_in_ = d
        self.n_samples_ = n
        self.privacy_ = {
            "epsilon": float(self.epsilon),
            "delta": float(self.delta),
            "neighbours": "replace-one",
            "n_samples": int(n),
            "n_features": int(d),
            "transform": g.name,
            "bound_G": g.bound,
            "radius": g.radius,
            "calibration": self.calibration,
            "sensitivity": noise.sensitivity,
            "sensitivity_formula": (
                "2 G^2 max_degree / n_pairs (paper: 4 G^2 / n)" if self.calibration == "classical"
                else "sqrt(2) G^2 max_degree / n_pairs + rounding_slack + sampler_slack"
            ),
            "sigma_formula": "calibrate_sigma(sensitivity, epsilon, delta, calibration, excess=sampler_excess)",
            "rounding_slack": noise.rounding_slack,
            "sampler_slack": noise.sampler_slack,
            "sampler_excess": noise.sampler_excess,
            "sigma": noise.sigma,
            "noise_law": "vecd: diagonal N(0, sigma^2), off-diagonal N(0, sigma^2/2), independent",
            "sampler": type(sampler).__name__,
            "private": self.random_state is None,
            "fit_id": fit_id,
            **design.describe(),
            **plan.describe(),
        }
        return self

    def _scores(self, X: Any, *, component: str | None = None,
                storage_options: dict | None = None, allow_fill_values: bool = False) -> Any:
        """Scores ``X @ components_.T`` (not centred); called as ``est.transform(X)``.

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
        if is_lazy_input(X):
            data = as_dask_array(X, component, storage_options=storage_options,
                                 allow_fill_values=allow_fill_values, scheduler=self.scheduler)
            _check_width(data.shape[1], self.n_features_in_)
            return data.astype(np.float64) @ self.components_.T
        data = np.asarray(X, dtype=np.float64)
        if data.ndim != 2:
            raise ValueError(f"X: expected a 2-D array, got {data.ndim} dimension(s)")
        _check_width(data.shape[1], self.n_features_in_)
        return data @ self.components_.T

    # -- helpers -------------------------------------------------------------------

    def _sampler(self, n_entries: int):
        if self.random_state is None:
            return default_sampler(n_entries)
        return SeededSampler(self.random_state)

    def _run(self, target, graph, n_pairs, sigma, m, sampler, fit_id) -> PrivateRelease:
        if isinstance(target, str):
            with _local_progress(self.progress), single_threaded_blas():
                (kernel_sum,) = dask.compute(graph, scheduler=target)
            return private_release(kernel_sum, n_pairs, sigma, m, sampler, fit_id)
        return _run_distributed(target, graph, n_pairs, sigma, m, sampler, fit_id,
                                self.trusted_worker, self.progress)


def _run_distributed(client, graph, n_pairs, sigma, m, sampler, fit_id, trusted_worker, progress):
    """Exact sum stays on the cluster; one non-retried task releases; only it is gathered."""
    placement = release_placement(client, trusted_worker)
    register_sealing(client)
    sum_future = client.compute(dask.delayed(TrustedSum, pure=True)(graph))
    release_future = client.submit(
        private_release, sum_future, n_pairs, sigma, m, sampler, fit_id,
        key=f"dppca-release-{fit_id}", pure=False, retries=0, **placement,
    )
    try:
        if progress:
            import distributed

            # On the sum, not the release: in a terminal this blocks, and the release
            # must stay under _await_release's watch for a lost trusted worker.
            distributed.progress(sum_future)
        return _await_release(client, release_future, placement, fit_id)
    finally:
        release_future.release()
        sum_future.release()


#: Seconds a fit waits for its trusted worker to come back before it gives up.
TRUSTED_WORKER_GRACE = 20.0
_RELEASE_POLL = 0.5


def _await_release(client, future, placement, fit_id):
    """``future.result()``, but a fit whose trusted worker left fails instead of hanging.

    The release task can only run where ``placement`` allows; with that worker gone it
    would wait forever in the scheduler's no-worker state.  After
    ``TRUSTED_WORKER_GRACE`` seconds without it the release is cancelled (nothing was
    drawn unless a ticket exists, nothing is released) and a RuntimeError says why.
    """
    import distributed

    missing_since = None
    while True:
        try:
            return future.result(timeout=_RELEASE_POLL)
        except TimeoutError:
            pass
        except distributed.KilledWorker as error:
            raise RuntimeError(
                f"release {fit_id}: the trusted worker died while releasing ({error}); "
                "nothing was released to this client"
            ) from None
        try:
            workers = client.scheduler_info(n_workers=-1)["workers"]
        except (OSError, TimeoutError) as error:
            raise RuntimeError(
                f"release {fit_id}: lost the scheduler ({error}); nothing was released"
            ) from None
        if placement_available(placement, workers):
            missing_since = None
            continue
        missing_since = missing_since or time.monotonic()
        if time.monotonic() - missing_since > TRUSTED_WORKER_GRACE:
            future.cancel()
            raise RuntimeError(
                f"release {fit_id}: the trusted worker ({placement or 'any worker'}) left the "
                f"cluster and did not come back within {TRUSTED_WORKER_GRACE:g} s; the fit was "
                "stopped and nothing was released"
            )


def kendall_matrix(
    X: Any,
    transform: str | Transform = "sphere",
    radius: float | None = None,
    *,
    scheduler: Any = "threads",
    component: str | None = None,
    design: Any = "complete",
    storage_options: dict | None = None,
    allow_fill_values: bool = False,
) -> np.ndarray:
    """The exact, NON-PRIVATE ``K_hat = mean over pairs i<j of g(t_ij) g(t_ij)^T``.

    For research, tests and non-private references: its output is a deterministic
    function of the data and must not be released.  The identity transform gives
    the sample covariance.

    Parameters
    ----------
    X : ndarray, dask.array.Array, zarr.Array, str or os.PathLike
        Records as rows.
    transform : {"sphere", "winsor", "identity"} or Transform, default="sphere"
    radius : float, optional
        Winsorization radius.
    scheduler : str or distributed.Client, default="threads"
        Where to compute (see :class:`DPPCA`).
    component : str, optional
        Array inside a Zarr group, or an xarray Dataset variable.
    design : {"complete", "auto"} or RegularDesign, default="complete"
        Which pairs are averaged.
    storage_options : dict, optional
        fsspec options for a URL (see :meth:`DPPCA.fit`).
    allow_fill_values : bool, default=False
        Read missing Zarr chunks as the fill value (see :meth:`DPPCA.fit`).

    Returns
    -------
    ndarray, shape (d, d)
    """
    g = resolve_transform(transform, radius)
    data = as_dask_array(X, component, storage_options=storage_options,
                         allow_fill_values=allow_fill_values, scheduler=scheduler)
    with cluster.compute_target(scheduler) as target:
        data, plan, _ = _plan_blocks(data, design, target)
        graph = kernel_sum_graph(data, plan, g)
        if isinstance(target, str):
            with single_threaded_blas():
                (kernel_sum,) = dask.compute(graph, scheduler=target)
        else:
            kernel_sum = target.compute(graph).result()
    return kernel_sum / plan.n_pairs


def _plan_blocks(data, design, target):
    """Resolve the design for this input and cluster; rechunk rows to its blocks."""
    n, d = data.shape
    chosen = resolve_design(design, n, d, cluster.thread_count(target))
    plan = chosen.plan(data.chunks[0])
    if tuple(data.chunks[0]) != plan.block_sizes:
        data = data.rechunk({0: plan.block_sizes})
    return data, plan, chosen


def _check_n_components(n_components: Any, d: int) -> int:
    if isinstance(n_components, bool) or not isinstance(n_components, numbers.Integral):
        raise ValueError(f"n_components: must be an integer in 1..{d}, got {n_components!r}")
    if not 1 <= n_components <= d:
        raise ValueError(f"n_components: must be in 1..{d} (d = {d}), got {n_components}")
    return int(n_components)


def _check_width(width: int, expected: int) -> None:
    if width != expected:
        raise ValueError(f"X: has {width} features, the estimator was fitted on {expected}")


def _local_progress(enabled: bool):
    """dask.diagnostics.ProgressBar when asked for, else nothing."""
    if not enabled:
        return nullcontext()
    from dask.diagnostics import ProgressBar

    return ProgressBar()
