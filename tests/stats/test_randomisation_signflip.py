"""Sign-flip test against scipy's exact permutation test, closed forms and simulation.

The sign-flip test against brute force: every field, ties at atol, min attainable p, seeds
needed, exact and Monte Carlo paths, null distribution."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st
from scipy import stats

from evalkit.errors import InputError
from evalkit.stats import min_attainable_p, randomisation as sf, seeds_needed, sign_flip_test
from evalkit.stats._result import DEFAULT_RTOL
from evalkit.stats.randomisation import _all_sums


ALTS = ("greater", "less", "two-sided")


def scipy_p(d, alternative):
    return stats.permutation_test((np.asarray(d, float),), np.mean, permutation_type="samples",
                                  n_resamples=np.inf, alternative=alternative,
                                  vectorized=True).pvalue


# Quarter-integers make every sign-sum exact in float64, so ties and zeros are real ties
# for both implementations (no rounding luck involved).
dyadic = st.lists(st.integers(-12, 12).map(lambda k: k / 4), min_size=2, max_size=12)


@settings(max_examples=40, deadline=None)
@given(d=dyadic, alternative=st.sampled_from(ALTS))
def test_matches_scipy_exact_with_ties_and_zeros(d, alternative):
    assert sign_flip_test(d, alternative).p_value == pytest.approx(scipy_p(d, alternative),
                                                                   abs=1e-12)


def exact_p(d, alternative):
    """p by enumerating all 2^n sign sums in exact integer arithmetic.

    Every float is a dyadic rational, so on the common denominator the d_s are integers
    and each sign sum is compared with the observed one without rounding or tolerance.
    """
    ratios = [float(x).as_integer_ratio() for x in d]
    den = max(q for _, q in ratios)
    ints = [p * (den // q) for p, q in ratios]
    sums = [0]
    for v in ints:
        sums = [s + v for s in sums] + [s - v for s in sums]
    t = sum(ints)
    p_g = sum(s >= t for s in sums) / len(sums)
    p_l = sum(s <= t for s in sums) / len(sums)
    return {"greater": p_g, "less": p_l, "two-sided": min(1.0, 2 * min(p_g, p_l))}[alternative]


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 14), shift=st.floats(-1, 1))
def test_matches_exact_enumeration_continuous(seed, n, shift):
    d = np.random.default_rng(seed).normal(shift, 1.0, n)
    # a sign sum within the test's tie tolerance of the observed one, yet not equal in exact
    # arithmetic, counts as a tie by design (rounding cannot tell them apart): those draws
    # are the tolerance's cases, not this comparison's
    sums = np.array(list(itertools.product((1.0, -1.0), repeat=n))) @ d
    gap = np.abs(sums - d.sum()) / np.abs(d).sum()
    assume(not np.any((gap > 1e-14) & (gap <= 10 * DEFAULT_RTOL)))
    for alt in ALTS:
        assert sign_flip_test(d, alt).p_value == pytest.approx(exact_p(d, alt), abs=1e-12)


def test_observed_labelling_counts_when_the_mean_is_near_zero():
    # scipy's tie tolerance is relative to |observed| (100 eps x 0.0013 here), smaller than
    # the rounding of the identity pattern's recomputed mean, so scipy drops the observed
    # labelling itself; in exact arithmetic 8160 of 16384 patterns reach the observed sum.
    d = np.random.default_rng(5).normal(0.0, 1.0, 14)
    r = sign_flip_test(d, "greater")
    assert r.p_value == 8160 / 2 ** 14 == exact_p(d, "greater")
    assert sign_flip_test(d, "less").p_value == exact_p(d, "less")
    assert sign_flip_test(d, "two-sided").p_value == exact_p(d, "two-sided")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_scipy_exact_continuous_away_from_zero(seed):
    # a mean well away from 0: scipy's relative tolerance covers the rounding
    d = np.random.default_rng(seed).normal(0.8, 1.0, 12)
    for alt in ALTS:
        assert sign_flip_test(d, alt).p_value == pytest.approx(scipy_p(d, alt), abs=1e-12)


def test_matches_scipy_at_n16_with_ties():
    d = np.array([1, -1, 2, 2, 0, 0, 3, -2, 1, 1, 0.5, -0.5, 4, 2, -3, 1.5])
    for alt in ALTS:
        assert sign_flip_test(d, alt).p_value == pytest.approx(scipy_p(d, alt), abs=1e-12)


def test_meet_in_the_middle_equals_full_enumeration_n20():
    d = np.random.default_rng(3).normal(0.2, 1, 20)
    full = _all_sums([np.array([x, -x]) for x in d])
    t = d.sum()
    r = sign_flip_test(d, "two-sided")
    assert r.exact and r.null_size == 2 ** 20
    assert r.p_greater == pytest.approx(np.mean(full >= t - 1e-9), abs=1e-15)
    assert r.p_less == pytest.approx(np.mean(full <= t + 1e-9), abs=1e-15)


def test_monte_carlo_agrees_within_error():
    d = np.random.default_rng(5).normal(0.4, 1, 16)
    exact = sign_flip_test(d, "greater").p_value
    mc = sign_flip_test(d, "greater", n_resamples=20_000, rng=np.random.default_rng(1))
    assert not mc.exact and mc.null_size == 20_000
    se = np.sqrt(exact * (1 - exact) / 20_000)
    assert abs(mc.p_value - exact) < 4 * se + 1 / 20_001
    # n_resamples >= 2^n means exact
    assert sign_flip_test(d, n_resamples=2 ** 16).exact


def test_known_values_five_seeds():
    d = [0.1, 0.3, 0.2, 0.5, 0.05]
    one = sign_flip_test(d, "greater")
    two = sign_flip_test(d, "two-sided")
    assert one.p_value == 1 / 32 and two.p_value == 1 / 16
    assert one.wins == 5 and one.min_p == 1 / 32 and two.min_p == 1 / 16
    assert not two.reachable(0.05) and one.reachable(0.05)
    assert seeds_needed(0.05, "two-sided") == 6
    assert seeds_needed(0.05, "greater") == 5
    assert min_attainable_p(6, "two-sided") <= 0.05


def test_headline_8_of_10_is_a_signflip_not_a_sign_test():
    # 8 of 10 seeds favour the policy; the two losses are small.
    d = np.array([3, 5, 2, 4, 6, 1, 3, 2, -2, -2], dtype=float)
    r = sign_flip_test(d, "greater")
    assert r.wins == 8 and r.exact
    assert r.p_value == pytest.approx(0.021, abs=0.001)
    assert r.p_value == pytest.approx(scipy_p(d, "greater"), abs=1e-12)
    sign_test = stats.binomtest(8, 10, 0.5, alternative="greater").pvalue
    assert sign_test == pytest.approx(0.055, abs=0.001)


def test_type_one_error_at_most_alpha():
    rng = np.random.default_rng(2024)
    campaigns, alpha = 2000, 0.05
    rejections = sum(sign_flip_test(rng.normal(0, 1, 10), "greater").p_value <= alpha
                     for _ in range(campaigns))
    rate = rejections / campaigns
    size = np.floor(alpha * 1024) / 1024          # exact size of the n = 10 test: 51/1024
    se = np.sqrt(size * (1 - size) / campaigns)
    assert abs(rate - size) < 3.5 * se
    assert rate <= alpha + 3.5 * se


def test_ci_inverts_the_test():
    rng = np.random.default_rng(9)
    for n in (6, 9, 12):
        d = rng.normal(0.5, 1, n)
        r = sign_flip_test(d, "two-sided")
        assert r.ci_low < r.statistic < r.ci_high
        eps = 1e-7
        # just inside the interval the shifted data are not rejected, just outside they are
        assert sign_flip_test(d - (r.ci_low + eps), "greater").p_value > 0.025
        assert sign_flip_test(d - (r.ci_low - eps), "greater").p_value <= 0.025
        assert sign_flip_test(d - (r.ci_high - eps), "less").p_value > 0.025
        assert sign_flip_test(d - (r.ci_high + eps), "less").p_value <= 0.025
        one = sign_flip_test(d, "greater")
        assert np.isinf(one.ci_high) and (one.p_value <= 0.05) == (one.ci_low > 0)


def test_ci_unbounded_when_n_too_small():
    r = sign_flip_test([1.0, 2.0, 3.0], "two-sided")
    assert np.isinf(r.ci_low) and np.isinf(r.ci_high)
    assert r.to_dict()["ci_low"] is None


def test_large_n_uses_monte_carlo_and_is_deterministic():
    d = np.random.default_rng(0).normal(0.1, 1, 50)
    a = sign_flip_test(d, n_resamples=5000, rng=7)
    b = sign_flip_test(d, n_resamples=5000, rng=7)
    assert a.p_value == b.p_value and a.ci_low == b.ci_low
    assert "Monte Carlo" in sign_flip_test(d).method


def test_null_distribution_and_json():
    r = sign_flip_test([0.2, -0.1, 0.4, 0.3])
    null = r.null_distribution()
    assert null.size == 16 and np.allclose(null, -null[::-1])
    assert r.statistic in null
    big = sign_flip_test(np.arange(1.0, 31.0), n_resamples=1000).null_distribution(500)
    assert big.size == 500
    json.dumps(r.to_dict(), allow_nan=False)


@pytest.mark.parametrize("bad", [[], [np.nan, 1.0, 2.0], [1.0, np.inf], [0.3]])
def test_bad_input(bad):
    with pytest.raises(InputError):
        sign_flip_test(bad)


def test_bad_arguments():
    with pytest.raises(InputError):
        sign_flip_test([1.0, 2.0], alternative="bigger")
    with pytest.raises(InputError, match="exact"):
        sign_flip_test(np.ones(41), n_resamples=np.inf)
    with pytest.raises(InputError):
        seeds_needed(1.5)


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
