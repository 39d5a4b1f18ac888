"""Boundary tests of the randomisation tests, the corridor with edges and the run metrics.

Every expected value comes from an independent reference: brute-force enumeration with
``itertools`` (sign patterns, label sets, order statistics), closed forms, or a loop over
requests.  The tables sit at and on both sides of each rule's threshold: the exact /
Monte Carlo switch, the tie tolerance, the CI's order-statistic index, the corridor's edges.
"""

from __future__ import annotations

import itertools
import math
from functools import partial

import numpy as np
import pytest

from evalkit.errors import InputError
from evalkit.runlog import metrics as mt
from evalkit.stats import randomisation as pm
from evalkit.runlog.design import corridor_violations
from evalkit.stats import fk as se
from evalkit.stats import randomisation as sf

# These tests pin the raw-mean engine, kept as statistic="mean"; the studentized default
# is checked against its own brute force in tests/stats/test_randomisation_permutation.py.
_raw_perm = partial(pm.within_seed_permutation_test, statistic="mean")


# --------------------------------------------------------------------------------------------
# sign-flip: brute-force references
# --------------------------------------------------------------------------------------------

def _brute_sign_flip(d, atol):
    """p_greater, p_less over all 2^n sign patterns, ties within atol (mean scale) counted."""
    d = np.asarray(d, dtype=float)
    n = d.size
    t = d.mean()
    ge = le = 0
    for signs in itertools.product((1.0, -1.0), repeat=n):
        v = float(np.dot(signs, d)) / n
        ge += v >= t - atol
        le += v <= t + atol
    return ge / 2 ** n, le / 2 ** n


def _brute_subset_means(d):
    """Mean of d over every non-empty subset, the empty subset as None."""
    out = []
    for r in range(len(d) + 1):
        for sub in itertools.combinations(d, r):
            out.append(None if r == 0 else sum(sub) / r)
    return out


def _brute_sign_flip_ci(d, alternative, level):
    vals = _brute_subset_means(list(d))
    total = len(vals)
    tail = (1.0 - level) / (2.0 if alternative == "two-sided" else 1.0)
    k = int(math.floor(tail * total + 1e-9))
    low, high = -math.inf, math.inf
    if k > 0 and alternative in ("greater", "two-sided"):
        low = sorted(-math.inf if v is None else v for v in vals)[k]
    if k > 0 and alternative in ("less", "two-sided"):
        high = sorted(math.inf if v is None else v for v in vals)[total - 1 - k]
    return low, high


SIGN_FLIP_CASES = [
    # d, atol (None: default)
    ([1.0, 2.0, 3.0, -0.5, 0.25, 4.0], None),
    ([-1.0, -2.0, 0.5, -3.0, -0.75], None),
    ([0.3, -0.2], None),
    ([1.0, 0.04, 2.0], 0.03),          # the flipped 0.04 lies 0.0267 below the mean: a tie
    ([1.0, 0.04, 2.0], 0.02),          # ... but not within 0.02
    ([1.0, 1.0, -1.0, 2.0, 0.0, 0.5, -0.5], None),   # exact ties and a zero
    ([0.5, -0.5, 0.1, 2.0], 0.5),      # values exactly at +-atol count as zero
    ([0.5, -0.5, 0.1, 2.0], 0.0),      # atol = 0: only exact zeros are zero
    ([0.0, 0.0, 1.0], 0.0),
]


@pytest.mark.parametrize("d, atol", SIGN_FLIP_CASES)
@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_sign_flip_exact_every_field_against_brute_force(d, atol, alternative):
    d_arr = np.asarray(d, dtype=float)
    n = d_arr.size
    res = sf.sign_flip_test(d, alternative=alternative, atol=atol)
    a = 1e-9 * float(np.mean(np.abs(d_arr))) if atol is None else atol
    pg, pl = _brute_sign_flip(d_arr, a)
    p2 = min(1.0, 2.0 * min(pg, pl))
    assert res.atol == pytest.approx(a, rel=1e-12, abs=0.0)
    assert res.p_greater == pytest.approx(pg, abs=1e-15)
    assert res.p_less == pytest.approx(pl, abs=1e-15)
    assert res.p_two_sided == pytest.approx(p2, abs=1e-15)
    assert res.p_value == {"greater": pg, "less": pl, "two-sided": p2}[alternative]
    assert res.statistic == pytest.approx(float(np.mean(d_arr)), abs=1e-15)
    assert res.n == n and res.exact is True and res.null_size == 2 ** n
    assert res.n_resamples is None
    assert f"2^{n} patterns" in res.method and "exact" in res.method
    zero = a if a else 0.0
    n_pos = sum(1 for x in d if x > zero)
    n_neg = sum(1 for x in d if x < -zero)
    assert (res.n_positive, res.n_negative, res.n_zero) == (n_pos, n_neg, n - n_pos - n_neg)
    mean = float(np.mean(d_arr))
    wins = {"greater": n_pos, "less": n_neg,
            "two-sided": n_pos if mean >= 0 else n_neg}[alternative]
    assert res.wins == wins
    factor = 2.0 if alternative == "two-sided" else 1.0
    assert res.min_p == pytest.approx(min(1.0, factor * 2.0 ** -(n_pos + n_neg)), rel=1e-15)
    assert res.reachable(res.min_p) and not res.reachable(res.min_p * (1 - 1e-9))
    np.testing.assert_array_equal(res.differences, d_arr)
    assert res.confidence_level == 0.95


def test_sign_flip_counts_at_atol_exactly():
    res = sf.sign_flip_test([0.5, -0.5, 0.1, 2.0], atol=0.5)
    assert (res.n_positive, res.n_negative, res.n_zero) == (1, 0, 3)
    res = sf.sign_flip_test([0.5, -0.5, 0.1, 2.0], atol=0.0)
    assert (res.n_positive, res.n_negative, res.n_zero) == (3, 1, 0)
    res = sf.sign_flip_test([0.5, -0.5, 0.0, 2.0], atol=0.0)
    assert (res.n_positive, res.n_negative, res.n_zero) == (2, 1, 1)
    # two-sided wins at a mean of exactly 0 follow the positive side
    res = sf.sign_flip_test([1.0, -1.0, 2.0, -2.0, 3.0], alternative="two-sided", atol=0.0)
    assert res.statistic == pytest.approx(0.6)
    res = sf.sign_flip_test([1.0, -0.5, -0.5], alternative="two-sided", atol=0.0)
    assert res.statistic == 0.0 and res.wins == 1


@pytest.mark.parametrize("n, alternative, b, expected", [
    (5, "greater", None, 1 / 32), (5, "less", None, 1 / 32), (5, "two-sided", None, 1 / 16),
    (1, "two-sided", None, 1.0), (0, "greater", None, 1.0), (3, "greater", None, 1 / 8),
    (20, "greater", 99, 1 / 100), (20, "two-sided", 99, 2 / 100), (3, "greater", 999, 1 / 8),
    (10, "greater", 1, 0.5), (10, "two-sided", 1, 1.0),
])
def test_sign_flip_min_attainable_p_closed_form(n, alternative, b, expected):
    assert sf.min_attainable_p(n, alternative, b) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("alpha, alternative, n", [
    (0.05, "two-sided", 6), (0.05, "greater", 5), (0.05, "less", 5),
    (1 / 32, "greater", 5), (1 / 32 * 1.0000001, "greater", 5), (1 / 32 * 0.9999999, "greater", 6),
    (1 / 16, "two-sided", 5), (0.5, "greater", 1), (0.6, "greater", 1), (0.9, "two-sided", 2),
    (0.999, "greater", 1),
])
def test_sign_flip_seeds_needed_table(alpha, alternative, n):
    assert sf.seeds_needed(alpha, alternative) == n
    assert sf.seeds_needed() == 6


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, 1.5])
def test_sign_flip_seeds_needed_rejects_alpha_outside(alpha):
    with pytest.raises(InputError):
        sf.seeds_needed(alpha)


