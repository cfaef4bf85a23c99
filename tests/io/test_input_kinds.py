"""An input's kind is told once, from its type (and a path's name), never its values.

:func:`dask_dppca.io.open_records` asks each kind of ``records._INPUT_KINDS`` at most once
whether an input is of it, and the first that answers opens it; :func:`is_lazy_input`
reads the same table.  Seeds generate TEST DATA only.
"""

from __future__ import annotations

import dask.array as da
import dask.dataframe as ddf
import numpy as np
import pandas as pd
import pytest
import scipy.sparse
import xarray as xr
import zarr

from dask_dppca.io import is_lazy_input, open_records
from dask_dppca.io import records as records_module

ROWS = np.random.default_rng(0).standard_normal((40, 3))  # test data only


def _inputs(tmp_path):
    """(input, lazy, the type of the rows it opens to) for every kind."""
    zarr.save_array(str(tmp_path / "x.zarr"), ROWS)
    pd.DataFrame(ROWS, columns=["a", "b", "c"]).to_csv(tmp_path / "x.csv", index=False)
    frame = ddf.from_pandas(pd.DataFrame(ROWS, columns=["a", "b", "c"]), npartitions=2)
    return {
        "in memory": (ROWS, False, np.ndarray),
        "list": (ROWS.tolist(), False, np.ndarray),
        "dask array": (da.from_array(ROWS, chunks=(10, 3)), True, da.Array),
        "zarr path": (str(tmp_path / "x.zarr"), True, da.Array),
        "zarr array": (zarr.open_array(str(tmp_path / "x.zarr"), mode="r"), True, da.Array),
        "table": (str(tmp_path / "x.csv"), True, da.Array),
        "xarray": (xr.DataArray(ROWS, dims=("record", "feature")), True, da.Array),
        "dask dataframe": (frame, True, da.Array),
    }


def test_every_kind_is_told_once_and_opened_by_its_own_opener(tmp_path, monkeypatch):
    asked: list[str] = []

    def counted(kind):
        def matches(data):
            asked.append(kind.name)
            return kind.matches(data)

        return records_module._InputKind(kind.name, matches, kind.open, kind.lazy)

    kinds = tuple(counted(kind) for kind in records_module._INPUT_KINDS)
    monkeypatch.setattr(records_module, "_INPUT_KINDS", kinds)
    for name, (data, lazy, rows) in _inputs(tmp_path).items():
        asked.clear()
        records = open_records(data)
        assert len(asked) == len(set(asked)), f"{name}: a kind was asked twice: {asked}"
        assert isinstance(records.source, rows), name
        assert records.shape[1] == 3, name
        assert is_lazy_input(data) is lazy, name


def test_a_sparse_matrix_is_refused_and_counts_as_in_memory():
    sparse = scipy.sparse.csr_matrix(ROWS)
    assert not is_lazy_input(sparse)
    with pytest.raises(ValueError, match=r"^X: sparse input is not supported \(got csr_matrix\)"):
        open_records(sparse)
