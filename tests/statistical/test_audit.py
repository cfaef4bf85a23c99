"""Privacy you can audit: the released noise has the claimed law, end to end, and a
distinguishing attack on worst-case neighbours cannot certify more than the claimed epsilon.

Everything here goes through the real release path with the real default sampler (OpenDP's
exact discrete Gaussian, OS entropy) and the sigma the estimator *reports*
(``est.privacy_["sigma"]``): a mismatch between the reported and the used sigma, a wrong
vecd scaling, a bias, or correlated entries would fail these tests.  Seeds below generate
TEST DATA only, never privacy noise.

Both checks are statistical with a fixed false-alarm rate, and each is paired with a
deliberately broken mechanism that the same check must reject:

* the noise law (``test_fit_noise_has_the_vecd_law``): family-wise false-alarm rate
  ``ALPHA_LAW = 1e-4`` (Bonferroni over every statistic of one check);
* the audit (``test_audit_*``): the epsilon lower bound holds with confidence
  ``1 - ALPHA_AUDIT = 0.999`` (Clopper-Pearson, Bonferroni over thresholds and tails), so a
  correct mechanism is flagged with probability at most 1e-3.
"""

from __future__ import annotations

import math
import uuid

import numpy as np
import pytest
from scipy import stats

import dask_dppca as dd
from dask_dppca.privacy.noise import default_sampler
from dask_dppca.privacy.release import private_release

SQRT2 = math.sqrt(2.0)


def recover_k_tilde(eigenvalues: np.ndarray, components: np.ndarray) -> np.ndarray:
    """``K_tilde = V^T diag(lambda) V`` from a release with ``n_components = d`` (post-processing)."""
    assert components.shape[0] == components.shape[1] == eigenvalues.size
    k = components.T @ (eigenvalues[:, None] * components)
    return (k + k.T) / 2.0


# -- test 2: the noise law, end to end ----------------------------------------------------

D_LAW = 4
N_LAW = 40
EPS_LAW = 1.0
N_FITS = 600  # full DPPCA.fit calls (~2.5 ms each)
N_RELEASES = 1500  # private_release on the precomputed exact sum (~1 ms each)
ALPHA_LAW = 1e-4  # family-wise false-alarm rate of one law check (Bonferroni)


@pytest.fixture(scope="module")
def law_data():
    rng = np.random.default_rng(20240601)  # test data only
    x = rng.standard_normal((N_LAW, D_LAW)) * np.array([3.0, 2.0, 1.0, 0.5])
    k_hat = dd.kendall_matrix(x, scheduler="synchronous")
    return x, k_hat


@pytest.fixture(scope="module")
def fit_noise(law_data):
    """E = K_tilde - K_hat over N_FITS independent fits, and the one reported sigma."""
    x, k_hat = law_data
    noise, sigmas = [], set()
    for _ in range(N_FITS):
        est = dd.DPPCA(n_components=D_LAW, epsilon=EPS_LAW, scheduler="synchronous").fit(x)
        assert est.privacy_["private"] and est.privacy_["sampler"] == "OpenDPSampler"
        sigmas.add(est.privacy_["sigma"])
        noise.append(recover_k_tilde(est.eigenvalues_, est.components_) - k_hat)
    assert len(sigmas) == 1  # sigma depends on public parameters only
    return np.stack(noise), sigmas.pop(), est.privacy_["n_pairs"]


def law_p_values(noise: np.ndarray, sigma: float) -> dict[str, float]:
    """p-values of 'E_ii ~ N(0, sigma^2), E_ij ~ N(0, sigma^2/2), all independent'.

    Per vecd coordinate (each diagonal entry, each upper entry): KS against N(0, 1) after
    standardising, a two-sided chi-square test of the variance, a z-test of the mean; the
    same three on the pooled diagonal and pooled off-diagonal coordinates; a Pearson
    correlation test for every pair of coordinates (independence across entries).
    """
    d = noise.shape[1]
    rows, cols = np.triu_indices(d, 1)
    z = np.concatenate([noise[:, np.arange(d), np.arange(d)] / sigma,
                        noise[:, rows, cols] / (sigma / SQRT2)], axis=1)
    names = [f"E{i}{i}" for i in range(d)] + [f"E{i}{j}" for i, j in zip(rows, cols)]
    groups = {name: z[:, k] for k, name in enumerate(names)}
    groups["diag(pooled)"] = z[:, :d].ravel()
    groups["off(pooled)"] = z[:, d:].ravel()
    p = {}
    for name, values in groups.items():
        p[f"KS {name}"] = stats.kstest(values, "norm").pvalue
        chi2 = stats.chi2(values.size)
        ss = float(values @ values)
        p[f"var {name}"] = min(1.0, 2.0 * min(chi2.cdf(ss), chi2.sf(ss)))
        p[f"mean {name}"] = 2.0 * stats.norm.sf(abs(values.sum()) / math.sqrt(values.size))
    for a in range(z.shape[1]):
        for b in range(a + 1, z.shape[1]):
            p[f"corr {names[a]},{names[b]}"] = stats.pearsonr(z[:, a], z[:, b]).pvalue
    return p