def test_sign_flip_rejects_unknown_alternative_everywhere():
    with pytest.raises(InputError):
        sf.min_attainable_p(5, "bigger")
    with pytest.raises(InputError):
        sf.seeds_needed(0.05, "bigger")
    with pytest.raises(InputError):
        sf.sign_flip_test([1.0, 2.0, 3.0], alternative="bigger")


@pytest.mark.parametrize("level", [0.0, 1.0, -0.5, 1.5])
def test_sign_flip_confidence_level_outside_is_rejected(level):
    with pytest.raises(InputError):
        sf.sign_flip_test([1.0, 2.0, 3.0], confidence_level=level)


def test_sign_flip_two_seeds_are_enough_one_is_not():
    res = sf.sign_flip_test([1.0, 2.0])
    assert res.n == 2 and res.p_greater == 0.25
    with pytest.raises(InputError):
        sf.sign_flip_test([1.0])


@pytest.mark.parametrize("bad", [0, 2.5, -3, np.nan])
def test_sign_flip_bad_resample_count_is_rejected(bad):
    with pytest.raises(InputError):
        sf.sign_flip_test([1.0, 2.0, 3.0], n_resamples=bad)


@pytest.mark.parametrize("n, b, exact", [
    (6, 64, True), (6, 63, False), (6, 65, True), (6, np.inf, True), (6, None, True),
    (10, 1024, True), (10, 1023, False),
])
def test_sign_flip_exact_switch_at_two_to_the_n(n, b, exact):
    d = np.linspace(-0.4, 1.3, n) + 0.01 * np.arange(n) ** 2
    res = sf.sign_flip_test(d, n_resamples=b, rng=3)
    assert res.exact is exact
    if exact:
        assert res.null_size == 2 ** n and res.n_resamples is None
        pg, pl = _brute_sign_flip(d, res.atol)
        assert (res.p_greater, res.p_less) == (pytest.approx(pg), pytest.approx(pl))
    else:
        assert res.null_size == b and res.n_resamples == b
        assert f"B = {b} resamples" in res.method and "(k+1)/(B+1)" in res.method
        kg, kl = res.p_greater * (b + 1) - 1, res.p_less * (b + 1) - 1
        assert kg == pytest.approx(round(kg)) and kl == pytest.approx(round(kl))
        # every draw is >= or <= the observed sum (both when tied)
        assert round(kg) + round(kl) >= b
        assert 0 <= round(kg) <= b and 0 <= round(kl) <= b
        assert res.min_p == pytest.approx(max(2.0 ** -n, 1 / (b + 1)))


def test_sign_flip_exact_limit_is_forty_seeds():
    d41 = np.linspace(0.5, 2.0, 41)
    with pytest.raises(InputError):
        sf.sign_flip_test(d41, n_resamples=np.inf)
    res = sf.sign_flip_test(d41, n_resamples=200, rng=1)
    assert res.exact is False and res.null_size == 200
    # every d positive: only the identity pattern (prob 2^-41) reaches the mean -> k = 0
    assert res.p_greater == pytest.approx(1 / 201)
    assert res.p_less == 1.0
    assert res.p_two_sided == pytest.approx(2 / 201)
    assert res.min_p == pytest.approx(1 / 201)


def test_sign_flip_default_monte_carlo_beyond_forty_seeds():
    d41 = np.linspace(0.5, 2.0, 41)
    res = sf.sign_flip_test(d41, n_resamples=None, alternative="two-sided")
    assert res.exact is False and res.null_size == 100_000 and res.n_resamples == 100_000
    assert res.p_greater == pytest.approx(1 / 100_001)
    assert res.p_two_sided == pytest.approx(2 / 100_001)
    assert res.min_p == pytest.approx(2 / 100_001)
    assert "B = 100000 resamples" in res.method


def test_sign_flip_exact_at_forty_seeds():
    d40 = np.linspace(0.5, 2.0, 40)
    d40[0] = -0.1
    res = sf.sign_flip_test(d40, confidence_level=0.5)
    assert res.exact is True and res.null_size == 2 ** 40 and res.n_resamples is None
    # only the identity and the flip of -0.1 alone reach the observed sum
    assert res.p_greater == 2.0 ** -39
    assert res.p_less == 1.0 - 2.0 ** -40
    assert res.method.startswith("exact sign-flip over all 2^40")
    assert (res.n_positive, res.n_negative, res.n_zero) == (39, 1, 0)


@pytest.mark.parametrize("d", [
    [1.0, 2.0, 3.0, -0.5, 0.25, 4.0],                       # n = 6: two-sided 95% has k = 1
    [0.3, -1.2, 2.2, 0.7, 1.9, -0.4, 0.05, 1.1, 0.6, -0.2],
    [2.0, 1.0],                                             # too few: infinite bounds
])
@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
@pytest.mark.parametrize("level", [0.95, 0.8, 0.5])
def test_sign_flip_ci_is_an_order_statistic_of_subset_means(d, alternative, level):
    res = sf.sign_flip_test(d, alternative=alternative, confidence_level=level)
    low, high = _brute_sign_flip_ci(d, alternative, level)
    assert res.ci_low == pytest.approx(low, rel=1e-12)
    assert res.ci_high == pytest.approx(high, rel=1e-12)
    if alternative == "greater":
        assert res.ci_high == math.inf
    if alternative == "less":
        assert res.ci_low == -math.inf
    side = {"greater": "one-sided lower bound", "less": "one-sided upper bound",
            "two-sided": "two-sided equal-tailed"}[alternative]
    assert side in res.ci_method and f"exact: all 2^{len(d)} sign patterns" in res.ci_method
    assert res.confidence_level == level


def test_sign_flip_ci_first_finite_bound_at_k_equal_one():
    # n = 6 two-sided 95%: tail 0.025 x 64 = 1.6 -> k = 1: the smallest / largest subset mean
    d = [1.0, 2.0, 3.0, -0.5, 0.25, 4.0]
    res = sf.sign_flip_test(d, alternative="two-sided")
    assert res.ci_low == -0.5 and res.ci_high == 4.0
    # n = 5 two-sided 95%: 0.025 x 32 = 0.8 -> k = 0: nothing excluded
    res = sf.sign_flip_test(d[:5], alternative="two-sided")
    assert (res.ci_low, res.ci_high) == (-math.inf, math.inf)
    # one-sided 95% at n = 5: 0.05 x 32 = 1.6 -> k = 1
    assert sf.sign_flip_test(d[:5], alternative="greater").ci_low == -0.5
    assert sf.sign_flip_test(d[:5], alternative="less").ci_high == 3.0


def _mc_subset_reference(d, seed):
    rng = np.random.default_rng(seed)
    flips = rng.integers(0, 2, size=(20_000, d.size), dtype=np.int8).astype(bool)
    sums = np.concatenate(([0.0], flips @ d))
    sizes = np.concatenate(([0], flips.sum(axis=1)))
    return sums, sizes


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_sign_flip_ci_monte_carlo_beyond_sixteen_seeds(alternative):
    d = np.linspace(-1.0, 3.0, 17) + 0.013 * np.arange(17) ** 2
    res = sf.sign_flip_test(d, alternative=alternative, rng=11, confidence_level=0.9)
    assert "Monte Carlo: 20000 random sign patterns + identity" in res.ci_method
    sums, sizes = _mc_subset_reference(d, 11)
    total = sums.size
    assert total == 20_001
    empty = sizes == 0
    means = sums / np.where(empty, 1, sizes)
    tail = 0.1 / (2 if alternative == "two-sided" else 1)
    k = int(math.floor(tail * total + 1e-9))
    if alternative != "less":
        assert res.ci_low == np.sort(np.where(empty, -np.inf, means))[k]
    else:
        assert res.ci_low == -math.inf
    if alternative != "greater":
        assert res.ci_high == np.sort(np.where(empty, np.inf, means))[total - 1 - k]
    else:
        assert res.ci_high == math.inf
    # sixteen seeds: still every pattern
    res16 = sf.sign_flip_test(d[:16], alternative=alternative, confidence_level=0.9)
    assert "exact: all 2^16 sign patterns" in res16.ci_method


