"""Verdict sentences derived from the numbers they are about.

What a claim may say comes from the protocol only: the verdict of a claim that reached a
tier is that tier's ``claim`` sentence, followed by the numbers behind it.  Every other word
here is chosen by a number: the claim sentence only for a gain whose estimate and CI lie
above 0; "not shown to be explained by overlap" where the explained-gain test did not pass;
"significantly worse" only for a significant negative gain; "underpowered" names the rule
that blocks (the protocol's minimum number of seeds, or the smallest p the test can attain)
with its numbers; a significant gain smaller than the protocol's smallest effect of interest
is "negligible".  G, G_pred and their CIs are shares of requests (0.01 = 1 pp) in the audit
document's numbers and percentage points in these sentences (:func:`pp`), as everywhere a
person reads them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["gain_text", "is_negligible", "power", "prediction_text", "tier_sentence",
           "underpowered_verdict"]

EFFECT_TOL = 1e-12           # a gain equal to min_effect up to rounding is not below it


def _fmt(x, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:.{digits}g}"


def pp(share, signed: bool = True) -> str:
    """A share in percentage points, without the unit: ``+2.19`` for a difference of shares,
    ``2.19`` (``signed=False``) for a rate, a tolerance or a bound that has no direction."""
    if share is None or not math.isfinite(share):
        return "n/a"
    return f"{100 * share:+.2f}" if signed else f"{100 * share:.2f}"


def ci_position(low, high) -> str:
    """"above", "below" or "across" 0 for a CI; "" when it has no finite ends."""
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return ""
    return "above" if low > 0 else "below" if high < 0 else "across"


def gain_text(sf) -> str:
    """``G = +6.30 pp [+3.20, +9.90], CI above 0`` from a paired test result."""
    if sf is None:
        return "G n/a"
    pos = ci_position(sf.ci_low, sf.ci_high)
    if not pos:
        return f"G = {pp(sf.statistic)} pp (no CI)"
    return f"G = {pp(sf.statistic)} pp [{pp(sf.ci_low)}, {pp(sf.ci_high)}], CI {pos} 0"


def beats(sf) -> bool:
    """The gain's estimate is above 0 and so is its CI (where it has one)."""
    if sf is None or not math.isfinite(sf.statistic) or sf.statistic <= 0:
        return False
    pos = ci_position(sf.ci_low, sf.ci_high)
    return pos in ("above", "")


def is_negligible(gain: float, min_effect: float) -> bool:
    """A positive gain below the smallest effect of interest (equality is not below)."""
    return 0 < gain < float(min_effect) - EFFECT_TOL


def significance_text(sf, p_adjusted: float, alpha: float) -> str:
    """Direction and significance of the effect: "the policy is significantly worse than
    matched random (p = 0.008)", "... better ...", or "not significant (p = 0.3)"."""
    if sf is None or p_adjusted is None or not math.isfinite(p_adjusted):
        return "no paired test"
    p = f"p = {_fmt(p_adjusted, 3)}"
    if p_adjusted <= alpha and sf.statistic < 0:
        return f"the policy is significantly worse than matched random ({p})"
    if p_adjusted <= alpha and sf.statistic > 0:
        return f"the policy is significantly better than matched random ({p})"
    return f"the difference is not significant ({p})"


@dataclass(frozen=True)
class Power:
    """Which rule keeps a claim underpowered: ``rule`` is "protocol_minimum" (fewer
    informative seeds than the protocol's ``min_seeds``), "attainable_p" (the test cannot
    reach alpha), "both", or None (enough seeds)."""

    rule: str | None
    n: int
    min_seeds: int | None
    seeds_needed: int
    min_p: float
    alpha: float
    alternative: str

    @property
    def text(self) -> str:
        if self.rule is None:
            return ""
        p_rule = (f"the smallest attainable {self.alternative} p is {_fmt(self.min_p, 3)} > "
                  f"alpha = {self.alpha:g}: the test needs >= {self.seeds_needed} seeds")
        floor = (f"{self.n} independent seeds are below the protocol's minimum of "
                 f"{self.min_seeds}")
        if self.rule == "protocol_minimum":
            return (floor + f" (the test itself could reach alpha with {self.seeds_needed}; "
                    f"smallest attainable p now {_fmt(self.min_p, 3)})")
        if self.rule == "attainable_p":
            return f"with {self.n} independent seeds " + p_rule
        return floor + ", and " + p_rule

    def to_dict(self) -> dict:
        return {"rule": self.rule, "n": self.n, "min_seeds": self.min_seeds,
                "seeds_needed": self.seeds_needed, "min_p": self.min_p, "text": self.text}


