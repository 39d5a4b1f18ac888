"""Run-log metrics against brute-force Python loops and scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from evalkit.errors import InputError
from evalkit.runlog import metrics as m


def random_run(rng, n=300, k=6, horizon=200.0, fail=0.1):
    arrival = np.sort(rng.uniform(10, horizon - 5, n))
    sent = arrival + rng.exponential(0.01, n)
    first = sent + rng.gamma(2, 0.2, n)
    end = first + rng.gamma(2, 1.0, n)
    ok = rng.random(n) > fail
    end = np.where(ok | (rng.random(n) < 0.3), end, np.nan)    # some failed have an end
    first = np.where(ok, first, np.nan)
    tokens = rng.integers(1, 50, n)
    gaps = rng.uniform(1, 40, k)
    starts = np.cumsum(gaps) + rng.uniform(0, 10)
    ends = starts + rng.uniform(0.5, 8, k)                     # may overlap each other
    return arrival, sent, first, end, ok, tokens, starts, ends


def brute_overlaps(lo, hi, ws, we):
    return np.array([any(s < b and e > a for s, e in zip(ws, we)) for a, b in zip(lo, hi)])


@pytest.mark.parametrize("seed", range(5))
def test_latencies_and_flags_match_loops(seed):
    rng = np.random.default_rng(seed)
    arrival, sent, first, end, ok, tokens, *_ = random_run(rng)
    slo = {"e2e_s": 4.0, "ttft_s": 0.5, "tpot_s": 0.1}
    flags = m.slo_flags(arrival, first, end, tokens, ok, slo)
    for i in range(len(arrival)):
        done = ok[i] and not math.isnan(end[i])
        e2e = end[i] - arrival[i] if done else math.inf
        ttft = first[i] - arrival[i] if ok[i] and not math.isnan(first[i]) else math.inf
        if not done or math.isnan(first[i]):
            tpot = math.inf
        else:
            tpot = (end[i] - first[i]) / (tokens[i] - 1) if tokens[i] > 1 else 0.0
        assert flags.e2e[i] == (e2e > 4.0)
        assert flags.ttft[i] == (ttft > 0.5)
        assert flags.tpot[i] == (tpot > 0.1)
        assert flags.good[i] == (done and e2e <= 4.0 and ttft <= 0.5 and tpot <= 0.1)


def test_unset_slos_are_none_and_failed_never_good():
    flags = m.slo_flags([0, 0], [0.1, np.nan], [1.0, np.nan], [5, 5], [True, False],
                        {"e2e_s": 2.0, "ttft_s": None, "tpot_s": None})
    assert flags.ttft is None and flags.tpot is None
    assert flags.e2e.tolist() == [False, True]
    assert flags.good.tolist() == [True, False]


def test_quantile_matches_numpy_and_handles_inf():
    rng = np.random.default_rng(1)
    x = rng.normal(size=101)
    for q in (0.0, 0.5, 0.95, 0.99, 1.0):
        assert m.quantile(x, q) == pytest.approx(np.quantile(x, q))
    with_fail = np.append(np.arange(19.0), np.inf)          # 1 of 20 failed
    assert m.quantile(with_fail, 0.5) == pytest.approx(9.5)
    assert m.quantile(with_fail, 0.99) == math.inf
    assert m.quantile(with_fail, 18 / 19) == 18.0            # lands exactly on the last finite
    assert math.isnan(m.quantile([], 0.5))


@pytest.mark.parametrize("seed", range(5))
def test_exposure_matches_loops(seed):
    rng = np.random.default_rng(100 + seed)
    arrival, sent, first, end, ok, tokens, starts, ends = random_run(rng)
    horizon = 200.0
    lo, hi = m.request_intervals(arrival, sent, end, ok, horizon)
    for i in range(len(arrival)):
        done = ok[i] and not math.isnan(end[i])
        exp_lo = arrival[i] if done else sent[i]
        exp_hi = end[i] if not math.isnan(end[i]) else horizon
        assert (lo[i], hi[i]) == (exp_lo, exp_hi)
    brute = brute_overlaps(lo, hi, starts, ends)
    assert np.array_equal(m.overlaps_windows(lo, hi, starts, ends), brute)
    assert m.request_exposure(arrival, sent, end, ok, starts, ends, horizon) == pytest.approx(
        brute.mean())
    # time exposure: fine grid over the span
    span = m.observed_span(arrival, end, horizon, 8.0)
    grid = np.linspace(span.start_s, span.end_s, 200_001)[:-1] + (span.end_s - span.start_s) / 400_000
    covered = np.zeros(grid.size, dtype=bool)
    for s, e in zip(starts, ends):
        covered |= (grid >= s) & (grid < e)
    assert m.time_exposure(starts, ends, span) == pytest.approx(covered.mean(), abs=1e-4)


def test_union_windows_matches_loop():
    rng = np.random.default_rng(7)
    s = rng.uniform(0, 100, 40)
    e = s + rng.uniform(0, 10, 40)
    us, ue = m.union_windows(s, e)
    blocks = []
    for a, b in sorted(zip(s, e)):
        if blocks and a <= blocks[-1][1]:
            blocks[-1][1] = max(blocks[-1][1], b)
        else:
            blocks.append([a, b])
    assert np.allclose(np.c_[us, ue], np.array(blocks))


def test_observed_span_and_windows():
    arrival = np.array([20.0, 30.0, 250.0])
    end = np.array([25.0, np.nan, 255.0])     # a failed request runs until the horizon
    span = m.observed_span(arrival, end, 300.0, 8.0)
    assert tuple(span) == (20.0, 300.0)
    assert span.last_start_s == 292.0 and span.starts() == (20.0, 292.0)
    span = m.observed_span(arrival, np.array([25.0, 40.0, 255.0]), 300.0, 8.0)
    lo, hi = span
    assert (lo, hi) == (20.0, 255.0)
    starts = np.array([5.0, 20.0, 100.0, 250.0])     # before requests / inside / inside / beyond
    ends = starts + 8.0
    assert m.windows_observed(starts, ends, span) == 2
    brute = sum(1 for s, e in zip(starts, ends) if s >= lo and e <= hi)
    assert m.windows_observed(starts, ends, span) == brute


@pytest.mark.parametrize("k,n", [(0, 10), (1, 10), (5, 10), (10, 10), (37, 223), (0, 1), (1, 1)])
def test_clopper_pearson_matches_scipy(k, n):
    low, high = m.clopper_pearson(k, n)
    ref = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    assert low == pytest.approx(ref.low, abs=1e-10)
    assert high == pytest.approx(ref.high, abs=1e-10)


def test_clopper_pearson_vectorised_and_rejects_empty():
    low, high = m.clopper_pearson(np.array([0, 3]), np.array([5, 9]), confidence=0.9)
    ref = stats.binomtest(3, 9).proportion_ci(confidence_level=0.9, method="exact")
    assert high[1] == pytest.approx(ref.high) and low[0] == 0.0
    with pytest.raises(InputError):
        m.clopper_pearson(0, 0)


def test_step_rate_excludes_merge_time():
    rng = np.random.default_rng(11)
    starts = np.sort(rng.uniform(0, 90, 4))
    ends = starts + 3.0
    grid = np.linspace(0, 100, 1_000_001)[:-1] + 5e-5
    paused = np.zeros(grid.size, dtype=bool)
    for s, e in zip(starts, ends):
        paused |= (grid >= s) & (grid < e)
    free = 100 * (1 - paused.mean())
    assert m.step_rate(50, 0.0, 100.0, starts, ends) == pytest.approx(50 / free, rel=1e-4)
    assert m.step_rate(50, 0.0, 100.0, [], []) == 0.5
    assert math.isnan(m.step_rate(0, 0.0, 100.0, [], []))


@pytest.mark.parametrize("case", ["sorted_ties", "sorted_int", "unsorted", "nan", "one",
                                  "empty", "signed_zero"])
def test_unique_inverse_equals_np_unique(case):
    """The no-sort path for arrival-ordered logs gives np.unique's arrays exactly."""
    rng = np.random.default_rng(3)
    values = {"sorted_ties": np.sort(np.round(rng.uniform(0, 50, 2000), 1)),
              "sorted_int": np.sort(rng.integers(0, 40, 500)),
              "unsorted": np.round(rng.uniform(0, 50, 2000), 1),
              "nan": np.r_[np.sort(rng.uniform(0, 5, 20)), np.nan, 7.0],
              "one": np.array([4.0]), "empty": np.zeros(0),
              "signed_zero": np.array([-0.0, 0.0, 0.0, 1.0])}[case]
    got_u, got_inv = m.unique_inverse(values)
    want_u, want_inv = np.unique(values, return_inverse=True)
    assert np.array_equal(got_u, want_u, equal_nan=True)
    assert np.array_equal(got_inv, want_inv) and got_inv.dtype == want_inv.dtype
    assert m.is_sorted(values) == (case not in ("unsorted", "nan"))
