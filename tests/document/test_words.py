"""Sentences about numbers (evalkit/document/words.py) at the thresholds that choose them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from evalkit.document import words


@pytest.mark.parametrize("p, statistic, says", [
    (0.05, 0.01, "the policy is significantly better than matched random (p = 0.05)"),
    (0.05, -0.01, f"the policy is {words.worse_words()} (p = 0.05)"),
    (0.0500001, 0.01, "the difference is not significant (p = 0.05)"),
    (0.0500001, -0.01, "the difference is not significant (p = 0.05)"),
    (0.01, 0.0, "the difference is not significant (p = 0.01)"),
])
def test_significance_at_alpha_counts_and_just_above_it_does_not(p, statistic, says):
    assert words.significance_text(SimpleNamespace(statistic=statistic), p, 0.05) == says


def test_no_test_or_no_p_is_said_so():
    assert words.significance_text(None, 0.01, 0.05) == "no paired test"
    assert words.significance_text(SimpleNamespace(statistic=1.0), float("nan"), 0.05) == \
        "no paired test"


@pytest.mark.parametrize("ci, says", [
    ((-3.0, -2.0000001), "falls short of what overlap predicts"),
    ((-3.0, -2.0), "is not shown to be within"),
    ((2.0000001, 3.0), "exceeds what overlap predicts"),
    ((2.0, 3.0), "is not shown to be within"),
])
def test_the_unexplained_part_is_outside_the_tolerance_only_beyond_it(ci, says):
    """A significant gain that overlap predicts, G - G_pred's CI against a tolerance of 2:
    a bound exactly at the tolerance is not outside it."""
    assert says in words.explained_reason(True, False, (0.5, 1.0), ci, 2.0)
