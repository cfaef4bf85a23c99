"""Result files: a fitted release you can keep, read and load back.

One format for ``DPPCA.save`` and ``dask-dppca fit --output`` (JSON, format version
:data:`RESULT_FORMAT_VERSION`)::

    {"format": "dask-dppca-result", "format_version": 1,
     "library_version": "0.1.0", "created": "2025-01-31T12:00:00+00:00",
     "fit_seconds": 3.2,
     "input": {"location": "/data/x.zarr", "component": null, "type": "str",
               "shape": [200000, 40]},
     "parameters": {"n_components": 3, "epsilon": 1.0, "delta": 1e-06, ...},
     "n_samples": 200000, "n_features": 40, "feature_names": null,
     "components": [[...], ...], "eigenvalues": [...],
     "kendall_eigenvalue_ratio": [...],
     "privacy": {...}}

It holds the release and public metadata only: no data value, no storage option, a
location with its secrets masked.  :func:`read_result` checks the format and its version
(a file from a newer format is refused with what to do; the library version that wrote
it is recorded, not required), and
:func:`~dask_dppca.decomposition.loading.load_result` makes of it a fitted
:class:`~dask_dppca.decomposition.estimator.DPPCA` whose ``transform`` works as after the
fit.  This module never imports the estimator (the estimator imports it): an estimator
is passed in, or made by the caller from :func:`result_parameters`.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from ..design import RegularDesign
from ..io import check_writable, write_json
from ..io.output import local_path
from ..io.storage import check_storage_options, display_location, filesystem, remote_error
from ..kernel import SpatialSign
from ..privacy.report import PrivacyReport
from .provenance import library_version

__all__ = [
    "RESULT_FORMAT",
    "RESULT_FORMAT_VERSION",
    "read_result",
    "restore_fitted",
    "result_parameters",
    "result_payload",
    "save_result",
]

#: The ``format`` entry of every result file.
RESULT_FORMAT = "dask-dppca-result"
#: The newest format this version reads and the one it writes.
RESULT_FORMAT_VERSION = 1


def result_payload(est: Any) -> dict[str, Any]:
    """The result file's content for a fitted DPPCA (JSON-ready)."""
    provenance = getattr(est, "provenance_", None)
    if provenance is None or not hasattr(est, "components_"):
        raise ValueError("est: not fitted; call fit before saving a result")
    names = getattr(est, "feature_names_in_", None)
    return {
        "format": RESULT_FORMAT,
        "format_version": RESULT_FORMAT_VERSION,
        "library_version": provenance["library_version"],
        "created": provenance["fitted_at"],
        "fit_seconds": provenance["fit_seconds"],
        "input": provenance["input"],
        "parameters": _parameters(est),
        "n_samples": int(est.n_samples_),
        "n_features": int(est.n_features_in_),
        "feature_names": None if names is None else [str(name) for name in names],
        "components": est.components_.tolist(),
        "eigenvalues": est.eigenvalues_.tolist(),
        "kendall_eigenvalue_ratio": est.kendall_eigenvalue_ratio_.tolist(),
        "privacy": dict(est.privacy_),
    }


def save_result(
    est: Any,
    path: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    storage_options: dict[str, Any] | None = None,
    name: str = "path",
    overwrite_hint: str = "pass overwrite=True to replace it",
    checked: bool = False,
) -> str:
    """Write ``est``'s result file (see
    :meth:`~dask_dppca.decomposition.estimator.DPPCA.save`); where it went.

    ``checked``: the location was checked (:func:`~dask_dppca.io.output.check_writable`) before
    the fit, as the command line does; a file that appeared there since is then left
    alone and the result kept beside it (:func:`~dask_dppca.io.output.write_json`).
    """
    payload = result_payload(est)
    if not checked:
        check_writable(
            path, storage_options, name, overwrite=overwrite, overwrite_hint=overwrite_hint
        )
    return write_json(path, payload, storage_options, name, overwrite=overwrite)


