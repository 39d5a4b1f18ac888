"""Studentized within-seed permutation test (the audit's default for averaged draws).

Exact p and CI against an independent brute force (itertools over every label set, the
t statistic written out); the sign-flip test where every seed has one draw; and, by
simulation, the level under exchangeability (skewed V), the level under equal means with
unequal spread (where the raw-mean test fails), power against the paired t-test at the
paper's effect for a fixed-schedule policy, and CI coverage under a shift.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from evalkit.errors import InputError
from evalkit.stats import sign_flip_test
from evalkit.stats.randomisation import within_seed_permutation_test
from evalkit.stats.studentized import EXACT_CI_MAX, inversion_ci


def _t(d):
    d = np.asarray(d, dtype=float)
    sd = d.std(ddof=1)
    if sd <= 1e-12 * max(1e-300, np.sqrt(np.mean(d * d))):
        return math.copysign(math.inf, d.mean()) if d.mean() != 0 else 0.0
    return d.mean() / (sd / math.sqrt(d.size))


def brute(pol, draws, shift=0.0):
    """(p_greater, p_less, total) of the studentized test by enumerating every label set
    after adding ``shift`` to the policy V."""
    runs = [np.concatenate(([p + shift], d)) for p, d in zip(pol, draws)]

    def d_of(lab):
        return [(r.sum() - r[j]) / (r.size - 1) - r[j] for r, j in zip(runs, lab)]

    t0 = _t(d_of([0] * len(runs)))
    null = np.array([_t(d_of(lab)) for lab in itertools.product(*[range(r.size) for r in runs])])
    tol = 1e-9 * max(1.0, abs(t0)) if math.isfinite(t0) else 0.0
    return np.mean(null >= t0 - tol), np.mean(null <= t0 + tol), null.size


@pytest.mark.parametrize("seed", range(4))
def test_exact_p_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    m = rng.integers(1, 5, size=5)
    m[0] = 2                                      # at least one seed averages draws
    pol = rng.lognormal(size=5)
    draws = [rng.lognormal(size=k) for k in m]
    res = within_seed_permutation_test(pol, draws, "two-sided")
    ge, le, total = brute(pol, draws)
    assert res.exact and res.statistic_name == "studentized" and res.null_size == total
    assert res.p_greater == pytest.approx(ge, rel=1e-12)
    assert res.p_less == pytest.approx(le, rel=1e-12)
    assert res.p_two_sided == pytest.approx(min(1, 2 * min(ge, le)), rel=1e-12)
    assert res.statistic == pytest.approx(np.mean([np.mean(d) - p for p, d in zip(pol, draws)]))
    assert res.t_statistic == pytest.approx(_t([np.mean(d) - p for p, d in zip(pol, draws)]))
    assert "studentized" in res.method and "equal" in res.null_hypothesis
    assert "additive shift" in res.ci_model


@pytest.mark.parametrize("seed", range(2))
def test_ci_inverts_the_brute_force_test(seed):
    rng = np.random.default_rng(50 + seed)
    m = np.array([1, 2, 3, 1, 2, 3])
    pol = rng.lognormal(size=m.size)
    draws = [rng.lognormal(size=k) + 0.3 for k in m]
    res = within_seed_permutation_test(pol, draws, "two-sided", confidence_level=0.9)
    assert res.ci_low < res.statistic < res.ci_high
    eps = 1e-6 * (res.ci_high - res.ci_low)
    # the policy + delta tests "gain = delta": inside not rejected at 5% one-sided, outside
    # rejected (every 2*3*4*2*3*4 label set, t written out)
    assert brute(pol, draws, res.ci_low + eps)[0] > 0.05
    assert brute(pol, draws, res.ci_low - eps)[0] <= 0.05
    assert brute(pol, draws, res.ci_high - eps)[1] > 0.05
    assert brute(pol, draws, res.ci_high + eps)[1] <= 0.05


def test_one_draw_per_seed_is_exactly_the_sign_flip_test():
    # sign flips keep sum d^2, so mean/se orders label sets as the mean does
    rng = np.random.default_rng(7)
    for rep in range(20):
        n = int(rng.integers(3, 9))
        pol, dr = rng.lognormal(size=n), rng.lognormal(size=(n, 1)) * rng.uniform(0.5, 2)
        a = within_seed_permutation_test(pol, list(dr), "two-sided")
        b = sign_flip_test(dr[:, 0] - pol, "two-sided")
        for f in ("p_greater", "p_less", "p_two_sided", "ci_low", "ci_high", "min_p"):
            assert getattr(a, f) == pytest.approx(getattr(b, f), rel=1e-12), (rep, f)
        assert brute(pol, list(dr))[0] == pytest.approx(a.p_greater, rel=1e-12)
        assert (a.p_two_sided <= 0.05) == (b.p_two_sided <= 0.05)


def test_monte_carlo_within_error_of_exact_and_floor():
    rng = np.random.default_rng(3)
    pol = rng.lognormal(size=7)
    draws = [rng.lognormal(size=3) for _ in range(7)]
    exact = within_seed_permutation_test(pol, draws, "greater", confidence_level=None)
    assert exact.exact
    b = 10_000                                    # < 4^7 label sets: Monte Carlo
    mc = within_seed_permutation_test(pol, draws, "greater", n_resamples=b, rng=1,
                                      confidence_level=None)
    assert not mc.exact and mc.null_size == b and "Monte Carlo studentized" in mc.method
    se = np.sqrt(exact.p_value * (1 - exact.p_value) / b)
    assert abs(mc.p_value - exact.p_value) <= 4 * se + 1 / b
    again = within_seed_permutation_test(pol, draws, "greater", n_resamples=b, rng=1,
                                         confidence_level=None)
    assert again.p_value == mc.p_value                        # seeded: deterministic
    low = within_seed_permutation_test(np.zeros(12), [np.arange(1.0, 4.0) + s
                                                      for s in range(12)], "greater",
                                       n_resamples=999, rng=0, confidence_level=None)
    assert low.p_value == pytest.approx(1 / 1000) and low.min_p == pytest.approx(1 / 1000)


def test_exact_beyond_the_enumeration_limit_is_refused_and_default_is_monte_carlo():
    from evalkit.stats.randomisation import exact_enumerable
    from evalkit.stats.studentized import MAX_EXACT_SETS

    assert MAX_EXACT_SETS == 2 ** 22
    assert exact_enumerable([2047, 2047]) and not exact_enumerable([2047, 2048])
    assert exact_enumerable([3] * 11) and not exact_enumerable([3] * 11 + [1])
    pol, draws = np.zeros(12), [np.array([1.0, 2.0, 3.0]) * (s + 1) for s in range(12)]
    with pytest.raises(InputError, match="n_resamples"):
        within_seed_permutation_test(pol, draws, n_resamples=np.inf)
    res = within_seed_permutation_test(pol, draws, confidence_level=None)
    assert not res.exact and res.null_size == 100_000


def test_min_p_counts_tied_labels_and_raw_test_stays_available():
    # seed 2's runs all tie: factor 1; seed 1's labels {0.1, -0.05, -0.05}: fewest ties 1
    res = within_seed_permutation_test([0.1, 0.2, 0.3], [[0.2, 0.2], [0.25, 0.35], [0.3, 0.3]],
                                       "greater")
    assert res.min_p == pytest.approx(1 / 9) and res.design_min_p == pytest.approx(1 / 27)
    raw = within_seed_permutation_test([0.1, 0.2, 0.3], [[0.2, 0.2], [0.25, 0.35], [0.3, 0.3]],
                                       "greater", statistic="mean")
    assert raw.statistic_name == "mean" and "raw-mean" in raw.method
    assert "exchangeable" in raw.null_hypothesis and raw.test == "within-seed permutation"
    with pytest.raises(InputError, match="statistic"):
        within_seed_permutation_test([0.1, 0.2], [[0.2], [0.3]], statistic="median")


# ------------------------------------------------------------------------------ simulations

CV_DRAW = 0.35                  # a random placement's run-to-run CV (the paper's data)
V_BASE, GAIN = 0.065, 0.0145    # V = 6.5%, G = 1.45 pp


def _lognormal_cv(rng, mean, cv, size):
    s = math.sqrt(math.log1p(cv * cv))
    return mean * np.exp(rng.normal(-s * s / 2, s, size=size))


def _normal_cv(rng, mean, cv, size):
    """Symmetric run-to-run noise with coefficient of variation ``cv``."""
    return mean * (1.0 + cv * rng.standard_normal(size))


def design(rng, n, m, spread=1.0, gain=0.0):
    """(n,) policy V and (n, m) draws: seed level lognormal, draws CV 0.35, the policy
    ``spread`` x a draw's CV and ``gain`` lower in mean."""
    mu = V_BASE * np.exp(rng.normal(0, 0.25, size=(n, 1)))
    draws = _normal_cv(rng, mu, CV_DRAW, (n, m))
    pol = _normal_cv(rng, mu[:, 0] - gain, spread * CV_DRAW, n)
    return pol, draws


