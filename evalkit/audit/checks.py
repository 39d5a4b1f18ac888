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
    blocking: bool               # fails its tier (failed, or not evaluable with "block")

    def to_dict(self) -> dict:
        return {"name": self.name, "tier": self.tier, "passed": self.passed,
                "evaluable": self.evaluable, "expected": self.expected, "found": self.found,
                "recommendation": self.recommendation, "blocking": self.blocking}


def not_evaluable(expected: str, found: str, recommendation: str = "") -> Outcome:
    return Outcome(passed=None, expected=expected, found=found, recommendation=recommendation,
                   evaluable=False)


def _seeds(seeds) -> str:
    return ", ".join(str(s) for s in sorted(seeds))


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
    blocking = out.passed is False or (not out.evaluable and spec.on_not_evaluable == "block")
    return Check(name=name, tier=tier, passed=out.passed, evaluable=out.evaluable,
                 expected=out.expected, found=out.found, recommendation=out.recommendation,
                 blocking=blocking)


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
    expected = f"real-sidecar rho_{spec['mechanism'][0]} with a 95% CI above 1"
    res = ctx.transfer(spec)
    if isinstance(res, str):
        return not_evaluable(expected, res)
    lo, hi = res["rho_real_ci"]
    found = (f"rho_real = {_fmt(res['rho_real'])} [{_fmt(lo)}, {_fmt(hi)}], rho_harness = "
             f"{_fmt(res['rho_harness'])}, transfer fraction {_fmt(res['transfer_fraction'])}")
    if lo is not None and np.isfinite(lo) and lo > 1:
        return Outcome(True, expected, found)
    return Outcome(False, expected, found + ": the harness effect did not transfer",
                   "the mechanism is not shown in real serving; do not cite harness effect "
                   "sizes as real")


def transfer_not_contaminated(ctx, spec) -> Outcome:
    expected = "the inactive group of each condition holds few stressed requests"
    res = ctx.transfer(spec)
    if isinstance(res, str):
        return not_evaluable(expected, res)
    if res["contaminated"]:
        return Outcome(False, expected, "contaminated: the inactive group is itself stressed, "
                       "so rho collapses towards 1 by construction",
                       "separate active/inactive periods more cleanly (longer quiet gaps)")
    return Outcome(True, expected, "not contaminated")


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
    claim = ctx.claim
    expected = "each seed's baselines share the policy run's trace realisation"
    nominal, checked, unknown = [], 0, 0
    for p in claim.pairs:
        baselines = list(zip(p.draws.run_id.tolist(), p.draws.role.tolist(),
                             p.draws.trace_realisation.tolist()))
        if p.no_sync is not None:
            baselines.append((p.no_sync.run_id, p.no_sync.role, p.no_sync.trace_realisation))
        for run_id, role, realisation in baselines:
            if p.realisation is None or realisation is None:
                unknown += 1
                continue
            checked += 1
            if realisation != p.realisation:
                nominal.append(f"seed {p.seed}: {run_id} ({role}) saw realisation "
                               f"{str(realisation)[:12]}, policy "
                               f"{str(p.realisation)[:12]}")
    if nominal:
        return Outcome(False, expected, "nominal pairing: " + "; ".join(nominal),
                       "replay baselines on the policy's trace realisation for each seed, or "
                       "analyse as unpaired")
    if checked == 0:
        return not_evaluable(expected, "no trace realisations recorded: pairing is vouched "
                             "by the input", "record trace_realisation per run to verify it")
    return Outcome(True, expected, f"real pairing for all {checked} baseline runs")


def enough_seeds(ctx, spec) -> Outcome:
    n = len(ctx.claim.paired)
    needed = max(spec["min_seeds"], ctx.seeds_needed)
    expected = (f">= {needed} paired seeds (protocol minimum {spec['min_seeds']}; a "
                f"{ctx.alternative} sign-flip test needs {ctx.seeds_needed} to reach "
                f"alpha = {ctx.alpha:g})")
    if n >= needed:
        return Outcome(True, expected, f"{n} paired seeds")
    if n < 2:
        return Outcome(False, expected, f"{n} paired seed(s): no matched-random draws to pair "
                       "with", f"replay the policy and K-matched random draws for >= {needed} "
                       "seeds")
    return Outcome(False, expected,
                   f"underpowered: {n} paired seeds, smallest attainable {ctx.alternative} "
                   f"p = {_fmt(0.5 ** n * (2 if ctx.alternative == 'two-sided' else 1))}",
                   f"underpowered: needs >= {needed} seeds")


