"""Regime-level evidence: overlap Phi, Vex and the isotonic psi fit over all runs of one regime,
the psi-predicted gain of a claim, and the V-on-exposure regression; the effect-size transfer
from the harness to the real sidecar is :class:`TransferEvidence`
(:mod:`evalkit.audit.transfer_evidence`)."""

from __future__ import annotations

from functools import cached_property

import numpy as np
import pandas as pd

from evalkit.audit.runset import ClaimData, RunSet
from evalkit.errors import InputError, NotEstimable
from evalkit.stats import RequestIndex, exposure_regression, fit_psi, overlap_cost
from evalkit.stats.explained import explained_gain

__all__ = ["BASELINE", "RegimeEvidence"]

BASELINE = "matched_random"


def _interval_arrays(arrival, end, fill_end: float) -> tuple[np.ndarray, np.ndarray]:
    """(n,) arrival and end (NaN: failed) -> request lifetimes; failed: in flight to the end."""
    end = np.asarray(end, dtype=float)
    return np.asarray(arrival, dtype=float), np.where(np.isfinite(end), end, fill_end)


class RegimeEvidence:
    """Phi, Vex and the psi fit over all runs of one regime; V-on-exposure regression."""

    def __init__(self, runset: RunSet, regime: str):
        self.runset = runset
        self.regime = regime
        self.runs = runset.runs[runset.runs.regime == regime]

    @cached_property
    def _psi(self):
        if not self.runset.has_logs:
            return None, None, ("not evaluable: a summary table has no request/merge logs to "
                                "compute overlap Phi")
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
                                 file=self.runset.input_name, column="seed",
                                 fix="one no-sync run per regime and seed")
            ns_run, ns_horizon, ns_v = ns[seed]
            starts = self.runset.columns(run_id, "merges", ("start_s",))["start_s"]
            phi = 0.0
            if starts.size:
                if seed not in indexes:
                    req = self.runset.columns(ns_run, "requests", ("arrival_s", "end_s"))
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

        try:
            res = exposure_regression(runs.violation_rate.to_numpy(float),
                                      runs.exposure_requests.to_numpy(float))
        except (NotEstimable, InputError) as exc:
            return None, f"not evaluable: {exc.message}"
        return (res, "") if res.estimable else (None, f"not evaluable: {res.reason}")
