"""The weighted quantile of the block bootstrap against numpy, also with a failed request at
the top."""

from __future__ import annotations

import numpy as np
import pytest

from evalkit.stats.block_bootstrap import lag1_of_block_means
from evalkit.stats.block_bootstrap import weighted_quantile


def testweighted_quantile_matches_numpy_at_several_levels():
    rng = np.random.default_rng(11)
    v = np.sort(rng.lognormal(size=12))
    w = rng.integers(0, 3, size=(40, 12))
    w[0] = 0
    w[1] = 0
    w[1, -1] = 1                                  # all weight on the largest value
    w[2] = 0
    w[2, 0] = 1                                   # all weight on the smallest value
    for q in (0.95, 0.5, 1 / 3, 0.05):
        got = weighted_quantile(v, w, q)
        assert np.isnan(got[0])                   # a row with no weight
        for row, g in zip(w[1:], got[1:]):
            assert g == pytest.approx(np.quantile(np.repeat(v, row), q), rel=1e-13)


def testweighted_quantile_with_a_failed_request_at_the_top():
    v = np.array([1.0, 2.0, np.inf])
    one = np.ones((1, 3))
    # (n - 1) q = 1 exactly: the order statistic 2, not interpolated towards +inf
    assert weighted_quantile(v, one, 0.5)[0] == 2.0
    assert np.isinf(weighted_quantile(v, one, 0.75)[0])       # between 2 and +inf
    assert weighted_quantile(v, one, 0.25)[0] == 1.5
    both_inf = weighted_quantile(np.array([1.0, np.inf, np.inf]), one, 0.75)
    assert np.isinf(both_inf[0])
    assert weighted_quantile(np.array([3.0]), np.array([[2]]), 0.95)[0] == 3.0


def test_lag1_of_block_means_against_a_direct_computation():
    # blocks of one, two and three values (one empty) over two runs; pairs only within a run
    block = np.array([0, 1, 1, 2, 2, 2, 4, 5, 5, 6])
    run_of_block = np.array([0, 0, 0, 0, 1, 1, 1])
    x = np.array([1.0, 2.0, 4.0, 0.5, 1.5, 7.0, 3.0, 2.0, 6.0, 5.0])
    means = {b: x[block == b].mean() for b in np.unique(block)}
    mu = np.mean(list(means.values()))
    dev = {b: m - mu for b, m in means.items()}
    pairs = [(b, b + 1) for b in range(6)
             if b in means and b + 1 in means and run_of_block[b] == run_of_block[b + 1]]
    want = (sum(dev[a] * dev[b] for a, b in pairs) / sum(d * d for d in dev.values())
            * len(means) / len(pairs))
    got, n_pairs = lag1_of_block_means(block, run_of_block, x)
    assert n_pairs == len(pairs) == 4 and got == pytest.approx(want, rel=1e-12)
