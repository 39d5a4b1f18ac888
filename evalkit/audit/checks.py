"""Named checks, MLPerf-checker style: a tier passes when all of its checks pass.

Each check is a function ``(ctx, spec) -> Outcome`` registered in :data:`CHECKS`; ``ctx`` is a
:class:`evalkit.audit.claims.ClaimContext` (claim data plus lazily computed evidence) and
``spec`` the check's :class:`~evalkit.audit.protocol.CheckSpec`.  :func:`run_check` turns an
exception inside a check into a failed check with the exception text in ``found``; a
:class:`~evalkit.errors.NotEstimable` raised while computing evidence makes it not evaluable.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evalkit.audit.table_word import FIX as TABLE_WORD_FIX
from evalkit.audit.table_word import TABLE_WORD_CHECKS, table_says
from evalkit.errors import NotEstimable


@dataclass(frozen=True)
class Outcome:
    passed: bool | None          # None when not evaluable
    expected: str
    found: str
    recommendation: str = ""
    evaluable: bool = True


@dataclass(frozen=True)
class Check:
    name: str
    tier: str
    passed: bool | None
    evaluable: bool
    expected: str
    found: str
    recommendation: str
    blocking: bool               # fails its tier (failed, or not evaluable and not vouched)
    vouched: bool = False        # not evaluable; passes only because the user vouches

    def to_dict(self) -> dict:
        return {"name": self.name, "tier": self.tier, "passed": self.passed,
                "evaluable": self.evaluable, "expected": self.expected, "found": self.found,
                "recommendation": self.recommendation, "blocking": self.blocking,
                "vouched": self.vouched}


def not_evaluable(expected: str, found: str, recommendation: str = "") -> Outcome:
    return Outcome(passed=None, expected=expected, found=found, recommendation=recommendation,
                   evaluable=False)


def _seeds(seeds) -> str:
    return ", ".join(str(s) for s in sorted(seeds))


def _listing(items: list[str], limit: int = 6) -> str:
    """The first ``limit`` items joined, and how many more there are."""
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


def _fmt(x, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "n/a"
    return f"{x:.{digits}g}"


def run_check(name: str, tier: str, ctx, spec) -> Check:
    try:
        out = CHECKS[name](ctx, spec)
    except NotEstimable as exc:
        out = not_evaluable(spec.description, f"cannot be estimated: {exc.message}",
                            exc.fix or "")
    except Exception as exc:  # a broken check must fail loudly, never pass
        out = Outcome(passed=False, expected=spec.description,
                      found=f"check raised {type(exc).__name__}: {exc}",
                      recommendation="fix the input named in the error, then rerun the audit")
    accept = bool(getattr(getattr(ctx, "protocol", None), "accept_vouched", False))
    vouchable = spec.on_not_evaluable == "vouch"
    if name in TABLE_WORD_CHECKS and out.passed is True and (where := table_says(ctx)):
        # a table's design columns are its word: passing on them is vouching, not checking
        out = not_evaluable(out.expected, f"the table's word, not verified ({where}): "
                            f"{out.found}", TABLE_WORD_FIX)
        vouchable = True
    vouched = not out.evaluable and vouchable and accept
    blocking = out.passed is False or (not out.evaluable and not vouched)
    rec = out.recommendation
    if not out.evaluable and vouchable and not accept and rec != TABLE_WORD_FIX:
        rec = (rec + "; " if rec else "") + ("or vouch for it: --accept-vouched (the report "
                                             "marks the claim as vouched)")
    return Check(name=name, tier=tier, passed=out.passed, evaluable=out.evaluable,
                 expected=out.expected, found=out.found, recommendation=rec,
                 blocking=blocking, vouched=vouched)


# ----------------------------------------------------------------------------- harness

def _harness_baseline(ctx, spec, label: str) -> Outcome:
    runs = ctx.regime_runs
    backends = spec["harness_backends"]
    harness = runs[runs.backend.isin(backends)]
    wanted = spec["policies"]
    expected = (f"a {label} baseline ({' or '.join(wanted)}) replayed on "
                f"{'/'.join(backends)} for every seed of the policy")
    if harness.empty:
        return not_evaluable(expected, f"no {'/'.join(backends)} runs in regime "
                             f"{ctx.claim.regime}: the harness tier does not apply")
    have = set(harness.loc[harness.policy.isin(wanted), "seed"])
    missing = sorted(set(ctx.claim.seeds) - have)
    if missing:
        return Outcome(False, expected, f"missing for seeds {_seeds(missing)}",
                       f"replay {wanted[0]} on {backends[0]} for seeds {_seeds(missing)} in "
                       f"regime {ctx.claim.regime}")
    return Outcome(True, expected, f"present for all {len(ctx.claim.seeds)} seeds")


def fixed_cadence_baseline(ctx, spec) -> Outcome:
    return _harness_baseline(ctx, spec, "fixed-cadence")


def deferral_baseline(ctx, spec) -> Outcome:
    return _harness_baseline(ctx, spec, "deferral")


# ---------------------------------------------------------------------- sidecar transfer

def transfer_ci_excludes_one(ctx, spec) -> Outcome:
    expected = (f"real-sidecar rho_{spec['mechanism'][0]} (p95 of the in-window requests over "
                "the same requests in the seed's no-sync run) with a 95% CI above 1")
    res = ctx.transfer(spec)
    if isinstance(res, str):
        return not_evaluable(expected, res)
    lo, hi = res["rho_real_ci"]
    glo, ghi = res["gm_ratio_real_ci"]
    f_lo, f_hi = res["transfer_fraction_ci"]
    found = (f"rho_real = {_fmt(res['rho_real'])} [{_fmt(lo)}, {_fmt(hi)}] (mean-log ratio "
             f"{_fmt(res['gm_ratio_real'])} [{_fmt(glo)}, {_fmt(ghi)}]), rho_harness = "
             f"{_fmt(res['rho_harness'])}, transfer fraction {_fmt(res['transfer_fraction'])} "
             f"[{_fmt(f_lo)}, {_fmt(f_hi)}]; {res['method']}")
    if res["transferred"]:
        return Outcome(True, expected, found)
    if str(res.get("verdict", "")).startswith("cannot be estimated: too few seeds"):
        return Outcome(False, expected, found + ": " + res["verdict"],
                       "replay the real and harness campaigns with >= 5 seeds")
    return Outcome(False, expected, found + ": the harness effect did not transfer",
                   "the mechanism is not shown in real serving; do not cite harness effect "
                   "sizes as real")


def transfer_paired(ctx, spec) -> Outcome:
    """rho paired against no-sync on both sides, with the measured drain curve; the
    guard-band fallback (no no-sync pairing) is weaker evidence and not evaluable here."""
    expected = ("both sides paired against the same requests in each seed's no-sync run, "
                "with the post-window drain curve measured")
    res = ctx.transfer(spec)
    if isinstance(res, str):
        return not_evaluable(expected, res)
    band = res["guard_band_s"]
    if not res["guard_band_measured"]:
        return not_evaluable(
            expected, f"weaker evidence only ({res['method']}): no no-sync run to pair with, "
                      f"so the post-window effect was assumed to end after "
                      f"{_fmt(band['real'])} s, not measured. " + " ".join(res["notes"]),
            "replay a load-matched no-sync run for every seed on both backends")
    parts = []
    for side in ("harness", "real"):
        d = res[side]
        drained = ("at 1 from lag 0 (no post-window effect)" if d["drains"] and not band[side]
                   else "returns to 1 after " + _fmt(band[side]) + " s" if d["drains"] else
                   f"still above 1 at {_fmt(band[side])} s")
        parts.append(f"{side}: {d['n_runs']} runs over {d['n_seeds']} seeds paired, "
                     f"{d['n_active']} in-window requests, drain curve {drained}")
    note = (" (" + "; ".join(res["notes"]) + ")") if res["notes"] else ""
    return Outcome(True, expected, "; ".join(parts) + note)


# ------------------------------------------------------------------------ matched budget

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
    for e in ctx.campaign.excluded:
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
    runs = ctx.campaign.runs
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
        if ctx.campaign.has_logs:
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


def merge_durations_match(ctx, spec) -> Outcome:
    """Observed merge windows last D, for the policy and its draws alike."""
    tol = spec["rel_tol"]
    expected = (f"median observed merge duration of every policy and draw run within "
                f"{tol:.0%} of the run's D, and the policy's within {tol:.0%} of its draws'")
    med = _design_column(ctx, "merge_duration_median_s")
    runs = ctx.campaign.runs.set_index("run_id")
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
    if n >= needed:
        return Outcome(True, expected, f"{n} independent paired seeds{note}")
    if n < 2:
        return Outcome(False, expected, f"{n} independent paired seed(s){note}: no paired test "
                       "possible", f"replay the policy and K-matched random draws for >= "
                       f"{needed} seeds, each on its own trace realisation")
    from evalkit.audit.verdict_words import power

    pw = power(ctx, min_seeds=spec["min_seeds"])
    rule = pw.text or (f"smallest attainable {ctx.alternative} p = "
                       f"{_fmt(ctx.design_min_p)}")
    return Outcome(False, expected, f"underpowered: {rule}{note}",
                   f"underpowered: needs >= {needed} seeds")


def gain_significant(ctx, spec) -> Outcome:
    n = ctx.effective_n
    holm = " Holm-adjusted" if ctx.protocol.multiplicity == "holm" else ""
    expected = (f"{holm} {ctx.alternative} p <= {ctx.alpha:g} and mean d >= "
                f"{_fmt(float(spec['min_effect']))} (the smallest effect of interest; "
                f"{ctx.test_name})").strip()
    if n < 2:
        return not_evaluable(expected, f"{n} paired seed(s): no paired test possible",
                             "replay the policy and its matched-random draws for >= "
                             f"{ctx.seeds_needed} seeds")
    sf = ctx.sign_flip
    p_adj = ctx.p_adjusted
    wins = int((ctx.d > 0).sum())
    found = (f"mean d = {_fmt(sf.statistic)} [{_fmt(sf.ci_low)}, {_fmt(sf.ci_high)}], policy "
             f"better in {wins}/{sf.n} seeds, p = {_fmt(sf.p_value)}{', adjusted ' + _fmt(p_adj) if holm else ''}"
             f" ({'exact' if sf.exact else 'Monte Carlo'})")
    if sf.min_p > ctx.alpha:
        return Outcome(False, expected, f"underpowered: smallest attainable p = {_fmt(sf.min_p)}"
                       f" > alpha with n = {n} (seeds whose runs tie cannot count); " + found,
                       f"underpowered: needs >= {ctx.seeds_needed} seeds")
    min_effect = float(spec["min_effect"])
    if p_adj <= ctx.alpha and sf.statistic > 0:
        from evalkit.audit.verdict_words import is_negligible

        if is_negligible(sf.statistic, min_effect):
            return Outcome(False, expected, f"negligible: significant but G = "
                           f"{_fmt(sf.statistic)} is below the smallest effect of interest "
                           f"{_fmt(min_effect)} (protocol min_effect); " + found,
                           "a gain this small does not matter in practice; do not claim it")
        return Outcome(True, expected, found)
    if sf.statistic <= 0 and p_adj <= ctx.alpha:
        return Outcome(False, expected, found + ": the policy is significantly WORSE than "
                       "matched random", "do not claim an improvement")
    return Outcome(False, expected, found + ": not significant",
                   "no evidence the policy beats random placement of the same budget; more "
                   "seeds only help if the effect is real")


def execution_drift(ctx, spec) -> Outcome:
    """Execution order and host load against the effect (:mod:`evalkit.audit.drift`)."""
    from evalkit.audit.drift import execution_drift as check

    return check(ctx, spec)


# ------------------------------------------------------------------------ placement gain

def no_sync_present(ctx, spec) -> Outcome:
    claim = ctx.claim
    expected = f"a no-sync run for every seed of regime {claim.regime}"
    missing = [p.seed for p in claim.pairs if p.no_sync is None]
    if missing:
        return Outcome(False, expected, "missing runs: " + "; ".join(
            f"no_sync for seed {s}" for s in missing),
            f"replay no_sync for seeds {_seeds(missing)}; a missing baseline is never V = 0. "
            "Without it the result is a head-to-head, not a placement gain")
    return Outcome(True, expected, f"present for all {len(claim.pairs)} seeds")


def load_match(ctx, spec) -> Outcome:
    tol = spec["tolerances"]
    expected = "load matched to the seed's no-sync run: " + ", ".join(
        f"{k} within {v:.0%}" for k, v in sorted(tol.items()))
    table = ctx.load_match_table(spec)
    if isinstance(table, str):
        return not_evaluable(expected, table)
    unknown = table[table.status == "not evaluable"]
    if len(unknown):
        items = sorted({f"{r.check} ({r.reason})" for r in unknown.itertuples(index=False)})
        return not_evaluable(expected, "cannot compare: " + "; ".join(items[:6]),
                             "record the trainer's steps and every request in all runs")
    bad = table[~table.passed.astype(bool)]
    if len(bad):
        items = [f"seed {r.seed} {r.run_id}: {r.check} expected {_fmt(r.expected, 6)} found "
                 f"{_fmt(r.found, 6)}" for r in bad.head(8).itertuples(index=False)]
        more = f" (+{len(bad) - 8} more)" if len(bad) > 8 else ""
        return Outcome(False, expected, "; ".join(items) + more,
                       "replay the no-sync baseline with the same trace, seed, engine and "
                       "training load (the trainer must run, only merges are off)")
    return Outcome(True, expected, f"{table.run_id.nunique()} runs matched on "
                   f"{table.check.nunique()} quantities")


# ---------------------------------------------------------------------------- calibrated

def psi_fit(ctx, spec) -> Outcome:
    expected = (f"isotonic psi fitted on >= {spec['min_runs']} runs of the regime, eps_cal "
                "reported in-sample and leave-one-seed-out")
    ev = ctx.regime_evidence
    if ev.psi is None:
        return not_evaluable(expected, ev.psi_reason,
                             "audit a runs directory with no-sync runs to fit psi")
    n = len(ev.phi_table)
    found = (f"eps_cal = {_fmt(ev.psi.eps_cal)} in-sample, {_fmt(ev.psi.eps_cal_loso)} "
             f"leave-one-seed-out, {n} runs")
    if n < spec["min_runs"]:
        return Outcome(False, expected, found, "replay more runs in this regime")
    return Outcome(True, expected, found)


def gain_explained_by_overlap(ctx, spec) -> Outcome:
    """Inference on the claim: the gain psi (leave-one-seed-out) predicts from the policy's
    and the draws' overlap Phi, against the gain measured (:mod:`evalkit.stats.explained`)."""
    import zlib

    tol = float(spec["unexplained_tolerance"])
    level = 1 - ctx.alpha
    expected = (f"psi-predicted gain G_pred (psi refitted leave-one-seed-out) with a "
                f"{level:.0%} CI above 0, and the unexplained part G - G_pred shown small: "
                f"its {1 - 2 * ctx.alpha:.0%} CI inside +-{tol:g} x |G| (equivalence, TOST "
                f"at alpha = {ctx.alpha:g})")
    ev = ctx.regime_evidence
    if ev.psi is None:
        return not_evaluable(expected, ev.psi_reason)
    tag = zlib.crc32(f"{ctx.claim.regime}\0{ctx.claim.policy}".encode())
    res, reason = ev.explained_gain(ctx.claim, ctx.protocol.bootstrap_resamples,
                                    np.random.default_rng([ctx.seed, tag, 3]), level, tol)
    if res is None:
        return not_evaluable(expected, reason)
    (g_lo, g_hi), (u_lo, u_hi) = res.g_pred_ci, res.unexplained_ci
    found = (f"G = {_fmt(res.gain)}, G_pred = {_fmt(res.g_pred)} [{_fmt(g_lo)}, {_fmt(g_hi)}], "
             f"G - G_pred = {_fmt(res.unexplained)} [{_fmt(u_lo)}, {_fmt(u_hi)}] "
             f"({res.equivalence_level:.0%} CI; tolerance "
             f"+-{_fmt(res.tolerance_abs)}) over {res.n_seeds} seeds; eps_cal "
             f"{_fmt(ev.psi.eps_cal)} in-sample, {_fmt(ev.psi.eps_cal_loso)} leave-one-seed-out"
             + (f"; {reason}" if reason else ""))
    if res.explained:
        return Outcome(True, expected, found)
    from evalkit.audit import wording

    state = wording.gain_state(res.gain, getattr(ctx, "p_adjusted", None), ctx.alpha)
    reason = wording.explained_reason(res.predicts_gain, res.within_tolerance, res.g_pred_ci,
                                      res.unexplained_ci, res.tolerance_abs)
    return Outcome(False, expected, f"{found}: {reason}",
                   wording.explained_fix(state, res.predicts_gain))


