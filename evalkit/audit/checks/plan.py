"""Checks of a campaign against its plan (pre-registration, :mod:`evalkit.runlog.plan`).

With ``plan.json`` in the runs directory the audit verifies that every planned run of the
claim is present, complete and still carries its planned name (survivorship, whatever name
the rest carries), that no unplanned run is counted, that every draw's logged schedule is
the one its planned RNG seed regenerates from F_K at the policy's K, that the protocol is the
planned one and that every run was written after the plan, under it.

Without a plan the campaign is *not pre-registered*: it cannot reach ``deployable``
(:func:`pre_registered`), and its seeds must be a contiguous range (a deleted seed is a gap).

A plan never switches a check off: the draws' overlap ranks inside a fresh seeded sample of
F_K are tested for uniformity (:func:`draws_phi_uniform`: selected or worst-case "draws" are
not uniform on F_K) for every campaign, and every planned claim belongs to the family
(:func:`plan_complete`; :func:`planned_claims` gives the Holm family its members).

A plan written by the judged party proves nothing it could have chosen: :func:`registration`
(tier ``placement_gain``) passes only for a plan frozen under the reviewer's challenge the
audit is given (``--challenge``), whose draw seeds and seed order follow from the commitment
and which is the first attempt at its claim in the challenge's ledger
(:mod:`evalkit.runlog.challenge`).  Any other campaign is *self-registered* and stops at
``matched_budget`` unless the protocol sets ``allow_self_registered = true``.
"""

from __future__ import annotations

import datetime as _dt

import numpy as np

from evalkit.audit.checks.core import Outcome, _listing, check, not_evaluable
from evalkit.audit.checks.like_for_like import run_facts, seed_runs
from evalkit.errors import InputError
from evalkit.runlog.challenge import claim_attempts, derivation_faults
from evalkit.runlog.plan import plan_sha256, read_plan
from evalkit.stats import RequestIndex, overlap_cost, sample_schedules

__all__ = ["NOT_PRE_REGISTERED", "SELF_REGISTERED", "campaign_plan", "draws_as_planned",
           "draws_phi_uniform", "given_challenge", "merge_lag_bounds", "phi_ranks",
           "plan_complete", "plan_rules", "planned_claims", "pre_registered", "registration",
           "registration_summary"]

_IDENTITY = ("regime", "policy", "role", "seed", "draw", "matched_to")
# clocks of the machines of one distributed sweep may disagree by this much; the order that
# matters is proven by the plan's sha256 in each run (a run cannot carry the hash of a plan
# that did not exist yet), the timestamps only catch runs copied in from before it
CLOCK_SKEW_S = 300.0
NOT_PRE_REGISTERED = "not pre-registered"
SELF_REGISTERED = "self-registered"


def campaign_plan(runset) -> dict | None:
    """The runs directory's plan (cached), None without one (and for summary tables)."""
    cache = getattr(runset, "_cache", None)
    if cache is None:                  # a stand-in run set without a runs directory
        return None
    if "plan" not in cache:
        runs_dir = getattr(runset, "runs_dir", None)
        cache["plan"] = (read_plan(runs_dir)
                         if getattr(runset, "has_logs", False) and runs_dir else None)
    return cache["plan"]


def _plan_sha(runset) -> str:
    if "plan_sha" not in runset._cache:
        runset._cache["plan_sha"] = plan_sha256(campaign_plan(runset))
    return runset._cache["plan_sha"]


def given_challenge(runset) -> dict | None:
    """The reviewer's challenge the audit was given (``--challenge``:
    :func:`evalkit.runlog.challenge.read_given`), None without one."""
    cache = getattr(runset, "_cache", None)
    return cache.get("challenge") if cache is not None else None


def planned_claims(plan: dict) -> list[tuple[str, str]]:
    """(regime, policy) of every claim the plan fixes: each planned policy with
    matched-random draws (the claims tested against random placement, the Holm family)."""
    return sorted({(str(r.get("regime")), str(r.get("matched_to"))) for r in plan["runs"]
                   if r.get("role") == "matched_random" and r.get("matched_to") is not None})


def _claims_with_runs(ctx) -> set[tuple[str, str]]:
    runs = ctx.runset.runs
    pol = runs[runs.role == "policy"]
    return {(str(r), str(p)) for r, p in zip(pol.regime, pol.policy)}


