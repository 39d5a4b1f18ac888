"""Monte Carlo paths of the sign-flip and within-seed permutation tests: forced Monte Carlo
against exact within MC error, the (k + 1)/(B + 1) floor, ties counted in MC mode, min_p
with B, and the fields a MC result reports."""

from __future__ import annotations

import itertools
import math
from functools import partial

import numpy as np
import pytest

from evalkit.errors import InputError
from evalkit.stats import sign_flip_test
from evalkit.stats.randomisation import min_attainable_p, seed_label_values
from evalkit.stats.randomisation import within_seed_permutation_test as _wspt
from evalkit.stats.randomisation import min_attainable_p as sf_min_p

# These tests pin the raw-mean engine, kept as statistic="mean"; the studentized default
# is checked against its own brute force in tests/stats/test_randomisation_permutation.py.
within_seed_permutation_test = partial(_wspt, statistic="mean")

B = 20_000


def _within_mc_error(p_mc, p_exact, b=B, z=4.5):
    se = math.sqrt(max(p_exact * (1 - p_exact), 1e-12) / b)
    return abs(p_mc - p_exact) <= z * se + 2.0 / (b + 1)


# ----------------------------------------------------------------------------- sign flip

def test_sign_flip_forced_mc_matches_exact():
    d = np.random.default_rng(5).normal(0.01, 0.03, 16)
    exact = sign_flip_test(d, alternative="greater")
    mc = sign_flip_test(d, alternative="greater", n_resamples=B, rng=11)
    assert exact.exact and not mc.exact
    assert mc.null_size == B and mc.n_resamples == B and "Monte Carlo" in mc.method
    for f in ("p_greater", "p_less", "p_two_sided"):
        assert _within_mc_error(getattr(mc, f), getattr(exact, f)), f
    assert mc.p_two_sided == min(1.0, 2 * min(mc.p_greater, mc.p_less))


def test_sign_flip_mc_floor_is_k_plus_one_over_b_plus_one():
    d = np.linspace(1.0, 2.0, 16)                     # only the identity reaches the sum
    res = sign_flip_test(d, alternative="greater", n_resamples=99, rng=0)
    assert res.p_greater == pytest.approx(1 / 100) and res.p_less == 1.0
    assert res.min_p == pytest.approx(1 / 100)
    two = sign_flip_test(d, alternative="two-sided", n_resamples=99, rng=0)
    assert two.p_value == pytest.approx(2 / 100) and two.min_p == pytest.approx(2 / 100)
    # exact: 2^-16, far below the MC floor
    assert sign_flip_test(d, alternative="greater").p_value == 2.0 ** -16


def test_sign_flip_mc_p_is_k_plus_one_over_b_plus_one_exactly():
    d = np.random.default_rng(1).normal(0.0, 1.0, 12)
    b = 1000
    res = sign_flip_test(d, alternative="greater", n_resamples=b, rng=7)
    k = round(res.p_greater * (b + 1)) - 1
    assert res.p_greater == pytest.approx((k + 1) / (b + 1))
    # reproduce k with the same draws
    rng = np.random.default_rng(7)
    flips = rng.integers(0, 2, size=(b, d.size), dtype=np.int8).astype(bool)
    sums = (1.0 - 2.0 * flips) @ d
    tol = 1e-9 * np.mean(np.abs(d)) * d.size
    assert k == int(np.count_nonzero(sums >= d.sum() - tol))


def test_sign_flip_ties_counted_in_mc_mode():
    d = np.array([1.0, -1.0] * 8)                     # observed sum 0; P(sum = 0) = 0.196
    exact = sign_flip_test(d, alternative="greater")
    ref = sum(math.comb(16, j) for j in range(8, 17)) / 2 ** 16
    assert exact.p_greater == pytest.approx(ref)
    mc = sign_flip_test(d, alternative="greater", n_resamples=B, rng=3)
    assert _within_mc_error(mc.p_greater, ref)
    assert _within_mc_error(mc.p_less, ref)
    assert mc.p_greater > 0.55                        # dropping ties would give ~0.40


