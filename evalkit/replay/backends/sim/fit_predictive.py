"""The twin judged as a stochastic model: predictive intervals of V for held-out runs.

For a held-out run the twin (fitted to the other seeds) is replayed ``n_sims`` times under the
run's own conditions — its requests (arrivals, prompt and output lengths), its real merge
windows, its host-load factor from its measured step time — each replay with its own seeds.
Two families of replays:

* ``request``: the twin's own randomness only (per-request send lags from its quantiles);
* ``request+run``: plus a run-level speed residual, each replay's load factor multiplied by
  ``exp(e)`` with ``e`` drawn from the training seeds' no-sync residuals
  ``log(observed / predicted decode time)`` (what the host-load rule leaves unexplained).

The observed V's rank among its simulated values gives the randomised PIT
``(n_less + u·(n_equal + 1)) / (n + 1)``, ``u ~ U(0, 1)``: uniform on (0, 1) when the observed
run is one more draw of the model, however discrete V is.  The run lies inside the central
90% predictive interval when its PIT lies in [0.05, 0.95] (ties at the interval's edges are
split at random, so the coverage of a correct model is 90% in expectation); the twin is
*calibrated* when that coverage over held-out runs lies in [0.80, 0.97].

Sync excess per group (a policy, or the matched-random draws of one policy): per seed
``Vex_s = mean V(group's runs) − mean V(no-sync runs)``, real against the twin's predictive
mean; across seeds the real mean with a seed-bootstrap CI, and whether the twin's mean has the
real mean's sign and lies inside that CI.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evalkit.errors import InputError
from evalkit.replay.backends.sim.engine import simulate_run
from evalkit.replay.backends.sim.fit import FitEstimate, at_load, decode_features
from evalkit.replay.backends.sim.fit_data import RealCampaign, RealRun, run_metrics
from evalkit.policies.context import derived_seed
from evalkit.stats.bootstrap import bootstrap_ci

LEVEL = 0.90
CALIBRATED = (0.80, 0.97)
VARIANTS = ("request", "request+run")
PIT_BINS = 10


# ----------------------------------------------------------------------------- PIT

def pit_counts(observed: float, sims) -> tuple[int, int]:
    """(simulated values below ``observed``, values equal to it); ``sims``: (n,)."""
    s = np.asarray(sims, dtype=float)
    return int(np.count_nonzero(s < observed)), int(np.count_nonzero(s == observed))


def randomized_pit(observed: float, sims, u: float) -> float:
    """Randomised PIT of ``observed`` among ``sims`` (n,) with tie-break ``u`` in [0, 1)."""
    n_less, n_equal = pit_counts(observed, sims)
    return (n_less + u * (n_equal + 1)) / (np.asarray(sims).size + 1)


def inside(pit: float, level: float = LEVEL) -> bool:
    """The run lies inside the central ``level`` predictive interval (by its PIT)."""
    tail = (1.0 - level) / 2.0
    return bool(tail <= pit <= 1.0 - tail)


def is_calibrated(coverage: float, band=CALIBRATED) -> bool:
    return bool(band[0] <= coverage <= band[1])


def pit_histogram(pits, bins: int = PIT_BINS) -> list[int]:
    """Counts of PIT values in ``bins`` equal bins of [0, 1]."""
    counts, _ = np.histogram(np.asarray(pits, dtype=float), bins=bins, range=(0.0, 1.0))
    return [int(c) for c in counts]


# ----------------------------------------------------------------------------- replays

def run_v(run: RealRun, req) -> float:
    """V of a requests table served under ``run``'s SLO."""
    return run_metrics(req, run.merge_start, run.merge_end, run.slo["e2e_s"], run.horizon_s)["v"]


def replay_v(run: RealRun, settings: dict, factor: float, seed: int) -> float:
    """V of one twin replay of ``run`` at host-load ``factor`` with replay seed ``seed``."""
    return run_v(run, simulate_run(run, at_load(settings, factor), seed=seed))


