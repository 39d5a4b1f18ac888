"""Verdict sentences of a live claim: its power rule, its underpowered verdict and the sentence
of the tier it reached, read from the claim's context (the words themselves, derived from the
numbers, are :mod:`evalkit.document.words`).

What a claim may say comes from the protocol only: the verdict of a claim that reached a
tier is that tier's ``claim`` sentence, followed by the numbers behind it.  Every other word
here is chosen by a number: the claim sentence only for a gain whose estimate and CI lie
above 0; "not shown to be explained by overlap" where the explained-gain test did not pass;
"significantly worse" only for a significant negative gain; "underpowered" names the rule
that blocks (the protocol's minimum number of seeds, or the smallest p the test can attain)
with its numbers; a significant gain smaller than the protocol's smallest effect of interest
is "negligible".  G, G_pred and their CIs are shares of requests (0.01 = 1 pp) in the audit
document's numbers and percentage points in these sentences, as everywhere a person reads
them.
"""

from __future__ import annotations

from dataclasses import dataclass

from evalkit.document.schema import DIAGNOSTICS
from evalkit.document.words import (DIAGNOSTIC_TEXT, beats, gain_text, num, prediction_text,
                                    shape_text, significance_text)

__all__ = ["Power", "assumption_sentences", "assumption_text", "explained_result", "power",
           "tier_sentence", "underpowered_verdict"]


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
        p_rule = (f"the smallest sign-flip {self.alternative} p is {num(self.min_p, 3)} > "
                  f"alpha = {self.alpha:g}: the test needs >= {self.seeds_needed} seeds")
        floor = (f"{self.n} independent seeds are below the protocol's minimum of "
                 f"{self.min_seeds}")
        if self.rule == "protocol_minimum":
            return (floor + f" (the test itself could reach alpha with {self.seeds_needed}; "
                    f"smallest sign-flip p now {num(self.min_p, 3)})")
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
    # G_pred is quoted only where every walk evaluates it: a claim that stopped below the
    # tier just under it reads the same whether or not a full audit computed G_pred anyway
    res = explained_result(ctx) if _stands_below_explained(tier, ctx) else None
    pred = f"; {prediction_text(res)}" if res is not None else ""
    return f"{tier.name}: {tier.claim}; {g}{pred}{assumption_text(ctx)}"


def _stands_below_explained(tier, ctx) -> bool:
    """Whether ``tier`` is the tier right below the one whose check computes G_pred, or
    above it (so every walk reaching ``tier`` evaluated that check)."""
    names = list(ctx.protocol.tier_names)
    holder = next((s.name for s in ctx.protocol.tiers
                   if "gain_explained_by_overlap" in s.checks), None)
    if holder is None or tier.name not in names:
        return False
    return names.index(tier.name) >= names.index(holder) - 1


def assumption_text(ctx) -> str:
    """:func:`assumption_sentences` as the verdict appends them."""
    return "".join(f"; {x}" for x in assumption_sentences(ctx))


def _flagged(ctx, key: str) -> list[str]:
    """A diagnostic's sentence when it is flagged; none where it cannot run."""
    try:
        diag = getattr(ctx, key)
    except Exception:  # noqa: BLE001 - no diagnostic without paired seeds
        return []
    return [DIAGNOSTIC_TEXT[key](diag)] if diag is not None and diag.flagged else []


def assumption_sentences(ctx) -> list[str]:
    """What a gain rests on beyond the test's p, in words from the numbers: the tail_luck
    diagnostic when the policy's runs missed the draws' tail by what may be luck, the
    level_trend diagnostic when the policy's V relative to its draws rises with the seed's
    level, and the shape of d the mean test assumes
    (:func:`evalkit.document.words.shape_text`: below 20 seeds always, from there on a left
    skew of d that Cochran's rule says these seeds are too few for)."""
    out = [text for key in DIAGNOSTICS for text in _flagged(ctx, key)]
    try:
        paired = ctx.paired
    except Exception:  # noqa: BLE001 - no test without paired seeds
        return out
    if paired is None:
        return out
    shape = shape_text(paired.n, paired.floor_state, paired.skewness)
    return out + ([shape] if shape else [])
