"""The claim context: what the checks of one claim see (design facts, the paired test, the
load match); evidence is computed on first use."""

from __future__ import annotations

import zlib
from dataclasses import replace
from functools import cached_property

import numpy as np
import pandas as pd

from evalkit.audit.checks.plan import campaign_plan
from evalkit.audit.evidence import RegimeEvidence
from evalkit.audit.protocol import Protocol
from evalkit.audit.transfer_evidence import TransferEvidence
from evalkit.audit.runset import ClaimData, RunSet
from evalkit.runlog.design import run_corridor_violations
from evalkit.runlog.io import read_meta
from evalkit.stats import load_match
from evalkit.stats.loadmatch import CHECK_KEYS
from evalkit.stats.floored import METHOD as PAIRED_METHOD
from evalkit.stats.floored import floored_mean_test
from evalkit.stats.level_trend import LevelTrend, level_trend, level_trend_applies
from evalkit.stats._result import DEFAULT_RTOL
from evalkit.stats.randomisation import (MAX_EXACT_N, exact_enumerable, min_attainable_p,
                                         seeds_needed, sign_flip_test,
                                         within_seed_permutation_test)
from evalkit.stats.tail_luck import TailLuck, tail_luck, tail_luck_applies

__all__ = ["ClaimContext"]


