"""Overlap cost against brute force, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evalkit.errors import InputError
from evalkit.stats import cost_curve, overlap_cost


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
