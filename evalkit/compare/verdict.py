"""The verdict on one metric: better, equivalent within +-margin, not yet known, or worse.

Paired runs give one difference per pair, oriented so that positive is better (``d = A - B``
for a metric where lower is better, ``B - A`` where higher is).  The tests are those of the
gate, on the seed level (:func:`evalkit.stats.paired.paired_mean_test`):

- superiority: two-sided, Holm-adjusted over the compared metrics; significant -> **better**
  (mean d > 0) or **worse** (mean d < 0) -- a direction is printed only from this test;
- equivalence: two one-sided tests (TOST) of ``mean d > -margin`` and ``mean d < +margin``;
  both rejecting at alpha (Holm over the metrics, on ``max`` of the two p) -> **equivalent**;
- otherwise **not yet known**, with the number of further pairs that would decide at the
  observed spread (:func:`pairs_to_decide`).

Unpaired runs (no key pairs them) use Welch's t-test and TOST on the two samples; the
verdict is marked unpaired.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from evalkit.errors import InputError
from evalkit.stats.paired import paired_mean_test

__all__ = ["BETTER", "EQUIVALENT", "MAX_PAIRS", "MetricTest", "NOT_YET_KNOWN", "VERDICTS",
           "WORSE", "decide", "min_pairs_for", "pairs_to_decide", "analyse_paired",
           "analyse_unpaired"]

BETTER, EQUIVALENT, NOT_YET_KNOWN, WORSE = "better", "equivalent", "not yet known", "worse"
VERDICTS = (BETTER, EQUIVALENT, NOT_YET_KNOWN, WORSE)
MAX_PAIRS = 100_000        # "N more" beyond this is reported as "more than"


@dataclass
class MetricTest:
    """The raw tests of one metric (before the adjustment over metrics).

    ``mean``/``ci``: the oriented mean difference (positive = better) and its two-sided
    ``1 - alpha`` interval; ``p_two_sided``: superiority; ``p_equivalence``: TOST (nan
    without a margin); ``sd``: of the differences (paired) or ``sqrt(sd_a^2 + sd_b^2)``
    (unpaired, the spread of a difference of two single runs)."""

    n: int
    mean: float
    sd: float
    ci: tuple[float, float]
    p_two_sided: float
    p_equivalence: float
    method: str
    exact: bool
    paired: bool


def analyse_paired(d, *, alpha: float, margin: float | None, ci: bool = True) -> MetricTest:
    """Oriented differences ``d`` (n >= 2) -> the superiority and equivalence tests
    (``ci=False``: no interval -- it decides nothing but the regression gate)."""
    d = np.asarray(d, dtype=float)
    two = paired_mean_test(d, "two-sided", confidence=1.0 - alpha if ci else None)
    p_eq = math.nan
    if margin is not None and margin > 0:
        low = paired_mean_test(d, "greater", confidence=None, null_shift=-margin)
        high = paired_mean_test(d, "less", confidence=None, null_shift=margin)
        p_eq = max(low.p_value, high.p_value)
    return MetricTest(n=two.n, mean=two.mean, sd=two.sd, ci=tuple(two.ci),
                      p_two_sided=two.p_value, p_equivalence=p_eq, method=two.method,
                      exact=two.exact, paired=True)


def analyse_unpaired(a, b, *, better: str, alpha: float, margin: float | None) -> MetricTest:
    """Welch's t-test and TOST on independent samples ``a``, ``b`` (each n >= 2)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    sign = 1.0 if better == "higher" else -1.0
    mean = sign * (b.mean() - a.mean())
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    sd = math.sqrt(a.var(ddof=1) + b.var(ddof=1))
    if se == 0:
        df = float(a.size + b.size - 2)
    else:
        df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    tq = float(sps.t.ppf(1 - alpha / 2, df))
    if se == 0:
        p_two = 1.0 if mean == 0 else 0.0
        ci = (mean, mean)
    else:
        p_two = float(2 * sps.t.sf(abs(mean) / se, df))
        ci = (mean - tq * se, mean + tq * se)
    p_eq = math.nan
    if margin is not None and margin > 0:
        if se == 0:
            p_eq = 0.0 if abs(mean) < margin else 1.0
        else:
            p_eq = max(float(sps.t.sf((mean + margin) / se, df)),
                       float(sps.t.cdf((mean - margin) / se, df)))
    return MetricTest(n=int(min(a.size, b.size)), mean=float(mean), sd=sd, ci=ci,
                      p_two_sided=p_two, p_equivalence=p_eq,
                      method="Welch's t-test on independent runs (unpaired)", exact=False,
                      paired=False)


def decide(p_superiority_adj: float, p_equivalence_adj: float, mean: float,
           alpha: float) -> str:
    """The verdict from Holm-adjusted p values: a direction only when significant."""
    if p_superiority_adj <= alpha and mean != 0:
        return BETTER if mean > 0 else WORSE
    if p_equivalence_adj <= alpha:
        return EQUIVALENT
    return NOT_YET_KNOWN


def min_pairs_for(alpha: float) -> int:
    """Fewest pairs whose exact two-sided sign-flip test can reach ``alpha`` (2 * 2^-n)."""
    return max(2, math.ceil(math.log2(2.0 / alpha) - 1e-12))


def _t_sample_size(z_first: float, z_second: float, sd: float, effect: float,
                   first_q: float, second_q: float) -> int:
    """Smallest n with ``(t_{first_q,n-1} + t_{second_q,n-1}) sd / sqrt(n) <= effect``."""
    n = max(2, math.ceil(((z_first + z_second) * sd / effect) ** 2))
    for _ in range(50):
        need = ((sps.t.ppf(first_q, n - 1) + sps.t.ppf(second_q, n - 1)) * sd / effect) ** 2
        nxt = max(2, math.ceil(need))
        if nxt == n:
            break
        n = nxt
        if n > MAX_PAIRS:
            break
    return n


def pairs_to_decide(mean: float, sd: float, *, alpha: float, power: float,
                    margin: float | None) -> int | None:
    """Total pairs at which a comparison with this mean and spread would decide with
    probability ``power``: the smaller of the sample size that detects ``mean`` (two-sided
    test at ``alpha``) and, when ``|mean| < margin``, the one that shows equivalence (TOST);
    never fewer than :func:`min_pairs_for` (the exact test's floor).  None: no decision is
    in reach at this spread (the mean is 0 and there is no margin)."""
    if not (math.isfinite(mean) and math.isfinite(sd)) or alpha <= 0:
        raise InputError("mean and spread must be finite", column="d",
                         fix="compare runs with finite metric values")
    floor = min_pairs_for(alpha)
    candidates = []
    if sd == 0:
        if mean != 0 or (margin is not None and margin > 0):
            return floor
        return None
    if mean != 0:
        candidates.append(_t_sample_size(sps.norm.ppf(1 - alpha / 2), sps.norm.ppf(power), sd,
                                         abs(mean), 1 - alpha / 2, power))
    if margin is not None and abs(mean) < margin:
        tail = 1 - (1 - power) / 2
        candidates.append(_t_sample_size(sps.norm.ppf(1 - alpha), sps.norm.ppf(tail), sd,
                                         margin - abs(mean), 1 - alpha, tail))
    if not candidates:
        return None
    return max(floor, min(candidates))
