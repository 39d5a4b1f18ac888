"""Design checks of the head-to-head comparison: the matched-random draws exist, match the
policy's K, replayed its requests, lie in F_K, last D, were sent open loop, and no result
went missing."""

from __future__ import annotations

import numpy as np

from evalkit.audit.checks.core import Outcome, _listing, _seeds, check, not_evaluable

__all__ = ["k_match", "matched_random_present", "merge_durations_match", "open_loop_sending",
           "pairing_real", "policy_runs_complete", "schedules_in_corridor"]

TIER = "matched_budget"
_NUM = (int, float)


@check("matched_random_present", params={"min_draws": ((int,), 1)}, tier=TIER)
def matched_random_present(ctx, spec) -> Outcome:
    claim = ctx.claim
    need = spec["min_draws"]
    expected = (f">= {need} matched-random draw(s) matched_to {claim.policy} per seed "
                f"(regime {claim.regime})")
    missing = [p.seed for p in claim.pairs if len(p.draws) < need]
    n_draws = sum(len(p.draws) for p in claim.pairs)
    if missing:
        runs = "; ".join(f"matched_random of {claim.policy} for seed {s}" for s in missing)
        return Outcome(False, expected, f"missing runs: {runs} ({n_draws} draws in all)",
                       f"replay K-matched random draws for seeds {_seeds(missing)} "
                       f"(evalkit sweep adds them)")
    return Outcome(True, expected, f"{n_draws} draws over {len(claim.pairs)} seeds")


@check("k_match", params={"max_abs_diff": ((int,), 0)}, tier=TIER)
def k_match(ctx, spec) -> Outcome:
    claim = ctx.claim
    tol = spec["max_abs_diff"]
    expected = f"every draw's observed K equals the policy's K (|diff| <= {tol})"
    bad, unknown, checked = [], 0, 0
    for p in claim.pairs:
        # plain column iteration: itertuples builds a namedtuple class per call (~1 ms)
        for run_id, k_observed in zip(p.draws.run_id.tolist(), p.draws.k_observed.tolist()):
            if not (np.isfinite(p.k_policy) and np.isfinite(k_observed)):
                unknown += 1
                continue
            checked += 1
            if abs(p.k_policy - k_observed) > tol:
                bad.append(f"seed {p.seed}: policy K = {int(p.k_policy)}, draw {run_id} "
                           f"K = {int(k_observed)}")
    if bad:
        return Outcome(False, expected, "K mismatch: " + "; ".join(bad),
                       "re-draw matched-random schedules with the policy's observed K "
                       "(count only windows inside the observed span)")
    if checked == 0:
        return not_evaluable(expected, "no K values for the draws: the summary table "
                             "vouches that K matches", "add a K column to verify it")
    note = f" ({unknown} draws without K: vouched by the table)" if unknown else ""
    return Outcome(True, expected, f"K matches for all {checked} draws{note}")


@check("pairing_real", tier=TIER)
def pairing_real(ctx, spec) -> Outcome:
    """Pairing verified from the requests served: count and arrival fingerprint per run."""
    claim = ctx.claim
    expected = ("each seed's baselines replayed the policy run's requests (same count and "
                "arrival-time fingerprint, read from requests.parquet, not run.json)")
    fp = ctx.fingerprints
    nominal, checked, unknown = [], 0, []
    for p in claim.pairs:
        baselines = [(r, "matched_random") for r in p.draws.run_id.tolist()]
        if p.no_sync is not None:
            baselines.append((p.no_sync.run_id, "no_sync"))
        mine = fp.get(p.policy_run)
        for run_id, role in baselines:
            theirs = fp.get(run_id)
            if mine is None or theirs is None:
                unknown.append(run_id if theirs is None else p.policy_run)
                continue
            checked += 1
            if theirs != mine:
                nominal.append(f"seed {p.seed}: {run_id} ({role}) replayed {theirs[1]} "
                               f"requests with fingerprint {theirs[0][:12]}, policy run "
                               f"{p.policy_run} {mine[1]} requests {mine[0][:12]}")
    if nominal:
        return Outcome(False, expected, "nominal pairing: " + _listing(nominal, 6),
            "replay each seed's baselines on the policy run's trace realisation (same "
            "arrivals); metadata such as trace.sha256 is not evidence of pairing")
    if unknown:
        return not_evaluable(expected, f"no arrival fingerprint for {len(set(unknown))} run(s) "
                             f"(e.g. {sorted(set(unknown))[0]}): pairing is vouched by the input",
                             "audit the runs directory, or a table written by "
                             "'evalkit summarize' (it has arrival_fingerprint)")
    return Outcome(True, expected, f"real pairing for all {checked} baseline runs")


