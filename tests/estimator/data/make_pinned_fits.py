"""How tests/estimator/data/pinned_fits.json was made: run from the repository root as
``python tests/estimator/data/make_pinned_fits.py SOURCE`` (SOURCE names the commit, for
the record).  It re-pins the cases of tests/estimator/test_pinned_fits.py; first pinned
at 96b673f, re-pinned for the GEMM-rate kernel (another summation order, the rounding
bound counting both tile sums: the last bits and sigma moved, see the commit message),
and for tiles of 384 rows and the default sampler's 40-bit OpenDP grid (sigma moved).
Seeds: TEST noise only.
"""

import json
import sys
import warnings
from pathlib import Path

sys.path.insert(0, ".")
import dask_dppca as dd
from dask_dppca.datasets import make_elliptical, random_directions, spiked_spectrum
from dask_dppca.planning.utility import release_sigma
from tests.estimator.test_pinned_fits import ADDED_KEYS, PARAMS

PATH = Path("tests/estimator/data/pinned_fits.json")
pinned = json.loads(PATH.read_text())
warnings.simplefilter("ignore")
fits = []
for i, (name, case) in enumerate(PARAMS.items()):
    d = case["d"]
    x = make_elliptical(
        case["n"],
        spiked_spectrum(d, n_spikes=2, spike=6.0),
        random_directions(d, seed=i),
        df=1.0,
        seed=100 + i,
    )
    est = dd.DPPCA(**case["params"], random_state=7 + i, scheduler="threads").fit(x)
    privacy = {k: v for k, v in est.privacy_.items() if k not in ADDED_KEYS | {"fit_id"}}
    fits.append(
        dict(
            name=name,
            components=[float(v).hex() for v in est.components_.ravel()],
            eigenvalues=[float(v).hex() for v in est.eigenvalues_],
            privacy=privacy,
        )
    )
for row in pinned["release_sigma"]:
    row["sigma"] = float(
        release_sigma(
            row["n"],
            row["d"],
            row["epsilon"],
            row["delta"],
            spatial_sign=row["spatial_sign"],
            radius=row["radius"],
            calibration=row["calibration"],
            n_threads=2,
        )
    ).hex()
pinned.update(source_commit=sys.argv[1], fits=fits)
PATH.write_text(
    json.dumps(pinned, indent=1, default=lambda v: v.item() if hasattr(v, "item") else str(v))
    + "\n"
)
print("ok")
