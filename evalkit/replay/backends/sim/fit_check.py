"""How well a fitted twin predicts real runs: bootstrap CIs over seeds, leave-one-seed-out.

``fit_report(campaign)`` fits the twin on every seed, refits it on ``n_boot`` bootstrap
resamples of the seeds (one ``numpy.random.Generator``) for percentile CIs, and for each
seed refits on the *other* seeds and predicts that seed's runs: the twin serves the run's
requests (same arrivals, prompt and output lengths) with merges exactly in the run's real
windows, and the prediction is compared run by run — V (share of requests over the run's
end-to-end SLO), p95 latency of the requests in flight during a merge window and of the
others.  ``heldout.v_mae`` = mean |V_pred − V_real|; ``heldout.p95_rel_err`` = mean
|p95_pred / p95_real − 1| over both groups (in and out of merge windows) of every run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from evalkit.replay.backends.sim.engine import simulate_run
from evalkit.replay.backends.sim.fit import (FitEstimate, HostLoad, at_load, fit_settings,
                                             overhead_residuals)
from evalkit.replay.backends.sim.fit_data import (RealCampaign, RealRun,  # noqa: F401
                                                  run_metrics, violated)
from evalkit.replay.backends.sim.fit_predictive import predictive_check, require_baselines
from evalkit.runlog.vinterval import v_interval

TARGET_V_MAE = 0.05
TARGET_P95_REL_ERR = 0.3
CI_SETTINGS = ("iter_base_s", "decode_per_seq_s", "prefill_base_s", "prefill_per_token_s",
               "train_slowdown", "merge_slowdown", "response_overhead_s", "step_s")
DERIVED = ("merge_ratio", "merge_duration_mean_s", "load_exponent")


def compare_run(run: RealRun, settings: dict, load: HostLoad | None = None) -> dict:
    """Real vs predicted metrics of ``run``; ``load``: condition on the run's step time."""
    factor = load.factor(run) if load is not None else 1.0
    real = run_metrics(run.requests, run.merge_start, run.merge_end, run.slo, run.horizon_s)
    pred = run_metrics(simulate_run(run, at_load(settings, factor)), run.merge_start,
                       run.merge_end, run.slo, run.horizon_s)
    row = {"run_id": run.run_id, "seed": run.seed, "role": run.role, "policy": run.policy,
           "k": int(run.merge_start.size), "n_requests": real["n"], "n_in": real["n_in"],
           "load_factor": factor}
    for key in ("v", "p95", "p95_in", "p95_out"):
        row[f"{key}_real"], row[f"{key}_pred"] = real[key], pred[key]
    # the real V's own cluster-robust 95% interval (time blocks; evalkit summarize's v_ci)
    row["v_ci_low"], row["v_ci_high"], _, _ = v_interval(
        run.requests["arrival_s"].to_numpy(float), violated(run.requests, run.slo))
    return row


def _rel(pred, real) -> np.ndarray:
    pred, real = np.asarray(pred, float), np.asarray(real, float)
    good = np.isfinite(pred) & np.isfinite(real) & (real > 0)
    return np.abs(pred[good] / real[good] - 1.0)


def summarize_predictions(rows: list[dict]) -> dict:
    df = pd.DataFrame(rows)
    rel_in, rel_out = _rel(df["p95_in_pred"], df["p95_in_real"]), \
        _rel(df["p95_out_pred"], df["p95_out_real"])
    both = np.concatenate([rel_in, rel_out])
    out = {"n_runs": int(len(df)),
           "v_mae": float(np.mean(np.abs(df["v_pred"] - df["v_real"]))),
           "v_bias": float(np.mean(df["v_pred"] - df["v_real"])),
           "p95_rel_err": float(np.mean(both)) if both.size else float("nan"),
           "p95_in_rel_err": float(np.mean(rel_in)) if rel_in.size else float("nan"),
           "p95_out_rel_err": float(np.mean(rel_out)) if rel_out.size else float("nan"),
           "p95_all_rel_err": float(np.mean(_rel(df["p95_pred"], df["p95_real"]))),
           # E|V_hat - V| of a run's V from its own n requests alone: no model of the run's
           # conditions predicts V more closely on average.  Independent requests (binomial),
           # and from the run's cluster-robust interval (half-width / 1.96 as the SE)
           "v_noise_floor": float(np.mean(np.sqrt(2 / np.pi) * np.sqrt(
               df["v_real"] * (1 - df["v_real"]) / df["n_requests"]))),
           "v_noise_floor_robust": float(np.mean(np.sqrt(2 / np.pi) * (
               df["v_ci_high"] - df["v_ci_low"]) / (2 * 1.959964)))}
    out["sync_excess"] = sync_excess(df)
    return out


def sync_excess(df: pd.DataFrame) -> dict:
    """Per seed mean V(merging runs) − V(no-sync), real vs twin, and whether signs agree."""
    rows = []
    for seed, g in df.groupby("seed"):
        ns, mg = g[g["role"] == "no_sync"], g[(g["role"] != "no_sync") & (g["k"] > 0)]
        if ns.empty or mg.empty:
            continue
        rows.append((seed, float(mg["v_real"].mean() - ns["v_real"].mean()),
                     float(mg["v_pred"].mean() - ns["v_pred"].mean()),
                     float(mg["p95_real"].mean() - ns["p95_real"].mean()),
                     float(mg["p95_pred"].mean() - ns["p95_pred"].mean())))
    if not rows:
        return {"n_seeds": 0}
    a = np.array([r[1:] for r in rows])
    return {"n_seeds": len(rows), "vex_real_mean": float(a[:, 0].mean()),
            "vex_pred_mean": float(a[:, 1].mean()),
            "p95_excess_real_mean_s": float(a[:, 2].mean()),
            "p95_excess_pred_mean_s": float(a[:, 3].mean()),
            "p95_excess_sign_agrees": bool(np.sign(a[:, 2].mean()) == np.sign(a[:, 3].mean()))}


