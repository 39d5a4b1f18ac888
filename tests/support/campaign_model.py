"""The fixture world (:mod:`tests.support.fixture_model`) as a model whose ground truth the
tests choose: the same horizon, bursts, D, K, corridor, SLO and tables.

Per seed one bursty open-loop trace (bursts of 3 req/s for 10 s every 40 s over a 0.3 req/s
floor, 200 s); every request has a base latency (``kind``: "normal" lognormal around 1.2 s,
"heavy" a heavy-tailed lognormal, "long" around 8 s) times a small per-run jitter; a request
in flight during a merge window (D = 8 s) gets ``penalty`` seconds more, and with
``backlog_s`` > 0 a request arriving ``lag < backlog_s`` seconds after a window ends gets
``backlog_add * (1 - lag / backlog_s)`` more (the merge's queue draining).  K = 4 merges,
corridor gaps [20, 80] s from training start at 0.  Schedules: "good" (the quiet gaps between
bursts), "random" (uniform over the corridor, like a matched-random draw), "fixed", "gate".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from evalkit.runlog.io import write_run
from tests.support.fixture_model import (BURSTS, HORIZON, MAX_GAP, MIN_GAP, SLO, STEP_S, D, K,
                                         merges_for, real_evidence, requests_frame, steps)

__all__ = ["BURSTS", "HORIZON", "MAX_GAP", "MIN_GAP", "SLO", "STEP_S", "D", "K", "steps",
           "trace", "schedule", "requests_for", "write", "regime"]

META = {"created_at": "2026-01-01T00:00:00+00:00", "evalkit_version": "test",
        "host": {"hostname": "test", "platform": "test", "python": "3.11"}}


def trace(seed: int, kind: str = "normal") -> pd.DataFrame:
    rng = np.random.default_rng([seed, 11])
    floor = np.cumsum(rng.exponential(1 / 0.3, 200))
    floor = floor[(floor > 2.0) & (floor < HORIZON - 12)]
    bursts = [a + np.sort(rng.uniform(0, b - a, rng.poisson(3.0 * (b - a)))) for a, b in BURSTS]
    arrival = np.unique(np.concatenate([[2.0, HORIZON - 1], floor, *bursts]))
    n = arrival.size
    base = {"normal": lambda: rng.lognormal(np.log(1.2), 0.35, n),
            "heavy": lambda: rng.lognormal(np.log(0.8), 1.3, n),
            "long": lambda: rng.lognormal(np.log(8.0), 0.3, n)}[kind]()
    return pd.DataFrame({"arrival_s": arrival, "base_s": base,
                         "lag_s": rng.uniform(0.0, 0.004, n),
                         "prompt_tokens": rng.integers(50, 400, n),
                         "output_tokens": np.maximum(1, (base * 40).astype(np.int64))})


def _valid(s: np.ndarray) -> bool:
    gaps = np.diff(np.concatenate([[0.0], s, [HORIZON - D]]))
    return bool(np.all(gaps[:-1] >= MIN_GAP) and np.all(gaps <= MAX_GAP) and gaps[-1] >= 0)


def schedule(kind: str, rng) -> np.ndarray:
    if kind == "good":
        s = np.array([25.0 + 40.0 * j for j in range(K)]) + rng.uniform(0, 6, K)
    elif kind == "bad":
        s = np.array([49.0 + 40.0 * j for j in range(K - 1)] + [169.0]) + rng.uniform(0, 2, K)
    elif kind == "fixed":
        s = 25.0 + 45.0 * np.arange(K)
    elif kind == "gate":
        s = np.array([24.0 + 40.0 * j for j in range(K)])
    elif kind == "none":
        return np.array([])
    elif kind == "random":
        while True:     # uniform over the corridor-bound class (rejection)
            s = np.sort(rng.uniform(MIN_GAP, HORIZON - D, K))
            if _valid(s):
                return s
    else:
        raise ValueError(kind)
    assert _valid(s), (kind, s)
    return s


def requests_for(tr: pd.DataFrame, starts, rng, penalty: float, backlog_s: float = 0.0,
                 backlog_add: float = 0.0, jitter: float = 0.05) -> pd.DataFrame:
    arrival = tr.arrival_s.to_numpy()
    service = tr.base_s.to_numpy() * rng.lognormal(0.0, jitter, arrival.size)
    starts = np.sort(np.asarray(starts, dtype=float))
    hit = np.zeros(arrival.size, dtype=bool)
    for s in starts:
        hit |= (arrival < s + D) & (arrival + service > s)
    extra = np.where(hit, penalty, 0.0)
    if backlog_s > 0 and starts.size:
        ends = starts + D
        j = np.searchsorted(ends, arrival, side="right") - 1
        lag = np.where(j >= 0, arrival - ends[np.maximum(j, 0)], np.inf)
        extra += np.where(~hit & (lag < backlog_s), backlog_add * (1 - lag / backlog_s), 0.0)
    return requests_frame(tr, arrival + service + extra)


def write(out: Path, *, run_id, policy, role, seed, regime, starts, backend, kind="normal",
          penalty=4.0, backlog_s=0.0, backlog_add=0.0, draw=None, matched_to=None,
          oracle=False):
    tr = trace(seed, kind)
    starts = np.sort(np.asarray(starts, dtype=float))
    meta = {"run_id": run_id, "policy": policy, "role": role, "seed": seed, "draw": draw,
            "matched_to": matched_to, "regime": regime,
            "trace": {"name": f"model-{kind}", "sha256": f"{kind}-{seed}"}, "backend": backend,
            "slo": {"e2e_s": SLO, "ttft_s": None, "tpot_s": None}, "merge_duration_s": D,
            "horizon_s": HORIZON, "corridor": {"min_gap_s": MIN_GAP, "max_gap_s": MAX_GAP},
            "oracle": oracle, "settings": {"requested": {}, "effective": {}},
            "rng_seeds": {"trace": seed}, "inner_step_s": STEP_S, **META}
    rng = np.random.default_rng([seed, sum(map(ord, run_id)), len(run_id)])
    requests = requests_for(tr, starts, rng, penalty, backlog_s, backlog_add)
    signals = real_evidence(meta, requests)
    write_run(out, meta, requests, merges_for(starts, bytes_per_merge=1_000_000),
              steps=steps(starts), signals=signals)


def regime(out: Path, *, name: str, backend: str, seeds, policies: dict, draws: int = 2,
           no_sync: bool = True, kind: str = "normal", penalty: float = 4.0,
           backlog_s: float = 0.0, backlog_add: float = 0.0, prefix: str = "",
           harness_baselines: bool = False) -> None:
    """policies: name -> (schedule kind, penalty of the policy's own runs or None)."""
    common = dict(regime=name, backend=backend, kind=kind, backlog_s=backlog_s,
                  backlog_add=backlog_add)
    for seed in seeds:
        for pol, (where, own_penalty) in policies.items():
            rng = np.random.default_rng([seed, sum(map(ord, pol)), 1])
            write(out, run_id=f"{prefix}{pol}-s{seed}", policy=pol, role="policy", seed=seed,
                  starts=schedule(where, rng), penalty=penalty if own_penalty is None
                  else own_penalty, **common)
            for d in range(draws):
                write(out, run_id=f"{prefix}mr-{pol}-s{seed}-d{d}", policy="matched_random",
                      role="matched_random", seed=seed, draw=d, matched_to=pol,
                      starts=schedule("random", np.random.default_rng([seed, d, 7, len(pol)])),
                      penalty=penalty, **common)
        if no_sync:
            write(out, run_id=f"{prefix}no_sync-s{seed}", policy="no_sync", role="no_sync",
                  seed=seed, starts=[], penalty=penalty, **common)
        if harness_baselines:
            for pol, where in (("fixed_h", "fixed"), ("pressure_gate", "gate")):
                write(out, run_id=f"{prefix}{pol}-s{seed}", policy=pol, role="policy",
                      seed=seed, starts=schedule(where, None), penalty=penalty, **common)