def test_sign_flip_null_distribution_exact_and_random():
    d = np.array([1.0, -2.0, 0.5, 3.0, 0.25])
    res = sf.sign_flip_test(d)
    ref = sorted(float(np.dot(s, d)) / 5 for s in itertools.product((1, -1), repeat=5))
    np.testing.assert_allclose(res.null_distribution(), ref, rtol=0, atol=1e-15)
    np.testing.assert_allclose(res.null_distribution(max_points=32), ref, rtol=0, atol=1e-15)
    nd = res.null_distribution(max_points=31, seed=4)
    assert nd.size == 31 and np.all(np.diff(nd) >= 0)
    assert np.all(np.min(np.abs(nd[:, None] - np.array(ref)[None, :]), axis=1) < 1e-12)
    # the random draw is the seeded stream of sign patterns
    rng = np.random.default_rng(4)
    flips = rng.integers(0, 2, size=(31, 5), dtype=np.int8).astype(bool)
    np.testing.assert_allclose(nd, np.sort(((1.0 - 2.0 * flips) @ d) / 5), atol=1e-15)
    np.testing.assert_array_equal(res.null_distribution(max_points=31),
                                  res.null_distribution(max_points=31, seed=0))


def test_sign_flip_null_distribution_default_size_and_many_chunks():
    d = np.linspace(0.1, 1.7, 17)
    res = sf.sign_flip_test(d, confidence_level=0.5)
    nd = res.null_distribution()                 # 2^17 > 100,000: random, in two chunks
    assert nd.size == 100_000
    assert np.all(np.diff(nd) >= 0)
    rows = (1 << 20) // 17
    rng = np.random.default_rng(0)
    f1 = rng.integers(0, 2, size=(rows, 17), dtype=np.int8).astype(bool)
    f2 = rng.integers(0, 2, size=(100_000 - rows, 17), dtype=np.int8).astype(bool)
    ref = np.sort(np.concatenate((((1.0 - 2.0 * f1) @ d), ((1.0 - 2.0 * f2) @ d))) / 17)
    np.testing.assert_allclose(nd, ref, atol=1e-14)
    assert abs(nd.mean()) < 0.02 and nd.max() <= d.sum() / 17 + 1e-12


# --------------------------------------------------------------------------------------------
# within-seed permutation: brute force over label sets
# --------------------------------------------------------------------------------------------

def _label_value(v, j):
    """d_s when run j of the seed's runs v (policy first) is labelled the policy."""
    others = [x for i, x in enumerate(v) if i != j]
    return sum(others) / len(others) - v[j]


def _brute_permutation(policy, draws, atol):
    runs = [[p] + list(d) for p, d in zip(policy, draws)]
    n = len(runs)
    t = sum(_label_value(v, 0) for v in runs) / n
    ge = le = total = 0
    for labels in itertools.product(*[range(len(v)) for v in runs]):
        tl = sum(_label_value(v, j) for v, j in zip(runs, labels)) / n
        ge += tl >= t - atol
        le += tl <= t + atol
        total += 1
    return ge / total, le / total, total


PERMUTATION_CASES = [
    # policy, draws, atol
    ([0.10, 0.20, 0.15], [[0.30, 0.25], [0.22], [0.40, 0.18, 0.33]], None),
    ([0.30, 0.10, 0.20, 0.05], [[0.10], [0.30, 0.20], [0.25], [0.05, 0.05]], None),
    ([0.2, 0.2], [[0.2, 0.2], [0.5]], None),                  # a seed with every run tied
    ([0.0, 1.0], [[1.0, 2.0], [1.0, 0.0, 3.0]], 0.0),
    ([0.10, 0.20], [[0.20, 0.40], [0.28]], 0.02),
    ([0.10, 0.20], [[0.20, 0.40], [0.28]], 0.0),
]


@pytest.mark.parametrize("policy, draws, atol", PERMUTATION_CASES)
@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_permutation_exact_every_field_against_brute_force(policy, draws, atol, alternative):
    vals = [pm.seed_label_values(p, np.asarray(d, dtype=float)) for p, d in zip(policy, draws)]
    a = (1e-9 * float(np.mean(np.abs(np.concatenate(vals))))) if atol is None else atol
    res = _raw_perm(policy, draws, alternative=alternative, atol=atol)
    pg, pl, total = _brute_permutation(policy, draws, a)
    p2 = min(1.0, 2.0 * min(pg, pl))
    assert res.atol == pytest.approx(a, rel=1e-12, abs=0.0)
    assert (res.p_greater, res.p_less) == (pytest.approx(pg, abs=1e-15), pytest.approx(pl, abs=1e-15))
    assert res.p_two_sided == pytest.approx(p2, abs=1e-15)
    assert res.p_value == pytest.approx({"greater": pg, "less": pl, "two-sided": p2}[alternative])
    n = len(policy)
    d_obs = [_label_value([p] + list(d), 0) for p, d in zip(policy, draws)]
    assert res.statistic == pytest.approx(sum(d_obs) / n, abs=1e-15)
    np.testing.assert_allclose(res.differences, d_obs, atol=1e-15)
    assert res.n == n and res.m == tuple(len(d) for d in draws)
    assert res.exact is True and res.null_size == total and res.n_resamples is None
    assert f"all {total} label sets" in res.method
    zero = 1e-9 * max(1e-300, float(np.mean(np.abs(d_obs))))
    n_pos = sum(x > zero for x in d_obs)
    n_neg = sum(x < -zero for x in d_obs)
    assert (res.n_positive, res.n_negative, res.n_zero) == (n_pos, n_neg, n - n_pos - n_neg)
    mean = sum(d_obs) / n
    assert res.wins == {"greater": n_pos, "less": n_neg,
                        "two-sided": n_pos if mean >= 0 else n_neg}[alternative]
    factor = 2.0 if alternative == "two-sided" else 1.0
    design = min(1.0, factor / math.prod(len(d) + 1 for d in draws))
    assert res.design_min_p == pytest.approx(design, rel=1e-12)
    assert res.min_p >= res.design_min_p - 1e-15
    assert res.test == "within-seed permutation"


def test_permutation_seed_label_values_are_mean_of_the_others_minus_the_run():
    for policy, draws in [(0.3, [0.1, 0.5, 0.2]), (1.0, [2.0]), (0.0, [0.0, 0.0])]:
        v = [policy] + draws
        got = pm.seed_label_values(policy, np.asarray(draws, dtype=float))
        assert got.shape == (len(v),)
        np.testing.assert_allclose(got, [_label_value(v, j) for j in range(len(v))], atol=1e-15)
        assert abs(got.sum()) < 1e-12


@pytest.mark.parametrize("m, alternative, b, values, expected", [
    ([1, 2, 3], "greater", None, None, 1 / 24),
    ([1, 2, 3], "less", None, None, 1 / 24),
    ([1, 2, 3], "two-sided", None, None, 2 / 24),
    ([1, 2, 3], "greater", 9, None, 0.1),
    ([1, 2, 3], "two-sided", 9, None, 0.2),
    ([1, 2, 3], "greater", 99, None, 1 / 24),
    ([1], "two-sided", None, None, 1.0),
    ([1, 1], "two-sided", 0, None, 1.0),
    # a seed with two labels tied at the top and one at the bottom
    ([1, 2], "greater", None, [[1.0, -1.0], [2.0, 2.0, -4.0]], 1 / 3),
    ([1, 2], "less", None, [[1.0, -1.0], [2.0, 2.0, -4.0]], 1 / 6),
    ([1, 2], "two-sided", None, [[1.0, -1.0], [2.0, 2.0, -4.0]], 1 / 3),
    ([1, 2], "two-sided", 3, [[1.0, -1.0], [2.0, 2.0, -4.0]], 0.5),
    ([1], "two-sided", None, [[0.0, 0.0]], 1.0),
    ([2], "greater", None, [[0.0, 0.0, 0.0]], 1.0),
    # tie tolerance relative to the largest |value|: 5e-4 apart at scale 1e6 is a tie
    ([2], "greater", None, [[1e6, 1e6 - 5e-4, -2e6 + 5e-4]], 2 / 3),
    ([2], "less", None, [[-1e6, -1e6 + 5e-4, 2e6 - 5e-4]], 2 / 3),
])
def test_permutation_min_attainable_p_table(m, alternative, b, values, expected):
    assert pm.min_attainable_p(m, alternative, b, values=values) == pytest.approx(expected,
                                                                                  rel=1e-12)


