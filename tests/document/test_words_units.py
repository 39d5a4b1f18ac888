"""One unit in the sentences a person reads: G, G_pred and their CIs are shares of requests in
the document's numbers and percentage points in the verdict, as in the headline."""

from __future__ import annotations

import re
from types import SimpleNamespace

from evalkit.document import words
from evalkit.report.headline import effect_text


def test_the_verdicts_gain_is_in_percentage_points_like_the_headline():
    sf = SimpleNamespace(statistic=0.02193, ci_low=0.01331, ci_high=0.03208)
    text = words.gain_text(sf)
    assert text == "G = +2.19 pp [+1.33, +3.21], CI above 0"
    assert effect_text(0.02193, [0.01331, 0.03208])[0].startswith("G = +2.19 pp [+1.33, +3.21]")
    assert words.gain_text(SimpleNamespace(statistic=-0.004, ci_low=None, ci_high=None)) == \
        "G = -0.40 pp (no CI)"


def test_the_predicted_gain_is_in_percentage_points():
    res = SimpleNamespace(g_pred=0.001483, g_pred_ci=(-0.002273, 0.004329), explained=False)
    assert words.prediction_text(res) == ("psi-predicted gain G_pred = +0.15 pp [-0.23, +0.43], "
                                          "CI across 0: not shown to be explained by overlap")


def test_no_bare_share_is_left_in_a_verdict_sentence():
    sf = SimpleNamespace(statistic=0.06625, ci_low=0.03073, ci_high=0.1028)
    res = SimpleNamespace(g_pred=0.01932, g_pred_ci=(0.01416, 0.02106), explained=True)
    text = f"{words.gain_text(sf)}; {words.prediction_text(res)}"
    # every number beside G or G_pred carries "pp" or sits in a pp interval
    assert not re.search(r"G(_pred)? = [+-]?0\.\d{3,}", text), text
    assert text.count(" pp") == 2


def test_a_gain_at_the_smallest_effect_of_interest_is_not_negligible():
    from evalkit.document.words import EFFECT_TOL, is_negligible

    assert not is_negligible(0.005, 0.005)                     # equality is not below
    assert not is_negligible(0.005 - EFFECT_TOL / 2, 0.005)    # nor equality up to rounding
    assert is_negligible(0.005 - 2 * EFFECT_TOL, 0.005)
    assert not is_negligible(0.0, 0.005) and not is_negligible(-0.001, 0.005)
