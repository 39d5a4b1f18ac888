"""The CI gate's decision: does a claim reach the required tier, did any claim fall below an
earlier audit's tier, and which exit code says so.

``evalkit gate`` parses its options, checks the policy against the campaign's claims, audits
the campaign into the document audit.json holds (or reads a fresh audit.json:
:func:`check_fresh`), calls :func:`decide` on that document and prints the decision's lines: a
one-screen summary, or every check with ``--verbose``.  The decision reads the document only,
and writes into nothing.  A fixed-design gate passes (exit 0) when the claim reaches the tier
and, with
a baseline, no claim ranks below its baseline tier and the protocol's rules (and the audit
seed) are the baseline's; else it fails (exit 1).  ``--sequential`` decides by the
group-sequential test of the mean gain instead (:mod:`evalkit.audit.sequential`; exit 4
while undecided).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from evalkit.audit.sequential import protocol_min_effect, sequential_verdicts
from evalkit.document.rules import protocol_change
from evalkit.document.schema import AUDIT_SCHEMA
from evalkit.document.tiers import (filled_status, reaches, stop_heading, stop_point,
                                    tier_drops, tier_walk)
from evalkit.document.words import pp, vouched_note
from evalkit.errors import EXIT_NOT_REACHED, EXIT_OK, InputError
from evalkit.version import __version__

SUMMARY_CHECKS = 5       # blocking checks the default (one-screen) output lists


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


def _decisive(claim, tier: str, protocol) -> list:
    """The checks that decide whether ``claim`` reaches ``tier``: its tier and below."""
    order = protocol.tier_names
    upto = order[:order.index(tier) + 1]
    return [c for c in claim.checks if c.tier in upto]


def _state(check) -> str:
    state = "pass" if check.passed else ("not evaluable" if check.passed is None else "FAIL")
    if check.passed is None and not check.blocking:
        state += " (noted)"
    return state


def check_lines(claim, tier: str, protocol) -> list[str]:
    """Every check that decides whether ``claim`` reaches ``tier``, with what it expected and
    found (``gate --verbose``)."""
    out = []
    for check in _decisive(claim, tier, protocol):
        out += [f"  [{_state(check)}] {check.tier}/{check.name}",
                f"      expected: {check.expected}",
                f"      found:    {check.found}"]
        if check.blocking and check.recommendation:
            out.append(f"      fix:      {check.recommendation}")
        out += [f"      {line}" for line in campaign_lines(check)]
    return out


ADD_LINES = "add to the campaign file, then sweep again:"


def campaign_lines(check) -> list[str]:
    """The campaign-file lines that would add the runs a not-evaluable check is missing,
    after the step that says where they go (default: add them)."""
    values = check.values or {}
    toml = values.get("campaign_toml") if check.blocking else None
    return [values.get("campaign_step") or ADD_LINES, *toml.splitlines()] if toml else []


def summary_lines(claim, tier: str, protocol, max_checks: int = SUMMARY_CHECKS) -> list[str]:
    """The blocking checks (failed or not evaluable) that decide ``tier``, one line each with
    the fix, then the campaign lines a not-evaluable one needs; and what --verbose adds."""
    decisive = _decisive(claim, tier, protocol)
    blocking = [c for c in decisive if c.blocking]
    out, tables = [], []
    for check in blocking[:max_checks]:
        line = f"  [{_state(check)}] {check.tier}/{check.name}: {check.found}"
        table = tuple(campaign_lines(check))
        if check.recommendation and not table:       # the campaign lines below are its fix
            line += f"; fix: {check.recommendation}"
        out.append(line)
        if table and table not in tables:
            tables.append(table)
    if len(blocking) > max_checks:
        out.append(f"  (+{len(blocking) - max_checks} more blocking checks)")
    for step in dict.fromkeys(t[0] for t in tables):     # the lines of one step together
        out += [f"  {step}", *(f"    {x}" for t in tables if t[0] == step for x in t[1:])]
    passed = sum(1 for c in decisive if c.passed)
    out.append(f"  checks up to {tier}: {passed} passed, {len(blocking)} blocking, "
               f"{len(decisive) - passed - len(blocking)} not evaluable and not blocking; ")
    return out


def _stop_line(claim, tier: str, protocol) -> str:
    """``stops before T (state)`` when the summary below lists the check that stops the walk
    (it says no more than the ``[FAIL] T/check`` line would), else the full stop reason."""
    heading = stop_heading(protocol.tiers, claim.tier_status)
    point = stop_point(protocol.tiers, claim.tier_status, claim.checks)
    if heading is None or point is None:
        return claim.stop_reason
    blocking = [c for c in _decisive(claim, tier, protocol) if c.blocking]
    listed = {(c.tier, c.name) for c in blocking[:SUMMARY_CHECKS]}
    if point["checks"] and (point["tier"], point["checks"][0]) not in listed:
        return claim.stop_reason
    return heading


def effect_line(claim, multiplicity: str, n_tested: int) -> str:
    """G in percentage points with its 95% CI, the p the decision used (adjusted or not) and
    how many seeds favour the policy, from the audit's numbers for the claim."""
    g, ci, p = claim.get("mean_diff"), claim.get("ci"), claim.get("p_adjusted")
    if g is None:
        return "  G: no paired gain (fewer than 2 paired seeds)"
    text = f"  G = {pp(g)} pp"
    if ci and None not in ci:
        text += f" [{pp(ci[0])}, {pp(ci[1])}] (95% CI)"
    if _finite(p):
        if multiplicity == "holm" and n_tested > 1:
            how = f"(Holm-adjusted over {n_tested} claims)"
        elif n_tested > 1:
            how = f"(unadjusted over {n_tested} claims: the protocol's multiplicity is none)"
        else:
            how = "(unadjusted: one claim)"
        text += f"; p = {p:.3g} {how}"
    wins, n = claim.get("wins"), claim.get("n_seeds")
    if wins is not None and n:
        text += f"; {wins} of {n} seeds favour the policy"
    return text