def test_sign_flip_min_p_counts_only_nonzero_d_and_b():
    d = np.array([0.1, 0.2, 0.0, 0.3, 0.0, 0.4])
    res = sign_flip_test(d, alternative="greater")
    assert res.n_zero == 2 and res.min_p == 2.0 ** -4
    assert sf_min_p(4, "greater", 10) == pytest.approx(1 / 11)
    assert sf_min_p(4, "greater", 10_000) == 2.0 ** -4
    assert sf_min_p(4, "two-sided") == 2.0 ** -3
    assert sf_min_p(1, "two-sided") == 1.0
    res = sign_flip_test(d, alternative="greater", n_resamples=7, rng=0)
    assert res.min_p == pytest.approx(1 / 8)


def test_sign_flip_exact_when_b_covers_all_patterns():
    d = np.random.default_rng(2).normal(0.0, 1.0, 8)
    assert sign_flip_test(d, n_resamples=256).exact
    assert not sign_flip_test(d, n_resamples=255).exact
    assert sign_flip_test(d, n_resamples=np.inf).exact


def test_sign_flip_default_switches_to_mc_beyond_40():
    d = np.random.default_rng(4).normal(0.05, 0.2, 41)
    res = sign_flip_test(d, alternative="greater", rng=0)
    assert not res.exact and res.n_resamples == 100_000
    assert res.min_p == pytest.approx(1 / 100_001)


# ---------------------------------------------------------------- within-seed permutation

def _design(n=10, m=2, seed=0, integer=False):
    rng = np.random.default_rng(seed)
    if integer:
        pol = rng.integers(0, 3, n).astype(float)
        draws = [rng.integers(0, 3, m).astype(float) for _ in range(n)]
    else:
        pol = rng.normal(0.10, 0.02, n)
        draws = [rng.normal(0.11, 0.02, m) for _ in range(n)]
    return pol, draws


def _brute_force(pol, draws):
    """Enumerate every label set: (p_greater, p_less)."""
    vals = [seed_label_values(p, d) for p, d in zip(pol, draws)]
    t = sum(v[0] for v in vals)
    tol = 1e-9 * np.mean(np.abs(np.concatenate(vals))) * len(vals)
    sums = np.array([sum(c) for c in itertools.product(*vals)])
    return float(np.mean(sums >= t - tol)), float(np.mean(sums <= t + tol))


def test_permutation_exact_matches_brute_force_with_ties():
    pol, draws = _design(n=6, m=2, seed=1, integer=True)
    res = within_seed_permutation_test(pol, draws, alternative="greater")
    g, l = _brute_force(pol, draws)
    assert res.exact and res.p_greater == pytest.approx(g) and res.p_less == pytest.approx(l)


def test_permutation_forced_mc_matches_exact():
    pol, draws = _design(n=10, m=2, seed=2)
    exact = within_seed_permutation_test(pol, draws, alternative="two-sided",
                                         confidence_level=None)
    mc = within_seed_permutation_test(pol, draws, alternative="two-sided", n_resamples=B,
                                      rng=5, confidence_level=None)
    assert exact.exact and exact.null_size == 3 ** 10
    assert not mc.exact and mc.null_size == B and mc.n_resamples == B
    assert "Monte Carlo" in mc.method
    for f in ("p_greater", "p_less", "p_two_sided"):
        assert _within_mc_error(getattr(mc, f), getattr(exact, f)), f


def test_permutation_ties_counted_in_mc_mode():
    pol, draws = _design(n=9, m=2, seed=3, integer=True)
    g, l = _brute_force(pol, draws)
    mc = within_seed_permutation_test(pol, draws, alternative="greater", n_resamples=B, rng=9,
                                      confidence_level=None)
    assert _within_mc_error(mc.p_greater, g) and _within_mc_error(mc.p_less, l)
    # with integer V many label sets tie the observed sum: counting them matters
    vals = [seed_label_values(p, d) for p, d in zip(pol, draws)]
    sums = np.array([sum(c) for c in itertools.product(*vals)])
    t = sum(v[0] for v in vals)
    assert np.mean(np.isclose(sums, t)) > 0.02


