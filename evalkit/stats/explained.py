"""Is a placement gain explained by request overlap?  Inference on the claim itself.

ψ̂ maps overlap Φ to sync-excess Vex (isotonic, :mod:`evalkit.stats.psi`).  For each seed s of
a claim, ψ̂ is refitted on the regime's runs of every *other* seed (leave-one-seed-out: the
seed's own runs never shape the map that predicts them), and

    g_pred,s = mean over the seed's draws of ψ̂_{-s}(Φ_draw) − ψ̂_{-s}(Φ_policy,s)

is the gain overlap predicts for that seed -- ψ̂ evaluated at each draw's Φ and averaged, the
proxy-envelope estimate of the draws' V (it equals ψ̂ at the draws' mean Φ wherever ψ̂ is
linear over them).  With d_s = V_MR(s) − V_policy(s) = Vex_MR(s) − Vex_policy(s):

* ``G_pred = mean_s g_pred,s`` must have a CI above 0 (overlap predicts a gain), and
* the unexplained part ``U = G − G_pred = mean_s (d_s − g_pred,s)`` must be shown small by an
  equivalence test (TOST at α) inside ``±tolerance · |G|``.  The band moves with G, which is
  estimated from the same seeds: a fixed band at ``tolerance · |Ĝ|`` certified a gain exactly
  at the tolerance 8% of the time at α = 5% (a high Ĝ widens the band just when Û is high).
  The two one-sided hypotheses are linear in the per-seed values, so each is tested on its
  own per-seed combination (σ = sign of Ĝ)::

      U > −tolerance · |G|  <=>  mean_s (u_s + tolerance σ d_s) > 0
      U < +tolerance · |G|  <=>  mean_s (tolerance σ d_s − u_s) > 0

  each one-sided at α by two tests that must both reject: the seed-level test
  (:func:`evalkit.stats.paired.paired_mean_test`) and Johnson's skewness-corrected t
  (Johnson 1978: ``t1 = (m + mu3 / (6 s^2 n) + mu3 m^2 / (3 s^4)) / (s / sqrt n)`` against
  ``t_{n-1}``).  The policy run's noise enters d with a minus sign, so right-skewed V makes
  the combinations skewed, and at 10 seeds either test alone certifies a gain at the
  boundary more often than α: by simulation (``tests/stats/test_explained_equivalence.py``,
  10 seeds x 5 draws, U = ±0.25 G, G = 2 pp) the sign-flip test alone 0.063 / 0.10 and both
  0.049 / 0.07-0.08 with lognormal run noise of sigma 0.35 / 0.8; 0.041 with Gaussian noise
  (the fixed band at ``tolerance · |Ĝ|`` before: 0.096 / 0.15 / 0.07).  ``p_equivalence`` is
  the largest of the four p-values.  A CI that merely overlaps the band is no evidence --
  noisier data would pass more often.  Through the whole estimator (ψ̂ refitted
  leave-one-seed-out; that test file's regime with the policy's Φ inside the draws' range,
  1,500 campaigns) a gain at the boundary is still certified 0.08-0.09 of the time (the fixed
  band: 0.08-0.12): the leave-one-seed-out fits make the seeds' g_pred depend on each other,
  which no per-seed test sees -- not yet solved.  A fully explained 1.5 pp gain reaches the
  tier 0.31 / 0.02 of the time at run noise 0.4 / 0.8 pp (fixed band: 0.40 / 0.02).

ψ̂ is fitted only on runs that cannot carry the claim's own policy effect (``fit_rows``: the
matched-random draws and the no-sync runs, never a policy run): a policy that also gains by
something other than overlap would otherwise lift ψ̂ at its own low Φ and count that gain as
"explained".

A policy that places merges like random draws (same Φ distribution) but suffers less per
overlapping request has G > 0 and G_pred ≈ 0: not explained.  CIs: percentile-t (studentized)
bootstrap over seeds of the per-seed values (:func:`evalkit.stats.bootstrap.percentile_t_ci`),
one explicit generator: near nominal at 10 seeds where BCa's lower bound of a zero G_pred
was above 0 about twice as often as it should be.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from scipy import stats as sps

from evalkit.errors import InputError, NotEstimable
from evalkit.stats._result import ResultMixin, as_generator
from evalkit.stats.psi import _interp, _isotonic
from evalkit.stats.bootstrap import percentile_t_ci
from evalkit.stats.paired import paired_mean_test

__all__ = ["ExplainedGain", "explained_gain", "skew_corrected_t_p", "unexplained_within_share"]


@dataclass(frozen=True)
class SeedPrediction(ResultMixin):
    seed: object
    d: float
    g_pred: float
    phi_policy: float
    phi_mr_mean: float
    n_draws: int


@dataclass(frozen=True)
class ExplainedGain(ResultMixin):
    """The ψ-predicted gain of a claim and the part of the gain it leaves unexplained."""

    n_seeds: int
    gain: float
    gain_ci: list
    g_pred: float
    g_pred_ci: list
    unexplained: float
    unexplained_ci: list
    tolerance: float
    tolerance_abs: float
    confidence_level: float
    predicts_gain: bool
    within_tolerance: bool
    explained: bool
    per_seed: list
    n_boot: int
    method: str
    equivalence_level: float = math.nan     # level of the unexplained part's CI (1 - 2 alpha)
    n_fit_runs: int = 0                     # runs psi may be fitted on (before leaving out)
    p_equivalence: float = math.nan         # max of the two one-sided p-values (<= alpha: within)


def skew_corrected_t_p(x) -> float:
    """One-sided p of Johnson's skewness-corrected t for ``mean(x) > 0`` (module docstring);
    1 when x has no spread and a mean <= 0, 0 when no spread and a mean > 0."""
    x = np.asarray(x, dtype=float)
    n = x.size
    mean = float(x.mean())
    s2 = float(x.var(ddof=1))
    if s2 <= 1e-24 * max(1.0, float(np.mean(x * x))):
        return 0.0 if mean > 0 else 1.0
    mu3 = float(np.mean((x - mean) ** 3)) * n / (n - 1)
    t1 = (mean + mu3 / (6.0 * s2 * n) + mu3 * mean ** 2 / (3.0 * s2 ** 2)) / math.sqrt(s2 / n)
    return float(sps.t.sf(t1, n - 1))


def unexplained_within_share(d, g, tolerance: float, rng=None) -> tuple[float, float]:
    """(p of ``U > -tolerance |G|``, p of ``U < +tolerance |G|``) for per-seed gains d and
    overlap-predicted gains g (module docstring): each the larger of the sign-flip and the
    skewness-corrected t p-values; both <= alpha: equivalence shown."""
    d = np.asarray(d, dtype=float)
    u = d - np.asarray(g, dtype=float)
    band = float(tolerance) * (1.0 if d.mean() >= 0 else -1.0) * d
    out = []
    for x in (u + band, band - u):
        flip = paired_mean_test(x, "greater", confidence=None, rng=rng).p_value
        out.append(max(float(flip), skew_corrected_t_p(x)))
    return out[0], out[1]


def _ci(values, n_boot, gen, confidence_level):
    res = percentile_t_ci(values, n_resamples=n_boot, confidence_level=confidence_level,
                          rng=gen)
    return [float(res.ci_low), float(res.ci_high)]


def explained_gain(phi, vex, groups, seeds, n_boot: int = 2000, rng=None,
                   confidence_level: float = 0.95, tolerance: float = 0.25,
                   fit_rows=None) -> ExplainedGain:
    """Leave-one-seed-out ψ-predicted gain and the unexplained part, with seed-bootstrap CIs.

    phi, vex, groups: (n,) Φ, Vex and seed of every run (ψ's training runs and the claim's).
    seeds: one ``(seed, policy_row, draw_rows)`` per paired seed of the claim -- row indices
    into those arrays (the policy run and the seed's matched-random draws).  At least 2.
    fit_rows: (k,) rows ψ̂ may be fitted on; default every row but the claim's policy runs.
    confidence_level: 1 − α; G and G_pred get two-sided CIs at it, the unexplained part the
      ``1 − 2α`` CI of the equivalence test (two one-sided tests at α).
    tolerance: share of |G| the unexplained part's CI must lie within.
    """
    phi = np.asarray(phi, dtype=float)
    vex = np.asarray(vex, dtype=float)
    groups = np.asarray(groups)
    if not (phi.shape == vex.shape == groups.shape) or phi.ndim != 1:
        raise InputError("phi, vex and groups must be (n,) arrays of one run each",
                         column="phi", fix="pass one Φ, Vex and seed per run")
    if not (np.isfinite(phi).all() and np.isfinite(vex).all()):
        raise InputError("phi or vex holds NaN/inf", column="vex",
                         fix="every run of the fit needs a finite Φ and Vex")
    if not tolerance >= 0:
        raise InputError(f"tolerance = {tolerance}", column="unexplained_tolerance",
                         fix="a non-negative share of the gain, e.g. 0.25")
    if not 0.5 < confidence_level < 1.0:
        raise InputError(f"confidence_level = {confidence_level}", column="confidence_level",
                         fix="1 - alpha, e.g. 0.95")
    seeds = [(s, int(p), [int(i) for i in draws]) for s, p, draws in seeds if len(draws)]
    if len(seeds) < 2:
        raise NotEstimable(f"{len(seeds)} seed(s) with a policy run and draws: a CI over "
                           "seeds needs at least 2", column="seed",
                           fix="replay the policy and its draws for more seeds")
    fit = np.ones(phi.size, dtype=bool)
    if fit_rows is None:
        fit[[p for _, p, _ in seeds]] = False
    else:
        fit[:] = False
        fit[np.asarray(fit_rows, dtype=int)] = True
    rows = []
    for seed, pol, draws in seeds:
        train = fit & (groups != seed)
        if np.unique(phi[train]).size < 2:
            raise NotEstimable(f"holding out seed {seed} leaves a constant Φ: ψ cannot be "
                               "fitted leave-one-seed-out", column="phi",
                               fix="calibration needs draws with different overlap in "
                                   "every other seed")
        x, y = _isotonic(phi[train], vex[train])
        g_pred = float(np.mean(_interp(x, y, phi[draws])) - _interp(x, y, phi[pol]))
        d = float(np.mean(vex[draws]) - vex[pol])
        rows.append(SeedPrediction(seed=seed, d=d, g_pred=g_pred, phi_policy=float(phi[pol]),
                                   phi_mr_mean=float(np.mean(phi[draws])), n_draws=len(draws)))
    d = np.array([r.d for r in rows])
    g = np.array([r.g_pred for r in rows])
    gen = as_generator(rng)
    gain_ci = _ci(d, n_boot, gen, confidence_level)
    g_ci = _ci(g, n_boot, gen, confidence_level)
    u = d - g
    eq_level = 1.0 - 2.0 * (1.0 - confidence_level)
    u_ci = _ci(u, n_boot, gen, eq_level)
    gain = float(d.mean())
    tol_abs = float(tolerance) * abs(gain)
    predicts = bool(math.isfinite(g_ci[0]) and g_ci[0] > 0)
    p_eq = max(unexplained_within_share(d, g, tolerance, gen))
    within = bool(tol_abs > 0 and p_eq <= 1.0 - confidence_level)
    return ExplainedGain(
        n_seeds=len(rows), gain=gain, gain_ci=gain_ci, g_pred=float(g.mean()), g_pred_ci=g_ci,
        unexplained=float(u.mean()), unexplained_ci=u_ci, tolerance=float(tolerance),
        tolerance_abs=tol_abs, confidence_level=float(confidence_level),
        equivalence_level=float(eq_level), n_fit_runs=int(fit.sum()), p_equivalence=p_eq,
        predicts_gain=predicts, within_tolerance=within, explained=predicts and within,
        per_seed=rows, n_boot=int(n_boot),
        method=("psi isotonic, fitted on "
                + ("every run but the claim's policy runs" if fit_rows is None
                   else f"{int(fit.sum())} runs that cannot carry the policy's effect")
                + ", refitted without each seed (leave-one-seed-out); g_pred per seed = mean psi(draw Phi) - "
                "psi(policy Phi); percentile-t bootstrap over seeds, "
                f"{int(n_boot)} resamples; unexplained part by equivalence inside +-tolerance x "
                "|G| (TOST on the per-seed combinations, each side by the studentized sign-flip "
                f"test and the skewness-corrected t, all at alpha; p = {p_eq:.4g})"))
