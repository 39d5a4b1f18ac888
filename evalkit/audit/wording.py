"""Sentences about numbers, each derived from the number it talks about.

A confidence interval lies above 0, below 0, or includes 0; a gain is significantly better
than matched random, significantly worse, or not shown to differ.  Every phrase the audit
and the report print about a CI or a gain comes from these functions, so the words cannot
disagree with the numbers beside them (no "reaches 0" for a CI of [-0.0136, -0.0100], no
"report it as placement gain" for a policy significantly worse than random).
"""

from __future__ import annotations

import math

from evalkit.audit.verdict_words import pp

__all__ = ["ABOVE", "ACROSS", "BELOW", "BETTER", "DESIGN_CHECKS", "TIED", "WORSE", "ci_side",
           "ci_words", "drift_share_words", "explained_fix", "explained_reason",
           "failed_design_checks", "gain_state", "gain_words", "not_valid_words"]

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


def gain_words(state: str) -> str:
    return {BETTER: "significantly better than matched random",
            WORSE: "significantly WORSE than matched random",
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
        return ("there is no gain to explain: the policy is significantly worse than matched "
                "random; do not claim an improvement")
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


def not_valid_words(failed: list[str]) -> str:
    return (f"not a valid comparison: {', '.join(failed)} failed, so G is evidence neither "
            "for nor against the policy")