def test_permutation_min_p_of_a_result_counts_tied_labels():
    # seed 1: every run equal -> factor 1; seed 0: m = 2, no ties -> 1/3
    res = _raw_perm([0.1, 0.5], [[0.3, 0.2], [0.5, 0.5]])
    assert res.min_p == pytest.approx(1 / 3)
    assert res.design_min_p == pytest.approx(1 / 9)
    assert res.n_zero == 1 and res.n_positive == 1 and res.n_negative == 0
    assert res.reachable(1 / 3) and not res.reachable(1 / 3 - 1e-9)


@pytest.mark.parametrize("m, alpha, alternative, n", [
    (1, 0.05, "two-sided", 6), (1, 0.05, "greater", 5), (2, 0.05, "greater", 3),
    (2, 0.05, "two-sided", 4), (3, 0.05, "two-sided", 3), (19, 0.05, "greater", 1),
    (19, 0.05, "two-sided", 2), (19, 0.05, "less", 1), (1, 0.5, "greater", 1),
    (1, 0.49, "greater", 2), (4, 0.04, "greater", 2), (9, 0.01, "greater", 2),
    (9, 0.0099, "greater", 3), (99, 0.02, "two-sided", 1), (1, 0.9, "two-sided", 2),
])
def test_permutation_seeds_needed_table(m, alpha, alternative, n):
    assert pm.seeds_needed(alpha, alternative, m=m) == n
    factor = 2.0 if alternative == "two-sided" else 1.0
    assert factor * (m + 1.0) ** -n <= alpha * (1 + 1e-12)
    assert n == 1 or factor * (m + 1.0) ** -(n - 1) > alpha


def test_permutation_seeds_needed_defaults_and_bad_input():
    assert pm.seeds_needed(m=2) == 4 and pm.seeds_needed(m=1) == 6
    for alpha in (0.0, 1.0, -0.2, 1.2):
        with pytest.raises(InputError):
            pm.seeds_needed(alpha, m=2)
    with pytest.raises(InputError):
        pm.seeds_needed(m=0)
    with pytest.raises(InputError):
        pm.seeds_needed(0.05, "bigger", m=2)
    with pytest.raises(InputError):
        pm.min_attainable_p([1, 2], "bigger")


@pytest.mark.parametrize("m, enumerable", [
    ([1] * 42, True), ([1] * 43, False), ([1] * 22, True), ([(1 << 21) - 1], True),
    ([1 << 21], False), ([(1 << 21) - 1, 1], True), ([(1 << 21) - 1, 3, 1], True),
    ([(1 << 21) - 1] * 2, True), ([(1 << 21) - 1] * 2 + [1], False),
    ([3] * 20, True), ([3] * 21, False),
])
def test_permutation_exact_enumerable_at_two_to_the_21_per_half(m, enumerable):
    assert pm.exact_enumerable(m, "mean") is enumerable


@pytest.mark.parametrize("b, exact", [(24, True), (23, False), (25, True), (np.inf, True),
                                      (None, True), (1, False)])
def test_permutation_exact_switch_at_the_number_of_label_sets(b, exact):
    policy = [0.10, 0.20, 0.15]
    draws = [[0.30], [0.22, 0.35], [0.40, 0.18, 0.33]]
    res = _raw_perm(policy, draws, n_resamples=b, rng=5,
                                          confidence_level=None)
    assert res.exact is exact
    assert (res.ci_low, res.ci_high) == (pytest.approx(math.nan, nan_ok=True),) * 2
    assert res.ci_method == "not computed" and math.isnan(res.confidence_level)
    if exact:
        pg, pl, total = _brute_permutation(policy, draws, res.atol)
        assert res.null_size == total == 24 and res.n_resamples is None
        assert (res.p_greater, res.p_less) == (pytest.approx(pg), pytest.approx(pl))
    else:
        assert res.null_size == b and res.n_resamples == b
        assert f"B = {b}, p = (k+1)/(B+1)" in res.method
        kg, kl = res.p_greater * (b + 1) - 1, res.p_less * (b + 1) - 1
        assert kg == pytest.approx(round(kg)) and kl == pytest.approx(round(kl))
        assert round(kg) + round(kl) >= b and 0 <= round(kg) <= b and 0 <= round(kl) <= b
        assert res.min_p == pytest.approx(max(1 / 24, 1 / (b + 1)))
        assert res.design_min_p == pytest.approx(max(1 / 24, 1 / (b + 1)))


def test_permutation_monte_carlo_counts_against_the_seeded_label_stream():
    policy = [0.10, 0.20, 0.15, 0.30]
    draws = [[0.30], [0.22, 0.35], [0.40, 0.18, 0.33], [0.25, 0.2]]
    b = 50                            # < 72 label sets: Monte Carlo
    res = _raw_perm(policy, draws, n_resamples=b, rng=9,
                                          confidence_level=None, atol=0.0)
    assert res.exact is False
    vals = [[_label_value([p] + d, j) for j in range(len(d) + 1)] for p, d in zip(policy, draws)]
    sizes = np.array([len(v) for v in vals])
    rng = np.random.default_rng(9)
    labels = np.floor(rng.random((b, sizes.size)) * sizes).astype(int)
    sums = np.array([sum(vals[s][row[s]] for s in range(sizes.size)) for row in labels])
    t = sum(v[0] for v in vals)
    kg = int(np.sum(sums >= t - 1e-12))
    kl = int(np.sum(sums <= t + 1e-12))
    assert res.p_greater == pytest.approx((kg + 1) / (b + 1))
    assert res.p_less == pytest.approx((kl + 1) / (b + 1))


def test_permutation_design_errors_are_named():
    with pytest.raises(InputError):
        _raw_perm([], [])
    with pytest.raises(InputError):
        _raw_perm([0.1, 0.2], [[0.3]])
    with pytest.raises(InputError):
        _raw_perm([0.1, 0.2], [[0.3], []])
    with pytest.raises(InputError):
        _raw_perm([0.1, 0.2], [[0.3], [np.nan]])
    with pytest.raises(InputError):
        _raw_perm([0.1, np.nan], [[0.3], [0.2]])
    with pytest.raises(InputError):
        _raw_perm(["a", "b"], [[0.3], [0.2]])
    with pytest.raises(InputError):
        _raw_perm([0.1], [[0.3, 0.2]])
    with pytest.raises(InputError):
        _raw_perm([0.1, 0.2], [[0.3], [0.2]], alternative="bigger")
    for level in (0.0, 1.0):
        with pytest.raises(InputError):
            _raw_perm([0.1, 0.2], [[0.3], [0.2]], confidence_level=level)
    for bad in (0, 1.5, -2):
        with pytest.raises(InputError):
            _raw_perm([0.1, 0.2], [[0.3], [0.2]], n_resamples=bad)
    res = _raw_perm([0.1, 0.2], [[0.3], [0.2]])
    assert res.n == 2 and res.confidence_level == 0.95


def test_permutation_exact_beyond_the_half_limit_is_refused():
    policy = np.zeros(43)
    draws = [[0.1]] * 43
    with pytest.raises(InputError):
        _raw_perm(policy, draws, n_resamples=np.inf)
    res = _raw_perm(policy, draws, n_resamples=50, confidence_level=None)
    assert res.exact is False and res.null_size == 50