def _seed_gaps(ctx) -> list[int]:
    """Seeds missing from the contiguous range the regime's runs span (a plan-less campaign's
    deleted seeds)."""
    seeds = sorted({int(s) for s in ctx.regime_runs.seed})
    if not seeds:
        return []
    return sorted(set(range(seeds[0], seeds[-1] + 1)) - set(seeds))


def _claim_scope(plan: dict, claim) -> list[dict]:
    """The planned runs a claim rests on: its policy runs, their draws, the no-sync runs."""
    out = []
    for r in plan["runs"]:
        if r.get("regime") != claim.regime:
            continue
        if (r["role"] == "policy" and r.get("policy") == claim.policy) or (
                r["role"] == "matched_random" and r.get("matched_to") == claim.policy) or \
                r["role"] == "no_sync":
            out.append(r)
    return out


def _claim_run_ids(ctx) -> list[tuple[int, str, str]]:
    return [(p.seed, r, role) for p in ctx.claim.pairs for r, role in seed_runs(p)]


def _stamped(ctx) -> set[str]:
    return {str(ctx._meta(r).get("plan_sha256")) for _, r, _ in _claim_run_ids(ctx)
            if ctx._meta(r).get("plan_sha256")}


def _without_plan(ctx, expected: str) -> Outcome:
    stamps = _stamped(ctx) if ctx.runset.has_logs else set()
    if stamps:
        return Outcome(False, expected, f"the runs were written under plan "
                       f"{sorted(stamps)[0][:12]}, but the runs directory has no plan.json",
                       "restore the plan.json the sweep wrote; without it nothing planned "
                       "can be verified")
    return Outcome(True, expected, f"{NOT_PRE_REGISTERED}: no plan.json (the campaign cannot "
                   "reach deployable; draws are tested for uniformity on F_K instead)")


@check("plan_complete", tier="matched_budget")
def plan_complete(ctx, spec) -> Outcome:
    """Every planned run of the claim present, complete, under its planned name; nothing
    unplanned counted."""
    expected = ("every planned run of the claim (policy runs, draws, no-sync runs) present, "
                "complete and under its planned regime, policy, role, seed and draw; no "
                "unplanned run counted")
    plan = campaign_plan(ctx.runset)
    if plan is None:
        out = _without_plan(ctx, expected)
        gaps = _seed_gaps(ctx)
        if out.passed and gaps:
            seeds = sorted({int(s) for s in ctx.regime_runs.seed})
            return Outcome(False, expected, f"{NOT_PRE_REGISTERED}: seeds "
                           f"{_listing([str(g) for g in gaps], 8)} are missing from the range "
                           f"{seeds[0]}..{seeds[-1]} of regime {ctx.claim.regime} (a deleted "
                           "seed is a missing result)",
                           "rerun the missing seeds; a campaign with other seeds is swept "
                           "under a plan ('evalkit sweep' writes one) that lists them")
        return out
    scope, not_yet = _sequential_prefix(plan, _claim_scope(plan, ctx.claim), ctx)
    planned = {r["run_id"]: r for r in plan["runs"]}
    excluded = {e["run_id"]: e["reason"] for e in ctx.runset.excluded}
    faults = []
    if not any(r["role"] == "policy" for r in scope):
        faults.append(f"the plan has no runs of policy {ctx.claim.policy} in regime "
                      f"{ctx.claim.regime}")
    for r in scope:
        rid = r["run_id"]
        if rid not in ctx.runset._dirs:
            why = excluded.get(rid, "missing")
            faults.append(f"seed {r['seed']}: planned {r['role']} run {rid} {why}")
            continue
        meta = ctx._meta(rid)
        moved = [k for k in _IDENTITY if meta.get(k) != r.get(k)]
        if moved:
            faults.append(f"seed {r['seed']}: planned run {rid} now says " + ", ".join(
                f"{k} = {meta.get(k)!r} (planned {r.get(k)!r})" for k in moved))
    # every run the claim could count (including duplicates the audit counts once)
    runs = ctx.regime_runs
    mine = runs[((runs.role == "policy") & (runs.policy == ctx.claim.policy))
                | ((runs.role == "matched_random") & (runs.matched_to == ctx.claim.policy))
                | (runs.role == "no_sync")]
    listed = {(int(s), r, role) for s, r, role in zip(mine.seed, mine.run_id, mine.role)}
    for seed, rid, role in sorted(listed | set(_claim_run_ids(ctx))):
        if rid not in planned:
            faults.append(f"seed {seed}: {rid} ({role}) is not a planned run")
    # the family is the plan's claims: one whose runs are all gone fails it, never leaves it
    gone = [f"{r}/{p}" for r, p in planned_claims(plan) if (r, p) not in _claims_with_runs(ctx)]
    if gone:
        faults.append(f"planned claim(s) {', '.join(gone)} have no runs (they stay in the "
                      "Holm family as missing results)")
    if faults:
        return Outcome(False, expected, "not as planned: " + _listing(faults, 8),
                       "rerun the missing planned runs ('evalkit sweep' resumes them); a "
                       "missing, renamed or unplanned run is a missing result, never one to "
                       "drop or add")
    later = (f"; seeds {', '.join(map(str, not_yet))} not run yet (sequential design)"
             if not_yet else "")
    return Outcome(True, expected, f"all {len(scope)} planned runs of the claim present and "
                   f"complete, none unplanned{later}")


