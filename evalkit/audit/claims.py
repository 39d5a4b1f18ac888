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
from evalkit.audit.slo_breakdown import slo_breakdown
from evalkit.audit.transfer_evidence import TransferEvidence  # noqa: F401 - part of this API
from evalkit.errors import InputError, NotEstimable

BASELINE = "matched_random"


# ------------------------------------------------------------------- regime-level evidence

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

    def explained_gain(self, claim: ClaimData, n_boot: int, rng, confidence_level: float,
                       tolerance: float):
        """(ExplainedGain or None, reason): the claim's gain against the gain psi, refitted
        leave-one-seed-out on this regime's runs, predicts (:mod:`evalkit.stats.explained`).
        Cached per (policy, settings)."""
        key = (claim.policy, int(n_boot), float(confidence_level), float(tolerance))
        cache = self.__dict__.setdefault("_explained", {})
        if key not in cache:
            cache[key] = self._explained_gain(claim, n_boot, rng, confidence_level, tolerance)
        return cache[key]

    def _explained_gain(self, claim, n_boot, rng, confidence_level, tolerance):
        table = self.phi_table
        if self.psi is None or table is None:
            return None, self.psi_reason
        from evalkit.stats.explained import explained_gain

        row_of = {r: i for i, r in enumerate(table.run_id.tolist())}
        seeds, left_out = [], []
        for p in claim.paired:
            draws = [row_of[r] for r in p.draws.run_id.tolist() if r in row_of]
            if p.policy_run not in row_of or not draws:
                left_out.append(p.seed)
                continue
            seeds.append((int(p.seed), row_of[p.policy_run], draws))
        # psi is fitted on runs that cannot carry a policy's own effect: the matched-random
        # draws, and each no-sync run as the point (Phi, Vex) = (0, 0) (every seed of the
        # table has one: runs without a same-seed no-sync run are not in it)
        ns_seeds = sorted(set(table.seed.astype(int)))
        draws_rows = np.flatnonzero(table.role.to_numpy() == BASELINE)
        fit_rows = np.concatenate((draws_rows, len(table) + np.arange(len(ns_seeds))))
        try:
            res = explained_gain(np.concatenate((table.phi.to_numpy(), np.zeros(len(ns_seeds)))),
                                 np.concatenate((table.vex.to_numpy(), np.zeros(len(ns_seeds)))),
                                 np.concatenate((table.seed.to_numpy(), ns_seeds)), seeds,
                                 n_boot=n_boot, rng=rng, confidence_level=confidence_level,
                                 tolerance=tolerance, fit_rows=fit_rows)
        except (NotEstimable, InputError) as exc:
            return None, f"not evaluable: {exc.message}"
        reason = (f"seeds {', '.join(map(str, sorted(left_out)))} have no same-seed no-sync "
                  "run: left out" if left_out else "")
        return res, reason

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


