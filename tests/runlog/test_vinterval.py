"""Cluster-robust interval on V: bursts of identical arrivals, time blocks, in summarize.

Boundaries of V intervals (``evalkit.runlog.vinterval``): block length, bursts, cluster
counts and the robust interval against its written-out formula.

The V interval's fast paths (segmentation by levels, clusters from runs of time-ordered
arrivals) give the numbers of the plain computations they replace, on data built to hit
their edges: ties, zeros, NaN, unsorted input."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import special, stats

from evalkit.runlog import vinterval
from evalkit.runlog.io import write_run
from evalkit.runlog.metrics import clopper_pearson
from evalkit.runlog.summary import summarize_runs
from evalkit.runlog.vinterval import (_binomial_ll, block_length, BLOCKS, BURSTS, cluster_counts,
                                      robust_v_ci, robust_v_fit, SEGMENT_PENALTY, segments,
                                      uses_bursts, v_interval)
from tests.support.tiny_runs import _cp


SLO = 5.0


def _meta(run_id: str) -> dict:
    return {"run_id": run_id, "policy": "fixed_h", "role": "policy", "seed": 0, "draw": None,
            "matched_to": None, "regime": "r", "trace": {"name": "t", "sha256": "x"},
            "backend": "sim", "slo": {"e2e_s": SLO, "ttft_s": None, "tpot_s": None},
            "merge_duration_s": 8.0, "horizon_s": 400.0,
            "corridor": {"min_gap_s": 20.0, "max_gap_s": 80.0}, "oracle": False,
            "settings": {"requested": {}, "effective": {}}, "rng_seeds": {},
            "created_at": "2026-01-01T00:00:00+00:00", "evalkit_version": "test",
            "host": {"hostname": "h", "platform": "p", "python": "3.11"}}


def _requests(arrival, latency) -> pd.DataFrame:
    arrival = np.asarray(arrival, dtype=float)
    n = arrival.size
    end = arrival + np.asarray(latency, dtype=float)
    return pd.DataFrame({
        "request_id": np.arange(n, dtype=np.int64), "arrival_s": arrival, "sent_s": arrival,
        "first_token_s": arrival + 0.1, "end_s": end,
        "prompt_tokens": np.full(n, 100, dtype=np.int64),
        "output_tokens": np.full(n, 50, dtype=np.int64), "ok": np.ones(n, dtype=bool),
        "error": [None] * n})


def _merges() -> pd.DataFrame:
    return pd.DataFrame({"merge_idx": np.arange(2, dtype=np.int64), "start_s": [50.0, 150.0],
                         "end_s": [58.0, 158.0], "inner_step": np.array([1, 2], dtype=np.int64),
                         "bytes": np.array([1, 1], dtype=np.int64)})


def _batched_run(violating_batches) -> tuple[np.ndarray, np.ndarray]:
    """20 closed-loop batches of 16 identical requests; a batch violates as a whole."""
    arrival = np.repeat(np.arange(20) * 15.0 + 1.0, 16)
    latency = np.where(np.isin(np.repeat(np.arange(20), 16), violating_batches), 7.0, 1.0)
    return arrival, latency


def test_twenty_batches_of_sixteen_identical_requests(tmp_path):
    """Clopper–Pearson reads 320 independent requests; the effective sample is 20 batches."""
    arrival, latency = _batched_run([2, 5, 11, 17])          # V = 0.2
    write_run(tmp_path, _meta("batched"), _requests(arrival, latency), _merges())
    row = summarize_runs(tmp_path).iloc[0]
    assert row.violation_rate == pytest.approx(0.2) and row.v_ci_clusters == 20
    assert (row.v_cp_low, row.v_cp_high) == pytest.approx(clopper_pearson(64, 320))
    robust = row.v_ci_high - row.v_ci_low
    cp = row.v_cp_high - row.v_cp_low
    assert robust > 3.5 * cp                         # ~4x too narrow before
    # close to Clopper–Pearson over the 20 batches (4 of 20 violated)
    lo20, hi20 = clopper_pearson(4, 20)
    assert row.v_ci_low == pytest.approx(lo20, abs=0.02)
    assert row.v_ci_high == pytest.approx(hi20, abs=0.03)
    assert row.v_ci_low <= row.violation_rate <= row.v_ci_high


def test_no_violation_in_batches_counts_each_batch_once():
    arrival, latency = _batched_run([])
    low, high, clusters, kind = v_interval(arrival, latency > SLO)
    assert kind == BURSTS and clusters == 20 and low == 0.0
    assert high == pytest.approx(clopper_pearson(0, 20)[1])
    # time blocks without violations say nothing about clustering: the rule of three on
    # 30 s clusters (at least 10), not on 320 requests read as independent
    t = np.linspace(0, 300, 320)
    low, high, _, kind = v_interval(t, np.zeros(320, dtype=bool))
    assert kind == BLOCKS and high == pytest.approx(clopper_pearson(0, 10)[1])
    t = np.linspace(0, 600, 3000)
    assert v_interval(t, np.zeros(3000, dtype=bool))[1] == pytest.approx(
        clopper_pearson(0, 20)[1])


def test_variance_matches_a_brute_force_block_bootstrap():
    """The closed-form between-cluster variance is the block bootstrap's (independent ref)."""
    rng = np.random.default_rng(3)
    t = np.sort(rng.uniform(0, 600, 1500))
    v = rng.random(t.size) < np.where((t % 100) < 15, 0.7, 0.05)
    n_b, v_b, kind = cluster_counts(t, v)
    assert kind == BLOCKS and n_b.size >= 20
    total, vbar = n_b.sum(), v_b.sum() / n_b.sum()
    b = n_b.size
    closed = b / (b - 1) * np.sum((v_b - vbar * n_b) ** 2) / total ** 2
    picks = rng.integers(0, b, size=(20000, b))
    boot = v_b[picks].sum(1) / n_b[picks].sum(1)
    assert np.var(boot) * b / (b - 1) == pytest.approx(closed, rel=0.08)
    low, high, n_eff = robust_v_ci(n_b, v_b, kind)
    assert n_eff < total and low < vbar < high