def _perm_ci_reference(vals, labels, alternative, level):
    """Bounds from the thresholds delta_L = (T - T_L) / (1 + c(L)) of every label set L."""
    n = len(vals)
    labels = np.asarray(labels, dtype=int)
    m = np.array([len(v) - 1 for v in vals], dtype=float)
    t = sum(v[0] for v in vals) / n
    t_l = np.zeros(labels.shape[0])
    for s in range(n):
        t_l += np.asarray(vals[s], dtype=float)[labels[:, s]]
    t_l /= n
    c = np.where(labels == 0, -1.0, 1.0 / m).mean(axis=1)
    identity = np.all(labels == 0, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        thr = (t - t_l) / (1.0 + c)
    total = labels.shape[0]
    tail = (1 - level) / (2 if alternative == "two-sided" else 1)
    k = int(math.floor(tail * total + 1e-9))
    low = (np.sort(np.where(identity, -np.inf, thr))[k]
           if k > 0 and alternative != "less" else -math.inf)
    high = (np.sort(np.where(identity, np.inf, thr))[total - 1 - k]
            if k > 0 and alternative != "greater" else math.inf)
    return low, high


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
@pytest.mark.parametrize("level", [0.9, 0.6])
def test_permutation_ci_is_an_order_statistic_of_label_thresholds(alternative, level):
    policy = [0.10, 0.20, 0.15]
    draws = [[0.30, 0.25], [0.22], [0.40, 0.18, 0.33]]
    res = _raw_perm(policy, draws, alternative=alternative,
                                          confidence_level=level)
    vals = [[_label_value([p] + d, j) for j in range(len(d) + 1)] for p, d in zip(policy, draws)]
    labels = list(itertools.product(*[range(len(v)) for v in vals]))
    low, high = _perm_ci_reference(vals, labels, alternative, level)
    assert res.ci_low == pytest.approx(low, rel=1e-9)
    assert res.ci_high == pytest.approx(high, rel=1e-9)
    assert "all 24 label sets" in res.ci_method and res.confidence_level == level


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_permutation_ci_monte_carlo_beyond_two_to_the_17_label_sets(alternative):
    rng0 = np.random.default_rng(2)
    policy = rng0.uniform(0, 1, 18)
    draws = [[x] for x in rng0.uniform(0, 1, 18)]
    res = _raw_perm(policy, draws, alternative=alternative, rng=6,
                                          confidence_level=0.9)
    assert res.exact is True          # the p-value is exact: the CI is the rng's first user
    assert "Monte Carlo: 20000 random label sets + identity" in res.ci_method
    vals = [[_label_value([p] + d, j) for j in range(2)] for p, d in zip(policy, draws)]
    rng = np.random.default_rng(6)
    labels = np.vstack((np.zeros((1, 18), dtype=int),
                        np.floor(rng.random((20_000, 18)) * 2).astype(int)))
    low, high = _perm_ci_reference(vals, labels, alternative, 0.9)
    assert res.ci_low == pytest.approx(low, rel=1e-9)
    assert res.ci_high == pytest.approx(high, rel=1e-9)


def test_permutation_ci_exact_at_two_to_the_17_label_sets():
    policy = np.linspace(0.1, 0.5, 17)
    draws = [[x] for x in np.linspace(0.6, 0.2, 17)]
    res = _raw_perm(policy, draws, confidence_level=0.99)
    assert "all 131072 label sets" in res.ci_method


def test_permutation_null_distribution_exact_and_random():
    policy = [0.10, 0.20, 0.15]
    draws = [[0.30, 0.25], [0.22], [0.40, 0.18, 0.33]]
    res = _raw_perm(policy, draws)
    runs = [[p] + d for p, d in zip(policy, draws)]
    ref = sorted(sum(_label_value(v, j) for v, j in zip(runs, lab)) / 3
                 for lab in itertools.product(*[range(len(v)) for v in runs]))
    np.testing.assert_allclose(res.null_distribution(), ref, atol=1e-15)
    np.testing.assert_allclose(res.null_distribution(max_points=24), ref, atol=1e-15)
    nd = res.null_distribution(max_points=23, seed=3)
    assert nd.size == 23 and np.all(np.diff(nd) >= 0)
    assert np.all(np.min(np.abs(nd[:, None] - np.array(ref)[None, :]), axis=1) < 1e-12)
    vals = [[_label_value(v, j) for j in range(len(v))] for v in runs]
    rng = np.random.default_rng(3)
    lab = np.floor(rng.random((23, 3)) * np.array([3, 2, 4])).astype(int)
    exp = np.sort([sum(vals[s][row[s]] for s in range(3)) / 3 for row in lab])
    np.testing.assert_allclose(nd, exp, atol=1e-15)
    np.testing.assert_array_equal(res.null_distribution(max_points=23),
                                  res.null_distribution(max_points=23, seed=0))


def test_permutation_null_distribution_default_size():
    policy = np.linspace(0.1, 0.5, 17)
    draws = [[x] for x in np.linspace(0.6, 0.2, 17)]
    res = _raw_perm(policy, draws, confidence_level=None)
    nd = res.null_distribution()
    assert nd.size == 100_000 and np.all(np.diff(nd) >= 0)
    assert nd.max() <= np.abs(res.differences).sum() / 17 + 1e-12


# --------------------------------------------------------------------------------------------
# F_K with edges: edge_class fields, infeasibility, corridor_violations
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k, span, d, min_gap, max_gap, train_start, run_end, fields", [
    # fields: first_lo, first_hi, gap_low, last_lo, last_hi
    (3, (0.0, 100.0), 2.0, 5.0, 40.0, None, None, (5.0, 40.0, 5.0, 58.0, 98.0)),
    (3, (0.0, 100.0), 8.0, 5.0, 40.0, None, None, (5.0, 40.0, 8.0, 52.0, 92.0)),
    (2, (10.0, 100.0), 2.0, 5.0, 60.0, 0.0, None, (10.0, 60.0, 5.0, 38.0, 98.0)),
    (2, (10.0, 100.0), 2.0, 15.0, 60.0, 0.0, 110.0, (15.0, 60.0, 15.0, 48.0, 98.0)),
    (1, (0.0, 30.0), 2.0, 5.0, 40.0, None, None, (5.0, 28.0, 5.0, -12.0, 28.0)),
    (1, (0.0, 30.0), 2.0, 5.0, 20.0, -4.0, None, (1.0, 16.0, 5.0, 8.0, 28.0)),
])
def test_edge_class_fields(k, span, d, min_gap, max_gap, train_start, run_end, fields):
    ec = se.edge_class(k, span, d, min_gap, max_gap, train_start=train_start, run_end=run_end)
    assert (ec.first_lo, ec.first_hi, ec.gap_low, ec.last_lo, ec.last_hi) == fields
    assert (ec.k, ec.gap_high, ec.duration, ec.m) == (k, max_gap, d, max(k - 1, 0))
    assert 0.0 < ec.acceptance <= 1.0


def test_edge_class_k0_fields_and_threshold():
    ec = se.edge_class(0, (0.0, 21.9), 2.0, 5.0, 20.0)
    assert (ec.k, ec.m, ec.acceptance) == (0, 0, 1.0)
    assert (ec.first_lo, ec.first_hi, ec.gap_low, ec.gap_high) == (5.0, 19.9, 5.0, 20.0)
    assert ec.last_lo == pytest.approx(-0.1) and ec.last_hi == pytest.approx(19.9)
    with pytest.raises(InputError, match="K = 0 is infeasible: 20 s"):
        se.edge_class(0, (0.0, 22.0), 2.0, 5.0, 20.0)
    # the trainer's own end and start decide, not the span's
    se.edge_class(0, (0.0, 22.0), 2.0, 5.0, 20.0, run_end=21.0)
    with pytest.raises(InputError):
        se.edge_class(0, (0.0, 21.0), 2.0, 5.0, 20.0, run_end=22.0)
    with pytest.raises(InputError):
        se.edge_class(0, (0.0, 21.0), 2.0, 5.0, 20.0, train_start=-1.0)
    se.edge_class(0, (0.0, 22.0), 2.0, 5.0, 20.0, train_start=0.5)


