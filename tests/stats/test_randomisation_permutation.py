"""Within-seed permutation test, raw-mean statistic: exact against brute force, sign-flip at m = 1, Monte Carlo
within its error, nominal type-I error for skewed V where the sign-flip on averaged draws
over-rejects.

The within-seed permutation test against brute force: every field, label values, min
attainable p, seeds needed, exact and Monte Carlo paths."""

from __future__ import annotations

import itertools
import math
from functools import partial

import numpy as np
import pytest

from evalkit.errors import InputError
from evalkit.stats import randomisation as pm, sign_flip_test
from evalkit.stats.randomisation import (min_attainable_p, seeds_needed,
                                         within_seed_permutation_test as _wspt)
from tests.support.label_values import _label_value, _raw_perm


# The raw-mean engine (statistic="mean"), kept beside the studentized default, which
# tests/stats/test_studentized.py checks against its own brute force.
within_seed_permutation_test = partial(_wspt, statistic="mean")


def brute(pol, draws):
    runs = [np.concatenate(([p], d)) for p, d in zip(pol, draws)]

    def stat(lab):
        return np.mean([(r.sum() - r[j]) / (r.size - 1) - r[j] for r, j in zip(runs, lab)])

    t = stat([0] * len(runs))
    null = np.array([stat(lab) for lab in itertools.product(*[range(r.size) for r in runs])])
    return np.mean(null >= t - 1e-12), np.mean(null <= t + 1e-12), null


@pytest.mark.parametrize("seed", range(4))
def test_exact_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    m = rng.integers(1, 5, size=5)
    pol = rng.lognormal(size=5)
    draws = [rng.lognormal(size=k) for k in m]
    res = within_seed_permutation_test(pol, draws, "two-sided")
    ge, le, null = brute(pol, draws)
    assert res.exact and res.null_size == null.size == int(np.prod(m + 1))
    assert res.p_greater == pytest.approx(ge, rel=1e-12)
    assert res.p_less == pytest.approx(le, rel=1e-12)
    assert res.p_two_sided == pytest.approx(min(1, 2 * min(ge, le)), rel=1e-12)
    assert res.ci_low <= res.statistic <= res.ci_high


def test_one_draw_per_seed_is_the_sign_flip_test():
    rng = np.random.default_rng(7)
    pol, dr = rng.lognormal(size=9), rng.lognormal(size=(9, 1))
    a = within_seed_permutation_test(pol, list(dr), "two-sided")
    b = sign_flip_test(dr[:, 0] - pol, "two-sided")
    for f in ("p_greater", "p_less", "p_two_sided", "ci_low", "ci_high", "min_p", "statistic"):
        assert getattr(a, f) == pytest.approx(getattr(b, f), rel=1e-12), f


def test_monte_carlo_within_error_of_exact_and_floor():
    rng = np.random.default_rng(3)
    pol = rng.lognormal(size=8)
    draws = [rng.lognormal(size=3) for _ in range(8)]
    exact = within_seed_permutation_test(pol, draws, "greater")
    b = 20_000
    mc = within_seed_permutation_test(pol, draws, "greater", n_resamples=b, rng=1)
    assert not mc.exact and mc.null_size == b
    se = np.sqrt(exact.p_value * (1 - exact.p_value) / b)
    assert abs(mc.p_value - exact.p_value) <= 4 * se + 1 / b
    # a policy better than every draw in every seed: MC floor (k + 1) / (B + 1)
    low = within_seed_permutation_test(np.zeros(30), [np.ones(5)] * 30, "greater",
                                       n_resamples=999, rng=0)
    assert low.p_value == pytest.approx(1 / 1000) and low.min_p == pytest.approx(1 / 1000)


def test_min_p_counts_ties_and_design():
    assert min_attainable_p([2, 2, 2], "greater") == pytest.approx(1 / 27)
    assert min_attainable_p([1] * 5, "two-sided") == pytest.approx(2 / 32)
    # a seed whose runs all have the same V cannot move the statistic: factor 1
    res = within_seed_permutation_test([0.1, 0.2, 0.3], [[0.2, 0.2], [0.3, 0.3], [0.3, 0.3]],
                                       "greater")
    assert res.min_p == pytest.approx(1 / 9) and res.design_min_p == pytest.approx(1 / 27)
    assert seeds_needed(0.05, "two-sided", m=1) == 6
    assert seeds_needed(0.05, "two-sided", m=5) == 3
    assert seeds_needed(0.05, "greater", m=2) == 3


def test_sign_flip_min_p_ignores_zero_differences():
    assert sign_flip_test([1, 1, 1, 1, 0, 0], "greater").min_p == pytest.approx(1 / 16)