def loso_estimates(camp: RealCampaign) -> dict[int, FitEstimate]:
    """The twin fitted without each seed: ``{held-out seed: estimate}``."""
    return {seed: fit_settings(camp.subset([s for s in camp.seeds if s != seed]))
            for seed in camp.seeds}


def leave_one_seed_out(camp: RealCampaign, estimates: dict | None = None
                       ) -> tuple[dict, list[dict], dict]:
    """Held-out predictions conditioned on each run's host load, and at constant load."""
    estimates = estimates if estimates is not None else loso_estimates(camp)
    rows, flat = [], []
    for seed in camp.seeds:
        est = estimates[seed]
        for r in camp.subset([seed]):
            rows.append(compare_run(r, est.settings, est.load))
            flat.append(compare_run(r, est.settings))
    return summarize_predictions(rows), rows, summarize_predictions(flat)


def bootstrap(camp: RealCampaign, est: FitEstimate, n_boot: int,
              rng: np.random.Generator) -> dict:
    """Percentile 95% CIs of the fitted settings, resampling seeds with replacement.

    Each resample refits every setting; the response overhead (which needs simulations) is
    the median of the full fit's per-request residuals of the resampled seeds' no-sync runs.
    """
    seeds = np.asarray(camp.seeds)
    residuals = {r.run_id: overhead_residuals(r, est.settings, est.load)
                 for r in camp.runs if r.no_sync}
    draws: dict[str, list] = {k: [] for k in CI_SETTINGS + DERIVED}
    used = 0
    for _ in range(n_boot):
        pick = rng.choice(seeds, size=seeds.size, replace=True)
        runs = camp.subset(pick)
        if not any(r.no_sync for r in runs) or not any(r.merging for r in runs):
            continue
        boot = fit_settings(runs, with_overhead=False)
        res = np.concatenate([residuals[r.run_id] for r in runs if r.no_sync])
        boot.settings["response_overhead_s"] = max(0.0, float(np.median(res))) \
            if res.size else 0.0
        used += 1
        for k in draws:
            v = boot.settings.get(k, boot.derived.get(k))
            if v is not None:
                draws[k].append(float(v))
    ci = {k: [float(np.quantile(v, 0.025)), float(np.quantile(v, 0.975))]
          for k, v in draws.items() if v}
    return {"n_boot": used, "ci": ci}


@dataclass
class FitReport:
    estimate: FitEstimate
    ci: dict
    heldout: dict
    heldout_runs: list
    in_sample: dict
    report: dict


def fit_report(camp: RealCampaign, *, n_boot: int = 200, seed: int = 0,
               n_sims: int | None = 100, progress: bool = False) -> FitReport:
    """``n_sims``: twin replays per held-out run for the predictive check (None: skip it)."""
    if n_sims is not None:
        require_baselines(camp.runs)     # before any fitting: fail fast on bad input
    rng = np.random.default_rng(seed)
    est = fit_settings(camp.runs)
    boot = bootstrap(camp, est, n_boot, rng)
    estimates = loso_estimates(camp)
    heldout, rows, flat = leave_one_seed_out(camp, estimates)
    predictive = (None if n_sims is None else
                  predictive_check(camp, estimates, n_sims=n_sims, seed=seed,
                                   progress=progress))
    in_sample = summarize_predictions([compare_run(r, est.settings, est.load)
                                       for r in camp.runs])
    params = {}
    for k in CI_SETTINGS + DERIVED:
        v = est.settings.get(k, est.derived.get(k))
        if v is not None:
            params[k] = {"value": float(v), "ci": boot["ci"].get(k)}
    met = (heldout["v_mae"] <= TARGET_V_MAE and heldout["p95_rel_err"] <= TARGET_P95_REL_ERR)
    report = {
        "source": {"runs": camp.source, "regime": camp.regime, "backend": camp.backend,
                   "seeds": camp.seeds, "n_runs": len(camp.runs),
                   "n_no_sync": sum(r.no_sync for r in camp.runs),
                   "n_merging": sum(r.merging for r in camp.runs),
                   "skipped": camp.skipped},
        "parameters": params,
        "service_while_training": {
            "iter_base_s": est.service.base, "decode_per_seq_s": est.service.per_seq,
            "prefill_base_s": est.service.prefill_base,
            "prefill_per_token_s": est.service.per_token,
            "n_requests": est.service.n_requests},
        "settings": est.settings, "derived": est.derived,
        "bootstrap": {"n_boot": boot["n_boot"], "seed": seed, "unit": "seed"},
        "host_load": {"exponent": est.load.exponent, "ref_step_s": est.load.ref_step_s,
                      "rule": "iteration costs of a run scale as (median step / ref)^exponent"},
        "heldout": dict(heldout, runs=rows),
        "heldout_constant_load": flat,
        "in_sample": in_sample,
        "targets": {"v_mae": TARGET_V_MAE, "p95_rel_err": TARGET_P95_REL_ERR, "met": bool(met)},
        "notes": list(est.notes),
    }
    if predictive is not None:
        predictive["sampling_floor"] = {
            "v_mae": heldout["v_mae"], "v_noise_floor": heldout["v_noise_floor"],
            "v_noise_floor_robust": heldout["v_noise_floor_robust"],
            "rule": "per-run MAE is descriptive: a run's own V scatters by the floor from "
                    "its requests alone (binomial; cluster-robust from the run's v_ci)"}
        report["predictive"] = predictive
    return FitReport(estimate=est, ci=boot["ci"], heldout=heldout, heldout_runs=rows,
                     in_sample=in_sample, report=report)