def rates(n, m, reps, seed, spread=1.0, gain=0.0, b=499, exchangeable=False):
    """Two-sided rejection rates at 0.05 of the studentized and raw tests and the t-test."""
    rng = np.random.default_rng(seed)
    hits = np.zeros(3)
    for r in range(reps):
        if exchangeable:                        # every run of a seed from one skewed law
            v = rng.lognormal(0.0, 1.0, size=(n, m + 1)) * rng.lognormal(0, 0.5, (n, 1))
            pol, draws = v[:, 0], v[:, 1:]
        else:
            pol, draws = design(rng, n, m, spread, gain)
        kw = dict(alternative="two-sided", n_resamples=b, rng=r, confidence_level=None)
        hits[0] += within_seed_permutation_test(pol, list(draws), **kw).p_value <= 0.05
        hits[1] += within_seed_permutation_test(pol, list(draws), statistic="mean",
                                                **kw).p_value <= 0.05
        hits[2] += stats.ttest_1samp(draws.mean(axis=1) - pol, 0.0).pvalue <= 0.05
    return hits / reps


def _se(p, reps):
    return math.sqrt(p * (1 - p) / reps)


def test_level_under_exchangeability_fast():
    stud, _, _ = rates(10, 3, 150, 1, b=199, exchangeable=True)
    assert stud <= 0.05 + 3 * _se(0.05, 150)


