"""Tier semantics, in one place: the walk, the claim floor, the ladder, rank and drops.

Tier rule (documented in ``protocols/diloco-slo.toml``): walk the tiers in order; a tier is
*passed* when none of its checks blocks and at least one was evaluated, *not evaluable* when
none of its checks could be evaluated, *missing runs* (not evaluable, never "failed") when
every check that blocks it lacks runs the campaign did not plan (a harness baseline: the
check names the campaign lines that add them), else *failed*.  A passed tier raises the tier
reached; a not-evaluable tier with ``skip_if_not_evaluable`` (the mechanism tiers: harness,
sidecar transfer, when the campaign has no harness or no real runs) is stepped over;
anything else, missing runs included, stops the walk, and its blocking checks are the
one-line reason the claim stops there.  A tier the walk never evaluated is *not run*.

The functions take tiers as :class:`~evalkit.audit.protocol.TierSpec` objects or as the
``protocol.tiers`` dictionaries of an ``audit.json``, so the audit, the report, the gate and
``evalkit diff`` share one definition.
"""

from __future__ import annotations

from dataclasses import dataclass

from evalkit.errors import InputError

__all__ = ["FAILED", "MISSING_RUNS", "NOT_EVALUABLE", "NOT_SUPPORTED", "PASSED", "SUPPORTED",
           "UNDERPOWERED", "claim_floor", "claim_status", "filled_status", "goes_on", "ladder",
           "licenses_claim", "names_runs_to_add", "reached_tier", "reaches", "stop_heading",
           "stop_point", "stop_reason", "tier_drops", "tier_rank", "tier_state", "tier_walk"]

PASSED, FAILED, NOT_EVALUABLE = "passed", "failed", "not_evaluable"
MISSING_RUNS = "missing_runs"    # not evaluable for want of runs to add; the walk stops
SKIPPED, NOT_RUN = "skipped", "not_run"          # ladder states only
SUPPORTED, NOT_SUPPORTED, UNDERPOWERED = "supported", "not supported", "underpowered"
FLOOR_TIER = "matched_budget"


def _name(tier) -> str:
    return str(tier["name"] if isinstance(tier, dict) else tier.name)


def _skippable(tier) -> bool:
    return bool(tier.get("skip_if_not_evaluable") if isinstance(tier, dict)
                else tier.skip_if_not_evaluable)


def names_runs_to_add(check) -> bool:
    """Whether a (not evaluable) check names campaign lines that would make it evaluable."""
    values = check.get("values") if isinstance(check, dict) else check.values
    return bool((values or {}).get("campaign_toml"))


def tier_state(checks) -> str:
    """passed / failed / missing_runs / not_evaluable for the checks of one tier."""
    blocking = [c for c in checks if c.blocking]
    if blocking and all(names_runs_to_add(c) for c in blocking):   # no check failed
        return MISSING_RUNS
    if blocking and any(c.evaluable for c in checks):
        return FAILED
    if not any(c.evaluable for c in checks):
        return NOT_EVALUABLE
    return PASSED


def goes_on(state: str | None, tier) -> bool:
    """Whether the walk passes a tier in ``state`` (None: not run) on to the next one."""
    return state == PASSED or (state == NOT_EVALUABLE and _skippable(tier))


def stop_index(tiers, status: dict) -> int | None:
    """Index of the tier the walk stops at (None: every tier supported)."""
    for i, tier in enumerate(tiers):
        if not goes_on(status.get(_name(tier)), tier):
            return i
    return None


def reached_tier(tiers, status: dict) -> str | None:
    """The highest passed tier below the stop."""
    stop = stop_index(tiers, status)
    reached = None
    for tier in list(tiers)[:len(tiers) if stop is None else stop]:
        if status.get(_name(tier)) == PASSED:
            reached = _name(tier)
    return reached


def stop_heading(tiers, status: dict) -> str | None:
    """``stops before TIER (state)``: where the walk stops, without the checks that stop it;
    None when every tier is supported."""
    stop = stop_index(tiers, status)
    if stop is None:
        return None
    name = _name(tiers[stop])
    what = {FAILED: "failed", MISSING_RUNS: "not evaluable: the campaign has no runs of "
            "what it needs"}.get(status.get(name), "not evaluable")
    return f"stops before {name} ({what})"


def stop_reason(tiers, status: dict, checks) -> str:
    """The one-line reason the walk stops (the first blocking check's finding)."""
    reason = stop_heading(tiers, status)
    if reason is None:
        return "every tier of the protocol is supported"
    name = _name(tiers[stop_index(tiers, status)])
    blockers = [c for c in checks if c.tier == name and c.blocking]
    if blockers:
        reason += f": {blockers[0].name}: {blockers[0].found}"
        if len(blockers) > 1:
            reason += f" (+{len(blockers) - 1} more)"
    return reason