# ---------------------------------------------------------------------------- deployable

def not_oracle(ctx, spec) -> Outcome:
    """Oracle status from the policy registry (the class's code), never run.json's word."""
    from evalkit.audit.registry import oracle_status

    expected = ("the policy class uses decision-time information only (the registry's "
                "oracle flag, whatever run.json says)")
    if not ctx.campaign.has_logs:
        if ctx.claim.oracle:
            return Outcome(False, expected, "oracle = true: the policy saw future information",
                           "report it as a bound, never as a deployable controller")
        return not_evaluable(expected, "a summary table names no policy class: its oracle "
                             "column is the table's word", "audit the runs directory")
    status = {r: oracle_status(ctx._meta(r)) for r in ctx.claim.policy_runs.run_id.tolist()}
    seers = [f"{r}: {why}" for r, (o, why) in status.items() if o]
    if seers:
        return Outcome(False, expected, "oracle: " + _listing(seers, 3),
                       "report it as a bound, never as a deployable controller")
    unknown = [f"{r}: {why}" for r, (o, why) in status.items() if o is None]
    if unknown:
        return not_evaluable(expected, _listing(unknown, 3),
                             "replay the policy as a registered class (evalkit.replay.policies)")
    return Outcome(True, expected, next(iter(status.values()))[1])


