"""Make tests/estimator/data/pinned_analyses.json: four seeded analyses (NOT PRIVATE
seeds: a refactor check only) as their records, less ids and worker addresses.

Run from the repository root: ``python tests/estimator/data/make_pinned_analyses.py
tests/estimator/data/pinned_analyses.json``.  The file in the repository was made at
commit 70c799d, before the analysis became a loop over registered stages.
"""

import json
import sys

import numpy as np

import dask_dppca as dd

#: Record keys that differ run to run (random ids, worker addresses): left out of the pin.
VOLATILE = {
    "analysis_id",
    "directions_fit_id",
    "fit_id",
    "released_on",
    "stage_id",
    "drawn on",
    "transaction_id",
}


def scrub(v):
    """``v`` without its :data:`VOLATILE` keys, at any depth."""
    if isinstance(v, dict):
        return {k: scrub(x) for k, x in v.items() if k not in VOLATILE}
    if isinstance(v, list):
        return [scrub(x) for x in v]
    return v


rng = np.random.default_rng(7)  # TEST data
X = rng.standard_t(3, size=(3000, 6)) * np.array([3, 2, 1.5, 1, 1, 0.5])
labels = rng.choice(np.array(["a", "b", "c"]), size=3000, p=[0.6, 0.3, 0.1])
CASES = {
    "default_threads": dict(n_components=3, epsilon=2.0, random_state=5, scheduler="threads"),
    "groups_mono": dict(
        n_components=2,
        epsilon=1.5,
        random_state=11,
        scheduler="threads",
        groups=labels,
        group_domain=["a", "b", "c"],
        mono=True,
        methods=("clipped", "robust"),
        score_methods=("additive", "sparse"),
    ),
    "winsor_nomap": dict(
        n_components=3,
        epsilon=3.0,
        spatial_sign="winsor",
        radius=1.0,
        score_map=False,
        random_state=3,
        scheduler="threads",
    ),
    "split_embedded": dict(
        n_components=2,
        epsilon=2.5,
        random_state=9,
        split={"directions": 0.6, "scree": 0.2, "score_map": 0.2},
    ),
}


def pinned_record(name):
    """The record of the case ``name`` as the pin keeps it."""
    return scrub(dd.analyze(X, **CASES[name]).to_dict())


if __name__ == "__main__":
    out = {name: pinned_record(name) for name in CASES}
    with open(sys.argv[1], "w") as handle:
        json.dump(out, handle, sort_keys=True, indent=0)
    print("wrote", sys.argv[1])