def _sequential_prefix(plan: dict, scope: list[dict], ctx) -> tuple[list[dict], list[int]]:
    """A sequential design runs its planned seeds in plan order and may stop: the runs of
    every seed up to the last one that has any run are required (a gap is a missing
    result), later seeds are not run yet.  A fixed design requires every planned run."""
    if (plan.get("design") or {}).get("kind") != "sequential":
        return scope, []
    order = list(dict.fromkeys(int(r["seed"]) for r in plan["runs"]))
    present = {int(r["seed"]) for r in plan["runs"]
               if r["run_id"] in ctx.runset._dirs
               or r["run_id"] in {e["run_id"] for e in ctx.runset.excluded}}
    last = max((order.index(s) for s in present), default=-1)
    started = set(order[:last + 1])
    return [r for r in scope if int(r["seed"]) in started], order[last + 1:]


def merge_lag_bounds(ctx, pair, spec) -> tuple[float, float]:
    """(earliest, latest) logged start of a planned merge relative to its planned start:
    ``-tolerance_s`` .. ``tolerance_s`` + 1.5 of the seed's smallest inner step +
    ``start_lag_s`` (a real backend merges at the first step boundary after the planned
    start, then starts the all-reduce)."""
    steps = [run_facts(ctx, r)["step_median_s"] for r, _ in seed_runs(pair)]
    steps = [s for s in steps if np.isfinite(s)]
    step = min(steps) if steps else 0.0
    base = float(spec["tolerance_s"])
    return -base, base + 1.5 * step + float(spec["start_lag_s"])


def regenerate(plan_corridor: dict, k: int, arrival, rng_seed: int) -> np.ndarray:
    """(k,) the schedule the sweep draws for a matched-random run: uniform on F_K with edges
    over the observed span of the trace's arrivals (``evalkit.policies.planned``)."""
    if k == 0:
        return np.empty(0)
    d = float(plan_corridor["merge_duration_s"])
    horizon = float(plan_corridor["horizon_s"])
    lo, hi = float(np.min(arrival)), min(horizon, float(np.max(arrival))) - d
    starts = sample_schedules(k, (lo, hi + d), d, float(plan_corridor["min_gap_s"]),
                              float(plan_corridor["max_gap_s"]), 1,
                              np.random.default_rng(int(rng_seed)),
                              train_start=float(plan_corridor.get("train_start_s", 0.0)),
                              run_end=horizon)
    return np.sort(np.asarray(starts, dtype=float).reshape(-1))


@check("draws_as_planned", params={"tolerance_s": ((int, float), 0.05),
                                   "start_lag_s": ((int, float), 0.25)},
       tier="matched_budget")
