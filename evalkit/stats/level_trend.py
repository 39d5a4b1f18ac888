"""The ``level_trend`` diagnostic: does the policy's V, relative to its draws', rise with the
seed's level?

A campaign's seeds often span loads, so their draws' mean V (the seed's level) spreads. A
policy that helps in light seeds and hurts in heavy ones can match the draws' mean V over all
seeds and still win most of them: its mean rests on the few heavy seeds a campaign happens to
hold. Every mean test reads that tail from the seeds it has, and a sample short of heavy seeds
looks like a gain. Equal means, a policy whose V grows as the seed level to the power 1.5, 40
seeds of 3 draws: the gate passed 0.080 of campaigns at a seed log-spread of 0.6 and 0.241 at
1.0 (the t-test 0.110 and 0.282; ``tools/LEVEL_TREND_STUDY.md``). No test of the mean can
tell this from a real gain at such n, so the verdict states it when the seeds show the trend:
flagged in 0.881 and 1.000 of those campaigns, and in at most 0.005 of the study's designs
without a trend.

The diagnostic regresses ``y_s = log(P_s + c) - x_s`` (the policy's log ratio to its seed's
draws) on ``x_s = mean_j log(D_sj + c)`` (the seed's level: its draws' mean log) by least
squares, ``c`` the floored test's :data:`~evalkit.stats.floored.LOG_OFFSET` x the draws' mean
V (a V of 0 stays finite). The level is a mean of single runs' logs, so the policy's one run
is compared with runs like it: a light seed's policy run at 0 meets draws at 0 as often,
where the log of the draws' mean V rarely is (on that scale exchangeable binomial V, 100
requests a run, 5 draws, seed log-spread 1, 10 or 20 seeds, was flagged in 0.11-0.12 of
campaigns, 0.16 at 8 draws; on this one 0.03-0.04). A run's log noise that widens or
narrows with the level moves the mean log of the draws against a fixed schedule's run (log
sd 0.3 to 0.9 across a seed log-spread of 1, 40 seeds: a fixed schedule flagged in 0.049
of campaigns where the noise widens with the level, 0.000 where it narrows; one more draw
0.006 and 0.005). ``flagged`` when the slope is positive with one-sided p <= alpha (t with
n - 2 degrees of freedom). ``x`` carries each seed's draw noise, which enters ``y`` with the
opposite sign, so under no trend the slope leans negative: the flag errs towards silence.
Beside the slope it reports the gain relative to the draws' V (``sum(Dbar - P) / sum(Dbar)``)
over the heaviest and the lightest quarter of seeds (at least 2 each) by ``Dbar``.  Its words:
:func:`evalkit.document.words.level_trend_text`.  The audit computes it on a claim's seeds, the
sequential gate on the seeds its decision used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from evalkit.stats.floored import LOG_OFFSET

__all__ = ["LevelTrend", "level_trend", "level_trend_applies"]

MIN_SEEDS = 4            # a slope and its standard error need n - 2 >= 2 degrees of freedom


@dataclass(frozen=True)
class LevelTrend:
    """The diagnostic's numbers (``slope``, ``se``, ``p_value`` None where it cannot run: fewer
    than :data:`MIN_SEEDS` seeds, or every seed at one level)."""

    n: int
    slope: float | None        # d log(P / Dbar) per unit of log Dbar
    se: float | None
    p_value: float | None      # one-sided, slope > 0
    quarter: int               # seeds in the heaviest (and in the lightest) quarter, >= 2
    heavy_gain: float | None   # sum(Dbar - P) / sum(Dbar) over the heaviest quarter
    light_gain: float | None   # the same over the lightest quarter
    alpha: float
    flagged: bool

    def to_dict(self) -> dict:
        return {"name": "level_trend", "n": self.n, "slope": self.slope, "se": self.se,
                "p_value": self.p_value, "quarter": self.quarter,
                "heavy_gain": self.heavy_gain, "light_gain": self.light_gain, "alpha": self.alpha,
                "flagged": self.flagged}


def _relative_gain(dbar, pol) -> float | None:
    total = float(np.sum(dbar))
    return float(np.sum(dbar - pol)) / total if total > 0 else None


def level_trend_applies(policy) -> bool:
    """Whether :func:`level_trend` can run: 2 paired seeds or more.  The audit and the
    sequential gate both ask here."""
    return np.size(policy) >= 2


def level_trend(policy, draws, alpha: float) -> LevelTrend:
    """The diagnostic for n seeds: ``policy`` (n,) V of each seed's policy run, ``draws`` n
    arrays of that seed's draws' V."""
    pol = np.asarray(policy, dtype=float).reshape(-1)
    dbar = np.array([float(np.mean(d)) for d in draws])
    n = int(pol.size)
    quarter = min(n, max(2, math.ceil(n / 4)))
    order = np.argsort(dbar, kind="stable")
    heavy = _relative_gain(dbar[order[-quarter:]], pol[order[-quarter:]])
    light = _relative_gain(dbar[order[:quarter]], pol[order[:quarter]])
    every = np.concatenate([np.asarray(d, dtype=float).reshape(-1) for d in draws])
    offset = LOG_OFFSET * float(np.mean(every))
    none = LevelTrend(n, None, None, None, quarter, heavy, light, float(alpha), False)
    if n < MIN_SEEDS or not offset > 0.0:
        return none
    x = np.array([float(np.mean(np.log(np.asarray(d, dtype=float) + offset))) for d in draws])
    y = np.log(pol + offset) - x
    xc = x - x.mean()
    sxx = float(xc @ xc)
    if sxx <= 1e-12 * max(1.0, float(x @ x)):
        return none
    slope = float(xc @ (y - y.mean())) / sxx
    resid = y - y.mean() - slope * xc
    s2 = float(resid @ resid) / (n - 2)
    se = math.sqrt(s2 / sxx)
    if se > 0.0:
        p = float(sps.t.sf(slope / se, n - 2))
    else:
        p = 0.0 if slope > 0 else 1.0
    return LevelTrend(n, slope, se, p, quarter, heavy, light, float(alpha),
                      slope > 0 and p <= alpha)