def _episode_run(rng, horizon=600.0, length=15.0, n_episodes=5, p_in=0.9, p_out=0.02):
    n = rng.poisson(2.0 * horizon)
    t = np.sort(rng.uniform(0, horizon, n))
    hit = np.zeros(n, dtype=bool)
    for start in rng.uniform(0, horizon - length, rng.poisson(n_episodes)):
        hit |= (t >= start) & (t < start + length)
    return t, rng.random(n) < np.where(hit, p_in, p_out)


def _episode_truth(horizon=600.0, length=15.0, n_episodes=5, p_in=0.9, p_out=0.02):
    grid = np.linspace(0, horizon, 200_001)
    lo = np.clip(grid - length, 0, horizon - length)
    hi = np.clip(grid, 0, horizon - length)
    covered = 1 - np.exp(-n_episodes * (hi - lo) / (horizon - length))
    return float(np.mean(p_out + (p_in - p_out) * covered))


def test_coverage_with_clustered_violations():
    """Violations in Poisson episodes of 15 s: the robust CI covers E[V] >= 0.9 of the time,
    Clopper–Pearson far less."""
    truth = _episode_truth()
    rng = np.random.default_rng(11)
    robust = cp = 0
    reps = 400
    for _ in range(reps):
        t, v = _episode_run(rng)
        low, high, _, _ = v_interval(t, v)
        robust += low <= truth <= high
        a, b = clopper_pearson(int(v.sum()), v.size)
        cp += a <= truth <= b
    assert robust / reps >= 0.9
    assert cp / reps < 0.6


def test_coverage_with_batches():
    """Closed-loop batches (all-or-nothing per batch, p = 0.3): robust coverage >= 0.9."""
    rng = np.random.default_rng(12)
    hits = 0
    for _ in range(400):
        viol = np.repeat(rng.random(20) < 0.3, 16)
        low, high, _, _ = v_interval(np.repeat(np.arange(20) * 15.0, 16), viol)
        hits += low <= 0.3 <= high
    assert hits / 400 >= 0.9