def test_permutation_mc_floor_and_min_p_with_b():
    n, m = 10, 3
    pol = np.full(n, 0.01)
    draws = [np.array([0.2, 0.3, 0.4]) + 0.01 * i for i in range(n)]
    res = within_seed_permutation_test(pol, draws, alternative="greater", n_resamples=99,
                                       rng=0, confidence_level=None)
    assert res.p_greater == pytest.approx(1 / 100) and res.p_less == 1.0
    assert res.min_p == pytest.approx(1 / 100) and res.design_min_p == pytest.approx(1 / 100)
    exact = within_seed_permutation_test(pol, draws, alternative="greater",
                                         confidence_level=None)
    assert exact.p_greater == pytest.approx(4.0 ** -n) and exact.min_p == pytest.approx(4.0 ** -n)
    two = within_seed_permutation_test(pol, draws, alternative="two-sided", n_resamples=99,
                                       rng=0, confidence_level=None)
    assert two.p_value == pytest.approx(2 / 100) and two.min_p == pytest.approx(2 / 100)
    assert min_attainable_p([m] * n, "greater", 10 ** 9) == pytest.approx(4.0 ** -n)


def test_permutation_min_p_counts_tied_seeds():
    # seed 2's runs all have the same V: it cannot move the statistic
    pol = [0.1, 0.1, 0.3]
    draws = [[0.2, 0.3], [0.2, 0.4], [0.3, 0.3]]
    res = within_seed_permutation_test(pol, draws, alternative="greater")
    assert res.min_p == pytest.approx(1 / 9) and res.design_min_p == pytest.approx(1 / 27)
    assert res.n_zero == 1 and res.n_positive == 2
    assert min_attainable_p([2, 2], "less") == pytest.approx(1 / 9)
    assert min_attainable_p([1, 2], "two-sided") == pytest.approx(2 / 6)


def test_permutation_with_one_draw_is_the_sign_flip_test():
    pol, draws = _design(n=12, m=1, seed=6)
    perm = within_seed_permutation_test(pol, draws, alternative="two-sided")
    d = np.array([dr[0] - p for p, dr in zip(pol, draws)])
    sf = sign_flip_test(d, alternative="two-sided")
    assert perm.p_value == pytest.approx(sf.p_value) and perm.statistic == pytest.approx(
        sf.statistic)
    assert perm.min_p == pytest.approx(sf.min_p)


def test_permutation_exact_when_b_covers_all_label_sets():
    pol, draws = _design(n=5, m=2, seed=7)
    assert within_seed_permutation_test(pol, draws, n_resamples=243).exact
    assert not within_seed_permutation_test(pol, draws, n_resamples=242).exact


def test_sign_flip_seeds_needed_exactly_at_alpha():
    from evalkit.stats.randomisation import seeds_needed

    assert seeds_needed(0.0625, "greater") == 4          # 2^-4 = alpha exactly: reachable
    assert seeds_needed(0.0624, "greater") == 5
    assert seeds_needed(0.125, "two-sided") == 4
    assert seeds_needed(0.05, "two-sided") == 6


@pytest.mark.parametrize("atol, p_expected", [(0.15, 0.5), (0.05, 0.25)])
def test_permutation_tie_tolerance_is_on_the_mean_scale(atol, p_expected):
    # d = (+-1, +-0.1): T = 0.55; the null means are 0.55, 0.45, -0.45, -0.55.  The null 0.45
    # is 0.1 below T on the mean scale, so it counts as reaching T iff atol > 0.1.

    res = within_seed_permutation_test([0.0, 0.0], [[1.0], [0.1]], alternative="greater",
                                       confidence_level=None, atol=atol)
    assert res.p_value == pytest.approx(p_expected)