# TransferEvidence: effect-size transfer from the harness to the real sidecar, paired
# against no-sync per seed (evalkit.audit.transfer_evidence).


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

    # -- design: which seeds are independent replicates, which test is valid ------------

    @cached_property
    def fingerprints(self) -> dict:
        """run_id -> (arrival fingerprint, request count), read from the requests served."""
        runs = self.campaign.runs
        if "arrival_fingerprint" not in runs.columns:
            return {}
        out = {}
        for run_id, fp, n in zip(runs.run_id.tolist(), runs.arrival_fingerprint.tolist(),
                                 runs.n_requests.tolist()):
            if isinstance(fp, str) and fp:
                out[run_id] = (fp, int(n) if pd.notna(n) else None)
        return out

    @cached_property
    def _units(self) -> tuple[list, list]:
        """Paired seeds that are independent replicates; (seed, first seed) pseudo-replicates.

        Seeds whose policy runs replayed the same requests (identical arrival fingerprint)
        are one replicate of the trace, whatever their seed number: the first is kept.
        """
        kept, dup, first_of = [], [], {}
        for p in self.claim.paired:
            key = self.fingerprints.get(p.policy_run)
            if key is not None and key in first_of:
                dup.append((p.seed, first_of[key]))
                continue
            if key is not None:
                first_of[key] = p.seed
            kept.append(p)
        return kept, dup

    @property
    def units(self) -> list:
        return self._units[0]

    @property
    def pseudo_replicates(self) -> list[tuple[int, int]]:
        return self._units[1]

    @property
    def effective_n(self) -> int:
        return len(self.units)

    @property
    def informative_n(self) -> int:
        """Independent seeds whose runs differ: a seed whose policy run and draws all have
        the same V cannot move the test statistic (it counts for nothing in min p)."""
        count = 0
        for p in self.units:
            v = np.concatenate(([p.v_policy], p.draws.violation_rate.to_numpy(float)))
            count += bool(np.ptp(v) > 1e-12 * max(1.0, float(np.max(np.abs(v)))))
        return count

    @cached_property
    def draws_per_seed(self) -> np.ndarray:
        return np.array([len(p.draws) for p in self.units], dtype=int)

    @property
    def averaged_draws(self) -> bool:
        return bool(self.draws_per_seed.size and self.draws_per_seed.max() >= 2)

    @property
    def test_name(self) -> str:
        if self.averaged_draws:
            return "studentized within-seed permutation test"
        if self.campaign.source == "summary":
            return "sign-flip test (one baseline row per seed: symmetry of d assumed)"
        return "sign-flip test"

    @cached_property
    def seeds_needed(self) -> int:
        from evalkit.stats.randomisation import seeds_needed

        m = int(self.draws_per_seed.min()) if self.draws_per_seed.size else 1
        return int(seeds_needed(self.alpha, self.alternative, m=max(m, 1)))

    @property
    def design_min_p(self) -> float:
        from evalkit.stats.randomisation import min_attainable_p

        if not self.draws_per_seed.size:
            return 1.0
        return min_attainable_p(self.draws_per_seed, self.alternative)

    @cached_property
    def d(self) -> np.ndarray:
        return np.array([p.d for p in self.units], dtype=float)

    @cached_property
    def sign_flip(self):
        """The paired test of the claim: the studentized within-seed permutation test
        (mean/se: equal means, the claim users make) when any seed averages >= 2 draws (the
        sign-flip test assumes a symmetric d, which averaged draws break), else the exact
        sign-flip test (the same test, same p, when every seed has one draw)."""
        from evalkit.stats import sign_flip_test
        from evalkit.stats.randomisation import MAX_EXACT_N, within_seed_permutation_test

        tag = zlib.crc32(f"{self.claim.regime}\0{self.claim.policy}".encode())
        rng = np.random.default_rng([self.seed, tag])
        if self.averaged_draws:
            return within_seed_permutation_test(
                [p.v_policy for p in self.units],
                [p.draws.violation_rate.to_numpy(float) for p in self.units],
                alternative=self.alternative, rng=rng,
                n_resamples=None if self._exact_ok else self.protocol.n_resamples)
        return sign_flip_test(self.d, alternative=self.alternative,
                              n_resamples=None if len(self.d) <= MAX_EXACT_N
                              else self.protocol.n_resamples,
                              rng=rng)

    @property
    def _exact_ok(self) -> bool:
        """The permutation test enumerates this design exactly (else protocol.n_resamples)."""
        from evalkit.stats.randomisation import exact_enumerable

        return exact_enumerable(self.draws_per_seed)

    def _meta(self, run_id: str) -> dict:
        from evalkit.runlog.io import read_meta

        cache = self.campaign._cache
        if ("meta", run_id) not in cache:
            cache[("meta", run_id)] = read_meta(self.campaign._dirs[run_id])
        return cache[("meta", run_id)]

    def declared_design(self, run_id: str) -> tuple:
        """What a run says it was replayed under: (min_gap_s, max_gap_s, D, horizon); the
        corridor is known only from run.json (runs directories), else None."""
        row = self.campaign.row(run_id)
        corridor = (self._meta(run_id).get("corridor") or {}) if self.campaign.has_logs else {}
        return (corridor.get("min_gap_s"), corridor.get("max_gap_s"),
                float(row["merge_duration_s"]), float(row["horizon_s"]))

    def corridor_violations(self, run_id: str, base_tolerance: float) -> list[str]:
        """Why a run's merges are not in F_K with its edges (runs directories)."""
        from evalkit.runlog.design import run_corridor_violations

        from evalkit.audit.plan_checks import campaign_plan

        merges = self.campaign.columns(run_id, "merges", ("start_s", "end_s"))
        meta = self._meta(run_id)
        # the seed's step time jointly (the smallest): one run's steps file cannot widen
        # its own tolerance; training starts where the plan (or the sampler) says
        runs = self.regime_runs
        steps = pd.to_numeric(runs.loc[runs.seed == self.campaign.row(run_id)["seed"],
                                       "inner_step_median_s"], errors="coerce")
        steps = steps[np.isfinite(steps.astype(float))]
        step = float(steps.min()) if len(steps) else float("nan")
        plan = campaign_plan(self.campaign)
        start = float((plan or {}).get("corridor", {}).get("train_start_s", 0.0))
        return run_corridor_violations(meta, merges["start_s"], merges["end_s"], step,
                                       base_tolerance, train_start=start)

    def transfer(self, spec):
        return self._transfer.get(spec)

    def load_match_table(self, spec) -> pd.DataFrame | str:
        key = tuple(sorted(spec["tolerances"].items()))
        if key not in self._load_match:
            self._load_match[key] = self._compute_load_match(spec["tolerances"])
        return self._load_match[key]

    def _compute_load_match(self, tolerances) -> pd.DataFrame | str:
        from evalkit.stats import load_match
        from evalkit.stats.loadmatch import CHECK_KEYS

        # a summary table written by `evalkit summarize` carries the same load columns
        summary = self.campaign.summary if self.campaign.has_logs else self.campaign.runs
        if not self.campaign.has_logs and not any(
                c in summary.columns and summary[c].notna().any() for c in CHECK_KEYS
                if c != "n_requests"):
            return ("not evaluable: the summary table carries no arrival rates, token totals "
                    "or step rates of the no-sync runs (write it with 'evalkit summarize')")
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
            return self.ctx.sign_flip if self.ctx.effective_n >= 2 else None
        except InputError:
            return None

    @property
    def pre_registered(self) -> bool:
        """The runs directory has a campaign plan (verified by the plan checks)."""
        from evalkit.audit.plan_checks import campaign_plan

        return campaign_plan(self.ctx.campaign) is not None

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
        d = self.ctx.d if self.ctx.effective_n >= 2 else np.array([])
        return {
            "regime": self.regime, "policy": self.policy, "baseline": BASELINE,
            "n_seeds": len(self.data.paired), "seeds": [int(s) for s in self.data.seeds],
            "effective_n": self.ctx.effective_n,
            "pseudo_replicates": [{"seed": a, "same_requests_as_seed": b}
                                  for a, b in self.ctx.pseudo_replicates],
            "test": self.ctx.test_name,
            "draws_per_seed": [int(x) for x in self.ctx.draws_per_seed],
            "design_min_p": self.ctx.design_min_p,
            "null_size": sf.null_size if sf is not None else None,
            "method": sf.method if sf is not None else None,
            "vouched": sorted(c.name for c in self.checks if c.vouched),
            "exclusions": [e for e in self.ctx.campaign.excluded
                           if e.get("regime") is None or (
                               e.get("regime") == self.regime and (
                                   e.get("role") == "no_sync"
                                   or self.policy in (e.get("policy"), e.get("matched_to"))))],
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
            "power": _power_dict(self.ctx),
            "tier": self.tier, "tier_status": self.tier_status,
            "stop_reason": self.stop_reason, "verdict": self.verdict,
            "oracle": self.data.oracle, "underpowered": self.underpowered,
            "pre_registered": self.pre_registered,
            "checks": [c.to_dict() for c in self.checks], "notes": self.notes,
            "per_seed": self.per_seed().to_dict("records"),
            "slo_breakdown": slo_breakdown(self.ctx.campaign.runs, self.data),
        }


