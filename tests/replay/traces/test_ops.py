"""Slicing, time scaling, head, describe and plot_trace."""

import numpy as np
import pytest
from scipy import stats

from evalkit.errors import InputError
from evalkit.replay.traces import (
    Lengths, Trace, describe, fixed, gamma_arrivals, generate, head, plot_trace, poisson,
    rescale_rate, slice_window, time_scale,
)
from evalkit.replay.traces.describe import index_of_dispersion, nice_bin


@pytest.fixture
def trace():
    return generate("poisson", seed=4, rate=10, duration_s=300,
                    lengths=Lengths(fixed(100), fixed(10)))


def test_slice_window_matches_brute_force(trace):
    s = slice_window(trace, 50, 120)
    want = [t - 50 for t in trace.arrival_s if 50 <= t < 120]
    np.testing.assert_allclose(s.arrival_s, want)
    assert list(s.requests["request_id"]) == list(range(len(want)))
    assert s.duration_s == 70 and s.meta["ops"][-1]["rows_after"] == len(want)
    raw = slice_window(trace, 50, 120, rebase=False)
    assert raw.arrival_s[0] >= 50 and raw.duration_s == 70
    assert raw.rate == pytest.approx(s.rate)
    assert trace.meta.get("ops") is None          # the input is not modified


def test_slice_window_past_the_end(trace):
    s = slice_window(trace, 250, 1000)
    assert s.duration_s == pytest.approx(50)


def test_slice_errors(trace):
    with pytest.raises(InputError, match="no requests"):
        slice_window(trace, 400, 500)
    with pytest.raises(InputError, match="invalid"):
        slice_window(trace, 10, 5)


def test_time_scale_and_rescale(trace):
    t2 = time_scale(trace, 2.0)
    np.testing.assert_allclose(t2.arrival_s, 2 * trace.arrival_s)
    assert t2.rate == pytest.approx(trace.rate / 2) and t2.duration_s == 600
    r = rescale_rate(trace, 25.0)
    assert r.rate == pytest.approx(25.0)
    assert r.meta["ops"][-1]["op"] == "time_scale"
    with pytest.raises(InputError):
        time_scale(trace, 0)
    with pytest.raises(InputError):
        rescale_rate(trace, -3)


def test_head(trace):
    h = head(trace, 7)
    assert h.n == 7 and h.duration_s == trace.arrival_s[6]
    assert h.meta["ops"][-1] == {"op": "head", "n": 7, "rows_before": trace.n, "rows_after": 7}
    with pytest.raises(InputError):
        head(trace, 0)


def test_describe_against_numpy_and_scipy():
    b = 0.5
    arrival = gamma_arrivals(20, 500, b, rng=2)
    t = Trace.from_arrays(arrival, np.full(len(arrival), 5), np.arange(len(arrival)),
                          meta={"window_s": 500.0})
    d = describe(t)
    gaps = np.diff(t.arrival_s)
    assert d["interarrival"]["cv2"] == pytest.approx(gaps.var(ddof=1) / gaps.mean() ** 2)
    assert d["interarrival"]["gamma_shape_mle"] == pytest.approx(b, rel=0.1)
    ref_shape = stats.gamma.fit(gaps[gaps > 0], floc=0)[0]
    assert d["interarrival"]["gamma_shape_mle"] == pytest.approx(ref_shape, rel=1e-6)
    rot = d["rate_over_time"]
    assert sum(rot["rates"]) * rot["bin_s"] == pytest.approx(t.n)
    assert d["output_tokens"]["p50"] == pytest.approx(np.median(t.requests["output_tokens"]))
    assert d["n"] == t.n and d["sha256"] == t.sha256


def test_index_of_dispersion_poisson_vs_bursty():
    p = poisson(20, 2000, rng=1)
    assert index_of_dispersion(p, 2000, 10) == pytest.approx(1.0, abs=0.25)
    sq = generate("square_wave", seed=1, period_s=60, burst_s=10, quiet_rate=2, busy_rate=40,
                  duration_s=1200)
    assert index_of_dispersion(sq.arrival_s, 1200, 10) > 10
    assert index_of_dispersion(p, 50, 10) is None          # < 10 windows


def test_nice_bin():
    assert nice_bin(600) == 10 and nice_bin(3436) == 100 and nice_bin(6) == 0.1


def test_plot_trace_writes_png(trace, tmp_path):
    plot_trace(trace, tmp_path / "t.png")
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