def draws_as_planned(ctx, spec) -> Outcome:
    """Each draw's logged merges are the schedule its planned RNG seed regenerates."""
    expected = ("each draw's schedule is the one its planned RNG seed regenerates from F_K at "
                "the policy run's K: its recorded planned starts exactly, its logged merges "
                f"from {-float(spec['tolerance_s']):g} s to {float(spec['tolerance_s']):g} s "
                f"+ 1.5 inner steps + {float(spec['start_lag_s']):g} s after them")
    plan = campaign_plan(ctx.runset)
    if plan is None:
        return _without_plan(ctx, expected)
    planned = {r["run_id"]: r for r in plan["runs"]}
    faults, checked = [], 0
    for p in ctx.claim.pairs:
        if not len(p.draws) or not np.isfinite(p.k_policy):
            continue
        lo, hi = merge_lag_bounds(ctx, p, spec)
        for rid in p.draws.run_id.tolist():
            entry = planned.get(rid)
            if entry is None:
                continue                    # plan_complete names it
            meta = ctx._meta(rid)
            seed = (meta.get("rng_seeds") or {}).get("policy")
            if seed != entry["rng_seed"]:
                faults.append(f"seed {p.seed}: {rid} used RNG seed {seed}, planned "
                              f"{entry['rng_seed']}")
            arrival = ctx.runset.columns(rid, "requests", ("arrival_s",))["arrival_s"]
            try:
                want = regenerate(plan["corridor"], int(p.k_policy), arrival, entry["rng_seed"])
            except InputError as exc:
                faults.append(f"seed {p.seed}: {rid}: F_K at K = {int(p.k_policy)} cannot be "
                              f"sampled ({exc.message})")
                continue
            got = np.sort(ctx.runset.columns(rid, "merges", ("start_s",))["start_s"])
            checked += 1
            recorded = (((meta.get("settings") or {}).get("effective") or {}).get(
                "policy") or {}).get("planned_starts")
            if recorded is not None and (len(recorded) != want.size or not np.allclose(
                    np.sort(np.asarray(recorded, float)), want, rtol=0.0, atol=1e-6)):
                faults.append(f"seed {p.seed}: {rid} recorded planned starts "
                              f"{_starts(recorded)}, its seed draws {_starts(want)}")
            if got.size != want.size:
                faults.append(f"seed {p.seed}: {rid} logged {got.size} merges, its seed draws "
                              f"{want.size}")
            elif got.size:
                lag = got - want
                bad = np.flatnonzero((lag < lo - 1e-9) | (lag > hi + 1e-9))
                if bad.size:
                    i = int(bad[0])
                    faults.append(f"seed {p.seed}: {rid} merge {i} starts at {got[i]:.6g} s, "
                                  f"its seed draws {want[i]:.6g} s (allowed {lo:+.3g} to "
                                  f"{hi:+.3g} s)")
    if faults:
        return Outcome(False, expected, "draws not as planned: " + _listing(faults, 6),
                       "a draw is the schedule its planned seed gives: rerun the draws with "
                       "'evalkit sweep' (selected, renumbered or hand-placed draws are not "
                       "random placement)")
    return Outcome(True, expected, f"all {checked} draws regenerate from their planned seeds")


def _starts(values) -> str:
    return "[" + ", ".join(f"{float(v):.6g}" for v in list(values)[:4]) + (
        ", ...]" if len(values) > 4 else "]")


def _parse_time(text) -> _dt.datetime | None:
    try:
        t = _dt.datetime.fromisoformat(str(text))
    except (TypeError, ValueError):
        return None
    return t if t.tzinfo else t.replace(tzinfo=_dt.timezone.utc)


