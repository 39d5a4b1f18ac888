"""Cluster-robust confidence interval on a run's violation rate V.

Requests of one run are not independent: violations come in bursts (around a merge, in a
queue build-up) and closed-loop clients send batches of identical arrivals whose latencies
move together.  A Clopper–Pearson interval that counts requests as independent is then too
narrow.  Here the requests are grouped into clusters:

* **bursts of identical arrivals** when they are present (at most half as many distinct
  arrival times as requests: the effective sample is the bursts, protocol pitfall 4); the
  bursts are the clusters, with the between-cluster (CR1) variance;
* otherwise short **time blocks** of ``min(FINE_BLOCK_S, span / FINE_BLOCKS)`` seconds from the
  first arrival, and the dependence between blocks is *measured*: the block residuals
  ``r_b = v_b - V n_b`` (in time order) give an autocorrelation, the bandwidth is the
  smallest lag after which it stays inside its noise band (Politis 2003, c = 1), and the
  long-run variance is the flat-top (trapezoid) kernel sum up to twice that lag.  Violation
  episodes longer than a block therefore widen the interval as far as their length says.
  The bandwidth is never shorter than :data:`EPISODE_REACH` of the run's mean *violation
  episode* (its kernel then reaches half an episode): the block counts are cut into segments
  of constant rate by binomial binary segmentation, and an episode is a segment above the
  run's V.  A short run that sits in one long episode with a few dips (its autocorrelation
  dies within the dips) is then read as the few clusters it is.  The reach is the smallest
  of 1/8, 1/4, 1/2, 1 that kept coverage >= 0.93 with margin in the simulation test
  (1/8: 0.930 for 20 s episodes in 100 s runs; 1/4: 0.96, and intervals no wider elsewhere).

The interval is Clopper–Pearson at the *effective sample size* (Korn & Graubard 1998),
``n_eff = V(1 - V) / var(V)``, capped at N (clustering is never read as extra information),
with a small-cluster correction: the variance is scaled by ``C / (C - 1)`` and ``n_eff`` by
``(t_{N-1} / t_{C-1})^2``, ``C`` the effective number of independent clusters (blocks over
the kernel's reach).  With no violation (or all violated) the data say nothing about their
clustering: bursts count one each, and time-block runs are read at
:data:`ZERO_CLUSTERS_S`-second clusters (at least :data:`MIN_CLUSTERS`) -- the rule of three
on the number of clusters, not on requests.  Both scan engines pass the same per-block counts.

**What it estimates.**  The interval is for E[V] of the run's process -- the violation rate
of many runs like this one -- read from this run's own clusters: the 0.95 holds when the run
holds many independent violation episodes.  A run that holds few cannot show how many a run
like it may hold, and the count itself moves V: by simulation (60 s episodes at Poisson
times in 600 s runs, ``tests/runlog/test_vinterval_coverage.py``) coverage of E[V] is 0.57
at about one episode per run, 0.94 at three, 0.98 at eight (20 s) and at twenty (10 s); the
misses are mostly runs in which no episode fell, which nothing in the run can tell from an
unclustered run.  :func:`v_interval` therefore reports the run's episodes and flags
``few_clusters`` when there are fewer than :data:`FEW_EPISODES` (bursts: fewer bursts with a
violation); compare such runs across seeds, not by their own interval.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from evalkit.runlog.metrics import is_sorted, unique_inverse

__all__ = ["BLOCKS", "BURSTS", "FEW_EPISODES", "SEGMENT_PENALTY", "VInterval", "block_length",
           "cluster_counts", "episode_blocks", "episode_count", "robust_v_ci", "robust_v_fit",
           "segments", "uses_bursts", "v_interval"]

FINE_BLOCK_S = 5.0   # time-block length (s) the counts are taken at
FINE_BLOCKS = 60     # short runs get shorter blocks so that the autocorrelation has >= this many
ZERO_CLUSTERS_S = 30.0   # V = 0 or 1: read the run as clusters of this length ...
MIN_CLUSTERS = 10        # ... but as at least this many (and never more than its blocks)
EPISODE_REACH = 0.25      # bandwidth floor, in mean episode lengths
SEGMENT_PENALTY = 3.0     # binary segmentation: split when 2 log LR > this * log B
FEW_EPISODES = 5          # fewer violation episodes than this: the interval's few_clusters flag
BAND_C = 1.0             # autocorrelation noise band, in units of sqrt(log10 B / B)
BURSTS = "identical-arrival bursts"
BLOCKS = "time blocks"


def block_length(first_arrival: float, last_arrival: float) -> float:
    """Time-block length (s) of a run whose arrivals span ``[first, last]``; 0 for no span."""
    span = float(last_arrival) - float(first_arrival)
    return min(FINE_BLOCK_S, span / FINE_BLOCKS) if span > 0 else 0.0


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
    if arrival.size >= 2 and is_sorted(arrival):
        sorted_counts = _sorted_cluster_counts(arrival, violated)
        if sorted_counts is not None:
            return sorted_counts
    times, inverse = unique_inverse(arrival)
    if uses_bursts(arrival.size, times.size):
        kind, key = BURSTS, inverse
    else:
        kind = BLOCKS
        first = float(times[0])
        length = block_length(first, float(times[-1]))
        key = (np.floor((arrival - first) / length).astype(np.int64) if length > 0
               else np.zeros(arrival.size, dtype=np.int64))
        key = unique_inverse(key)[1]
    n_b = np.bincount(key).astype(float)
    v_b = np.bincount(key, weights=violated.astype(float))
    return n_b, v_b, kind


def _run_starts(key: np.ndarray) -> np.ndarray:
    """(n,) non-decreasing -> indices where a new value starts (the first is 0)."""
    new = np.empty(key.size, dtype=bool)
    new[0] = True
    np.not_equal(key[1:], key[:-1], out=new[1:])
    return np.flatnonzero(new)


def _sorted_cluster_counts(arrival: np.ndarray, violated: np.ndarray):
    """:func:`cluster_counts` of arrivals in time order (how writers log them), None when
    it does not apply (a NaN arrival).

    Clusters are then runs of equal keys: their sizes and violation counts come from the
    run starts, with no sort and no inverse.  The counts are integers, so they equal the
    ``bincount`` sums exactly.
    """
    first, last = float(arrival[0]), float(arrival[-1])
    if not (np.isfinite(first) and np.isfinite(last)):
        return None
    starts = _run_starts(arrival)
    if uses_bursts(arrival.size, starts.size):
        kind = BURSTS
    else:
        kind = BLOCKS
        length = block_length(first, last)
        if length > 0:
            starts = _run_starts(np.floor((arrival - first) / length).astype(np.int64))
        else:
            starts = np.zeros(1, dtype=np.intp)
    n_b = np.diff(starts, append=arrival.size).astype(float)
    v_b = np.add.reduceat(violated.view(np.uint8), starts, dtype=np.int64).astype(float)
    return n_b, v_b, kind


def _t_ppf(p: float, df: float) -> float:
    return float(special.stdtrit(df, p))


def _bandwidth(r: np.ndarray) -> tuple[int, np.ndarray]:
    """(m, autocovariances (B,)) of a zero-mean block series: m is the smallest lag after
    which K consecutive autocorrelations lie inside ``c sqrt(log10 B / B)`` (Politis 2003;
    c = :data:`BAND_C`, below Politis' 2 because a short run's autocorrelation is biased
    towards 0 and a missed lag under-covers)."""
    b = r.size
    spec = np.fft.rfft(r, 2 * b)
    gamma = np.fft.irfft(spec * np.conj(spec), 2 * b)[:b] / b
    if gamma[0] <= 0:
        return 0, gamma
    rho = gamma / gamma[0]
    band = BAND_C * math.sqrt(math.log10(max(b, 10)) / b)
    k = max(5, int(math.ceil(math.sqrt(math.log10(max(b, 10))))))
    inside = np.abs(rho) < band
    limit = max(1, b // 4)
    for m in range(0, limit):
        if inside[m + 1:m + 1 + k].all():
            return m, gamma
    return limit, gamma


def _binomial_ll(k: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Binomial log-likelihood at the MLE of segments with ``k`` of ``n`` (same shapes)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(n > 0, k / np.where(n > 0, n, 1), 0.0)
        a = np.where(k > 0, k * np.log(np.where(p > 0, p, 1)), 0.0)
        b = np.where(n - k > 0, (n - k) * np.log(np.where(p < 1, 1 - p, 1)), 0.0)
    return a + b


def segments(n_b, v_b) -> list[tuple[int, int]]:
    """Blocks (B,) -> ``[(start, stop), ...]`` of constant violation rate, by binary
    segmentation of the binomial counts with a ``SEGMENT_PENALTY * log B`` likelihood-ratio
    threshold (one segment for a run whose rate does not change)."""
    n_b = np.asarray(n_b, dtype=float)
    v_b = np.asarray(v_b, dtype=float)
    if n_b.ndim != 1 or n_b.shape != v_b.shape:
        raise ValueError(f"segments needs one request count and one violation count per "
                         f"block (two 1-D arrays of one length); got shapes {n_b.shape} and "
                         f"{v_b.shape}")
    threshold = SEGMENT_PENALTY * math.log(max(n_b.size, 2))
    if _whole_counts(n_b, v_b):
        found = _segments_by_level(n_b, v_b, threshold)
        if found is not None:
            return found
    out, todo = [], [(0, n_b.size)]
    while todo:
        a, z = todo.pop()
        if z - a >= 2:
            cn, cv = np.cumsum(n_b[a:z]), np.cumsum(v_b[a:z])
            left = _binomial_ll(cv[:-1], cn[:-1])
            right = _binomial_ll(cv[-1] - cv[:-1], cn[-1] - cn[:-1])
            whole = float(_binomial_ll(np.array(cv[-1]), np.array(cn[-1])))
            lr = 2.0 * (left + right - whole)
            best = int(np.argmax(lr))
            if lr[best] > threshold:
                todo += [(a, a + best + 1), (a + best + 1, z)]
                continue
        out.append((a, z))
    return sorted(out)


EXACT_SUM = 2.0 ** 53      # integer-valued float sums below this are exact in any order


def _whole_counts(n_b: np.ndarray, v_b: np.ndarray) -> bool:
    """Counts that are non-negative whole numbers with exact sums (what clusters hold)."""
    with np.errstate(invalid="ignore"):
        whole = (np.all(np.floor(n_b) == n_b) and np.all(np.floor(v_b) == v_b)
                 and np.all(n_b >= 0) and np.all(v_b >= 0))
    return bool(whole) and float(n_b.sum()) < EXACT_SUM and float(v_b.sum()) < EXACT_SUM


def _segments_by_level(n_b: np.ndarray, v_b: np.ndarray, threshold: float):
    """:func:`segments` of whole counts, every range of one level of the binary split in
    one vectorised pass; None when a likelihood ratio is NaN (the loop decides then).

    With whole counts the cumulative sums of any range are differences of the global ones,
    exactly, and each likelihood is the same elementwise expression on the same numbers:
    the ratios, hence the cuts, are those of the range-by-range loop, bit for bit.
    """
    cn = np.concatenate(([0.0], np.cumsum(n_b)))
    cv = np.concatenate(([0.0], np.cumsum(v_b)))
    out, level = [], [(0, n_b.size)]
    while level:
        split = [(a, z) for a, z in level if z - a >= 2]
        out += [(a, z) for a, z in level if z - a < 2]
        if not split:
            break
        a = np.array([r[0] for r in split])
        z = np.array([r[1] for r in split])
        sizes = z - a - 1                                  # candidate cuts per range
        offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        rng_of = np.repeat(np.arange(len(split)), sizes)
        cut = np.arange(sizes.sum()) - offsets[rng_of] + a[rng_of] + 1
        base_n, base_v = cn[a][rng_of], cv[a][rng_of]
        top_n, top_v = cn[z][rng_of], cv[z][rng_of]
        left_n, left_v = cn[cut] - base_n, cv[cut] - base_v
        m = cut.size
        ll = _binomial_ll(np.concatenate((left_v, top_v - cv[cut], cv[z] - cv[a])),
                          np.concatenate((left_n, top_n - cn[cut], cn[z] - cn[a])))
        lr = 2.0 * (ll[:m] + ll[m:2 * m] - ll[2 * m:][rng_of])
        if np.isnan(lr).any():
            return None
        best_val = np.maximum.reduceat(lr, offsets)
        at_best = np.flatnonzero(lr == best_val[rng_of])
        best = at_best[np.searchsorted(rng_of[at_best], np.arange(len(split)))] - offsets
        level = []
        for (lo, hi), b, val in zip(split, best.tolist(), best_val.tolist()):
            if val > threshold:
                level += [(lo, lo + b + 1), (lo + b + 1, hi)]
            else:
                out.append((lo, hi))
    return sorted(out)


def episode_count(n_b, v_b) -> int:
    """Number of the run's violation episodes: segments (:func:`segments`) whose rate is above
    the run's V; 0 when the rate does not change (or the run has no violation)."""
    n_b = np.asarray(n_b, dtype=float)
    v_b = np.asarray(v_b, dtype=float)
    total = n_b.sum()
    if total <= 0 or v_b.sum() <= 0:
        return 0
    v = v_b.sum() / total
    parts = segments(n_b, v_b)
    if len(parts) < 2:
        return 0
    return sum(1 for a, z in parts if v_b[a:z].sum() > v * n_b[a:z].sum())


