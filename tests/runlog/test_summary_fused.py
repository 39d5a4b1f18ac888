"""summarize_runs' fused per-run computation: thread counts change nothing, partial-sort
quantiles = full sort, the fused per-run numbers = the metrics functions; map_ordered."""

from __future__ import annotations

import threading
import time

import numpy as np
import pandas as pd
import pytest

from evalkit.fsutil import map_ordered
from evalkit.runlog import metrics
from evalkit.runlog.io import write_run
from evalkit.runlog.summary import request_numbers, summarize_runs
from evalkit.runlog.validate import validate_runs

SLOS = ({"e2e_s": 2.0, "ttft_s": None, "tpot_s": None},
        {"e2e_s": 1.5, "ttft_s": 0.5, "tpot_s": 0.03})


def _meta(run_id, role, seed, slo, policy="wa", draw=None, matched_to=None):
    return {"run_id": run_id, "policy": policy, "role": role, "seed": seed, "draw": draw,
            "matched_to": matched_to, "regime": "r",
            "trace": {"name": "t", "sha256": f"s{seed}"}, "backend": "sim", "slo": slo,
            "merge_duration_s": 5.0, "horizon_s": 120.0,
            "corridor": {"min_gap_s": 5.0, "max_gap_s": 60.0}, "oracle": False,
            "settings": {"requested": {}, "effective": {}}, "rng_seeds": {"seed": seed}}