@pytest.mark.slow
@pytest.mark.parametrize("m", [1, 3, 5])
@pytest.mark.parametrize("n", [6, 10, 20])
def test_level_under_exchangeability(m, n):
    reps = 600
    stud, _, _ = rates(n, m, reps, [m, n], exchangeable=True)
    assert stud <= 0.05 + 3 * _se(0.05, reps)


def test_equal_means_twice_the_spread_fast():
    # raw mean: "is the policy one more draw?" -- a wider policy is not, and is rejected
    stud, raw, _ = rates(20, 5, 150, 2, spread=2.0, b=199)
    assert stud <= 0.05 + 3 * _se(0.05, 150)
    assert raw >= 0.10                              # raw test: 0.13-0.19 measured


@pytest.mark.slow
@pytest.mark.parametrize("n", [10, 20])
@pytest.mark.parametrize("spread", [0.5, 2.0])
def test_equal_means_unequal_spread_is_near_nominal(spread, n):
    reps = 600
    stud, raw, _ = rates(n, 5, reps, [3, n, int(spread * 10)], spread=spread)
    if n >= 20 or spread < 1:
        assert abs(stud - 0.05) <= 3 * _se(0.05, reps)
    else:                                           # finite-n excess at n = 10: 0.07-0.08
        assert stud <= 0.09
    if spread > 1:
        assert raw > 0.05 + 5 * _se(0.05, reps)     # the raw test rejects equal means
    else:
        assert raw < 0.05 - 3 * _se(0.05, reps)     # and wastes its level when narrower


def test_power_at_the_papers_effect_fast():
    # fixed-schedule policy: half a draw's spread, G = 1.45 pp at V = 6.5%, n = 10, m = 5
    stud, raw, ttest = rates(10, 5, 80, 4, spread=0.5, gain=GAIN, b=199)
    assert stud >= 0.65 and stud >= raw + 0.2 and stud >= ttest - 0.1


@pytest.mark.slow
def test_power_against_the_paired_t_test():
    reps = 400
    stud, raw, ttest = rates(10, 5, reps, 5, spread=0.5, gain=GAIN)
    assert stud >= ttest - 0.08 and stud >= raw + 0.25 and stud >= 0.75
    stud1, raw1, _ = rates(10, 1, reps, 6, spread=0.5, gain=GAIN)
    assert stud1 == raw1                            # one draw: the same test
    assert stud - stud1 >= 0.35                     # the draws buy power


def _coverage(reps, seed, n=10, m=3, level=0.9):
    rng = np.random.default_rng(seed)
    cover = 0
    delta = 0.01
    for r in range(reps):
        v = _lognormal_cv(rng, V_BASE * np.exp(rng.normal(0, 0.25, (n, 1))), CV_DRAW,
                          (n, m + 1))
        pol = v[:, 0] - delta                       # a shift: the model the CI inverts
        res = within_seed_permutation_test(pol, list(v[:, 1:]), "two-sided", rng=r,
                                           n_resamples=199, confidence_level=level)
        cover += res.ci_low <= delta <= res.ci_high
    return cover / reps


def test_ci_covers_a_shift_fast():
    assert _coverage(30, 7) >= 0.9 - 3 * _se(0.9, 30)


@pytest.mark.slow
def test_ci_covers_a_shift_at_nominal():
    reps = 400
    assert abs(_coverage(reps, 8) - 0.9) <= 3 * _se(0.9, reps)


def _with_t_floor(n, m, reps, seed, spread=1.0, exchangeable=False, b=499):
    """Two-sided 0.05 rejection rates of the studentized test and of the candidate
    small-sample refinement p = max(p_studentized, p_paired_t)."""
    rng = np.random.default_rng(seed)
    hits = np.zeros(2)
    for r in range(reps):
        if exchangeable:
            v = rng.lognormal(0.0, 1.0, size=(n, m + 1)) * rng.lognormal(0, 0.5, (n, 1))
            pol, draws = v[:, 0], v[:, 1:]
        else:
            pol, draws = design(rng, n, m, spread)
        p = within_seed_permutation_test(pol, list(draws), alternative="two-sided",
                                         n_resamples=b, rng=r, confidence_level=None).p_value
        p_t = stats.ttest_1samp(draws.mean(axis=1) - pol, 0.0).pvalue
        hits += [p <= 0.05, max(p, p_t) <= 0.05]
    return hits / reps


