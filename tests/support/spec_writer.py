"""A second run-log writer, written from evalkit/runlog/FORMAT.md alone.

It uses only the standard library and pyarrow (no evalkit import: a test checks), as another
harness would: a toy serving model (latency rises for requests that arrive during a merge),
a policy that merges in the quiet phases of a square-wave load, a no-sync baseline and
matched-random draws with the policy's K placed uniformly under the corridor.
"""

from __future__ import annotations

import json
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq

HORIZON_S = 300.0
D_S = 8.0
MIN_GAP_S, MAX_GAP_S = 30.0, 120.0
SLO_E2E_S = 2.5
POLICY_STARTS = (60.0, 160.0, 260.0)          # quiet phases of the load below


def arrivals(seed: int) -> list[float]:
    """Square-wave Poisson arrivals: 6/s in [100k, 100k + 40), 1/s otherwise."""
    rng, t, out = random.Random(seed), 0.0, []
    while True:
        rate = 6.0 if (t % 100.0) < 40.0 else 1.0
        t += rng.expovariate(rate)
        if t >= HORIZON_S - 20.0:
            return out
        out.append(t)


def requests_table(times: list[float], windows: list[tuple[float, float]],
                   seed: int) -> pa.Table:
    rng = random.Random(seed + 7)
    first, end = [], []
    for a in times:
        hit = any(s - 0.5 <= a <= e + 1.0 for s, e in windows)
        latency = rng.uniform(0.8, 1.6) + (2.5 if hit else 0.0)
        first.append(a + 0.2)
        end.append(a + latency)
    n = len(times)
    return pa.table({
        "request_id": pa.array(range(n), pa.int64()),
        "arrival_s": pa.array(times, pa.float64()),
        "sent_s": pa.array(times, pa.float64()),
        "first_token_s": pa.array(first, pa.float64()),
        "end_s": pa.array(end, pa.float64()),
        "prompt_tokens": pa.array([128] * n, pa.int64()),
        "output_tokens": pa.array([32] * n, pa.int64()),
        "ok": pa.array([True] * n, pa.bool_()),
        "error": pa.array([None] * n, pa.string()),
    })


def merges_table(starts) -> pa.Table:
    return pa.table({
        "merge_idx": pa.array(range(len(starts)), pa.int64()),
        "start_s": pa.array(list(starts), pa.float64()),
        "end_s": pa.array([s + D_S for s in starts], pa.float64()),
        "inner_step": pa.array([None] * len(starts), pa.int64()),
        "bytes": pa.array([None] * len(starts), pa.int64()),
    })


def random_starts(rng: random.Random, k: int, hi: float) -> list[float]:
    """K starts uniform on the corridor's schedules (FORMAT.md §3.3): the first within
    [MIN_GAP_S, MAX_GAP_S] of training start (t = 0), consecutive gaps in
    [MIN_GAP_S, MAX_GAP_S], the last within MAX_GAP_S of horizon - D, all windows before
    ``hi`` (the last arrival, so every window lies in the observed span)."""
    last_feasible = HORIZON_S - D_S
    while True:
        starts = sorted(rng.uniform(MIN_GAP_S, hi) for _ in range(k))
        gaps = [b - a for a, b in zip([0.0] + starts, starts)]
        if all(MIN_GAP_S <= g <= MAX_GAP_S for g in gaps) and \
                last_feasible - starts[-1] < MAX_GAP_S:
            return starts


def write_run(runs_dir: str, run_id: str, meta: dict, requests: pa.Table,
              merges: pa.Table) -> None:
    """FORMAT.md §2: everything into a hidden directory, run.json last, then rename."""
    tmp = os.path.join(runs_dir, f".{run_id}.tmp-{random.getrandbits(32):08x}")
    os.makedirs(tmp)
    pq.write_table(requests, os.path.join(tmp, "requests.parquet"))
    pq.write_table(merges, os.path.join(tmp, "merges.parquet"))
    with open(os.path.join(tmp, "run.json"), "w", encoding="utf-8") as fh:
        json.dump(meta, fh, indent=1)
    os.rename(tmp, os.path.join(runs_dir, run_id))


def _meta(run_id, policy, role, seed, trace_sha, draw=None, matched_to=None) -> dict:
    return {
        "schema_version": 1, "run_id": run_id, "policy": policy, "role": role,
        "seed": seed, "draw": draw, "matched_to": matched_to, "regime": "toy",
        "trace": {"name": "square-wave-toy", "sha256": trace_sha}, "backend": "import",
        "slo": {"e2e_s": SLO_E2E_S, "ttft_s": None, "tpot_s": None},
        "merge_duration_s": D_S, "horizon_s": HORIZON_S,
        "corridor": {"min_gap_s": MIN_GAP_S, "max_gap_s": MAX_GAP_S},
        "oracle": False, "complete": True, "evalkit_version": "spec-writer 1",
        "created_at": "2026-01-01T00:00:00Z",
        "settings": {"requested": {}, "effective": {}},
        "host": {"hostname": "toy", "platform": "toy", "python": "3"},
        "rng_seeds": {"arrivals": seed},
    }


def write_campaign(runs_dir: str, seeds: int = 6, draws: int = 4) -> list[str]:
    """Per seed: no_sync, quiet_merge (policy) and its matched-random draws.  Run ids."""
    os.makedirs(runs_dir, exist_ok=True)
    ids = []
    for seed in range(seeds):
        times = arrivals(seed)
        sha = f"{seed:064x}"
        plans = [(f"toy__no_sync__s{seed}", "no_sync", "no_sync", [], None, None),
                 (f"toy__quiet_merge__s{seed}", "quiet_merge", "policy", list(POLICY_STARTS),
                  None, None)]
        rng = random.Random(1000 + seed)
        for d in range(draws):
            starts = random_starts(rng, len(POLICY_STARTS), times[-1] - D_S)
            plans.append((f"toy__mr-quiet_merge__s{seed}__d{d}", "matched_random",
                          "matched_random", starts, d, "quiet_merge"))
        for run_id, policy, role, starts, draw, matched_to in plans:
            windows = [(s, s + D_S) for s in starts]
            write_run(runs_dir, run_id, _meta(run_id, policy, role, seed, sha, draw, matched_to),
                      requests_table(times, windows, seed), merges_table(starts))
            ids.append(run_id)
    return ids


if __name__ == "__main__":
    import sys
    print(len(write_campaign(sys.argv[1])), "runs written")
