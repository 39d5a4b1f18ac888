"""Seed bootstrap confidence intervals and Holm correction across claims."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import special

from evalkit.errors import InputError
from evalkit.stats._result import ResultMixin, as_finite_1d, as_generator, check_level

__all__ = ["BootstrapResult", "bootstrap_ci", "holm", "percentile_t_ci"]

_CHUNK_ELEMENTS = 1 << 21


@dataclass(frozen=True)
class BootstrapResult(ResultMixin):
    """Bootstrap CI of ``statistic`` over seeds (the seed is the resampling unit).

    ``method``: ``"BCa"`` (bias-corrected and accelerated, jackknife acceleration) or
    ``"percentile"``.  ``degenerate`` is True when every resample gave the same value (the CI
    is then that single value and ``note`` says so).
    """

    statistic: float
    ci_low: float
    ci_high: float
    confidence_level: float
    method: str
    n: int
    n_resamples: int
    standard_error: float
    degenerate: bool
    note: str
    _distribution: np.ndarray = field(repr=False, default=None)

    @property
    def bootstrap_distribution(self) -> np.ndarray:
        return self._distribution.copy()


def _check_ci_args(confidence_level: float, n_resamples) -> None:
    """The bootstrap CIs' shared input checks (a level in (0, 1), at least 100 resamples)."""
    check_level(confidence_level)
    if int(n_resamples) < 100:
        raise InputError(f"n_resamples = {n_resamples} is too few for a CI",
                         column="n_resamples", fix="use at least 1000")


def _apply(statistic, samples: np.ndarray) -> np.ndarray:
    """statistic over the last axis of (m, n) samples -> (m,); vectorised when supported."""
    try:
        out = np.asarray(statistic(samples, axis=-1), dtype=float)
        if out.shape == samples.shape[:-1]:
            return out
    except TypeError:
        pass
    return np.array([float(statistic(row)) for row in samples])


