"""Sentences about numbers, each derived from the number it talks about, and the number formats.

A confidence interval lies above 0, below 0, or includes 0; a gain is significantly better
than matched random, significantly worse, or not shown to differ.  Every phrase the audit
and the report print about a CI or a gain comes from these functions, so the words cannot
disagree with the numbers beside them (no "reaches 0" for a CI of [-0.0136, -0.0100], no
"report it as placement gain" for a policy significantly worse than random).  G, G_pred and
their CIs are shares of requests (0.01 = 1 pp) in the audit document's numbers and percentage
points in these sentences (:func:`pp`), as everywhere a person reads them.  Every number
printed for a person goes through :func:`num` or one of its unit forms (:func:`pp`,
:func:`pct`, :func:`p_value`); a missing or non-finite number is ``n/a`` in all of them.
"""

from __future__ import annotations

import math

__all__ = ["ABOVE", "ACROSS", "BELOW", "BETTER", "CLAIM_TEST_FALSE_WORSE", "COCHRAN_FACTOR",
           "DESIGN_CHECKS", "DIAGNOSTIC_TEXT", "EFFECT_TOL", "SMALL_N", "TIED", "WORSE",
           "WORSE_SIZE_FACTOR", "beats", "ci_side", "ci_words", "cochran_text",
           "drift_share_words", "explained_fix", "explained_reason", "failed_design_checks",
           "gain_state", "gain_text", "gain_words", "is_negligible", "level_trend_text",
           "not_valid_words", "num", "p_value", "pct", "pp", "prediction_text", "shape_text",
           "significance_text", "tail_luck_text", "vouched_note", "worse_licensed", "worse_words"]

EFFECT_TOL = 1e-12           # a gain equal to min_effect up to rounding is not below it

ABOVE, BELOW, ACROSS = "above", "below", "across"
BETTER, WORSE, TIED = "better", "worse", "tied"


def ci_side(lo, hi, bound: float = 0.0) -> str:
    """Where the interval ``[lo, hi]`` lies relative to ``bound``: strictly above, strictly
    below, or across it (touching ``bound`` counts as across).  A missing end is across."""
    lo, hi = _f(lo), _f(hi)
    if lo is not None and lo > bound:
        return ABOVE
    if hi is not None and hi < bound:
        return BELOW
    return ACROSS


def ci_words(side: str, bound: str = "0") -> str:
    return {ABOVE: f"lies above {bound}", BELOW: f"lies below {bound}",
            ACROSS: f"includes {bound}"}[side]


def gain_state(gain, p, alpha) -> str:
    """BETTER / WORSE when the decision's p is at most alpha and the gain is positive /
    negative; TIED otherwise (not significant, no test, or a gain of exactly 0)."""
    g, p, a = _f(gain), _f(p), _f(alpha)
    if g is None or p is None or a is None or p > a or g == 0:
        return TIED
    return BETTER if g > 0 else WORSE


# The false "worse" rate of the claim's test (the draw-floored t-test on d), the largest over
# the designs of tools/INFERENCE_STUDY.md (bursty V, n 10, m 3, fixed schedule), against its
# nominal one-sided rate: a side may be named only from a decision whose false rate there is
# <= WORSE_SIZE_FACTOR x nominal.
CLAIM_TEST_FALSE_WORSE = 0.058
WORSE_SIZE_FACTOR = 1.5


def worse_licensed(false_worse: float | None = None, nominal: float = 0.025) -> bool:
    """Whether a significant negative gain may be called "worse": the decision's measured
    false "worse" rate (default: the claim test's) is at most 1.5 x its nominal rate."""
    rate = CLAIM_TEST_FALSE_WORSE if false_worse is None else false_worse
    return rate <= WORSE_SIZE_FACTOR * nominal


def worse_words(false_worse: float | None = None) -> str:
    """The words for a significant negative gain, chosen by :func:`worse_licensed` from the
    deciding test's measured false "worse" rate (default: the claim test's)."""
    rate = CLAIM_TEST_FALSE_WORSE if false_worse is None else false_worse
    if worse_licensed(rate):
        return "significantly WORSE than matched random"
    return (f"not better than matched random (a negative gain; the test's measured false "
            f"'worse' rate {rate:g} exceeds {WORSE_SIZE_FACTOR:g} x nominal, so no 'worse' is "
            "claimed)")


