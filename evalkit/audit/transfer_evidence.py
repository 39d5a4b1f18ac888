"""Effect-size transfer evidence of a campaign: request tables for both sides, then the
paired estimator (:mod:`evalkit.stats.transfer`), or its weaker fallback.

Each merging run (role policy or matched_random) of the harness backends and of the real
backends is paired with the no-sync run of its regime and seed: requests are matched by
``request_id`` (and must share the scheduled arrival).  When both sides have paired runs,
both are estimated paired (the transfer fraction compares like with like); when a side has
none, both sides use the pre-registered guard band and the result is labelled weaker.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from evalkit.errors import NotEstimable
from evalkit.runlog.metrics import overlaps_windows, union_windows
from evalkit.stats.transfer import (FALLBACK, MIN_BIN_REQUESTS, PAIRED, guard_band_transfer,
                                    paired_transfer)

__all__ = ["ARRIVAL_TOL_S", "MIN_MATCHED_SHARE", "TransferEvidence"]

ARRIVAL_TOL_S = 1e-3        # a pair must share the scheduled arrival to this tolerance
MIN_MATCHED_SHARE = 0.9     # a run whose requests match its no-sync run less than this: unpaired


def _lifetimes(req: pd.DataFrame, horizon: float):
    """arrival (n,), lifetime end (n,; failed: the horizon) and latency (n,; failed: +inf)."""
    arrival = req.arrival_s.to_numpy(dtype=float)
    end = req.end_s.to_numpy(dtype=float, na_value=np.nan)
    ok = req.ok.to_numpy(dtype=bool) & np.isfinite(end)
    fill = np.where(np.isfinite(end), end, max(horizon, float(np.nanmax(arrival, initial=0))))
    return arrival, fill, np.where(ok, end - arrival, np.inf)


def _lag(arrival, ws, we):
    """Arrival minus the end of the last union window that ended at or before it (NaN: none)."""
    j = np.searchsorted(we, arrival, side="right") - 1
    return np.where(j >= 0, arrival - we[np.maximum(j, 0)], np.nan)


class TransferEvidence:
    """Effect-size transfer of a mechanism from the harness to the real sidecar (campaign-wide).

    ``get(spec)`` returns the ``audit.json`` ``transfer.<mechanism>`` dict, or a string saying
    why it is not evaluable; one computation per distinct set of spec parameters.
    """

    def __init__(self, runset, seed: int = 0, n_boot: int = 2000):
        self.runset = runset
        self.seed = seed
        self.n_boot = int(n_boot)
        self._cache: dict = {}

    # ------------------------------------------------------------------ request tables

    def _no_sync_runs(self) -> dict:
        """(regime, seed) -> no-sync run id, or None when several runs claim the slot."""
        runs = self.runset.runs
        out: dict = {}
        for run_id, regime, seed in zip(*(runs.loc[runs.role == "no_sync", c].tolist()
                                          for c in ("run_id", "regime", "seed"))):
            out[(regime, seed)] = None if (regime, seed) in out else run_id
        return out

    def _side(self, backends) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
        """(paired rows, fallback rows, notes) of the backends' merging runs."""
        runs = self.runset.runs
        runs = runs[runs.backend.isin(backends) & (runs.role != "no_sync")]
        no_sync = self._no_sync_runs()
        everything = self.runset.runs
        horizons = dict(zip(everything.run_id.tolist(), everything.horizon_s.astype(float)))
        paired, fallback, unpaired = [], [], []
        for run_id, regime, seed, horizon in zip(*(runs[c].tolist() for c in
                                                   ("run_id", "regime", "seed", "horizon_s"))):
            req = self.runset.table(run_id, "requests")
            merges = self.runset.table(run_id, "merges")
            ws, we = union_windows(merges.start_s.to_numpy(float), merges.end_s.to_numpy(float))
            arrival, end, latency = _lifetimes(req, float(horizon))
            own_active = overlaps_windows(arrival, end, ws, we)
            group = f"{regime}/{seed}"
            fallback.append(pd.DataFrame({
                "run": run_id, "group": group, "t_s": arrival, "latency_s": latency,
                "active": own_active, "lag_s": np.where(own_active, np.nan,
                                                        _lag(arrival, ws, we)),
                "output_tokens": req.output_tokens.to_numpy(dtype=float, na_value=np.nan)}))
            ns_id = no_sync.get((regime, seed))
            if ns_id is None:
                unpaired.append(f"{run_id} (no single no-sync run for regime {regime}, "
                                f"seed {seed})")
                continue
            ns_req = self.runset.table(ns_id, "requests")
            ns_arrival, ns_end, ns_latency = _lifetimes(ns_req, horizons[ns_id])
            ns_index = pd.Index(ns_req.request_id.to_numpy())
            pos = ns_index.get_indexer(req.request_id.to_numpy()) \
                if ns_index.is_unique else np.full(len(req), -1)
            found = pos >= 0
            same = found.copy()
            same[found] = np.abs(ns_arrival[pos[found]] - arrival[found]) <= ARRIVAL_TOL_S
            if same.mean() < MIN_MATCHED_SHARE:
                unpaired.append(f"{run_id} (only {same.mean():.0%} of its requests match "
                                f"{ns_id} by request_id and arrival)")
                continue
            p = pos[same]
            active = overlaps_windows(arrival[same], np.maximum(end[same], ns_end[p]), ws, we)
            paired.append(pd.DataFrame({
                "run": run_id, "group": group, "t_s": arrival[same],
                "latency_s": latency[same], "latency_ref_s": ns_latency[p], "active": active,
                "lag_s": np.where(active, np.nan, _lag(arrival[same], ws, we))}))
        notes = []
        if unpaired:
            notes.append(f"{'/'.join(backends)}: {len(unpaired)} merging run(s) without a "
                         "usable no-sync pair: " + "; ".join(unpaired[:5])
                         + (" ..." if len(unpaired) > 5 else ""))
        cat = (lambda parts: pd.concat(parts, ignore_index=True) if parts else pd.DataFrame())
        return cat(paired), cat(fallback), notes

    # ------------------------------------------------------------------ the estimate

    def get(self, spec) -> dict | str:
        params = spec.params if hasattr(spec, "params") else dict(spec)
        key = tuple((k, tuple(v) if isinstance(v, list) else v)
                    for k, v in sorted(params.items()))
        if key not in self._cache:
            self._cache[key] = self._compute(params)
        return self._cache[key]

    def _compute(self, p: dict) -> dict | str:
        mechanism = p["mechanism"]
        harness_backends, real_backends = list(p["harness_backends"]), list(p["real_backends"])
        if not self.runset.has_logs:
            return "not evaluable: a summary table has no request logs"
        backends = set(self.runset.runs.backend.dropna())
        if not backends & set(harness_backends) or not backends & set(real_backends):
            return (f"not evaluable: needs both harness ({'/'.join(harness_backends)}) and real "
                    f"({'/'.join(real_backends)}) runs; campaign has "
                    f"{'/'.join(sorted(backends)) or 'none'}")

        h_paired, h_fallback, h_notes = self._side(harness_backends)
        r_paired, r_fallback, r_notes = self._side(real_backends)
        if h_fallback.empty or r_fallback.empty:
            return "not evaluable: no merging runs on one side"
        rng = np.random.default_rng([self.seed, 2])
        common = dict(mechanism=mechanism, block_s=float(p.get("block_s", 30.0)),
                      n_boot=self.n_boot, rng=rng)
        usable = (not h_paired.empty and h_paired.active.any()
                  and not r_paired.empty and r_paired.active.any())
        try:
            if usable:
                res = paired_transfer(h_paired, r_paired,
                                      bin_s=float(p.get("drain_bin_s", 5.0)),
                                      max_lag_s=float(p.get("drain_max_lag_s", 60.0)), **common)
            else:
                res = guard_band_transfer(h_fallback, r_fallback,
                                          p.get("fallback_guard_band_s", 30.0),
                                          int(p.get("fallback_length_strata", 10)), **common)
        except NotEstimable as exc:     # e.g. no request of one side in flight during a merge
            return f"not evaluable: {exc.message}"
        notes = h_notes + r_notes
        if res.method == FALLBACK:
            notes.append("weaker: no side-wide no-sync pairing, so the post-window effect is "
                         "not measured; the reference group is the requests arriving at least "
                         f"the pre-registered guard band ({res.real.guard_band_by_stratum} s "
                         "by output-length stratum) after a window, re-weighted to the "
                         "in-window output-length mix")
        side = lambda s: {  # noqa: E731 - a small formatter for both sides
            "rho": s.rho, "rho_ci": [s.ci_low, s.ci_high], "gm_ratio": s.gm_ratio,
            "gm_ratio_ci": [s.gm_ci_low, s.gm_ci_high], "n_active": s.n_active,
            "n_reference": s.n_reference, "n_failed_pairs": s.n_failed_pairs,
            "n_runs": s.n_runs, "n_seeds": s.n_groups, "n_blocks": s.n_blocks,
            "drains": s.drains, "post_window_effect": s.post_window_effect}
        return {
            "mechanism": mechanism, "method": res.method,
            "rho_harness": res.harness.rho,
            "rho_harness_ci": [res.harness.ci_low, res.harness.ci_high],
            "rho_real": res.real.rho, "rho_real_ci": [res.real.ci_low, res.real.ci_high],
            "transfer_fraction": res.transfer_fraction,
            "transfer_fraction_ci": [res.transfer_ci_low, res.transfer_ci_high],
            "gm_ratio_harness": res.harness.gm_ratio,
            "gm_ratio_harness_ci": [res.harness.gm_ci_low, res.harness.gm_ci_high],
            "gm_ratio_real": res.real.gm_ratio,
            "gm_ratio_real_ci": [res.real.gm_ci_low, res.real.gm_ci_high],
            "transfer_fraction_gm": res.transfer_fraction_gm,
            "transfer_fraction_gm_ci": [res.transfer_gm_ci_low, res.transfer_gm_ci_high],
            "drain_curve": {"harness": [b.to_dict() for b in res.harness.drain_curve],
                            "real": [b.to_dict() for b in res.real.drain_curve]},
            "drain_min_requests": MIN_BIN_REQUESTS,     # a lag bin is drawn from this many up
            "guard_band_s": {"harness": res.harness.guard_band_s,
                             "real": res.real.guard_band_s},
            "guard_band_measured": res.method == PAIRED,
            # kept for readers of the old key: a naive in/out split would have had a slowed
            # "inactive" group (a post-window effect); None when it was not measured
            "contaminated": (bool(res.harness.post_window_effect or res.real.post_window_effect)
                             if res.method == PAIRED else None),
            "harness": side(res.harness), "real": side(res.real),
            "transferred": res.transferred, "verdict": res.verdict,
            # no CI over seeds: fewer seeds than a bootstrap over seeds can cover
            "too_few_seeds": bool(not np.isfinite(res.real.ci_low) and (
                res.harness.too_few_seeds or res.real.too_few_seeds)),
            "ci_method": res.real.ci_method, "notes": notes,
        }
