"""Anytime-valid sequential test of within-seed exchangeability, by betting.

Design as :mod:`evalkit.stats.randomisation`: seed s has one policy run and ``m_s >= 1``
matched-random draws, ``d_s = mean(draws_s) - policy_s`` (positive favours the policy).
Under the null (the policy run is one more random placement, independently per seed) the
label "policy" is uniform over the seed's ``m_s + 1`` runs given their values, so ``d_s`` is
uniform over the ``m_s + 1`` label values ``d_s(j)``: conditional mean 0 and known bounds
``lo_s = min_j d_s(j) <= 0 <= hi_s = max_j d_s(j)``.

Two one-sided bets are placed seed by seed.  The "greater" bettor stakes a fraction
``lambda_s`` of its wealth on ``x_s = d_s / |lo_s|`` (>= -1), the "less" bettor on
``y_s = -d_s / hi_s`` (>= -1); a seed whose runs all tie gives ``x_s = y_s = 0``.  The stake
is predictable (chosen from earlier seeds only), aGRAPA-style (Waudby-Smith & Ramdas): the
ratio of the running first to second moment of the earlier outcomes, with one pseudo-outcome
of second moment 1 as prior, clipped to ``[0, BET_CAP]``::

    lambda_s = clip(sum_{i<s} x_i / (1 + sum_{i<s} x_i^2), 0, BET_CAP)
    K_s = prod_{i<=s} (1 + lambda_i x_i)

Each ``K`` is a nonnegative martingale with ``K_0 = 1`` under the null, and so is the mixture
``(K^+ + K^-) / 2`` (two-sided).  Ville's inequality: ``P(sup_s K_s >= 1/alpha) <= alpha``,
however often one looks and whenever one stops.  The anytime-valid p-value is
``min(1, 1 / max_s K_s)``.

Confidence sequence for the gain ``delta`` under the shift model (policy = random placement
improved by delta): the test of "policy + delta is exchangeable with the draws" is run for
every delta; the two-sided 1 - alpha sequence after seed t holds the deltas whose mixture
e-process has not reached ``1/alpha`` by t (reported as the hull of a grid refined by
bisection at its edges).  Shifting the policy by delta moves label value j linearly:
``d_s(j; delta) = d_s(j) + delta c_j`` with ``c_0 = -1`` and ``c_j = 1/m_s`` otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from evalkit.errors import InputError
from evalkit.stats._result import ResultMixin, check_alternative
from evalkit.stats.randomisation import _as_design, seed_label_values

__all__ = ["BET_CAP", "SequentialResult", "anytime_e_process", "anytime_test",
           "label_values_equal_m"]

BET_CAP = 0.75          # the stake never exceeds 3/4 of the wealth: a seed costs <= 4x
CS_GRID = 129
CS_BISECT = 40
_REL_TIE = 1e-12


def _check_alpha(alpha) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) \
            or not 0.0 < float(alpha) < 1.0:
        raise InputError(f"alpha must lie in (0, 1), got {alpha!r}", column="alpha",
                         fix="use e.g. 0.05")
    return float(alpha)


def bet_outcomes(vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Outcomes of the two bets from label values.

    vals: (..., m + 1) label values ``d_s(j)``, j = 0 the observed labelling.
    Returns ``x`` (..., ) = d / |lo| and ``y`` (..., ) = -d / hi; 0 where the runs tie.
    """
    d = vals[..., 0]
    lo, hi = vals.min(axis=-1), vals.max(axis=-1)
    scale = 1.0 + np.abs(vals).max(axis=-1)
    tied = (hi - lo) <= _REL_TIE * scale
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(tied | (-lo <= 0), 0.0, d / -lo)
        y = np.where(tied | (hi <= 0), 0.0, -d / hi)
    return x, y


def bet_wealth(x: np.ndarray, cap: float = BET_CAP) -> tuple[np.ndarray, np.ndarray]:
    """Wealth of the aGRAPA bettor on outcomes ``x`` (..., n) (each >= -1).

    Returns ``(wealth, stakes)``, both (..., n): wealth after each seed, stake placed on it.
    """
    x = np.asarray(x, dtype=float)
    wealth = np.empty_like(x)
    stakes = np.empty_like(x)
    s1 = np.zeros(x.shape[:-1])
    s2 = np.zeros(x.shape[:-1])
    k = np.ones(x.shape[:-1])
    for t in range(x.shape[-1]):
        lam = np.clip(s1 / (1.0 + s2), 0.0, cap)
        xt = x[..., t]
        k = k * (1.0 + lam * xt)
        wealth[..., t] = k
        stakes[..., t] = lam
        s1 = s1 + xt
        s2 = s2 + xt * xt
    return wealth, stakes