def gain_significant(ctx, spec) -> Outcome:
    n = len(ctx.claim.paired)
    holm = " Holm-adjusted" if ctx.protocol.multiplicity == "holm" else ""
    expected = f"{holm} {ctx.alternative} p <= {ctx.alpha:g} and mean d > 0".strip()
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
                       f" > alpha with n = {n}; " + found,
                       f"underpowered: needs >= {ctx.seeds_needed} seeds")
    if p_adj <= ctx.alpha and sf.statistic > 0:
        return Outcome(True, expected, found)
    if sf.statistic <= 0 and p_adj <= ctx.alpha:
        return Outcome(False, expected, found + ": the policy is significantly WORSE than "
                       "matched random", "do not claim an improvement")
    return Outcome(False, expected, found + ": not significant",
                   "no evidence the policy beats random placement of the same budget; more "
                   "seeds only help if the effect is real")


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


def gain_exceeds_calibration_error(ctx, spec) -> Outcome:
    mult = spec["multiplier"]
    source = spec["eps_source"]
    expected = f"mean placement gain > {mult:g} x eps_cal ({source})"
    ev = ctx.regime_evidence
    if ev.psi is None:
        return not_evaluable(expected, ev.psi_reason)
    eps = ev.psi.eps_cal if source == "in_sample" else ev.psi.eps_cal_loso
    if len(ctx.claim.paired) < 2:
        return not_evaluable(expected, "no paired gain")
    gain = ctx.sign_flip.statistic
    found = f"G = {_fmt(gain)} vs {mult:g} x eps_cal = {_fmt(mult * eps)}"
    if gain > mult * eps:
        return Outcome(True, expected, found)
    return Outcome(False, expected, found + ": the gain is within the calibration error",
                   "the calibrated-overlap theory does not explain this gain; report it as "
                   "placement gain only")


# ---------------------------------------------------------------------------- deployable

def not_oracle(ctx, spec) -> Outcome:
    expected = "oracle = false (decision-time information only)"
    if ctx.claim.oracle:
        return Outcome(False, expected, "oracle = true: the policy saw future information",
                       "report it as a bound, never as a deployable controller")
    return Outcome(True, expected, "oracle = false")


def real_sidecar(ctx, spec) -> Outcome:
    backends = spec["real_backends"]
    expected = f"every policy run on a real sidecar ({'/'.join(backends)})"
    got = ctx.claim.policy_runs.backend
    if got.isna().all():
        return not_evaluable(expected, "no backend recorded (summary table)",
                             "add a backend column or audit the run logs")
    found = sorted(set(got.fillna("unknown")))
    if set(found) <= set(backends):
        return Outcome(True, expected, "backends: " + ", ".join(found))
    return Outcome(False, expected, "backends: " + ", ".join(found),
                   "replay the policy and its baselines on a real serving sidecar")


CHECKS = {
    "fixed_cadence_baseline": fixed_cadence_baseline,
    "deferral_baseline": deferral_baseline,
    "transfer_ci_excludes_one": transfer_ci_excludes_one,
    "transfer_not_contaminated": transfer_not_contaminated,
    "matched_random_present": matched_random_present,
    "k_match": k_match,
    "pairing_real": pairing_real,
    "enough_seeds": enough_seeds,
    "gain_significant": gain_significant,
    "no_sync_present": no_sync_present,
    "load_match": load_match,
    "psi_fit": psi_fit,
    "gain_exceeds_calibration_error": gain_exceeds_calibration_error,
    "not_oracle": not_oracle,
    "real_sidecar": real_sidecar,
}
