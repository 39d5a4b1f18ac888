"""Confidence intervals by inverting the randomisation test under an additive shift delta.

Each label set L stops being "at least as extreme" at one threshold ``delta_L = (T - T_L) /
(1 + c(L))``, ``c(L) = mean_s(-1 if L_s is the observed label else 1/m_s)``, so the bounds
are order statistics of thresholds: no root finding.  For sign flips the thresholds are the
means of d over the flipped seeds.  Every label set when there are few, else the identity and
random ones (Monte Carlo).  Used by :mod:`evalkit.stats.randomisation`.
"""

from __future__ import annotations

import math

import numpy as np

from evalkit.stats.studentized import random_labels

__all__ = ["CI_MC_PATTERNS", "CI_MC_SETS", "EXACT_CI_MAX_N", "permutation_ci", "sign_flip_ci"]

EXACT_CI_MAX_N = 16             # sign flips: CI from all 2^n subsets up to here
EXACT_CI_MAX = 1 << 17          # label sets: CI from every label set up to here
CI_MC_SETS = 20_000             # Monte Carlo CI beyond those: this many + the identity
CI_MC_PATTERNS = CI_MC_SETS
_CHUNK = 1 << 20                # bound on temporary array sizes (memory stays O(1 MiB) x 8)


def _random_flips(rng: np.random.Generator, rows: int, n: int) -> np.ndarray:
    """(rows, n) bool: True where the sign of that seed is flipped."""
    return rng.integers(0, 2, size=(rows, n), dtype=np.int8).astype(bool)


def _flat(vals):
    sizes = np.array([v.size for v in vals])
    return sizes, np.concatenate(([0], np.cumsum(sizes)[:-1])), np.concatenate(vals)



def _bounds(thr_low: np.ndarray, thr_high: np.ndarray, alternative: str, level: float):
    """Order statistics of the thresholds at the tail ``1 - level`` (halved two-sided)."""
    total = thr_low.size
    tail = (1.0 - level) / (2.0 if alternative == "two-sided" else 1.0)
    k = int(math.floor(tail * total + 1e-9))
    low, high = -math.inf, math.inf
    if alternative in ("greater", "two-sided") and k > 0:
        low = float(np.partition(thr_low, k)[k])
    if alternative in ("less", "two-sided") and k > 0:
        j = total - 1 - k
        high = float(np.partition(thr_high, j)[j])
    return low, high


def _subset_means(d: np.ndarray, rng, n_patterns: int = CI_MC_PATTERNS):
    """(L,) sums of d over flipped subsets, (L,) their sizes and how they were chosen: all
    2^n up to :data:`EXACT_CI_MAX_N` seeds, else the identity and ``n_patterns`` random ones."""
    if d.size <= EXACT_CI_MAX_N:
        sums, sizes = np.zeros(1), np.zeros(1, dtype=np.int64)
        for v in d:
            sums = np.concatenate((sums, sums + v))
            sizes = np.concatenate((sizes, sizes + 1))
        return sums, sizes, f"exact: all 2^{d.size} sign patterns"
    sums, sizes = [np.zeros(1)], [np.zeros(1, dtype=np.int64)]
    rows = max(1, _CHUNK // d.size)
    done = 0
    while done < n_patterns:
        c = min(rows, n_patterns - done)
        flips = _random_flips(rng, c, d.size)
        sums.append(flips @ d)
        sizes.append(flips.sum(axis=1))
        done += c
    return (np.concatenate(sums), np.concatenate(sizes),
            f"Monte Carlo: {n_patterns} random sign patterns + identity")


def sign_flip_ci(d, alternative, level, rng):
    """Shifting d by delta, the one-sided p is the share of flipped sets S with
    mean(d_S) <= delta (the empty set always counts): the thresholds are subset means."""
    sums, sizes, how = _subset_means(d, rng)
    empty = sizes == 0
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / np.where(empty, 1, sizes)
    low, high = _bounds(np.where(empty, -np.inf, means), np.where(empty, np.inf, means),
                        alternative, level)
    side = {"greater": "one-sided lower bound", "less": "one-sided upper bound",
            "two-sided": "two-sided equal-tailed"}[alternative]
    return low, high, f"inversion of the sign-flip test ({side}; {how})"


def _label_sets(sizes: np.ndarray, rng, total: float):
    """(L, n) label sets for the CI: all of them if few, else the identity + random ones."""
    if total <= EXACT_CI_MAX:
        grids = np.meshgrid(*[np.arange(s) for s in sizes], indexing="ij")
        return np.column_stack([g.reshape(-1) for g in grids]), True
    labels = np.vstack((np.zeros((1, sizes.size), dtype=np.int64),
                        random_labels(rng, CI_MC_SETS, sizes)))
    return labels, False


def permutation_ci(vals, m, alternative, level, rng):
    sizes, offsets, flat = _flat(vals)
    n = sizes.size
    labels, exact = _label_sets(sizes, rng, float(np.prod(sizes.astype(float))))
    t = flat[offsets].sum() / n                                    # observed statistic
    t_l = flat[labels + offsets].sum(axis=1) / n
    c = np.where(labels == 0, -1.0, 1.0 / m[None, :]).mean(axis=1)
    slope = 1.0 + c                                                # >= 0; 0 only for identity
    # p_greater(delta) = share of L with delta >= thr_L; the identity always counts
    with np.errstate(divide="ignore", invalid="ignore"):
        thr_low = np.where(slope > 1e-12, (t - t_l) / slope, -np.inf)
        thr_high = np.where(slope > 1e-12, (t - t_l) / slope, np.inf)
    low, high = _bounds(thr_low, thr_high, alternative, level)
    how = (f"all {thr_low.size} label sets" if exact else
           f"Monte Carlo: {CI_MC_SETS} random label sets + identity")
    return low, high, f"inversion of the within-seed permutation test under a shift ({how})"