def test_sign_flip_monte_carlo_in_many_chunks(monkeypatch):
    # n = 20 > EXACT_CI_MAX_N: the p (B = 3999) and the CI (random sign patterns) are both
    # Monte Carlo; with a tiny chunk bound they are drawn in many chunks of 1000 rows
    from evalkit.stats import inversion, randomisation

    d = np.random.default_rng(5).normal(0.3, 1.0, size=20)
    exact = sign_flip_test(d, n_resamples=None)
    monkeypatch.setattr(randomisation, "_CHUNK", 20 * 1000 + 7)
    monkeypatch.setattr(inversion, "_CHUNK", 20 * 1000 + 7)
    b = 4000 - 1
    mc = sign_flip_test(d, n_resamples=b, rng=7)
    k = mc.p_value * (b + 1) - 1
    assert k == pytest.approx(round(k), abs=1e-6)                      # (k + 1) / (B + 1)
    p = exact.p_value
    assert abs(mc.p_value - p) < 4 * math.sqrt(p * (1 - p) / b) + 1e-3
    assert mc.ci_low < float(np.mean(d)) < mc.ci_high
    assert mc.ci_low == pytest.approx(exact.ci_low, abs=0.03)
    assert mc.ci_high == pytest.approx(exact.ci_high, abs=0.03)


def test_permutation_reachable_at_exactly_min_p():

    res = within_seed_permutation_test([0.0, 0.0, 0.0], [[1.0, 2.0], [1.5, 2.5], [3.0, 4.0]],
                                       confidence_level=None)
    assert res.reachable(res.min_p) is True
    assert res.reachable(res.min_p * (1 - 1e-9)) is False


def test_sign_flip_null_distribution_monte_carlo_values():
    # n = 20: 2^20 patterns > max_points, so the plotted null is drawn at random; every value
    # is the mean of d with some signs flipped, so it lies within mean(|d|) of zero
    d = np.random.default_rng(2).normal(0.2, 1.0, size=20)
    null = sign_flip_test(d).null_distribution(max_points=5000, seed=1)
    assert null.size == 5000 and np.all(np.diff(null) >= 0)
    assert np.abs(null).max() <= np.abs(d).mean() + 1e-12
    assert abs(null.mean()) < 4 * np.sqrt(np.mean(d ** 2) / d.size / 5000) + 1e-3


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_permutation_seeds_needed_rejects_alpha_at_the_bounds(alpha):
    from evalkit.errors import InputError
    from evalkit.stats.randomisation import seeds_needed

    with pytest.raises(InputError):
        seeds_needed(alpha=alpha, m=3)


def test_permutation_monte_carlo_ci_label_sets_are_identity_plus_random():
    from evalkit.stats import inversion as permutation

    sizes = np.array([6] * 12)                      # 6^12 label sets: Monte Carlo for the CI
    labels, exact = permutation._label_sets(sizes, np.random.default_rng(0),
                                            float(np.prod(sizes.astype(float))))
    assert exact is False and labels.shape == (permutation.CI_MC_SETS + 1, sizes.size)
    assert not labels[0].any()                      # the observed labelling, once
    assert labels.min() >= 0 and (labels < sizes).all()


def test_permutation_min_p_counts_a_value_exactly_at_the_tie_tolerance():
    # tol = 1e-9 x max(1, max |v|) = 1e-9: a value exactly tol below the maximum ties with it
    vals = np.array([1.0, 1.0 - 1e-9, 0.0])
    assert min_attainable_p([2], "greater", values=[vals]) == pytest.approx(2 / 3)
    assert min_attainable_p([2], "less", values=[-vals]) == pytest.approx(2 / 3)


def test_sign_flip_counts_with_zero_tolerance():
    res = sign_flip_test([0.5, 0.2, -0.1, 0.3, 0.0], atol=0.0)
    assert (res.n_positive, res.n_negative, res.n_zero, res.wins) == (3, 1, 1, 3)


def test_permutation_one_resample_is_the_smallest_allowed():
    from evalkit.errors import InputError

    args = ([0.0, 0.0, 0.0], [[1.0, 2.0], [1.5, 2.5], [3.0, 4.0]])
    res = within_seed_permutation_test(*args, n_resamples=1, rng=0, confidence_level=None)
    assert res.p_value in (0.5, 1.0)                               # (k + 1) / (1 + 1)
    for bad in (0, 0.5):
        with pytest.raises(InputError):
            within_seed_permutation_test(*args, n_resamples=bad, rng=0, confidence_level=None)