@check("policy_runs_complete", tier=TIER)
def policy_runs_complete(ctx, spec) -> Outcome:
    """Survivorship: every seed of the regime has this policy's complete result."""
    claim = ctx.claim
    expected = (f"every seed with any run in regime {claim.regime} has a complete "
                f"{claim.policy} policy run, and no run of this claim was excluded")
    runs = ctx.regime_runs
    have = set(int(x) for x in claim.policy_runs.seed)
    universe = set(int(x) for x in runs.seed)
    faults = []
    unattributed = []
    for e in ctx.runset.excluded:
        regime, seed = e.get("regime"), e.get("seed")
        if regime is None or seed is None:
            unattributed.append(f"{e['run_id']} ({e['reason']})")
            continue
        if str(regime) != claim.regime:
            continue
        try:
            seed = int(seed)
        except (TypeError, ValueError):
            unattributed.append(f"{e['run_id']} ({e['reason']})")
            continue
        universe.add(seed)
        # an excluded run of this claim is a missing result unless a complete run took its
        # place (a crashed attempt that was rerun): same seed, role and draw
        role = e.get("role")
        pair = next((p for p in claim.pairs if p.seed == seed), None)
        if role == "policy" and e.get("policy") == claim.policy:
            replaced = pair is not None
        elif role == "matched_random" and e.get("matched_to") in (claim.policy, None):
            replaced = pair is not None and e.get("draw") is not None and int(
                e["draw"]) in set(int(x) for x in pair.draws.draw.dropna())
        elif role == "no_sync":
            replaced = pair is not None and pair.no_sync is not None
        else:
            continue
        if not replaced:
            faults.append(f"seed {seed}: {e['run_id']} ({role}) excluded ({e['reason']})")
    missing = sorted(universe - have)
    faults = [f"seed {s}: no complete {claim.policy} policy run" for s in missing] + faults
    if unattributed:
        faults.append("excluded run(s) of unknown regime/seed: " + "; ".join(unattributed[:4]))
    if faults:
        return Outcome(False, expected, "missing results: " + _listing(faults, 8),
            "rerun the missing or failed runs (a crashed or deleted run is a missing result, "
            "never a seed to drop); 'evalkit sweep' resumes them")
    return Outcome(True, expected, f"{len(have)} of {len(universe)} seeds complete, nothing "
                   "excluded")


_SUMMARIZE_FIX = "audit the runs directory or a table from 'evalkit summarize'"


def _design_outcome(expected, bad, unknown, fix, vouched_what, passed_text,
                    prefix="") -> Outcome:
    """Failed on any fault, not evaluable (vouched) when runs lack the evidence, else passed."""
    if bad:
        return Outcome(False, expected, prefix + _listing(bad, 6), fix)
    if unknown:
        return not_evaluable(expected, f"no {vouched_what[0]} for {len(unknown)} run(s): "
                             f"{vouched_what[1]} is vouched by the input", _SUMMARIZE_FIX)
    return Outcome(True, expected, passed_text)


def _design_column(ctx, col):
    runs = ctx.runset.runs
    if col not in runs.columns:
        return {}
    return dict(zip(runs.run_id.tolist(), runs[col].tolist()))


def _claim_runs(ctx) -> list[tuple[int, str, str]]:
    """(seed, run_id, role) of the claim's policy runs and draws."""
    out = []
    for p in ctx.claim.pairs:
        out.append((p.seed, p.policy_run, "policy"))
        out += [(p.seed, r, "matched_random") for r in p.draws.run_id.tolist()]
    return out


@check("schedules_in_corridor", params={"tolerance_s": (_NUM, 0.05)}, tier=TIER)
def schedules_in_corridor(ctx, spec) -> Outcome:
    """Every policy and draw schedule lies in F_K with the corridor's edges."""
    expected = ("every policy and matched-random schedule respects its run's corridor, edges "
                "included (first merge within [min_gap, max_gap] of training start, gaps in "
                "[max(min_gap, D), max_gap], no room left for a forced merge at the end)")
    bad, unknown, checked = [], [], 0
    notes = _design_column(ctx, "corridor_note")
    counts = _design_column(ctx, "corridor_violations")
    for p in ctx.claim.pairs:
        # a run judged against its own run.json: the seed's runs must all declare the same
        # corridor, D and horizon, or a loosened run.json lets a policy's schedule through
        declared = {r: ctx.declared_design(r) for r in [p.policy_run] + p.draws.run_id.tolist()}
        if len({tuple("nan" if x != x else x for x in d) for d in declared.values()}) > 1:
            mine = declared[p.policy_run]
            other = next(d for d in declared.values() if d != mine)
            bad.append(f"seed {p.seed}: runs declare different designs (min_gap, max_gap, D, "
                       f"horizon): policy {mine} vs draw {other}")
    for seed, run_id, role in _claim_runs(ctx):
        if ctx.runset.has_logs:
            why = ctx.corridor_violations(run_id, spec["tolerance_s"])
        else:
            n = counts.get(run_id)
            if n is None or not np.isfinite(float(n)):
                unknown.append(run_id)
                continue
            why = [notes.get(run_id) or f"{int(n)} violation(s)"] if n else []
        checked += 1
        if why:
            bad.append(f"seed {seed} {run_id} ({role}): {why[0]}")
    return _design_outcome(
        expected, bad, unknown,
        "replay with a trainer that enforces the corridor, and draw matched-random schedules "
        "from F_K with its edges (evalkit's sampler does)",
        ("merge logs or corridor column", "the corridor"), f"all {checked} schedules in F_K",
        prefix="outside F_K: ")