def test_edge_class_needs_finite_max_gap_and_gap_at_least_d():
    with pytest.raises(InputError, match="finite max_gap"):
        se.edge_class(2, (0.0, 100.0), 2.0, 5.0, math.inf)
    with pytest.raises(InputError, match="shorter than the merge duration"):
        se.edge_class(2, (0.0, 100.0), 10.0, 5.0, 9.0)
    ec = se.edge_class(2, (0.0, 100.0), 10.0, 5.0, 10.0, run_end=30.0)
    assert ec.gap_low == ec.gap_high == 10.0 and ec.acceptance == 1.0
    # K = 1 has no gap: a max_gap below D is no contradiction
    se.edge_class(1, (0.0, 30.0), 10.0, 5.0, 9.0, run_end=25.0)


@pytest.mark.parametrize("k, span, d, min_gap, max_gap, ok", [
    (3, (0.0, 100.0), 2.0, 5.0, 40.0, True),
    # hi_sum < 0: K windows need first_lo + m a <= last_hi
    (3, (0.0, 17.0), 2.0, 5.0, 40.0, True),       # 5 + 10 = 15 = last_hi
    (3, (0.0, 16.9), 2.0, 5.0, 40.0, False),
    # lo_sum > c + m w: too few windows for the run
    (2, (0.0, 121.0), 2.0, 5.0, 40.0, True),      # last_lo = 79, first_hi + max_gap = 80
    (2, (0.0, 122.1), 2.0, 5.0, 40.0, False),
    # c < 0: the first window cannot fit
    (1, (0.0, 7.0), 2.0, 5.0, 40.0, True),        # first_hi = 5 = first_lo
    (1, (0.0, 6.9), 2.0, 5.0, 40.0, False),
])
def test_edge_class_feasibility_at_each_bound(k, span, d, min_gap, max_gap, ok):
    if ok:
        ec = se.edge_class(k, span, d, min_gap, max_gap)
        s = se.sample_class(ec, 50, np.random.default_rng(1))
        assert s.shape == (50, k)
        for row in s:
            assert corridor_violations(row, row + d, span, d, min_gap, max_gap,
                                          tol=1e-9) == []
    else:
        with pytest.raises(InputError, match=f"infeasible corridor: no schedule of K = {k}"):
            se.edge_class(k, span, d, min_gap, max_gap)


def _acceptance_by_sampling(ec, n=400_000, seed=0):
    """Share of box schedules (first start, then gaps in [a, max_gap]) whose last start lies
    in [last_lo, last_hi]."""
    rng = np.random.default_rng(seed)
    first = rng.uniform(ec.first_lo, ec.first_hi, n)
    gaps = rng.uniform(ec.gap_low, ec.gap_high, (n, ec.m))
    last = first + gaps.sum(axis=1)
    return np.mean((last >= ec.last_lo) & (last <= ec.last_hi))


@pytest.mark.parametrize("k, span, d, min_gap, max_gap, train_start", [
    (2, (0.0, 60.0), 2.0, 5.0, 30.0, None),
    (3, (0.0, 60.0), 2.0, 5.0, 30.0, None),
    (4, (0.0, 90.0), 6.0, 5.0, 30.0, None),
    (3, (0.0, 60.0), 2.0, 5.0, 20.0, -20.0),      # first start pinned: c = 0
])
def test_edge_class_acceptance_is_the_box_share(k, span, d, min_gap, max_gap, train_start):
    ec = se.edge_class(k, span, d, min_gap, max_gap, train_start=train_start)
    if ec.first_hi == ec.first_lo:
        rng = np.random.default_rng(0)
        gaps = rng.uniform(ec.gap_low, ec.gap_high, (400_000, ec.m))
        last = ec.first_lo + gaps.sum(axis=1)
        ref = np.mean((last >= ec.last_lo) & (last <= ec.last_hi))
    else:
        ref = _acceptance_by_sampling(ec)
    assert ec.acceptance == pytest.approx(ref, abs=5 * math.sqrt(ref * (1 - ref) / 4e5) + 1e-4)
    assert ec.acceptance < 1.0


def test_sampled_schedules_respect_every_edge_in_both_samplers():
    ec = se.edge_class(4, (0.0, 90.0), 6.0, 5.0, 30.0, train_start=-3.0)
    for method in ("reject-box", "sequential", "auto"):
        s = se.sample_class(ec, 300, np.random.default_rng(2), method=method)
        assert s.shape == (300, 4)
        assert np.all(s[:, 0] >= ec.first_lo - 1e-9) and np.all(s[:, 0] <= ec.first_hi + 1e-9)
        g = np.diff(s, axis=1)
        assert np.all(g >= ec.gap_low - 1e-9) and np.all(g <= ec.gap_high + 1e-9)
        assert np.all(s[:, -1] >= ec.last_lo - 1e-9) and np.all(s[:, -1] <= ec.last_hi + 1e-9)
        # the span of first starts is used, not a point
        assert s[:, 0].max() - s[:, 0].min() > 0.3 * (ec.first_hi - ec.first_lo)
    with pytest.raises(InputError, match="unknown sampling method"):
        se.sample_class(ec, 3, np.random.default_rng(2), method="grid")
    assert se.sample_class(ec, 0, np.random.default_rng(2)).shape == (0, 4)


def test_single_window_sample_is_uniform_on_the_intersection():
    ec = se.edge_class(1, (0.0, 30.0), 2.0, 5.0, 20.0, train_start=-4.0)
    s = se.sample_class(ec, 4000, np.random.default_rng(3))[:, 0]
    lo, hi = max(ec.first_lo, ec.last_lo), min(ec.first_hi, ec.last_hi)
    assert (lo, hi) == (8.0, 16.0)
    assert s.min() >= lo and s.max() <= hi
    assert s.mean() == pytest.approx(12.0, abs=0.15)


def test_fixed_cadence_first_start_range():
    # gaps fixed at D = max_gap = 10: s1 in [max(first_lo, last_lo - 20), min(first_hi, ...)]
    ec = se.edge_class(3, (0.0, 38.0), 10.0, 5.0, 10.0)
    assert (ec.first_lo, ec.first_hi, ec.last_lo, ec.last_hi) == (5.0, 10.0, 18.0, 28.0)
    s = se.sample_class(ec, 2000, np.random.default_rng(4))
    np.testing.assert_allclose(np.diff(s, axis=1), 10.0, atol=1e-9)
    lo = max(ec.first_lo, ec.last_lo - 20.0)
    hi = min(ec.first_hi, ec.last_hi - 20.0)
    assert s[:, 0].min() >= lo - 1e-9 and s[:, 0].max() <= hi + 1e-9
    assert s[:, 0].min() < lo + 0.1 * (hi - lo) and s[:, 0].max() > hi - 0.1 * (hi - lo)


CV = dict(span=(0.0, 100.0), duration=2.0, min_gap=5.0, max_gap=30.0)