def test_summary_gives_the_robust_interval(tmp_path):
    arrival, latency = _batched_run([0, 1, 2, 9])
    write_run(tmp_path, _meta("batched"), _requests(arrival, latency), _merges())
    rng = np.random.default_rng(4)
    t, v = _episode_run(rng, horizon=380.0)
    write_run(tmp_path, _meta("episodes"), _requests(t, np.where(v, 6.0, 1.0)), _merges())
    write_run(tmp_path, _meta("short"), _requests([3.0, 3.5, 4.0], [1.0, 6.0, 1.0]), _merges())
    cols = ["run_id", "v_ci_low", "v_ci_high", "v_cp_low", "v_cp_high", "v_ci_clusters"]
    ref = summarize_runs(tmp_path)[cols]
    by_id = ref.set_index("run_id")
    assert by_id.loc["batched", "v_ci_clusters"] == 20
    # time blocks: the effective number of clusters, fewer than the 60 blocks counted
    assert 2 <= by_id.loc["episodes", "v_ci_clusters"] < cluster_counts(t, v)[0].size
    assert (by_id.v_ci_low <= by_id.v_cp_low + 1e-12).all()


def test_segment_likelihood_is_the_binomial_log_likelihood_at_the_mle():
    # every corner: no requests, none or all violating, one violating or one not
    n = np.array([0, 1, 1, 2, 4, 4, 4, 7, 100], dtype=float)
    k = np.array([0, 0, 1, 1, 1, 3, 4, 0, 37], dtype=float)
    got = vinterval._binomial_ll(k, n)
    p = np.divide(k, n, out=np.zeros_like(n), where=n > 0)
    want = stats.binom.logpmf(k, n, p) - np.log(special.comb(n, k))
    assert np.allclose(got, want, rtol=1e-12, atol=1e-12)
    assert got[5] == pytest.approx(3 * np.log(0.75) + np.log(0.25))


@pytest.mark.parametrize("arrival", [[np.nan, 1.0, 2.0], [0.0, 1.0, np.nan],
                                     [np.nan, 1.0, np.nan]])
def test_the_time_ordered_shortcut_declines_a_nan_arrival_at_either_end(arrival):
    assert vinterval._sorted_cluster_counts(np.array(arrival), np.zeros(3, bool)) is None
    assert vinterval._sorted_cluster_counts(np.array([0.0, 1.0, 2.0]),
                                            np.zeros(3, bool)) is not None


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


def loop_segments(n_b, v_b):
    """Binary segmentation range by range, as first written."""
    n_b, v_b = np.asarray(n_b, float), np.asarray(v_b, float)
    threshold = SEGMENT_PENALTY * math.log(max(n_b.size, 2))
    out, todo = [], [(0, n_b.size)]
    while todo:
        a, z = todo.pop()
        if z - a >= 2:
            cn, cv = np.cumsum(n_b[a:z]), np.cumsum(v_b[a:z])
            lr = 2.0 * (_binomial_ll(cv[:-1], cn[:-1])
                        + _binomial_ll(cv[-1] - cv[:-1], cn[-1] - cn[:-1])
                        - float(_binomial_ll(np.array(cv[-1]), np.array(cn[-1]))))
            best = int(np.argmax(lr))
            if lr[best] > threshold:
                todo += [(a, a + best + 1), (a + best + 1, z)]
                continue
        out.append((a, z))
    return sorted(out)


def unique_cluster_counts(arrival, violated):
    """Clusters through ``np.unique`` and ``bincount``."""
    arrival = np.asarray(arrival, float)
    times, inverse = np.unique(arrival, return_inverse=True)
    if uses_bursts(arrival.size, times.size):
        key, kind = inverse, BURSTS
    else:
        length = block_length(times[0], times[-1])
        key = np.floor((arrival - times[0]) / length).astype(np.int64) if length > 0 \
            else np.zeros(arrival.size, dtype=np.int64)
        key, kind = np.unique(key, return_inverse=True)[1], BLOCKS
    return (np.bincount(key).astype(float),
            np.bincount(key, weights=np.asarray(violated, float)), kind)