def episode_blocks(n_b, v_b) -> float:
    """Mean length (blocks) of the run's violation episodes: the segments (:func:`segments`)
    whose rate is above the run's V; 0 when the rate does not change."""
    n_b = np.asarray(n_b, dtype=float)
    v_b = np.asarray(v_b, dtype=float)
    v = v_b.sum() / n_b.sum()
    parts = segments(n_b, v_b)
    lengths = [z - a for a, z in parts if v_b[a:z].sum() > v * n_b[a:z].sum()]
    return float(np.mean(lengths)) if len(parts) > 1 else 0.0


def _long_run(r: np.ndarray, floor: int = 0) -> tuple[float, float]:
    """(long-run variance per block, effective number of independent clusters C); the
    bandwidth is at least ``floor`` lags (the episode length the data show)."""
    m, gamma = _bandwidth(r)
    m = min(max(m, int(floor)), max(1, r.size // 4))
    big_m = 2 * m
    h = np.arange(1, min(big_m, r.size - 1) + 1)
    w = np.where(h <= m, 1.0, 2.0 * (1.0 - h / max(big_m, 1)))
    lrv = max(float(gamma[0]), float(gamma[0] + 2.0 * np.sum(w * gamma[h])))
    return lrv, max(2.0, r.size / (1.0 + big_m))


def episode_floor(length: float) -> int:
    """Bandwidth floor (lags) for violation episodes of ``length`` blocks."""
    return int(math.ceil(EPISODE_REACH * length))


def zero_clusters(n_blocks: int, block_s: float) -> float:
    """Clusters a V = 0 (or 1) time-block run is read as: its span in ZERO_CLUSTERS_S pieces,
    at least MIN_CLUSTERS, at most its blocks."""
    pieces = n_blocks * block_s / ZERO_CLUSTERS_S if block_s > 0 else 1.0
    return float(min(max(n_blocks, 1), max(MIN_CLUSTERS, math.floor(pieces))))


def robust_v_fit(n_b, v_b, kind: str = BLOCKS, confidence: float = 0.95,
                 block_s: float = FINE_BLOCK_S) -> tuple[float, float, float, float]:
    """(low, high, n_eff, clusters) of V = sum v_b / sum n_b from per-cluster counts (B,) in
    time order; ``clusters`` is the effective number of independent clusters the interval
    rests on (bursts: B; time blocks: B over the kernel's reach; V = 0 or 1: the rule-of-three
    clusters; one block: 1).

    ``kind``: :data:`BURSTS` (clusters independent) or :data:`BLOCKS` (dependence between
    blocks measured); ``block_s``: the blocks' length (V = 0 or 1 only)."""
    n_b = np.asarray(n_b, dtype=float)
    v_b = np.asarray(v_b, dtype=float)
    total = float(n_b.sum())
    if total <= 0:
        return float("nan"), float("nan"), float("nan"), 0.0
    k = float(v_b.sum())
    v = k / total
    b = n_b.size
    alpha = 1.0 - float(confidence)
    if k == 0 or k == total:
        clusters = float(b) if kind == BURSTS else zero_clusters(b, block_s)
        n_eff = min(total, clusters)
    elif b < 2:                      # one cluster holds every request: nothing to measure
        n_eff, clusters = total, 1.0
    else:
        r = v_b - v * n_b
        if kind == BURSTS:
            lrv, clusters = float(np.mean(r * r)), float(b)
        else:
            lrv, clusters = _long_run(r, episode_floor(episode_blocks(n_b, v_b)))
        var = clusters / (clusters - 1) * b * lrv / total ** 2
        n_eff = total if var <= 0 else min(total, v * (1 - v) / var)
        if total > 1:
            ratio = _t_ppf(1 - alpha / 2, total - 1) / _t_ppf(1 - alpha / 2, clusters - 1)
            n_eff = min(total, n_eff * ratio ** 2)
    x = v * n_eff
    low = 0.0 if x <= 0 else float(special.betaincinv(x, n_eff - x + 1, alpha / 2))
    high = 1.0 if x >= n_eff else float(special.betaincinv(x + 1, n_eff - x, 1 - alpha / 2))
    return low, high, n_eff, float(clusters)


def robust_v_ci(n_b, v_b, kind: str = BLOCKS, confidence: float = 0.95,
                block_s: float = FINE_BLOCK_S) -> tuple[float, float, float]:
    """(low, high, n_eff) of :func:`robust_v_fit`."""
    return robust_v_fit(n_b, v_b, kind, confidence, block_s)[:3]


class VInterval(tuple):
    """``(low, high, clusters, kind)`` of :func:`v_interval` (it unpacks as that 4-tuple),
    with ``episodes`` (:func:`episode_count`; bursts: the bursts that hold a violation) and
    ``few_clusters``: the interval rests on fewer than :data:`FEW_EPISODES` episodes (or
    bursts with a violation), so how many hit this run -- which it cannot show -- moves V
    more than the interval says (module docstring, "What it estimates")."""

    def __new__(cls, low: float, high: float, clusters: float, kind: str, episodes: int):
        out = super().__new__(cls, (low, high, clusters, kind))
        out.episodes = int(episodes)
        return out

    @property
    def few_clusters(self) -> bool:
        return 0 < self.episodes < FEW_EPISODES


def v_interval(arrival, violated, confidence: float = 0.95) -> VInterval:
    """(low, high, clusters, kind): the cluster-robust interval of one run's V and the
    effective number of independent clusters it rests on (:func:`robust_v_fit`), with the
    run's violation episodes and the few-clusters flag (:class:`VInterval`)."""
    n_b, v_b, kind = cluster_counts(arrival, violated)
    arrival = np.asarray(arrival, dtype=float)
    length = block_length(arrival.min(), arrival.max()) if arrival.size else 0.0
    low, high, _, clusters = robust_v_fit(n_b, v_b, kind, confidence, length)
    episodes = (int(np.count_nonzero(v_b)) if kind == BURSTS else episode_count(n_b, v_b))
    return VInterval(low, high, clusters, kind, episodes)