@pytest.mark.parametrize("starts, kw, expected", [
    # no merges: forced one when (t1 - D) - train start >= max_gap (+ tol)
    ([], dict(span=(0.0, 32.0)), ["no merge in 30 s of training: max_gap 30 s forces one"]),
    ([], dict(span=(0.0, 31.9)), []),
    ([], dict(span=(0.0, 32.5), tol=0.5), ["no merge in"]),
    ([], dict(span=(0.0, 32.4), tol=0.5), []),
    ([], dict(span=(0.0, 500.0), max_gap=math.inf), []),
    ([], dict(span=(0.0, 40.0), train_start=8.5), []),
    # first merge vs min_gap / max_gap from the training start
    ([5.0, 30.0, 55.0, 80.0], {}, []),
    ([4.9, 30.0, 55.0, 80.0], {}, ["first merge 4.9 s after training start < min_gap 5 s"]),
    ([4.6, 30.0, 55.0, 80.0], dict(tol=0.4), []),
    ([30.0, 55.0, 80.0], {}, []),
    ([30.1, 55.0, 80.0], {}, ["first merge 30.1 s after training start > max_gap 30 s"]),
    ([30.4, 55.0, 80.0], dict(tol=0.4), []),
    ([6.0, 30.0, 55.0, 80.0], dict(train_start=1.5), ["first merge 4.5 s"]),
    ([2.0, 30.0, 55.0, 80.0], dict(train_start=-3.0), []),
    # gaps below a = max(min_gap, D): name the rule that binds
    ([5.0, 10.0, 40.0, 70.0, 75.0], {}, []),
    ([5.0, 9.9, 39.0, 69.0, 74.0], {}, ["merges 0 and 1 start 4.9 s apart < min_gap 5 s"]),
    ([5.0, 12.9, 40.0, 70.0, 78.0], dict(duration=8.0),
     ["merges 0 and 1 start 7.9 s apart < D 8 s"]),
    ([5.0, 9.0, 13.0, 17.0, 21.0, 50.0, 79.0], {},
     ["merges 0 and 1", "merges 1 and 2", "merges 2 and 3"]),
    # gaps above max_gap, the first three
    ([5.0, 35.1, 60.0, 90.0], {}, ["merges 0 and 1 start 30.1 s apart > max_gap 30 s"]),
    ([5.0, 35.1, 65.2, 95.3], dict(span=(0.0, 120.0)),
     ["merges 0 and 1", "merges 1 and 2", "merges 2 and 3"]),
    ([5.0, 35.1, 65.2, 95.3, 125.4], dict(span=(0.0, 150.0)),
     ["merges 0 and 1", "merges 1 and 2", "merges 2 and 3"]),
    # trailing gap: (t1 - D) - last start >= max_gap (+ tol)
    ([5.0, 35.0, 60.0, 68.0], {}, ["last merge 30 s before the last feasible start"]),
    ([5.0, 35.0, 60.0, 68.1], {}, []),
    ([5.0, 35.0, 60.0, 67.9], dict(tol=0.2), []),
    ([5.0, 35.0, 60.0, 68.0], dict(max_gap=math.inf), []),
    # a window past the end
    ([5.0, 34.0, 63.0, 93.0, 98.0], {}, []),
    ([5.0, 34.0, 63.0, 93.0, 98.1], {}, ["a merge window runs past the end of the run"]),
    ([5.0, 34.0, 63.0, 93.0, 98.3], dict(tol=0.3), []),
])
def test_corridor_violations_table(starts, kw, expected):
    args = {**CV, **kw}
    s = np.asarray(starts, dtype=float)
    got = corridor_violations(s, s + args["duration"], **args)
    assert len(got) == len(expected), got
    for g, e in zip(got, expected):
        assert g.startswith(e), (g, e)


def test_corridor_violations_ends_and_order():
    cv = {**CV, "span": (0.0, 90.0)}
    s = np.array([65.0, 5.0, 35.0])
    e = np.array([67.0, 7.0, 37.0])
    assert corridor_violations(s, e, **cv) == []
    # the end of a window after the run's end, though its start is feasible
    e2 = np.array([90.2, 7.0, 37.0])
    assert corridor_violations(s, e2, **cv) == ["a merge window runs past the end of the run"]
    assert corridor_violations(s, np.array([90.0, 7.0, 37.0]), **cv) == []
    assert corridor_violations(s, e2, tol=0.2, **cv) == []
    # unknown ends (NaN) are skipped
    assert corridor_violations(s, np.array([np.nan, 7.0, 37.0]), **cv) == []
    # the sort of starts carries the ends along: ends of the unsorted input stay paired
    s3 = np.array([35.0, 5.0])
    e3 = np.array([37.0, 101.0])
    assert corridor_violations(s3, e3, span=(0.0, 40.0), duration=2.0, min_gap=5.0,
                                  max_gap=30.0) == ["a merge window runs past the end of "
                                                    "the run"]


def test_corridor_violations_defaults_train_start_zero_no_tolerance():
    s = np.array([5.0, 35.0, 65.0])
    assert corridor_violations(s, s + 2, (0.0, 70.0), 2.0, 5.0, 30.0) == []
    s = np.array([4.5, 34.0, 64.0])
    assert len(corridor_violations(s, s + 2, (0.0, 70.0), 2.0, 5.0, 30.0)) == 1
    assert corridor_violations(s, s + 2, (0.0, 70.0), 2.0, 5.0, 30.0, tol=0.5) == []


# --------------------------------------------------------------------------------------------
# run metrics at their boundaries
# --------------------------------------------------------------------------------------------

def test_ttft_tpot_and_violations_at_the_edges():
    arrival = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    first = [0.5, 1.2, np.nan, 3.4, 4.1, 5.0, 6.3]
    end = [1.5, 1.2, 2.5, np.nan, 4.9, 5.0, 7.3]
    tokens = [3, 1, 4, 5, 0, 2, 2]
    ok = [True, True, True, True, True, True, False]
    np.testing.assert_allclose(mt.ttft(arrival, first, ok),
                               [0.5, 0.2, np.inf, 0.4, 0.1, 0.0, np.inf], atol=1e-12)
    # (end - first) / (tokens - 1); <= 1 token: 0; failed, no end or no first token: inf
    np.testing.assert_allclose(mt.tpot(first, end, tokens, ok),
                               [0.5, 0.0, np.inf, np.inf, 0.0, 0.0, np.inf], atol=1e-12)
    np.testing.assert_allclose(mt.e2e_latency(arrival, end, ok),
                               [1.5, 0.2, 0.5, np.inf, 0.9, 0.0, np.inf], atol=1e-12)
    v = mt.violations([0.5, 0.5000001, 0.4999999, np.inf, 0.0], 0.5)
    assert v.tolist() == [False, True, False, True, False]


def test_slo_flags_and_goodput_at_exactly_the_slo():
    arrival = [0.0, 0.0, 0.0, 0.0, 0.0]
    first = [0.2, 0.3, 0.2, 0.2, 0.2]
    end = [1.0, 1.0, 1.1, 0.6, np.nan]
    tokens = [5, 5, 5, 2, 5]
    ok = [True, True, True, True, False]
    slo = {"e2e_s": 1.0, "ttft_s": 0.2, "tpot_s": 0.2}
    f = mt.slo_flags(arrival, first, end, tokens, ok, slo)
    assert f.e2e.tolist() == [False, False, True, False, True]
    assert f.ttft.tolist() == [False, True, False, False, True]
    # tpot: 0.2, 0.175, 0.225, 0.4, inf
    assert f.tpot.tolist() == [False, False, True, True, True]
    assert f.good.tolist() == [True, False, False, False, False]
    assert mt.goodput_flags(arrival, first, end, tokens, ok, slo).tolist() == f.good.tolist()
    f2 = mt.slo_flags(arrival, first, end, tokens, ok, {"e2e_s": 1.0})
    assert f2.ttft is None and f2.tpot is None
    assert f2.good.tolist() == [True, True, False, True, False]
    f3 = mt.slo_flags(arrival, first, end, tokens, ok, {"e2e_s": 1.0, "ttft_s": 0.25,
                                                        "tpot_s": None})
    assert f3.tpot is None and f3.good.tolist() == [True, False, False, True, False]


@pytest.mark.parametrize("values, q, expected", [
    ([], 0.5, math.nan),
    ([3.0], 0.0, 3.0), ([3.0], 1.0, 3.0), ([3.0], 0.5, 3.0),
    ([1.0, 2.0], 0.0, 1.0), ([1.0, 2.0], 1.0, 2.0), ([1.0, 2.0], 0.25, 1.25),
    ([4.0, 1.0, 2.0, 8.0], 0.5, 3.0), ([4.0, 1.0, 2.0, 8.0], 0.9, 6.8),
    ([1.0, np.inf], 0.5, np.inf), ([1.0, np.inf], 0.0, 1.0),
    ([1.0, 2.0, np.inf], 0.5, 2.0), ([1.0, 2.0, np.inf], 0.75, np.inf),
    ([np.inf, np.inf], 0.3, np.inf), ([2.0, 2.0, 2.0, 5.0], 0.5, 2.0),
])
def test_quantile_boundaries(values, q, expected):
    got = mt.quantile(values, q)
    if math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(expected, rel=1e-12)
    fin = [x for x in values if math.isfinite(x)]
    if values and len(fin) == len(values):
        assert got == pytest.approx(float(np.quantile(values, q)), rel=1e-12)


