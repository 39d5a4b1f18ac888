"""Within-seed permutation test, raw-mean statistic: exact against brute force, sign-flip at m = 1, Monte Carlo
within its error, nominal type-I error for skewed V where the sign-flip on averaged draws
over-rejects."""

from __future__ import annotations

import itertools
from functools import partial

import numpy as np
import pytest

from evalkit.errors import InputError
from evalkit.stats import sign_flip_test
from evalkit.stats.randomisation import min_attainable_p, seeds_needed
from evalkit.stats.randomisation import within_seed_permutation_test as _wspt

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