def speed_residuals(no_sync: list[RealRun], est: FitEstimate) -> np.ndarray:
    """(m,) log(observed / predicted decode time) of ``no_sync`` runs under ``est``."""
    out = []
    for r in no_sync:
        f = decode_features(r)
        work = float(est.service.work(f).sum()) * est.load.factor(r)
        if f.iters.size and work > 0:
            out.append(float(np.log(f.span.sum() / work)))
    return np.asarray(out, dtype=float)


@dataclass
class Prediction:
    """One held-out run: its observed V and the V of ``n`` twin replays."""

    run: RealRun
    group: str
    v_real: float
    sims: np.ndarray          # (n,)
    pit: float

    def row(self) -> dict:
        lo, hi = np.quantile(self.sims, [(1 - LEVEL) / 2, 1 - (1 - LEVEL) / 2])
        return {"run_id": self.run.run_id, "seed": self.run.seed, "role": self.run.role,
                "group": self.group, "v_real": self.v_real,
                "v_pred_mean": float(np.mean(self.sims)), "interval": [float(lo), float(hi)],
                "pit": self.pit, "inside": inside(self.pit)}


def group_of(run: RealRun) -> str:
    if run.no_sync:
        return "no_sync"
    if run.role == "matched_random":
        return f"matched_random({run.matched_to or '?'})"
    return run.policy


def predict_run(run: RealRun, settings: dict, factor: float, residuals, n_sims: int,
                seed: int) -> Prediction:
    """``n_sims`` replays of ``run``; ``residuals``: (m,) log speed residuals or None."""
    rng = np.random.default_rng(derived_seed(seed, "predictive", run.run_id,
                                             "run" if residuals is not None else "request"))
    sims = np.empty(n_sims)
    for j in range(n_sims):
        f = factor
        if residuals is not None and len(residuals):
            f = factor * float(np.exp(rng.choice(residuals)))
        sims[j] = replay_v(run, settings, f, derived_seed(seed, "replay", run.run_id, j))
    v = run_v(run, run.requests)
    return Prediction(run=run, group=group_of(run), v_real=v, sims=sims,
                      pit=randomized_pit(v, sims, float(rng.uniform())))


def require_baselines(runs: list[RealRun]) -> None:
    """Every held-out seed needs a no-sync run: its Vex has no baseline otherwise."""
    seeds_ns = {r.seed for r in runs if r.no_sync}
    for r in runs:
        if r.seed not in seeds_ns:
            raise InputError(f"held-out run {r.run_id} (seed {r.seed}) has no no-sync baseline "
                             "in its seed: its sync excess cannot be judged",
                             file=str(r.path / "run.json"), column="role",
                             fix=f"add the no-sync run of seed {r.seed} (evalkit sweep adds one "
                                 "per seed) or leave the seed out of the runs directory")


# ----------------------------------------------------------------------------- judgement

def coverage_summary(preds: list[Prediction]) -> dict:
    from scipy.stats import binomtest

    pits = np.array([p.pit for p in preds])
    k = int(sum(inside(p) for p in pits))
    n = int(pits.size)
    tail = (1.0 - LEVEL) / 2.0
    ci = binomtest(k, n).proportion_ci(0.95, method="exact") if n else None
    cov = k / n if n else float("nan")
    return {"n_runs": n, "n_inside": k, "coverage": cov, "level": LEVEL,
            "coverage_ci95": [ci.low, ci.high] if ci else None,
            "n_below": int(np.count_nonzero(pits < tail)),
            "n_above": int(np.count_nonzero(pits > 1.0 - tail)),
            "band": list(CALIBRATED), "calibrated": is_calibrated(cov) if n else False,
            "below_band": bool(n and cov < CALIBRATED[0]),
            "pit_histogram": pit_histogram(pits), "pit_mean": float(pits.mean()) if n else None,
            "interval_width_mean": float(np.mean([np.diff(np.quantile(
                p.sims, [(1 - LEVEL) / 2, 1 - (1 - LEVEL) / 2]))[0] for p in preds]))
            if n else None}


