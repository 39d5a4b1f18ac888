"""Boundary values of run-log validation and metrics: equal times, zero tokens, exactly at the
SLO, a fixed-cadence corridor (min = max), windows reaching past the observed span."""

from __future__ import annotations


def test_huge_integers_are_described_not_printed_from_just_above_ten_to_the_thirty():
    from evalkit.runlog.schema import short_repr as _short
    assert _short(10 ** 30) == repr(10 ** 30)
    assert _short(-(10 ** 30)) == repr(-(10 ** 30))
    assert _short(10 ** 30 + 1) == "a 31-digit integer"
    assert _short(True) == "True"
    assert _short("x" * 61) == repr("x" * 61)[:60] + "... (63 characters)"
    assert _short("x" * 58) == repr("x" * 58)
