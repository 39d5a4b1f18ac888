"""Benchmark of the simulated backend and a full campaign.

    python tools/bench/bench_sim.py [--jobs 2] [--skip-campaign]

1. One 600 s bursty replay (~5,000 requests, examples/bursty.toml, seed 0) per policy:
   best of 5 wall times of ``sim.replay`` (target <= 0.2 s), and the cost per request.
2. The whole bursty campaign (10 seeds x 6 policies x 5 matched-random draws + no-sync =
   370 runs, each written to Parquet) with ``--jobs`` workers (target <= 90 s on 2 cores).

Machine speed varies, so a reference is timed in the same run: a pure-Python heap loop
that pushes and pops one event per request (the least any event-driven simulator of this
trace must do).  Ratios to it are comparable across machines.
"""

from __future__ import annotations

import argparse
import heapq
import tempfile
import time
from pathlib import Path

import numpy as np

from evalkit.audit.protocol import load_protocol
from evalkit.replay.backends import sim
from evalkit.replay.campaign import load_campaign
from evalkit.policies import get_policy
from evalkit.replay.job import build_trace
from evalkit.replay.sweep import run_campaign

HERE = Path(__file__).resolve().parent
CAMPAIGN = HERE.parents[1] / "examples" / "bursty.toml"


def best_of(fn, reps=5) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def reference(arrivals: np.ndarray, outputs: np.ndarray) -> None:
    heap = []
    for a, o in zip(arrivals.tolist(), outputs.tolist()):
        heapq.heappush(heap, a + o * 0.01)
        while heap and heap[0] <= a:
            heapq.heappop(heap)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--skip-campaign", action="store_true")
    args = ap.parse_args()

    camp = load_campaign(CAMPAIGN)
    trace = build_trace(camp, 0)
    n = trace.n
    arr = trace.arrival_s
    out = trace.requests["output_tokens"].to_numpy()
    t_ref = best_of(lambda: reference(arr, out))
    print(f"trace: {n} requests over {camp.horizon_s:.0f} s; reference heap loop "
          f"{t_ref * 1e3:.1f} ms ({t_ref / n * 1e6:.2f} us/request)")
    print(f"{'policy':<20}{'replay s':>10}{'us/request':>12}{'x reference':>13}{'K':>4}")
    entries = [("no_sync", {}, None)] + [(p.name, {k: v for k, v in p.params.items()
                                                   if k != "k_from"}, p) for p in camp.policies]
    worst = 0.0
    for name, params, _ in entries:
        spec = camp.spec("bench", 0, role="policy")
        if name == "calibrated_offline":
            ns = sim.replay(camp.spec("bench", 0, role="no_sync"), trace, get_policy("no_sync"))
            iv = ns.requests[["arrival_s", "end_s"]].fillna(np.inf)
            spec.future_requests, spec.reference_k = iv, 8
        holder = {}

        def once():
            holder["out"] = sim.replay(spec, trace, get_policy(name, **params))

        t = best_of(once)
        worst = max(worst, t)
        print(f"{name:<20}{t:>10.3f}{t / n * 1e6:>12.1f}{t / t_ref:>13.1f}"
              f"{len(holder['out'].merges):>4}")
    print(f"slowest replay {worst:.3f} s (target <= 0.2 s): {'OK' if worst <= 0.2 else 'SLOW'}")

    if args.skip_campaign:
        return
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        summary = run_campaign(camp, Path(tmp) / "runs", n_jobs=args.jobs, progress=False,
                               protocol=load_protocol(None))
        dt = time.perf_counter() - t0
    n_runs = len(summary.outcomes)
    print(f"campaign: {n_runs} runs ({summary.count('ran')} ran, {summary.count('failed')} "
          f"failed) in {dt:.1f} s with {args.jobs} jobs = {dt / n_runs * 1e3:.0f} ms/run wall "
          f"(target <= 90 s): {'OK' if dt <= 90 else 'SLOW'}")


if __name__ == "__main__":
    main()
