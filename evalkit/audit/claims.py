"""Evaluate every claim of a campaign against a protocol: evidence, checks, tier reached.

Tier rule (documented in ``protocols/diloco-slo.toml``): walk the tiers in order; a tier is
*passed* when none of its checks blocks and at least one was evaluated, *not evaluable* when
none of its checks could be evaluated, else *failed*.  A passed tier raises the tier reached;
a not-evaluable tier with ``skip_if_not_evaluable`` (the mechanism tiers: harness, sidecar
transfer) is stepped over; anything else stops the walk, and its blocking checks are the
one-line reason the claim stops there.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import pandas as pd

from evalkit.audit.campaign import Campaign, ClaimData
from evalkit.audit.checks import Check, run_check
from evalkit.audit.protocol import Protocol
from evalkit.errors import InputError, NotEstimable
from evalkit.runlog.metrics import overlaps_windows

BASELINE = "matched_random"


# ------------------------------------------------------------------- regime-level evidence

def _request_intervals(requests: pd.DataFrame, fill_end: float) -> tuple[np.ndarray, np.ndarray]:
    return _interval_arrays(requests.arrival_s.to_numpy(dtype=float),
                            requests.end_s.to_numpy(dtype=float, na_value=np.nan), fill_end)


def _interval_arrays(arrival, end, fill_end: float) -> tuple[np.ndarray, np.ndarray]:
    """(n,) arrival and end (NaN: failed) -> request lifetimes; failed: in flight to the end."""
    end = np.asarray(end, dtype=float)
    return np.asarray(arrival, dtype=float), np.where(np.isfinite(end), end, fill_end)


class RegimeEvidence:
    """Phi, Vex and the psi fit over all runs of one regime; V-on-exposure regression."""

    def __init__(self, campaign: Campaign, regime: str):
        self.campaign = campaign
        self.regime = regime
        self.runs = campaign.runs[campaign.runs.regime == regime]

    @cached_property
    def _psi(self):
        if not self.campaign.has_logs:
            return None, None, ("not evaluable: a summary table has no request/merge logs to "
                                "compute overlap Phi")
        from evalkit.stats import RequestIndex, fit_psi, overlap_cost

        ns_runs = self.runs[self.runs.role == "no_sync"]
        ns = {}                 # seed -> (run_id, horizon_s, V) of its no-sync run
        for run_id, seed, horizon, v in zip(ns_runs.run_id.tolist(), ns_runs.seed.tolist(),
                                            ns_runs.horizon_s.tolist(),
                                            ns_runs.violation_rate.tolist()):
            ns[seed] = None if seed in ns else (run_id, horizon, v)    # None: ambiguous
        indexes: dict = {}      # seed -> RequestIndex of its no-sync run: sorted once per seed
        rows = []
        others = self.runs[self.runs.role != "no_sync"]
        cols = ("run_id", "role", "policy", "seed", "merge_duration_s", "violation_rate")
        for run_id, role, policy, seed, duration, v in zip(*(others[c].tolist() for c in cols)):
            if seed not in ns:
                continue
            if ns[seed] is None:
                raise InputError(f"regime {self.regime}: several no-sync runs for seed {seed}",
                                 file=self.campaign.input_name, column="seed",
                                 fix="one no-sync run per regime and seed")
            ns_run, ns_horizon, ns_v = ns[seed]
            starts = self.campaign.columns(run_id, "merges", ("start_s",))["start_s"]
            phi = 0.0
            if starts.size:
                if seed not in indexes:
                    req = self.campaign.columns(ns_run, "requests", ("arrival_s", "end_s"))
                    indexes[seed] = RequestIndex(*_interval_arrays(
                        req["arrival_s"], req["end_s"], float(ns_horizon)))
                phi = float(np.asarray(overlap_cost(starts[None, :], float(duration),
                                                    index=indexes[seed]).phi).ravel()[0])
            rows.append({"run_id": run_id, "role": role, "policy": policy, "seed": int(seed),
                         "phi": phi, "vex": float(v - ns_v)})
        table = pd.DataFrame(rows, columns=["run_id", "role", "policy", "seed", "phi", "vex"])
        if len(table) < 2:
            return table, None, f"not evaluable: {len(table)} runs with a same-seed no-sync run"
        try:
            fit = fit_psi(table.phi.to_numpy(), table.vex.to_numpy(), table.seed.to_numpy())
        except (NotEstimable, InputError) as exc:
            return table, None, f"not evaluable: {exc.message}"
        table["psi_hat"] = np.asarray(fit.predict(table.phi.to_numpy()), dtype=float)
        return table, fit, ""

    @property
    def phi_table(self) -> pd.DataFrame | None:
        return self._psi[0]

    @property
    def psi(self):
        return self._psi[1]

    @property
    def psi_reason(self) -> str:
        return self._psi[2]

    @cached_property
    def exposure(self):
        """(result or None, reason): OLS of V on request-weighted exposure over merge runs."""
        try:
            return self._exposure()
        except Exception as exc:  # reported in the report; no check depends on it
            return None, f"failed: {type(exc).__name__}: {exc}"

    def _exposure(self):
        runs = self.runs[(self.runs.role != "no_sync")]
        runs = runs[np.isfinite(runs.exposure_requests.astype(float))]
        if len(runs) < 3:
            return None, "not evaluable: exposure needs >= 3 runs with exposure recorded"
        from evalkit.stats import exposure_regression

        try:
            res = exposure_regression(runs.violation_rate.to_numpy(float),
                                      runs.exposure_requests.to_numpy(float))
        except (NotEstimable, InputError) as exc:
            return None, f"not evaluable: {exc.message}"
        return (res, "") if res.estimable else (None, f"not evaluable: {res.reason}")


class TransferEvidence:
    """Effect-size transfer of a mechanism from the harness to the real sidecar (campaign-wide)."""

    def __init__(self, campaign: Campaign, seed: int = 0):
        self.campaign = campaign
        self.seed = seed
        self._cache: dict = {}

    def _requests(self, backends) -> pd.DataFrame:
        """One row per request of the backends' merging runs: ``latency_s`` (inf if failed),
        ``t_s`` (scheduled arrival), ``active`` (in flight during a merge window) and
        ``stressed`` (in flight during a window or within the run's median out-of-window
        latency after it, while the backlog drains): stressed-but-inactive requests are what contamination measures."""
        runs = self.campaign.runs
        runs = runs[runs.backend.isin(backends) & (runs.role != "no_sync")]
        parts = []
        for rec in runs.itertuples(index=False):
            req = self.campaign.table(rec.run_id, "requests")
            merges = self.campaign.table(rec.run_id, "merges")
            start, end = _request_intervals(req, float(rec.horizon_s))
            ok = req.ok.to_numpy(dtype=bool) & np.isfinite(req.end_s.to_numpy(float,
                                                                            na_value=np.nan))
            w_start = merges.start_s.to_numpy(float)
            w_end = merges.end_s.to_numpy(float)
            latency = np.where(ok, end - start, np.inf)
            active = overlaps_windows(start, end, w_start, w_end)
            # A request that starts within one typical service time after a window still meets
            # the window's backlog: the tail is the run's median latency outside windows.
            calm = latency[~active & np.isfinite(latency)]
            drain_s = float(np.median(calm)) if calm.size else float(rec.merge_duration_s)
            tail = np.minimum(w_end + drain_s, np.append(w_start[1:], np.inf)) \
                if len(w_start) else w_end
            parts.append(pd.DataFrame({
                "run": rec.run_id, "latency_s": latency, "t_s": start, "active": active,
                "stressed": overlaps_windows(start, end, w_start, tail)}))
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

    def get(self, spec) -> dict | str:
        key = (spec["mechanism"], tuple(spec["harness_backends"]), tuple(spec["real_backends"]))
        if key not in self._cache:
            self._cache[key] = self._compute(*key)
        return self._cache[key]

    def _compute(self, mechanism, harness_backends, real_backends) -> dict | str:
        if not self.campaign.has_logs:
            return "not evaluable: a summary table has no request logs"
        backends = set(self.campaign.runs.backend.dropna())
        if not backends & set(harness_backends) or not backends & set(real_backends):
            return (f"not evaluable: needs both harness ({'/'.join(harness_backends)}) and real "
                    f"({'/'.join(real_backends)}) runs; campaign has "
                    f"{'/'.join(sorted(backends)) or 'none'}")
        from evalkit.stats import effect_size_transfer

        res = effect_size_transfer(self._requests(harness_backends),
                                   self._requests(real_backends), mechanism,
                                   rng=np.random.default_rng([self.seed, 2]))
        return {"mechanism": mechanism, "rho_harness": res.harness.rho,
                "rho_harness_ci": [res.harness.ci_low, res.harness.ci_high],
                "rho_real": res.real.rho, "rho_real_ci": [res.real.ci_low, res.real.ci_high],
                "transfer_fraction": res.transfer_fraction,
                "transfer_fraction_ci": [res.transfer_ci_low, res.transfer_ci_high],
                "contaminated": bool(res.real.contaminated or res.harness.contaminated),
                "contamination_note": "; ".join(n for n in (res.harness.contamination_note,
                                                            res.real.contamination_note) if n),
                "verdict": res.verdict, "ci_method": res.real.ci_method}


# --------------------------------------------------------------------------- per claim

class ClaimContext:
    """What the checks of one claim see; evidence is computed on first use."""

    def __init__(self, claim: ClaimData, campaign: Campaign, protocol: Protocol,
                 regime: RegimeEvidence, transfer: TransferEvidence, seed: int):
        self.claim = claim
        self.campaign = campaign
        self.protocol = protocol
        self.alpha = protocol.alpha
        self.alternative = protocol.alternative
        self.regime_evidence = regime
        self._transfer = transfer
        self.seed = seed
        self.p_adjusted = float("nan")
        self._load_match: dict = {}

    @property
    def regime_runs(self) -> pd.DataFrame:
        return self.regime_evidence.runs

    @cached_property
    def seeds_needed(self) -> int:
        from evalkit.stats import seeds_needed

        return int(seeds_needed(self.alpha, self.alternative))

    @cached_property
    def d(self) -> np.ndarray:
        return np.array([p.d for p in self.claim.paired], dtype=float)

    @cached_property
    def sign_flip(self):
        from evalkit.stats import sign_flip_test

        tag = zlib.crc32(f"{self.claim.regime}\0{self.claim.policy}".encode())
        rng = np.random.default_rng([self.seed, tag])
        return sign_flip_test(self.d, alternative=self.alternative,
                              n_resamples=None if len(self.d) <= 40 else self.protocol.n_resamples,
                              rng=rng)

    def transfer(self, spec):
        return self._transfer.get(spec)

    def load_match_table(self, spec) -> pd.DataFrame | str:
        key = tuple(sorted(spec["tolerances"].items()))
        if key not in self._load_match:
            self._load_match[key] = self._compute_load_match(spec["tolerances"])
        return self._load_match[key]

    def _compute_load_match(self, tolerances) -> pd.DataFrame | str:
        if not self.campaign.has_logs:
            return ("not evaluable: a summary table carries no request counts, arrival rates "
                    "or step rates of the no-sync run")
        from evalkit.stats import load_match
        from evalkit.stats.loadmatch import CHECK_KEYS

        summary = self.campaign.summary
        # one dict per run of the columns load_match reads: a Series lookup costs ~1 ms a run
        used = [c for c in ("seed", "violation_rate", *CHECK_KEYS) if c in summary.columns]
        rows_by_id = dict(zip(summary.run_id.tolist(),
                              summary[used].to_dict("records")))
        rows = []
        for p in self.claim.pairs:
            if p.no_sync is None:
                continue
            ns_row = rows_by_id[p.no_sync.run_id]
            for run_id, role in [(p.policy_run, "policy")] + [
                    (r, "matched_random") for r in p.draws.run_id]:
                res = load_match(rows_by_id[run_id], ns_row, tolerances)
                for c in res.checks:
                    rows.append({"seed": p.seed, "run_id": run_id, "role": role,
                                 "check": c.key, "expected": c.expected, "found": c.found,
                                 "tolerance": c.tolerance, "passed": bool(c.passed),
                                 "status": c.status, "reason": c.reason})
        if not rows:
            return "not evaluable: no seed has a no-sync run"
        return pd.DataFrame(rows)


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

    @property
    def sign_flip(self):
        try:
            return self.ctx.sign_flip if len(self.data.paired) >= 2 else None
        except InputError:
            return None

    @property
    def underpowered(self) -> bool:
        return any(c.blocking and c.found.startswith("underpowered") for c in self.checks)

    @property
    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if c.blocking]

    def per_seed(self) -> pd.DataFrame:
        table = self.data.per_seed_table()
        runs = self.ctx.campaign.runs.set_index("run_id")
        table["exposure_policy"] = [float(runs.loc[r, "exposure_requests"])
                                    for r in table.policy_run]
        table["exposure_mr"] = [float(p.draws.exposure_requests.astype(float).mean())
                                if len(p.draws) else np.nan for p in self.data.pairs]
        table["vex_policy"] = table.v_policy - table.v_no_sync
        return table

    def to_dict(self) -> dict:
        sf = self.sign_flip
        d = self.ctx.d if len(self.data.paired) >= 2 else np.array([])
        return {
            "regime": self.regime, "policy": self.policy, "baseline": BASELINE,
            "n_seeds": len(self.data.paired), "seeds": [int(s) for s in self.data.seeds],
            "wins": int((d > 0).sum()),
            "mean_diff": float(np.mean(d)) if d.size else None,
            "ci": [sf.ci_low, sf.ci_high] if sf is not None else None,
            "ci_method": sf.ci_method if sf is not None else None,
            "p_one_sided": sf.p_greater if sf is not None else None,
            "p_two_sided": sf.p_two_sided if sf is not None else None,
            "p_adjusted": self.ctx.p_adjusted if sf is not None else None,
            "exact": sf.exact if sf is not None else None,
            "min_p": sf.min_p if sf is not None else None,
            "seeds_needed": self.ctx.seeds_needed,
            "tier": self.tier, "tier_status": self.tier_status,
            "stop_reason": self.stop_reason, "verdict": self.verdict,
            "oracle": self.data.oracle, "underpowered": self.underpowered,
            "checks": [c.to_dict() for c in self.checks], "notes": self.notes,
            "per_seed": self.per_seed().to_dict("records"),
        }


def _tier_walk(protocol: Protocol, checks: list[Check]) -> tuple[str | None, dict, str]:
    status = {}
    for tier in protocol.tiers:
        mine = [c for c in checks if c.tier == tier.name]
        if any(c.blocking for c in mine if c.evaluable) or (
                any(c.blocking for c in mine) and any(c.evaluable for c in mine)):
            status[tier.name] = "failed"
        elif not any(c.evaluable for c in mine):
            status[tier.name] = "not_evaluable"
        else:
            status[tier.name] = "passed"
    reached, reason = None, ""
    for tier in protocol.tiers:
        st = status[tier.name]
        if st == "passed":
            reached = tier.name
            continue
        if st == "not_evaluable" and tier.skip_if_not_evaluable:
            continue
        blockers = [c for c in checks if c.tier == tier.name and c.blocking]
        first = blockers[0] if blockers else None
        what = "failed" if st == "failed" else "not evaluable"
        reason = f"stops before {tier.name} ({what})"
        if first is not None:
            reason += f": {first.name}: {first.found}"
            if len(blockers) > 1:
                reason += f" (+{len(blockers) - 1} more)"
        break
    else:
        reason = "every tier of the protocol is supported"
    return reached, status, reason


def _verdict(result_tier: str | None, protocol: Protocol, claim: ClaimData, checks, reason,
             ctx: ClaimContext) -> str:
    under = [c for c in checks if c.blocking and c.found.startswith("underpowered")]
    prefix = "oracle bound (never deployable): " if claim.oracle else ""
    names = protocol.tier_names
    floor = names.index("matched_budget") if "matched_budget" in names else 0
    if result_tier is None or names.index(result_tier) < floor:
        if under:
            return (prefix + f"underpowered: needs >= {ctx.seeds_needed} seeds; "
                    "no claim beyond the mechanism tiers")
        head = "no claim supported" if result_tier is None else (
            f"mechanism only ({protocol.tier(result_tier).claim}); no win over matched random")
        return prefix + head
    try:
        sf = ctx.sign_flip
        g = f"G = {sf.statistic:.4g} [{sf.ci_low:.4g}, {sf.ci_high:.4g}]"
    except Exception:  # the gain may not be estimable while a tier still passed
        g = "G n/a"
    wording = {
        "matched_budget": f"head-to-head: beats matched random at the same merge budget ({g}); "
                          "not shown to be placement gain",
        "placement_gain": f"placement gain over matched random, load-matched to no-sync ({g})",
        "calibrated": f"placement gain explained by request overlap ({g} > 2 eps_cal)",
        "deployable": f"deployable controller beats matched random ({g})",
    }
    return prefix + wording.get(result_tier, protocol.tier(result_tier).claim)


def evaluate_claims(campaign: Campaign, claims: list[ClaimData], protocol: Protocol,
                    seed: int = 0, max_tier: str | None = None) -> list[ClaimResult]:
    """Evaluate every claim.  ``max_tier`` (the gate) leaves out the checks of higher tiers,
    so the tier reached is capped there and their evidence is never computed."""
    if max_tier is not None:
        keep = protocol.tier_names[:protocol.tier_names.index(protocol.tier(max_tier).name) + 1]
        protocol = replace(protocol, tiers=tuple(t for t in protocol.tiers if t.name in keep))
    regimes = {r: RegimeEvidence(campaign, r) for r in sorted({c.regime for c in claims})}
    transfer = TransferEvidence(campaign, seed)
    contexts = [ClaimContext(c, campaign, protocol, regimes[c.regime], transfer, seed)
                for c in claims]
    # multiplicity: one p per testable claim, for the protocol's alternative
    testable = []
    for ctx in contexts:
        if len(ctx.claim.paired) >= 2:
            try:
                testable.append((ctx, ctx.sign_flip.p_value))
            except InputError:
                pass
    if testable:
        pvals = np.array([p for _, p in testable])
        if protocol.multiplicity == "holm" and len(pvals) > 1:
            from evalkit.stats import holm

            adjusted = holm(pvals, alpha=protocol.alpha)[1]
        else:
            adjusted = pvals
        for (ctx, _), adj in zip(testable, adjusted):
            ctx.p_adjusted = float(adj)
    results = []
    for ctx in contexts:
        checks = [run_check(name, tier.name, ctx, protocol.checks[name])
                  for tier in protocol.tiers for name in tier.checks]
        tier, status, reason = _tier_walk(protocol, checks)
        skipped = {t.name for t in protocol.tiers
                   if t.skip_if_not_evaluable and status[t.name] == "not_evaluable"}
        checks = [replace(c, blocking=False) if c.tier in skipped else c for c in checks]
        notes = []
        if ctx.claim.generic_draws:
            notes.append("matched-random rows without matched_to serve every policy of the "
                         "regime: the input vouches that their K matches this policy's K")
        if ctx.claim.oracle:
            notes.append("oracle policy: a bound on what placement can achieve, never a "
                         "deployable controller")
        results.append(ClaimResult(
            regime=ctx.claim.regime, policy=ctx.claim.policy, data=ctx.claim, ctx=ctx,
            checks=checks, tier=tier, tier_status=status, stop_reason=reason,
            verdict=_verdict(tier, protocol, ctx.claim, checks, reason, ctx), notes=notes))
    return results
