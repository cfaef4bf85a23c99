"""How tests/estimator/data/pinned_fits.json was made: run at commit 96b673f (before the
issue 14 refactor of the estimator) from the repository root; the "release_sigma" part
came from dask_dppca.theory.release_sigma at the same commit.  Seeds: TEST noise only.
"""
import json, sys, warnings
import numpy as np
sys.path.insert(0, ".")
import dask_dppca as dd
from dask_dppca.datasets import make_elliptical, random_directions, spiked_spectrum

CASES = [
    dict(name="sphere-complete", n=700, d=5, params=dict(n_components=2, epsilon=1.0, delta=1e-6)),
    dict(name="winsor-classical", n=500, d=4, params=dict(n_components=1, epsilon=0.5, delta=1e-5, transform="winsor", radius=2.0, calibration="classical")),
    dict(name="regular", n=3000, d=6, params=dict(n_components=3, epsilon=2.0, delta=1e-6, design=dd.RegularDesign(k=2, block_size=256, seed=4))),
    dict(name="custom-lattice", n=400, d=160, params=dict(n_components=2, epsilon=1.0, delta=1e-6, transform=dd.custom(lambda s: np.minimum(s, 1.5), 1.5))),
]
out = []
warnings.simplefilter("ignore")
for i, case in enumerate(CASES):
    d = case["d"]
    x = make_elliptical(case["n"], spiked_spectrum(d, n_spikes=2, spike=6.0), random_directions(d, seed=i), df=1.0, seed=100 + i)
    est = dd.DPPCA(**case["params"], random_state=7 + i, scheduler="threads").fit(x)
    priv = {k: v for k, v in est.privacy_.items() if k != "fit_id"}
    out.append(dict(name=case["name"], components=[float(v).hex() for v in est.components_.ravel()],
                    eigenvalues=[float(v).hex() for v in est.eigenvalues_], privacy=priv))
json.dump(out, open("/tmp/pinned_fits.json", "w"), indent=1, default=lambda v: v.item() if hasattr(v, "item") else str(v))
print("ok")
