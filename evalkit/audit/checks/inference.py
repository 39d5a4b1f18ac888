"""Inference checks of the head-to-head comparison: enough independent seeds, and a gain that is
significant and at least the smallest effect of interest."""

from __future__ import annotations

from evalkit.audit.checks.core import Outcome, Status, _fmt, check, not_evaluable
from evalkit.audit.verdicts import power
from evalkit.document.words import is_negligible, pp, worse_words

__all__ = ["enough_seeds", "gain_significant"]

TIER = "matched_budget"
_NUM = (int, float)


@check("enough_seeds", params={"min_seeds": ((int,), 5)}, tier=TIER)
def enough_seeds(ctx, spec) -> Outcome:
    n = ctx.informative_n
    needed = max(spec["min_seeds"], ctx.seeds_needed)
    dup = ctx.pseudo_replicates
    note = (f"; {len(dup)} seed(s) replay another seed's trace realisation and count once "
            f"({', '.join(f'{a} = {b}' for a, b in dup[:4])})") if dup else ""
    tied = ctx.effective_n - n
    if tied:
        note += (f"; {tied} seed(s) whose policy run and draws have the same V cannot move the "
                 "test and do not count")
    expected = (f">= {needed} independent paired seeds (protocol minimum {spec['min_seeds']}; "
                f"the {ctx.test_name} needs {ctx.seeds_needed} to reach alpha = "
                f"{ctx.alpha:g} {ctx.alternative})")
    values = {"n": n, "needed": needed, "min_seeds": spec["min_seeds"],
              "seeds_needed": ctx.seeds_needed, "pseudo_replicates": len(dup), "tied": tied}
    if n >= needed:
        return Outcome(True, expected, f"{n} independent paired seeds{note}", values=values)
    if n < 2:
        return Outcome(False, expected, f"{n} independent paired seed(s){note}: no paired test "
                       "possible", f"replay the policy and K-matched random draws for >= "
                       f"{needed} seeds, each on its own trace realisation", values=values)
    pw = power(ctx, min_seeds=spec["min_seeds"])
    rule = pw.text or (f"smallest sign-flip {ctx.alternative} p = "
                       f"{_fmt(ctx.design_min_p)}")
    return Outcome(False, expected, f"underpowered: {rule}{note}",
                   f"underpowered: needs >= {needed} seeds", status=Status.UNDERPOWERED,
                   values=dict(values, rule=pw.rule, min_p=pw.min_p))


@check("gain_significant", params={"min_effect": (_NUM, 0.005)}, tier=TIER)
def gain_significant(ctx, spec) -> Outcome:
    n = ctx.effective_n
    holm = " Holm-adjusted" if ctx.protocol.multiplicity == "holm" else ""
    expected = (f"{holm} {ctx.alternative} p <= {ctx.alpha:g} and mean d >= "
                f"{pp(float(spec['min_effect']), signed=False)} pp (the smallest effect of "
                f"interest; "
                f"{ctx.test_name})").strip()
    if n < 2:
        return not_evaluable(expected, f"{n} paired seed(s): no paired test possible",
                             "replay the policy and its matched-random draws for >= "
                             f"{ctx.seeds_needed} seeds")
    sf = ctx.sign_flip
    p_adj = ctx.p_adjusted
    wins = int((ctx.d > 0).sum())
    adjusted = ", adjusted " + _fmt(p_adj) if holm else ""
    found = (f"mean d = {pp(sf.statistic)} pp [{pp(sf.ci_low)}, {pp(sf.ci_high)}], policy "
             f"better in {wins}/{sf.n} seeds, p = {_fmt(sf.p_value)}{adjusted}"
             f" ({ctx.paired.reference})")
    min_effect = float(spec["min_effect"])
    values = {"mean_d": sf.statistic, "ci": [sf.ci_low, sf.ci_high], "p": sf.p_value,
              "p_adjusted": p_adj, "min_p": sf.min_p, "wins": wins, "n": sf.n,
              "alpha": ctx.alpha, "min_effect": min_effect}
    if sf.min_p > ctx.alpha:
        return Outcome(False, expected, f"underpowered: smallest sign-flip p = {_fmt(sf.min_p)}"
                       f" > alpha with n = {n} (seeds whose runs tie cannot count); " + found,
                       f"underpowered: needs >= {ctx.seeds_needed} seeds",
                       status=Status.UNDERPOWERED, values=values)
    if p_adj <= ctx.alpha and sf.statistic > 0:
        if is_negligible(sf.statistic, min_effect):
            return Outcome(False, expected, f"negligible: significant but G = "
                           f"{pp(sf.statistic)} pp is below the smallest effect of interest "
                           f"{pp(min_effect, signed=False)} pp (protocol min_effect); " + found,
                           "a gain this small does not matter in practice; do not claim it",
                           status=Status.NEGLIGIBLE, values=values)
        return Outcome(True, expected, found, values=values)
    if sf.statistic <= 0 and p_adj <= ctx.alpha:
        return Outcome(False, expected, found + f": the policy is {worse_words()}",
                       "do not claim an improvement", values=values)
    return Outcome(False, expected, found + ": not significant",
                   "no evidence the policy beats random placement of the same budget; more "
                   "seeds only help if the effect is real", values=values)
