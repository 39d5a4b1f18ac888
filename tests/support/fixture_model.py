"""The fixture world: one small stand-alone model of a co-located serving + training run.

``fixtures/make_campaigns.py`` writes the committed fixture campaigns from it, and
``tests/support/campaign_model.py`` (the variant whose ground truth tests choose: latency
kinds, per-run jitter, backlog) builds on its constants and tables.

Not the simulator: per seed one bursty trace (bursts of 3 req/s for 10 s every 40 s over a
0.3 req/s floor, 200 s horizon); every request has a base latency, and a request in flight
during a merge window (D = 8 s) gets +4 s (SLO 5 s).  K = 4 merges, corridor gaps in
[20, 80] s from training start at 0.  Schedules: ``good`` (the quiet gaps between bursts),
``random`` (a matched-random draw), ``bad`` (burst onsets), ``fixed`` (every 45 s), ``gate``
(out of bursts, late), ``none``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from evalkit.policies import POLICIES, policy_identity, resolve_policy
from evalkit.runlog.io import write_run
from evalkit.stats import sample_schedules

HORIZON = 200.0
D = 8.0
K = 4
MIN_GAP, MAX_GAP = 20.0, 80.0
SLO = 5.0
PENALTY = 4.0
STEP_S = 2.0
SCRAPE_EVERY_S = 1.0
REAL_BACKENDS = ("torch", "vllm")
BURSTS = [(10.0 + 40.0 * j, 20.0 + 40.0 * j) for j in range(5)]
FIXED_META = {"created_at": "2026-01-01T00:00:00+00:00",
              "host": {"hostname": "fixture", "platform": "fixture", "python": "3.11"},
              "evalkit_version": "fixture"}


def trace(seed: int) -> pd.DataFrame:
    """The seed's request sequence: arrivals, base latency, token counts."""
    rng = np.random.default_rng(1000 + seed)
    floor = np.cumsum(rng.exponential(1 / 0.3, 200))
    floor = floor[floor < HORIZON - 15]
    bursts = [a + np.sort(rng.uniform(0, b - a, rng.poisson(3.0 * (b - a)))) for a, b in BURSTS]
    # anchors at 2 s and 190 s fix the observed span, so every window placed in
    # [3, 183] is observed and K counts all merges
    arrival = np.sort(np.concatenate([[2.0, 190.0], floor[floor > 2.0], *bursts]))
    n = arrival.size
    return pd.DataFrame({
        "arrival_s": arrival,
        "base_s": rng.lognormal(np.log(1.2), 0.35, n),
        "lag_s": rng.uniform(0.0, 0.004, n),
        "prompt_tokens": rng.integers(50, 400, n),
        "output_tokens": rng.integers(20, 200, n),
    })


def realisation(seed: int) -> str:
    return hashlib.sha256(trace(seed).to_numpy().tobytes()).hexdigest()


def requests_for(tr: pd.DataFrame, starts: np.ndarray, penalty: float = PENALTY) -> pd.DataFrame:
    arrival = tr.arrival_s.to_numpy()
    base_end = arrival + tr.base_s.to_numpy()
    hit = np.zeros(arrival.size, dtype=bool)
    for s in starts:
        hit |= (arrival < s + D) & (base_end > s)
    return requests_frame(tr, base_end + np.where(hit, penalty, 0.0))


def requests_frame(tr: pd.DataFrame, end: np.ndarray) -> pd.DataFrame:
    """The requests table of trace ``tr`` (n rows) whose requests end at ``end`` (n,): sent
    after the trace's lag, first token at min(0.3 s, half the latency), all ok."""
    arrival = tr.arrival_s.to_numpy()
    latency = end - arrival
    return pd.DataFrame({
        "request_id": np.arange(arrival.size, dtype=np.int64), "arrival_s": arrival,
        "sent_s": arrival + tr.lag_s.to_numpy(),
        "first_token_s": arrival + np.minimum(0.3, latency / 2), "end_s": end,
        "prompt_tokens": tr.prompt_tokens.to_numpy(), "output_tokens": tr.output_tokens.to_numpy(),
        "ok": np.ones(arrival.size, dtype=bool), "error": [None] * arrival.size})


