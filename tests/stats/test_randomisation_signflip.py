"""Sign-flip test against scipy's exact permutation test, closed forms and simulation."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from evalkit.errors import InputError
from evalkit.stats import min_attainable_p, seeds_needed, sign_flip_test
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