@pytest.mark.slow
def test_a_t_test_floor_fixes_the_small_sample_excess_but_is_conservative_when_exchangeable():
    """Why the default stays the plain studentized test.  At n = 10, m = 5 with the policy
    twice as spread as its draws, the studentized test rejects equal means 0.078 of the time
    (nominal 0.05: its permutation null of t is lighter-tailed than t_9).  Taking the larger
    of its p and the paired t-test's brings that to 0.047, but under exchangeability, where
    the permutation test is exact (0.04-0.05 here), the combination holds only 0.02-0.03: it
    gives up the exact level it was meant to keep (and power at the paper's effect, n = 10,
    m = 5, half the spread: 0.78 -> 0.76), so it is not the default."""
    reps = 600
    stud, floor = _with_t_floor(10, 5, reps, 31, spread=2.0)
    assert stud > 0.05 + 2 * _se(0.05, reps) and stud <= 0.09
    assert abs(floor - 0.05) <= 2 * _se(0.05, reps)
    for n, m, seed in ((6, 3, 33), (10, 5, 34)):
        stud, floor = _with_t_floor(n, m, reps, seed, exchangeable=True)
        assert abs(stud - 0.05) <= 2 * _se(0.05, reps)
        assert floor < 0.05 - 2 * _se(0.05, reps)


def test_the_ci_enumerates_exactly_up_to_its_cap_and_samples_beyond():
    rng = np.random.default_rng(1)
    for m, exact in (([7] * 5, True), ([7, 7, 7, 7, 15], False)):     # 8^5 = 2^15 label sets
        vals = [rng.normal(0.0, 1.0, k + 1) for k in m]
        low, high, how = inversion_ci(vals, m, "two-sided", 0.95, np.random.default_rng(0))
        assert low < high
        assert (f"all {EXACT_CI_MAX} label sets" in how) is exact
        assert ("Monte Carlo" in how) is not exact



def test_min_attainable_p_judges_ties_relative_to_the_seeds_largest_value():
    """A float-noise tie (0.1 + 0.2 against 0.3) counts as a tie at any scale of the data,
    also in a seed holding zeros: the tolerance follows the seed's largest magnitude."""
    from evalkit.stats.studentized import min_attainable_p

    other = np.array([0.5, 0.25, 0.125])
    for scale in (1.0, 1e3, 1e9):
        seed = np.array([0.0, 0.0, 0.3 * scale, (0.1 + 0.2) * scale])
        # every label of the seed ties with one other: at least 2 of its 4 labels as extreme
        assert min_attainable_p([seed, other], "greater") == pytest.approx((2 / 4) * (1 / 3))
    untied = np.array([0.0, 0.0, 0.3, 0.4])
    assert min_attainable_p([untied, other], "greater") == pytest.approx((1 / 4) * (1 / 3))


def test_t_of_equal_values_is_infinite_by_the_sign_of_the_mean_and_zero_at_zero():
    from evalkit.stats.studentized import t_from_sums, t_statistic

    assert t_statistic(np.full(5, 0.25)) == math.inf
    assert t_statistic(np.full(5, -0.25)) == -math.inf
    assert t_statistic(np.zeros(5)) == 0.0
    # one row per candidate: a tiny positive mean is still positive, zero is zero
    got = t_from_sums(np.array([0.5, 0.0, -0.5]), np.array([0.05, 0.0, 0.05]), 5)
    assert got.tolist() == [math.inf, 0.0, -math.inf]
    assert t_statistic([0.1, 0.3]) == pytest.approx(0.2 / (math.sqrt(0.02) / math.sqrt(2)))


def test_a_tiny_spread_on_a_unit_mean_is_not_called_degenerate():
    """Values 1 + a spread of 2e-6: the variance (about 4e-12) is above 1e-12 of the mean
    square, so t is finite and is mean / se."""
    from evalkit.stats.studentized import t_from_sums

    d = 1.0 + 2e-6 * np.array([-1.5, -0.5, 0.5, 1.5, 0.0, 0.2, -0.2, 1.0, -1.0, 0.0])
    t = t_from_sums(np.array([d.sum()]), np.array([(d * d).sum()]), d.size)[0]
    assert np.isfinite(t)
    assert t == pytest.approx(d.mean() / (d.std(ddof=1) / np.sqrt(d.size)), rel=1e-3)