def test_sign_flip_two_sided_wins_follow_the_sign_of_a_small_mean():
    res = sign_flip_test([0.5, 0.2, -0.1, 0.3], alternative="two-sided")
    assert res.wins == 3
    assert sign_flip_test([-0.5, -0.2, 0.1, -0.3], alternative="two-sided").wins == 3


def test_sign_flip_monte_carlo_counts_exact_ties_with_zero_tolerance():
    # d = +-1: many sign patterns reach exactly the observed sum; with atol = 0 they count
    d = np.array([1.0] * 8 + [-1.0] * 4)
    exact = sign_flip_test(d, atol=0.0).p_value
    b = 4000 - 1
    mc = sign_flip_test(d, n_resamples=b, rng=3, atol=0.0).p_value
    assert abs(mc - exact) < 4 * math.sqrt(exact * (1 - exact) / b) + 1e-3


@pytest.mark.parametrize("level", [0.0, 1.0, 1.5])
def test_permutation_confidence_level_outside_zero_one_is_rejected(level):
    from evalkit.errors import InputError

    with pytest.raises(InputError):
        within_seed_permutation_test([0.0, 0.0], [[1.0], [2.0]], confidence_level=level)


@pytest.mark.parametrize("seed", range(2))
def test_sign_flip_monte_carlo_ci_inverts_the_exact_test(seed):
    # n = 20 > EXACT_CI_MAX_N: the CI comes from random sign patterns, the p-value stays
    # exact; the bounds must invert the exact test up to the patterns' Monte Carlo error
    from evalkit.stats.inversion import EXACT_CI_MAX_N

    rng = np.random.default_rng(70 + seed)
    d = rng.normal(0.4, 1.0, 20)
    assert d.size > EXACT_CI_MAX_N
    r = sign_flip_test(d, "two-sided", rng=3)
    assert r.exact and "Monte Carlo" in r.ci_method
    assert r.ci_low < d.mean() < r.ci_high
    w = 0.15 * d.std() / np.sqrt(d.size)
    assert sign_flip_test(d - (r.ci_low - w), "greater").p_value <= 0.025
    assert sign_flip_test(d - (r.ci_low + w), "greater").p_value > 0.025
    assert sign_flip_test(d - (r.ci_high + w), "less").p_value <= 0.025
    assert sign_flip_test(d - (r.ci_high - w), "less").p_value > 0.025


def test_permutation_seeds_needed_defaults_and_alternative_check():
    from evalkit.stats.randomisation import seeds_needed as perm_seeds_needed

    assert perm_seeds_needed(m=1) == 6                # two-sided alpha 0.05: 2 * 2^-6 < 0.05
    assert perm_seeds_needed(m=1, alternative="greater") == 5
    assert perm_seeds_needed(m=2) == 4                # 2 * 3^-4 = 0.0247
    with pytest.raises(InputError, match="alternative"):
        perm_seeds_needed(0.05, "bigger", m=1)


def _entry_points():
    from evalkit.stats.randomisation import seeds_needed as p_needed
    perm = within_seed_permutation_test
    from evalkit.stats.randomisation import seeds_needed as s_needed

    pol, draws = [0.1, 0.2, 0.3], [[0.2, 0.3], [0.25], [0.4, 0.1]]
    d = [0.1, -0.05, 0.2]
    return {
        "sign_flip_test": lambda **kw: sign_flip_test(d, **kw),
        "permutation_test": lambda **kw: perm(pol, draws, **kw),
        "sign_flip_min_p": lambda alternative="two-sided": sf_min_p(5, alternative),
        "permutation_min_p": lambda alternative="two-sided": min_attainable_p([1, 2],
                                                                              alternative),
        "sign_flip_seeds_needed": lambda alternative="two-sided": s_needed(0.05, alternative),
        "permutation_seeds_needed": lambda alternative="two-sided": p_needed(0.05, alternative,
                                                                             m=1),
    }


