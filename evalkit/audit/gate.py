"""The CI gate's decision: does a claim reach the required tier, did any claim fall below an
earlier audit's tier, and which exit code says so.

``evalkit gate`` parses its options, audits the campaign, calls :func:`decide` and prints the
decision's lines.  A fixed-design gate passes (exit 0) when the claim reaches the tier and, with
a baseline, no claim ranks below its baseline tier and the protocol's rules (and the audit
seed) are the baseline's; else it fails (exit 1).  ``--sequential`` decides from the
e-process instead (:mod:`evalkit.audit.sequential`; exit 4 while undecided).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evalkit.audit.protocol_rules import protocol_change
from evalkit.audit.sequential import planned_design, protocol_min_effect, sequential_verdicts
from evalkit.audit.tiers import filled_status, reaches, tier_drops
from evalkit.errors import EXIT_NOT_REACHED, EXIT_OK, InputError


@dataclass(frozen=True)
class Baseline:
    """An earlier audit the gate compares with, checked before the audit runs."""

    audit: dict
    label: str
    changed: str | None          # why the rules differ from the baseline's (None: they do not)


@dataclass
class GateDecision:
    exit_code: int
    lines: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.exit_code == EXIT_OK


def baseline_for(audit: dict, label: str, protocol, seed: int) -> Baseline:
    """The baseline, refused (InputError) when one of its tiers is not in ``protocol``; its
    ``changed`` names a change of the protocol's rules or of the audit seed (the Monte Carlo
    and bootstrap stream is part of the rules: no seed shopping)."""
    tier_drops(audit, {}, list(protocol.tier_names))
    changed = protocol_change(audit["protocol"], protocol.to_dict())
    if audit.get("seed") is not None and audit["seed"] != seed:
        changed = "; ".join(x for x in (changed, f"the audit seed changed ({audit['seed']} -> "
                                                  f"{seed})") if x)
    return Baseline(audit, label, changed)


def check_lines(claim, tier: str, protocol) -> list[str]:
    """The checks that decide whether ``claim`` reaches ``tier``: its tier and below."""
    order = protocol.tier_names
    upto = order[:order.index(tier) + 1]
    out = []
    for check in claim.checks:
        if check.tier not in upto:
            continue
        state = "pass" if check.passed else ("not evaluable" if check.passed is None else "FAIL")
        if check.passed is None and not check.blocking:
            state += " (noted)"
        out += [f"  [{state}] {check.tier}/{check.name}",
                f"      expected: {check.expected}",
                f"      found:    {check.found}"]
        if check.blocking and check.recommendation:
            out.append(f"      fix:      {check.recommendation}")
    return out


def fixed_design_note(result) -> str | None:
    """A note for a fixed-design gate on a campaign planned as sequential."""
    design, _, _ = planned_design(result.campaign)
    if design is None:
        return None
    return ("this campaign was planned as sequential: if it was stopped on its results "
            "(sweep --until-decided), the fixed-n p ignores that; decide with --sequential")


def decide(result, claim, protocol, tier: str, baseline: Baseline | None = None,
           accept_protocol_change: bool = False, sequential: bool = False,
           min_effect: float | None = None) -> GateDecision:
    """The gate's decision on ``claim`` of the audit ``result`` (an
    :class:`evalkit.audit.AuditResult` evaluated with ``walk_above=tier``)."""
    # the walk above the required tier stops where the claim does: the tiers it never
    # evaluated are "not run", never missing
    claim.tier_status = filled_status(protocol.tiers, claim.tier_status)
    if sequential:
        return _sequential(result, claim, protocol, tier, min_effect, baseline is not None)
    note = fixed_design_note(result)
    if note:
        claim.notes.append(note)
    order = list(protocol.tier_names)
    ok = reaches(claim.tier, tier, order)
    changed = baseline.changed if baseline is not None else None
    flag = " (protocol changed since the baseline)" if changed else ""
    lines = [f"gate {'PASS' if ok else 'FAIL'}{flag}: {claim.regime}/{claim.policy} reached "
             f"{claim.tier or 'no tier'}; required {tier} (alpha = {protocol.alpha:g})",
             f"  {claim.verdict}"]
    if not ok:
        lines.append(f"  {claim.stop_reason}")
    lines += [f"  note: {n}" for n in claim.notes]
    lines += [f"  excluded {e['run_id']}: {e['reason']}" for e in result.campaign.excluded]
    lines += check_lines(claim, tier, protocol)
    drops: list[str] = []
    if baseline is not None:
        drops = tier_drops(baseline.audit, {(c.regime, c.policy): c.tier
                                            for c in result.claims}, order)
        n_tier = len(drops)
        if changed and not accept_protocol_change:
            drops.append(f"protocol: {changed}; tiers reached under other rules are not "
                         "comparable (pass --accept-protocol-change if the change is intended)")
        lines.append(f"baseline {'FAIL' if drops else 'PASS'}: {len(baseline.audit['claims'])} "
                     f"claim(s) of {baseline.label} compared; {n_tier} fell below their "
                     "baseline tier" + ("; the protocol's rules changed" if changed else ""))
        lines += [f"  {d}" for d in drops]
        if changed and accept_protocol_change:
            lines.append(f"  note: {changed} (accepted: --accept-protocol-change)")
    return GateDecision(EXIT_OK if ok and not drops else EXIT_NOT_REACHED, lines)


def _sequential(result, claim, protocol, tier: str, min_effect: float | None,
                with_baseline: bool) -> GateDecision:
    if with_baseline:
        raise InputError("--baseline compares fixed-design tiers; it does not combine with "
                         "--sequential", column="--baseline",
                         fix="drop --baseline, or gate without --sequential")
    if min_effect is None:
        min_effect = protocol_min_effect(protocol)
    verdicts = sequential_verdicts(result, protocol, tier, min_effect)
    mine = next(v for v in verdicts if (v.regime, v.policy) == (claim.regime, claim.policy))
    lines = mine.lines()
    others = [v for v in verdicts if v is not mine]
    if others:
        lines.append("  other claims: " + "; ".join(f"{v.regime}/{v.policy} {v.decision}"
                                                    for v in others))
    return GateDecision(mine.exit_code, lines)


__all__ = ["Baseline", "GateDecision", "baseline_for", "check_lines", "decide",
           "fixed_design_note"]