def real_sidecar(ctx, spec) -> Outcome:
    """Every run of the claim's seeds (policy, draws, no-sync) on a real sidecar."""
    backends = spec["real_backends"]
    expected = (f"every run of the claim's seeds (policy, draws, no-sync) on a real sidecar "
                f"({'/'.join(backends)})")
    ids = []
    for p in ctx.claim.pairs:
        ids += [p.policy_run] + p.draws.run_id.tolist()
        ids += [p.no_sync.run_id] if p.no_sync is not None else []
    runs = ctx.campaign.runs.set_index("run_id")
    got = runs.loc[ids, "backend"]
    if got.isna().all():
        return not_evaluable(expected, "no backend recorded (summary table)",
                             "add a backend column or audit the run logs")
    found = sorted(set(got.fillna("unknown")))
    off = [f"{r} ({b})" for r, b in zip(ids, got.fillna("unknown")) if b not in backends]
    if not off:
        return Outcome(True, expected, "backends: " + ", ".join(found))
    return Outcome(False, expected, "backends: " + ", ".join(found) + "; not real: "
                   + _listing(off, 4),
                   "replay the policy and its baselines on a real serving sidecar")


CHECKS = {
    "fixed_cadence_baseline": fixed_cadence_baseline,
    "deferral_baseline": deferral_baseline,
    "transfer_ci_excludes_one": transfer_ci_excludes_one,
    "transfer_paired": transfer_paired,
    "matched_random_present": matched_random_present,
    "k_match": k_match,
    "pairing_real": pairing_real,
    "policy_runs_complete": policy_runs_complete,
    "schedules_in_corridor": schedules_in_corridor,
    "merge_durations_match": merge_durations_match,
    "open_loop_sending": open_loop_sending,
    "enough_seeds": enough_seeds,
    "gain_significant": gain_significant,
    "execution_drift": execution_drift,
    "no_sync_present": no_sync_present,
    "load_match": load_match,
    "psi_fit": psi_fit,
    "gain_explained_by_overlap": gain_explained_by_overlap,
    "not_oracle": not_oracle,
    "real_sidecar": real_sidecar,
}

# checks kept in their own modules (they import this one's Outcome and helpers)
from evalkit.audit import like_for_like as _lfl, plan_checks as _plan  # noqa: E402

CHECKS.update({
    "like_for_like": _lfl.like_for_like,
    "plan_complete": _plan.plan_complete,
    "draws_as_planned": _plan.draws_as_planned,
    "plan_rules": _plan.plan_rules,
    "draws_phi_uniform": _plan.draws_phi_uniform,
    "pre_registered": _plan.pre_registered,
})
