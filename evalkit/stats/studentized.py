"""Studentized within-seed permutation test: does the policy beat its draws *on average*?

Same design and relabelling as :mod:`evalkit.stats.randomisation` (seed s: one policy run and
``m_s`` matched-random draws; relabelling run j as the policy gives ``d_s(j)``), but the
statistic is ``t = mean(d) / se(d)``, ``se = sd(d) / sqrt(n)``, recomputed for every label set.

Why: the raw mean tests "the policy run is exchangeable with its draws".  When the policy's
run-to-run spread differs from a draw's (a fixed schedule varies less than a random one) the
raw test is no longer a test of equal means: conservative when the policy varies less,
anti-conservative when it varies more.  Studentizing keeps the exact level under
exchangeability and makes the test asymptotically valid for equal means with unequal
spreads (Janssen 1997; Chung & Romano 2013).

Exactness: ``t`` is not additive over seeds, so meet-in-the-middle does not apply; label sets
are enumerated in chunks up to :data:`MAX_EXACT_SETS`, Monte Carlo ``(k + 1) / (B + 1)`` beyond.
With one draw per seed every relabelling is a sign flip, which keeps ``sum d^2``; then ``t`` is
an increasing function of ``mean(d)`` and the test *is* the sign-flip test (same p, same CI,
exact by meet-in-the-middle) -- the engine uses the raw statistic there.

CI: inversion under an additive shift (policy V + delta exchangeable with its draws, the same
delta in every seed); ``p(delta)`` is evaluated on one fixed family of label sets and its
crossing of the tail found by bisection.
"""

from __future__ import annotations

import math

import numpy as np

from evalkit.stats._result import DEFAULT_RTOL

__all__ = ["EXACT_CI_MAX", "MAX_EXACT_SETS", "enumerable", "exact_counts", "inversion_ci",
           "mc_counts", "min_attainable_p", "null_t", "random_labels", "t_from_sums", "t_statistic"]

MAX_EXACT_SETS = 1 << 22        # label sets enumerated exactly (about 1 s at n = 10)
EXACT_CI_MAX = 1 << 15          # CI from every label set up to here, Monte Carlo beyond
CI_MC_SETS = 4_000
_CHUNK = 1 << 20                # label-set elements per chunk: memory stays bounded
_BISECT_STEPS = 44


