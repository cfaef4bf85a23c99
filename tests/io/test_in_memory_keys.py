"""Rows in memory enter the graph under random key names, never a digest of the records.

Dask names an array from ``from_array`` by hashing its values unless told otherwise: a
digest of the sensitive records would then sit in every key the dashboard, the logs and
the scheduler's events show, and anyone holding a candidate data set could confirm it.
"""

from __future__ import annotations

import dask.array as da
import numpy as np

from dask_dppca.io import open_records


def test_in_memory_rows_get_random_key_names_not_a_hash_of_the_rows():
    rows = np.random.default_rng(4).standard_normal((40, 3))  # test data
    # Dask's own names for these rows: a hash of their values.
    hashed = {
        da.from_array(rows, chunks=rows.shape).name,
        da.from_array(rows, chunks=((20, 20), -1)).name,
    }
    first, second = open_records(rows), open_records(rows.copy())
    names = [
        first.array.name,
        first.blocks((20, 20)).name,
        second.array.name,
        second.blocks((20, 20)).name,
    ]
    assert len(set(names)) == len(names)  # two opens of the same rows share no name
    for array in (first.array, first.blocks((20, 20))):
        assert not hashed & {key[0] for key in array.__dask_graph__()}
        np.testing.assert_array_equal(array.compute(scheduler="synchronous"), rows)
