"""scan_runs (DuckDB) must reproduce summarize_runs (numpy, per run) to 1e-9."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evalkit.runlog import write_run
from evalkit.runlog.scan import scan_runs
from evalkit.runlog.summary import SUMMARY_COLUMNS, summarize_runs


def _meta(run_id, role, seed, *, policy="wa", draw=None, matched_to=None, slo=None,
          horizon=120.0):
    return {
        "run_id": run_id, "policy": policy, "role": role, "seed": seed, "draw": draw,
        "matched_to": matched_to, "regime": "r", "trace": {"name": "t", "sha256": f"s{seed}"},
        "backend": "sim", "slo": slo or {"e2e_s": 2.0, "ttft_s": None, "tpot_s": None},
        "merge_duration_s": 5.0, "horizon_s": horizon,
        "corridor": {"min_gap_s": 5.0, "max_gap_s": 60.0}, "oracle": False,
        "settings": {"requested": {}, "effective": {}}, "rng_seeds": {"seed": seed},
    }


def _requests(rng, n, horizon, *, fail_share=0.05, lag=0.02):
    arrival = np.sort(rng.uniform(3.0, horizon - 20.0, n))
    sent = arrival + rng.exponential(lag, n)
    ttft = rng.gamma(2.0, 0.2, n)
    out_tokens = rng.integers(1, 60, n)
    end = sent + ttft + out_tokens * rng.uniform(0.01, 0.05, n)
    first = sent + ttft
    ok = rng.random(n) >= fail_share
    # failed requests: some with an end (error reply), most without (timeout)
    has_end = ~ok & (rng.random(n) < 0.3)
    end = np.where(ok | has_end, end, np.nan)
    first = np.where(ok | (rng.random(n) < 0.5), first, np.nan)
    # ties on purpose, so that quantile interpolation between equal values is exercised
    end[: n // 10] = np.round(end[: n // 10], 1)
    return pd.DataFrame({
        "request_id": np.arange(n), "arrival_s": arrival, "sent_s": sent,
        "first_token_s": first, "end_s": np.maximum(end, first, where=~np.isnan(end), out=end),
        "prompt_tokens": rng.integers(10, 500, n), "output_tokens": out_tokens, "ok": ok,
        "error": [None if o else "timeout" for o in ok]})


def _merges(starts, d=5.0):
    starts = np.asarray(starts, float)
    return pd.DataFrame({"merge_idx": np.arange(starts.size), "start_s": starts,
                         "end_s": starts + d})


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    rng = np.random.default_rng(7)
    slos = [{"e2e_s": 2.0, "ttft_s": None, "tpot_s": None},
            {"e2e_s": 1.5, "ttft_s": 0.5, "tpot_s": 0.03}]
    for seed in range(3):
        slo = slos[seed % 2]
        write_run(root, _meta(f"ns-s{seed}", "no_sync", seed, policy="no_sync", slo=slo),
                  _requests(rng, 400 + 37 * seed, 120.0), _merges([]))
        # windows: one before the first request (not observed), touching pair, one past span
        steps = pd.DataFrame({"step": np.arange(50), "start_s": np.arange(50) * 2.0,
                              "end_s": np.arange(50) * 2.0 + 1.9})
        write_run(root, _meta(f"wa-s{seed}", "policy", seed, slo=slo),
                  _requests(rng, 500, 120.0), _merges([0.0, 20.0, 25.0, 60.0, 118.0]),
                  steps=steps)
        for draw in range(2):
            write_run(root, _meta(f"mr-s{seed}-d{draw}", "matched_random", seed,
                                  policy="matched_random", draw=draw, matched_to="wa", slo=slo),
                      _requests(rng, 450, 120.0, fail_share=0.0, lag=0.0),
                      _merges(np.sort(rng.uniform(5, 90, 3)) + np.arange(3) * 6))
    # an incomplete run: excluded by both
    write_run(root, _meta("broken", "policy", 9), _requests(rng, 50, 120.0), _merges([10.0]),
              complete=False)
    return root


def _compare(a: pd.DataFrame, b: pd.DataFrame):
    assert list(a.columns) == list(b.columns) == list(SUMMARY_COLUMNS)
    assert list(a["run_id"]) == list(b["run_id"])
    for col in SUMMARY_COLUMNS:
        x, y = a[col], b[col]
        if pd.api.types.is_float_dtype(x) or pd.api.types.is_float_dtype(y):
            xv, yv = x.to_numpy(float), y.to_numpy(float)
            same_inf = np.isinf(xv) & np.isinf(yv) & (np.sign(xv) == np.sign(yv))
            both_nan = np.isnan(xv) & np.isnan(yv)
            close = np.isclose(xv, yv, rtol=1e-9, atol=1e-9)
            assert (same_inf | both_nan | close).all(), (col, xv, yv)
        else:
            assert [None if pd.isna(v) else v for v in x] == \
                   [None if pd.isna(v) else v for v in y], col


def test_scan_equals_summarize(store):
    ref = summarize_runs(store, design=False)
    got = scan_runs(store)
    assert len(got) == 12 and "broken" not in set(got["run_id"])
    _compare(got, ref)
    # the fixture exercises what it claims to
    assert (ref["n_failed"] > 0).any() and (ref["k_observed"] < ref["k_total"]).any()
    assert ref["ttft_violation_rate"].notna().any() and ref["step_rate"].notna().any()


def test_scan_in_small_batches_matches(store):
    """Cutting the store into many DuckDB queries changes nothing."""
    _compare(scan_runs(store, batch_rows=700, threads=1), summarize_runs(store, design=False))


def test_scan_include_incomplete(store):
    got = scan_runs(store, include_incomplete=True)
    ref = summarize_runs(store, include_incomplete=True, design=False)
    _compare(got, ref)
    assert "broken" in set(got["run_id"])


def test_quantiles_with_failures_are_numpy_linear(tmp_path):
    """p95 lands between a finite latency and a failed (inf) one -> inf, like metrics."""
    n = 20
    req = pd.DataFrame({"request_id": np.arange(n), "arrival_s": np.arange(n, dtype=float),
                        "sent_s": np.arange(n, dtype=float),
                        "first_token_s": np.arange(n) + 0.1, "end_s": np.arange(n) + 1.0 +
                        np.arange(n) / 100, "prompt_tokens": 1, "output_tokens": 1,
                        "ok": True, "error": None})
    req.loc[n - 1, ["ok", "end_s"]] = [False, np.nan]
    write_run(tmp_path, _meta("q", "no_sync", 0, policy="no_sync", horizon=40.0), req,
              _merges([]))
    row = scan_runs(tmp_path).iloc[0]
    lat = np.arange(n - 1) / 100 + 1.0
    assert row["p50_s"] == pytest.approx(np.quantile(np.append(lat, 1e9), 0.5), abs=1e-12)
    assert np.isinf(row["p99_s"]) and np.isinf(row["p95_s"])  # h = 18.05 -> interpolates to inf
    assert row["n_failed"] == 1 and row["violation_rate"] == pytest.approx(1 / n)
