"""Cluster-robust confidence interval on a run's violation rate V.

Requests of one run are not independent: violations come in bursts (around a merge, in a
queue build-up) and closed-loop clients send batches of identical arrivals whose latencies
move together.  A Clopper–Pearson interval that counts requests as independent is then too
narrow.  Here the requests are grouped into clusters:

* **bursts of identical arrivals** when they are present (at most half as many distinct
  arrival times as requests: the effective sample is the bursts, protocol pitfall 4);
* otherwise **time blocks** of ``min(V_BLOCK_S, span / MIN_BLOCKS)`` seconds from the first
  arrival (a block never spans two runs: this is one run).

The interval is Clopper–Pearson at the *effective sample size* (Korn & Graubard 1998):
``n_eff = V(1 - V) / var(V)`` with the between-cluster (linearised ratio, CR1) variance
``var(V) = B / (B - 1) * sum_b (v_b - V n_b)^2 / N^2`` over the B clusters -- the closed form
of the block bootstrap's variance, so the interval is deterministic and both scan engines
give the same numbers from the same per-cluster counts.  ``n_eff`` is capped at N (clustering
is never read as extra information) and scaled by ``(t_{N-1} / t_{B-1})^2`` for the few
clusters the variance rests on.  With no violation (or all violated) the variance is 0 and
carries no clustering information: bursts of identical arrivals then count one each
(``n_eff = B``), time blocks keep ``n_eff = N``.
"""

from __future__ import annotations

import numpy as np
from scipy import special

V_BLOCK_S = 30.0     # time-block length (s) of the cluster-robust V interval
MIN_BLOCKS = 10      # short runs get shorter blocks so that the variance rests on >= this many
BURSTS = "identical-arrival bursts"
BLOCKS = "time blocks"


def block_length(first_arrival: float, last_arrival: float) -> float:
    """Time-block length (s) of a run whose arrivals span ``[first, last]``; 0 for no span."""
    span = float(last_arrival) - float(first_arrival)
    return min(V_BLOCK_S, span / MIN_BLOCKS) if span > 0 else 0.0


def uses_bursts(n_requests: int, n_arrival_times: int) -> bool:
    """Cluster on identical arrivals when there are at most half as many arrival times as
    requests (closed-loop batches), else on time blocks."""
    return 2 * int(n_arrival_times) <= int(n_requests)


def cluster_counts(arrival, violated) -> tuple[np.ndarray, np.ndarray, str]:
    """(n,) arrival times and violation flags -> per-cluster requests and violations (B,)
    in cluster order, and the kind of cluster (:data:`BURSTS` or :data:`BLOCKS`)."""
    arrival = np.asarray(arrival, dtype=float)
    violated = np.asarray(violated, dtype=bool)
    if arrival.size == 0:
        return np.zeros(0), np.zeros(0), BLOCKS
    times, inverse = np.unique(arrival, return_inverse=True)
    if uses_bursts(arrival.size, times.size):
        kind, key = BURSTS, inverse
    else:
        kind = BLOCKS
        first = float(times[0])
        length = block_length(first, float(times[-1]))
        key = (np.floor((arrival - first) / length).astype(np.int64) if length > 0
               else np.zeros(arrival.size, dtype=np.int64))
        key = np.unique(key, return_inverse=True)[1]
    n_b = np.bincount(key).astype(float)
    v_b = np.bincount(key, weights=violated.astype(float))
    return n_b, v_b, kind


def _t_ppf(p: float, df: float) -> float:
    return float(special.stdtrit(df, p))


def robust_v_ci(n_b, v_b, kind: str = BLOCKS, confidence: float = 0.95
                ) -> tuple[float, float, float]:
    """(low, high, n_eff) of V = sum v_b / sum n_b from per-cluster counts (B,).

    ``kind``: :data:`BURSTS` or :data:`BLOCKS` (only matters when V is 0 or 1)."""
    n_b = np.asarray(n_b, dtype=float)
    v_b = np.asarray(v_b, dtype=float)
    total = float(n_b.sum())
    if total <= 0:
        return float("nan"), float("nan"), float("nan")
    k = float(v_b.sum())
    v = k / total
    b = n_b.size
    alpha = 1.0 - float(confidence)
    if b < 2 or k == 0 or k == total:
        n_eff = float(b) if kind == BURSTS else total
    else:
        var = b / (b - 1) * float(np.sum((v_b - v * n_b) ** 2)) / total ** 2
        n_eff = total if var <= 0 else min(total, v * (1 - v) / var)
        if total > 1:
            ratio = _t_ppf(1 - alpha / 2, total - 1) / _t_ppf(1 - alpha / 2, b - 1)
            n_eff = min(total, n_eff * ratio ** 2)
    x = v * n_eff
    low = 0.0 if x <= 0 else float(special.betaincinv(x, n_eff - x + 1, alpha / 2))
    high = 1.0 if x >= n_eff else float(special.betaincinv(x + 1, n_eff - x, 1 - alpha / 2))
    return low, high, n_eff


def v_interval(arrival, violated, confidence: float = 0.95) -> tuple[float, float, int, str]:
    """(low, high, clusters, kind): the cluster-robust interval of one run's V."""
    n_b, v_b, kind = cluster_counts(arrival, violated)
    low, high, _ = robust_v_ci(n_b, v_b, kind, confidence)
    return low, high, int(n_b.size), kind
