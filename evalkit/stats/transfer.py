"""Effect-size transfer measured against the same requests without merges (paired).

For a mechanism m (the sync window), the naive ``p95(active) / p95(inactive)`` split is wrong
both ways: long requests overlap windows more often (length bias: rho > 1 with no effect) and
a merge's backlog drains after the window (the inactive group is itself slowed: rho -> 1).
The paired estimator compares each request in flight during a window with **the same request
(same ``request_id``) in the seed's load-matched no-sync run**:

* ``rho``: ``p_q(latency) / p_q(latency in no-sync)`` over the in-window requests (q = 0.95);
* ``gm_ratio``: ``exp(mean log(latency / latency in no-sync))`` over the same requests (pairs
  with a failed request are left out of this one; they enter the p95 as +inf);
* the **drain curve**: ``gm_ratio`` (and the p95 ratio) of requests that arrive at lag
  ``[lo, hi)`` after a window ends and overlap no window, in bins up to ``max_lag_s``; the
  **guard band** is where the curve returns to 1: the lower edge of the first bin, counting
  from lag 0, whose CI does not lie above 1.

A request is "in window" when its lifetime in the merging run *or* in the no-sync run
overlaps a window: a symmetric rule, so that with no effect the two latencies of a selected
request are exchangeable (selecting on one run's latency alone would bias the ratio).

CIs: percentile bootstrap over **seeds x time blocks**: resample the seeds (``group``) with
replacement, then, for each seed drawn, the contiguous ``block_s`` time blocks of its runs
(a block never spans two runs).  One explicit ``numpy.random.Generator``.  The block is
widened from the data: while the block means of the paired log ratios (in-window and other
requests centred separately) are autocorrelated at lag 1 beyond their noise band, the block
doubles (as long as runs keep >= 3 blocks); ``block_s`` reports the one used.  With fewer
than :data:`MIN_SEEDS` seeds a bootstrap over seeds cannot cover: no CI, "too few seeds".

Without a no-sync run :func:`guard_band_transfer` falls back to an unpaired comparison: the
in-window requests against requests arriving at least a pre-registered guard band after any
window (per output-length stratum), the latter re-weighted to the in-window requests'
output-length mix (length bias).  It is weaker -- the guard band is assumed, not measured, and
stratification only removes the length bias it can see -- and labelled so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from evalkit.errors import InputError, NotEstimable
from evalkit.stats._result import ResultMixin, as_generator
from evalkit.stats.block_bootstrap import (block_units, data_block, float_quantile,
                                           percentile_ci, two_stage_counts, weighted_quantile)

__all__ = ["DRAIN_BIN_S", "DRAIN_MAX_LAG_S", "FALLBACK", "MIN_BIN_REQUESTS", "PAIRED", "DrainBin",
           "RhoSide", "TransferComparison", "compare_sides", "fallback_rho", "guard_band_transfer",
           "length_strata", "paired_rho", "paired_transfer"]

PAIRED = "paired vs no-sync"
FALLBACK = "guard-band fallback (weaker)"
DRAIN_BIN_S = 5.0
DRAIN_MAX_LAG_S = 60.0
MIN_BIN_REQUESTS = 5          # fewer requests in a drain bin: no CI for that bin
MIN_SEEDS = 5                 # fewer seeds: a bootstrap over seeds gives no CI
_CHUNK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class DrainBin(ResultMixin):
    """Paired ratio of the requests arriving ``[lag_lo, lag_hi)`` s after a window ends.
    ``ratio`` is the geometric-mean ratio (its CI decides the guard band), ``p95_ratio``
    the p95 ratio."""

    lag_lo: float
    lag_hi: float
    n: int
    ratio: float
    ci_low: float
    ci_high: float
    p95_ratio: float
    p95_ci_low: float
    p95_ci_high: float


@dataclass(frozen=True)
class RhoSide(ResultMixin):
    """rho of one side (harness or real) with its CI and, when paired, the drain curve.

    ``rho``: p95 ratio; ``gm_ratio``: geometric-mean ratio.  Paired: both are in-window
    requests against the same requests in no-sync.  Fallback: in-window against requests
    outside the guard band, length re-weighted.  ``guard_band_s``: measured (paired) or the
    pre-registered one (fallback; the largest over strata, ``guard_band_by_stratum`` all).
    ``drains``: the drain curve returns to 1 within its range (None in the fallback);
    ``post_window_effect``: requests arriving right after a window are slowed (guard band >
    0) -- a naive in/out split would have had a stressed "inactive" group.
    """

    method: str
    rho: float
    ci_low: float
    ci_high: float
    gm_ratio: float
    gm_ci_low: float
    gm_ci_high: float
    n_active: int
    n_reference: int
    n_failed_pairs: int
    n_runs: int
    n_groups: int
    n_blocks: int
    block_s: float
    n_boot: int
    n_boot_undefined: int
    drain_curve: list
    guard_band_s: float
    guard_band_by_stratum: list
    drains: bool | None
    post_window_effect: bool | None
    ci_method: str
    _reps: np.ndarray = field(repr=False, default=None)
    _gm_reps: np.ndarray = field(repr=False, default=None)
    too_few_seeds: bool = False


@dataclass(frozen=True)
class TransferComparison(ResultMixin):
    """Harness vs real rho for one mechanism, estimated the same way on both sides.

    ``transfer_fraction = (rho_real - 1) / (rho_harness - 1)`` (p95 ratios),
    ``transfer_fraction_gm`` the same for the geometric-mean ratios; CIs from the two sides'
    independent bootstrap replicates.  ``transferred``: the real rho's CI lies above 1.
    """

    mechanism: str
    method: str
    q: float
    harness: RhoSide
    real: RhoSide
    transfer_fraction: float
    transfer_ci_low: float
    transfer_ci_high: float
    transfer_fraction_gm: float
    transfer_gm_ci_low: float
    transfer_gm_ci_high: float
    transferred: bool
    verdict: str
    confidence_level: float


def _check_common(q, block_s, n_boot):
    if not 0 < q < 1:
        raise InputError(f"q = {q} must lie in (0, 1)", column="q", fix="use 0.95")
    if not block_s > 0:
        raise InputError(f"block_s = {block_s} must be positive", column="block_s",
                         fix="use a block longer than the latency correlation time, e.g. 30 s")
    if int(n_boot) < 100:
        raise InputError(f"n_boot = {n_boot} is too few", column="n_boot", fix="use >= 1000")


def _columns(df, name: str, cols) -> dict:
    if df is None or not hasattr(df, "columns"):
        raise InputError(f"{name} must be a DataFrame", column=name,
                         fix="pass one row per request of the merging runs")
    for col in cols:
        if col not in df.columns:
            raise InputError(f"{name} lacks a column", column=col,
                             fix="one row per request with " + ", ".join(cols))
    out = {}
    for col in cols:
        if col in ("run", "group"):
            out[col] = df[col].to_numpy()
        elif col == "active":
            if df[col].isna().any():
                raise InputError(f"{name}: 'active' has missing values", column=col,
                                 fix="mark every request in window or not")
            out[col] = df[col].to_numpy(dtype=bool)
        else:
            out[col] = df[col].to_numpy(dtype=float, na_value=np.nan)
    for col in ("latency_s", "latency_ref_s"):
        if col in out and (np.isnan(out[col]).any() or (out[col] < 0).any()):
            raise InputError(f"{name}: {col} holds NaN or negative values", column=col,
                             fix="failed requests have latency +inf, never NaN")
    if not np.isfinite(out["t_s"]).all():
        raise InputError(f"{name}: t_s holds NaN/inf", column="t_s",
                         fix="every request needs its arrival time")
    return out


# ------------------------------------------------------------------------- paired

class _PairedSubset:
    """Requests ``sel`` of one side, sorted once for the weighted quantiles."""

    def __init__(self, lat, ref, block, sel, q):
        self.q = q
        self.block = block[sel]
        v1, v2 = lat[sel], ref[sel]
        self.o1 = np.argsort(v1, kind="stable")
        self.o2 = np.argsort(v2, kind="stable")
        self.v1, self.v2 = v1[self.o1], v2[self.o2]
        # each sorted request's block: one gather of the multiplicities per side
        self.block1, self.block2 = self.block[self.o1], self.block[self.o2]
        fin = np.isfinite(v1) & np.isfinite(v2) & (v1 > 0) & (v2 > 0)
        self.lr = np.log(v1[fin] / v2[fin])
        self.lr_block = self.block[fin]
        self.n = int(sel.size)
        self.n_failed = int((~fin).sum())

    def stats(self, counts):
        """(c, nb) block multiplicities -> p95 ratio (c,) and geometric-mean ratio (c,)."""
        if self.n == 0:
            nan = np.full(counts.shape[0], np.nan)
            return nan, nan.copy()
        p1 = weighted_quantile(self.v1, counts[:, self.block1], self.q)
        p2 = weighted_quantile(self.v2, counts[:, self.block2], self.q)
        wl = counts[:, self.lr_block].astype(float)
        tot = wl.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(p2 > 0, p1 / p2, np.nan)
            gm = np.exp(np.where(tot > 0, (wl @ self.lr) / tot, np.nan))
        return ratio, gm


def _guard_band(bins: list[DrainBin], max_lag_s: float) -> tuple[float, bool]:
    for b in bins:
        if not (np.isfinite(b.ci_low) and b.ci_low > 1):
            return b.lag_lo, True
    return float(max_lag_s), False


def paired_rho(requests, q: float = 0.95, block_s: float = 30.0, n_boot: int = 2000,
               rng=None, confidence_level: float = 0.95, bin_s: float = DRAIN_BIN_S,
               max_lag_s: float = DRAIN_MAX_LAG_S, name: str = "requests",
               min_seeds: int | None = None, adapt_block: bool = True) -> RhoSide:
    """Paired rho and drain curve of one side.

    ``requests``: one row per request of the merging runs, columns ``run``, ``group``
    (seed: the outer resampling unit), ``t_s`` (arrival), ``latency_s`` (merging run, +inf
    if failed), ``latency_ref_s`` (the same request in the seed's no-sync run), ``active``
    (in flight during a window in either run) and ``lag_s`` (arrival minus the end of the
    last window before it; NaN when there is none or the request is active).
    min_seeds: fewer seeds give no CI ("too few seeds"); None: :data:`MIN_SEEDS`.
    adapt_block: widen ``block_s`` from the data (:func:`data_block`); False keeps it fixed.
    """
    _check_common(q, block_s, n_boot)
    if not (bin_s > 0 and max_lag_s >= bin_s):
        raise InputError(f"drain bins of {bin_s} s up to {max_lag_s} s", column="bin_s",
                         fix="use bin_s > 0 and max_lag_s >= bin_s, e.g. 5 and 60")
    c = _columns(requests, name, ("run", "group", "t_s", "latency_s", "latency_ref_s",
                                  "active", "lag_s"))
    active = c["active"]
    if not active.any():
        raise NotEstimable(f"{name}: no request was in flight during a merge window",
                           column="active", fix="the runs need merges that overlap requests")
    lat, ref, lag = c["latency_s"], c["latency_ref_s"], c["lag_s"]
    with np.errstate(divide="ignore", invalid="ignore"):
        lr_all = np.where((lat > 0) & (ref > 0), np.log(lat / ref), np.nan)
    block_asked = float(block_s)
    if adapt_block:
        block_s = data_block(c["run"], c["group"], c["t_s"], lr_all, active, block_s)
    block, block_group, n_groups, n_runs = block_units(c["run"], c["group"], c["t_s"], block_s)
    edges = np.arange(0.0, max_lag_s + 1e-9, bin_s)
    edges = edges if edges[-1] >= max_lag_s - 1e-9 else np.append(edges, max_lag_s)
    subsets = [_PairedSubset(lat, ref, block, np.flatnonzero(active), q)]
    free = ~active & np.isfinite(lag)
    for lo, hi in zip(edges[:-1], edges[1:]):
        subsets.append(_PairedSubset(lat, ref, block, np.flatnonzero(free & (lag >= lo)
                                                                     & (lag < hi)), q))
    n_blocks = int(block_group.size)
    ones = np.ones((1, n_blocks), dtype=np.int64)
    points = [s.stats(ones) for s in subsets]
    gen = as_generator(rng)
    b = int(n_boot)
    reps = [(np.empty(b), np.empty(b)) for _ in subsets]
    rows = max(1, _CHUNK_ELEMENTS // max(1, sum(s.n for s in subsets)))
    for i in range(0, b, rows):
        cnt = two_stage_counts(block_group, n_groups, min(rows, b - i), gen)
        for (r_p95, r_gm), s in zip(reps, subsets):
            r_p95[i:i + cnt.shape[0]], r_gm[i:i + cnt.shape[0]] = s.stats(cnt)
    alpha = 1 - confidence_level
    min_seeds = MIN_SEEDS if min_seeds is None else int(min_seeds)
    few = n_groups < min_seeds
    enough = n_blocks > 1 and not few
    bins = []
    for (lo, hi), s, (p_p95, p_gm), (r_p95, r_gm) in zip(zip(edges[:-1], edges[1:]),
                                                        subsets[1:], points[1:], reps[1:]):
        ok = enough and s.n >= MIN_BIN_REQUESTS
        gl, gh = percentile_ci(r_gm, alpha, ok)
        pl, ph = percentile_ci(r_p95, alpha, ok)
        bins.append(DrainBin(float(lo), float(hi), s.n, float(p_gm[0]), gl, gh,
                             float(p_p95[0]), pl, ph))
    guard, drains = _guard_band(bins, max_lag_s)
    r_p95, r_gm = reps[0]
    lo, hi = percentile_ci(r_p95, alpha, enough)
    glo, ghi = percentile_ci(r_gm, alpha, enough)
    main = subsets[0]
    return RhoSide(
        method=PAIRED, rho=float(points[0][0][0]), ci_low=lo, ci_high=hi,
        gm_ratio=float(points[0][1][0]), gm_ci_low=glo, gm_ci_high=ghi, n_active=main.n,
        n_reference=main.n, n_failed_pairs=main.n_failed, n_runs=n_runs, n_groups=n_groups,
        n_blocks=n_blocks, block_s=float(block_s), n_boot=b,
        n_boot_undefined=int((~np.isfinite(r_p95)).sum()), drain_curve=bins,
        guard_band_s=float(guard), guard_band_by_stratum=[], drains=drains,
        post_window_effect=bool(guard > 0),
        ci_method=(f"percentile bootstrap over seeds x {block_s:g} s time blocks (seeds "
                   f"resampled, then each drawn seed's blocks; a block never spans two runs), "
                   f"{b} replicates"
                   + (f"; block widened from {block_asked:g} s: latencies correlated longer"
                      if block_s > block_asked else "")
                   + (f"; too few seeds ({n_groups} < {min_seeds}): no CI" if few else
                      "" if enough else "; one block only: no CI")),
        too_few_seeds=few, _reps=r_p95, _gm_reps=r_gm)


# ------------------------------------------------------------------------- fallback

class _FallbackSide:
    def __init__(self, lat, block, active, ref_mask, stratum, n_strata, q):
        self.q, self.n_strata = q, n_strata
        self.a = np.flatnonzero(active)
        self.r = np.flatnonzero(ref_mask)
        self.block = block
        self.stratum = stratum
        self.oa = self.a[np.argsort(lat[self.a], kind="stable")]
        self.or_ = self.r[np.argsort(lat[self.r], kind="stable")]
        self.va, self.vr = lat[self.oa], lat[self.or_]
        fin = np.isfinite(lat) & (lat > 0)
        self.la = self.a[fin[self.a]]
        self.lr = self.r[fin[self.r]]
        self.log = np.where(fin, np.log(np.where(fin, lat, 1.0)), 0.0)

    def stats(self, counts):
        w = counts[:, self.block].astype(float)
        s = self.stratum
        onehot = np.eye(self.n_strata)
        share_a = w[:, self.a] @ onehot[s[self.a]]          # (c, strata) weight per stratum
        share_r = w[:, self.r] @ onehot[s[self.r]]
        with np.errstate(divide="ignore", invalid="ignore"):
            fa = share_a / share_a.sum(1, keepdims=True)
            fr = share_r / share_r.sum(1, keepdims=True)
            mult_r = np.where(share_r > 0, fa / fr, 0.0)
        keep_a = (share_r > 0).astype(float)
        wa = w * keep_a[:, s]
        wr = w * np.nan_to_num(mult_r)[:, s]
        pa = float_quantile(self.va, wa[:, self.oa], self.q)
        pr = float_quantile(self.vr, wr[:, self.or_], self.q)
        with np.errstate(divide="ignore", invalid="ignore"):
            ma = (wa[:, self.la] @ self.log[self.la]) / wa[:, self.la].sum(1)
            mr = (wr[:, self.lr] @ self.log[self.lr]) / wr[:, self.lr].sum(1)
            return np.where(pr > 0, pa / pr, np.nan), np.exp(ma - mr)


def length_strata(output_tokens, n_strata: int) -> np.ndarray:
    """(n,) stratum 0..n_strata-1 of each request: quantile bins of its output tokens."""
    tokens = np.nan_to_num(np.asarray(output_tokens, dtype=float), nan=0.0)
    edges = np.unique(np.quantile(tokens, np.linspace(0, 1, int(n_strata) + 1)[1:-1]))
    return np.searchsorted(edges, tokens, side="right")


def fallback_rho(requests, guard_band_s, n_strata: int = 5, q: float = 0.95,
                 block_s: float = 30.0, n_boot: int = 2000, rng=None,
                 confidence_level: float = 0.95, name: str = "requests",
                 min_seeds: int | None = None) -> RhoSide:
    """Unpaired rho with a pre-registered guard band, length re-weighted (weaker).

    ``requests``: ``run``, ``group``, ``t_s``, ``latency_s``, ``active`` (own lifetime
    overlaps a window), ``lag_s`` (arrival minus the last window end before it, NaN if none)
    and ``output_tokens``.  Output tokens are cut into ``n_strata`` quantile strata;
    ``guard_band_s``: one number, or one per stratum (shortest outputs first).  Reference
    requests: not in a window and arriving no sooner than their stratum's guard band after
    one, re-weighted to the in-window requests' stratum mix.
    """
    _check_common(q, block_s, n_boot)
    c = _columns(requests, name, ("run", "group", "t_s", "latency_s", "active", "lag_s",
                                  "output_tokens"))
    if int(n_strata) < 1:
        raise InputError(f"n_strata = {n_strata}", column="fallback_length_strata",
                         fix="use at least 1 output-length stratum, e.g. 5")
    n_strata = int(n_strata)
    guard = np.atleast_1d(np.asarray(guard_band_s, dtype=float))
    if guard.size == 1:
        guard = np.repeat(guard, n_strata)
    if guard.size != n_strata or np.any(~np.isfinite(guard)) or np.any(guard < 0):
        raise InputError(f"{guard.size} guard bands for {n_strata} output-length strata",
                         column="fallback_guard_band_s",
                         fix="give one non-negative guard band (s), or one per stratum")
    stratum = length_strata(c["output_tokens"], n_strata)
    active, lag = c["active"], c["lag_s"]
    ref_mask = ~active & (np.isnan(lag) | (lag >= guard[stratum]))
    if not active.any() or not ref_mask.any():
        raise NotEstimable(f"{name}: no requests {'in' if not active.any() else 'clear of'} "
                           "merge windows", column="active",
                           fix="the runs need requests in and well after merge windows")
    block, block_group, n_groups, n_runs = block_units(c["run"], c["group"], c["t_s"], block_s)
    side = _FallbackSide(c["latency_s"], block, active, ref_mask, stratum, n_strata, q)
    n_blocks = int(block_group.size)
    p95, gm = side.stats(np.ones((1, n_blocks), dtype=np.int64))
    gen = as_generator(rng)
    b = int(n_boot)
    r_p95, r_gm = np.empty(b), np.empty(b)
    rows = max(1, _CHUNK_ELEMENTS // max(1, c["t_s"].size))
    for i in range(0, b, rows):
        cnt = two_stage_counts(block_group, n_groups, min(rows, b - i), gen)
        r_p95[i:i + cnt.shape[0]], r_gm[i:i + cnt.shape[0]] = side.stats(cnt)
    alpha = 1 - confidence_level
    min_seeds = MIN_SEEDS if min_seeds is None else int(min_seeds)
    few = n_groups < min_seeds
    enough = n_blocks > 1 and not few
    lo, hi = percentile_ci(r_p95, alpha, enough)
    glo, ghi = percentile_ci(r_gm, alpha, enough)
    lat = c["latency_s"]
    return RhoSide(
        method=FALLBACK, rho=float(p95[0]), ci_low=lo, ci_high=hi, gm_ratio=float(gm[0]),
        gm_ci_low=glo, gm_ci_high=ghi, n_active=int(active.sum()),
        n_reference=int(ref_mask.sum()),
        n_failed_pairs=int((~np.isfinite(lat[active | ref_mask])).sum()), n_runs=n_runs,
        n_groups=n_groups, n_blocks=n_blocks, block_s=float(block_s), n_boot=b,
        n_boot_undefined=int((~np.isfinite(r_p95)).sum()), drain_curve=[],
        guard_band_s=float(guard.max()), guard_band_by_stratum=guard.tolist(), drains=None,
        post_window_effect=None,
        ci_method=(f"percentile bootstrap over seeds x {block_s:g} s time blocks, {b} "
                   "replicates; unpaired: in-window requests against requests outside a "
                   "pre-registered guard band, re-weighted to the same output-length mix"
                   + (f"; too few seeds ({n_groups} < {min_seeds}): no CI" if few else
                      "" if enough else "; one block only: no CI")),
        too_few_seeds=few, _reps=r_p95, _gm_reps=r_gm)


# ------------------------------------------------------------------------- comparison

def _fraction(real_point, harness_point, real_reps, harness_reps, alpha, enough):
    if not np.isfinite(harness_point) or abs(harness_point - 1) < 1e-12:
        return math.nan, math.nan, math.nan
    frac = (real_point - 1) / (harness_point - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        reps = (real_reps - 1) / (harness_reps - 1)
    lo, hi = percentile_ci(reps, alpha, enough)
    return float(frac), lo, hi


def compare_sides(harness: RhoSide, real: RhoSide, mechanism: str = "sync", q: float = 0.95,
                  confidence_level: float = 0.95) -> TransferComparison:
    """Transfer fraction and verdict of two sides estimated the same way."""
    if harness.method != real.method:
        raise InputError(f"harness estimated by {harness.method!r}, real by {real.method!r}",
                         column="method", fix="estimate both sides the same way")
    alpha = 1 - confidence_level
    few = harness.too_few_seeds or real.too_few_seeds
    enough = min(harness.n_blocks, real.n_blocks) > 1 and not few
    frac, f_lo, f_hi = _fraction(real.rho, harness.rho, real._reps, harness._reps, alpha,
                                 enough)
    gfrac, g_lo, g_hi = _fraction(real.gm_ratio, harness.gm_ratio, real._gm_reps,
                                  harness._gm_reps, alpha, enough)
    transferred = bool(np.isfinite(real.ci_low) and real.ci_low > 1)
    weaker = " (weaker: guard-band fallback, no no-sync run)" if real.method == FALLBACK else ""
    if transferred:
        verdict = "transferred: the real rho CI excludes 1" + weaker
    elif not np.isfinite(real.ci_low) and few:
        verdict = (f"cannot be estimated: too few seeds ({min(real.n_groups, harness.n_groups)}"
                   f" < {MIN_SEEDS}) for a CI over seeds")
    elif not np.isfinite(real.ci_low):
        verdict = "cannot be estimated: the real data form a single time block, no CI"
    elif np.isfinite(real.ci_high) and real.ci_high < 1:
        verdict = ("did not transfer: the real rho CI lies below 1 (requests in the windows "
                   "were faster than the same requests without merges)" + weaker)
    else:
        verdict = "did not transfer: the real rho CI includes 1" + weaker
    return TransferComparison(
        mechanism=mechanism, method=real.method, q=float(q), harness=harness, real=real,
        transfer_fraction=frac, transfer_ci_low=f_lo, transfer_ci_high=f_hi,
        transfer_fraction_gm=gfrac, transfer_gm_ci_low=g_lo, transfer_gm_ci_high=g_hi,
        transferred=transferred, verdict=verdict, confidence_level=float(confidence_level))


def paired_transfer(harness_requests, real_requests, mechanism: str = "sync", q: float = 0.95,
                    block_s: float = 30.0, n_boot: int = 2000, rng=None,
                    confidence_level: float = 0.95, bin_s: float = DRAIN_BIN_S,
                    max_lag_s: float = DRAIN_MAX_LAG_S) -> TransferComparison:
    """:func:`paired_rho` on both sides (one generator, harness first) and the comparison."""
    gen = as_generator(rng)
    kw = dict(q=q, block_s=block_s, n_boot=n_boot, rng=gen, confidence_level=confidence_level,
              bin_s=bin_s, max_lag_s=max_lag_s)
    harness = paired_rho(harness_requests, name="harness_requests", **kw)
    real = paired_rho(real_requests, name="real_requests", **kw)
    return compare_sides(harness, real, mechanism, q, confidence_level)


def guard_band_transfer(harness_requests, real_requests, guard_band_s, n_strata: int = 5,
                        mechanism: str = "sync", q: float = 0.95, block_s: float = 30.0,
                        n_boot: int = 2000, rng=None,
                        confidence_level: float = 0.95) -> TransferComparison:
    """:func:`fallback_rho` on both sides and the comparison (labelled weaker)."""
    gen = as_generator(rng)
    kw = dict(q=q, block_s=block_s, n_boot=n_boot, rng=gen, confidence_level=confidence_level)
    harness = fallback_rho(harness_requests, guard_band_s, n_strata, name="harness_requests",
                           **kw)
    real = fallback_rho(real_requests, guard_band_s, n_strata, name="real_requests", **kw)
    return compare_sides(harness, real, mechanism, q, confidence_level)
