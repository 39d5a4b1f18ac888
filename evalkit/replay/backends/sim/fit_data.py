"""Real runs as the twin fit reads them, the checks that refuse unusable input, and the
metrics (V, p95 in and out of merge windows) measured on a requests table.

A fit needs real runs (any backend but ``sim``) of one regime, complete, from at least
:data:`MIN_SEEDS` seeds (the leave-one-seed-out check fits on the others), no-sync runs in
at least two seeds (they measure serving while inner training runs) and runs that merged
(they measure serving during merge windows).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from evalkit.errors import InputError
from evalkit.runlog import metrics
from evalkit.runlog.io import iter_run_dirs, read_meta, read_table

MIN_SEEDS = 3
REQUEST_COLUMNS = ["request_id", "arrival_s", "sent_s", "first_token_s", "end_s",
                   "prompt_tokens", "output_tokens", "ok"]


@dataclass
class RealRun:
    run_id: str
    path: Path
    seed: int
    role: str
    policy: str
    backend: str
    regime: str
    slo: dict
    horizon_s: float
    merge_duration_s: float
    requests: pd.DataFrame
    merge_start: np.ndarray
    merge_end: np.ndarray
    step_s: np.ndarray                      # inner-step durations
    effective: dict = field(default_factory=dict)
    matched_to: str | None = None
    cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def no_sync(self) -> bool:
        return self.role == "no_sync"

    @property
    def merging(self) -> bool:
        return not self.no_sync and self.merge_start.size > 0


@dataclass
class RealCampaign:
    runs: list[RealRun]
    regime: str
    backend: str
    source: str
    skipped: list[str] = field(default_factory=list)

    @property
    def seeds(self) -> list[int]:
        return sorted({r.seed for r in self.runs})

    def subset(self, seeds) -> list[RealRun]:
        """The runs of ``seeds`` (a seed listed twice contributes its runs twice)."""
        by_seed: dict[int, list[RealRun]] = {}
        for r in self.runs:
            by_seed.setdefault(r.seed, []).append(r)
        return [r for s in seeds for r in by_seed.get(int(s), [])]


def _read(run_dir: Path) -> RealRun | str:
    meta = read_meta(run_dir)
    if not meta.get("complete"):
        return f"{meta.get('run_id', run_dir.name)}: incomplete"
    req = read_table(run_dir, "requests")
    missing = [c for c in REQUEST_COLUMNS if c not in req.columns]
    if missing:
        raise InputError("requests table lacks a column the fit needs",
                         file=str(run_dir / "requests.parquet"), column=missing[0],
                         fix="rewrite the run with every schema column")
    merges = read_table(run_dir, "merges")
    steps = None
    if (run_dir / "steps.parquet").exists():
        steps = read_table(run_dir, "steps")
    step_s = (np.empty(0) if steps is None or len(steps) == 0 else
              (steps["end_s"] - steps["start_s"]).to_numpy(dtype=float))
    settings = meta.get("settings") or {}
    return RealRun(
        run_id=str(meta["run_id"]), path=run_dir, seed=int(meta["seed"]),
        role=str(meta["role"]), policy=str(meta["policy"]), backend=str(meta["backend"]),
        regime=str(meta["regime"]), slo=dict(meta["slo"]),
        horizon_s=float(meta["horizon_s"]), merge_duration_s=float(meta["merge_duration_s"]),
        requests=req[REQUEST_COLUMNS].copy(),
        merge_start=merges["start_s"].to_numpy(dtype=float),
        merge_end=merges["end_s"].to_numpy(dtype=float), step_s=step_s,
        effective=dict(settings.get("effective") or {}),
        matched_to=meta.get("matched_to"))


def load_real_runs(runs_dir, regime: str | None = None) -> RealCampaign:
    """Read and check the real runs under ``runs_dir`` (InputError, exit 2, when unusable)."""
    root = Path(runs_dir)
    dirs = iter_run_dirs(root)
    if not dirs:
        raise InputError("no runs found", file=str(root),
                         fix="pass the directory that holds the real run directories")
    runs, skipped = [], []
    for d in dirs:
        got = _read(d)
        if isinstance(got, str):
            skipped.append(got)
            continue
        if got.backend == "sim":
            raise InputError(f"run {got.run_id} is a simulator run: a twin is fitted to real "
                             "runs only", file=str(d / "run.json"), column="backend",
                             fix="pass a directory of real runs (torch, vllm or imported); "
                                 "keep simulator runs elsewhere")
        runs.append(got)
    if not runs:
        raise InputError("no complete runs", file=str(root),
                         fix="finish the campaign (evalkit sweep resumes it)")
    regimes = sorted({r.regime for r in runs})
    if regime is None and len(regimes) > 1:
        raise InputError(f"runs of several regimes {regimes}: a twin describes one rig",
                         file=str(root), column="regime", fix="pick one with --regime")
    regime = regime or regimes[0]
    if regime not in regimes:
        raise InputError(f"no runs of regime {regime!r} (found {regimes})", file=str(root),
                         column="regime", fix=f"use one of {regimes}")
    runs = [r for r in runs if r.regime == regime]
    backends = sorted({r.backend for r in runs})
    camp = RealCampaign(runs=runs, regime=regime, backend="+".join(backends),
                        source=root.name, skipped=skipped)
    check_campaign(camp, root)
    return camp


def check_campaign(camp: RealCampaign, root) -> None:
    seeds = camp.seeds
    if len(seeds) < MIN_SEEDS:
        raise InputError(f"runs of {len(seeds)} seed(s) {seeds}: the fit needs >= {MIN_SEEDS} "
                         "(bootstrap over seeds and a leave-one-seed-out check)",
                         file=str(root), column="seed",
                         fix=f"run the campaign with at least {MIN_SEEDS} seeds")
    ns_seeds = sorted({r.seed for r in camp.runs if r.no_sync})
    if len(ns_seeds) < 2:
        raise InputError(f"no-sync runs in {len(ns_seeds)} seed(s): they measure serving while "
                         "inner training runs and the fit needs them in >= 2 seeds",
                         file=str(root), column="role",
                         fix="add the no-sync baseline (evalkit sweep adds one per seed)")
    if not any(r.merging for r in camp.runs):
        raise InputError("no run merged: the slowdown during merge windows cannot be fitted",
                         file=str(root), column="role",
                         fix="include policy or matched-random runs that merge")
    for r in camp.runs:
        o = r.requests["output_tokens"].to_numpy()
        if r.requests.empty or not np.any(o >= 2):
            raise InputError(f"run {r.run_id} has no request with >= 2 output tokens",
                             file=str(r.path / "requests.parquet"), column="output_tokens",
                             fix="decode costs are fitted from multi-token requests")


# ----------------------------------------------------------------------------- metrics

def violated(req: pd.DataFrame, slo) -> np.ndarray:
    """(n,) bool: the request counts towards V (:class:`metrics.SloFlags`); ``slo`` is the
    run's SLO dict, or a number for an end-to-end SLO alone."""
    slo = {"e2e_s": float(slo)} if not isinstance(slo, dict) else slo
    return metrics.slo_flags(req["arrival_s"].to_numpy(float),
                             req["first_token_s"].to_numpy(float),
                             req["end_s"].to_numpy(float), req["output_tokens"].to_numpy(float),
                             req["ok"].to_numpy(bool), slo).violated


def run_metrics(req: pd.DataFrame, merge_start, merge_end, slo, horizon_s: float) -> dict:
    """V (every SLO of ``slo``, a dict or an e2e number), p95 of all requests, of those in
    flight during a merge window, of the others."""
    arrival = req["arrival_s"].to_numpy(float)
    end = req["end_s"].to_numpy(float)
    ok = req["ok"].to_numpy(bool)
    lat = metrics.e2e_latency(arrival, end, ok)
    lo, hi = metrics.request_intervals(arrival, req["sent_s"].to_numpy(float), end, ok,
                                       horizon_s)
    inside = metrics.overlaps_windows(lo, hi, merge_start, merge_end)
    return {"v": float(np.mean(violated(req, slo))),
            "p95": metrics.quantile(lat, 0.95),
            "p95_in": metrics.quantile(lat[inside], 0.95) if inside.any() else float("nan"),
            "p95_out": metrics.quantile(lat[~inside], 0.95) if (~inside).any() else float("nan"),
            "n_in": int(inside.sum()), "n": int(lat.size)}