@pytest.mark.parametrize("name", ["sign_flip_test", "permutation_test", "sign_flip_min_p",
                                  "permutation_min_p", "sign_flip_seeds_needed",
                                  "permutation_seeds_needed"])
def test_every_entry_point_checks_the_alternative(name):
    call = _entry_points()[name]
    for alternative in ("two-sided", "greater", "less"):
        call(alternative=alternative)
    with pytest.raises(InputError, match="alternative"):
        call(alternative="larger")


@pytest.mark.parametrize("name", ["sign_flip_test", "permutation_test"])
def test_both_tests_check_resamples_and_level(name):
    call = _entry_points()[name]
    for bad in (0, -5, 2.5):
        with pytest.raises(InputError, match="n_resamples"):
            call(n_resamples=bad)
    for level in (0.0, 1.0, -0.5, 1.5):
        with pytest.raises(InputError, match="confidence_level"):
            call(confidence_level=level)
    assert call(n_resamples=np.inf).exact and not call(n_resamples=3).exact
    assert call(confidence_level=0.5).ci_low <= call(confidence_level=0.9).ci_high


def test_permutation_forced_mc_matches_exact_with_unequal_draws():
    # unequal draws per seed: each seed's random label must index its own block of values
    rng = np.random.default_rng(0)
    m = [1, 2, 3, 4, 1, 2, 3, 4]
    scale = np.full(len(m), 0.01)
    scale[3] = 1.0                                 # one seed's runs spread far more
    pol = rng.normal(0.0, scale)
    draws = [rng.normal(0.0, sc, k) + 0.02 for sc, k in zip(scale, m)]
    exact = within_seed_permutation_test(pol, draws, "two-sided", confidence_level=None)
    b = 4000                                      # below the 14,400 label sets: Monte Carlo
    mc = within_seed_permutation_test(pol, draws, "two-sided", n_resamples=b, rng=5,
                                      confidence_level=None)
    assert exact.exact and exact.null_size == 14_400 and not mc.exact
    assert 0.02 < exact.p_greater < 0.98          # a p-value the wrong blocks would move
    for f in ("p_greater", "p_less", "p_two_sided"):
        assert _within_mc_error(getattr(mc, f), getattr(exact, f), b=b), f


def test_sign_flip_mc_ci_uses_exactly_the_patterns_it_reports():
    from evalkit.stats.inversion import CI_MC_PATTERNS, _subset_means

    d = np.random.default_rng(1).normal(size=20)
    for n in (1, 7, CI_MC_PATTERNS):
        sums, sizes, _ = _subset_means(d, np.random.default_rng(2), n)
        assert sums.shape == sizes.shape == (n + 1,)               # + the identity pattern
        assert sums[0] == 0.0 and sizes[0] == 0
        assert np.all((sizes >= 0) & (sizes <= d.size))


def test_permutation_mc_counts_ties_on_both_sides():
    # V in {0, 1}: a third of all label sets tie the observed sum exactly; Monte Carlo must
    # count them in p_greater and in p_less, as the exact enumeration does
    rng = np.random.default_rng(1)
    pol = rng.integers(0, 2, 8).astype(float)
    draws = [rng.integers(0, 2, 2).astype(float) for _ in range(8)]
    g, l = _brute_force(pol, draws)
    assert l - g < 0.9 and min(g, l) > 0.3          # both tails hold many ties
    mc = within_seed_permutation_test(pol, draws, alternative="two-sided", n_resamples=4000,
                                      rng=2, confidence_level=None)
    assert not mc.exact
    assert _within_mc_error(mc.p_greater, g, b=4000) and _within_mc_error(mc.p_less, l, b=4000)


def test_sign_flip_min_p_is_capped_at_one():
    assert sf_min_p(0, "two-sided") == 1.0 and sf_min_p(1, "two-sided") == 1.0
    assert sf_min_p(0, "greater") == 1.0 and sf_min_p(2, "two-sided") == 0.5
    assert sf_min_p(3, "two-sided", n_resamples=1) == 1.0          # 2 / (1 + 1)