def gain_words(state: str) -> str:
    return {BETTER: "significantly better than matched random",
            WORSE: worse_words(),
            TIED: "not shown to differ from matched random"}[state]


def explained_reason(predicts_gain: bool, within: bool, g_pred_ci, unexplained_ci,
                     tolerance_abs: float) -> str:
    """Why overlap does (not) explain the gain, from G_pred's CI and the unexplained part's
    CI against the tolerance band ``[-tolerance_abs, +tolerance_abs]``."""
    if predicts_gain and within:
        return "overlap explains the gain: G_pred's CI lies above 0 and G - G_pred is within " \
               "tolerance"
    if not predicts_gain:
        side = ci_side(*g_pred_ci)
        if side == BELOW:
            return ("overlap predicts a loss, not a gain (G_pred's CI lies below 0: the "
                    "policy's merges overlap more requests than random placement's)")
        return "overlap does not predict a gain (G_pred's CI includes 0)"
    lo, hi = g_lo_hi(unexplained_ci)
    tol = f"{pp(tolerance_abs, signed=False)} pp"
    if lo is not None and lo > tolerance_abs:
        return f"the gain exceeds what overlap predicts (G - G_pred's CI lies above +{tol})"
    if hi is not None and hi < -tolerance_abs:
        return (f"the gain falls short of what overlap predicts (G - G_pred's CI lies below "
                f"-{tol})")
    return f"the unexplained part G - G_pred is not shown to be within +-{tol}"


def explained_fix(state: str, predicts_gain: bool) -> str:
    """What to report instead, given whether the gain itself is significant."""
    if state == WORSE:
        return (f"there is no gain to explain: the policy is {worse_words()}; do not claim "
                "an improvement")
    if state == TIED:
        return ("there is no significant gain to explain; do not claim an improvement over "
                "matched random")
    why = ("the policy's overlap Phi is not shown to be lower than random placement's"
           if not predicts_gain else "something besides request overlap drives it")
    return f"claim no more than placement gain: {why}"


def drift_share_words(share: float) -> str:
    """What the drift-adjusted gain says of G, from the share of G the drift explains
    (``(G - G_adjusted) / G`` for G > 0): "57% of G explained by drift"; a negative share is
    a drift that hides gain, never "-91% ... explained"."""
    if share < 0:
        return f"drift explains none of G (adjusting for it raises G by {-share:.0%})"
    return f"{share:.0%} of G explained by drift"


def g_lo_hi(ci):
    if not ci:
        return None, None
    return _f(ci[0]), _f(ci[1])


def _f(x):
    """``x`` as a finite float, or None (missing, a boolean, not a number, or non-finite)."""
    if x is None or isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


# Checks of the comparison's design: when one fails, the policy run and its draws (or its
# no-sync run) differ in more than the schedule, so G is not evidence either way -- "not a
# valid comparison", never a null result.  (A missing no-sync run is not among them: without
# it the head-to-head is still valid, only not a placement gain.)
DESIGN_CHECKS = ("matched_random_present", "k_match", "pairing_real", "policy_runs_complete",
                 "schedules_in_corridor", "merge_durations_match", "open_loop_sending",
                 "load_match")


def failed_design_checks(checks) -> list[str]:
    """Names of the design checks that failed (evaluated and not passed), in protocol order.

    checks: the claim's check dictionaries (``name``, ``passed``)."""
    failed = {c.get("name") for c in checks or [] if c.get("passed") is False}
    return [name for name in DESIGN_CHECKS if name in failed]


def vouched_note(names) -> str:
    """The claim's note naming the checks the user vouched for."""
    return "vouched by the user (--accept-vouched), not verified: " + ", ".join(names)


def not_valid_words(failed: list[str]) -> str:
    return (f"not a valid comparison: {', '.join(failed)} failed, so G is evidence neither "
            "for nor against the policy")


# ------------------------------------------------------------------------- number formats