@check("plan_rules", tier="matched_budget")
def plan_rules(ctx, spec) -> Outcome:
    """The protocol, alpha and alternative are the planned ones; every run was written after
    the plan and carries its hash."""
    expected = ("the audit's protocol is the plan's (content sha256; the file's sha256 for a "
                "plan that records none), alpha and alternative are the plan's; every run of "
                "the claim carries the plan's sha256 and was written after it")
    plan = campaign_plan(ctx.runset)
    if plan is None:
        return _without_plan(ctx, expected)
    faults = []
    proto = plan["protocol"]
    content = ctx.protocol.content_sha256
    planned = f"the plan froze {proto.get('name')} v{proto.get('version')}"
    if proto.get("content_sha256"):
        compared = "content compared"
        if content != proto["content_sha256"]:
            faults.append(f"protocol {ctx.protocol.name} v{ctx.protocol.version} has content "
                          f"sha256 {content[:12]}, {planned} with content sha256 "
                          f"{str(proto['content_sha256'])[:12]} (a changed rule, alpha or "
                          f"--accept-vouched changes it)")
    else:
        # a plan frozen before content hashes were recorded: the file's hash is all it has
        compared = "file sha256 compared: the plan records no content sha256"
        if ctx.protocol.sha256 != proto.get("sha256"):
            faults.append(f"protocol {ctx.protocol.name} v{ctx.protocol.version} (content "
                          f"sha256 {content[:12]}) is not the file {planned}: their file "
                          f"sha256 differ")
    if float(ctx.alpha) != float(plan["alpha"]):
        faults.append(f"alpha {ctx.alpha:g}, planned {float(plan['alpha']):g}")
    if ctx.alternative != plan["alternative"]:
        faults.append(f"alternative {ctx.alternative}, planned {plan['alternative']}")
    sha = _plan_sha(ctx.runset)
    frozen = _parse_time(plan["created_at"])
    for seed, rid, role in _claim_run_ids(ctx):
        meta = ctx._meta(rid)
        if meta.get("plan_sha256") != sha:
            faults.append(f"seed {seed}: {rid} ({role}) carries plan "
                          f"{str(meta.get('plan_sha256'))[:12]}, the plan is {sha[:12]}")
        written = _parse_time(meta.get("created_at"))
        if frozen is None or written is None or \
                (frozen - written).total_seconds() > CLOCK_SKEW_S:
            faults.append(f"seed {seed}: {rid} ({role}) written {meta.get('created_at')}, "
                          f"before the plan ({plan['created_at']})")
    if faults:
        return Outcome(False, expected, "rules not as planned: " + _listing(faults, 6),
                       "audit under the planned protocol and alpha; runs written before or "
                       "outside the plan are not pre-registered results")
    return Outcome(True, expected, f"protocol {ctx.protocol.name} content sha256 "
                   f"{content[:12]} as planned ({compared}), alpha "
                   f"{float(plan['alpha']):g} {plan['alternative']}; every run after the plan "
                   f"{sha[:12]}")


@check("pre_registered", tier="deployable")
def pre_registered(ctx, spec) -> Outcome:
    expected = "a campaign plan (plan.json) fixed before the runs"
    if campaign_plan(ctx.runset) is None:
        return Outcome(False, expected, f"{NOT_PRE_REGISTERED}: the runs directory has no "
                       "plan.json", "freeze a plan before the runs ('evalkit sweep' writes one; "
                       "'evalkit plan freeze')")
    return Outcome(True, expected, f"plan {_plan_sha(ctx.runset)[:12]}")


def _self_registered(ctx, spec, expected: str, why: str) -> Outcome:
    values = {"registration": SELF_REGISTERED}
    if spec["allow_self_registered"]:
        return Outcome(True, expected, f"{SELF_REGISTERED} ({why}); the protocol allows "
                       "self-registration (allow_self_registered = true)", values=values)
    return Outcome(False, expected, f"{SELF_REGISTERED}: {why}; the campaign's author chose "
                   "every seed the audit would take from a challenge, so the claim stops at "
                   "matched_budget",
                   "ask the reviewer for a challenge ('evalkit plan challenge CAMPAIGN.toml'), "
                   "freeze under it ('evalkit plan freeze --challenge'), sweep, and audit or "
                   "gate with --challenge", values=values)


def registration_summary(runset) -> dict:
    """The campaign's registration as the audit document records it
    (``pre_registration.registration``): ``"challenge"`` when its plan was frozen under the
    reviewer's challenge the audit was given and its derivation holds, else
    ``"self-registered"`` (each claim's ledger attempt is its ``registration`` check's)."""
    plan = campaign_plan(runset)
    given = given_challenge(runset)
    block = plan.get("challenge") if plan is not None else None
    named = block.get("id") if isinstance(block, dict) else None
    if given is None or block is None:
        why = ("no plan" if plan is None else "a plan frozen without a challenge"
               if block is None else f"challenge {named} named by the plan, none given to "
               "verify it")
        return {"kind": SELF_REGISTERED, "challenge_id": named,
                "text": f"{SELF_REGISTERED} ({why})"}
    challenge = given["challenge"]
    held = (not derivation_faults(plan)
            and (block.get("id"), block.get("nonce")) == (challenge["id"], challenge["nonce"]))
    if not held:
        return {"kind": SELF_REGISTERED, "challenge_id": named,
                "text": f"{SELF_REGISTERED} (the plan's challenge does not hold against "
                        f"challenge {challenge['id']})"}
    return {"kind": "challenge", "challenge_id": challenge["id"],
            "text": f"frozen under the reviewer's challenge {challenge['id']} (commitment "
                    f"{block['commitment'][:12]})"}


