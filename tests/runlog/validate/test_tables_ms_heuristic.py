"""Boundary values of run-log validation and metrics: equal times, zero tokens, exactly at the
SLO, a fixed-cadence corridor (min = max), windows reaching past the observed span."""

from __future__ import annotations


def test_milliseconds_heuristic_bounds():
    from evalkit.runlog.validate.tables import MS_FACTOR, MS_PLAUSIBLE, _looks_ms

    assert (MS_FACTOR, MS_PLAUSIBLE) == (100.0, 100.0)
    d = 8.0
    # over 100x the plausible value, and value / 1000 within 100x of it
    assert not _looks_ms(800.0, d) and _looks_ms(800.001, d)
    assert _looks_ms(800_000.0, d) and not _looks_ms(800_001.0, d)
    assert _looks_ms(80_000.0, d, slack=10.0) and not _looks_ms(80_001.0, d, slack=10.0)