def t_from_sums(s: np.ndarray, q: np.ndarray, n: int) -> np.ndarray:
    """t = mean/se from (k,) sums S and sums of squares Q of n values.

    se = 0 (every d equal): +inf / -inf by the sign of the mean, 0 when the mean is 0.
    """
    s = np.asarray(s, dtype=float)
    q = np.asarray(q, dtype=float)
    var = (q - s * s / n) / (n - 1)
    degenerate = var <= 1e-12 * np.maximum(q / n, 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (s / n) / np.sqrt(np.where(degenerate, 1.0, var) / n)
    inf = np.where(s > 0, np.inf, np.where(s < 0, -np.inf, 0.0))
    return np.where(degenerate, inf, t)


def t_statistic(d) -> float:
    """mean/se of (n,) d (the observed statistic)."""
    d = np.asarray(d, dtype=float)
    return float(t_from_sums(d.sum(), (d * d).sum(), d.size))


def enumerable(m) -> bool:
    """Whether a design with (n,) draws per seed is enumerated exactly."""
    sizes = np.asarray(m, dtype=float).reshape(-1) + 1.0
    return float(np.prod(sizes)) <= MAX_EXACT_SETS


def _design(vals):
    sizes = np.array([v.size for v in vals], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    return sizes, offsets, np.concatenate(vals)


def _labels_of(index: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """(k,) mixed-radix indices -> (k, n) label sets (index 0 = the observed labelling)."""
    out = np.empty((index.size, sizes.size), dtype=np.int64)
    rest = index.copy()
    for s in range(sizes.size - 1, -1, -1):
        out[:, s] = rest % sizes[s]
        rest //= sizes[s]
    return out


def random_labels(rng, rows: int, sizes: np.ndarray) -> np.ndarray:
    """(rows, n) int: a uniformly random label per seed."""
    return np.floor(rng.random((rows, sizes.size)) * sizes).astype(np.int64)


def _tail_counts(t_l: np.ndarray, t_obs: float) -> tuple[int, int]:
    tol = DEFAULT_RTOL * max(1.0, abs(t_obs)) if math.isfinite(t_obs) else 0.0
    return (int(np.count_nonzero(t_l >= t_obs - tol)),
            int(np.count_nonzero(t_l <= t_obs + tol)))


def _t_rows(flat, offsets, labels, n):
    x = flat[labels + offsets]
    return t_from_sums(x.sum(axis=1), (x * x).sum(axis=1), n)


def exact_counts(vals) -> tuple[int, int, int]:
    """Counts of label sets with t >= and <= the observed t over *every* label set.

    vals: n arrays (m_s + 1,) of d_s(j).  Returns (n_ge, n_le, total).
    """
    sizes, offsets, flat = _design(vals)
    n = sizes.size
    total = int(np.prod(sizes))
    t_obs = float(_t_rows(flat, offsets, np.zeros((1, n), dtype=np.int64), n)[0])
    rows = max(1, _CHUNK // n)
    n_ge = n_le = 0
    for start in range(0, total, rows):
        idx = np.arange(start, min(total, start + rows), dtype=np.int64)
        t_l = _t_rows(flat, offsets, _labels_of(idx, sizes), n)
        g, le = _tail_counts(t_l, t_obs)
        n_ge += g
        n_le += le
    return n_ge, n_le, total


def null_t(vals, max_points: int, seed: int) -> np.ndarray:
    """Sorted t of every label set (when there are <= ``max_points``) or of ``max_points``
    random ones drawn with ``seed``: the null distribution the test compares t with."""
    sizes, offsets, flat = _design(vals)
    total = float(np.prod(sizes.astype(float)))
    if total <= max_points:
        labels = _labels_of(np.arange(int(total), dtype=np.int64), sizes)
    else:
        labels = random_labels(np.random.default_rng(seed), int(max_points), sizes)
    return np.sort(_t_rows(flat, offsets, labels, sizes.size))


def mc_counts(vals, b: int, rng) -> tuple[int, int]:
    """Counts of B random label sets (uniform per seed) with t >= / <= the observed t."""
    sizes, offsets, flat = _design(vals)
    n = sizes.size
    t_obs = float(_t_rows(flat, offsets, np.zeros((1, n), dtype=np.int64), n)[0])
    rows = max(1, _CHUNK // n)
    n_ge = n_le = done = 0
    while done < b:
        c = min(rows, b - done)
        g, le = _tail_counts(_t_rows(flat, offsets, random_labels(rng, c, sizes), n), t_obs)
        n_ge += g
        n_le += le
        done += c
    return n_ge, n_le


def min_attainable_p(vals, alternative: str, n_resamples: int | None = None) -> float:
    """Smallest p the studentized test can return on these data.

    A seed's labels that carry equal d_s(j) give equal t, so a label set is at least as
    extreme as ``prod_s (fewest tied labels of seed s)`` others: a seed whose runs all tie
    contributes factor 1.  (The design's limit ``prod 1/(m_s + 1)`` is the untied case.)
    """
    logp = 0.0
    for v in vals:
        v = np.asarray(v, dtype=float)
        tol = DEFAULT_RTOL * max(1.0, float(np.max(np.abs(v))))
        ties = np.abs(v[:, None] - v[None, :]) <= tol
        logp += math.log(ties.sum(axis=1).min() / v.size)
    p = math.exp(logp)
    p = 2.0 * p if alternative == "two-sided" else p
    if n_resamples is not None:
        p = max(p, (2.0 if alternative == "two-sided" else 1.0) / (int(n_resamples) + 1))
    return min(1.0, p)


def _ci_family(sizes, rng):
    """(L, n) label sets for the CI: all if few, else the identity and random ones."""
    total = float(np.prod(sizes.astype(float)))
    if total <= EXACT_CI_MAX:
        return _labels_of(np.arange(int(total), dtype=np.int64), sizes), True
    return np.vstack((np.zeros((1, sizes.size), dtype=np.int64),
                      random_labels(rng, CI_MC_SETS, sizes))), False


def inversion_ci(vals, m, alternative: str, level: float, rng):
    """CI for delta under "policy V + delta is exchangeable with the seed's draws".

    Under that shift label j of seed s moves d_s(j) by ``delta * c_sj``, ``c_s0 = -1``,
    ``c_sj = 1/m_s`` (j >= 1).  The one-sided p-values are step functions of delta on a
    fixed family of label sets; each bound is their crossing of the tail, by bisection.
    Returns (low, high, how).
    """
    sizes, offsets, flat = _design(vals)
    n = sizes.size
    labels, exact = _ci_family(sizes, rng)
    a = flat[labels + offsets]                                   # (L, n) d at delta = 0
    c = np.where(labels == 0, -1.0, 1.0 / np.asarray(m, dtype=float)[None, :])
    total = labels.shape[0]
    tail = (1.0 - level) / (2.0 if alternative == "two-sided" else 1.0)
    k = int(math.floor(tail * total + 1e-9))
    d_obs = a[0]
    est = float(d_obs.mean())
    scale = max(float(np.std(flat)), abs(est), 1e-12)

    # sums and sums of squares of a + delta c are quadratics in delta: O(L) per delta
    s0, cs = a.sum(axis=1), c.sum(axis=1)
    q0, qc, cc = (a * a).sum(axis=1), 2.0 * (a * c).sum(axis=1), (c * c).sum(axis=1)

    def p_side(delta, upper):
        t_l = t_from_sums(s0 + delta * cs, q0 + delta * (qc + delta * cc), n)
        g, le = _tail_counts(t_l[1:], float(t_l[0]))
        return ((le if upper else g) + 1) / total

    def bound(upper):
        if k == 0:
            return math.inf if upper else -math.inf
        inside = est                                            # p there is about 1/2
        step = scale
        outside = est + step if upper else est - step
        for _ in range(60):
            if p_side(outside, upper) <= tail:
                break
            step *= 2.0
            outside = est + step if upper else est - step
        else:
            return math.inf if upper else -math.inf
        for _ in range(_BISECT_STEPS):
            mid = 0.5 * (inside + outside)
            if p_side(mid, upper) > tail:
                inside = mid
            else:
                outside = mid
        return float(inside)

    low = bound(False) if alternative in ("greater", "two-sided") else -math.inf
    high = bound(True) if alternative in ("less", "two-sided") else math.inf
    side = {"greater": "one-sided lower bound", "less": "one-sided upper bound",
            "two-sided": "two-sided equal-tailed"}[alternative]
    how = (f"all {total} label sets" if exact else
           f"Monte Carlo: {CI_MC_SETS} random label sets + identity")
    return low, high, (f"inversion of the studentized within-seed permutation test under an "
                       f"additive shift, bisection ({side}; {how})")
