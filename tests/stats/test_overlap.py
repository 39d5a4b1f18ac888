"""Overlap cost against brute force, and bad input.

Boundaries of the overlap cost: brute force, shapes, the request index and half-second
windows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evalkit.errors import InputError
from evalkit.stats.overlap import cost_curve, overlap_cost, RequestIndex


def test_overlap_cost_matches_brute_force():
    rng = np.random.default_rng(0)
    rs = rng.uniform(0, 300, 3000)
    re = rs + rng.exponential(2.0, 3000)
    rs[:5] = 50.0                      # exact boundary cases: start == u + D or end == u
    re[:5] = [58.0, 50.0, 50.0, 60.0, 50.5]
    starts = np.sort(rng.uniform(0, 290, (200, 5)), axis=1)
    starts[0, :2] = [42.0, 50.0]
    oc = overlap_cost(starts, 8.0, rs, re)
    brute = ((rs[None, None, :] < starts[..., None] + 8.0)
             & (re[None, None, :] > starts[..., None])).sum(axis=-1)
    assert np.array_equal(oc.per_window, brute)
    assert np.array_equal(oc.phi, brute.sum(axis=1))
    assert np.array_equal(cost_curve(starts[0], 8.0, rs, re), brute[0])
    json.dumps(overlap_cost(starts[:2], 8.0, rs, re).to_dict(), allow_nan=False)


def test_overlap_bad_input():
    with pytest.raises(InputError, match="NaN"):
        overlap_cost([[1.0]], 1.0, [0.0, 1.0], [np.nan, 2.0])
    with pytest.raises(InputError, match="end before"):
        overlap_cost([[1.0]], 1.0, [5.0], [2.0])
    with pytest.raises(InputError, match="positive"):
        overlap_cost([[1.0]], 0.0, [0.0], [2.0])


# ------------------------------------------------------------------------- overlap


def _brute_cost(u, d, start, end):
    u = np.asarray(u, dtype=float)[..., None]
    return np.sum((start < u + d) & (end > u), axis=-1)


@pytest.mark.parametrize("n_windows", [7, 5000])        # below and above the sorted path
def test_cost_curve_matches_brute_force(n_windows):
    rng = np.random.default_rng(n_windows)
    start = rng.uniform(0, 100, 60)
    end = start + rng.exponential(5, 60)
    u = rng.uniform(-5, 105, n_windows)
    want = _brute_cost(u, 2.5, start, end)
    assert want.max() > 3
    assert np.array_equal(cost_curve(u, 2.5, start, end), want)


def test_overlap_cost_shapes_index_and_half_second_windows():
    start = np.array([0.0, 1.0, 2.0, 2.0])
    end = np.array([1.0, 3.0, 2.0, 4.0])                 # one request of zero length
    idx = RequestIndex(start, end)
    starts = np.array([[0.0, 1.5, 2.0], [0.5, 1.0, 3.5]])
    res = overlap_cost(starts, 0.5, index=idx)
    want = _brute_cost(starts, 0.5, start, end)
    assert np.array_equal(res.per_window, want)
    assert res.phi.tolist() == want.sum(axis=1).tolist() and res.n_requests == 4
    same = overlap_cost(starts, 0.5, start, end)
    assert np.array_equal(same.per_window, want) and same.duration == 0.5
    one = overlap_cost([0.0, 1.5], 0.5, start, end)
    assert one.phi.shape == () and int(one.phi) == int(want[0, :2].sum())
    with pytest.raises(InputError, match="needs req_start and req_end"):
        overlap_cost(starts, 0.5, start, None)
    with pytest.raises(InputError, match="needs req_start and req_end"):
        overlap_cost(starts, 0.5, None, end)
    with pytest.raises(InputError, match="trailing window axis"):
        overlap_cost(1.0, 0.5, start, end)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(InputError, match="must be positive"):
            idx.cost([1.0], bad)


def test_request_index_checks():
    with pytest.raises(InputError, match=r"starts \(2\) and ends \(3\) differ"):
        RequestIndex([0.0, 1.0], [1.0, 2.0, 3.0])
    with pytest.raises(InputError, match="1 requests have a NaN/inf start or end"):
        RequestIndex([0.0, 1.0], [1.0, np.nan])
    with pytest.raises(InputError, match="1 requests end before they start"):
        RequestIndex([0.0, 1.0], [1.0, 0.5])
    assert RequestIndex([1.0], [1.0]).n_requests == 1
