"""The sign-flip test against brute force: every field, ties at atol, min attainable p, seeds
needed, exact and Monte Carlo paths, null distribution."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from evalkit.errors import InputError
from evalkit.stats import randomisation as sf


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
