"""Run-log metrics against brute-force Python loops and scipy.

Boundary values of the run metrics: exactly at the SLO, zero-token and failed requests,
exposure clipped to the span, quantiles, step rate, Clopper-Pearson.

Run metrics at their edges: TTFT/TPOT and violations, SLO flags and goodput, quantiles, step
rate, exposure and windows, Clopper-Pearson against scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from evalkit.errors import InputError
from evalkit.runlog import metrics, metrics as m, metrics as mt


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


def test_the_sample_bracket_finds_the_order_statistics_or_gives_up():
    """A strided sample's bracket around a quantile holds its order statistics (what the
    fast path of :func:`quantile` partitions); a bracket that would keep every value is
    refused."""
    v = np.random.default_rng(3).lognormal(0.0, 1.0, 200_000)
    sample = np.sort(v[::100])
    n = v.size
    lo = int(np.floor((n - 1) * 0.95))
    want = tuple(np.sort(v)[[lo, lo + 1]])
    assert m._bracketed_pair(v, sample, lo, lo + 1, sample.size) == want
    # a quantile so central for so small a sample that the margin covers [0, 1]
    assert m._bracketed_pair(v, sample[:3], n // 2, n // 2 + 1, 3) is None


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


# --------------------------------------------------------------------------------- metrics

def test_exactly_at_slo_is_not_a_violation():
    slo = 2.0
    lat = np.array([np.nextafter(slo, 0), slo, np.nextafter(slo, 9), np.inf])
    assert metrics.violations(lat, slo).tolist() == [False, False, True, True]


def test_slo_flags_at_each_slo_boundary():
    arrival = np.zeros(4)
    first = np.array([1.0, 1.0, 1.0 + 1e-9, 0.5])
    end = np.array([5.0, 5.0 + 1e-9, 3.0, 0.5 + 0.2 * 2])       # last: 3 tokens at 0.2 s
    tokens = np.array([5, 5, 5, 3])
    ok = np.ones(4, bool)
    flags = metrics.slo_flags(arrival, first, end, tokens, ok,
                              {"e2e_s": 5.0, "ttft_s": 1.0, "tpot_s": 1.0})
    assert flags.e2e.tolist() == [False, True, False, False]
    assert flags.ttft.tolist() == [False, False, True, False]
    assert flags.good.tolist() == [True, False, False, True]
    exact = metrics.slo_flags(arrival, first, end, tokens, ok,
                              {"e2e_s": 5.0, "ttft_s": None, "tpot_s": 0.2})
    assert exact.tpot[3] == False  # noqa: E712 - exactly at the TPOT SLO
    assert exact.ttft is None


def test_tpot_zero_and_one_token_requests_cannot_violate():
    tp = metrics.tpot([1.0, 1.0, 1.0], [9.0, 9.0, 9.0], [0, 1, 2], [True, True, True])
    assert tp.tolist() == [0.0, 0.0, 8.0]


def test_failed_request_is_always_a_violation():
    flags = metrics.slo_flags([0.0], [0.1], [0.2], [3], [False],
                              {"e2e_s": 5.0, "ttft_s": None, "tpot_s": None})
    assert flags.good.tolist() == [False] and flags.e2e.tolist() == [True]


def test_time_exposure_is_clipped_to_the_span():
    span = (10.0, 20.0)
    # window [5, 12] covers 2 s of the span, [18, 30] covers 2 s: 4 / 10
    assert metrics.time_exposure([5.0, 18.0], [12.0, 30.0], span) == pytest.approx(0.4)
    # a window entirely outside the span adds nothing
    assert metrics.time_exposure([0.0, 25.0], [5.0, 30.0], span) == 0.0
    # touching the span edge adds nothing; covering all of it gives exactly 1
    assert metrics.time_exposure([20.0], [25.0], span) == 0.0
    assert metrics.time_exposure([0.0], [40.0], span) == 1.0
    assert np.isnan(metrics.time_exposure([0.0], [1.0], (5.0, 5.0)))


def test_observed_windows_boundaries():
    span = metrics.Span(10.0, 50.0, 8.0)
    starts = np.array([10.0, 42.0, 9.999, 42.001])
    ends = starts + 8.0
    assert metrics.observed_windows(starts, ends, span).tolist() == [True, True, False, False]
    assert metrics.windows_observed(starts, ends, span) == 2


def test_observed_span_clipped_to_horizon_and_failed_requests_run_to_it():
    span = metrics.observed_span([5.0, 6.0], [7.0, np.nan], 100.0, 8.0)
    assert (span.start_s, span.end_s) == (5.0, 100.0)
    span = metrics.observed_span([5.0, 6.0], [7.0, 130.0], 100.0, 8.0)
    assert span.end_s == 100.0
    span = metrics.observed_span([5.0, 6.0], [7.0, 9.0], 100.0, 8.0)
    assert span.end_s == 9.0


def test_request_overlap_touching_window_edge_is_not_exposure():
    # request [0, 10] and window [10, 18]: no positive overlap; [0, 10.001] overlaps
    assert metrics.overlaps_windows([0.0, 0.0], [10.0, 10.001], [10.0], [18.0]).tolist() == [
        False, True]
    assert metrics.overlaps_windows([18.0, 17.999], [20.0, 20.0], [10.0], [18.0]).tolist() == [
        False, True]


def test_step_rate_zero_steps_and_zero_width():
    assert np.isnan(metrics.step_rate(0, 0.0, 10.0, [], []))
    assert np.isnan(metrics.step_rate(5, 3.0, 3.0, [], []))
    assert metrics.step_rate(10, 0.0, 10.0, [], []) == 1.0
    assert metrics.step_rate(10, 0.0, 10.0, [0.0], [5.0]) == 2.0
    assert np.isnan(metrics.step_rate(10, 0.0, 10.0, [0.0], [10.0]))


def test_clopper_pearson_at_zero_and_n():
    from scipy.stats import binomtest

    for k in (0, 10):
        lo, hi = metrics.clopper_pearson(k, 10)
        ref = binomtest(k, 10).proportion_ci(0.95, method="exact")
        assert (lo, hi) == pytest.approx((ref.low, ref.high))
    assert metrics.clopper_pearson(0, 10)[0] == 0.0 and metrics.clopper_pearson(10, 10)[1] == 1.0


@pytest.mark.parametrize("n", [7, 101, 5000])
def test_quantile_between_order_statistics_of_skewed_values(n):
    # exponential values are far from linear, so interpolating from the wrong pair shows
    x = np.random.default_rng(n).exponential(size=n) ** 3
    for q in (0.013, 0.37, 0.5, 0.951, 0.99):
        assert metrics.quantile(x, q) == pytest.approx(np.quantile(x, q), rel=1e-12)
    got = metrics.quantiles(x, (0.13, 0.37, 0.951))
    assert np.allclose(got, np.quantile(x, (0.13, 0.37, 0.951)), rtol=1e-12)


@pytest.mark.parametrize("strided, rest", [(100.0, "low"), (0.0, "high")])
def test_quantile_when_the_sample_bracket_misses(strided, rest):
    # every value the strided sample sees is the same, far from the bulk: the bracket
    # [a, b] misses the order statistics below (or above) it, and the full sort must decide
    n = 8192
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, n) if rest == "low" else rng.uniform(50, 51, n)
    x[:: n // metrics.SAMPLE_SIZE] = strided
    for q in (0.5, 0.9):
        assert metrics.quantile(x, q) == pytest.approx(np.quantile(x, q), rel=1e-12)


def test_request_exposure_of_one_and_of_no_requests():
    one = dict(arrival_s=[1.0], sent_s=[1.0], ok=[True], merge_start=[2.0], merge_end=[3.0],
               horizon_s=10.0)
    assert metrics.request_exposure(end_s=[2.5], **one) == 1.0     # in flight in the window
    assert metrics.request_exposure(end_s=[1.5], **one) == 0.0     # done before it
    assert np.isnan(metrics.request_exposure([], [], [], [], [2.0], [3.0], 10.0))


def test_span_properties():
    s = metrics.Span(10.0, 25.0, 4.0)
    assert s.length_s == 15.0 and s.last_start_s == 21.0 and s.starts() == (10.0, 21.0)
    assert tuple(s) == (10.0, 25.0)
    assert metrics.Span(30.0, 25.0, 4.0).length_s == 0.0           # an empty span
    assert s == metrics.Span(10, 25, 4) and s != metrics.Span(10, 25, 5) and s != (10.0, 25.0)
    assert repr(s) == "Span(start_s=10.0, end_s=25.0, D=4.0)"


# --------------------------------------------------------------------------------------------
# run metrics at their boundaries
# --------------------------------------------------------------------------------------------

def test_ttft_tpot_and_violations_at_the_edges():
    arrival = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    first = [0.5, 1.2, np.nan, 3.4, 4.1, 5.0, 6.3]
    end = [1.5, 1.2, 2.5, np.nan, 4.9, 5.0, 7.3]
    tokens = [3, 1, 4, 5, 0, 2, 2]
    ok = [True, True, True, True, True, True, False]
    np.testing.assert_allclose(mt.ttft(arrival, first, ok),
                               [0.5, 0.2, np.inf, 0.4, 0.1, 0.0, np.inf], atol=1e-12)
    # (end - first) / (tokens - 1); <= 1 token: 0; failed, no end or no first token: inf
    np.testing.assert_allclose(mt.tpot(first, end, tokens, ok),
                               [0.5, 0.0, np.inf, np.inf, 0.0, 0.0, np.inf], atol=1e-12)
    np.testing.assert_allclose(mt.e2e_latency(arrival, end, ok),
                               [1.5, 0.2, 0.5, np.inf, 0.9, 0.0, np.inf], atol=1e-12)
    v = mt.violations([0.5, 0.5000001, 0.4999999, np.inf, 0.0], 0.5)
    assert v.tolist() == [False, True, False, True, False]


def test_slo_flags_and_goodput_at_exactly_the_slo():
    arrival = [0.0, 0.0, 0.0, 0.0, 0.0]
    first = [0.2, 0.3, 0.2, 0.2, 0.2]
    end = [1.0, 1.0, 1.1, 0.6, np.nan]
    tokens = [5, 5, 5, 2, 5]
    ok = [True, True, True, True, False]
    slo = {"e2e_s": 1.0, "ttft_s": 0.2, "tpot_s": 0.2}
    f = mt.slo_flags(arrival, first, end, tokens, ok, slo)
    assert f.e2e.tolist() == [False, False, True, False, True]
    assert f.ttft.tolist() == [False, True, False, False, True]
    # tpot: 0.2, 0.175, 0.225, 0.4, inf
    assert f.tpot.tolist() == [False, False, True, True, True]
    assert f.good.tolist() == [True, False, False, False, False]
    assert mt.goodput_flags(arrival, first, end, tokens, ok, slo).tolist() == f.good.tolist()
    f2 = mt.slo_flags(arrival, first, end, tokens, ok, {"e2e_s": 1.0})
    assert f2.ttft is None and f2.tpot is None
    assert f2.good.tolist() == [True, True, False, True, False]
    f3 = mt.slo_flags(arrival, first, end, tokens, ok, {"e2e_s": 1.0, "ttft_s": 0.25,
                                                        "tpot_s": None})
    assert f3.tpot is None and f3.good.tolist() == [True, False, False, True, False]


@pytest.mark.parametrize("values, q, expected", [
    ([], 0.5, math.nan),
    ([3.0], 0.0, 3.0), ([3.0], 1.0, 3.0), ([3.0], 0.5, 3.0),
    ([1.0, 2.0], 0.0, 1.0), ([1.0, 2.0], 1.0, 2.0), ([1.0, 2.0], 0.25, 1.25),
    ([4.0, 1.0, 2.0, 8.0], 0.5, 3.0), ([4.0, 1.0, 2.0, 8.0], 0.9, 6.8),
    ([1.0, np.inf], 0.5, np.inf), ([1.0, np.inf], 0.0, 1.0),
    ([1.0, 2.0, np.inf], 0.5, 2.0), ([1.0, 2.0, np.inf], 0.75, np.inf),
    ([np.inf, np.inf], 0.3, np.inf), ([2.0, 2.0, 2.0, 5.0], 0.5, 2.0),
])
def test_quantile_boundaries(values, q, expected):
    got = mt.quantile(values, q)
    if math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(expected, rel=1e-12)
    fin = [x for x in values if math.isfinite(x)]
    if values and len(fin) == len(values):
        assert got == pytest.approx(float(np.quantile(values, q)), rel=1e-12)


def test_quantiles_of_several_levels_match_one_at_a_time():
    rng = np.random.default_rng(5)
    v = np.concatenate((rng.exponential(1.0, 5000), [np.inf] * 40))
    qs = [0.0, 0.5, 0.9, 0.99, 0.995, 1.0]
    many = mt.quantiles(v, qs)
    one = [mt.quantile(v, q) for q in qs]
    np.testing.assert_array_equal(many, one)
    fin = np.sort(v)
    for q, got in zip(qs, many):
        h = (v.size - 1) * q
        lo, hi = int(math.floor(h)), min(int(math.floor(h)) + 1, v.size - 1)
        frac = h - lo
        ref = fin[lo] if frac == 0 or fin[lo] == fin[hi] else (
            np.inf if not np.isfinite(fin[hi]) else fin[lo] + (fin[hi] - fin[lo]) * frac)
        assert got == ref
    assert np.all(np.isnan(mt.quantiles([], [0.1, 0.9])))


def test_step_rate_boundaries():
    # 10 steps over 4 s with a 3.5 s merge inside: 0.5 s free -> 20 steps/s
    assert mt.step_rate(10, 0.0, 4.0, [0.5], [4.0]) == pytest.approx(20.0)
    assert mt.step_rate(10, 0.0, 4.0, [], []) == pytest.approx(2.5)
    assert math.isnan(mt.step_rate(0, 0.0, 4.0, [], []))
    assert math.isnan(mt.step_rate(10, 4.0, 4.0, [], []))
    assert math.isnan(mt.step_rate(10, 4.0, 3.0, [], []))
    assert math.isnan(mt.step_rate(10, 0.0, 4.0, [-1.0], [5.0]))    # merging all the time
    # merges outside the steps' extent do not count
    assert mt.step_rate(8, 1.0, 3.0, [-2.0, 3.0], [1.0, 9.0]) == pytest.approx(4.0)


def test_time_exposure_boundaries():
    assert math.isnan(mt.time_exposure([1.0], [2.0], (5.0, 5.0)))
    assert math.isnan(mt.time_exposure([1.0], [2.0], (5.0, 4.0)))
    assert mt.time_exposure([], [], (0.0, 10.0)) == 0.0
    assert mt.time_exposure([-5.0, 8.0], [2.0, 20.0], (0.0, 10.0)) == pytest.approx(0.4)
    assert mt.time_exposure([1.0, 2.0], [4.0, 3.0], (0.0, 10.0)) == pytest.approx(0.3)
    assert mt.time_exposure([-5.0, 12.0], [-1.0, 20.0], (0.0, 10.0)) == 0.0
    assert mt.time_exposure([0.0], [10.0], (0.0, 10.0)) == 1.0


def test_union_windows_touching_and_nested():
    s, e = mt.union_windows([5.0, 0.0, 2.0, 7.0, 7.5], [6.0, 2.0, 3.0, 9.0, 8.0])
    np.testing.assert_array_equal(s, [0.0, 5.0, 7.0])
    np.testing.assert_array_equal(e, [3.0, 6.0, 9.0])
    s, e = mt.union_windows([], [])
    assert s.size == 0 and e.size == 0


def test_request_intervals_and_exposure_boundaries():
    arrival = [0.0, 1.0, 2.0, 3.0]
    sent = [0.1, 1.1, 2.1, 12.0]
    end = [1.0, np.nan, 2.5, np.nan]
    ok = [True, False, False, False]
    lo, hi = mt.request_intervals(arrival, sent, end, ok, horizon_s=10.0)
    np.testing.assert_array_equal(lo, [0.0, 1.1, 2.1, 12.0])
    np.testing.assert_array_equal(hi, [1.0, 10.0, 2.5, 12.0])
    # touching a window is no overlap; positive overlap is
    ov = mt.overlaps_windows([0.0, 1.0, 2.0, 4.0, 3.5], [1.0, 2.0, 3.0, 5.0, 3.6], [1.0, 3.5],
                             [2.0, 3.55])
    assert ov.tolist() == [False, True, False, False, True]
    assert mt.overlaps_windows([0.0], [1.0], [], []).tolist() == [False]
    assert math.isnan(mt.request_exposure([], [], [], [], [1.0], [2.0], 10.0))
    x = mt.request_exposure(arrival, sent, end, ok, [0.5], [0.6], 10.0)
    assert x == pytest.approx(0.25)
    x = mt.request_exposure(arrival, sent, end, ok, [2.2], [2.3], 10.0)
    assert x == pytest.approx(0.5)


def test_observed_span_and_windows_boundaries():
    sp = mt.observed_span([2.0, 1.0, 3.0], [4.0, np.nan, 5.0], horizon_s=6.0, merge_duration_s=1)
    assert (sp.start_s, sp.end_s, sp.last_start_s, sp.length_s) == (1.0, 6.0, 5.0, 5.0)
    sp = mt.observed_span([2.0, 1.0], [4.0, 3.0], horizon_s=6.0, merge_duration_s=0.5)
    assert tuple(sp) == (1.0, 4.0) and sp.starts() == (1.0, 3.5)
    sp = mt.observed_span([2.0, 1.0], [8.0, 3.0], horizon_s=6.0, merge_duration_s=0.5)
    assert sp.end_s == 6.0
    sp = mt.observed_span([2.0, 5.0], [3.0, np.nan], horizon_s=4.0, merge_duration_s=0.5)
    assert sp.end_s == 4.0
    sp = mt.observed_span([2.0, 5.0], [3.0, 4.0], horizon_s=9.0, merge_duration_s=0.5)
    assert sp.end_s == 5.0
    assert mt.Span(3.0, 1.0, 0.5).length_s == 0.0
    assert mt.Span(1.0, 3.0, 0.5) == mt.Span(1.0, 3.0, 0.5)
    assert mt.Span(1.0, 3.0, 0.5) != mt.Span(1.0, 3.0, 0.6) and mt.Span(1, 3, 0) != (1, 3)
    with pytest.raises(InputError):
        mt.observed_span([], [], horizon_s=6.0, merge_duration_s=1.0)
    inside = mt.observed_windows([1.0, 0.9, 3.0, 4.5], [2.0, 2.0, 4.0, 5.1], (1.0, 5.0))
    assert inside.tolist() == [True, False, True, False]
    assert mt.windows_observed([1.0, 0.9, 3.0, 4.5], [2.0, 2.0, 5.0, 5.1], (1.0, 5.0)) == 2


@pytest.mark.parametrize("k, n", [(0, 1), (1, 1), (0, 20), (20, 20), (7, 20), (1, 3)])
def test_clopper_pearson_edges_against_scipy(k, n):
    from scipy import stats
    lo, hi = mt.clopper_pearson(k, n, 0.9)
    ref = stats.binomtest(k, n).proportion_ci(0.9, method="exact")
    assert lo == pytest.approx(ref.low, abs=1e-12) and hi == pytest.approx(ref.high, abs=1e-12)
    assert (lo == 0.0) == (k == 0) and (hi == 1.0) == (k == n)


def test_clopper_pearson_rejects_impossible_counts():
    for k, n in [(0, 0), (-1, 5), (6, 5)]:
        with pytest.raises(InputError):
            mt.clopper_pearson(k, n)
    lo, hi = mt.clopper_pearson([0, 3], [5, 5])
    assert lo.shape == (2,) and lo[0] == 0.0 and hi[1] < 1.0
