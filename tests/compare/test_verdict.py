"""The verdict on one metric against independent references: brute-force enumeration of the
studentized sign-flip test for small n, scipy's paired t for large n and Welch's t-test for
unpaired runs, and the noncentral t for the pairs that would decide."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from evalkit.compare import verdict as vd


def _brute_p(x, alternative: str) -> float:
    """p of the studentized sign-flip test on x by enumerating every sign vector."""
    x = np.asarray(x, dtype=float)
    n = x.size

    def t(v):
        sd = v.std(ddof=1)
        return v.mean() / (sd / math.sqrt(n)) if sd > 0 else math.copysign(math.inf, v.mean())

    t_obs = t(x)
    ts = np.array([t(x * np.array(s)) for s in itertools.product((1.0, -1.0), repeat=n)])
    tol = 1e-9 * max(1.0, abs(t_obs))
    p_ge = np.mean(ts >= t_obs - tol)
    p_le = np.mean(ts <= t_obs + tol)
    if alternative == "greater":
        return float(p_ge)
    if alternative == "less":
        return float(p_le)
    return float(min(1.0, 2 * min(p_ge, p_le)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_small_n_superiority_and_equivalence_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    d = rng.normal(0.2, 1.0, 7) * rng.choice([1.0, 3.0], 7)
    margin = 0.8
    got = vd.analyse_paired(d, alpha=0.05, margin=margin)
    assert got.p_two_sided == pytest.approx(_brute_p(d, "two-sided"), abs=1e-12)
    tost = max(_brute_p(d + margin, "greater"), _brute_p(d - margin, "less"))
    assert got.p_equivalence == pytest.approx(tost, abs=1e-12)
    assert got.exact and got.paired


def test_large_n_matches_scipy_paired_t():
    rng = np.random.default_rng(7)
    a = rng.normal(10.0, 1.0, 60)
    b = a - 0.3 + rng.normal(0.0, 0.8, 60)         # B lower = better for a latency
    d = a - b
    got = vd.analyse_paired(d, alpha=0.05, margin=None)
    ref = sps.ttest_rel(a, b)
    assert got.p_two_sided == pytest.approx(ref.pvalue, abs=0.01)
    lo, hi = ref.confidence_interval(0.95)
    assert got.ci[0] == pytest.approx(lo, abs=0.03) and got.ci[1] == pytest.approx(hi, abs=0.03)
    assert math.isnan(got.p_equivalence)


def test_unpaired_matches_welch():
    rng = np.random.default_rng(3)
    a, b = rng.normal(1.0, 0.2, 9), rng.normal(0.8, 0.5, 12)
    got = vd.analyse_unpaired(a, b, better="lower", alpha=0.05, margin=0.4)
    ref = sps.ttest_ind(a, b, equal_var=False)
    assert got.p_two_sided == pytest.approx(ref.pvalue, rel=1e-9)
    assert got.mean == pytest.approx(a.mean() - b.mean())       # positive: B is lower
    lo, hi = ref.confidence_interval(0.95)
    assert got.ci == pytest.approx((lo, hi), rel=1e-9)
    p_low = sps.ttest_ind(a + 0.4, b, equal_var=False, alternative="greater").pvalue
    p_high = sps.ttest_ind(a - 0.4, b, equal_var=False, alternative="less").pvalue
    assert got.p_equivalence == pytest.approx(max(p_low, p_high), rel=1e-9)
    assert not got.paired


@pytest.mark.parametrize("p_sup, p_eq, mean, expected", [
    (0.01, 0.9, 0.5, vd.BETTER),
    (0.01, 0.9, -0.5, vd.WORSE),
    (0.2, 0.9, -0.5, vd.NOT_YET_KNOWN),          # a negative mean alone is never "worse"
    (0.2, 0.01, -0.1, vd.EQUIVALENT),
    (0.01, 0.01, 0.1, vd.BETTER),                # significant and inside the margin: better
    (0.06, 0.06, 0.1, vd.NOT_YET_KNOWN),
])
def test_verdicts(p_sup, p_eq, mean, expected):
    assert vd.decide(p_sup, p_eq, mean, 0.05) == expected


def test_min_pairs_is_the_exact_tests_floor():
    for alpha in (0.05, 0.01, 0.05 / 3):
        n = vd.min_pairs_for(alpha)
        assert 2 * 2.0 ** -n <= alpha < 2 * 2.0 ** -(n - 1)


@pytest.mark.parametrize("mean, sd", [(0.3, 1.0), (1.0, 2.5), (0.05, 0.1)])
def test_pairs_to_decide_reaches_the_power_by_the_noncentral_t(mean, sd):
    n = vd.pairs_to_decide(mean, sd, alpha=0.05, power=0.8, margin=None)

    def power(k):
        df, crit = k - 1, sps.t.ppf(0.975, k - 1)
        nc = mean / (sd / math.sqrt(k))
        return sps.nct.sf(crit, df, nc) + sps.nct.cdf(-crit, df, nc)

    assert power(n) >= 0.79
    assert power(n - 2) < 0.8


def test_pairs_to_decide_for_equivalence_and_when_out_of_reach():
    n = vd.pairs_to_decide(0.0, 1.0, alpha=0.05, power=0.8, margin=0.5)
    # TOST with true difference 0: both one-sided t-tests must reject (noncentral t)
    df = n - 1
    crit = sps.t.ppf(0.95, df)
    nc = 0.5 / (1.0 / math.sqrt(n))
    power = 1 - 2 * sps.nct.cdf(crit, df, nc)
    assert power >= 0.79
    assert vd.pairs_to_decide(0.0, 1.0, alpha=0.05, power=0.8, margin=None) is None
    # a spread of zero decides at the exact test's floor
    assert vd.pairs_to_decide(0.2, 0.0, alpha=0.01, power=0.8, margin=None) == vd.min_pairs_for(0.01)


def test_a_large_effect_still_needs_the_exact_tests_floor_of_pairs():
    # the t formula says 3 pairs; the sign-flip test cannot reach 0.05 with fewer than 6
    assert vd.pairs_to_decide(10.0, 1.0, alpha=0.05, power=0.8, margin=None) == 6