def _finite(x) -> bool:
    return x is not None and math.isfinite(float(x))


def fixed_design_note(doc: dict) -> str | None:
    """A note for a fixed-design gate on a campaign planned as sequential."""
    if ((doc.get("design") or {}).get("sequential")) is None:
        return None
    return ("this campaign was planned as sequential: if it was stopped on its results "
            "(sweep --until-decided), the fixed-n p ignores that; decide with --sequential")


def decide(doc: dict, claim: dict, protocol, tier: str, baseline: Baseline | None = None,
           accept_protocol_change: bool = False, sequential: bool = False,
           min_effect: float | None = None, verbose: bool = False) -> GateDecision:
    """The gate's decision on ``claim`` (one of ``doc["claims"]``) of the audit document
    ``doc`` (the dictionary audit.json holds, of an audit evaluated with ``walk_above=tier``).
    Its lines: a one-screen summary (verdict, G with its CI and p, the blocking checks and
    what to add), every check with ``verbose``."""
    claim = claim_view(claim, protocol)
    if sequential:
        return _sequential(doc, claim, protocol, tier, min_effect, baseline is not None)
    note = fixed_design_note(doc)
    notes = claim.notes + ([note] if note else [])
    order = list(protocol.tier_names)
    ok = reaches(claim.tier, tier, order)
    changed = baseline.changed if baseline is not None else None
    flag = " (protocol changed since the baseline)" if changed else ""
    verdict = claim.verdict
    if ok and claim.underpowered:
        # a mechanism tier passed: say what it claims, never "underpowered ... not
        # significant" in one breath with PASS (the numbers follow on the next line)
        spec = next(t for t in protocol.tiers if t.name == claim.tier)
        verdict = (f"{spec.name}: {spec.claim}; no head-to-head claim against matched random "
                   "(too few seeds for its test)")
    lines = [f"gate {'PASS' if ok else 'FAIL'}{flag}: {claim.regime}/{claim.policy} reached "
             f"{claim.tier or 'no tier'}; required {tier} (alpha = {protocol.alpha:g})",
             f"  {verdict}"]
    tested = [c for c in doc["claims"] if _finite(c.get("p_adjusted"))]
    lines.append(effect_line(claim.numbers, protocol.multiplicity, len(tested)))
    if not ok:
        lines.append(f"  {claim.stop_reason if verbose else _stop_line(claim, tier, protocol)}")
    excluded = [f"  excluded {e['run_id']}: {e['reason']}"
                for e in (doc.get("input") or {}).get("excluded") or []]
    if verbose:
        lines += [f"  note: {n}" for n in notes]
        lines += excluded + check_lines(claim, tier, protocol)
    else:
        # the notes that qualify the decision itself; the others are counted
        caveats = {note, vouched_note(c.name for c in claim.checks if c.vouched)}
        lines += [f"  note: {n}" for n in notes if n in caveats]
        if excluded:
            lines.append(excluded[0] + (f" (+{len(excluded) - 1} more)"
                                        if len(excluded) > 1 else ""))
        lines += summary_lines(claim, tier, protocol)
        lines[-1] += (f"{len(notes)} note(s), {len(excluded)} excluded run(s) "
                      "(--verbose: each check's expected and found, every note and exclusion)")
    drops: list[str] = []
    if baseline is not None:
        drops = tier_drops(baseline.audit, {(c["regime"], c["policy"]): c.get("tier")
                                            for c in doc["claims"]}, order)
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


def is_audit_document(path) -> bool:
    """Whether the gate's INPUT is an audit.json (or a report directory holding one)."""
    p = Path(path)
    return (p.is_file() and p.suffix.lower() == ".json") or (p / "audit.json").is_file()


