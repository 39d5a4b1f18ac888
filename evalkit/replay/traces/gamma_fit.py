"""Gamma-shape maximum likelihood for inter-arrival gaps, quantised timestamps included.

A trace whose timestamps are rounded down to a grid of ``q`` seconds (whole milliseconds,
3 s buckets, ...) has many zero gaps and positive gaps that are multiples of ``q``.  Fitting
a gamma density to the positive gaps alone then measures the grid, not the arrivals: the
gaps are (nearly) all equal and the shape estimate runs off to 10^7.  For such traces the
likelihood of each observed gap ``k·q`` is the probability that a gamma gap lands in
bucket ``k`` once both of its ends are floored to the grid.  With the phase of the first end
uniform within its bucket that is

    P(k) = ∫ f(g) · max(0, 1 − |g/q − k|) dg                       (triangular kernel)
         = [G((k+1)q) − 2 G(kq) + G((k−1)q)] / q,     G(x) = ∫₀ˣ F(u) du,  G(x<0) = 0,

with ``G(x) = x F_a(x) − a s F_{a+1}(x)`` for a gamma(a, scale s) cdf ``F``.  In the right
tail the same second difference is taken of ``H(x) = a s S_{a+1}(x) − x S_a(x)`` (survival
functions; ``G`` and ``H`` differ by a linear function, which second differences cancel) to
keep precision.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

GRID_FRACTION = 0.9           # share of positive gaps on the grid that makes it "quantised"
GRID_TOLERANCE = 0.01         # |gap/q - round(gap/q)| below this counts as on the grid
MAX_ZERO_SHARE_UNGRIDDED = 0.01
MAX_SE_LOG_SHAPE = 0.25       # above: the quantised likelihood cannot pin the shape down


@dataclass(frozen=True)
class GammaShapeFit:
    shape: float | None
    scale: float | None
    method: str | None          # "exact" | "quantised" | "positive gaps only" | None
    note: str | None = None
    resolution_s: float | None = None


def _log_bucket_probs(k: np.ndarray, q: float, a: float, s: float) -> np.ndarray:
    """log P(observed gap = k·q) under gamma(a, scale s), triangular kernel (see module)."""
    from scipy import special

    def G(x):                                   # ∫₀ˣ F, accurate where F is not close to 1
        x = np.maximum(x, 0.0)
        return x * special.gammainc(a, x / s) - a * s * special.gammainc(a + 1, x / s)

    def H(x):                                   # ∫ₓ^∞ S, accurate in the right tail
        return a * s * special.gammaincc(a + 1, x / s) - x * special.gammaincc(a, x / s)

    lo, mid, hi = (k - 1) * q, k * q, (k + 1) * q
    left = (G(hi) - 2 * G(mid) + G(lo)) / q
    right = (H(hi) - 2 * H(mid) + H(np.maximum(lo, 0.0))) / q
    # k = 0 has no left neighbour: P = G(q)/q, which the H form does not give.
    p = np.where((mid < a * s) | (k == 0), left, right)
    return np.log(np.maximum(p, 1e-300))


def _fit_quantised(gaps: np.ndarray, q: float) -> tuple[float, float, float]:
    """(shape, scale, standard error of log shape) from the quantised-gap likelihood."""
    from scipy import optimize

    k, counts = np.unique(np.rint(gaps / q).astype(np.int64), return_counts=True)
    mean = max(float(gaps.mean()), q / 4)
    var = max(float(gaps.var(ddof=1)), q * q / 12)

    def nll(theta):
        a, s = np.exp(theta)
        return -float(np.sum(counts * _log_bucket_probs(k, q, a, s)))

    a0 = mean ** 2 / var
    start = np.log([a0, mean / a0])
    res = optimize.minimize(nll, start, method="Nelder-Mead",
                            options={"xatol": 1e-7, "fatol": 1e-9, "maxiter": 4000})
    return float(np.exp(res.x[0])), float(np.exp(res.x[1])), _se_log_shape(nll, res.x)


def _se_log_shape(nll, theta: np.ndarray, h: float = 1e-3) -> float:
    """Standard error of log shape from the observed information (finite differences);
    inf where the likelihood is flat along the shape (the data cannot pin it down)."""
    e = np.eye(2) * h
    hess = np.empty((2, 2))
    for i in range(2):
        for j in range(2):
            hess[i, j] = (nll(theta + e[i] + e[j]) - nll(theta + e[i] - e[j])
                          - nll(theta - e[i] + e[j]) + nll(theta - e[i] - e[j])) / (4 * h * h)
    try:
        cov = np.linalg.inv(hess)
    except np.linalg.LinAlgError:
        return float("inf")
    return float(np.sqrt(cov[0, 0])) if cov[0, 0] > 0 else float("inf")


def gamma_shape_mle(gaps) -> GammaShapeFit:
    """Shape (and scale) MLE of a gamma model for ``gaps`` (s, shape (n,)).

    - no zero gaps, not all equal: the ordinary MLE over the gaps (``method="exact"``);
    - zero gaps and positive gaps on a grid of the smallest positive gap ``q``: the
      quantised-timestamp likelihood above (``method="quantised"``);
    - a few zero gaps (≤ 1 %) off any grid: the MLE over the positive gaps, with a note;
    - otherwise ``shape=None`` with a note: all gaps equal (shape unbounded), or many
      simultaneous arrivals in an unquantised trace (not a gamma renewal process).
    """
    gaps = np.asarray(gaps, dtype=np.float64)
    gaps = gaps[np.isfinite(gaps)]
    if len(gaps) < 2 or np.any(gaps < 0):
        return GammaShapeFit(None, None, None, "needs at least 2 non-negative gaps")
    pos = gaps[gaps > 0]
    n_zero = int(len(gaps) - len(pos))
    if len(pos) < 2:
        return GammaShapeFit(None, None, None, "fewer than 2 positive gaps")
    if np.ptp(pos) <= 1e-9 * pos.mean() and n_zero == 0:
        return GammaShapeFit(None, None, None,
                             "all gaps are equal: the shape is unbounded (periodic arrivals)")
    if n_zero == 0:
        from scipy import stats  # slow to import; only needed here
        a, _, s = stats.gamma.fit(pos, floc=0)
        return GammaShapeFit(float(a), float(s), "exact")
    q = float(pos.min())
    m = pos / q
    on_grid = float(np.mean(np.abs(m - np.rint(m)) < GRID_TOLERANCE))
    if on_grid >= GRID_FRACTION:
        a, s, se = _fit_quantised(gaps, q)
        if not se <= MAX_SE_LOG_SHAPE:
            return GammaShapeFit(None, None, None,
                                 f"timestamps quantised to {q:.6g} s, too coarse for the mean "
                                 f"gap {gaps.mean():.3g} s: the shape is not identifiable "
                                 f"(standard error of log shape {se:.2g}); see CV²",
                                 resolution_s=q)
        return GammaShapeFit(a, s, "quantised",
                             f"{n_zero} zero gaps: timestamps quantised to {q:.6g} s; "
                             "likelihood of the floored gaps", resolution_s=q)
    if n_zero <= MAX_ZERO_SHARE_UNGRIDDED * len(gaps) and np.ptp(pos) > 1e-9 * pos.mean():
        from scipy import stats
        a, _, s = stats.gamma.fit(pos, floc=0)
        return GammaShapeFit(float(a), float(s), "positive gaps only",
                             f"{n_zero} zero gaps left out")
    return GammaShapeFit(None, None, None,
                         f"{n_zero} of {len(gaps)} gaps are zero and the timestamps are on no "
                         "grid: simultaneous arrivals, not a gamma renewal process; see CV²")