def _requests(rng, n):
    arrival = np.sort(rng.uniform(3.0, 100.0, n))
    sent = arrival + rng.exponential(0.02, n)
    first = sent + rng.gamma(2.0, 0.2, n)
    out_tokens = rng.integers(1, 60, n)
    end = first + out_tokens * rng.uniform(0.01, 0.05, n)
    ok = rng.random(n) >= 0.05
    end = np.where(ok | (rng.random(n) < 0.3), end, np.nan)
    first = np.where(ok | (rng.random(n) < 0.5), first, np.nan)
    end[: n // 10] = np.round(end[: n // 10], 1)           # ties in the latencies
    end = np.where(np.isnan(end), end, np.maximum(end, np.nan_to_num(first)))
    return pd.DataFrame({"request_id": np.arange(n), "arrival_s": arrival, "sent_s": sent,
                         "first_token_s": first, "end_s": end,
                         "prompt_tokens": rng.integers(10, 500, n), "output_tokens": out_tokens,
                         "ok": ok, "error": [None if o else "timeout" for o in ok]})


def _merges(starts):
    starts = np.asarray(starts, float)
    return pd.DataFrame({"merge_idx": np.arange(starts.size), "start_s": starts,
                         "end_s": starts + 5.0})


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    rng = np.random.default_rng(11)
    for seed in range(3):
        slo = SLOS[seed % 2]
        write_run(root, _meta(f"ns-s{seed}", "no_sync", seed, slo, policy="no_sync"),
                  _requests(rng, 300 + 50 * seed), _merges([]))
        steps = pd.DataFrame({"step": np.arange(40), "start_s": np.arange(40) * 2.0,
                              "end_s": np.arange(40) * 2.0 + 1.9})
        # 5000 requests: the sample-bracket quantile path (n >= 4096) is exercised
        write_run(root, _meta(f"wa-s{seed}", "policy", seed, slo),
                  _requests(rng, 5000 if seed == 0 else 600),
                  _merges([0.0, 20.0, 25.0, 60.0, 118.0]), steps=steps)
        write_run(root, _meta(f"mr-s{seed}-d0", "matched_random", seed, slo,
                              policy="matched_random", draw=0, matched_to="wa"),
                  _requests(rng, 450), _merges(np.sort(rng.uniform(5, 90, 3)) + [0, 6, 12]))
    write_run(root, _meta("broken", "policy", 9, SLOS[0]), _requests(rng, 50), _merges([10.0]),
              complete=False)
    return root


def test_thread_count_changes_nothing(store):
    one = summarize_runs(store, include_incomplete=True, threads=1, design=False)
    three = summarize_runs(store, include_incomplete=True, threads=3, design=False)
    pd.testing.assert_frame_equal(one, three, check_exact=True)
    assert one.attrs == three.attrs
    a = validate_runs(store, threads=1)
    b = validate_runs(store, threads=2)
    assert [p.format() for p in a.problems] == [p.format() for p in b.problems]
    assert a.runs == b.runs and "broken" in a.excluded


def _full_sort_quantile(values, q):
    v = np.sort(np.asarray(values, float))
    if v.size == 0:
        return float("nan")
    h = (v.size - 1) * q
    lo = int(np.floor(h))
    hi = min(lo + 1, v.size - 1)
    if h == lo or v[lo] == v[hi]:
        return float(v[lo])
    if not np.isfinite(v[hi]):
        return float("inf")
    return float(v[lo] + (v[hi] - v[lo]) * (h - lo))


@pytest.mark.parametrize("n", [0, 1, 2, 7, 4095, 4096, 9001])
def test_quantiles_equal_full_sort(n):
    rng = np.random.default_rng(n)
    qs = [0.0, 0.001, 0.5, 0.95, 0.99, 1.0, *rng.random(4)]
    for case in range(6):
        v = [rng.normal(size=n), np.round(rng.gamma(2, 1, n), 1), np.sort(rng.normal(size=n)),
             np.full(n, 2.5), rng.integers(0, 3, n).astype(float), rng.normal(size=n)][case]
        if n:
            v[rng.random(n) < [0.0, 0.03, 0.0, 0.0, 0.3, 0.7][case]] = np.inf
            if case == 5:
                v[rng.random(n) < 0.05] = np.nan
        for q in qs:
            want = _full_sort_quantile(v, q)
            got = metrics.quantile(v, q)
            assert got == want or (np.isnan(want) and np.isnan(got)), (case, q)
        many = metrics.quantiles(v, qs)
        want = [_full_sort_quantile(v, q) for q in qs]
        assert np.array_equal(many, want, equal_nan=True)


def test_request_numbers_equal_metrics_functions():
    """The fused per-run computation against the metrics functions, call by call."""
    rng = np.random.default_rng(5)
    df = _requests(rng, 3000)
    req = {c: df[c].to_numpy(float) for c in ("arrival_s", "sent_s", "first_token_s", "end_s",
                                               "prompt_tokens", "output_tokens")}
    req["ok"] = df["ok"].to_numpy(bool)
    ws = np.array([10.0, 30.0, 31.0, 70.0])
    merges = {"start_s": ws, "end_s": ws + np.array([5.0, 1.0, 4.0, 0.5])}
    for slo in SLOS:
        got = request_numbers(req, merges, None, slo, 5.0, 120.0)
        a, s, f, e, ok = (req[k] for k in ("arrival_s", "sent_s", "first_token_s", "end_s",
                                            "ok"))
        flags = metrics.slo_flags(a, f, e, req["output_tokens"], ok, slo)
        lat = metrics.e2e_latency(a, e, ok)
        span = metrics.observed_span(a, e, 120.0, 5.0)
        assert got["violation_rate"] == float(flags.violated.mean())   # any configured SLO
        assert got["e2e_violation_rate"] == float(flags.e2e.mean())
        assert got["goodput_rate"] == float(flags.good.mean())
        for name, flag in (("ttft_violation_rate", flags.ttft),
                           ("tpot_violation_rate", flags.tpot)):
            assert (np.isnan(got[name]) if flag is None else got[name] == float(flag.mean()))
        assert [got["p50_s"], got["p95_s"], got["p99_s"]] == \
               [metrics.quantile(lat, q) for q in (0.5, 0.95, 0.99)]
        assert got["ttft_p95_s"] == metrics.quantile(metrics.ttft(a, f, ok), 0.95)
        assert got["exposure_requests"] == metrics.request_exposure(
            a, s, e, ok, merges["start_s"], merges["end_s"], 120.0)
        assert got["n_failed"] == int((~ok | ~np.isfinite(e)).sum())
        assert got["k_observed"] == metrics.windows_observed(ws, merges["end_s"], span)
        assert got["output_tokens_total"] == int(np.nansum(np.where(ok, req["output_tokens"],
                                                                     0)))


def test_map_ordered_keeps_order_and_bounds_pending():
    active, peak, lock = [0], [0], threading.Lock()

    def work(i):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.002 * (i % 3))
        with lock:
            active[0] -= 1
        return i * i

    started = []

    def items():
        for i in range(40):
            started.append(i)
            yield i

    out = []
    for value in map_ordered(work, items(), threads=2, window=4):
        out.append(value)
        assert len(started) <= len(out) + 4        # never more than `window` runs ahead
    assert out == [i * i for i in range(40)] and peak[0] <= 2
    assert list(map_ordered(work, range(5), threads=1)) == [0, 1, 4, 9, 16]