@pytest.mark.parametrize("seed", range(40))
def test_segmentation_by_levels_cuts_where_the_range_loop_cuts(seed):
    rng = np.random.default_rng(seed)
    blocks = int(rng.integers(0, 250))
    n_b = rng.integers(0, 400, blocks).astype(float)
    episode = (np.arange(blocks) % int(rng.integers(4, 50))) < int(rng.integers(1, 12))
    v_b = rng.binomial(n_b.astype(int), np.where(episode, 0.4, 0.03)).astype(float)
    assert segments(n_b, v_b) == loop_segments(n_b, v_b)


def test_segmentation_of_fractional_counts_keeps_the_range_loop():
    n_b = np.array([100.0, 100.0, 100.0])
    v_b = np.array([10.0, 30.5, 10.25])
    assert segments(n_b, v_b) == loop_segments(n_b, v_b)


def test_only_whole_non_negative_counts_with_exact_sums_take_the_level_pass():
    whole = vinterval._whole_counts
    ones = np.ones(3)
    assert whole(np.array([100.0, 0.0, 7.0]), np.array([10.0, 0.0, 7.0]))
    for n_b, v_b in ((np.array([100.0, 100.5, 1.0]), ones), (ones, np.array([1.0, 0.25, 0.0])),
                     (np.array([3.0, -1.0, 2.0]), ones), (ones, np.array([1.0, -1.0, 0.0])),
                     (np.array([2.0 ** 53, 1.0, 1.0]), ones), (ones, np.array([np.nan, 1, 1]))):
        assert not whole(n_b, v_b), (n_b, v_b)


@pytest.mark.parametrize("seed", range(30))
def test_clusters_of_time_ordered_arrivals_are_those_of_np_unique(seed):
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(2, 4000))
    t = np.sort(rng.uniform(0, rng.uniform(0.5, 900), n))
    if seed % 3 == 0:
        t = np.round(t, seed % 4)                  # bursts of identical arrivals
    violated = rng.random(n) < rng.random()
    got, want = cluster_counts(t, violated), unique_cluster_counts(t, violated)
    assert got[2] == want[2]
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_clusters_of_unsorted_or_nan_arrivals_take_the_general_path():
    t = np.array([5.0, 1.0, 1.0, 5.0, 1.0, 7.0, 7.0, 7.0])
    v = np.array([1, 0, 1, 0, 0, 1, 1, 0], dtype=bool)
    got, want = cluster_counts(t, v), unique_cluster_counts(t, v)
    assert got[2] == want[2] and np.array_equal(got[0], want[0])
    assert np.array_equal(got[1], want[1])
    n_b, v_b, _ = cluster_counts(np.array([1.0, 2.0, np.nan]), np.array([1, 0, 1], bool))
    assert n_b.sum() == 3 and v_b.sum() == 2


def test_long_run_variance_caps_the_bandwidth_at_a_whole_quarter_of_the_blocks():
    # 10 blocks: the cap is 10 // 4 = 2 lags (not 2.5), so big M = 4 and the weights of
    # lags 1..4 are 1, 1, 0.5, 0 -- checked against the autocovariances computed directly
    r = np.array([2.0, 1.8, 1.5, 1.2, 0.5, -0.5, -1.2, -1.5, -1.8, -2.0])
    gamma = np.array([np.dot(r[:r.size - j], r[j:]) / r.size for j in range(r.size)])
    lrv, clusters = vinterval._long_run(r, floor=100)
    expected = gamma[0] + 2.0 * np.dot([1.0, 1.0, 0.5, 0.0], gamma[1:5])
    assert expected > gamma[0]
    assert lrv == pytest.approx(expected, rel=1e-12)
    assert clusters == 2.0


@pytest.mark.parametrize("n_b, v_b", [([10, 10, 10, 10], [0, 0, 5, 5, 5]),
                                      ([10, 10, 10, 10, 10], [0, 0, 5, 5]),
                                      ([[10, 10], [10, 10]], [[0, 0], [5, 5]])])
def test_segments_refuses_counts_that_are_not_one_pair_per_block(n_b, v_b):
    with pytest.raises(ValueError, match="one request count and one violation count per block"):
        segments(n_b, v_b)
