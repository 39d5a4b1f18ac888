"""Sequential verdicts: decide a claim from the anytime-valid e-process, seed batch by batch.

A campaign planned as sequential (``[design] kind = "sequential"`` in the campaign TOML,
recorded in the runs directory's ``plan.json`` before the first run) may be looked at after
every batch of seeds and stopped as soon as each claim is decided, because the test is
:func:`evalkit.stats.sequential.anytime_test`: its e-process crosses ``1/alpha`` under the
null with probability <= alpha however often one looks.  Per claim:

- **pass**: the e-process reached ``k / alpha`` (k claims in the campaign: Bonferroni over
  claims, valid for e-values) with a positive mean gain, and every other check of the tier
  (and the tiers below it) passes;
- **fail**: a blocking check other than the fixed-n significance and seed-count checks, or
  the e-process crossed with a negative gain (the policy is worse than random placement);
- **futile**: the confidence sequence's upper bound lies below the smallest effect of
  interest (more seeds will not show an effect that large);
- **exhausted**: the plan's ``max_seeds`` seeds ran without a decision;
- **continue**: none of these yet: run the next batch.

A campaign without a plan, or planned as fixed, gets no sequential verdict (``refused``): its
seed count was fixed in advance and nothing licenses stopping on the e-process; nor does a
campaign whose audit alpha differs from the alpha its plan fixed.  Seeds enter the e-process
in the plan's seed order (the order batches run in), never sorted by outcome.

The verdicts are a function of the audit document: its ``design`` (the plan's design and seed
order) and each claim's ``units`` (every independent seed's policy V and its draws' V) and
``checks``, so the gate decides on ``evalkit gate RUNS`` and on an audit.json alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace

from evalkit.document.words import EFFECT_TOL, pp, worse_words
from evalkit.errors import EXIT_CONTINUE, EXIT_NOT_REACHED, EXIT_OK, InputError
from evalkit.stats.sequential import anytime_test

__all__ = ["SequentialVerdict", "protocol_min_effect", "sequential_verdicts", "verdict_for"]

# the e-process's false "worse" rate on equal means (fixed schedule, bursty V; issue 32's
# independent check): far above 1.5 x nominal, so its negative crossings read "not better"
E_PROCESS_FALSE_WORSE = 0.59

# the fixed-n checks the e-process replaces
REPLACED_CHECKS = ("gain_significant", "enough_seeds")
DECISIONS = ("pass", "fail", "futile", "exhausted", "continue", "refused")


@dataclass
class SequentialVerdict:
    regime: str
    policy: str
    decision: str                    # one of DECISIONS
    reason: str
    n_seeds: int = 0
    max_seeds: int | None = None
    alpha: float = math.nan          # the plan's alpha
    claims: int = 1                  # Bonferroni factor over the campaign's claims
    min_effect: float = 0.0
    result: object = None            # SequentialResult, when the test ran
    seeds: list = field(default_factory=list)
    blocking: list = field(default_factory=list)   # Check objects that block the tier

    @property
    def decided(self) -> bool:
        return self.decision != "continue"

    @property
    def exit_code(self) -> int:
        return {"pass": EXIT_OK, "continue": EXIT_CONTINUE}.get(self.decision,
                                                                 EXIT_NOT_REACHED)

    def lines(self) -> list[str]:
        out = [f"sequential {self.decision.upper()}: {self.regime}/{self.policy}: {self.reason}"]
        r = self.result
        if r is not None:
            shown = ", ".join(f"{e:.3g}" for e in r.e_process[-12:])
            more = "... " if len(r.e_process) > 12 else ""
            out.append(f"  e-process over {r.n} seeds (plan order {self.seeds[:12]}"
                       f"{' ...' if len(self.seeds) > 12 else ''}): {more}{shown}")
            out.append(f"  threshold {r.threshold:g} = {self.claims} claim(s) / alpha "
                       f"{self.alpha:g}; max e = {r.e_max:.4g}, anytime-valid p = "
                       f"{r.p_value:.4g}; mean gain d = {pp(r.statistic)} pp, "
                       f"{1 - r.alpha:.4g} confidence sequence [{_bound(r.ci_low)}, "
                       f"{_bound(r.ci_high)}] pp; smallest effect of interest "
                       f"{pp(self.min_effect, signed=False)} pp")
        for c in self.blocking:
            out.append(f"  [FAIL] {c.tier}/{c.name}: {c.found}")
        return out


def _bound(x: float) -> str:
    """A confidence-sequence bound in pp; an unbounded side stays infinite."""
    return "-inf" if x == -math.inf else "+inf" if x == math.inf else pp(x)


def protocol_min_effect(protocol) -> float:
    """The protocol's smallest effect of interest (``gain_significant.min_effect``, V units;
    0 when the protocol sets none): the futility bound when none is given."""
    spec = protocol.checks.get("gain_significant")
    return float(spec.params.get("min_effect", 0.0)) if spec is not None else 0.0


def _claim_data(claim, order: list[int]):
    """Policy V (n,) and draws (n lists) of the claim's independent seeds in plan order
    (``claim``: an audit.json claim with its ``units``)."""
    units = {int(u["seed"]): u for u in claim["units"]}
    seeds = [s for s in order if s in units] + sorted(set(units) - set(order))
    pol = [units[s]["v_policy"] for s in seeds]
    draws = [units[s]["v_draws"] for s in seeds]
    return seeds, pol, draws


def verdict_for(claim, protocol, tier: str, design, order, n_claims: int,
                min_effect: float) -> SequentialVerdict:
    alpha = float(design["alpha"])
    max_seeds = design.get("max_seeds")
    base = dict(regime=claim["regime"], policy=claim["policy"], alpha=alpha, claims=n_claims,
                max_seeds=max_seeds, min_effect=float(min_effect))
    if not math.isclose(alpha, protocol.alpha):
        return SequentialVerdict(decision="refused", reason=(
            f"the audit's alpha {protocol.alpha:g} is not the plan's {alpha:g}"), **base)
    upto = protocol.tier_names[:protocol.tier_names.index(tier) + 1]
    blocking = [SimpleNamespace(**c) for c in claim["checks"]
                if c["blocking"] and c["tier"] in upto and c["name"] not in REPLACED_CHECKS]
    seeds, pol, draws = _claim_data(claim, order)
    base.update(n_seeds=len(seeds), seeds=seeds, blocking=blocking)
    if len(seeds) < 1:
        return SequentialVerdict(decision="continue", reason="no paired seed yet", **base)
    if max_seeds is not None and len(seeds) > int(max_seeds):
        return SequentialVerdict(decision="refused", reason=(
            f"{len(seeds)} seeds but the plan allows at most {max_seeds}"), **base)
    res = anytime_test(pol, draws, protocol.alternative, alpha / n_claims)
    base["result"] = res
    if blocking:
        return SequentialVerdict(decision="fail", reason=(
            f"{len(blocking)} check(s) up to {tier} block: "
            + ", ".join(c.name for c in blocking)), **base)
    if res.rejected and res.statistic > 0 and res.statistic < min_effect - EFFECT_TOL:
        return SequentialVerdict(decision="fail", reason=(
            f"negligible: the e-process reached {res.threshold:g} after {res.crossed_at} "
            f"seed(s), but the mean gain {pp(res.statistic)} pp is below the smallest effect "
            f"of interest {pp(min_effect, signed=False)} pp"), **base)
    if res.rejected and res.statistic > 0:
        return SequentialVerdict(decision="pass", reason=(
            f"the e-process reached {res.threshold:g} after {res.crossed_at} seed(s) with a "
            f"positive mean gain: the policy beats matched random"), **base)
    if res.rejected:
        return SequentialVerdict(decision="fail", reason=(
            f"the e-process reached {res.threshold:g} after {res.crossed_at} seed(s) with a "
            f"negative mean gain: the policy is {worse_words(E_PROCESS_FALSE_WORSE)}"), **base)
    if res.futile(min_effect):
        return SequentialVerdict(decision="futile", reason=(
            f"the confidence sequence's upper bound {pp(res.ci_high)} pp is below the "
            f"smallest effect of interest {pp(min_effect, signed=False)} pp: more seeds will "
            "not show it"), **base)
    if max_seeds is not None and len(seeds) >= int(max_seeds):
        return SequentialVerdict(decision="exhausted", reason=(
            f"all {max_seeds} planned seeds ran and the e-process stayed below "
            f"{res.threshold:g} (max {res.e_max:.4g})"), **base)
    return SequentialVerdict(decision="continue", reason=(
        f"max e = {res.e_max:.4g} < {res.threshold:g} after {len(seeds)} seed(s)"
        + (f" of at most {max_seeds}" if max_seeds is not None else "")
        + ": run more seeds"), **base)


def sequential_verdicts(doc: dict, protocol, tier: str, min_effect: float = 0.0
                        ) -> list[SequentialVerdict]:
    """A verdict for every claim of an audit document (the dictionary audit.json holds)."""
    design = doc.get("design")
    if design is None or any("units" not in c for c in doc["claims"]):
        raise InputError("the audit document records no planned design or per-seed units "
                         "(it was written before the sequential gate read documents)",
                         column="design", fix="re-run 'evalkit audit RUNS --out DIR' and gate "
                         "DIR/audit.json, or gate the runs directory")
    if design["sequential"] is None:
        return [SequentialVerdict(regime=c["regime"], policy=c["policy"], decision="refused",
                                  reason=f"no sequential verdict: {design['why_not']}")
                for c in doc["claims"]]
    n_claims = max(1, len(doc["claims"]))
    return [verdict_for(c, protocol, tier, design["sequential"], design["seed_order"],
                        n_claims, min_effect)
            for c in doc["claims"]]
