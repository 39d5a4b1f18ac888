"""Boundary values of the run metrics: exactly at the SLO, zero-token and failed requests,
exposure clipped to the span, quantiles, step rate, Clopper-Pearson."""

from __future__ import annotations

import numpy as np
import pytest

from evalkit.runlog import metrics


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