def _power_dict(ctx) -> dict | None:
    from evalkit.audit.verdict_words import power

    try:
        return power(ctx).to_dict()
    except Exception:  # noqa: BLE001 - no design to speak of (no paired seeds)
        return None


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
    """The one-line verdict, its words chosen by the numbers (:mod:`verdict_words`)."""
    from evalkit.audit import verdict_words as words

    under = [c for c in checks if c.blocking and c.found.startswith("underpowered")]
    negligible = [c for c in checks if c.blocking and c.found.startswith("negligible")]
    prefix = "oracle bound (never deployable): " if claim.oracle else ""
    names = protocol.tier_names
    floor = names.index("matched_budget") if "matched_budget" in names else 0
    if result_tier is None or names.index(result_tier) < floor:
        if under:
            return words.underpowered_verdict(ctx, prefix)
        if negligible:
            return prefix + negligible[0].found + "; no claim beyond the mechanism tiers"
        head = "no claim supported" if result_tier is None else (
            f"mechanism only ({protocol.tier(result_tier).claim}); no win over matched random")
        return prefix + head
    return prefix + words.tier_sentence(result_tier, ctx, protocol.tier(result_tier).claim)


def _walk_goes_on(protocol: Protocol, tier, checks: list[Check]) -> bool:
    """Whether the tier walk, having evaluated ``tier``, may still go on to the next tier."""
    status = _tier_walk(replace(protocol, tiers=(tier,)),
                        [c for c in checks if c.tier == tier.name])[1][tier.name]
    return status == "passed" or (status == "not_evaluable" and tier.skip_if_not_evaluable)


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