def _null_rates(gen, m, n, reps, rng):
    perm = flip = 0
    for r in range(reps):
        v = gen(rng, n, m + 1)
        a = within_seed_permutation_test(v[:, 0], list(v[:, 1:]), "two-sided",
                                         n_resamples=499, rng=r, confidence_level=None)
        perm += a.p_value <= 0.05 and a.statistic > 0
        d = v[:, 1:].mean(axis=1) - v[:, 0]
        if np.any(d != 0):
            b = sign_flip_test(d, "two-sided", n_resamples=499 if n > 12 else None, rng=r)
            flip += b.p_value <= 0.05 and b.statistic > 0
    return perm / reps, flip / reps


def lognormal(rng, n, k):
    return rng.lognormal(0.0, 1.0, size=(n, k))


def binomial_gamma(rng, n, k):
    rate = rng.gamma(0.5, 0.04, size=(n, 1))           # seed-level rate near 0, skewed
    return rng.binomial(400, np.minimum(rate * rng.gamma(2.0, 0.5, size=(n, k)), 1)) / 400


@pytest.mark.slow
@pytest.mark.parametrize("gen", [lognormal, binomial_gamma])
@pytest.mark.parametrize("m", [1, 3, 5])
@pytest.mark.parametrize("n", [6, 10, 20])
def test_type_one_error_is_nominal_for_skewed_v(gen, m, n):
    """'Win' at two-sided alpha = 0.05 is p <= 0.05 and mean d > 0: nominal 0.025."""
    reps = 500
    perm, _ = _null_rates(gen, m, n, reps, np.random.default_rng([m, n, len(gen.__name__)]))
    se = np.sqrt(0.025 * 0.975 / reps)
    assert perm <= 0.025 + 3 * se


@pytest.mark.slow
def test_sign_flip_on_averaged_draws_over_rejects_where_permutation_does_not():
    perm, flip = _null_rates(lognormal, 5, 10, 800, np.random.default_rng(11))
    assert perm <= 0.025 + 3 * np.sqrt(0.025 * 0.975 / 800)
    assert flip > 0.05            # measured 0.084 with 1,000 replications


@pytest.mark.parametrize("seed", range(3))
def test_ci_inverts_the_brute_force_test_with_unequal_draws(seed):
    # unequal draws per seed: each seed's labels index its own block of the pooled values
    rng = np.random.default_rng(40 + seed)
    m = np.array([1, 2, 3, 1, 2, 3])
    pol = rng.lognormal(size=m.size)
    draws = [rng.lognormal(size=k) + 0.3 for k in m]
    res = within_seed_permutation_test(pol, draws, "two-sided", confidence_level=0.9)
    assert res.ci_low < res.statistic < res.ci_high
    eps = 1e-7
    # shifting the policy by delta tests T = delta: inside the interval not rejected at 5%
    # one-sided, outside it rejected (brute force over all 2*3*4*2*3*4 label sets)
    assert brute(pol + res.ci_low + eps, draws)[0] > 0.05
    assert brute(pol + res.ci_low - eps, draws)[0] <= 0.05
    assert brute(pol + res.ci_high - eps, draws)[1] > 0.05
    assert brute(pol + res.ci_high + eps, draws)[1] <= 0.05


def test_non_finite_policy_v_is_an_error():
    with pytest.raises(InputError, match="seed 1: non-finite violation rate"):
        within_seed_permutation_test([0.1, np.nan], [[0.2], [0.3, 0.1]])
    with pytest.raises(InputError, match="seed 0: non-finite violation rate"):
        within_seed_permutation_test([0.1, 0.2], [[np.inf], [0.3]])


def test_exact_enumeration_limit_is_the_balanced_meet_in_the_middle_split():
    from evalkit.stats.randomisation import MAX_EXACT_HALF, exact_enumerable

    assert MAX_EXACT_HALF == 2 ** 21
    # one draw per seed: 2 labels each, halves of 21 seeds fit exactly, 43 seeds do not
    assert exact_enumerable([1] * 42, "mean") and not exact_enumerable([1] * 43, "mean")
    # three draws per seed: 4 labels = 2 bits each, so 21 seeds (10 + 11 halves) do not
    assert exact_enumerable([3] * 20, "mean") and not exact_enumerable([3] * 21, "mean")
    # mixed: greedy largest-first balancing of log label counts
    assert exact_enumerable([3] * 10 + [1] * 21, "mean")
    assert not exact_enumerable([3] * 10 + [1] * 23, "mean")
    # studentized: the same split with one draw a seed (the sign-flip test), else every
    # label set in one enumeration of <= 2^22
    assert exact_enumerable([1] * 42) and not exact_enumerable([1] * 43)
    assert exact_enumerable([3] * 11) and not exact_enumerable([3] * 12)


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