@check("registration", params={"allow_self_registered": ((bool,), False)},
       tier="placement_gain")
def registration(ctx, spec) -> Outcome:
    """The plan was frozen under the reviewer's challenge the audit is given, its seeds and
    seed order follow from the commitment, and it is the claim's first attempt."""
    expected = ("a plan frozen under the reviewer's challenge (audit/gate --challenge): its "
                "draw seeds and seed order derived from sha256(nonce, plan content), and the "
                "first attempt at this claim in the challenge's ledger")
    plan = campaign_plan(ctx.runset)
    given = given_challenge(ctx.runset)
    block = plan.get("challenge") if plan is not None else None
    if plan is not None and block is not None:
        faults = derivation_faults(plan)
        if faults:
            return Outcome(False, expected, "the plan's challenge does not hold: "
                           + _listing(faults, 4), "freeze the plan again under the challenge "
                           "('evalkit plan freeze --challenge'); a plan is never edited")
    if given is None:
        why = ("no plan.json" if plan is None else "the plan was frozen without a challenge"
               if block is None else f"the plan names challenge {block.get('id')}, but the "
               "audit was given no challenge file to verify it against (--challenge)")
        return _self_registered(ctx, spec, expected, why)
    challenge, where = given["challenge"], given["file"]
    fix = ("audit the runs swept under a plan frozen with this challenge "
           "('evalkit plan freeze --challenge'), or pass the challenge it was frozen under")
    if block is None:
        return Outcome(False, expected, f"challenge {challenge['id']} ({where}) was given, but "
                       + ("the runs directory has no plan.json" if plan is None
                          else "the plan was frozen without a challenge"), fix)
    if (block.get("id"), block.get("nonce")) != (challenge["id"], challenge["nonce"]):
        return Outcome(False, expected, f"the plan was frozen under challenge "
                       f"{block.get('id')}, not under {challenge['id']} ({where}): its nonce "
                       "differs", fix)
    bound = [what for what, mine, theirs in (
        ("campaign file", plan["campaign"].get("sha256"), challenge["campaign_sha256"]),
        ("protocol", plan["protocol"].get("content_sha256"),
         challenge["protocol"]["content_sha256"])) if mine != theirs]
    if bound:
        return Outcome(False, expected, f"challenge {challenge['id']} ({where}) was issued for "
                       f"another {' and '.join(bound)} than the plan's", fix)
    sha = _plan_sha(ctx.runset)
    attempts = claim_attempts(given["ledger"], ctx.claim.regime, ctx.claim.policy)
    k = len(attempts)
    mine = [i for i, e in enumerate(attempts, start=1) if e.get("plan_sha256") == sha]
    values = {"registration": "challenge", "challenge_id": challenge["id"],
              "commitment": block["commitment"], "attempt": mine[0] if mine else None,
              "attempts": k}
    if not mine:
        return Outcome(False, expected, f"plan {sha[:12]} is not in the ledger of challenge "
                       f"{challenge['id']} ({k} attempt(s) at {ctx.claim.regime}/"
                       f"{ctx.claim.policy} recorded): it was not frozen with 'evalkit plan "
                       "freeze --challenge' beside this ledger", fix, values=values)
    if mine[0] != 1:
        return Outcome(False, expected, f"plan {sha[:12]} is attempt {mine[0]} of {k} at "
                       f"{ctx.claim.regime}/{ctx.claim.policy} under challenge "
                       f"{challenge['id']}: only the first attempt under a challenge counts "
                       "(a later one could be the lucky one of several)",
                       "audit the first attempt's runs, or ask the reviewer for a new "
                       "challenge (its ledger records the attempt too)", values=values)
    return Outcome(True, expected, f"frozen under challenge {challenge['id']} (commitment "
                   f"{block['commitment'][:12]}): seeds and order derived from it; attempt 1 "
                   f"of {k} at {ctx.claim.regime}/{ctx.claim.policy}", values=values)