class ClaimContext:
    """What the checks of one claim see; evidence is computed on first use."""

    def __init__(self, claim: ClaimData, runset: RunSet, protocol: Protocol,
                 regime: RegimeEvidence, transfer: TransferEvidence, seed: int):
        self.claim = claim
        self.runset = runset
        self.protocol = protocol
        self.alpha = protocol.alpha
        self.alternative = protocol.alternative
        self.regime_evidence = regime
        self._transfer = transfer
        self.seed = seed
        self.p_adjusted = float("nan")
        self._load_match: dict = {}

    def rng(self, *stream: int) -> np.random.Generator:
        """The claim's own random stream, keyed by the audit seed, the claim (regime and
        policy) and ``stream`` (which use: the paired test takes none, the psi-predicted gain
        3, the F_K rank test 5 and the seed): the same audit gives the same numbers, and no
        two uses share a stream."""
        tag = zlib.crc32(f"{self.claim.regime}\0{self.claim.policy}".encode())
        return np.random.default_rng([self.seed, tag, *stream])

    @property
    def regime_runs(self) -> pd.DataFrame:
        return self.regime_evidence.runs

    # -- design: which seeds are independent replicates, which test is valid ------------

    @cached_property
    def fingerprints(self) -> dict:
        """run_id -> (arrival fingerprint, request count), read from the requests served."""
        runs = self.runset.runs
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
        """Independent seeds whose d is not 0: a seed with d = 0 (its policy run at its
        draws' mean) cannot move the sign flip on d (it counts for nothing in min p)."""
        d = np.array([p.d for p in self.units], dtype=float)
        if not d.size:
            return 0
        zero = DEFAULT_RTOL * float(np.mean(np.abs(d)))
        return int(np.count_nonzero(np.abs(d) > zero))

    @cached_property
    def draws_per_seed(self) -> np.ndarray:
        return np.array([len(p.draws) for p in self.units], dtype=int)

    @property
    def averaged_draws(self) -> bool:
        return bool(self.draws_per_seed.size and self.draws_per_seed.max() >= 2)

    @property
    def test_name(self) -> str:
        return PAIRED_METHOD

    @cached_property
    def seeds_needed(self) -> int:
        """Fewest seeds at which the claim's test (a sign flip on d: one value per seed,
        whatever the draws per seed) can reach alpha at all."""
        return int(seeds_needed(self.alpha, self.alternative, m=1))

    @property
    def design_min_p(self) -> float:
        if not self.draws_per_seed.size:
            return 1.0
        return min_attainable_p(int(self.draws_per_seed.size), self.alternative)

    @cached_property
    def d(self) -> np.ndarray:
        return np.array([p.d for p in self.units], dtype=float)

    @cached_property
    def unit_runs(self) -> tuple[list, list]:
        """(policy V per seed, that seed's draws' V) of the independent seeds, in order: what
        the claim's test and its diagnostics read."""
        return ([p.v_policy for p in self.units],
                [p.draws.violation_rate.to_numpy(float) for p in self.units])

    @property
    def _n_resamples(self):
        return None if len(self.d) <= MAX_EXACT_N else self.protocol.n_resamples

    @cached_property
    def paired(self):
        """The claim's test: the mean of d over independent seeds, a t-test whose variance is
        floored by the draws' (:func:`evalkit.stats.floored.floored_mean_test`: a policy whose
        runs missed the draws' tail is held to the variance that tail gives); its p, mean and
        CI are the claim's numbers (one estimand: the mean gain, whatever the draws per seed)."""
        return floored_mean_test(*self.unit_runs, self.alternative)

    @cached_property
    def sign_flip_engine(self):
        """The sign-flip test on d as the engine computes it (exact up to 40 seeds): the
        design rules read its smallest attainable p; its p is not the claim's."""
        return sign_flip_test(self.d, alternative=self.alternative,
                              n_resamples=self._n_resamples, rng=self.rng())

    @cached_property
    def sign_flip(self):
        """The claim's test in the form the document and verdicts read: p, CI, t and method
        are :attr:`paired`'s; the sign-flip engine on d keeps what the design rules read (the
        smallest p a sign flip over these seeds can reach: seeds whose runs tie count for
        nothing, and fewer than 6 seeds cannot claim at two-sided 0.05)."""
        engine = self.sign_flip_engine
        paired = self.paired
        return replace(engine, p_value=paired.p_value, p_greater=paired.p_greater,
                       p_less=paired.p_less, p_two_sided=paired.p_two_sided,
                       ci_low=paired.ci[0], ci_high=paired.ci[1],
                       ci_method="t interval with the floored variance",
                       method=f"{paired.method} ({paired.reference})", t_statistic=paired.t)

    @cached_property
    def exchangeability(self):
        """Diagnostic, never the licence for "beats": the within-seed relabelling test of
        "the policy run looks like one more draw of its seed" (raw mean), two-sided; None
        when no seed averages >= 2 draws (then it is the sign-flip test itself)."""
        if not self.averaged_draws or self.effective_n < 2:
            return None
        return within_seed_permutation_test(
            *self.unit_runs, alternative="two-sided", rng=self.rng(7), confidence_level=None,
            statistic="mean",
            n_resamples=None if exact_enumerable(self.draws_per_seed, "mean")
            else self.protocol.n_resamples)

    @cached_property
    def tail_luck(self) -> TailLuck | None:
        """Diagnostic: did the policy's runs miss the draws' upper tail by design or by luck
        (:func:`evalkit.stats.tail_luck.tail_luck`)?  None without >= 2 averaged draws."""
        policy, draws = self.unit_runs
        return tail_luck(policy, draws, self.alpha) if tail_luck_applies(draws) else None

    @cached_property
    def level_trend(self) -> LevelTrend | None:
        """Diagnostic: does the policy's V relative to its draws' rise with the seed's level
        (:func:`evalkit.stats.level_trend.level_trend`)?  None without paired seeds."""
        policy, draws = self.unit_runs
        return level_trend(policy, draws, self.alpha) if level_trend_applies(policy) else None

    def _meta(self, run_id: str) -> dict:
        cache = self.runset._cache
        if ("meta", run_id) not in cache:
            cache[("meta", run_id)] = read_meta(self.runset._dirs[run_id])
        return cache[("meta", run_id)]

    def declared_design(self, run_id: str) -> tuple:
        """What a run says it was replayed under: (min_gap_s, max_gap_s, D, horizon); the
        corridor is known only from run.json (runs directories), else None."""
        row = self.runset.row(run_id)
        corridor = (self._meta(run_id).get("corridor") or {}) if self.runset.has_logs else {}
        return (corridor.get("min_gap_s"), corridor.get("max_gap_s"),
                float(row["merge_duration_s"]), float(row["horizon_s"]))

    @cached_property
    def _seed_step_times(self) -> dict:
        """seed -> the smallest finite inner step time of the regime's runs of that seed."""
        runs = self.regime_runs
        steps = pd.to_numeric(runs["inner_step_median_s"], errors="coerce").astype(float)
        keep = np.isfinite(steps)
        return {seed: float(v) for seed, v in
                steps[keep].groupby(runs.seed[keep], sort=False).min().items()}

    def corridor_violations(self, run_id: str, base_tolerance: float) -> list[str]:
        """Why a run's merges are not in F_K with its edges (runs directories)."""
        merges = self.runset.columns(run_id, "merges", ("start_s", "end_s"))
        meta = self._meta(run_id)
        # the seed's step time jointly (the smallest): one run's steps file cannot widen
        # its own tolerance; training starts where the plan (or the sampler) says
        step = self._seed_step_times.get(self.runset.row(run_id)["seed"], float("nan"))
        plan = campaign_plan(self.runset)
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
        # a summary table written by `evalkit summarize` carries the same load columns
        summary = self.runset.summary if self.runset.has_logs else self.runset.runs
        if not self.runset.has_logs and not any(
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