def _test_of(ctx):
    """The claim's paired test result, or None when there is none (or it cannot be run)."""
    try:
        return ctx.sign_flip if ctx.effective_n >= 2 else None
    except Exception:  # noqa: BLE001 - no test: the design's limit stands
        return None


def power(ctx, min_seeds: int | None = None) -> Power:
    """The power rule of a claim context (:class:`evalkit.audit.context.ClaimContext`);
    ``min_seeds``: the protocol's minimum (default: its ``enough_seeds`` check, if any)."""
    if min_seeds is None:
        spec = ctx.protocol.checks.get("enough_seeds")
        min_seeds = int(spec["min_seeds"]) if spec is not None else None
    n = int(ctx.informative_n)
    min_p = float(ctx.design_min_p)
    sf = _test_of(ctx)
    if sf is not None:      # the data's limit: seeds whose runs tie count for nothing
        min_p = max(min_p, float(sf.min_p))
    below_floor = min_seeds is not None and n < min_seeds
    below_p = min_p > ctx.alpha
    rule = ("both" if below_floor and below_p else "protocol_minimum" if below_floor
            else "attainable_p" if below_p else None)
    return Power(rule=rule, n=n, min_seeds=min_seeds, seeds_needed=int(ctx.seeds_needed),
                 min_p=min_p, alpha=float(ctx.alpha), alternative=str(ctx.alternative))


def underpowered_verdict(ctx, prefix: str = "") -> str:
    """"underpowered: <the rule and its numbers>; <direction and significance>"."""
    pw = power(ctx)
    sf = _test_of(ctx)
    effect = (f"{gain_text(sf)}: {significance_text(sf, ctx.p_adjusted, ctx.alpha)}"
              if sf is not None else "no paired test")
    rule = pw.text or "too few seeds for the paired test"
    return prefix + f"underpowered: {rule}; {effect}; no claim beyond the mechanism tiers"


def explained_result(ctx):
    """The claim's ExplainedGain computed by the calibrated check, or None."""
    cache = ctx.regime_evidence.__dict__.get("_explained", {})
    for key, (res, _reason) in cache.items():
        if key[0] == ctx.claim.policy and res is not None:
            return res
    return None


def prediction_text(res) -> str:
    """``psi-predicted gain G_pred = +5.00 pp [+2.00, +8.00], CI above 0`` and, unless the
    explained-gain test passed, ``: not shown to be explained by overlap``."""
    lo, hi = res.g_pred_ci
    pos = ci_position(lo, hi)
    text = (f"psi-predicted gain G_pred = {pp(res.g_pred)} pp [{pp(lo)}, {pp(hi)}]"
            + (f", CI {pos} 0" if pos else ""))
    return text if res.explained else text + ": not shown to be explained by overlap"


def tier_sentence(tier, ctx) -> str:
    """The verdict of a claim that reached ``tier`` (a :class:`TierSpec` at or above the
    claim floor): the protocol's claim sentence for that tier with the numbers behind it,
    or, where the gain is not shown, the numbers that say so."""
    try:
        sf = ctx.sign_flip
    except Exception:  # noqa: BLE001 - the gain may not be estimable while a tier passed
        sf = None
    g = gain_text(sf)
    if not beats(sf):
        return (f"reached {tier.name} under this protocol, but {g}: no win over matched "
                "random is shown")
    res = explained_result(ctx)
    pred = f"; {prediction_text(res)}" if res is not None else ""
    return f"{tier.name}: {tier.claim}; {g}{pred}"
