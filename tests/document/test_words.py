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
