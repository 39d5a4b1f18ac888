"""The studentized sign-flip test of the mean of d_s over seeds (is it > 0?).

The test ``evalkit compare`` decides with, and the gates' test before the draws' variance
floor (:mod:`evalkit.stats.floored`, which the gates use now: measured below).

``d_s`` is one difference per independent unit (a seed, or a repetition), oriented so that
positive means "better" (the scheduler: ``d_s = mean(draws_s) - policy_s`` of V).  The test
is the **studentized sign-flip test** on ``d - null_shift``: ``t = mean / se`` recomputed under
every sign vector.  It is exact when the ``d_s - null_shift`` are symmetric about 0 and
asymptotically exact for the mean when they are not (Janssen 1997); the simulation study
(``tools/inference_study.py``) measures its level and power on skewed and bursty V.

Why no separate studentized engine: a sign flip keeps ``sum d^2``, so ``t`` is an increasing
function of ``sum d`` across the 2^n sign vectors (:func:`evalkit.stats.studentized.t_from_sums`
with a fixed sum of squares).  Counting sign vectors with ``t >= t_obs`` is therefore counting
those with ``sum >= sum_obs``: the sign-flip engine of :mod:`evalkit.stats.randomisation`
(exact by meet-in-the-middle for n <= 40, memory bounded by chunks; Monte Carlo
``(k + 1) / (B + 1)`` beyond) computes this test's p, and the inversion of
:mod:`evalkit.stats.inversion` its CI.  ``tests/stats/test_paired.py`` checks both against
brute-force enumeration of the studentized statistic.

Measured (``tools/INFERENCE_STUDY.md``, two-sided 0.05, n <= 20 seeds): the false pass holds
for a fixed-schedule policy (<= 0.018) but not when d is left-skewed by a policy run that is
itself heavy-tailed (an exchangeable policy with bursty V: up to 0.11; twice the draws'
spread: up to 0.17; the paired t, bootstrap-t and Johnson's t do no better), and the lower
tail over-rejects when the draws are skewed and the policy is not (false "worse" up to 0.10):
this test licenses no "worse" direction.  The sample skewness of d does not flag those
campaigns (the study's table by g1), so ``skewness`` is reported, not used as a rule.  What
does: the draws see the tail the policy's few runs miss (:mod:`evalkit.stats.floored`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from evalkit.errors import InputError
from evalkit.stats import studentized as st
from evalkit.stats._result import (DEFAULT_MC_RESAMPLES, DEFAULT_RTOL, ResultMixin,
                                    as_finite_1d, as_generator, check_alternative,
                                    check_n_resamples, check_optional_confidence, check_shift)
from evalkit.stats.inversion import sign_flip_ci
from evalkit.stats.randomisation import MAX_EXACT_N, _exact_counts, _mc_counts, _p_values

__all__ = ["METHOD", "PairedTestResult", "paired_mean_test", "sample_skewness"]

METHOD = "studentized sign-flip test of the mean of d"


@dataclass(frozen=True)
class PairedTestResult(ResultMixin):
    """The seed-level test of ``mean(d) > null_shift`` (or <, or !=).

    ``mean``, ``sd``, ``se`` describe d itself; ``t = (mean - null_shift) / se``.  ``p_value``
    is for ``alternative``; ``p_greater``/``p_less``/``p_two_sided`` are all kept (two-sided =
    ``min(1, 2 min)``).  ``ci``: the ``confidence`` interval of the mean of d by inverting the
    test over shifts, matching the alternative (one-sided bound, the other end infinite, for a
    one-sided test; equal-tailed for two-sided); ``(nan, nan)`` when ``confidence`` is None.
    ``exact``: every sign vector counted; else ``n_resamples`` random ones.  ``min_p``: the
    smallest p these data can reach (seeds with d = null_shift cannot move it).
    ``skewness``: sample skewness g1 of d (nan when every d is equal), the diagnostic the study
    measures the test's small-n level against.
    """

    n: int
    mean: float
    sd: float
    se: float
    t: float
    p_value: float
    ci: tuple
    alternative: str
    exact: bool
    n_resamples: int | None
    skewness: float
    method: str
    null_shift: float
    confidence: float
    p_greater: float
    p_less: float
    p_two_sided: float
    min_p: float
    n_positive: int
    n_negative: int
    ci_method: str


def sample_skewness(d) -> float:
    """g1 = m3 / m2^1.5 of (n,) d (the moment estimator); nan when every d is equal."""
    d = np.asarray(d, dtype=float)
    c = d - d.mean()
    m2 = float(np.mean(c * c))
    if m2 <= 1e-24 * max(1.0, float(np.mean(d * d))):
        return math.nan
    return float(np.mean(c ** 3) / m2 ** 1.5)


def paired_mean_test(d, alternative="greater", *, confidence=0.95, null_shift=0.0,
                     n_resamples=None, rng=None) -> PairedTestResult:
    """Studentized sign-flip test of H0 ``mean(d) = null_shift`` against ``alternative``.

    d: (n,) per-unit differences, n >= 2, all finite; positive = better.
    confidence: level of ``ci`` (None: no interval, for simulation studies).
    null_shift: the mean under H0 (e.g. ``min_effect``: "the gain exceeds the smallest effect
      of interest"); the test flips the signs of ``d - null_shift``.
    n_resamples: None -> exact when n <= 40 (all 2^n sign vectors, meet-in-the-middle), else
      Monte Carlo with 100,000; an int >= 2^n or ``np.inf`` -> exact; a smaller int -> Monte
      Carlo ``(k + 1) / (B + 1)``.
    rng: numpy Generator or int seed for the Monte Carlo parts (None -> seed 0).
    """
    check_alternative(alternative)
    d = as_finite_1d(d, "d", min_size=2, what="per-seed differences (seeds)")
    shift = check_shift(null_shift)
    level = check_optional_confidence(confidence)
    gen = as_generator(rng)
    n = d.size
    x = d - shift
    total = 2.0 ** n
    if n_resamples is None:
        exact = n <= MAX_EXACT_N
    else:
        check_n_resamples(n_resamples)
        exact = n_resamples == np.inf or float(n_resamples) >= total
        if exact and n > MAX_EXACT_N:
            raise InputError(f"exact enumeration asked for n = {n}; exact is limited to "
                             f"n <= {MAX_EXACT_N}", column="n_resamples",
                             fix="pass a finite n_resamples for a Monte Carlo p-value")
    vals = [np.array([v, -v]) for v in x]
    zero = DEFAULT_RTOL * float(np.mean(np.abs(x)))
    s_obs = float(x.sum())
    if exact:
        n_ge, n_le, null_size = _exact_counts(vals, s_obs, zero * n)
        b = None
        how = f"exact over all 2^{n} sign vectors"
    else:
        b = DEFAULT_MC_RESAMPLES if n_resamples is None else int(n_resamples)
        n_ge, n_le = _mc_counts(vals, s_obs, zero * n, b, gen, signs=True)
        null_size = b
        how = f"Monte Carlo, B = {b} sign vectors, p = (k+1)/(B+1)"
    p_greater, p_less, p_two, p_value = _p_values(n_ge, n_le, null_size, exact, alternative)
    n_pos = int(np.count_nonzero(x > zero))
    n_neg = int(np.count_nonzero(x < -zero))
    moved = n_pos + n_neg
    min_p = (2.0 if alternative == "two-sided" else 1.0) * 2.0 ** -moved
    if b is not None:
        min_p = max(min_p, (2.0 if alternative == "two-sided" else 1.0) / (b + 1))
    if level is None:
        lo, hi, ci_method = math.nan, math.nan, "not computed"
    else:
        lo, hi, ci_method = sign_flip_ci(d, alternative, level, gen)
    sd = float(np.std(d, ddof=1))
    return PairedTestResult(
        n=n, mean=float(d.mean()), sd=sd, se=sd / math.sqrt(n), t=st.t_statistic(x),
        p_value=float(p_value), ci=(float(lo), float(hi)), alternative=alternative,
        exact=bool(exact), n_resamples=b, skewness=sample_skewness(d),
        method=f"{METHOD} ({how})", null_shift=shift,
        confidence=math.nan if level is None else level, p_greater=float(p_greater),
        p_less=float(p_less), p_two_sided=float(p_two), min_p=float(min(1.0, min_p)),
        n_positive=n_pos, n_negative=n_neg, ci_method=ci_method)