def sidecar_scrapes(requests: pd.DataFrame) -> pd.DataFrame:
    """The metrics scrapes a real sidecar's client writes (signals.parquet), every
    SCRAPE_EVERY_S over the horizon: the server's arrival count is the requests the client had
    sent by then and its running gauge the requests in flight (nothing waits)."""
    t = np.arange(SCRAPE_EVERY_S, HORIZON, SCRAPE_EVERY_S)
    sent = np.sort(requests.sent_s.to_numpy(dtype=float))
    ended = np.sort(requests.end_s.to_numpy(dtype=float))
    seen = np.searchsorted(sent, t, side="right")
    running = seen - np.searchsorted(ended, t, side="right")
    return pd.DataFrame({"t_s": t, "scrape_ok": np.ones(t.size, dtype=bool),
                         "scrape_latency_s": np.zeros(t.size),
                         "arrivals_seen": seen.astype(float),
                         "queue_running": np.maximum(running, 0).astype(float),
                         "queue_waiting": np.zeros(t.size)})


def real_evidence(meta: dict, requests: pd.DataFrame) -> pd.DataFrame | None:
    """What a run of ``meta`` carries beyond its requests: on a real backend the sidecar's
    scrapes (returned, and counted in run.json's effective settings as the torch backend
    does) and its own per-request timings (``server_*_s`` columns added to ``requests``,
    inside the client's latency); a built-in policy's code identity (class path and source
    sha256)."""
    if meta["policy"] in POLICIES:
        meta["policy_identity"] = policy_identity(resolve_policy(meta["policy"]))
    if meta["backend"] not in REAL_BACKENDS:
        return None
    requests["server_queue_s"] = 0.0
    requests["server_prefill_s"] = requests.first_token_s - requests.sent_s
    requests["server_decode_s"] = requests.end_s - requests.first_token_s
    requests["server_total_s"] = requests.end_s - requests.sent_s
    scrapes = sidecar_scrapes(requests)
    meta["settings"]["effective"].update({"scrapes": len(scrapes),
                                          "scrapes_ok": int(scrapes.scrape_ok.sum())})
    return scrapes


def merges_for(starts, bytes_per_merge: int = 1_000_000_000) -> pd.DataFrame:
    """The merges table of windows starting at ``starts`` (K,), each D long."""
    starts = np.sort(np.asarray(starts, dtype=float))
    return pd.DataFrame({"merge_idx": np.arange(starts.size, dtype=np.int64), "start_s": starts,
                         "end_s": starts + D, "inner_step": (starts / STEP_S).astype(np.int64),
                         "bytes": np.full(starts.size, bytes_per_merge, dtype=np.int64)})


def steps(starts) -> pd.DataFrame:
    """Inner steps of about STEP_S filling the time between merges (a merge pauses them), so
    every run of a seed carries the same training load (same step rate outside merges)."""
    edges = [0.0]
    for s in np.sort(np.asarray(starts, dtype=float)):
        edges += [s, s + D]
    edges.append(HORIZON)
    lo, hi = [], []
    for a, b in zip(edges[::2], edges[1::2]):
        n = int(round((b - a) / STEP_S))
        if n > 0:
            grid = np.linspace(a, b, n + 1)
            lo.append(grid[:-1])
            hi.append(grid[1:])
    start, end = np.concatenate(lo), np.concatenate(hi)
    return pd.DataFrame({"step": np.arange(start.size, dtype=np.int64), "start_s": start,
                         "end_s": end, "loss": 3.0 - start / 1000,
                         "tokens": np.full(start.size, 4096, dtype=np.int64)})


def random_schedule(rng, k: int = K, t0: float = 0.0) -> np.ndarray:
    """Uniform over F_K with the corridor's edges: K windows inside the observed span
    [t0 = first request, HORIZON], training started at 0."""
    # the last requests finish about 17 s before the horizon: windows after that are not
    # observed, so the draws stay inside; the corridor's trailing edge is the horizon's
    return sample_schedules(k, (t0, HORIZON - 17.0), D, MIN_GAP, MAX_GAP, 1, rng,
                            train_start=0.0, run_end=HORIZON)[0]


def schedule(kind: str, seed: int, rng) -> np.ndarray:
    if kind == "good":       # quiet gaps between bursts, jittered
        return np.array([25.0 + 40.0 * j for j in range(K)]) + rng.uniform(0, 6, K)
    if kind == "bad":        # burst onsets (from the second burst: the corridor's edge)
        return np.array([49.0 + 40.0 * j for j in range(K)]) + rng.uniform(0, 2, K)
    if kind == "random":
        return random_schedule(rng, K, float(trace(seed).arrival_s.min()))
    if kind == "fixed":      # fixed cadence, every 45 s
        return 20.0 + 45.0 * np.arange(K)
    if kind == "gate":       # defers out of bursts, but late
        return np.array([24.0 + 40.0 * j for j in range(K)])
    if kind == "none":
        return np.array([])
    raise ValueError(kind)