def bootstrap_ci(x, statistic=np.mean, n_resamples: int = 10_000,
                 confidence_level: float = 0.95, rng=None,
                 method: str = "BCa") -> BootstrapResult:
    """Two-sided bootstrap CI for ``statistic(x)``, resampling seeds with replacement.

    x: (n,) one value per seed of one condition (for a paired comparison pass the per-seed
      differences), n >= 2.  statistic: callable on a 1-D array (``axis=-1`` used if accepted).
    rng: one explicit numpy Generator (or int seed; None -> seed 0).
    method: "BCa" or "percentile".  Resamples are drawn in chunks (bounded memory).
    """
    x = as_finite_1d(x, "x", min_size=2, what="per-seed values (seeds)")
    if method not in ("BCa", "percentile"):
        raise InputError(f"unknown bootstrap method {method!r}", column="method",
                         fix="use 'BCa' or 'percentile'")
    _check_ci_args(confidence_level, n_resamples)
    gen = as_generator(rng)
    n, b = x.size, int(n_resamples)
    theta = float(statistic(x))
    dist = np.empty(b)
    rows = max(1, _CHUNK_ELEMENTS // n)
    for i in range(0, b, rows):
        c = min(rows, b - i)
        dist[i:i + c] = _apply(statistic, x[gen.integers(0, n, size=(c, n))])
    alpha = 1.0 - confidence_level
    probs = np.array([alpha / 2, 1 - alpha / 2])
    se = float(np.std(dist, ddof=1))
    if np.ptp(dist) == 0:
        return BootstrapResult(theta, float(dist[0]), float(dist[0]), confidence_level, method,
                               n, b, se, True, "every resample gave the same value", dist)
    note = ""
    if method == "BCa":
        # bias correction z0 and jackknife acceleration a (Efron 1987)
        below = (np.count_nonzero(dist < theta) + 0.5 * np.count_nonzero(dist == theta)) / b
        z0 = special.ndtri(below)
        jack = _apply(statistic, np.array([np.delete(x, i) for i in range(n)]))
        dev = jack.mean() - jack
        denom = 6.0 * (np.sum(dev ** 2)) ** 1.5
        accel = float(np.sum(dev ** 3) / denom) if denom > 0 else 0.0
        if not math.isfinite(z0):
            probs_adj = probs
            note = "BCa bias correction undefined (all resamples on one side); percentile used"
        else:
            z = special.ndtri(probs)
            probs_adj = special.ndtr(z0 + (z0 + z) / (1 - accel * (z0 + z)))
    else:
        probs_adj = probs
    low, high = np.quantile(dist, probs_adj)
    return BootstrapResult(theta, float(low), float(high), confidence_level, method, n, b, se,
                           False, note, dist)


@dataclass(frozen=True)
class PercentileTResult(ResultMixin):
    """Studentized (percentile-t) bootstrap CI of a mean over seeds: the quantiles of
    ``t* = (mean* - mean) / se*`` over resamples set the interval
    ``[mean - q_hi se, mean - q_lo se]``; second-order accurate where the percentile and BCa
    intervals of a small skewed sample are not."""

    statistic: float
    ci_low: float
    ci_high: float
    confidence_level: float
    n: int
    n_resamples: int
    standard_error: float
    degenerate: bool
    method: str = "percentile-t (studentized) bootstrap over seeds"


def percentile_t_ci(x, n_resamples: int = 2000, confidence_level: float = 0.95,
                    rng=None) -> PercentileTResult:
    """Two-sided percentile-t bootstrap CI of mean(x); x: (n,) one value per seed, n >= 2.

    A resample whose values are all equal has se* = 0: its t* is +-inf (or 0 when its mean
    is the sample's), which widens the interval rather than being dropped.
    """
    x = as_finite_1d(x, "x", min_size=2, what="per-seed values (seeds)")
    _check_ci_args(confidence_level, n_resamples)
    gen = as_generator(rng)
    n, b = x.size, int(n_resamples)
    mean = float(x.mean())
    se = float(x.std(ddof=1) / math.sqrt(n))
    if se == 0.0:
        return PercentileTResult(mean, mean, mean, confidence_level, n, b, 0.0, True)
    t = np.empty(b)
    rows = max(1, _CHUNK_ELEMENTS // n)
    for i in range(0, b, rows):
        c = min(rows, b - i)
        s = x[gen.integers(0, n, size=(c, n))]
        m = s.mean(axis=1)
        se_b = s.std(axis=1, ddof=1) / math.sqrt(n)
        diff = m - mean
        with np.errstate(divide="ignore", invalid="ignore"):
            t[i:i + c] = np.where(se_b > 1e-12 * se, diff / np.where(se_b > 0, se_b, 1.0),
                                  np.where(diff > 0, np.inf, np.where(diff < 0, -np.inf, 0.0)))
    alpha = 1.0 - confidence_level
    q_lo, q_hi = np.quantile(t, [alpha / 2, 1 - alpha / 2], method="inverted_cdf")
    return PercentileTResult(mean, float(mean - q_hi * se), float(mean - q_lo * se),
                             confidence_level, n, b, se, False)


def holm(p_values, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Holm step-down correction across several claims (statsmodels ``multipletests``).

    p_values: (m,) -> (reject (m,) bool at family-wise level alpha, adjusted p (m,)).
    """
    p = as_finite_1d(p_values, "p_values", what="p-values")
    if np.any((p < 0) | (p > 1)):
        raise InputError("p-values must lie in [0, 1]", column="p_values",
                         fix="pass raw p-values, one per claim")
    from statsmodels.stats.multitest import multipletests   # heavy (scipy.stats): on use

    reject, adjusted, _, _ = multipletests(p, alpha=alpha, method="holm")
    return np.asarray(reject, dtype=bool), np.asarray(adjusted, dtype=float)
