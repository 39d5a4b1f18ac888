"""Small run directories written by hand (run.json, requests, merges) for the run-log reading,
summary and interval tests."""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

import evalkit.runlog.io as io


# ------------------------------------------------------------------------------ helpers

def _meta(run_id: str, **changes) -> dict:
    meta = {"run_id": run_id, "policy": "wa", "role": "policy", "seed": 0, "draw": None,
            "matched_to": None, "regime": "r", "trace": {"name": "t", "sha256": "abc"},
            "backend": "sim", "slo": {"e2e_s": 2.0, "ttft_s": None, "tpot_s": None},
            "merge_duration_s": 2.0, "horizon_s": 100.0,
            "corridor": {"min_gap_s": 1.0, "max_gap_s": 50.0}, "oracle": False,
            "settings": {"requested": {}, "effective": {}}, "rng_seeds": {}}
    meta.update(changes)
    return meta


def _requests(arrival, latency, *, sent_lag=0.0, ok=None, tokens=5) -> pd.DataFrame:
    arrival = np.asarray(arrival, dtype=float)
    n = arrival.size
    ok = np.ones(n, dtype=bool) if ok is None else np.asarray(ok, dtype=bool)
    end = arrival + np.asarray(latency, dtype=float)
    return pd.DataFrame({
        "request_id": np.arange(n, dtype=np.int64), "arrival_s": arrival,
        "sent_s": arrival + sent_lag, "first_token_s": np.minimum(arrival + sent_lag + 0.1, end),
        "end_s": end, "prompt_tokens": np.full(n, 7, dtype=np.int64),
        "output_tokens": np.full(n, tokens, dtype=np.int64), "ok": ok,
        "error": [None if o else "timeout" for o in ok]})


def _merges(windows) -> pd.DataFrame:
    w = np.asarray(windows, dtype=float).reshape(-1, 2)
    return pd.DataFrame({"merge_idx": np.arange(len(w), dtype=np.int64), "start_s": w[:, 0],
                         "end_s": w[:, 1]})


def _write(root, run_id, arrival=(1.0, 2.0, 3.0), latency=(0.5, 0.5, 0.5), windows=(),
           **meta):
    return io.write_run(root, _meta(run_id, **meta), _requests(arrival, latency),
                        _merges(windows))


# ============================================================================ vinterval.py

def _cp(k, n, confidence=0.95):
    """Clopper–Pearson from scipy's beta quantiles (real-valued n allowed)."""
    a = 1 - confidence
    low = 0.0 if k <= 0 else stats.beta.ppf(a / 2, k, n - k + 1)
    high = 1.0 if k >= n else stats.beta.ppf(1 - a / 2, k + 1, n - k)
    return float(low), float(high)
