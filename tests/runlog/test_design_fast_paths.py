"""The design facts' fast paths (one merged sort for the last completion before each send,
shared arrival ticks) give the numbers of the plain computations they replace."""

from __future__ import annotations

import numpy as np
import pytest

from evalkit.runlog.design import (arrival_fingerprint, arrival_ticks, completion_tied_share,
                                   identical_arrival_share)


def searched_tied_share(sent, end, window=1e-3):
    sent, end = np.asarray(sent, float), np.asarray(end, float)
    end = np.sort(end[np.isfinite(end)])
    s = sent[np.isfinite(sent)]
    if s.size == 0 or end.size == 0:
        return 0.0
    i = np.searchsorted(end, s, side="right") - 1
    prev = np.where(i >= 0, end[np.maximum(i, 0)], -np.inf)
    return float(np.count_nonzero(s - prev <= window) / s.size)


@pytest.mark.parametrize("seed", range(30))
def test_last_completion_by_merged_sort_gives_the_searched_share(seed):
    rng = np.random.default_rng(200 + seed)
    n = int(rng.integers(1, 3000))
    sent = np.sort(rng.uniform(0, 300, n)) + rng.exponential(0.002, n)
    end = sent + rng.gamma(2.0, 0.2, n)
    if seed % 2:
        sent, end = np.round(sent, 2), np.round(end, 2)     # sends tied to completions
    end[rng.random(n) < 0.05] = np.nan
    sent[rng.random(n) < 0.02] = np.nan
    for window in (1e-3, 0.05, 0.0):
        assert completion_tied_share(sent, end, window) == \
            searched_tied_share(sent, end, window)


@pytest.mark.parametrize("sent, end", [
    ([0.0, -0.0, 1.0, 1.0], [-0.0, 0.0, 1.0, 0.9995]),     # signed zeros, exact ties
    ([-1.0, 0.5, 2.0], [0.4995, 1.0, 2.0]),                 # a negative time: plain search
    ([3.0, 4.0], [np.nan, np.nan]),                          # no completion at all
    ([np.nan], [1.0]),
])
def test_tied_share_edges(sent, end):
    assert completion_tied_share(sent, end) == searched_tied_share(sent, end)


@pytest.mark.parametrize("arrival", [
    np.array([3.0, 1.0, 1.0, 2.0]), np.array([1.0, 1.0000001, 2.0, np.nan, 2.0]),
    np.arange(10.0), np.array([4.0]),
])
def test_arrival_ticks_serve_fingerprint_and_identical_share(arrival):
    ticks = arrival_ticks(arrival)
    assert arrival_fingerprint(arrival) == arrival_fingerprint(None, ticks)
    assert identical_arrival_share(arrival) == identical_arrival_share(None, ticks)
    a = arrival[np.isfinite(arrival)]
    if a.size >= 2:
        us = np.round(a / 1e-6).astype(np.int64)
        _, inverse, counts = np.unique(us, return_inverse=True, return_counts=True)
        assert identical_arrival_share(arrival) == np.count_nonzero(counts[inverse] > 1) / a.size