def _finite(x) -> bool:
    return x is not None and math.isfinite(float(x))


def num(x, digits: int = 4) -> str:
    """A number in ``digits`` significant digits; an integer in full, a boolean as JSON has it."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, int) or (hasattr(x, "dtype") and getattr(x.dtype, "kind", "") in ("i", "u")):
        return str(int(x))
    return f"{float(x):.{digits}g}"


def pct(x) -> str:
    """A share (0..1) in percent."""
    if not _finite(x):
        return "n/a"
    return f"{100 * float(x):.2f}%"


def pp(x, signed: bool = True) -> str:
    """A share in percentage points, without the unit: ``+2.19`` for a difference of shares,
    ``2.19`` (``signed=False``) for a rate, a tolerance or a bound that has no direction."""
    if not _finite(x):
        return "n/a"
    return f"{100 * float(x):{'+' if signed else ''}.2f}"


def p_value(p) -> str:
    if not _finite(p):
        return "n/a"
    p = float(p)
    return f"{p:.3g}" if p < 1 else "1"


# ------------------------------------------------------------------- a paired test's words
# ``sf``: a paired test result (``statistic``, ``ci_low``, ``ci_high``)

def _finite_side(low, high) -> str:
    """:func:`ci_side` of a CI with two finite ends; "" for one without."""
    return ci_side(low, high) if _finite(low) and _finite(high) else ""


def gain_text(sf) -> str:
    """``G = +6.30 pp [+3.20, +9.90], CI above 0`` from a paired test result."""
    if sf is None:
        return "G n/a"
    pos = _finite_side(sf.ci_low, sf.ci_high)
    if not pos:
        return f"G = {pp(sf.statistic)} pp (no CI)"
    return f"G = {pp(sf.statistic)} pp [{pp(sf.ci_low)}, {pp(sf.ci_high)}], CI {pos} 0"


def beats(sf) -> bool:
    """The gain's estimate is above 0 and so is its CI (where it has one)."""
    if sf is None or not math.isfinite(sf.statistic) or sf.statistic <= 0:
        return False
    return _finite_side(sf.ci_low, sf.ci_high) in (ABOVE, "")


def is_negligible(gain: float, min_effect: float) -> bool:
    """A positive gain below the smallest effect of interest (equality is not below)."""
    return 0 < gain < float(min_effect) - EFFECT_TOL


def significance_text(sf, p_adjusted: float, alpha: float) -> str:
    """Direction and significance of the effect: "the policy is significantly worse than
    matched random (p = 0.008)", "... better ...", or "not significant (p = 0.3)"."""
    if sf is None or p_adjusted is None or not math.isfinite(p_adjusted):
        return "no paired test"
    p = f"p = {num(p_adjusted, 3)}"
    if p_adjusted <= alpha and sf.statistic < 0:
        return f"the policy is {worse_words()} ({p})"
    if p_adjusted <= alpha and sf.statistic > 0:
        return f"the policy is significantly better than matched random ({p})"
    return f"the difference is not significant ({p})"


def prediction_text(res) -> str:
    """``psi-predicted gain G_pred = +5.00 pp [+2.00, +8.00], CI above 0`` and, unless the
    explained-gain test passed, ``: not shown to be explained by overlap``."""
    lo, hi = res.g_pred_ci
    pos = _finite_side(lo, hi)
    text = (f"psi-predicted gain G_pred = {pp(res.g_pred)} pp [{pp(lo)}, {pp(hi)}]"
            + (f", CI {pos} 0" if pos else ""))
    return text if res.explained else text + ": not shown to be explained by overlap"


# Below this many seeds the study measured false passes of mean tests above nominal for a
# policy much worse in a few seeds (tools/INFERENCE_STUDY.md, "Small n, skewed policy")
SMALL_N = 20
# Cochran's rule for a mean's normal approximation: n > 25 g1^2 (Sugden, Smith & Jones 2000).
# At or above SMALL_N seeds a left-skewed d (a few seeds where the policy is much worse) that
# breaks it is stated: equal means, a policy at 0.5x its draws in 90% of seeds and 5.5x in
# 10%, 40 seeds: the gate passed 0.087, and 0.017 with no assumption stated
# (tools/LEVEL_TREND_STUDY.md)
COCHRAN_FACTOR = 25.0


