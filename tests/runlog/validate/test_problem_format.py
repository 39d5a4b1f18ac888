"""Boundary values of run-log validation and metrics: equal times, zero tokens, exactly at the
SLO, a fixed-cadence corridor (min = max), windows reaching past the observed span."""

from __future__ import annotations

from tests.support.fixture_run import run


def test_problem_format_names_run_file_and_column():
    from evalkit.runlog.validate import Problem

    p = Problem("r1", "runs/r1/requests.parquet", "end_s", "NaN time", "fix it")
    assert p.format() == ("ERROR    run=r1 file=runs/r1/requests.parquet column=end_s: "
                          "NaN time (fix: fix it)")
    w = Problem("r1", None, None, "odd", "look", severity="warning")
    assert w.format() == "WARNING  run=r1: odd (fix: look)"
    x = Problem("r1", None, None, "stopped", "rerun", kind="incomplete")
    assert x.format().startswith("EXCLUDED run=r1: stopped")