# ----------------------------------------------------------------- draws' Phi ranks

def phi_ranks(ctx, pair, n_reference: int, rng) -> list[tuple[str, float]]:
    """(draw run, randomised rank of its Phi in a fresh sample of F_K, in (0, 1))."""
    k = pair.k_policy
    if not len(pair.draws) or not np.isfinite(k) or int(k) == 0:
        return []
    k = int(k)
    ref = pair.no_sync.run_id if pair.no_sync is not None else pair.policy_run
    meta = ctx._meta(pair.policy_run)
    corridor = meta.get("corridor") or {}
    d, horizon = float(meta["merge_duration_s"]), float(meta["horizon_s"])
    req = ctx.runset.columns(ref, "requests", ("arrival_s", "end_s"))
    end = np.where(np.isfinite(req["end_s"]), req["end_s"], horizon)
    index = RequestIndex(req["arrival_s"], end)
    lo, hi = float(np.min(req["arrival_s"])), min(horizon, float(np.max(req["arrival_s"]))) - d
    sample = sample_schedules(k, (lo, hi + d), d, float(corridor["min_gap_s"]),
                              float(corridor["max_gap_s"]), n_reference, rng, train_start=0.0,
                              run_end=horizon)
    phi_ref = np.asarray(overlap_cost(sample, d, index=index).phi, dtype=float)
    out = []
    for rid in pair.draws.run_id.tolist():
        starts = np.sort(ctx.runset.columns(rid, "merges", ("start_s",))["start_s"])
        if starts.size != k:
            continue                        # k_match names it
        phi = float(np.asarray(overlap_cost(starts[None, :], d, index=index).phi).ravel()[0])
        less = int(np.count_nonzero(phi_ref < phi))
        equal = int(np.count_nonzero(phi_ref == phi))
        rank = less + int(rng.integers(0, equal + 1))
        out.append((rid, (rank + float(rng.uniform())) / (n_reference + 1)))
    return out


@check("draws_phi_uniform", params={"n_reference": ((int,), 999),
                                    "min_p": ((int, float), 0.001)}, tier="matched_budget")
def draws_phi_uniform(ctx, spec) -> Outcome:
    """The draws' overlap ranks in F_K are uniform (Kolmogorov-Smirnov), for every campaign."""
    from scipy import stats

    n_ref, min_p = int(spec["n_reference"]), float(spec["min_p"])
    expected = (f"the draws' overlap Phi ranks inside {n_ref} fresh schedules from F_K are "
                f"uniform (Kolmogorov-Smirnov p >= {min_p:g}), planned or not (a plan whose "
                "seeds were chosen offline regenerates selected draws)")
    if not ctx.runset.has_logs:
        return not_evaluable(expected, "a summary table has no merge or request logs: that its "
                             "draws are random placements is the table's word",
                             "audit the runs directory")
    ranks = []
    for p in ctx.claim.pairs:
        ranks += phi_ranks(ctx, p, n_ref, ctx.rng(5, p.seed))
    if len(ranks) < 2:
        return not_evaluable(expected, f"{len(ranks)} draw(s) with K > 0 to rank",
                             "replay more matched-random draws")
    u = np.array([r for _, r in ranks])
    res = stats.kstest(u, "uniform")
    top = sorted(ranks, key=lambda x: -abs(x[1] - 0.5))[:3]
    found = (f"{u.size} draws: mean rank {u.mean():.2f} (uniform: 0.50), KS D = "
             f"{res.statistic:.3f}, p = {res.pvalue:.3g}; most extreme "
             + ", ".join(f"{r} at {v:.0%}" for r, v in top))
    if res.pvalue < min_p:
        return Outcome(False, expected, found + ": the draws are not uniform placements in F_K",
                       "draws must be every draw a seeded sampler made, not a selection: "
                       "rerun them with 'evalkit sweep' (which also pre-registers them)")
    return Outcome(True, expected, found)
