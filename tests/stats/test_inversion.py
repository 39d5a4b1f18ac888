"""The inversion CIs of the sign-flip and permutation tests: order statistics of subset means
and label thresholds, exact and Monte Carlo."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from evalkit.stats import randomisation as sf

from tests.support.label_values import _label_value, _raw_perm


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