def law_rejections(noise: np.ndarray, sigma: float) -> dict[str, float]:
    """The statistics that reject at family-wise rate ALPHA_LAW (empty: the law holds)."""
    p = law_p_values(noise, sigma)
    return {name: value for name, value in p.items() if value < ALPHA_LAW / len(p)}


def variance_ratios(noise: np.ndarray, sigma: float) -> tuple[float, float]:
    """Empirical / claimed variance, diagonal and off-diagonal (1 and 1 under the law)."""
    d = noise.shape[1]
    rows, cols = np.triu_indices(d, 1)
    diag = noise[:, np.arange(d), np.arange(d)]
    off = noise[:, rows, cols]
    return float(np.mean(diag**2) / sigma**2), float(np.mean(off**2) / (sigma**2 / 2))


@pytest.mark.statistical
def test_fit_noise_has_the_vecd_law(fit_noise):
    """N_FITS fits of DPPCA on fixed data: K_tilde - K_hat has the vecd law at the REPORTED sigma."""
    noise, sigma, _ = fit_noise
    assert np.array_equal(noise, np.transpose(noise, (0, 2, 1)))
    assert not law_rejections(noise, sigma), (law_rejections(noise, sigma),
                                              variance_ratios(noise, sigma))


@pytest.mark.statistical
def test_release_noise_has_the_vecd_law(law_data, fit_noise):
    """More draws, cheaper: private_release on the exact sum with the estimator's reported sigma."""
    _, k_hat = law_data
    _, sigma, n_pairs = fit_noise
    exact_sum = k_hat * n_pairs
    sampler = default_sampler(D_LAW * (D_LAW + 1) // 2)
    noise = np.stack([
        recover_k_tilde(*_release(exact_sum, n_pairs, sigma, sampler)) - k_hat
        for _ in range(N_RELEASES)
    ])
    assert not law_rejections(noise, sigma), (law_rejections(noise, sigma),
                                              variance_ratios(noise, sigma))


def _release(exact_sum, n_pairs, sigma, sampler):
    d = exact_sum.shape[0]
    r = private_release(exact_sum, n_pairs, sigma, d, sampler, uuid.uuid4().hex)
    return r.eigenvalues, r.components


def _offdiag_at_sigma(noise):
    """vecd^-1 without the 1/sqrt2: off-diagonal variance sigma^2."""
    d = noise.shape[1]
    off = ~np.eye(d, dtype=bool)
    out = noise.copy()
    out[:, off] *= SQRT2
    return out


def _half_sigma(noise):
    """Noise at sigma / 2 (the bug of dppca 0.1.0)."""
    return noise / 2.0


def _diag_double_variance(noise):
    """E = (Z + Z^T) / sqrt2: diagonal variance 2 sigma^2."""
    d = noise.shape[1]
    out = noise.copy()
    out[:, np.arange(d), np.arange(d)] *= SQRT2
    return out


def _shared_offdiag(noise):
    """Every off-diagonal entry is one shared draw: right marginals, not independent."""
    d = noise.shape[1]
    out = noise.copy()
    rows, cols = np.triu_indices(d, 1)
    shared = noise[:, 0, 1][:, None]
    out[:, rows, cols] = shared
    out[:, cols, rows] = shared
    return out


def _sigma_off_by_10_percent(noise):
    """The reported sigma 10 % above the one used (variance ratio 0.83)."""
    return noise / 1.1


@pytest.mark.statistical
@pytest.mark.parametrize("broken", [_offdiag_at_sigma, _half_sigma, _diag_double_variance,
                                    _shared_offdiag, _sigma_off_by_10_percent])
def test_the_law_check_rejects_a_broken_law(fit_noise, broken):
    """The same check on the same fitted noise, rescaled into a wrong law, rejects it."""
    noise, sigma, _ = fit_noise
    assert law_rejections(broken(noise), sigma)


# -- test 3: auditing epsilon on worst-case neighbours ---------------------------------------

D_AUDIT = 3
N_AUDIT = 40
EPS_AUDIT = 2.0
DELTA_AUDIT = 1e-6
N_DRAWS = 3000  # releases per neighbour and per mechanism
#: Decision thresholds on the projection, in units of the claimed sigma, fixed before any
#: sample is drawn (so every sample counts in the estimate; none is spent on choosing).
THRESHOLDS = (0.5, 0.6, 0.75)
ALPHA_AUDIT = 1e-3  # P(a correct mechanism is flagged) <= ALPHA_AUDIT
#: Each one-sided Clopper-Pearson bound: 2 rates (FPR, FNR) x len(THRESHOLDS) thresholds.
ALPHA_EACH = ALPHA_AUDIT / (2 * len(THRESHOLDS))


@pytest.fixture(scope="module")
def neighbours():
    """Worst-case replace-one neighbours (tests/privacy/test_sensitivity.py, "clustered").

    The other 39 records sit in a 1e-6 cluster; the changed record is 1e6 away along e_0
    in S and along e_1 in S'.  Returns K_hat(S), K_hat(S'), n_pairs and the sigma DPPCA
    reports for (EPS_AUDIT, DELTA_AUDIT), which is the same for S and S'.
    """
    rng = np.random.default_rng(7)  # test data only
    others = 1e-6 * rng.standard_normal((N_AUDIT - 1, D_AUDIT))
    far_a, far_b = np.zeros(D_AUDIT), np.zeros(D_AUDIT)
    far_a[0], far_b[1] = 1e6, 1e6
    s, s_prime = np.vstack([others, far_a]), np.vstack([others, far_b])
    fits = [dd.DPPCA(n_components=D_AUDIT, epsilon=EPS_AUDIT, delta=DELTA_AUDIT,
                     scheduler="synchronous").fit(data) for data in (s, s_prime)]
    assert fits[0].privacy_["sigma"] == fits[1].privacy_["sigma"]
    privacy = fits[0].privacy_
    k, k_prime = (dd.kendall_matrix(data, scheduler="synchronous") for data in (s, s_prime))
    gap = np.linalg.norm(k_prime - k)
    assert 0.95 * privacy["sensitivity"] <= gap <= privacy["sensitivity"]  # worst case
    return k, k_prime, privacy["n_pairs"], privacy["sigma"]


def clopper_pearson_upper(failures: int, trials: int, alpha: float) -> float:
    """One-sided (1 - alpha) upper confidence bound on a binomial rate."""
    if failures >= trials:
        return 1.0
    return float(stats.beta.ppf(1.0 - alpha, failures + 1, trials - failures))


def epsilon_lower_bound(proj_s: np.ndarray, proj_s_prime: np.ndarray, sigma: float,
                        delta: float) -> dict:
    """The standard audit bound, maximised over the fixed thresholds.

    Test "the input was S'" when the projection exceeds t = factor x the claimed sigma.  With FPR_hi, FNR_hi the
    Clopper-Pearson upper bounds, an (epsilon, delta)-DP mechanism must satisfy
    ``epsilon >= log((1 - delta - FNR_hi) / FPR_hi)`` and ``log((1 - delta - FPR_hi) / FNR_hi)``
    whenever the bounds hold.
    """
    best = {"eps_lb": -math.inf}
    for factor in THRESHOLDS:
        t = factor * sigma
        fp, fn = int(np.sum(proj_s > t)), int(np.sum(proj_s_prime <= t))
        fpr = clopper_pearson_upper(fp, proj_s.size, ALPHA_EACH)
        fnr = clopper_pearson_upper(fn, proj_s_prime.size, ALPHA_EACH)
        for num, den in ((1.0 - delta - fnr, fpr), (1.0 - delta - fpr, fnr)):
            value = math.log(num / den) if num > 0 and den > 0 else -math.inf
            if value > best["eps_lb"]:
                best = {"eps_lb": value, "threshold_sigmas": factor, "fp": fp, "fn": fn,
                        "fpr_hi": fpr, "fnr_hi": fnr}
    return best


def audit(neighbours, noise_factor: float) -> dict:
    """Draw N_DRAWS releases on each neighbour at ``noise_factor`` x the reported sigma and
    bound epsilon from below; the projection is onto the unit Frobenius (= vecd) direction
    of K_hat(S') - K_hat(S), so it is N(0, s^2) on S and N(gap, s^2) on S'."""
    k, k_prime, n_pairs, sigma = neighbours
    direction = (k_prime - k) / np.linalg.norm(k_prime - k)
    sampler = default_sampler(D_AUDIT * (D_AUDIT + 1) // 2)  # the real default, OS entropy
    projections = []
    for exact in (k * n_pairs, k_prime * n_pairs):
        k_tilde = np.stack([
            recover_k_tilde(*_release(exact, n_pairs, noise_factor * sigma, sampler))
            for _ in range(N_DRAWS)
        ])
        projections.append(np.einsum("nij,ij->n", k_tilde - k, direction))
    result = epsilon_lower_bound(*projections, sigma, DELTA_AUDIT)
    result["projection_sd_over_sigma"] = float(np.std(projections[0]) / sigma)
    return result


@pytest.mark.statistical
def test_audit_cannot_certify_more_than_the_claimed_epsilon(neighbours):
    """The real mechanism at epsilon = 2: the certified lower bound stays below 2.

    Confidence 0.999 that the bound is valid: a correct mechanism fails this test with
    probability <= 1e-3 (in 3000 simulated audits the bound was 0.32 on average, never above
    0.47: the actual odds are far smaller).
    """
    result = audit(neighbours, 1.0)
    assert result["eps_lb"] < EPS_AUDIT, result


@pytest.mark.statistical
def test_audit_catches_noise_four_times_too_small(neighbours):
    """The same audit on a broken mechanism (sigma / 4, true mu = 4x) certifies epsilon > 2.

    Power: in 3000 simulated audits the bound was 2.88 +- 0.19 (mean +- sd), minimum 2.40;
    a miss (bound <= 2) is a 4.5-sd event, odds about 3e-6.
    """
    result = audit(neighbours, 0.25)
    assert result["eps_lb"] > EPS_AUDIT, result
