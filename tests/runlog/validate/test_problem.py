"""The validation problem: number and string predicates, and how a problem is formatted."""

from __future__ import annotations


import pytest

from evalkit.runlog.schema import is_number
from evalkit.runlog.validate import problem as vproblem
from evalkit.runlog.validate.problem import Problem


# ----------------------------------------------------------------------------- small helpers


@pytest.mark.parametrize("value, number, integer", [
    (1, True, True), (0.5, True, False), (-2, True, True), (True, False, False),
    (False, False, False), (float("nan"), False, False), (float("inf"), False, False),
    ("1", False, False), (None, False, False), (2 ** 70, True, True),
])
def test_number_and_integer_predicates(value, number, integer):
    assert is_number(value) is number
    assert vproblem._is_int(value) is integer


@pytest.mark.parametrize("value, expected", [
    ("a", True), (" x ", True), ("", False), ("   ", False), (5, False), (None, False),
    (["a"], False),
])
def test_nonempty_string_predicate(value, expected):
    assert vproblem._nonempty_str(value) is expected


# ----------------------------------------------------------------------------- reports


def test_problem_format_labels_and_locations():
    p = Problem("r", "f.parquet", "c", "bad", "fix it")
    assert p.format() == "ERROR    run=r file=f.parquet column=c: bad (fix: fix it)"
    w = Problem("r", None, None, "odd", "look", severity="warning")
    assert w.format() == "WARNING  run=r: odd (fix: look)"
    x = Problem("r", "run.json", None, "gone", "rerun", kind="incomplete")
    assert x.format() == "EXCLUDED run=r file=run.json: gone (fix: rerun)"
    e = p.as_error()
    assert e.message == "run r: bad" and e.fix == "fix it"


def test_problem_format_names_run_file_and_column():
    from evalkit.runlog.validate.problem import Problem

    p = Problem("r1", "runs/r1/requests.parquet", "end_s", "NaN time", "fix it")
    assert p.format() == ("ERROR    run=r1 file=runs/r1/requests.parquet column=end_s: "
                          "NaN time (fix: fix it)")
    w = Problem("r1", None, None, "odd", "look", severity="warning")
    assert w.format() == "WARNING  run=r1: odd (fix: look)"
    x = Problem("r1", None, None, "stopped", "rerun", kind="incomplete")
    assert x.format().startswith("EXCLUDED run=r1: stopped")
