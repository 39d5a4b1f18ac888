"""The V interval's fast paths (segmentation by levels, clusters from runs of time-ordered
arrivals) give the numbers of the plain computations they replace, on data built to hit
their edges: ties, zeros, NaN, unsorted input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalkit.runlog.vinterval import (BLOCKS, BURSTS, SEGMENT_PENALTY, _binomial_ll, block_length,
                                      cluster_counts, segments, uses_bursts)


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