def cochran_text(skew, n) -> str:
    """The words for a left-skewed d that Cochran's rule finds too few seeds for (g1 < 0 and
    n < :data:`COCHRAN_FACTOR` g1^2); "" otherwise or where g1 is undefined."""
    if skew is None or n is None or not skew < 0 or not n < COCHRAN_FACTOR * skew ** 2:
        return ""
    return (f"d is left-skewed (sample skewness g1 = {num(skew, 3)}: a few seeds where the "
            f"policy is much worse): the mean test's normal approximation wants more than "
            f"{COCHRAN_FACTOR:g} g1^2 = {num(COCHRAN_FACTOR * skew ** 2, 3)} seeds (Cochran's "
            f"rule), these are {n}")


def shape_text(n: int, floor_state: str, skew) -> str:
    """What a mean test on n seeds assumes about the shape of d, in words from its numbers:
    below :data:`SMALL_N` seeds always (what the floor did, in ``floor_state``, and g1), from
    there on :func:`cochran_text` ("" when Cochran's rule holds)."""
    if n >= SMALL_N:
        return cochran_text(skew, n)
    return (f"with {n} seeds the mean test assumes a policy run is at least as variable as "
            f"one more draw of its seed unless its runs show otherwise ({floor_state}) and d "
            f"has no long tail of seeds where the policy is much worse (sample skewness g1 = "
            f"{num(skew, 3)}); {SMALL_N} or more seeds make both matter less")


def tail_luck_text(diag) -> str:
    """The tail_luck diagnostic (:mod:`evalkit.stats.tail_luck`) in words from its numbers;
    "" when the draws have no tail to speak of."""
    if diag.q is None:
        return ""
    if not diag.flagged:
        if diag.policy_in_tail:
            return (f"tail_luck: {diag.policy_in_tail} of the policy's {diag.n} runs lie in the "
                    f"draws' tail (q = {num(diag.q, 3)}): no luck to state")
        return (f"tail_luck: the policy's {diag.n} runs caught none of the draws' tail (q = "
                f"{num(diag.q, 3)}); random placement does that with chance "
                f"{num(diag.chance, 3)} <= alpha = {diag.alpha:g}")
    return (f"the policy's {diag.n} runs caught none of the draws' tail (q = {num(diag.q, 3)}); "
            f"random placement does that with chance {num(diag.chance, 3)} -- the gain rests "
            f"on the policy avoiding the tail by design; about {diag.more_seeds} more seeds "
            f"make luck < alpha = {diag.alpha:g}")


def _share(x) -> str:
    return "undefined (no violations)" if x is None else f"{num(100 * x, 3)}%"


def level_trend_text(diag) -> str:
    """The level_trend diagnostic (:mod:`evalkit.stats.level_trend`) in words from its numbers;
    "" when it could not run."""
    if diag.slope is None:
        return ""
    gains = (f"its gain is {_share(diag.heavy_gain)} of the draws' V over the {diag.quarter} "
             f"heaviest seeds and {_share(diag.light_gain)} over the {diag.quarter} lightest")
    if not diag.flagged:
        return (f"level_trend: the policy's log ratio to its draws moves by "
                f"{num(diag.slope, 3)} per unit of the seed's level (its draws' mean log V; "
                f"one-sided p = {p_value(diag.p_value)} > alpha = {diag.alpha:g}); {gains}")
    return (f"the policy's V relative to its draws rises with the seed's level (slope "
            f"{num(diag.slope, 3)} in log ratio per unit of the seed's level, its draws' mean "
            f"log V, one-sided p = {p_value(diag.p_value)}); {gains} -- the mean gain rests on "
            f"these {diag.n} seeds holding heavy seeds as often as the campaign's loads do (a "
            "policy much worse in a few heavy seeds can win most seeds at equal means); more "
            "seeds at the heavy loads test it")


DIAGNOSTIC_TEXT = {"tail_luck": tail_luck_text, "level_trend": level_trend_text}
