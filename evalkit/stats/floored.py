"""The claim's test of the mean gain over seeds, with a variance floor borrowed from the draws.

Both gates print "the policy beats matched random": a claim about the mean of
``d_s = mean(draws_s) - policy_s`` over independent seeds.  A plain mean test (t, sign flip,
bootstrap-t) reads the spread of d from the n policy runs it has.  On skewed or bursty V those
runs often miss the tail a draw shows (a burst in 10% of runs is missed by all 10 policy runs
a third of the time), and then the sample variance is too small exactly where the mean looks
good: an exchangeable policy passes up to 0.11 of equal-mean campaigns at two-sided 0.05
(``tools/INFERENCE_STUDY.md``).  The draws hold n x m runs and see that tail far more often.

The test here is a t-test on ``d - null_shift`` (t with n - 1 degrees of freedom) whose
variance is ``max(s2_d, floor)`` with

    floor = s2_draw * (mean(1/m_s) + r * max(K, 1))          (policy_law "draw": fixed gate)

* ``s2_draw``: a draw's variance about its seed's draw mean, pooled over the seeds with >= 2
  draws (their tail included);
* ``r``: the policy's level relative to the draws', squared: ``exp(2 u)`` with u an upper
  confidence bound (one-sided :data:`LEVEL_CONFIDENCE`) of the mean log ratio of each policy
  run to its seed's median draw, capped at 1 (the null's boundary: equal means).  Medians
  barely move when a burst is missed, so a lucky policy keeps ``r`` near 1, while a policy
  five times below its draws frees most of the floor;
* ``K``: the policy's log spread relative to a draw's, ``(var(log P_s - mean log D_s) -
  var(mean log D_s)) / sigma^2`` (median-unbiased chi-square scaling), ``sigma`` a draw's
  robust log spread (IQR / 1.349: bursts barely move it), so "twice a draw's spread"
  raises the floor and nothing lowers it below one draw's;

The sequential gate's looks use policy_law "lognormal", which holds a wider policy to more:

    floor = s2_draw * (mean(1/m_s) + r' * expm1(K' s2_log) / expm1(s2_log))

with ``s2_log`` the draws' pooled within-seed variance of log V, ``K'`` a one-sided
:data:`LOGNORMAL_SPREAD_CONFIDENCE` upper bound of the policy's log variance over
``s2_log``, raised to ``min(1, bound / sigma^2)`` (one whole draw, tail included, unless the
bound lies below a typical draw's robust spread ``sigma``: a policy that only missed the
bursts keeps the bursts' variance, one truly less variable is held to its own spread), the
ratio the one between the variances on V of two lognormal laws of equal mean (a policy
with twice a draw's CV at sigma 0.8 has K' = 2.4 but 4x the variance), and ``r' = exp(2 u +
(K' - 1) s2_log)`` capped at 1 (a wide policy's median sits below its mean, a narrow one's
closer to it), and ``s2_draw`` raised to the variance on V of a lognormal draw of log
spread at the seeds' levels, ``mean(dbar_s^2) expm1(sigma_+^2)``, ``sigma_+`` the robust
spread of the positive draws' log V (zeros have no log) (on heavy-tailed V
the sample variance of a few runs usually falls short of the truth: a policy twice as
variable as a draw at sigma 1.2 passed 0.043 of equal-mean campaigns without it).  The
sequential gate is asked to hold 0.03 for a policy twice as variable as a draw, which
"draw" misses (0.06 at sigma 0.8); the fixed gate is asked for 0.10 there and
for power 0.9 against a policy a fifth of its draws at sigma 1, which "lognormal" costs
(0.92 -> 0.66: K' is noisy at 10 seeds, the lognormal ratio convex in it, and 50
draws at sigma 1 rarely show the lognormal variance the law raises them to);

unless a pre-test finds the policy **less** variable than one more draw of its seed. Under
"one more draw" the policy's run and its seed's draws are exchangeable once the policy's own
level (its mean log offset to the seeds' mean log draw) is taken out, so the pre-test
relabels (:func:`relabelled_spread_p`). Its statistic is the sum of squares over seeds of
the labelled run's log residual to its seed's level (the mean log of the seed's other runs,
shrunk towards the mean over seeds by a weight fitted to the labelled runs, so that the
level's own error is small whether the seeds' levels spread or not), each square capped at
(:data:`PRETEST_CAP` robust spreads of the pooled runs)^2 (narrow is judged on the bulk:
uncapped, an exchangeable policy whose 40 runs missed every x8 burst of 5% of runs ranked
below nearly every relabelling, and 0.037-0.040 of such equal-mean campaigns passed at 40
seeds, 5 draws; capped, 0.021); its p is the share of :data:`PRETEST_RELABELLINGS` random
relabellings (in each seed one run labelled "policy", uniform over the policy and the draws)
at or below the observed. Below :data:`SPREAD_PRETEST` the floor is dropped (a fixed
schedule whose V barely moves needs none). Relabelling needs no model of V, where a
chi-square test against an estimated spread of a draw did and failed: a burst drags its
seed's mean log and every residual about it, so the spread came out wide and an exchangeable
policy whose runs had missed the bursts looked narrow. Skipping the draws far above their
seed's median mended that for rare bursts, but bursts on 30% of runs are no outliers: such a
policy passed 0.039-0.046 of equal-mean campaigns (20 seeds, 5 draws). Under relabelling an
exchangeable policy is called narrow in :data:`SPREAD_PRETEST` of campaigns whatever V's law
(runs at 0 tie, which makes it rarer), and a narrow policy is measured against the draws'
own bursts, where the chi-square test had lost power against a fixed schedule (bursty V, 10
seeds: 0.84 of the t-test's power; ``tools/INFERENCE_STUDY.md`` has it now). A looser
pre-test costs level: at 0.08 an exchangeable policy passed 0.040 of equal-mean campaigns
(x4 bursts on 10% of runs, 20 seeds, 5 draws, every seed at one level; 0.026 at 0.04).

**Runs with no violation.** A run at or below :data:`LOG_OFFSET` x the draws' mean V (V = 0
at light load) has no log worth reading: through the offset, ten policy runs at 0 look alike,
and a policy whose runs had only missed the violations their draws saw looked less variable
than a draw (V = 0 in 80% of runs, an exchangeable policy, 10 seeds, 3 draws: the gate
passed 0.053 of equal-mean campaigns).  The relabelling reads such runs as they are
(exchangeable with the draws' runs at 0), and the pre-test calls a policy narrow only when
it has no larger share of them than its draws (more would be the left tail that makes it
wide: twice a draw's CV at sigma 1.2 puts one run in fifty there, its lowest, whose log
carries much of the spread; ten runs at 0 where the draws saw violations in 20% of theirs
look narrow to the relabelling and are not).  The "draw" law's ``r`` and ``K`` come in
two parts (:func:`_zero_aware_level`): ``r = min(1, q_p / q_d exp(2 u+))`` with ``q_p`` the
Clopper-Pearson upper bound (one-sided :data:`LEVEL_CONFIDENCE`) of the policy's positive
share, ``q_d`` the draws' and ``u+`` the bound of the positive runs' mean log ratio to their
seed's median positive draw; ``K`` the positive runs' log spread over the positive draws' (1
below two positive runs). A policy that saw no violation in all ten seeds where its draws
saw one in 20% of runs is then held to most of a draw's variance (``r`` = 0.15 / 0.2 =
0.75); one whose draws violate in every run is not (``r`` = 0.15). Campaigns without such
runs are decided as before.

The worse side's end (the CI's upper end, ``p_less``) also carries the draws' skew: d is
right-skewed by their bursts, which pulls a symmetric interval below the true gain (a fixed
schedule on bursty V: 8% of intervals instead of 2.5%).  The draws' third cumulant k3
(unbiased per seed of >= 3 draws, pooled) gives a seed's draw mean the skew k3 / m^2, and a
one-term Cornish-Fisher end ``mean + se (q + c (2 q^2 + 1))``, ``c = max(k3 / m^2, 0) /
variance^1.5 / (6 sqrt(n))``, inverted by :func:`worse_side_quantile` into the p (the
policy's own skew is left out: it could only shorten that end).

The better side's end (every pass) carries the policy's skew the same way, mirrored: a
policy wider than its draws at equal means is right-skewed on V, d left-skewed, and its
few runs usually miss the tail that makes its mean, so the mean of d looks good exactly when
its sample variance is small (twice a draw's CV at sigma 0.8, 20 seeds: 0.10 of equal-mean
campaigns passed on the floor alone).  The policy's third cumulant is that of V = 0 in the
share of its runs that saw (next to) no violation and lognormal in the rest, at its mean and
the smaller of two one-sided :data:`SKEW_SPREAD_CONFIDENCE` lower bounds of its positive
runs' log variance about their seeds' level: the whole sample's, and the upper half's
variance about its own mean over 1 - 2/pi (a normal's half above its median keeps that
share).  The policy's few runs give a noisy spread and a lognormal's third cumulant grows
as exp(3 s2): the lower bound keeps a narrow policy's term at 0.  Runs close to 0 are a
left tail on logs, not skew on V: a run at or below :data:`LOG_OFFSET` x the draws' mean V
counts as 0 (read through a log it would look like a huge spread, where a policy with no
violation in half its runs has almost no skew), and the upper half ignores the rest.  That
is less a seed's draw mean's by the same law (the draws' positive share and robust positive
log spread, the seed's level, over m^2); ``c_b`` is that excess, at least 0, over
``variance^1.5 (6 sqrt(n))``.  A fixed schedule and a policy far below its draws have no
excess: their better side stays the t's.

What it assumes, in words: a policy run is at least as variable as one more draw of its
seed, at the policy's own level, unless its runs show otherwise (at the sequential gate's
looks: with a spread on V that follows its spread on log V as a lognormal's does).  Under
that, a policy whose runs missed the draws' tail is held to the variance the tail gives.
Measured on the study's designs (``tools/inference_study.py``, two-sided 0.05): false pass
<= 0.027 for an exchangeable or fixed-schedule policy and 0.090 for a policy twice as
variable as a draw (the t-test: 0.11 and 0.17; 0.10 without the better side's skew term), at
>= 0.9 of the t-test's power for a fixed schedule in every cell of 10 and 20 seeds and 0.91
for a policy five times below its draws; the 95% CI covers the gain >= 0.95 of the time.
The worse side's level is still not held (the draws' skew is estimated from few runs): the
gate prints no "worse" from it.  The constants are tuning choices; the study prints their
neighbours.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from evalkit.errors import InputError
from evalkit.stats._result import (ResultMixin, as_finite_1d, check_alternative,
                                   check_optional_confidence, check_shift, json_safe)
from evalkit.stats.paired import sample_skewness

__all__ = ["FlooredTestResult", "LEVEL_CONFIDENCE", "LOGNORMAL_SPREAD_CONFIDENCE", "METHOD",
           "POLICY_LAWS", "PRETEST_RELABELLINGS", "SKEW_SPREAD_CONFIDENCE", "SPREAD_PRETEST",
           "SPREAD_QUANTILE", "ci_ends", "floored_mean_test", "floored_t_batch",
           "floored_variance_batch", "padded_draws", "relabelled_spread_p", "worse_side_end",
           "worse_side_quantile"]

METHOD = "draw-floored t-test"

LEVEL_CONFIDENCE = 0.8     # one-sided confidence of the policy-level bound r
SPREAD_PRETEST = 0.04      # one-sided level of "the policy is less variable than a draw"
SPREAD_QUANTILE = 0.5      # chi-square quantile scaling the policy's spread estimate K
LOGNORMAL_SPREAD_CONFIDENCE = 0.7  # the sequential gate's: one-sided confidence of K's bound
SKEW_SPREAD_CONFIDENCE = 0.9  # one-sided confidence of the lower bounds of the policy's
                              # positive runs' log variance: the better side's skew term
POLICY_LAWS = ("draw", "lognormal")
MAX_LOG_VARIANCE = 50.0    # exp of a larger log variance overflows; the floor is huge anyway
LOG_OFFSET = 0.01          # logs of V + 0.01 x the draws' mean: a V of 0 stays finite
IQR_TO_SD = 1.349
PRETEST_RELABELLINGS = 499  # the spread pre-test's Monte Carlo relabellings
PRETEST_SEED = 32          # their generator's seed: the same relabellings on every call
PRETEST_CAP = 2.0          # a residual counts at most this many robust spreads in the pre-test
MAD_TO_SD = 1.4826         # MAD of a normal sample -> its SD


@dataclass(frozen=True)
class FlooredTestResult(ResultMixin):
    """The draw-floored t-test of ``mean(d) > null_shift`` (or <, or !=).

    ``mean``, ``sd`` describe d; ``se = sqrt(variance / n)`` is the test's, ``sample_se``
    the plain one; ``t = (mean - null_shift) / se`` against t with ``df = n - 1``.
    ``floor``: the variance floor (nan without seeds of >= 2 draws); ``floor_binds``: it
    exceeded s2_d and was used.  ``spread_p``: the pre-test's p of "less variable than one
    more draw" (``policy_less_variable`` when below :data:`SPREAD_PRETEST`: the floor is
    dropped).  ``level_ratio``: r (the policy's level bound, squared, capped at 1);
    ``spread_ratio``: K.  ``ci``: the ``confidence`` interval of the mean of d that inverts
    the test (one-sided for a one-sided test; the worse side's end carries the draws' skew,
    ``skew_term`` c, the better side's the policy's, ``better_skew_term``).
    ``floor_reason``: why there is no floor.
    ``skewness``: the sample skewness g1 of d (a diagnostic).
    """

    n: int
    mean: float
    sd: float
    se: float
    sample_se: float
    t: float
    df: int
    p_value: float
    p_greater: float
    p_less: float
    p_two_sided: float
    ci: tuple
    alternative: str
    null_shift: float
    confidence: float
    variance: float
    floor: float
    floor_binds: bool
    draw_variance: float
    level_ratio: float
    spread_ratio: float
    spread_p: float
    policy_less_variable: bool
    floor_reason: str
    skew_term: float
    skewness: float
    method: str
    policy_law: str = "draw"
    better_skew_term: float = 0.0

    def null_distribution(self, max_points: int = 2000, seed: int = 0) -> np.ndarray:
        """The test's null law of mean(d), as ``max_points`` evenly spaced quantiles
        (deterministic; ``seed`` is unused), T ~ t(df) and T >= 0: above its median
        ``null_shift + se * worse_side_end(T, better_skew_term)`` (the better side), below it
        ``null_shift - se * worse_side_end(T, skew_term)`` (the worse side), so that each
        side's tail share at the observed mean is that side's p."""
        del seed
        q = (np.arange(max_points) + 0.5) / max_points
        better = q >= 0.5
        t_upper = sps.t.ppf(np.where(better, q, 1.0 - q), self.df)
        return np.where(better, self.null_shift + self.se * worse_side_end(
                            t_upper, self.better_skew_term),
                        self.null_shift - self.se * worse_side_end(t_upper, self.skew_term))

    @property
    def null_observed(self) -> float:
        return self.mean

    null_statistic = "mean"
    test = METHOD

    @property
    def floor_state(self) -> str:
        """What the floor did, in words."""
        if self.floor_reason:
            return "no floor: " + self.floor_reason.split(":")[0]
        if self.policy_less_variable:
            return (f"no floor: the policy is less variable than one more draw (spread "
                    f"pre-test p = {self.spread_p:.2g})")
        if self.floor_binds:
            return "the draws' variance floor binds"
        return "the draws' variance floor does not bind"

    @property
    def reference(self) -> str:
        """The p's reference law (t, and the skew terms that move its ends) and what the
        floor did, in words."""
        skews = [f"{who} skew (c = {c:.2g})" for who, c in
                 (("the policy's", self.better_skew_term), ("the draws'", self.skew_term))
                 if c > 0]
        ends = f" with Cornish-Fisher ends for {' and '.join(skews)}" if skews else ""
        return f"t, {self.df} df{ends}; {self.floor_state}"

    def floor_dict(self) -> dict:
        """The floor's numbers, as audit.json records them."""
        keys = ("variance", "floor", "floor_binds", "draw_variance", "level_ratio",
                "spread_ratio", "spread_p", "policy_less_variable", "sample_se", "se", "df",
                "skew_term", "better_skew_term")
        return {**{k: json_safe(getattr(self, k)) for k in keys}, "law": self.policy_law,
                "reason": self.floor_reason or None, "reference": self.reference}


def padded_draws(draws, n: int) -> np.ndarray:
    """(n, max m) draws of n seeds (one array each, all finite), NaN beyond each seed's m."""
    if len(draws) != n:
        raise InputError(f"draws has {len(draws)} seeds, policy {n}", column="draws",
                         fix="pass one array of draws per policy run (seed)")
    rows = [as_finite_1d(row, f"draws[{i}]", what="draws of that seed")
            for i, row in enumerate(draws)]
    width = max(r.size for r in rows)
    out = np.full((n, width), np.nan)
    for i, r in enumerate(rows):
        out[i, :r.size] = r
    return out


def floored_variance_batch(policy: np.ndarray, draws: np.ndarray,
                           policy_law: str = "draw") -> dict:
    """The floor of many campaigns at once: policy (c, n), draws (c, n, M) with NaN past each
    seed's draws; ``policy_law``: "draw" (the fixed gate's) or "lognormal" (the sequential
    gate's), see the module docstring.  Returns arrays (c,): ``mean``, ``s2`` (of d),
    ``floor`` (nan: none), ``variance`` (the test's), ``binds``, ``draw_variance``,
    ``level_ratio``, ``spread_ratio``, ``spread_p``, ``less_variable``, ``usable``.  The
    single-campaign test is this with c = 1."""
    if policy_law not in POLICY_LAWS:
        raise InputError(f"unknown policy_law {policy_law!r}", column="policy_law",
                         fix="one of " + ", ".join(POLICY_LAWS))
    policy = np.asarray(policy, dtype=float)
    draws = np.asarray(draws, dtype=float)
    c, n = policy.shape
    has = np.isfinite(draws)
    m = has.sum(axis=2).astype(float)                                   # (c, n)
    dbar = np.nanmean(draws, axis=2)
    d = dbar - policy
    mean, s2 = d.mean(axis=1), d.var(axis=1, ddof=1)
    within = m >= 2
    dev2 = np.where(has, (draws - dbar[..., None]) ** 2, 0.0).sum(axis=2)
    dof = np.where(within, m - 1, 0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # all-NaN rows: no floor
        s2_draw = np.where(within, dev2, 0.0).sum(axis=1) / dof
        inv_m = (1.0 / m).mean(axis=1)
        offset = LOG_OFFSET * np.nanmean(draws.reshape(c, -1), axis=1)
        ld = np.log(draws + offset[:, None, None])
        lp = np.log(policy + offset[:, None])
        seed_log = np.nanmean(ld, axis=2)                               # (c, n)
        seed_median = np.nanmedian(ld, axis=2)                          # (c, n)
        ldev = np.where(has, ld - seed_log[..., None], np.nan)
        s2_log = np.where(within[..., None] & has, ldev ** 2, 0.0).sum(axis=(1, 2)) / dof
        sigma, flat = _robust_log_spread(ldev, m)
        sd_log = np.sqrt(np.nanmean(flat ** 2, axis=1))
        sigma = np.where(sigma > 0, sigma, sd_log)
        # the pre-test: is the policy less variable than one more draw of its seed?  Under
        # that null its run and the seed's draws are exchangeable (after the policy's own
        # level shift), so relabelling decides it whatever V's law: bursts, heavy tails and
        # runs at 0 stay in the reference instead of widening a spread it must estimate
        positive = policy > offset[:, None]
        n_pos = positive.sum(axis=1)
        spread_p = (relabelled_spread_p(lp, ld, has) if n >= 3 else np.ones(c))
        spread_p = np.where(dof > 0, spread_p, np.nan)                  # no draws' spread
        # runs at (next to) 0: the "draw" law reads u and K from the positive parts
        zero_runs = ~np.all(positive, axis=1) | np.any(has & (draws <= offset[:, None, None]),
                                                       axis=(1, 2))
        positive_spread = (_positive_log_spread(draws, offset) if np.any(zero_runs)
                           else np.full(c, np.nan))
        # ... and a policy with more runs at (next to) 0 than its draws is not narrow: its
        # positive runs alone would hide the left tail that makes it wide
        share_pos = n_pos / n
        share_draws = (has & (draws > offset[:, None, None])).sum(axis=(1, 2)) / np.maximum(
            has.sum(axis=(1, 2)), 1)
        less = (spread_p < SPREAD_PRETEST) & (share_pos >= share_draws)
        # u: the policy's log level relative to its seed's median draw, upper bound
        to_median = lp - seed_median
        upper = (to_median.mean(axis=1) + sps.t.ppf(LEVEL_CONFIDENCE, n - 1)
                 * to_median.std(axis=1, ddof=1) / math.sqrt(n))
        policy_dev2 = (lp - seed_log).var(axis=1, ddof=1) * (n - 1)
        if policy_law == "draw":
            # K: the policy's log spread over a draw's robust one; its part is K draws
            k = np.maximum(policy_dev2 / sps.chi2.ppf(SPREAD_QUANTILE, n - 1)
                           - s2_log * inv_m, 0.0) / sigma ** 2
            # with runs at (next to) 0 the logs of zeros say nothing of either: u and K in
            # two parts (:func:`_zero_aware_level`)
            if np.any(zero_runs):
                zero_upper, zero_k = _zero_aware_level(policy, draws, offset, positive,
                                                       share_draws, positive_spread)
                # (undefined stays undefined: no usable draws, no floor)
                upper = np.where(zero_runs & np.isfinite(upper), zero_upper, upper)
                k = np.where(zero_runs & np.isfinite(k), zero_k, k)
            r = np.minimum(1.0, np.exp(2.0 * upper))
            policy_part = r * np.maximum(k, 1.0)
        else:
            # K: an upper bound of the policy's log variance over a draw's; its part is the
            # variance on V of a lognormal policy of log variance max(K, typical) s2_log at
            # its mean level (the median's bound plus the lognormal mean's spread term)
            spread_seen = s2_log > 0                # draws constant within seeds: floor 0
            bound = np.maximum(policy_dev2 / sps.chi2.ppf(1.0 - LOGNORMAL_SPREAD_CONFIDENCE,
                                                          n - 1) - s2_log * inv_m, 0.0)
            k = np.where(spread_seen, bound / s2_log, np.where(dof > 0, 0.0, np.nan))
            # one whole draw (its tail included) unless the bound is below a typical draw's
            # spread: a policy that only missed the draws' bursts is not less variable
            typical = np.where(sigma > 0, np.minimum(1.0, bound / sigma ** 2), 1.0)
            spread = np.maximum(k, typical) * s2_log  # nan without draws: no floor anyway
            r = np.minimum(1.0, np.exp(2.0 * upper + spread - s2_log))
            policy_part = r * np.where(spread_seen, np.expm1(np.minimum(
                spread, MAX_LOG_VARIANCE)) / np.expm1(s2_log), 1.0)
            # a few heavy-tailed runs' sample variance usually falls short of their variance
            # (its median lies below its mean); a lognormal draw's at the seeds' levels with
            # the robust log spread does not, and bursts and zeros barely move that spread
            lognormal_draw = np.nanmean(dbar ** 2, axis=1) * np.expm1(np.minimum(
                _positive_log_spread(draws) ** 2, MAX_LOG_VARIANCE))
            s2_draw = np.fmax(s2_draw, lognormal_draw)      # NaN lognormal_draw: the sample's
        floor = s2_draw * (inv_m + policy_part)
    usable = (dof > 0) & np.isfinite(floor)
    floor = np.where(usable, floor, np.nan)
    binding = usable & ~less & (floor > s2)
    variance = np.where(binding, floor, s2)
    return {"mean": mean, "s2": s2, "floor": floor, "variance": variance, "binds": binding,
            "draw_variance": np.where(dof > 0, s2_draw, np.nan), "level_ratio": r,
            "spread_ratio": k, "spread_p": spread_p, "less_variable": less & usable,
            "usable": usable}


def relabelled_spread_p(log_policy, log_draws, has, relabellings: int | None = None
                        ) -> np.ndarray:
    """(c,) the spread pre-test's p of "the policy's run is one more draw of its seed" against
    "it is less variable", by relabelling.  ``log_policy`` (c, n), ``log_draws`` (c, n, M)
    with ``has`` (c, n, M) marking the draws.

    The policy's logs are shifted by their mean offset to the seeds' mean log draw (the
    policy may sit at its own level); in each seed the shifted run and the draws are then
    exchangeable under the null.  The statistic: the labelled runs' residual sum of squares
    over seeds about their seeds' levels, each level ``w`` x the mean of the seed's other
    runs (plus a constant), ``w`` in [0, 1] fitted by least squares: the shrinkage of a
    seed's level towards the mean over seeds that suits the labelled runs (a narrow policy
    needs its seed's level, and how well the other runs give it depends on how far the
    seeds' levels spread).  Each squared residual counts at most (:data:`PRETEST_CAP` x a
    robust spread)^2, the spread the pooled runs' MAD about their seed's median (the same
    for every labelling): narrow is judged on the bulk, so a run that merely missed the rare
    bursts its draws show does not look narrow for it.  Each of
    :data:`PRETEST_RELABELLINGS` relabellings (the same on every call, from
    :data:`PRETEST_SEED`) labels one run of each seed, uniform over its draws and the
    policy, and is fitted the same way; ``p = (1 + #{relabelled <=
    observed}) / (relabellings + 1)``, the Monte Carlo permutation p (valid at any number of
    relabellings).  Ties count as at or below: within a relative 1e-9 of the observed value,
    or an absolute 1e-12 x n x the campaign's largest squared log (rounding moves a statistic
    by about 1e-16 of that, and where the policy's runs tie the draws' it is all there is), so
    neither float rounding nor the unit of V can move p."""
    count = PRETEST_RELABELLINGS if relabellings is None else int(relabellings)
    c, n, _ = log_draws.shape
    m = has.sum(axis=2)                                                  # (c, n)
    logs = np.where(has, log_draws, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # seeds without draws
        seed_mean = logs.sum(axis=2) / m
        shift = np.nanmean(np.where(m > 0, log_policy - seed_mean, np.nan), axis=1)
    pool = np.concatenate([(log_policy - shift[:, None])[..., None], logs], axis=2)
    total = pool.sum(axis=2)                                             # (c, n)
    # the cap: PRETEST_CAP robust spreads of the pooled runs about their seed's median (the
    # same for every labelling)
    in_pool = np.concatenate([np.ones((c, n, 1), dtype=bool), has], axis=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # campaigns without draws
        runs = np.where(in_pool, pool, np.nan)
        spread = MAD_TO_SD * np.nanmedian(np.abs(
            runs - np.nanmedian(runs, axis=2)[..., None]).reshape(c, -1), axis=1)
    cap = np.where(spread > 0, (PRETEST_CAP * spread) ** 2, np.inf)
    tie = 1e-12 * n * np.max(np.abs(pool), axis=(1, 2), initial=0.0) ** 2   # 0 off the pool
    uniform = np.random.default_rng(PRETEST_SEED).random((count, n))
    # seeds on the first axis: the statistic's sums over seeds are then sums of whole
    # arrays, where sums along a short last axis would cost more than all the rest
    observed = _relabelling_statistic(pool[..., 0].T.copy(), m.T, total.T, cap)
    at_or_below = np.zeros(c)
    width = pool.shape[2]
    step = max(1, 2_000_000 // max(count * n, 1))           # about 16 MB per block
    for lo in range(0, c, step):
        block = slice(lo, lo + step)
        seeds_m = m[block]                                              # (size, n)
        size = seeds_m.shape[0]
        lanes = np.ascontiguousarray(pool[block].reshape(size, n * width).T)
        # each relabelling's run of each seed: number floor(u (m + 1)) among the seed's runs,
        # as rows of ``lanes`` (one a seed's run, over the block's campaigns)
        if np.all(seeds_m == seeds_m[0]):                   # one label set for the block
            row = np.floor(uniform.T * (seeds_m[0][:, None] + 1))
            row += (np.arange(n) * width)[:, None]
            run = lanes[row.astype(np.intp)]                               # (n, count, size)
        else:
            at = uniform.T[:, :, None] * (seeds_m.T[:, None, :] + 1)
            np.floor(at, out=at)
            at += (np.arange(n) * width)[:, None, None]
            at *= size
            at += np.arange(size)
            run = np.take(lanes.ravel(), at.astype(np.intp))
        ref = _relabelling_statistic(run, seeds_m.T[:, None, :], total[block].T[:, None, :],
                                     cap[block])                            # (count, size)
        obs = observed[block]
        at_or_below[block] = (ref <= obs + 1e-9 * np.abs(obs) + tie[block]).sum(axis=0)
    return np.where(np.isfinite(observed), (1.0 + at_or_below) / (count + 1.0), np.nan)


def _relabelling_statistic(run, kept, run_total, cap):
    """The pre-test's statistic of labelled runs ``run`` (n, ...), one a seed (seeds on the
    first axis), among their seeds' ``kept`` other runs of sum ``run_total - run``: see
    :func:`relabelled_spread_p`.  Works in place on ``run`` (a fresh array: this is the hot
    path); ``cap`` broadcasts against the result (...)."""
    others = run_total - run
    others /= np.maximum(kept, 1)
    run -= run.mean(axis=0)
    others -= others.mean(axis=0)
    work = np.multiply(others, others)
    spread = work.sum(axis=0)
    np.multiply(run, others, out=work)
    with np.errstate(invalid="ignore", divide="ignore"):
        w = np.clip(np.where(spread > 0, work.sum(axis=0) / spread, 0.0), 0.0, 1.0)
    np.multiply(w, others, out=work)
    np.subtract(run, work, out=work)
    np.square(work, out=work)
    np.minimum(work, cap, out=work)
    return work.sum(axis=0)


def _zero_aware_level(policy, draws, offset, positive, share_draws,
                      positive_spread) -> tuple[np.ndarray, np.ndarray]:
    """(c,) u and K of the "draw" law's floor when runs at (next to) 0 occur, from the two
    parts of V: whether a run saw a violation, and how many it saw when it did.  ``u =
    log(q_p / q_d) / 2`` plus the upper bound (one-sided :data:`LEVEL_CONFIDENCE`) of the mean
    log ratio of the policy's positive runs to their seed's median positive draw (0 with
    fewer than two such runs), ``q_p`` the Clopper-Pearson upper bound of the policy's
    positive share and ``q_d`` the draws' positive share: ``exp(2 u)`` bounds the policy's
    second moment on V relative to a draw's when the positive parts share a shape.  ``K``:
    the positive runs' log spread about their seed's mean positive draw (median-unbiased
    chi-square scaling, less the level's error) over the positive draws' robust spread
    squared; 1 (one draw) where fewer than two positive runs leave it unknown.
    ``share_draws`` (``q_d``) and ``positive_spread`` come from the caller, which has them."""
    n = policy.shape[1]
    q_d = share_draws
    k_p = positive.sum(axis=1)
    q_p = np.where(k_p >= n, 1.0, sps.beta.ppf(LEVEL_CONFIDENCE, k_p + 1,
                                                np.maximum(n - k_p, 1)))
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # seeds without positive draws
        logs, k_d, seed_log, s2_pos = _positive_draw_logs(draws, offset)
        log_policy = np.log(np.where(positive, policy, 1.0))
        median = np.nanmedian(logs, axis=2)
        seen = positive & np.isfinite(median)
        ratio = np.where(seen, log_policy - median, np.nan)
        count = seen.sum(axis=1)
        bound = np.where(count >= 2, np.nanmean(ratio, axis=1) + sps.t.ppf(
            LEVEL_CONFIDENCE, np.maximum(count - 1, 1)) * np.nanstd(ratio, axis=1, ddof=1)
            / np.sqrt(np.maximum(count, 1)), 0.0)
        bound = np.where(np.isfinite(bound), bound, 0.0)
        share = np.where(q_d > 0, q_p / np.where(q_d > 0, q_d, 1.0), 1.0)
        upper = 0.5 * np.log(share) + bound
        # K from the positive parts
        resid = np.where(seen, log_policy - seed_log, np.nan)
        dev2 = np.nansum((resid - np.nanmean(resid, axis=1)[:, None]) ** 2, axis=1)
        level_err = s2_pos * np.nanmean(np.where(seen, 1.0 / k_d, np.nan), axis=1)
        k = (np.maximum(dev2 / sps.chi2.ppf(SPREAD_QUANTILE, np.maximum(count - 1, 1))
                        - level_err, 0.0) / positive_spread ** 2)
        k = np.where((count >= 2) & np.isfinite(k), k, 1.0)
    return upper, k


def _robust_log_spread(dev: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(c,) the robust spread (IQR / 1.349) of log residuals ``dev`` (c, n, M; NaN where no
    run) about their seed's centre, each scaled by sqrt(k / (k - 1)) for the seed's k (c, n)
    runs, seeds of k >= 2 only; NaN without such seeds.  Also the scaled residuals (c, n M)."""
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # campaigns without such seeds
        flat = np.where((k >= 2)[..., None], dev * np.sqrt(k / np.maximum(k - 1, 1))[..., None],
                        np.nan).reshape(dev.shape[0], -1)
        q25, q75 = _row_nanquantiles(flat, (0.25, 0.75))
    return (q75 - q25) / IQR_TO_SD, flat


def _row_nanquantiles(values: np.ndarray, quantiles) -> list[np.ndarray]:
    """Each row's quantiles of ``values`` (c, k) ignoring NaN, as ``np.nanquantile(values,
    q, axis=1)`` with its default linear method, value for value, but in one sort of the
    whole array where numpy loops over the rows in Python (the floor's hot path).  NaN for a
    row without values."""
    ordered = np.sort(values, axis=1)                   # NaN sorts last
    count = (~np.isnan(ordered)).sum(axis=1)
    rows = np.arange(values.shape[0])
    out = []
    for q in quantiles:
        at = (count - 1) * float(q)                     # numpy's virtual index
        below = np.floor(at)
        top = at >= count - 1
        lo = np.where(top, count - 1, below).astype(np.intp)
        hi = np.where(top, count - 1, below + 1).astype(np.intp)
        gamma = np.where(top, at + 1.0, at - below)     # numpy: index -1 at the top
        empty = count == 0
        lo, hi = np.where(empty, 0, lo), np.where(empty, 0, hi)
        a, b = ordered[rows, lo], ordered[rows, hi]
        with np.errstate(invalid="ignore"):                 # inf - inf, as numpy's
            diff = b - a
            value = np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)
        out.append(np.where(empty, np.nan, value))
    return out


def _positive_draw_logs(draws: np.ndarray, floor: np.ndarray):
    """The draws above ``floor`` (c,) -- the positive ones, V at or below it counting as 0 --
    on logs: (log V, NaN elsewhere (c, n, M); positive draws per seed (c, n); their seed's
    mean log (c, n); their within-seed log variance pooled over the seeds (c,))."""
    positive = np.isfinite(draws) & (draws > floor[:, None, None])
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # seeds without positive draws
        logs = np.where(positive, np.log(np.where(positive, draws, 1.0)), np.nan)
        k = positive.sum(axis=2).astype(float)
        seed_log = np.nanmean(logs, axis=2)
        dof = np.maximum(k - 1, 0).sum(axis=1)
        s2_log = np.nansum((logs - seed_log[..., None]) ** 2, axis=(1, 2)) / dof
    return logs, k, seed_log, s2_log


def _positive_log_spread(draws: np.ndarray, floor=0.0) -> np.ndarray:
    """(c,) the robust spread (IQR / 1.349) of the positive draws' log V about their seed's
    mean log V (scaled by sqrt(k / (k - 1)), seeds of >= 2 positive draws); NaN without such
    seeds.  A V of 0 has no logarithm: read through the offset it would look like a huge
    log deviation and inflate the lognormal draw's variance it feeds.  ``floor`` (c,): V at
    or below it counts as 0."""
    positive = np.isfinite(draws) & (draws > np.reshape(floor, (-1, 1, 1)))
    k = positive.sum(axis=2).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # seeds without positive draws
        logs = np.where(positive, np.log(np.where(positive, draws, 1.0)), np.nan)
        return _robust_log_spread(logs - np.nanmean(logs, axis=2)[..., None], k)[0]


def _draw_mean_k3(draws: np.ndarray) -> np.ndarray:
    """(c,) the third cumulant a seed's draw mean carries into d, mean over seeds of k3 /
    m^2: k3 the draws' third cumulant, unbiased per seed of >= 3 draws and pooled with
    weights m - 2; 0 without such seeds (the worse side's correction then vanishes)."""
    has = np.isfinite(draws)
    m = has.sum(axis=2).astype(float)
    skewed = m >= 3
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # all-NaN rows: no draws
        dev = draws - np.nanmean(draws, axis=2)[..., None]
        dev3 = np.where(has, dev ** 3, 0.0).sum(axis=2)
        k3_seed = np.where(skewed, dev3 * m / ((m - 1) * (m - 2)), 0.0)
        weight = np.where(skewed, m - 2, 0.0)
        k3 = (k3_seed * weight).sum(axis=1) / weight.sum(axis=1)
        return np.where(np.isfinite(k3), k3 * (1.0 / m ** 2).mean(axis=1), 0.0)


def _zero_lognormal_k3(mean, positive_share, log_variance):
    """The third cumulant of V = 0 with probability 1 - q, else lognormal of the given log
    variance, V's mean given: ``mu+^3 (q w^3 - 3 q^2 w + 2 q^3)`` with ``mu+ = mean / q`` the
    positive part's mean and ``w = exp(log_variance)``, written as ``(w - q)^2 (w + 2q) - (1 -
    q) w^3`` so that q = 1 (a lognormal: ``e^2 (e + 3)``, e = w - 1) keeps its precision.
    A symmetric 0 / constant mixture (q = 1/2, w = 1) has none; 0 where q is 0."""
    q = np.asarray(positive_share, dtype=float)
    e = np.expm1(np.minimum(np.nan_to_num(log_variance), MAX_LOG_VARIANCE))
    with np.errstate(invalid="ignore", divide="ignore"):
        shape = (e + (1.0 - q)) ** 2 * (1.0 + e + 2.0 * q) - (1.0 - q) * (1.0 + e) ** 3
        return np.where(q > 0, (np.maximum(mean, 0.0) / q) ** 3 * shape, 0.0)


def _policy_skew_excess(policy: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """(c,) the third cumulant that pulls d to the left: the policy's, as V = 0 in the share
    of its runs that saw (next to) no violation and lognormal otherwise (at the smaller of
    the one-sided :data:`SKEW_SPREAD_CONFIDENCE` lower bounds of its positive runs' log
    variance about their seeds' mean log positive draw, whole and upper half), less a
    seed's draw mean's by the same law (the draws' positive share and robust positive log
    spread, the seed's level, over m^2): a policy as variable as a draw nets out.  A run at
    or below :data:`LOG_OFFSET` x the draws' mean V counts as 0: such runs have no right
    tail, and their huge negative logs would look like a huge spread where a policy with no
    violation in half its runs has almost no skew.  0 where the draws' skew is the larger or
    a part is undefined."""
    n = policy.shape[1]
    has = np.isfinite(draws)
    m = has.sum(axis=2).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # seeds without positive draws
        floor = LOG_OFFSET * np.nanmean(draws.reshape(draws.shape[0], -1), axis=1)
        _, k, seed_log, s2_log = _positive_draw_logs(draws, floor)      # seed_log (c, n)
        share_draws = k.sum(axis=1) / m.sum(axis=1)
        draw_means = (np.nanmean(np.maximum(np.nanmean(draws, axis=2), 0.0) ** 3 / m ** 2,
                                 axis=1)
                      * _zero_lognormal_k3(1.0, share_draws,
                                           _positive_log_spread(draws, floor) ** 2))
        violating = policy > floor[:, None]
        seen = violating & np.isfinite(seed_log)
        kp = seen.sum(axis=1)
        resid = np.where(seen, np.log(np.where(seen, policy, 1.0)) - seed_log, np.nan)
        # the right tail's spread: the smaller of the whole log spread's lower bound and the
        # upper half's (its variance over 1 - 2/pi, a normal's half above its median keeps
        # that share): runs close to 0 (a left tail on logs) do not count as skew
        whole = (np.nansum((resid - np.nanmean(resid, axis=1)[:, None]) ** 2, axis=1)
                 / sps.chi2.ppf(SKEW_SPREAD_CONFIDENCE, np.maximum(kp - 1, 1)))
        top = np.where(seen & (resid > np.nanmedian(resid, axis=1)[:, None]), resid, np.nan)
        ku = np.isfinite(top).sum(axis=1)
        upper = (np.nansum((top - np.nanmean(top, axis=1)[:, None]) ** 2, axis=1)
                 / (1.0 - 2.0 / math.pi) / sps.chi2.ppf(SKEW_SPREAD_CONFIDENCE,
                                                        np.maximum(ku - 1, 1)))
        level_err = s2_log * np.nanmean(np.where(seen, 1.0 / k, np.nan), axis=1)
        low = np.where(ku >= 2, np.maximum(np.minimum(whole, upper) - level_err, 0.0), 0.0)
        policy_k3 = _zero_lognormal_k3(policy.mean(axis=1), violating.sum(axis=1) / n, low)
        excess = policy_k3 - draw_means
    return np.where(np.isfinite(excess), np.maximum(excess, 0.0), 0.0)


def floored_t_batch(policy: np.ndarray, draws: np.ndarray, null_shift: float = 0.0,
                    policy_law: str = "draw") -> dict:
    """:func:`floored_variance_batch` with the test on top, for c campaigns at once: adds
    ``se``, ``t = (mean - null_shift) / se`` (t = +-inf when se is 0 and the mean is off the
    shift, nan when on it), ``skew_term`` (c of :func:`worse_side_quantile`, the draws'
    skew), ``better_skew_term`` (the same for the policy's skew, the better side's) and the
    p's ``p_greater`` and ``p_less`` (t with n - 1 df at each side's quantile) and
    ``p_two_sided``; each is 1 where t is nan."""
    policy = np.asarray(policy, dtype=float)
    draws = np.asarray(draws, dtype=float)
    b = floored_variance_batch(policy, draws, policy_law)
    n = policy.shape[1]
    se = np.sqrt(np.maximum(b["variance"], 0.0) / n)
    diff = b["mean"] - null_shift
    k3 = np.maximum(_draw_mean_k3(draws), 0.0)
    # no seed with >= 2 draws: the draws' spread is unknown and the plain t-test decides
    k3_left = np.where(b["usable"], _policy_skew_excess(policy, draws), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(se > 0, diff / se, np.where(diff == 0, np.nan, np.sign(diff) * np.inf))
        scale = np.where(b["variance"] > 0, b["variance"] ** -1.5, 0.0) / (6.0 * math.sqrt(n))
        skew_term = k3 * scale
        better_skew_term = k3_left * scale
    undefined = np.isnan(t)
    q_better = worse_side_quantile(np.where(undefined, 0.0, t), better_skew_term)
    p_greater = np.where(undefined, 1.0, sps.t.sf(q_better, n - 1))
    q_worse = worse_side_quantile(np.where(undefined, 0.0, -t), skew_term)
    p_less = np.where(undefined, 1.0, sps.t.sf(q_worse, n - 1))
    return dict(b, se=se, t=t, skew_term=skew_term, better_skew_term=better_skew_term,
                p_greater=p_greater, p_less=p_less,
                p_two_sided=np.minimum(1.0, 2.0 * np.minimum(p_greater, p_less)))


def worse_side_quantile(u, c):
    """The t quantile q whose worse-side end ``mean + se (q + c (2 q^2 + 1))`` lies ``u``
    standard errors above the mean: the one-term Cornish-Fisher end for a d skewed to the
    right by ``6 sqrt(n) c`` (c >= 0); mirrored, the better side's for a d skewed left.
    Increasing in u: the quadratic's root for u >= c (where the end's map is increasing,
    q >= 0), ``u - c`` below, continuous at u = c."""
    u, c = np.broadcast_arrays(np.asarray(u, dtype=float), np.asarray(c, dtype=float))
    with np.errstate(invalid="ignore"):
        excess = u - c
        root = 2.0 * excess / (1.0 + np.sqrt(1.0 + 8.0 * c * np.maximum(excess, 0.0)))
    return np.where(np.isinf(u), u, np.where(excess >= 0, root, excess))


def worse_side_end(q, c):
    """The worse side's end in standard errors above the mean at t quantile q >= 0 (with
    the better side's c: the better side's end below it)."""
    return q + c * (2.0 * q * q + 1.0)


def ci_ends(mean, se, skew_term, df, confidence, alternative="two-sided",
            better_skew_term=0.0):
    """The ``confidence`` interval of the mean of d that inverts the test: each side's end
    from :func:`worse_side_end` at the t quantile with ``df`` df, the worse side's (upper)
    with ``skew_term``, the better side's (lower) with ``better_skew_term`` (arrays or
    floats; one-sided for a one-sided test; nan, nan when confidence is None)."""
    if confidence is None:
        return math.nan, math.nan
    two = alternative == "two-sided"
    q = sps.t.ppf(0.5 + float(confidence) / 2.0 if two else float(confidence), df)
    lo = (mean - se * worse_side_end(q, better_skew_term) if alternative != "less"
          else -math.inf)
    hi = mean + se * worse_side_end(q, skew_term) if alternative != "greater" else math.inf
    return lo, hi


def floored_mean_test(policy, draws, alternative: str = "greater", *, confidence=0.95,
                      null_shift: float = 0.0, policy_law: str = "draw") -> FlooredTestResult:
    """Draw-floored t-test of H0 ``mean(d) = null_shift``, ``d_s = mean(draws_s) - policy_s``.

    policy: (n,) the policy's V per seed, n >= 2, finite; draws: n arrays, the matched-random
    draws' V of each seed (>= 1 each; seeds with >= 2 draws give the floor).
    confidence: level of ``ci`` (None: no interval); null_shift: the mean gain under H0;
    policy_law: the floor's law, "draw" (the fixed gate's) or "lognormal" (the sequential
    gate's looks), recorded in the result.
    """
    check_alternative(alternative)
    pol = as_finite_1d(policy, "policy", min_size=2, what="policy runs (seeds)")
    n = pol.size
    padded = padded_draws(draws, n)
    shift = check_shift(null_shift)
    confidence = check_optional_confidence(confidence)
    b = {k: v[0] for k, v in floored_t_batch(pol[None, :], padded[None], shift,
                                             policy_law).items()}
    mean, variance, se, t = (float(b[k]) for k in ("mean", "variance", "se", "t"))
    df = n - 1
    p_greater, p_less, p_two = (float(b[k]) for k in ("p_greater", "p_less", "p_two_sided"))
    p_value = {"greater": p_greater, "less": p_less, "two-sided": p_two}[alternative]
    lo, hi = ci_ends(mean, se, float(b["skew_term"]), df, confidence, alternative,
                     float(b["better_skew_term"]))
    reason = ("" if b["usable"] else "no seed has >= 2 draws: the draws' variance is "
              "unknown, the plain t-test decides")
    return FlooredTestResult(
        n=n, mean=mean, sd=math.sqrt(float(b["s2"])), se=se,
        sample_se=math.sqrt(float(b["s2"]) / n), t=float(t), df=df, p_value=float(p_value),
        p_greater=p_greater, p_less=p_less, p_two_sided=p_two, ci=(float(lo), float(hi)),
        alternative=alternative, null_shift=shift,
        confidence=math.nan if confidence is None else float(confidence),
        variance=variance, floor=float(b["floor"]), floor_binds=bool(b["binds"]),
        draw_variance=float(b["draw_variance"]), level_ratio=float(b["level_ratio"]),
        spread_ratio=float(b["spread_ratio"]), spread_p=float(b["spread_p"]),
        policy_less_variable=bool(b["less_variable"]), floor_reason=reason,
        skew_term=float(b["skew_term"]), better_skew_term=float(b["better_skew_term"]),
        skewness=sample_skewness(np.nanmean(padded, axis=1) - pol),
        method=f"{METHOD} of the mean of d", policy_law=policy_law)
