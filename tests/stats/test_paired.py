"""The seed-level paired test against brute-force enumeration, scipy's t-test, simulation."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy import stats

from evalkit.errors import InputError
from evalkit.stats.paired import paired_mean_test, sample_skewness

ALTS = ("greater", "less", "two-sided")


def brute_force_p(d, alternative, shift=0.0):
    """Enumerate every sign vector and recompute mean/se (an independent studentized t)."""
    x = np.asarray(d, float) - shift
    n = x.size

    def t_of(v):
        sd = np.std(v, ddof=1)
        if sd <= 1e-12 * max(1.0, float(np.mean(np.abs(v)))):
            return math.copysign(math.inf, v.mean()) if v.mean() != 0 else 0.0
        return v.mean() / (sd / math.sqrt(n))

    t_obs = t_of(x)
    ts = np.array([t_of(x * np.array(s)) for s in itertools.product((1, -1), repeat=n)])
    tol = 1e-9 * max(1.0, abs(t_obs)) if math.isfinite(t_obs) else 0.0
    ge = np.mean(ts >= t_obs - tol)
    le = np.mean(ts <= t_obs + tol)
    return {"greater": ge, "less": le, "two-sided": min(1.0, 2 * min(ge, le))}[alternative]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("alternative", ALTS)
def test_p_equals_brute_force_studentized_enumeration(seed, alternative):
    rng = np.random.default_rng(seed)
    n = 3 + seed
    d = rng.lognormal(0.0, 0.9, n) - 1.2             # skewed, both signs
    shift = 0.1 * seed
    r = paired_mean_test(d, alternative, null_shift=shift, confidence=None)
    assert r.exact
    assert r.p_value == pytest.approx(brute_force_p(d, alternative, shift), abs=1e-12)


def test_ties_and_zero_differences_count_inclusively():
    d = np.array([1.0, 1.0, -1.0, 0.0, 2.0, 2.0])
    for alt in ALTS:
        assert paired_mean_test(d, alt).p_value == pytest.approx(brute_force_p(d, alt),
                                                                 abs=1e-12)
    assert paired_mean_test(d).min_p == pytest.approx(2.0 ** -5)   # the zero cannot move p


def test_close_to_the_t_test_for_symmetric_data_at_large_n():
    rng = np.random.default_rng(7)
    d = rng.normal(0.35, 1.0, 24)
    r = paired_mean_test(d, "greater")
    ref = stats.ttest_1samp(d, 0.0, alternative="greater").pvalue
    assert r.exact and r.p_value == pytest.approx(ref, abs=0.01)
    assert r.t == pytest.approx(stats.ttest_1samp(d, 0.0).statistic)
    assert r.se == pytest.approx(stats.sem(d))


def test_monte_carlo_agrees_with_exact_and_is_deterministic():
    d = np.random.default_rng(3).normal(0.3, 1.0, 18)
    exact = paired_mean_test(d, "two-sided", confidence=None)
    mc = paired_mean_test(d, "two-sided", confidence=None, n_resamples=40_000, rng=5)
    assert exact.exact and not mc.exact and mc.n_resamples == 40_000
    assert mc.p_value == pytest.approx(exact.p_value, abs=0.01)
    assert mc.p_value == paired_mean_test(d, "two-sided", confidence=None, n_resamples=40_000,
                                          rng=5).p_value


def test_beyond_the_exact_limit_is_monte_carlo():
    d = np.random.default_rng(4).normal(0.0, 1.0, 41)
    r = paired_mean_test(d, confidence=None)
    assert not r.exact and r.n_resamples == 100_000 and "Monte Carlo" in r.method


def test_null_shift_tests_the_gain_above_it():
    d = np.array([0.6, 0.7, 0.8, 0.65, 0.75, 0.9, 0.7, 0.6])
    assert paired_mean_test(d).p_value == pytest.approx(2.0 ** -8)
    shifted = paired_mean_test(d, null_shift=0.7)
    assert shifted.p_value > 0.2 and shifted.null_shift == 0.7
    assert shifted.mean == pytest.approx(d.mean())                 # the estimate is unshifted
    assert shifted.t == pytest.approx(stats.ttest_1samp(d, 0.7).statistic)


def test_ci_is_the_inverted_test():
    """At the CI bound the test of that shift sits on the tail; just inside it does not."""
    d = np.random.default_rng(11).lognormal(0, 0.6, 9) - 0.8
    r = paired_mean_test(d, "two-sided", confidence=0.9)
    lo, hi = r.ci
    assert lo < d.mean() < hi
    assert r.confidence == 0.9
    assert math.isnan(paired_mean_test(d, "two-sided", confidence=None).confidence)
    eps = 1e-6 * (hi - lo)
    assert paired_mean_test(d, "greater", null_shift=lo + eps).p_value > 0.05
    assert paired_mean_test(d, "greater", null_shift=lo - eps).p_value <= 0.05
    assert paired_mean_test(d, "less", null_shift=hi - eps).p_value > 0.05
    assert paired_mean_test(d, "less", null_shift=hi + eps).p_value <= 0.05
    one_sided = paired_mean_test(d, "greater", confidence=0.95).ci
    assert one_sided[0] == pytest.approx(lo) and one_sided[1] == math.inf


def test_ci_coverage_by_simulation():
    rng = np.random.default_rng(2)
    for n, mu in ((6, 0.0), (10, 0.4)):
        hits = 0
        reps = 300
        for _ in range(reps):
            d = rng.normal(mu, 1.0, n)
            lo, hi = paired_mean_test(d, "two-sided", confidence=0.9, rng=rng).ci
            hits += lo <= mu <= hi
        assert abs(hits / reps - 0.9) < 0.06, (n, hits / reps)


def test_level_by_simulation_for_symmetric_d():
    rng = np.random.default_rng(9)
    d = rng.standard_t(3, size=(2000, 8))
    rejections = np.mean([paired_mean_test(row, confidence=None).p_value <= 0.05 for row in d])
    assert rejections == pytest.approx(0.05, abs=0.015)


def test_result_fields_and_json():
    d = [0.3, -0.1, 0.5, 0.2, 0.4]
    r = paired_mean_test(d, rng=np.random.default_rng(0))
    assert (r.n, r.alternative) == (5, "greater")
    assert r.sd == pytest.approx(np.std(d, ddof=1))
    assert r.skewness == pytest.approx(stats.skew(d, bias=True))
    assert "studentized sign-flip" in r.method
    out = json.loads(json.dumps(r.to_dict()))
    assert out["ci"][1] is None                                   # +inf, JSON-safe
    with pytest.raises(Exception):
        r.mean = 1.0                                             # frozen


def test_skewness_of_constant_d_is_nan():
    assert math.isnan(sample_skewness([0.2, 0.2, 0.2]))


@pytest.mark.parametrize("kwargs, column", [
    ({"d": [0.1, float("nan"), 0.2]}, "d"),
    ({"d": [0.1]}, "d"),
    ({"d": [0.1, 0.2], "null_shift": float("inf")}, "null_shift"),
    ({"d": [0.1, 0.2], "null_shift": "x"}, "null_shift"),
    ({"d": [0.1, 0.2], "confidence": 1.0}, "confidence"),
    ({"d": [0.1, 0.2], "alternative": "bigger"}, "alternative"),
    ({"d": [0.1, 0.2], "n_resamples": 0}, "n_resamples"),
    ({"d": np.ones(41), "n_resamples": np.inf}, "n_resamples"),
])
def test_bad_input_names_the_field(kwargs, column):
    with pytest.raises(InputError) as info:
        paired_mean_test(**kwargs)
    assert info.value.column == column
