"""Run metrics at their edges: TTFT/TPOT and violations, SLO flags and goodput, quantiles, step
rate, exposure and windows, Clopper-Pearson against scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalkit.errors import InputError
from evalkit.runlog import metrics as mt


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