def test_quantiles_of_several_levels_match_one_at_a_time():
    rng = np.random.default_rng(5)
    v = np.concatenate((rng.exponential(1.0, 5000), [np.inf] * 40))
    qs = [0.0, 0.5, 0.9, 0.99, 0.995, 1.0]
    many = mt.quantiles(v, qs)
    one = [mt.quantile(v, q) for q in qs]
    np.testing.assert_array_equal(many, one)
    fin = np.sort(v)
    for q, got in zip(qs, many):
        h = (v.size - 1) * q
        lo, hi = int(math.floor(h)), min(int(math.floor(h)) + 1, v.size - 1)
        frac = h - lo
        ref = fin[lo] if frac == 0 or fin[lo] == fin[hi] else (
            np.inf if not np.isfinite(fin[hi]) else fin[lo] + (fin[hi] - fin[lo]) * frac)
        assert got == ref
    assert np.all(np.isnan(mt.quantiles([], [0.1, 0.9])))


def test_step_rate_boundaries():
    # 10 steps over 4 s with a 3.5 s merge inside: 0.5 s free -> 20 steps/s
    assert mt.step_rate(10, 0.0, 4.0, [0.5], [4.0]) == pytest.approx(20.0)
    assert mt.step_rate(10, 0.0, 4.0, [], []) == pytest.approx(2.5)
    assert math.isnan(mt.step_rate(0, 0.0, 4.0, [], []))
    assert math.isnan(mt.step_rate(10, 4.0, 4.0, [], []))
    assert math.isnan(mt.step_rate(10, 4.0, 3.0, [], []))
    assert math.isnan(mt.step_rate(10, 0.0, 4.0, [-1.0], [5.0]))    # merging all the time
    # merges outside the steps' extent do not count
    assert mt.step_rate(8, 1.0, 3.0, [-2.0, 3.0], [1.0, 9.0]) == pytest.approx(4.0)


def test_time_exposure_boundaries():
    assert math.isnan(mt.time_exposure([1.0], [2.0], (5.0, 5.0)))
    assert math.isnan(mt.time_exposure([1.0], [2.0], (5.0, 4.0)))
    assert mt.time_exposure([], [], (0.0, 10.0)) == 0.0
    assert mt.time_exposure([-5.0, 8.0], [2.0, 20.0], (0.0, 10.0)) == pytest.approx(0.4)
    assert mt.time_exposure([1.0, 2.0], [4.0, 3.0], (0.0, 10.0)) == pytest.approx(0.3)
    assert mt.time_exposure([-5.0, 12.0], [-1.0, 20.0], (0.0, 10.0)) == 0.0
    assert mt.time_exposure([0.0], [10.0], (0.0, 10.0)) == 1.0


def test_union_windows_touching_and_nested():
    s, e = mt.union_windows([5.0, 0.0, 2.0, 7.0, 7.5], [6.0, 2.0, 3.0, 9.0, 8.0])
    np.testing.assert_array_equal(s, [0.0, 5.0, 7.0])
    np.testing.assert_array_equal(e, [3.0, 6.0, 9.0])
    s, e = mt.union_windows([], [])
    assert s.size == 0 and e.size == 0


def test_request_intervals_and_exposure_boundaries():
    arrival = [0.0, 1.0, 2.0, 3.0]
    sent = [0.1, 1.1, 2.1, 12.0]
    end = [1.0, np.nan, 2.5, np.nan]
    ok = [True, False, False, False]
    lo, hi = mt.request_intervals(arrival, sent, end, ok, horizon_s=10.0)
    np.testing.assert_array_equal(lo, [0.0, 1.1, 2.1, 12.0])
    np.testing.assert_array_equal(hi, [1.0, 10.0, 2.5, 12.0])
    # touching a window is no overlap; positive overlap is
    ov = mt.overlaps_windows([0.0, 1.0, 2.0, 4.0, 3.5], [1.0, 2.0, 3.0, 5.0, 3.6], [1.0, 3.5],
                             [2.0, 3.55])
    assert ov.tolist() == [False, True, False, False, True]
    assert mt.overlaps_windows([0.0], [1.0], [], []).tolist() == [False]
    assert math.isnan(mt.request_exposure([], [], [], [], [1.0], [2.0], 10.0))
    x = mt.request_exposure(arrival, sent, end, ok, [0.5], [0.6], 10.0)
    assert x == pytest.approx(0.25)
    x = mt.request_exposure(arrival, sent, end, ok, [2.2], [2.3], 10.0)
    assert x == pytest.approx(0.5)


def test_observed_span_and_windows_boundaries():
    sp = mt.observed_span([2.0, 1.0, 3.0], [4.0, np.nan, 5.0], horizon_s=6.0, merge_duration_s=1)
    assert (sp.start_s, sp.end_s, sp.last_start_s, sp.length_s) == (1.0, 6.0, 5.0, 5.0)
    sp = mt.observed_span([2.0, 1.0], [4.0, 3.0], horizon_s=6.0, merge_duration_s=0.5)
    assert tuple(sp) == (1.0, 4.0) and sp.starts() == (1.0, 3.5)
    sp = mt.observed_span([2.0, 1.0], [8.0, 3.0], horizon_s=6.0, merge_duration_s=0.5)
    assert sp.end_s == 6.0
    sp = mt.observed_span([2.0, 5.0], [3.0, np.nan], horizon_s=4.0, merge_duration_s=0.5)
    assert sp.end_s == 4.0
    sp = mt.observed_span([2.0, 5.0], [3.0, 4.0], horizon_s=9.0, merge_duration_s=0.5)
    assert sp.end_s == 5.0
    assert mt.Span(3.0, 1.0, 0.5).length_s == 0.0
    assert mt.Span(1.0, 3.0, 0.5) == mt.Span(1.0, 3.0, 0.5)
    assert mt.Span(1.0, 3.0, 0.5) != mt.Span(1.0, 3.0, 0.6) and mt.Span(1, 3, 0) != (1, 3)
    with pytest.raises(InputError):
        mt.observed_span([], [], horizon_s=6.0, merge_duration_s=1.0)
    inside = mt.observed_windows([1.0, 0.9, 3.0, 4.5], [2.0, 2.0, 4.0, 5.1], (1.0, 5.0))
    assert inside.tolist() == [True, False, True, False]
    assert mt.windows_observed([1.0, 0.9, 3.0, 4.5], [2.0, 2.0, 5.0, 5.1], (1.0, 5.0)) == 2


@pytest.mark.parametrize("k, n", [(0, 1), (1, 1), (0, 20), (20, 20), (7, 20), (1, 3)])
def test_clopper_pearson_edges_against_scipy(k, n):
    from scipy import stats
    lo, hi = mt.clopper_pearson(k, n, 0.9)
    ref = stats.binomtest(k, n).proportion_ci(0.9, method="exact")
    assert lo == pytest.approx(ref.low, abs=1e-12) and hi == pytest.approx(ref.high, abs=1e-12)
    assert (lo == 0.0) == (k == 0) and (hi == 1.0) == (k == n)


def test_clopper_pearson_rejects_impossible_counts():
    for k, n in [(0, 0), (-1, 5), (6, 5)]:
        with pytest.raises(InputError):
            mt.clopper_pearson(k, n)
    lo, hi = mt.clopper_pearson([0, 3], [5, 5])
    assert lo.shape == (2,) and lo[0] == 0.0 and hi[1] < 1.0
