"""Sentences about numbers (evalkit/document/words.py) at the thresholds that choose them."""

from __future__ import annotations

import math
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


def test_cochrans_rule_is_strict_at_25_g1_squared():
    assert words.COCHRAN_FACTOR * 2.0 ** 2 == 100
    assert words.cochran_text(-2.0, 100) == ""                         # n = 25 g1^2
    assert "wants more than 25 g1^2 = 100 seeds" in words.cochran_text(-2.0, 99)
    assert words.cochran_text(-2.0, 99).endswith("(Cochran's rule), these are 99")
    assert words.cochran_text(-2.0, 101) == ""
    assert words.cochran_text(2.0, 99) == "" and words.cochran_text(0.0, 99) == ""
    assert words.cochran_text(0.5, 5) == "" and words.cochran_text(-0.5, 5)    # 6.25 seeds
    assert words.cochran_text(math.nan, 99) == "" and words.cochran_text(None, 99) == ""
    assert words.cochran_text(-2.0, None) == ""


def test_shape_text_below_20_seeds_names_the_floor_and_g1_and_from_20_is_cochrans_rule():
    below = words.shape_text(words.SMALL_N - 1, "the floor's words", 0.1234)
    assert below == (f"with {words.SMALL_N - 1} seeds the mean test assumes a policy run is at "
                     "least as variable as one more draw of its seed unless its runs show "
                     "otherwise (the floor's words) and d has no long tail of seeds where the "
                     "policy is much worse (sample skewness g1 = 0.123); 20 or more seeds make "
                     "both matter less")
    assert "(sample skewness g1 = n/a)" in words.shape_text(3, "f", math.nan)
    assert words.shape_text(words.SMALL_N, "f", -3.0) == words.cochran_text(-3.0, words.SMALL_N)
    assert words.shape_text(words.SMALL_N, "f", 0.5) == ""             # right skew: nothing
    assert words.shape_text(250, "f", -3.0) == ""                      # 250 > 25 x 9