def write(out: Path, *, run_id, policy, role, seed, regime, starts, backend="sim", draw=None,
          matched_to=None, oracle=False, complete=True, realisation_seed=None, penalty=PENALTY):
    tr = trace(seed if realisation_seed is None else realisation_seed)
    meta = {
        "run_id": run_id, "policy": policy, "role": role, "seed": seed, "draw": draw,
        "matched_to": matched_to, "regime": regime,
        "trace": {"name": "fixture-bursty", "sha256": realisation(
            seed if realisation_seed is None else realisation_seed)},
        "backend": backend, "slo": {"e2e_s": SLO, "ttft_s": None, "tpot_s": None},
        "merge_duration_s": D, "horizon_s": HORIZON,
        "corridor": {"min_gap_s": MIN_GAP, "max_gap_s": MAX_GAP}, "oracle": oracle,
        "settings": {"requested": {"fixture": True}, "effective": {"fixture": True}},
        "rng_seeds": {"trace": 1000 + seed}, "inner_step_s": STEP_S, **FIXED_META,
    }
    if not complete:
        meta["error"] = "killed by the fixture generator"
    requests = requests_for(tr, starts, penalty)
    signals = real_evidence(meta, requests)
    write_run(out, meta, requests, merges_for(starts), steps=steps(starts), signals=signals,
              complete=complete)


def campaign(out: Path, *, regime: str, seeds, policies: dict, draws: int = 2,
             no_sync: bool = True, harness: bool = True, backend: str = "sim",
             oracle: frozenset = frozenset(), draw_k: dict | None = None,
             penalty: float = PENALTY, prefix: str = ""):
    """prefix: prepended to run ids (two regimes in one directory).
    policies: name -> placement kind.  draw_k: seed -> K of that seed's draws."""
    for seed in seeds:
        for name, kind in policies.items():
            rng = np.random.default_rng([seed, len(name), sum(map(ord, name))])
            write(out, run_id=f"{prefix}{name}-s{seed}", policy=name, role="policy", seed=seed,
                  regime=regime, starts=schedule(kind, seed, rng), backend=backend,
                  oracle=name in oracle, penalty=penalty)
            for draw in range(draws):
                k = (draw_k or {}).get(seed, K)
                write(out, run_id=f"{prefix}mr-{name}-s{seed}-d{draw}", policy="matched_random",
                      role="matched_random", seed=seed, regime=regime, draw=draw,
                      matched_to=name, backend=backend, penalty=penalty,
                      starts=random_schedule(np.random.default_rng([seed, draw, 7]), k,
                                             float(trace(seed).arrival_s.min())))
        if no_sync:
            write(out, run_id=f"{prefix}no_sync-s{seed}", policy="no_sync", role="no_sync", seed=seed,
                  regime=regime, starts=schedule("none", seed, None), backend=backend,
                  penalty=penalty)
        if harness:
            for name, kind in (("fixed_h", "fixed"), ("pressure_gate", "gate")):
                write(out, run_id=f"{prefix}{name}-s{seed}", policy=name, role="policy", seed=seed,
                      regime=regime, starts=schedule(kind, seed, None), backend=backend,
                      penalty=penalty)


def summary_table(path: Path) -> None:
    """Per-seed results as a paper might release them: 10 seeds, 8 favour the policy."""
    rng = np.random.default_rng(42)
    d = np.array([0.031, 0.024, 0.040, 0.018, 0.027, -0.006, 0.035, 0.022, -0.004, 0.029])
    rows = []
    for seed in range(10):
        v_ns = 0.05 + rng.uniform(0, 0.01)
        v_pol = v_ns + 0.03 + rng.uniform(0, 0.01)
        rows.append({"policy": "wa", "seed": seed, "regime": "paper", "violation_rate": v_pol,
                     "K": 6, "oracle": "false", "no_sync_violation_rate": round(v_ns, 6)})
        for draw in range(3):   # draws scattered around V_policy + d, mean exactly that
            jitter = (draw - 1) * 0.004
            rows.append({"policy": "matched_random", "seed": seed, "regime": "paper",
                         "violation_rate": v_pol + d[seed] + jitter, "K": "", "oracle": "false",
                         "no_sync_violation_rate": ""})
    table = pd.DataFrame(rows)
    table["violation_rate"] = table.violation_rate.round(6)
    table.to_csv(path, index=False)