def evaluate_claims(campaign: Campaign, claims: list[ClaimData], protocol: Protocol,
                    seed: int = 0, max_tier: str | None = None,
                    walk_above: str | None = None) -> list[ClaimResult]:
    """Evaluate every claim.  ``max_tier`` leaves out the checks of higher tiers, so the tier
    reached is capped there and their evidence is never computed.  ``walk_above`` (the gate)
    evaluates every tier up to it and higher ones while the tier walk goes on: the tier
    reached is the full audit's, but no evidence is computed for tiers it cannot reach."""
    if max_tier is not None:
        keep = protocol.tier_names[:protocol.tier_names.index(protocol.tier(max_tier).name) + 1]
        protocol = replace(protocol, tiers=tuple(t for t in protocol.tiers if t.name in keep))
    regimes = {r: RegimeEvidence(campaign, r) for r in sorted({c.regime for c in claims})}
    transfer = TransferEvidence(campaign, seed, protocol.bootstrap_resamples)
    contexts = [ClaimContext(c, campaign, protocol, regimes[c.regime], transfer, seed)
                for c in claims]
    # multiplicity: one p per testable claim, for the protocol's alternative
    testable = []
    for ctx in contexts:
        if ctx.effective_n >= 2:
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
        walked, checks = _claim_checks(ctx, protocol, walk_above)
        tier, status, reason = _tier_walk(walked, checks)
        skipped = {t.name for t in walked.tiers
                   if t.skip_if_not_evaluable and status[t.name] == "not_evaluable"}
        checks = [replace(c, blocking=False) if c.tier in skipped else c for c in checks]
        notes = []
        vouched = [c.name for c in checks if c.vouched]
        if vouched:
            notes.append("vouched by the user (--accept-vouched), not verified: "
                         + ", ".join(vouched))
        if ctx.pseudo_replicates:
            notes.append(f"effective n = {ctx.effective_n} of {len(ctx.claim.paired)} paired "
                         "seeds: seeds that replay another seed's requests count once ("
                         + ", ".join(f"seed {a} = seed {b}" for a, b in ctx.pseudo_replicates[:6])
                         + ")")
        if ctx.averaged_draws:
            notes.append("averaged draws: tested by a studentized within-seed permutation "
                         "test (does the policy's mean V differ from its draws'?), not by a "
                         "sign-flip on d")
        elif ctx.campaign.source == "summary":
            notes.append("one baseline row per seed: sign-flip test, symmetry of d assumed")
        if ctx.claim.generic_draws:
            notes.append("matched-random rows without matched_to serve every policy of the "
                         "regime: the input vouches that their K matches this policy's K")
        from evalkit.audit.plan_checks import campaign_plan

        if campaign_plan(ctx.campaign) is None:
            notes.append("not pre-registered: no campaign plan (plan.json) fixed before the "
                         "runs, so the claim cannot reach deployable")
        if ctx.claim.oracle:
            notes.append("oracle policy: a bound on what placement can achieve, never a "
                         "deployable controller")
        results.append(ClaimResult(
            regime=ctx.claim.regime, policy=ctx.claim.policy, data=ctx.claim, ctx=ctx,
            checks=checks, tier=tier, tier_status=status, stop_reason=reason,
            verdict=_verdict(tier, protocol, ctx.claim, checks, reason, ctx), notes=notes))
    return results