def tier_walk(protocol, checks) -> tuple[str | None, dict, str]:
    """(tier reached, tier name -> state, stop reason) for a claim's checks."""
    status = {t.name: tier_state([c for c in checks if c.tier == t.name])
              for t in protocol.tiers}
    return (reached_tier(protocol.tiers, status), status,
            stop_reason(protocol.tiers, status, checks))


def filled_status(tiers, status: dict) -> dict:
    """``status`` with every tier of ``tiers`` present: a tier not evaluated is not run."""
    return {_name(t): status.get(_name(t), NOT_RUN) for t in tiers}


@dataclass(frozen=True)
class Rung:
    tier: str
    state: str            # passed / failed / skipped / not_evaluable / not_run
    reached: bool         # the claim's tier
    beyond: bool          # above the tier where the walk stopped: not claimed whatever it says

    def to_dict(self) -> dict:
        return {"tier": self.tier, "state": self.state, "reached": self.reached,
                "beyond": self.beyond}


def ladder(tiers, status: dict, reached: str | None) -> list[Rung]:
    """One rung per tier: its state as the walk saw it, and whether it lies above the stop."""
    stop = stop_index(tiers, status)
    rungs = []
    for i, tier in enumerate(tiers):
        st = status.get(_name(tier))
        if st is None or st == NOT_RUN:
            state = NOT_RUN
        elif st == NOT_EVALUABLE and _skippable(tier):
            state = SKIPPED
        else:
            state = st if st in (PASSED, FAILED) else NOT_EVALUABLE
        rungs.append(Rung(_name(tier), state, _name(tier) == reached,
                          stop is not None and i > stop))
    return rungs


def stop_point(tiers, status: dict, checks) -> dict | None:
    """Where the walk stops, as data: ``{tier, state, checks}`` with the names of the stop
    tier's blocking checks (``checks``: Check objects or their dictionaries); None when
    every tier is supported."""
    stop = stop_index(tiers, status)
    if stop is None:
        return None
    name = _name(tiers[stop])
    state = ladder(tiers, status, None)[stop].state

    def field(c, key):
        return c.get(key) if isinstance(c, dict) else getattr(c, key)
    return {"tier": name, "state": state,
            "checks": [field(c, "name") for c in checks
                       if field(c, "tier") == name and field(c, "blocking")]}


def claim_floor(tiers) -> int:
    """Index of the first tier that licenses a claim about the policy: ``matched_budget``
    when the protocol has it, else the first tier that is not a skippable mechanism tier
    (0 when every tier is one)."""
    names = [_name(t) for t in tiers]
    if FLOOR_TIER in names:
        return names.index(FLOOR_TIER)
    return next((i for i, t in enumerate(tiers) if not _skippable(t)), 0)


def licenses_claim(tiers, tier: str | None) -> bool:
    """Whether reaching ``tier`` supports a claim about the policy (at or above the floor)."""
    names = [_name(t) for t in tiers]
    return tier is not None and tier in names and names.index(tier) >= claim_floor(tiers)


def claim_status(tiers, tier: str | None, underpowered: bool) -> str:
    """supported / underpowered / not supported."""
    if licenses_claim(tiers, tier):
        return SUPPORTED
    return UNDERPOWERED if underpowered else NOT_SUPPORTED


def tier_rank(tier, order: list[str]) -> int | None:
    """-1 for no tier, the tier's index, None when the protocol does not know it."""
    if tier is None:
        return -1
    return order.index(tier) if tier in order else None


def reaches(tier: str | None, required: str, order: list[str]) -> bool:
    """Whether a claim that reached ``tier`` reaches the ``required`` one."""
    return tier is not None and order.index(tier) >= order.index(required)


def tier_drops(baseline: dict, tiers_now: dict, order: list[str]) -> list[str]:
    """Claims whose tier now ranks below the baseline's: one message each.

    ``tiers_now``: (regime, policy) -> tier reached now (None: no tier); a baseline claim
    missing from it counts as a drop.  Raises InputError for a baseline tier ``order`` lacks.
    """
    drops = []
    for c in baseline.get("claims", []):
        key = str(c.get("regime")), str(c.get("policy"))
        was = c.get("tier")
        rank_was = tier_rank(was, order)
        if rank_was is None:
            raise InputError(f"baseline claim {key[0]}/{key[1]} reached tier {was!r}, which "
                             "this protocol does not have", column="claims.tier",
                             fix="audit with the baseline's protocol, or refresh the baseline")
        if was is None:
            continue
        if key not in tiers_now:
            drops.append(f"{key[0]}/{key[1]}: was {was}, now absent from the audit")
            continue
        now = tiers_now[key]
        if tier_rank(now, order) < rank_was:
            drops.append(f"{key[0]}/{key[1]}: dropped from {was} to {now or 'no tier'}")
    return drops
