"""The report's first screen, computed from ``audit.json`` alone: one plain sentence per claim
and the tier ladder.

Everything here reads the audit dictionary defensively: keys the audit may or may not carry
(``test``, ``effective_n``, ``exclusions``) are used when present and skipped when absent.
The parts are plain strings; the templates escape them for HTML or Markdown.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evalkit.document import tiers as T
from evalkit.document import words as wording
from evalkit.document.words import num, p_value, pp

__all__ = ["STATES", "blocker_phrase", "effect_text", "headline", "headlines", "ladder"]

# ladder states: (css class, text, symbol for Markdown)
STATES = {
    "passed": ("passed", "passed", "\u2705"),
    "failed": ("failed", "failed", "\u274c"),
    "skipped": ("skipped", "skipped", "\u23ed\ufe0f"),
    "not_evaluable": ("not-evaluable", "not evaluable", "\u2754"),
    "not_run": ("not-run", "not run", "\u2796"),
}


@dataclass
class Rung:
    tier: str
    state: str            # key of STATES
    reached: bool         # the claim's tier
    beyond: bool          # above the tier where the walk stopped: not claimed whatever it says

    @property
    def css(self) -> str:
        return STATES[self.state][0]

    @property
    def text(self) -> str:
        return STATES[self.state][1]

    @property
    def symbol(self) -> str:
        return STATES[self.state][2]


@dataclass
class Headline:
    policy: str
    regime: str
    status: str                 # "supported" | "not supported" | "underpowered"
    tier: str | None
    tier_claim: str
    effect: str                 # "G = +0.78 pp [+0.36, +1.21] (95% CI)"
    direction: str              # "fewer" / "more" / ""
    test: str                   # "p = 0.012 (two-sided, exact sign-flip test, Holm over 6 claims)"
    test_name: str              # "sign-flip", "within-seed permutation"
    seeds: str                  # "10 of 10 seeds favour the policy"
    stop: str                   # why not higher ("" when every tier passed)
    oracle: bool
    ladder: list[Rung] = field(default_factory=list)
    vouched: str = ""           # checks the user vouched for (--accept-vouched), not verified
    exclusions: list[dict] = field(default_factory=list)   # {run_id, seed, reason}

    @property
    def status_css(self) -> str:
        return self.status.replace(" ", "-")

    def sentence(self) -> str:
        """The whole sentence as plain text (terminal, tests)."""
        head = f"{self.policy} ({self.regime}): {self.status}"
        if self.tier and self.status == "supported":
            head += f" at tier {self.tier}"
        parts = [head, self.effect, self.test, self.seeds]
        text = "; ".join(p for p in parts if p) + "."
        text += f" Vouched, not verified: {self.vouched}." if self.vouched else ""
        return text + (f" Not higher: {self.stop}." if self.stop else "")


def tier_names(audit: dict) -> list[str]:
    return [t["name"] for t in audit.get("protocol", {}).get("tiers", [])]


def _tiers(audit: dict) -> list[dict]:
    return audit.get("protocol", {}).get("tiers", [])


def claim_floor(audit: dict) -> int:
    """Index of the first tier that licenses a claim about the policy
    (:func:`evalkit.document.tiers.claim_floor`)."""
    return T.claim_floor(_tiers(audit))


def ladder(claim: dict, audit: dict) -> list[Rung]:
    """The tier ladder the audit recorded (``ladder``); for a document without one, the same
    ladder from its ``tier_status`` (:func:`evalkit.document.tiers.ladder`)."""
    rungs = claim.get("ladder")
    if rungs is None:
        rungs = [r.to_dict() for r in T.ladder(_tiers(audit), claim.get("tier_status") or {},
                                               claim.get("tier"))]
    return [Rung(r["tier"], r["state"], bool(r["reached"]), bool(r["beyond"])) for r in rungs]


def _blockers(claim: dict, tier: str) -> list[dict]:
    return [c for c in claim.get("checks", []) if c.get("tier") == tier and c.get("blocking")]


def _p_of(claim: dict):
    p = claim.get("p_adjusted")
    return None if p is None else float(p)


def power_clause(claim: dict, alpha) -> str:
    """Which seed rule keeps the claim underpowered, with its numbers and without a second
    p-value (the smallest attainable p is in the detail)."""
    pw = claim.get("power") or {}
    n = pw.get("n", claim.get("n_seeds"))
    needed, floor = claim.get("seeds_needed"), pw.get("min_seeds")
    reach = (f"{n} seeds cannot reach alpha = {num(alpha)}, " if n is not None else "") + \
        f"needs >= {needed} seeds"
    below = f"{n} seeds are below the protocol's minimum of {floor}"
    rule = pw.get("rule")
    if rule == "protocol_minimum":
        return below
    if rule == "both":
        return f"{below}, and {reach}"
    return reach


def blocker_phrase(check: dict, claim: dict, alpha) -> str:
    """A short clause on what a blocking check means for this claim, derived from the
    claim's numbers where it is about one (the check's full finding is in the detail)."""
    name = str(check.get("name"))
    if check.get("passed") is None:
        values = check.get("values") or {}
        missing = values.get("missing_policies") or values.get("missing_backends")
        if missing:         # the campaign never planned them; the detail gives its lines
            return (f"{name} not evaluable: add {' or '.join(map(str, missing))} runs to the "
                    "campaign")
        return f"{name} not evaluable"
    if name == "gain_significant":
        if claim.get("underpowered"):
            return f"underpowered: {power_clause(claim, alpha)}"
        state = wording.gain_state(claim.get("mean_diff"), _p_of(claim), alpha)
        return f"gain_significant: the policy is {wording.gain_words(state)}"
    if name == "enough_seeds":
        return f"enough_seeds: {power_clause(claim, alpha)}"
    if name == "gain_explained_by_overlap":
        return "gain_explained_by_overlap: request overlap does not explain G"
    return CHECK_PHRASES.get(name, f"{name} failed")


CHECK_PHRASES = {
    "k_match": "k_match: the draws' K differs from the policy's",
    "load_match": "load_match: runs not load-matched to their seed's no-sync run",
    "no_sync_present": "no_sync_present: no-sync runs missing",
    "matched_random_present": "matched_random_present: matched-random draws missing",
    "pairing_real": "pairing_real: the seeds' runs do not share their requests",
    "policy_runs_complete": "policy_runs_complete: policy runs missing",
    "schedules_in_corridor": "schedules_in_corridor: schedules outside the corridor",
    "merge_durations_match": "merge_durations_match: merge durations differ",
    "open_loop_sending": "open_loop_sending: requests not sent open-loop",
    "psi_fit": "psi_fit: psi not fitted on enough runs",
    "not_oracle": "not_oracle: the policy is an oracle (a bound, never deployable)",
    "real_sidecar": "real_sidecar: not run on a real serving sidecar",
    "transfer_ci_excludes_one": "transfer_ci_excludes_one: the harness effect did not transfer",
}


def recorded_stop(claim: dict, audit: dict) -> dict | None:
    """Where the claim's tier walk stopped, as the audit recorded it (``stop``); for a
    document without one, the same point from its ``tier_status``
    (:func:`evalkit.document.tiers.stop_point`)."""
    if "ladder" in claim:
        return claim.get("stop")
    return T.stop_point(_tiers(audit), claim.get("tier_status") or {}, claim.get("checks", []))


def stop_text(claim: dict, stop: dict | None, alpha=None) -> str:
    """Why the claim stops where it does: the stop tier and, per blocking check, a short
    clause derived from the claim (never a cut-off finding; the detail has those)."""
    if stop is None:
        return ""
    if stop["state"] == "not_run":
        return f"{stop['tier']} was not evaluated"
    text = f"{stop['tier']} {STATES[stop['state']][1]}"
    by_name = {c.get("name"): c for c in _blockers(claim, stop["tier"])}
    blockers = [by_name[n] for n in stop["checks"] if n in by_name]
    if blockers:
        text += " (" + "; ".join(blocker_phrase(b, claim, alpha) for b in blockers) + ")"
    return text


def _exclusions(claim: dict) -> list[dict]:
    """The claim's excluded runs as ``{run_id, seed, reason}`` (the audit's exclusion rows)."""
    return [{"run_id": e.get("run_id"), "seed": e.get("seed"), "reason": str(e.get("reason", ""))}
            for e in claim.get("exclusions") or []]


def effect_text(g, ci, invalid=()) -> tuple[str, str]:
    """(effect clause, direction) for G and its CI, both shares of requests shown in
    percentage points: the CI's side of 0 decides what the clause says; with failed design
    checks (``invalid``) G is shown but read as no evidence."""
    if g is None:
        return "no paired gain (fewer than 2 paired seeds)", ""
    effect = f"G = {pp(g)} pp"
    has_ci = bool(ci) and None not in ci
    side = wording.ci_side(*ci) if has_ci else wording.ACROSS
    if has_ci:
        effect += f" [{pp(ci[0])}, {pp(ci[1])}] (95% CI, {wording.ci_words(side)})"
    else:
        effect += " (no CI: too few seeds)"
    if invalid:
        return f"{effect}; {wording.not_valid_words(list(invalid))}", ""
    direction = "fewer" if g > 0 else ("more" if g < 0 else "")
    if has_ci and side != wording.ACROSS:           # the CI, not the point, sets the sign
        direction = "fewer" if side == wording.ABOVE else "more"
    if not direction:
        return effect + ": the same share of requests violates the SLO as under random " \
                        "placement of the same merges", ""
    amount = f"{pp(abs(g), signed=False)} pp {direction} requests violate the SLO"
    if has_ci and side != wording.ACROSS:
        effect += f": {amount} than under random placement of the same merges"
    else:
        effect += (f": a point estimate of {amount} than under random placement, a difference "
                   "the data do not show")
    return effect, direction


def headline(claim: dict, audit: dict) -> Headline:
    tier = claim.get("tier")
    status = claim.get("claim_status") or T.claim_status(_tiers(audit), tier,
                                                         bool(claim.get("underpowered")))
    tier_claim = next((t.get("claim", "") for t in audit.get("protocol", {}).get("tiers", [])
                       if t["name"] == tier), "")

    g, ci = claim.get("mean_diff"), claim.get("ci")
    effect, direction = effect_text(g, ci, wording.failed_design_checks(claim.get("checks")))
    alternative = audit.get("alternative", "two-sided")
    test_name = str(claim.get("test") or "sign-flip")
    test_name = test_name[:-5] if test_name.endswith(" test") else test_name
    p = claim.get("p_adjusted")
    multi = audit.get("protocol", {}).get("multiplicity")
    n_claims = sum(1 for c in audit.get("claims", []) if c.get("p_adjusted") is not None)
    adjusted = multi == "holm" and n_claims > 1
    if p is None:
        test = ""
    else:
        exact = claim.get("exact")
        kind = "" if exact is None else ("exact " if exact else "Monte Carlo ")
        name = test_name if test_name.endswith("-test") else test_name + " test"
        test = ((f"Holm-adjusted p = {p_value(p)} over {n_claims} claims" if adjusted
                 else f"p = {p_value(p)}") + f" ({alternative}, {kind}{name})")
    if status == "underpowered":
        alpha = audit.get("alpha")
        rule = "underpowered: " + power_clause(claim, alpha)
        if p is not None and alpha is not None and p <= alpha and g:
            rule = ("significantly better than matched random, but not claimable: " if g > 0
                    else "not better than matched random (a negative gain; no 'worse' is "
                    "claimed), and not claimable: ") + rule
        test += ("; " if test else "") + rule
    if claim.get("pre_registered") is False:
        test += ("; " if test else "") + "not pre-registered (no campaign plan)"
    n = claim.get("n_seeds") or 0
    seeds = f"{claim.get('wins', 0)} of {n} seeds favour the policy" if n else ""
    eff_n = claim.get("effective_n")
    if eff_n is not None and n and num(eff_n) != str(n):
        seeds += f" (effective n = {num(eff_n, 3)})"
    rungs = ladder(claim, audit)
    return Headline(policy=str(claim.get("policy")), regime=str(claim.get("regime")),
                    status=status, tier=tier, tier_claim=tier_claim, effect=effect,
                    direction=direction, test=test, test_name=test_name, seeds=seeds,
                    stop=stop_text(claim, recorded_stop(claim, audit), audit.get("alpha")),
                    oracle=bool(claim.get("oracle")),
                    ladder=rungs, exclusions=_exclusions(claim),
                    vouched=", ".join(str(v) for v in claim.get("vouched") or []))


def headlines(audit: dict) -> list[Headline]:
    return [headline(c, audit) for c in audit.get("claims", [])]