def read_result(
    path: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
) -> tuple[dict[str, Any], str]:
    """The checked content of a result file and the path as shown in messages.

    Raises
    ------
    ValueError
        Naming the file: not a result file (an analysis file is pointed to its reader),
        or a newer format than this version reads.
    """
    shown = display_location(path)
    payload = _read_json(path, storage_options, shown)
    if isinstance(payload, dict) and str(payload.get("format", "")).startswith(
        "dask-dppca private analysis"
    ):  # the other kind of file: point to its reader
        raise ValueError(
            f"path: {shown!r} is an analysis file (dask-dppca analyze); read it with "
            f"dask_dppca.PrivateAnalysis.load({os.fspath(path)!r}); load_result reads the "
            "result of a fit (dask-dppca fit, DPPCA.save)"
        )
    if not isinstance(payload, dict) or payload.get("format") != RESULT_FORMAT:
        raise ValueError(f"path: {shown!r} is not a dask-dppca result file (no format entry)")
    version = payload.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"path: {shown!r} has an invalid format_version {version!r}")
    if version > RESULT_FORMAT_VERSION:
        raise ValueError(
            f"path: {shown!r} has result format_version {version} (written by dask-dppca "
            f"{payload.get('library_version', '?')}); this dask-dppca ({library_version()}) reads "
            f"format {RESULT_FORMAT_VERSION} and older: upgrade dask-dppca to load it"
        )
    return payload, shown


def _read_json(
    path: str | os.PathLike[str], storage_options: dict[str, Any] | None, shown: str
) -> Any:
    options = check_storage_options(storage_options, path, "path")
    local = local_path(path)
    try:
        if local is not None:
            text = local.read_text()
        else:
            fs, remote = filesystem(os.fspath(path), options, "path")
            text = fs.cat_file(remote).decode()
    except FileNotFoundError:
        raise ValueError(f"path: result file {shown!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"path: cannot read {shown!r} ({remote_error(error, options)})") from None
    try:
        return json.loads(text)
    except ValueError as error:
        raise ValueError(f"path: {shown!r} is not JSON ({error})") from None


def result_parameters(payload: dict[str, Any]) -> dict[str, Any]:
    """The fit's parameters from a result's content (a regular design made again)."""
    parameters = dict(payload["parameters"])
    design = parameters.get("design", "auto")
    if isinstance(design, dict):
        parameters["design"] = RegularDesign(
            k=design["k"],
            block_size=design["block_size"],
            seed=design["seed"],
            walk_group=design.get("walk_group", 1),
        )
    return parameters


def restore_fitted(est: Any, payload: dict[str, Any]) -> Any:
    """``est`` (a DPPCA made with :func:`result_parameters`) fitted as the result says:
    its components, eigenvalues, privacy report and provenance, checked to fit together.
    """
    d = int(payload["n_features"])
    components = np.asarray(payload["components"], dtype=np.float64)
    eigenvalues = np.asarray(payload["eigenvalues"], dtype=np.float64)
    ratio = np.asarray(payload["kendall_eigenvalue_ratio"], dtype=np.float64)
    k = est.n_components
    if components.shape != (k, d) or eigenvalues.shape != (d,) or ratio.shape != (k,):
        raise ValueError(
            f"components {components.shape}, eigenvalues {eigenvalues.shape} and "
            f"kendall_eigenvalue_ratio {ratio.shape} do not fit n_components = {k}, d = {d}"
        )
    if not (np.all(np.isfinite(components)) and np.all(np.isfinite(eigenvalues))):
        raise ValueError("components and eigenvalues must be finite")
    est.components_ = components
    est.eigenvalues_ = eigenvalues
    est.kendall_eigenvalue_ratio_ = ratio
    est.n_features_in_ = d
    est.n_samples_ = int(payload["n_samples"])
    if payload.get("feature_names") is not None:
        est.feature_names_in_ = np.asarray(payload["feature_names"], dtype=object)
    est.privacy_ = PrivacyReport(payload["privacy"])
    est.provenance_ = {
        "library_version": payload.get("library_version"),
        "fitted_at": payload.get("created"),
        "fit_seconds": payload.get("fit_seconds"),
        "input": payload.get("input"),
    }
    return est


def _parameters(est: Any) -> dict[str, Any]:
    """The estimator's parameters as JSON: a spatial sign by name (and radius), a
    regular design by its three numbers, a scheduler only if it is a name or address.
    """
    params: dict[str, Any] = est.get_params(deep=False)
    g = params["spatial_sign"]
    if isinstance(g, SpatialSign):
        params["spatial_sign"] = g.name
        if g.name == "winsor":
            params["radius"] = g.radius
    design = params["design"]
    if isinstance(design, RegularDesign):
        params["design"] = {"k": design.k, "block_size": design.block_size, "seed": design.seed}
        if design.walk_group > 1:  # only then: results of ungrouped designs keep their keys
            params["design"]["walk_group"] = design.walk_group
    elif not isinstance(design, str):
        params["design"] = design.name  # CompleteDesign()
    if not (params["scheduler"] is None or isinstance(params["scheduler"], str)):
        params["scheduler"] = None  # a client object: where it ran is in privacy_
    return params