def sync_excess_by_group(preds: list[Prediction], *, n_boot: int = 10_000,
                         seed: int = 0) -> list[dict]:
    """Per group: real mean Vex over seeds with a BCa seed-bootstrap CI, twin's mean, verdicts."""
    by_seed: dict[int, dict[str, list[Prediction]]] = {}
    for p in preds:
        by_seed.setdefault(p.run.seed, {}).setdefault(p.group, []).append(p)
    groups = sorted({p.group for p in preds if p.group != "no_sync"})
    out = []
    for g in groups:
        real, pred, seeds = [], [], []
        for s, grp in sorted(by_seed.items()):
            if g not in grp:
                continue
            base = grp["no_sync"]        # require_baselines has checked it exists
            real.append(np.mean([p.v_real for p in grp[g]]) - np.mean([p.v_real for p in base]))
            pred.append(np.mean([p.sims.mean() for p in grp[g]])
                        - np.mean([p.sims.mean() for p in base]))
            seeds.append(s)
        row = {"group": g, "n_seeds": len(seeds), "vex_real_mean": float(np.mean(real)),
               "vex_pred_mean": float(np.mean(pred)), "vex_real_per_seed": real,
               "vex_pred_per_seed": pred}
        if len(seeds) >= 2 and np.ptp(real) > 0:
            b = bootstrap_ci(np.asarray(real), n_resamples=n_boot, rng=seed)
            row["vex_real_ci95"] = [b.ci_low, b.ci_high]
        else:
            row["vex_real_ci95"] = None
        row.update(vex_verdicts(row["vex_real_mean"], row["vex_pred_mean"], row["vex_real_ci95"]))
        out.append(row)
    return out


def _sign(x: float, tol: float = 1e-12) -> int:
    """Sign of a mean of V differences (|x| <= tol is rounding: no sign)."""
    return 0 if abs(x) <= tol else (1 if x > 0 else -1)


def vex_verdicts(real_mean: float, pred_mean: float, ci) -> dict:
    """Sign agreement, and whether the twin's mean lies inside the real mean's CI."""
    sign_real, sign_pred = _sign(real_mean), _sign(pred_mean)
    resolved = ci is not None and (ci[0] > 0 or ci[1] < 0)
    return {"sign_real": sign_real, "sign_pred": sign_pred,
            "sign_agrees": bool(sign_real == sign_pred and sign_real != 0),
            "real_sign_resolved": bool(resolved),
            "pred_inside_real_ci": bool(ci is not None and ci[0] <= pred_mean <= ci[1])}


def judge(preds: list[Prediction], *, seed: int) -> dict:
    return {"coverage": coverage_summary(preds),
            "sync_excess": sync_excess_by_group(preds, seed=seed),
            "runs": [p.row() for p in preds]}


def predictive_check(camp: RealCampaign, estimates: dict[int, FitEstimate], *,
                     n_sims: int = 100, seed: int = 0, progress: bool = True) -> dict:
    """Leave-one-seed-out predictive check; ``estimates[s]``: the twin fitted without seed s."""
    if int(n_sims) < 20:
        raise InputError(f"predictive replays per run must be >= 20, got {n_sims}",
                         column="--predictive-sims", fix="use e.g. 100")
    require_baselines(camp.runs)
    from tqdm.auto import tqdm

    preds: dict[str, list[Prediction]] = {v: [] for v in VARIANTS}
    bar = tqdm(total=len(camp.runs) * len(VARIANTS), desc="twin predictive replays",
               unit="run", disable=not progress, leave=False)
    for s in camp.seeds:
        est = estimates[s]
        train_ns = [r for r in camp.runs if r.seed != s and r.no_sync]
        resid = speed_residuals(train_ns, est)
        for r in camp.subset([s]):
            factor = est.load.factor(r)
            for variant, res in zip(VARIANTS, (None, resid)):
                preds[variant].append(predict_run(r, est.settings, factor, res, n_sims, seed))
                bar.update(1)
    bar.close()
    out = {"n_sims": int(n_sims), "seed": int(seed), "level": LEVEL, "band": list(CALIBRATED),
           "pit": "randomised: (n_less + u (n_equal + 1)) / (n + 1), u ~ U(0, 1)",
           "variants": {v: judge(preds[v], seed=seed) for v in VARIANTS}}
    out["variants"]["request+run"]["speed_residual_rule"] = (
        "each replay's load factor times exp(e), e drawn from the training seeds' no-sync "
        "log(observed / predicted decode time)")
    return out

