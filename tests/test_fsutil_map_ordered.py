"""Boundary values of run-log validation and metrics: equal times, zero tokens, exactly at the
SLO, a fixed-cadence corridor (min = max), windows reaching past the observed span."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("threads, window", [(1, None), (2, 1), (3, 4), (4, None)])
def test_map_ordered_yields_every_result_in_order(threads, window):
    from evalkit.fsutil import map_ordered

    out = list(map_ordered(lambda x: x * x, range(11), threads=threads, window=window))
    assert out == [x * x for x in range(11)]
    assert list(map_ordered(lambda x: x, [], threads=threads)) == []
