"""Two-stage block bootstrap over seeds x time blocks, the resampling behind the transfer CIs
(:mod:`evalkit.stats.transfer`): request -> block units, the data-driven block length, the
(rows, blocks) multiplicities of seeds-then-blocks draws, percentile CIs, and weighted
quantiles of resamples given as multiplicities or weights.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from evalkit.errors import InputError

__all__ = ["block_units", "data_block", "float_quantile", "lag1_of_block_means", "percentile_ci",
           "two_stage_counts", "weighted_quantile"]

MIN_RUN_BLOCKS = 3            # the block is widened only while runs keep this many blocks
MAX_DOUBLINGS = 5


def weighted_quantile(v_sorted: np.ndarray, weights: np.ndarray, q: float) -> np.ndarray:
    """numpy's linear quantile of each row's resample, given as integer multiplicities.

    v_sorted (n,) ascending (may end in +inf for failed requests); weights (r, n) -> (r,).
    A quantile interpolating towards +inf is +inf; a row with no weight gives NaN.
    """
    cw = np.cumsum(weights, axis=1)
    total = cw[:, -1] if cw.shape[1] else np.zeros(weights.shape[0])
    h = (total - 1) * q
    lo_pos = np.floor(h)
    hi_pos = np.minimum(lo_pos + 1, total - 1)
    i_lo = np.minimum((cw <= lo_pos[:, None]).sum(axis=1), v_sorted.size - 1)
    i_hi = np.minimum((cw <= hi_pos[:, None]).sum(axis=1), v_sorted.size - 1)
    v_lo, v_hi = v_sorted[i_lo], v_sorted[i_hi]
    frac = h - lo_pos
    with np.errstate(invalid="ignore"):
        out = np.where((frac == 0) | (v_lo == v_hi), v_lo,
                       np.where(np.isinf(v_hi), np.inf, v_lo + frac * (v_hi - v_lo)))
    return np.where(total > 0, out, np.nan)


def block_units(run, group, t, block_s: float):
    """Block index (n,) of every request and the seed index (nb,) of every block."""
    run_code = pd.factorize(pd.Series(run, dtype=object))[0]
    group_code, groups = pd.factorize(pd.Series(group, dtype=object))
    n_runs = int(run_code.max()) + 1
    owner = np.full(n_runs, -1)
    owner[run_code] = group_code
    if np.any(owner[run_code] != group_code):
        raise InputError("a run belongs to several seeds (group)", column="group",
                         fix="every request of a run carries the run's seed")
    t0 = np.full(n_runs, np.inf)
    np.minimum.at(t0, run_code, t)
    in_run = np.floor((t - t0[run_code]) / block_s).astype(np.int64)
    key = run_code.astype(np.int64) * (int(in_run.max()) + 1) + in_run
    _, block = np.unique(key, return_inverse=True)
    n_blocks = int(block.max()) + 1
    block_group = np.empty(n_blocks, dtype=np.int64)
    block_group[block] = group_code
    return block, block_group, len(groups), n_runs


def lag1_of_block_means(block, run_of_block, x) -> tuple[float, int]:
    """Lag-1 autocorrelation of per-block means of x within runs, and the pairs it rests on."""
    nb = int(block.max()) + 1
    cnt = np.bincount(block, minlength=nb).astype(float)
    mean = np.bincount(block, weights=x, minlength=nb) / np.maximum(cnt, 1)
    ok = cnt > 0
    dev = np.where(ok, mean - mean[ok].mean(), 0.0)
    same = (run_of_block[1:] == run_of_block[:-1]) & ok[1:] & ok[:-1]
    den = float(np.sum(dev[ok] ** 2))
    if den <= 0 or not same.any():
        return 0.0, int(same.sum())
    return float(np.sum(dev[1:][same] * dev[:-1][same]) / den * ok.sum() / same.sum()), \
        int(same.sum())


def data_block(run, group, t, x, active, block_s: float) -> float:
    """The bootstrap block (s): ``block_s`` doubled while the block means of x (centred
    within the active / other requests) keep a lag-1 autocorrelation above ``2 / sqrt(pairs)``
    and every run keeps >= MIN_RUN_BLOCKS blocks of the doubled length."""
    x = np.asarray(x, dtype=float)
    keep = np.isfinite(x)
    if keep.sum() < 2:
        return float(block_s)
    x = x.copy()
    for flag in (True, False):
        sel = keep & (active == flag)
        if sel.any():
            x[sel] -= x[sel].mean()
    run_code = pd.factorize(pd.Series(run, dtype=object))[0]
    span = pd.Series(t).groupby(run_code).agg(lambda v: v.max() - v.min()).to_numpy()
    block = float(block_s)
    for _ in range(MAX_DOUBLINGS):
        if np.min(span) < MIN_RUN_BLOCKS * 2 * block:
            break
        b, _, _, _ = block_units(np.asarray(run)[keep], np.asarray(group)[keep], t[keep], block)
        run_of_block = np.zeros(int(b.max()) + 1, dtype=np.int64)
        run_of_block[b] = run_code[keep]
        rho, pairs = lag1_of_block_means(b, run_of_block, x[keep])
        if pairs < 4 or rho <= 2.0 / math.sqrt(pairs):
            break
        block *= 2.0
    return block


def two_stage_counts(block_group: np.ndarray, n_groups: int, rows: int, gen) -> np.ndarray:
    """(rows, nb) multiplicities: seeds drawn with replacement, then, for each copy of a seed,
    its blocks drawn with replacement (the copies' draws summed)."""
    counts = np.zeros((rows, block_group.size), dtype=np.int64)
    seeds = gen.multinomial(n_groups, np.full(n_groups, 1.0 / n_groups), size=rows)
    for g in range(n_groups):
        idx = np.flatnonzero(block_group == g)
        counts[:, idx] = gen.multinomial(seeds[:, g] * idx.size, np.full(idx.size, 1.0 / idx.size))
    return counts


def percentile_ci(reps: np.ndarray, alpha: float, enough: bool) -> tuple[float, float]:
    ok = reps[np.isfinite(reps)]
    if not enough or ok.size == 0:
        return math.nan, math.nan
    lo, hi = np.quantile(ok, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def float_quantile(v_sorted: np.ndarray, w: np.ndarray, q: float) -> np.ndarray:
    """Inverted-CDF quantile of each row of non-negative weights (c, n) -> (c,)."""
    cw = np.cumsum(w, axis=1)
    total = cw[:, -1] if cw.shape[1] else np.zeros(w.shape[0])
    idx = np.minimum((cw < (q * total)[:, None] - 1e-12 * total[:, None]).sum(axis=1),
                     max(v_sorted.size - 1, 0))
    out = v_sorted[idx] if v_sorted.size else np.full(w.shape[0], np.nan)
    return np.where(total > 0, out, np.nan)
