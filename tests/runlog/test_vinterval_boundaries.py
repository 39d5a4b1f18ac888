"""Boundaries of V intervals (``evalkit.runlog.vinterval``): block length, bursts, cluster
counts and the robust interval against its written-out formula."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from evalkit.runlog.vinterval import (BLOCKS, BURSTS, block_length, cluster_counts,
                                      robust_v_ci, robust_v_fit, uses_bursts,
                                      v_interval)

from tests.support.tiny_runs import _cp


def _robust_reference(n_b, v_b, kind, confidence=0.95):
    """Korn–Graubard effective-n Clopper–Pearson written out with scipy.stats and loops:
    bursts with the CR1 between-cluster variance; time blocks with the flat-top long-run
    variance at the autocorrelation bandwidth (smallest m after which 5 autocorrelations lie
    inside sqrt(log10 B / B)), clusters C = B / (1 + 2m)."""
    n_b, v_b = np.asarray(n_b, float), np.asarray(v_b, float)
    total, k, b = n_b.sum(), v_b.sum(), len(n_b)
    v = k / total
    a = 1 - confidence
    if k == 0 or k == total:
        n_eff = float(b) if kind == BURSTS else min(total, min(b, max(10, (b * 5.0) // 30)))
    elif b < 2:
        n_eff = total
    else:
        r = [vb - v * nb for nb, vb in zip(n_b, v_b)]
        gamma = [sum(r[t] * r[t + h] for t in range(b - h)) / b for h in range(b)]
        m = 0
        if kind == BLOCKS and gamma[0] > 0:
            band = math.sqrt(math.log10(max(b, 10)) / b)
            m = max(1, b // 4)
            for cand in range(max(1, b // 4)):
                lags = range(cand + 1, min(b, cand + 6))
                if all(abs(gamma[h] / gamma[0]) < band for h in lags):
                    m = cand
                    break
        lrv = gamma[0] + 2 * sum((1.0 if h <= m else 2 * (1 - h / (2 * m))) * gamma[h]
                                 for h in range(1, min(2 * m, b - 1) + 1))
        lrv = max(lrv, gamma[0])
        c = max(2.0, b / (1 + 2 * m))
        var = c / (c - 1) * b * lrv / total ** 2
        n_eff = total if var == 0 else min(total, v * (1 - v) / var)
        t_ratio = stats.t.ppf(1 - a / 2, total - 1) / stats.t.ppf(1 - a / 2, c - 1)
        n_eff = min(total, n_eff * t_ratio ** 2)
    low, high = _cp(v * n_eff, n_eff, confidence)
    return low, high, n_eff


def test_block_length_is_a_sixtieth_of_the_span_up_to_five_seconds():
    assert block_length(0.0, 1000.0) == 5.0
    assert block_length(0.0, 300.0) == 5.0
    assert block_length(0.0, 299.0) == pytest.approx(299.0 / 60)
    assert block_length(100.0, 150.0) == pytest.approx(50.0 / 60)
    assert block_length(3.0, 3.5) == pytest.approx(0.5 / 60)
    assert block_length(5.0, 5.0) == 0.0 and block_length(9.0, 2.0) == 0.0


@pytest.mark.parametrize("n,times,expected", [(10, 5, True), (10, 6, False), (11, 5, True),
                                              (9, 5, False), (2, 1, True), (1, 1, False)])
def test_bursts_when_at_most_half_as_many_arrival_times_as_requests(n, times, expected):
    assert uses_bursts(n, times) is expected


def test_cluster_counts_of_bursts():
    n_b, v_b, kind = cluster_counts([5.0, 1.0, 1.0, 5.0, 1.0, 7.0, 7.0, 7.0],
                                    [1, 0, 1, 1, 0, 0, 0, 0])
    assert kind == BURSTS
    assert n_b.tolist() == [3.0, 2.0, 3.0] and v_b.tolist() == [1.0, 2.0, 0.0]


def test_cluster_counts_of_time_blocks_start_at_the_first_arrival():
    """Arrivals 3, 3.5, ..., 303 (span 300 -> blocks of 5 s from t = 3); 33..42 left empty."""
    t = 3.0 + np.arange(601.0) / 2
    keep = (t < 33) | (t > 42)
    t = t[keep]
    viol = (t % 2 == 0)
    n_b, v_b, kind = cluster_counts(t, viol)
    assert kind == BLOCKS
    blocks = np.floor((t - 3.0) / 5.0)
    ref_n = [np.sum(blocks == b) for b in np.unique(blocks)]
    ref_v = [np.sum(viol[blocks == b]) for b in np.unique(blocks)]
    assert n_b.tolist() == ref_n == [10] * 6 + [1] + [10] * 52 + [1]
    assert v_b.tolist() == ref_v


def test_cluster_counts_of_a_short_run_use_short_blocks():
    t = np.linspace(0.0, 5.0, 121)         # span 5 s -> blocks of 5/60 s, two arrivals each
    n_b, _, kind = cluster_counts(t, np.zeros(121, dtype=bool))
    assert kind == BLOCKS and n_b.size == 61 and n_b.sum() == 121


def test_cluster_counts_of_one_and_no_request():
    n_b, v_b, kind = cluster_counts([4.0], [True])
    assert (n_b.tolist(), v_b.tolist(), kind) == ([1.0], [1.0], BLOCKS)
    n_b, v_b, kind = cluster_counts([], [])
    assert n_b.shape == (0,) and v_b.shape == (0,) and kind == BLOCKS


def test_robust_interval_without_requests_is_nan():
    for n_b, v_b in (([], []), ([0.0], [0.0])):
        assert all(math.isnan(x) for x in robust_v_ci(n_b, v_b))


def test_robust_interval_of_a_single_request_is_clopper_pearson_of_one():
    assert robust_v_ci([1.0], [1.0]) == pytest.approx((0.025, 1.0, 1.0))
    assert robust_v_ci([1.0], [0.0]) == pytest.approx((0.0, 0.975, 1.0))


def test_one_cluster_is_clopper_pearson_over_its_requests():
    for k in (1, 30, 99):
        low, high, n_eff = robust_v_ci([100.0], [float(k)], BLOCKS)
        assert n_eff == 100.0
        assert (low, high) == pytest.approx(_cp(k, 100), rel=1e-9)
        assert low < k / 100 < high


@pytest.mark.parametrize("kind,blocks,block_s,n_eff", [
    (BURSTS, 8, 5.0, 8.0),        # bursts count once each
    (BLOCKS, 8, 5.0, 8.0),        # 40 s: 10 clusters at least, but never more than 8 blocks
    (BLOCKS, 40, 5.0, 10.0),      # 200 s: 6 pieces of 30 s -> the floor of 10
    (BLOCKS, 120, 5.0, 20.0),     # 600 s: 20 pieces of 30 s
    (BLOCKS, 120, 2.5, 10.0),     # 300 s: 10 pieces
])
def test_no_or_all_violations_rest_on_clusters_not_requests(kind, blocks, block_s, n_eff):
    n_b = np.full(blocks, 20.0)
    low, high, got = robust_v_ci(n_b, np.zeros(blocks), kind, block_s=block_s)
    assert got == n_eff and low == 0.0 and high == pytest.approx(1 - 0.025 ** (1 / n_eff))
    low, high, got = robust_v_ci(n_b, n_b, kind, block_s=block_s)
    assert got == n_eff and high == 1.0 and low == pytest.approx(0.025 ** (1 / n_eff))


@pytest.mark.parametrize("n_b,v_b", [
    ([20, 20, 20, 20, 20, 20, 20, 20], [0, 0, 20, 0, 18, 1, 0, 0]),     # strongly clustered
    ([30, 12, 25, 40, 8, 19, 33], [3, 1, 9, 2, 0, 4, 6]),                 # mild, unequal sizes
    ([10, 10], [2, 8]),                                                   # two clusters
    ([50, 50, 50], [1, 0, 0]),                                            # a single violation
    ([10, 10, 10, 10], [5, 5, 5, 5]),                                     # zero variance
])
@pytest.mark.parametrize("confidence", [0.95, 0.8])
def test_robust_interval_matches_the_written_out_formula(n_b, v_b, confidence):
    got = robust_v_ci(np.asarray(n_b, float), np.asarray(v_b, float), BLOCKS, confidence)
    ref = _robust_reference(n_b, v_b, BLOCKS, confidence)
    assert got == pytest.approx(ref, rel=1e-9, abs=1e-12)
    total = float(np.sum(n_b))
    assert 0 < got[2] <= total and got[0] < sum(v_b) / total < got[1]


def test_clustered_violations_shrink_the_effective_sample():
    n_b, v_b = np.full(8, 20.0), np.array([0, 0, 20, 0, 18, 1, 0, 0], float)
    low, high, n_eff = robust_v_ci(n_b, v_b)
    assert n_eff < 16                      # 160 requests, about 8 clusters of information
    cp_low, cp_high = _cp(39, 160)
    assert low < cp_low and high > cp_high


def test_default_confidence_is_95_percent():
    n_b, v_b = [30.0, 12.0, 25.0, 40.0], [3.0, 1.0, 9.0, 2.0]
    assert robust_v_ci(n_b, v_b) == robust_v_ci(n_b, v_b, BLOCKS, 0.95)
    t = np.arange(200.0)
    viol = (t % 7) == 0
    assert v_interval(t, viol) == v_interval(t, viol, 0.95)
    n_b, v_b, kind = cluster_counts(t, viol)
    low, high, _ = robust_v_ci(n_b, v_b, kind, 0.95)
    clusters = robust_v_fit(n_b, v_b, kind, 0.95, block_length(0.0, 199.0))[3]
    assert v_interval(t, viol) == (low, high, clusters, kind)
    assert clusters < n_b.size                 # effective clusters, not the blocks counted
    narrow = v_interval(t, viol, 0.8)
    assert low < narrow[0] < narrow[1] < high
