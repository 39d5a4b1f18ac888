"""Evaluate every claim of a campaign against a protocol: evidence, checks, tier reached.

The tier rule (walk, claim floor, ladder) is :mod:`evalkit.document.tiers`; the evidence is
:mod:`evalkit.audit.evidence`, what one claim's checks see :mod:`evalkit.audit.context`, the
checks :mod:`evalkit.audit.checks`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np
import pandas as pd

from evalkit.audit import verdicts
from evalkit.audit.checks.core import Check, Status, run_check
from evalkit.audit.checks.plan import campaign_plan, planned_claims
from evalkit.audit.context import ClaimContext
from evalkit.audit.evidence import BASELINE, RegimeEvidence
from evalkit.audit.transfer_evidence import TransferEvidence
from evalkit.audit.protocol import Protocol
from evalkit.audit.slo_breakdown import slo_breakdown
from evalkit.audit.runset import ClaimData, RunSet
from evalkit.document import tiers as T
from evalkit.document.schema import DIAGNOSTICS
from evalkit.document.words import DIAGNOSTIC_TEXT, p_value, vouched_note
from evalkit.errors import InputError
from evalkit.stats import holm

__all__ = ["ClaimResult", "evaluate_claims"]




@dataclass
class ClaimResult:
    regime: str
    policy: str
    data: ClaimData
    ctx: ClaimContext
    checks: list[Check]
    tier: str | None
    tier_status: dict
    stop_reason: str
    verdict: str
    notes: list[str] = field(default_factory=list)
    claim_status: str = ""          # supported / underpowered / not supported (document.tiers)
    ladder: list = field(default_factory=list)      # document.tiers.Rung per tier
    stop: dict | None = None        # where the walk stops: {tier, state, checks}

    @property
    def sign_flip(self):
        try:
            return self.ctx.sign_flip if self.ctx.effective_n >= 2 else None
        except InputError:
            return None

    @property
    def pre_registered(self) -> bool:
        """The runs directory has a campaign plan (verified by the plan checks)."""
        return campaign_plan(self.ctx.runset) is not None

    @property
    def underpowered(self) -> bool:
        return any(c.blocking and c.status is Status.UNDERPOWERED for c in self.checks)

    @property
    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if c.blocking]

    def per_seed(self) -> pd.DataFrame:
        table = self.data.per_seed_table()
        runs = self.ctx.runset.runs.set_index("run_id")
        table["exposure_policy"] = [float(runs.loc[r, "exposure_requests"])
                                    for r in table.policy_run]
        table["exposure_mr"] = [float(p.draws.exposure_requests.astype(float).mean())
                                if len(p.draws) else np.nan for p in self.data.pairs]
        table["vex_policy"] = table.v_policy - table.v_no_sync
        return table

    def effect_numbers(self) -> dict:
        """G (``mean_diff``), its ``ci``, ``p_adjusted``, ``wins`` and ``n_seeds``: the
        numbers a one-line summary of the claim gives (also in :meth:`to_dict`)."""
        sf = self.sign_flip
        d = self.ctx.d if self.ctx.effective_n >= 2 else np.array([])
        return {"n_seeds": len(self.data.paired), "wins": int((d > 0).sum()),
                "mean_diff": float(np.mean(d)) if d.size else None,
                "ci": [sf.ci_low, sf.ci_high] if sf is not None else None,
                "p_adjusted": self.ctx.p_adjusted if sf is not None else None}

    def to_dict(self) -> dict:
        sf = self.sign_flip
        numbers = self.effect_numbers()
        return {
            "regime": self.regime, "policy": self.policy, "baseline": BASELINE,
            "n_seeds": numbers["n_seeds"], "seeds": [int(s) for s in self.data.seeds],
            "effective_n": self.ctx.effective_n,
            "pseudo_replicates": [{"seed": a, "same_requests_as_seed": b}
                                  for a, b in self.ctx.pseudo_replicates],
            "test": self.ctx.test_name,
            "draws_per_seed": [int(x) for x in self.ctx.draws_per_seed],
            "design_min_p": self.ctx.design_min_p,
            "null_size": sf.null_size if sf is not None else None,
            "method": sf.method if sf is not None else None,
            "vouched": sorted(c.name for c in self.checks if c.vouched),
            "exclusions": [e for e in self.ctx.runset.excluded
                           if e.get("regime") is None or (
                               e.get("regime") == self.regime and (
                                   e.get("role") == "no_sync"
                                   or self.policy in (e.get("policy"), e.get("matched_to"))))],
            "wins": numbers["wins"], "mean_diff": numbers["mean_diff"], "ci": numbers["ci"],
            "ci_method": sf.ci_method if sf is not None else None,
            "p_one_sided": sf.p_greater if sf is not None else None,
            "p_two_sided": sf.p_two_sided if sf is not None else None,
            "p_adjusted": numbers["p_adjusted"],
            "exact": None,              # the p is the floored t-test's (claim["floor"])
            "floor": _floor_dict(self.ctx) if sf is not None else None,
            "min_p": sf.min_p if sf is not None else None,
            "seeds_needed": self.ctx.seeds_needed,
            "power": _power_dict(self.ctx),
            "skewness": _diagnostic(lambda: self.ctx.paired.skewness)
            if sf is not None else None,
            "exchangeability": _exchangeability_dict(self.ctx),
            **{key: _diagnostic_dict(self.ctx, key) for key in DIAGNOSTICS},
            "assumptions": verdicts.assumption_sentences(self.ctx) if sf is not None else [],
            "tier": self.tier, "tier_status": self.tier_status,
            "stop_reason": self.stop_reason, "verdict": self.verdict,
            "claim_status": self.claim_status, "ladder": [r.to_dict() for r in self.ladder],
            "stop": self.stop,
            "oracle": self.data.oracle, "underpowered": self.underpowered,
            "pre_registered": self.pre_registered,
            "checks": [c.to_dict() for c in self.checks], "notes": self.notes,
            "per_seed": self.per_seed().to_dict("records"),
            "units": self.units(),
            "slo_breakdown": slo_breakdown(self.ctx.runset.runs, self.data),
        }

    def units(self) -> list[dict]:
        """The independent paired seeds the tests use, in seed order: each one's policy V
        and its draws' V (what the sequential gate's test reads from the document)."""
        return [{"seed": int(u.seed), "v_policy": float(u.v_policy),
                 "v_draws": [float(v) for v in u.draws.violation_rate]}
                for u in self.ctx.units]


def _diagnostic(get):
    """A diagnostic of the claim, or None where its test cannot run (too few seeds)."""
    try:
        return get()
    except InputError:
        return None


def _exchangeability_dict(ctx) -> dict | None:
    res = _diagnostic(lambda: ctx.exchangeability)
    if res is None:
        return None
    return {"name": "exchangeability", "test": "within-seed relabelling (raw mean)",
            "null": "the policy run is exchangeable with its seed's draws",
            "p_two_sided": res.p_two_sided, "exact": res.exact, "blocking": False}


def _floor_dict(ctx) -> dict | None:
    res = _diagnostic(lambda: ctx.paired)
    return None if res is None else res.floor_dict()


def _diagnostic_dict(ctx, key: str) -> dict | None:
    """A non-blocking diagnostic (:data:`evalkit.document.schema.DIAGNOSTICS`) as recorded."""
    res = _diagnostic(partial(getattr, ctx, key))
    return None if res is None else dict(res.to_dict(), sentence=DIAGNOSTIC_TEXT[key](res),
                                         blocking=False)


def _power_dict(ctx) -> dict | None:
    try:
        return verdicts.power(ctx).to_dict()
    except Exception:  # noqa: BLE001 - no design to speak of (no paired seeds)
        return None


def _verdict(result_tier: str | None, protocol: Protocol, claim: ClaimData, checks, reason,
             ctx: ClaimContext) -> str:
    """The one-line verdict, its words chosen by the numbers (:mod:`evalkit.audit.verdicts`)."""
    under = [c for c in checks if c.blocking and c.status is Status.UNDERPOWERED]
    negligible = [c for c in checks if c.blocking and c.status is Status.NEGLIGIBLE]
    prefix = "oracle bound (never deployable): " if claim.oracle else ""
    if not T.licenses_claim(protocol.tiers, result_tier):
        if under:
            return verdicts.underpowered_verdict(ctx, prefix)
        if negligible:
            return prefix + negligible[0].found + "; no claim beyond the mechanism tiers"
        head = "no claim supported" if result_tier is None else (
            f"mechanism only ({protocol.tier(result_tier).claim}); no win over matched random")
        return prefix + head
    return prefix + verdicts.tier_sentence(protocol.tier(result_tier), ctx)


def _walk_goes_on(protocol: Protocol, tier, checks: list[Check]) -> bool:
    """Whether the tier walk, having evaluated ``tier``, may still go on to the next tier."""
    return T.goes_on(T.tier_state([c for c in checks if c.tier == tier.name]), tier)


def _claim_checks(ctx: ClaimContext, protocol: Protocol,
                  walk_above: str | None) -> tuple[Protocol, list[Check]]:
    """The claim's checks, tier by tier.  With ``walk_above``, tiers above it are evaluated
    only while the walk goes on: a tier above the one it stops at cannot be reached, so its
    evidence (the calibrated tier's isotonic psi, say) is never computed.  Returns the
    protocol cut to the tiers evaluated, and their checks."""
    names = protocol.tier_names
    floor = names.index(protocol.tier(walk_above).name) if walk_above is not None else None
    checks: list[Check] = []
    for i, tier in enumerate(protocol.tiers):
        checks += [run_check(name, tier.name, ctx, protocol.checks[name])
                   for name in tier.checks]
        if floor is not None and i >= floor and not all(
                _walk_goes_on(protocol, t, checks) for t in protocol.tiers[:i + 1]):
            return replace(protocol, tiers=protocol.tiers[:i + 1]), checks
    return protocol, checks


def evaluate_claims(runset: RunSet, claims: list[ClaimData], protocol: Protocol,
                    seed: int = 0, max_tier: str | None = None,
                    walk_above: str | None = None) -> list[ClaimResult]:
    """Evaluate every claim.  ``max_tier`` leaves out the checks of higher tiers, so the tier
    reached is capped there and their evidence is never computed.  ``walk_above`` (the gate)
    evaluates every tier up to it and higher ones while the tier walk goes on: the tier
    reached is the full audit's, but no evidence is computed for tiers it cannot reach."""
    if max_tier is not None:
        protocol = protocol.up_to(max_tier)
    regimes = {r: RegimeEvidence(runset, r) for r in sorted({c.regime for c in claims})}
    transfer = TransferEvidence(runset, seed, protocol.bootstrap_resamples)
    contexts = [ClaimContext(c, runset, protocol, regimes[c.regime], transfer, seed)
                for c in claims]
    # multiplicity: one p per testable claim, for the protocol's alternative
    testable = []
    for ctx in contexts:
        if ctx.effective_n >= 2:
            try:
                testable.append((ctx, ctx.sign_flip.p_value))
            except InputError:
                pass
    # the family is the plan's claims: a planned claim without a testable result stays in it
    # (p = 1) rather than leaving it, so deleting the losers' runs buys nothing
    plan = campaign_plan(runset)
    present = {(ctx.claim.regime, ctx.claim.policy) for ctx, _ in testable}
    missing = [c for c in planned_claims(plan) if c not in present] if plan else []
    if testable:
        pvals = np.array([p for _, p in testable] + [1.0] * len(missing))
        if protocol.multiplicity == "holm" and len(pvals) > 1:
            adjusted = holm(pvals, alpha=protocol.alpha)[1]
        else:
            adjusted = pvals
        for (ctx, _), adj in zip(testable, adjusted):
            ctx.p_adjusted = float(adj)
    results = []
    for ctx in contexts:
        walked, checks = _claim_checks(ctx, protocol, walk_above)
        tier, status, reason = T.tier_walk(walked, checks)
        status = T.filled_status(protocol.tiers, status)    # tiers above a cut walk: not run
        skipped = {t.name for t in walked.tiers
                   if t.skip_if_not_evaluable and status[t.name] == "not_evaluable"}
        checks = [replace(c, blocking=False) if c.tier in skipped else c for c in checks]
        notes = []
        vouched = [c.name for c in checks if c.vouched]
        if vouched:
            notes.append(vouched_note(vouched))
        if ctx.pseudo_replicates:
            notes.append(f"effective n = {ctx.effective_n} of {len(ctx.claim.paired)} paired "
                         "seeds: seeds that replay another seed's requests count once ("
                         + ", ".join(f"seed {a} = seed {b}" for a, b in ctx.pseudo_replicates[:6])
                         + ")")
        exch = _diagnostic(lambda: ctx.exchangeability)
        if exch is not None:
            notes.append("exchangeability (diagnostic, not the claim's test): the within-seed "
                         "relabelling test of 'the policy run looks like one more draw' gives "
                         f"two-sided p = {p_value(exch.p_value)}; the claim is tested on the "
                         "mean of d over seeds")
        for key in DIAGNOSTICS:
            diag = _diagnostic(partial(getattr, ctx, key))
            text = "" if diag is None else DIAGNOSTIC_TEXT[key](diag)
            if text:
                notes.append(text)
        if ctx.claim.generic_draws:
            notes.append("matched-random rows without matched_to serve every policy of the "
                         "regime: the input vouches that their K matches this policy's K")
        if campaign_plan(ctx.runset) is None:
            notes.append("not pre-registered: no campaign plan (plan.json) fixed before the "
                         "runs, so the claim cannot reach deployable")
        if ctx.claim.oracle:
            notes.append("oracle policy: a bound on what placement can achieve, never a "
                         "deployable controller")
        result = ClaimResult(
            regime=ctx.claim.regime, policy=ctx.claim.policy, data=ctx.claim, ctx=ctx,
            checks=checks, tier=tier, tier_status=status, stop_reason=reason,
            verdict=_verdict(tier, protocol, ctx.claim, checks, reason, ctx), notes=notes,
            ladder=T.ladder(protocol.tiers, status, tier),
            stop=T.stop_point(protocol.tiers, status, checks))
        result.claim_status = T.claim_status(protocol.tiers, tier, result.underpowered)
        results.append(result)
    return results