def e_process_from_values(vals: np.ndarray, alternative: str = "two-sided",
                          cap: float = BET_CAP) -> np.ndarray:
    """E-process (..., n) from label values (..., n, m + 1) of seeds in execution order."""
    x, y = bet_outcomes(vals)
    if alternative == "greater":
        return bet_wealth(x, cap)[0]
    if alternative == "less":
        return bet_wealth(y, cap)[0]
    return 0.5 * (bet_wealth(x, cap)[0] + bet_wealth(y, cap)[0])


def label_values_equal_m(policy: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """Label values for simulations with the same m everywhere.

    policy: (..., n); draws: (..., n, m) -> (..., n, m + 1), index 0 = the policy run.
    """
    v = np.concatenate((policy[..., None], draws), axis=-1)
    m = draws.shape[-1]
    return (v.sum(axis=-1, keepdims=True) - (m + 1) * v) / m


def anytime_e_process(policy, draws, alternative: str = "two-sided") -> np.ndarray:
    """Simulation helper: e-processes of many campaigns at once.

    policy: (R, n) policy V per campaign and seed (execution order); draws: (R, n, m).
    Returns (R, n).
    """
    check_alternative(alternative)
    pol = np.asarray(policy, dtype=float)
    dr = np.asarray(draws, dtype=float)
    if dr.ndim != pol.ndim + 1 or dr.shape[:-1] != pol.shape or dr.shape[-1] < 1:
        raise InputError(f"draws of shape {dr.shape} do not match policy {pol.shape}",
                         column="draws", fix="pass policy (R, n) and draws (R, n, m), m >= 1")
    return e_process_from_values(label_values_equal_m(pol, dr), alternative)


# ----------------------------------------------------------------------------- CS

def _shift_slopes(m: np.ndarray) -> list[np.ndarray]:
    return [np.concatenate(([-1.0], np.full(int(k), 1.0 / k))) for k in m]


def _running_rejected(vals, slopes, deltas: np.ndarray, alpha: float) -> np.ndarray:
    """(G, n) bool: two-sided mixture e-process at shift delta has reached 1/alpha by seed t."""
    n = len(vals)
    x = np.empty((deltas.size, n))
    y = np.empty((deltas.size, n))
    for s in range(n):
        shifted = vals[s][None, :] + deltas[:, None] * slopes[s][None, :]
        x[:, s], y[:, s] = bet_outcomes(shifted)
    e = 0.5 * (bet_wealth(x)[0] + bet_wealth(y)[0])
    return np.maximum.accumulate(e >= 1.0 / alpha, axis=1)


def _confidence_sequence(vals, m, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Running two-sided 1 - alpha confidence sequence (n,), (n,) for the gain delta."""
    slopes = _shift_slopes(m)
    d = np.array([v[0] for v in vals])
    spread = max(float(np.max([v.max() - v.min() for v in vals])), 1e-12)
    centre = float(d.mean())
    half = float(np.max(np.abs(d - centre))) + spread
    n = len(vals)
    for _ in range(8):                          # widen until both grid ends are rejected
        grid = np.linspace(centre - half, centre + half, CS_GRID)
        rej = _running_rejected(vals, slopes, grid, alpha)
        if rej[0, -1] and rej[-1, -1]:
            break
        half *= 4.0
    kept = ~rej                                 # (G, n)
    any_kept = kept.any(axis=0)
    first = np.where(any_kept, kept.argmax(axis=0), 0)
    last = np.where(any_kept, grid.size - 1 - kept[::-1].argmax(axis=0), 0)
    # bisect every edge at once: inner is kept, outer rejected (at that edge's own seed t)
    inner = np.concatenate((grid[first], grid[last]))
    outer_idx = np.concatenate((first - 1, last + 1))
    open_end = (outer_idx < 0) | (outer_idx >= grid.size) | ~np.tile(any_kept, 2)
    outer = grid[np.clip(outer_idx, 0, grid.size - 1)]
    cols = np.tile(np.arange(n), 2)
    for _ in range(CS_BISECT):
        mid = 0.5 * (inner + outer)
        hit = _running_rejected(vals, slopes, mid, alpha)[np.arange(mid.size), cols]
        outer = np.where(hit, mid, outer)
        inner = np.where(hit, inner, mid)
    low, high = inner[:n].copy(), inner[n:].copy()
    low[open_end[:n]] = -math.inf
    high[open_end[n:]] = math.inf
    low[~any_kept] = high[~any_kept] = math.nan     # every shift rejected: an empty sequence
    return low, high


# ----------------------------------------------------------------------------- result

@dataclass(frozen=True)
class SequentialResult(ResultMixin):
    """Anytime-valid betting test of T = mean_s (mean(draws_s) - policy_s).

    ``e_process``: running e-value after each seed (for ``alternative``); ``e_greater`` /
    ``e_less``: the two one-sided bettors' wealth; ``stakes_greater`` / ``stakes_less``: the
    predictable stakes.  ``p_value = min(1, 1 / max e)``, valid at any stopping time.
    ``decision``: "reject" once the e-process has reached ``1/alpha`` (``crossed_at`` seeds
    in), else "continue".  ``cs_low`` / ``cs_high``: the running two-sided 1 - alpha
    confidence sequence for the gain; ``ci_low`` / ``ci_high`` its value after the last seed.
    """

    statistic: float
    e_value: float
    e_max: float
    p_value: float
    alpha: float
    alternative: str
    decision: str
    crossed_at: int | None
    threshold: float
    n: int
    m: tuple
    e_process: tuple
    e_greater: tuple
    e_less: tuple
    stakes_greater: tuple
    stakes_less: tuple
    cs_low: tuple
    cs_high: tuple
    ci_low: float
    ci_high: float
    cs_method: str
    method: str
    bet_cap: float
    test: str = "anytime-valid within-seed betting"

    @property
    def rejected(self) -> bool:
        return self.decision == "reject"

    def futile(self, min_effect: float) -> bool:
        """The confidence sequence's upper bound lies below the smallest effect of interest."""
        return bool(math.isfinite(self.ci_high) and self.ci_high < float(min_effect))


def anytime_test(policy, draws, alternative: str = "two-sided", alpha: float = 0.05,
                 *, confidence_sequence: bool = True) -> SequentialResult:
    """Anytime-valid test of H0 "each seed's policy run is exchangeable with its draws".

    policy: (n,) V of each seed's policy run, **in execution order**; draws: n sequences,
    (m_s,) V of that seed's matched-random draws.  ``alternative``: "greater" (the policy's
    V is lower than its draws'), "less" or "two-sided" (the mixture of both bets).
    ``confidence_sequence``: False skips the (costlier) running confidence sequence.
    """
    check_alternative(alternative)
    alpha = _check_alpha(alpha)
    pol, dr = _as_design(policy, draws)
    m = np.array([d.size for d in dr], dtype=int)
    vals = [seed_label_values(p, d) for p, d in zip(pol, dr)]
    outcomes = [bet_outcomes(v) for v in vals]
    x = np.array([o[0] for o in outcomes], dtype=float)
    y = np.array([o[1] for o in outcomes], dtype=float)
    eg, sg = bet_wealth(x)
    el, sl = bet_wealth(y)
    e = {"greater": eg, "less": el, "two-sided": 0.5 * (eg + el)}[alternative]
    threshold = 1.0 / alpha
    hits = np.flatnonzero(e >= threshold)
    crossed = int(hits[0]) + 1 if hits.size else None
    e_max = max(1.0, float(e.max()))
    if confidence_sequence:
        cs_lo, cs_hi = _confidence_sequence(vals, m, alpha)
        cs_method = (f"two-sided {1 - alpha:g} confidence sequence: shifts whose mixture "
                     "e-process has not reached 1/alpha (test inversion under the shift model; "
                     f"grid of {CS_GRID} refined by {CS_BISECT} bisections at each edge)")
    else:
        cs_lo = cs_hi = np.full(pol.size, math.nan)
        cs_method = "not computed"
    d_obs = np.array([v[0] for v in vals])
    return SequentialResult(
        statistic=float(d_obs.mean()), e_value=float(e[-1]), e_max=e_max,
        p_value=min(1.0, 1.0 / e_max), alpha=alpha, alternative=alternative,
        decision="reject" if crossed is not None else "continue", crossed_at=crossed,
        threshold=threshold, n=int(pol.size), m=tuple(int(k) for k in m),
        e_process=tuple(float(v) for v in e), e_greater=tuple(float(v) for v in eg),
        e_less=tuple(float(v) for v in el), stakes_greater=tuple(float(v) for v in sg),
        stakes_less=tuple(float(v) for v in sl),
        cs_low=tuple(float(v) for v in cs_lo), cs_high=tuple(float(v) for v in cs_hi),
        ci_low=float(cs_lo[-1]), ci_high=float(cs_hi[-1]), cs_method=cs_method,
        method=(f"betting e-process on within-seed label ranks (aGRAPA stakes clipped to "
                f"[0, {BET_CAP:g}]"
                + ("; two-sided: mean of the two one-sided bettors" if alternative
                   == "two-sided" else "") + "); p = 1/max e, valid under optional stopping"),
        bet_cap=BET_CAP)