def check_fresh(doc: dict, path, protocol, seed: int, sequential: bool = False) -> None:
    """Refuse (InputError) an audit.json the gate may not decide on: one not fresh, i.e. not
    written by this evalkit under the protocol rules and seed the gate is given, or one whose
    recorded tiers its checks do not give, so its tiers are the ones a new audit of the same
    runs would reach; with ``sequential``, one without the planned design and each claim's
    per-seed units the sequential test reads."""
    where = str(Path(path) / "audit.json" if Path(path).is_dir() else path)
    redo = "re-run 'evalkit audit RUNS --out DIR' and gate DIR/audit.json, or gate the runs"
    if doc.get("schema") != AUDIT_SCHEMA:
        raise InputError(f"audit document of layout {doc.get('schema')!r}; this evalkit "
                         f"reads {AUDIT_SCHEMA!r}", file=where, column="schema", fix=redo)
    if doc.get("evalkit_version") != __version__:
        raise InputError(f"written by evalkit {doc.get('evalkit_version')}, this is "
                         f"{__version__}: its checks may differ", file=where,
                         column="evalkit_version", fix=redo)
    changed = protocol_change(doc["protocol"], protocol.to_dict())
    if changed:
        raise InputError(f"audited under other rules than the gate's: {changed}", file=where,
                         column="protocol", fix="give the gate the --protocol, --alpha and "
                         f"--accept-vouched the audit used, or {redo}")
    if doc.get("seed") != seed:
        raise InputError(f"audited with --seed {doc.get('seed')}, the gate has --seed {seed}",
                         file=where, column="seed", fix=f"gate with --seed {doc.get('seed')}")
    for i, claim in enumerate(doc["claims"]):
        _check_walk(claim_view(claim), protocol, where, i)
        if sequential and "units" not in claim:
            raise InputError("the claim records no per-seed units for the sequential test",
                             file=where, column=f"claims[{i}].units", fix=redo)
    if sequential and "design" not in doc:
        raise InputError("the document records no planned design", file=where,
                         column="design", fix=redo)


def _check_walk(claim, protocol, where: str, index: int) -> None:
    """The document's tier and tier states must be the ones its checks give under the gate's
    protocol: an edited tier is refused, never taken on the document's word."""
    tier, status, _ = tier_walk(protocol, claim.checks)
    recorded = filled_status(protocol.tiers, claim.tier_status)
    if tier != claim.tier or filled_status(protocol.tiers, status) != recorded:
        raise InputError(f"claim {claim.regime}/{claim.policy} records tier {claim.tier!r}, "
                         f"but its checks reach {tier!r} under the protocol's tier walk",
                         file=where, column=f"claims[{index}].tier",
                         fix="gate the runs, or an audit.json that evalkit audit wrote "
                             "and nobody edited")


def claim_view(c: dict, protocol=None) -> SimpleNamespace:
    """A claim of an audit document read as the gate reads it (attributes; its checks too);
    with ``protocol``, the tiers the walk never evaluated are "not run", never missing."""
    checks = [SimpleNamespace(name=k["name"], tier=k["tier"], passed=k["passed"],
                              evaluable=k["evaluable"], expected=k["expected"],
                              found=k["found"], recommendation=k.get("recommendation", ""),
                              blocking=k["blocking"], vouched=k.get("vouched", False),
                              status=k["status"], values=dict(k.get("values") or {}))
              for k in c.get("checks", [])]
    status = dict(c.get("tier_status") or {})
    return SimpleNamespace(
        regime=c["regime"], policy=c["policy"], tier=c.get("tier"),
        tier_status=filled_status(protocol.tiers, status) if protocol is not None else status,
        verdict=c.get("verdict", ""), stop_reason=c.get("stop_reason", ""),
        underpowered=bool(c.get("underpowered")),
        notes=list(c.get("notes") or []), checks=checks,
        numbers={k: c.get(k) for k in ("mean_diff", "ci", "p_adjusted", "wins", "n_seeds")})


def _sequential(doc: dict, claim, protocol, tier: str, min_effect: float | None,
                with_baseline: bool) -> GateDecision:
    if with_baseline:
        raise InputError("--baseline compares fixed-design tiers; it does not combine with "
                         "--sequential", column="--baseline",
                         fix="drop --baseline, or gate without --sequential")
    if min_effect is None:
        min_effect = protocol_min_effect(protocol)
    verdicts = sequential_verdicts(doc, protocol, tier, min_effect)
    mine = next(v for v in verdicts if (v.regime, v.policy) == (claim.regime, claim.policy))
    lines = mine.lines()
    others = [v for v in verdicts if v is not mine]
    if others:
        lines.append("  other claims: " + "; ".join(f"{v.regime}/{v.policy} {v.decision}"
                                                    for v in others))
    return GateDecision(mine.exit_code, lines)


__all__ = ["Baseline", "GateDecision", "baseline_for", "campaign_lines", "check_fresh",
           "check_lines", "claim_view", "decide", "effect_line", "fixed_design_note",
           "is_audit_document", "summary_lines"]
