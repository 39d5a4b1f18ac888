"""The scan's exposure count and token total equal the metrics definitions exactly, including
the fallbacks (many windows, non-finite windows, failed requests, NaN times)."""

from __future__ import annotations

import numpy as np
import pytest

from evalkit.runlog import metrics
from evalkit.runlog.summary import LOOP_WINDOWS, _count_exposed, _sum_where


def _case(rng, n, k, *, shuffle_windows=False):
    arrival = np.sort(rng.uniform(0.0, 100.0, n))
    sent = arrival + rng.exponential(0.01, n)
    end = sent + rng.gamma(1.0, 2.0, n)
    ok = rng.random(n) > 0.2
    end[~ok & (rng.random(n) < 0.5)] = np.nan           # failed, in flight to the horizon
    ws = rng.uniform(0.0, 100.0, k)
    if not shuffle_windows:
        ws = np.sort(ws)
    we = ws + rng.uniform(0.1, 8.0, k)                   # may overlap: union first
    return arrival, sent, end, ok, ws, we


def _reference(arrival, sent, end, ok, ws, we, horizon):
    """Brute force over requests and windows of metrics.request_intervals lifetimes."""
    lo, hi = metrics.request_intervals(arrival, sent, end, ok, horizon)
    hit = np.zeros(lo.size, dtype=bool)
    for s, e in zip(ws, we):
        hit |= (lo < e) & (hi > s)
    return int(hit.sum()), int(np.count_nonzero(metrics.overlaps_windows(lo, hi, ws, we)))


def _count(arrival, sent, end, ok, ws, we, horizon):
    has_end = np.isfinite(end)
    done = ok & has_end
    return _count_exposed(arrival, sent, end, done, has_end, horizon, ws, we)


@pytest.mark.parametrize("seed", range(40))
def test_exposure_count_equals_metrics(seed):
    rng = np.random.default_rng(seed)
    k = [0, 1, 3, LOOP_WINDOWS, LOOP_WINDOWS + 5][seed % 5]
    case = _case(rng, int(rng.integers(1, 400)), k, shuffle_windows=seed % 2 == 1)
    brute, searched = _reference(*case, horizon=100.0)
    assert brute == searched                   # the reference agrees with itself
    assert _count(*case, horizon=100.0) == searched


@pytest.mark.parametrize("where", ["ws", "we", "arrival", "end"])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_exposure_count_with_non_finite_values(where, value):
    rng = np.random.default_rng(7)
    arrival, sent, end, ok, ws, we = _case(rng, 300, 6)
    arrays = {"ws": ws, "we": we, "arrival": arrival, "end": end}
    arrays[where][[0, -1]] = value
    lo, hi = metrics.request_intervals(arrival, sent, end, ok, 100.0)
    expected = int(np.count_nonzero(metrics.overlaps_windows(lo, hi, ws, we)))
    assert _count(arrival, sent, end, ok, ws, we, horizon=100.0) == expected


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_exposure_count_with_only_the_last_window_end_not_finite(value):
    # a non-finite first end swallows every window into one; only a later one leaves the
    # windows before it finite, so the scan must still take the metrics' path
    rng = np.random.default_rng(7)
    arrival, sent, end, ok, ws, we = _case(rng, 300, 6)
    we[-1] = value
    lo, hi = metrics.request_intervals(arrival, sent, end, ok, 100.0)
    expected = int(np.count_nonzero(metrics.overlaps_windows(lo, hi, ws, we)))
    assert _count(arrival, sent, end, ok, ws, we, horizon=100.0) == expected


def test_token_total_matches_nansum_where():
    rng = np.random.default_rng(3)
    ok = rng.random(500) > 0.3
    ints = rng.integers(0, 1000, 500)
    floats = ints.astype(float)
    floats[::7] = np.nan
    for values in (ints, floats, ints.astype(np.uint32)):
        got = _sum_where(values, ok)
        assert isinstance(got, int)
        assert got == int(np.nansum(np.where(ok, values, 0)))
        assert got == sum(int(v) for v, m in zip(values, ok) if m and v == v)