@check("merge_durations_match", params={"rel_tol": (_NUM, 0.25)}, tier=TIER)
def merge_durations_match(ctx, spec) -> Outcome:
    """Observed merge windows last D, for the policy and its draws alike."""
    tol = spec["rel_tol"]
    expected = (f"median observed merge duration of every policy and draw run within "
                f"{tol:.0%} of the run's D, and the policy's within {tol:.0%} of its draws'")
    med = _design_column(ctx, "merge_duration_median_s")
    runs = ctx.runset.runs.set_index("run_id")
    bad, unknown, checked = [], [], 0
    for p in ctx.claim.pairs:
        durations = {}          # run -> median window length; runs without merges have none
        for r in [p.policy_run] + p.draws.run_id.tolist():
            v = med.get(r)
            v = float("nan") if v is None else float(v)
            if np.isfinite(v):
                durations[r] = v
            elif float(runs.loc[r, "k_observed"]) != 0:      # merged (or K unknown): no evidence
                unknown.append(r)
        for r, v in durations.items():
            checked += 1
            d = float(runs.loc[r, "merge_duration_s"])
            if np.isfinite(d) and d > 0 and abs(v - d) > tol * d:
                bad.append(f"seed {p.seed} {r}: windows last {v:.3g} s, D = {d:.3g} s")
        pol = durations.get(p.policy_run)
        draws = [v for r, v in durations.items() if r != p.policy_run]
        if pol is not None and draws:
            ref = float(np.mean(draws))
            if abs(pol - ref) > tol * ref:
                bad.append(f"seed {p.seed}: policy windows {pol:.3g} s vs draws {ref:.3g} s")
    if bad:
        return Outcome(False, expected, _listing(bad, 6),
            "a shorter window is a smaller merge, not a better placement: compare schedules "
            "whose windows last the same D")
    if unknown or checked == 0:
        return not_evaluable(expected, "no observed merge durations: D is vouched by the input",
                             "audit the runs directory or a table from 'evalkit summarize'")
    return Outcome(True, expected, f"{checked} runs with windows of D")


@check("open_loop_sending", params={"max_completion_tied_share": (_NUM, 0.2),
                                    "max_identical_arrival_share": (_NUM, 0.2)}, tier=TIER)
def open_loop_sending(ctx, spec) -> Outcome:
    """Requests were sent open loop, one by one, on the trace's schedule (pitfall 4)."""
    tied_max = spec["max_completion_tied_share"]
    same_max = spec["max_identical_arrival_share"]
    expected = (f"open-loop sending: <= {tied_max:.0%} of sends within 1 ms after another "
                f"request's completion, <= {same_max:.0%} of requests sharing an arrival time")
    tied = _design_column(ctx, "completion_tied_share")
    same = _design_column(ctx, "identical_arrival_share")
    bad, unknown, checked = [], [], 0
    ids = _claim_runs(ctx) + [(p.seed, p.no_sync.run_id, "no_sync") for p in ctx.claim.pairs
                              if p.no_sync is not None]
    for seed, run_id, role in ids:
        t, u = tied.get(run_id), same.get(run_id)
        if t is None or u is None or not (np.isfinite(float(t)) and np.isfinite(float(u))):
            unknown.append(run_id)
            continue
        checked += 1
        if float(t) > tied_max:
            bad.append(f"seed {seed} {run_id} ({role}): {float(t):.0%} of sends follow a "
                       "completion (closed loop)")
        if float(u) > same_max:
            bad.append(f"seed {seed} {run_id} ({role}): {float(u):.0%} of requests arrive in "
                       "bursts of identical times (batched)")
    return _design_outcome(
        expected, bad, unknown,
        "replay with an open-loop client on the trace's arrival times; batched or closed-loop "
        "requests are not independent (the sample is the batches)",
        ("request timings", "open-loop sending"), f"{checked} runs open loop")
