"""Run-log validation rule by rule, on in-memory tables and small run directories.

Every check of :mod:`evalkit.runlog.validate` is called with values at, just inside and just
outside its threshold, and the problems it reports are compared in full (column, message,
severity): a rule that stops firing, fires on a valid neighbour, names the wrong row or
counts wrongly fails here.  The design facts of :mod:`evalkit.runlog.design` are compared
with independent computations (hashlib, brute force).
"""

from __future__ import annotations

from evalkit.runlog.validate import problem as vproblem


def test_short_cuts_at_sixty_characters_and_describes_huge_integers():
    sixty = "a" * 58                       # repr adds two quotes: 60 characters
    assert vproblem._short(sixty) == repr(sixty)
    sixty_one = "a" * 59
    assert vproblem._short(sixty_one) == repr(sixty_one)[:60] + "... (61 characters)"
    assert vproblem._short(10 ** 30) == str(10 ** 30)
    assert vproblem._short(10 ** 30 + 1) == "a 31-digit integer"
    assert vproblem._short(-(10 ** 30) - 1) == "a 31-digit integer"
    assert vproblem._short(-(10 ** 30)) == str(-(10 ** 30))
    assert vproblem._short(True) == "True" and vproblem._short("x") == "'x'" and vproblem._short(2.5) == "2.5"
