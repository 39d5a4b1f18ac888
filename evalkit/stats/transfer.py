"""The naive active/inactive effect-size split, and the correlation of effects across conditions.

For a mechanism m, ``rho = p_q(latency | m active) / p_q(latency | m inactive)`` (q = 0.95).
Requests close in time share queue state, so they are not independent: the CI resamples
contiguous time blocks of ``block_s`` seconds (a block bootstrap), not single requests.

This split is biased both ways -- long requests overlap windows more often (rho > 1 with no
effect) and a merge's backlog slows the "inactive" group (rho -> 1) -- and is kept as the
naive reference only.  The audit measures transfer paired against the same requests in a
no-sync run: :mod:`evalkit.stats.transfer_paired`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from evalkit.errors import InputError
from evalkit.stats._result import ResultMixin, as_finite_1d, as_generator, check_alternative

_CHUNK_ELEMENTS = 1 << 22
MAX_EXACT_CONDITIONS = 9      # 9! = 362,880 pairings


def _weighted_quantile(v_sorted: np.ndarray, weights: np.ndarray, q: float) -> np.ndarray:
    """numpy's linear quantile of each row's resample, given as integer multiplicities.

    v_sorted (n,) ascending (may end in +inf for failed requests); weights (r, n) -> (r,).
    A quantile interpolating towards +inf is +inf; a row with no weight gives NaN.
    """
    cw = np.cumsum(weights, axis=1)
    total = cw[:, -1] if cw.shape[1] else np.zeros(weights.shape[0])
    h = (total - 1) * q
    lo_pos = np.floor(h)
    hi_pos = np.minimum(lo_pos + 1, total - 1)
    i_lo = np.minimum((cw <= lo_pos[:, None]).sum(axis=1), v_sorted.size - 1)
    i_hi = np.minimum((cw <= hi_pos[:, None]).sum(axis=1), v_sorted.size - 1)
    v_lo, v_hi = v_sorted[i_lo], v_sorted[i_hi]
    frac = h - lo_pos
    with np.errstate(invalid="ignore"):
        out = np.where((frac == 0) | (v_lo == v_hi), v_lo,
                       np.where(np.isinf(v_hi), np.inf, v_lo + frac * (v_hi - v_lo)))
    return np.where(total > 0, out, np.nan)


@dataclass(frozen=True)
class RhoEstimate(ResultMixin):
    """rho = p_q(active) / p_q(inactive) for one dataset with its block-bootstrap CI.

    ``contamination``: share of stressed requests in the inactive group (None when the data
    has no ``stressed`` column, see ``contamination_note``); ``contaminated`` when it exceeds
    ``1 - q`` — the inactive p_q is then itself stressed and rho collapses towards 1.
    ``n_boot_undefined``: replicates in which a group drew no requests (left out of the CI).
    """

    rho: float
    ci_low: float
    ci_high: float
    p_active: float
    p_inactive: float
    n_active: int
    n_inactive: int
    n_blocks: int
    block_s: float
    n_boot: int
    n_boot_undefined: int
    contamination: float | None
    contaminated: bool | None
    contamination_note: str
    ci_method: str


def _prepare(df, name: str):
    if df is None or not hasattr(df, "columns"):
        raise InputError(f"{name} must be a DataFrame", column=name,
                         fix="pass one row per request with latency_s, t_s, active")
    for col in ("latency_s", "t_s", "active"):
        if col not in df.columns:
            raise InputError(f"{name} lacks a column", column=col,
                             fix="pass one row per request with latency_s, t_s, active")
    lat = df["latency_s"].to_numpy(dtype=float)
    t = df["t_s"].to_numpy(dtype=float)
    if np.isnan(lat).any() or (lat < 0).any():
        raise InputError(f"{name}: latency_s holds NaN or negative values", column="latency_s",
                         fix="failed requests have latency +inf, never NaN")
    if not np.isfinite(t).all():
        raise InputError(f"{name}: t_s holds NaN/inf", column="t_s",
                         fix="every request needs its arrival time")
    if df["active"].isna().any():
        raise InputError(f"{name}: 'active' has missing values", column="active",
                         fix="mark every request active or inactive")
    active = df["active"].to_numpy(dtype=bool)
    for flag, label in ((True, "active"), (False, "inactive")):
        if not (active == flag).any():
            raise InputError(f"{name}: no {label} requests, rho is undefined", column="active",
                             fix=f"the data must contain requests with the mechanism {label}")
    stressed = None
    if "stressed" in df.columns:
        if df["stressed"].isna().any():
            raise InputError(f"{name}: 'stressed' has missing values", column="stressed",
                             fix="mark every request stressed or not")
        stressed = df["stressed"].to_numpy(dtype=bool)
    # Requests of different runs pooled together share no time line: a block never spans
    # two runs, so the optional 'run' column is part of the block key.
    run = (pd.factorize(df["run"])[0] if "run" in df.columns
           else np.zeros(lat.size, dtype=np.int64))
    return lat, t, active, stressed, run


def _rho_bootstrap(lat, t, active, run, q, block_s, n_boot, gen):
    """Point rho, and n_boot block-bootstrap replicates of rho (NaN where undefined)."""
    in_run = np.floor((t - t.min()) / block_s).astype(np.int64)
    key = run.astype(np.int64) * (int(in_run.max()) + 1) + in_run
    _, block = np.unique(key, return_inverse=True)        # non-empty blocks only
    n_blocks = int(block.max()) + 1
    groups = []
    for flag in (True, False):
        sel = active == flag
        order = np.argsort(lat[sel], kind="stable")
        groups.append((lat[sel][order], block[sel][order]))
    point = [float(_weighted_quantile(v, np.ones((1, v.size)), q)[0]) for v, _ in groups]
    reps = np.empty(n_boot)
    rows = max(1, _CHUNK_ELEMENTS // max(1, lat.size))
    for i in range(0, n_boot, rows):
        c = min(rows, n_boot - i)
        picks = gen.integers(0, n_blocks, size=(c, n_blocks))
        counts = np.zeros((c, n_blocks), dtype=np.int64)
        np.add.at(counts, (np.arange(c)[:, None], picks), 1)
        qa, qi = (_weighted_quantile(v, counts[:, b], q) for v, b in groups)
        with np.errstate(divide="ignore", invalid="ignore"):
            reps[i:i + c] = qa / qi
    with np.errstate(divide="ignore", invalid="ignore"):     # p_inactive = 0: the caller says why
        rho = np.float64(point[0]) / point[1]
    return rho, point, reps, n_blocks


def _rho_estimate(df, name, q, block_s, n_boot, confidence_level, gen):
    lat, t, active, stressed, run = _prepare(df, name)
    rho, (p_a, p_i), reps, n_blocks = _rho_bootstrap(lat, t, active, run, q, block_s, n_boot,
                                                     gen)
    if p_i == 0:
        raise InputError(f"{name}: the inactive p{q * 100:g} latency is 0, rho is undefined",
                         column="latency_s", fix="check latency units")
    ok = np.isfinite(reps)
    alpha = 1 - confidence_level
    # one block cannot show how rho varies: no CI rather than a point posing as one
    lo, hi = (np.quantile(reps[ok], [alpha / 2, 1 - alpha / 2]) if ok.any() and n_blocks > 1
              else (math.nan, math.nan))
    if stressed is None:
        frac, contaminated = None, None
        note = "no 'stressed' column: contamination of the inactive group was not checked"
    else:
        frac = float(stressed[~active].mean())
        contaminated = frac > 1 - q
        note = (f"{frac:.1%} of inactive requests are stressed (limit {1 - q:.0%})"
                + (": the inactive p95 is itself stressed, rho is biased towards 1"
                   if contaminated else ""))
    return RhoEstimate(
        rho=float(rho), ci_low=float(lo), ci_high=float(hi), p_active=p_a, p_inactive=p_i,
        n_active=int(active.sum()), n_inactive=int((~active).sum()), n_blocks=n_blocks,
        block_s=float(block_s), n_boot=int(n_boot), n_boot_undefined=int((~ok).sum()),
        contamination=frac, contaminated=contaminated, contamination_note=note,
        ci_method=f"block bootstrap (percentile), contiguous {block_s:g} s time blocks "
                  f"(within a run) resampled with replacement, {n_boot} replicates"
                  + ("" if n_blocks > 1 else "; one block only: no CI")), reps


@dataclass(frozen=True)
class TransferResult(ResultMixin):
    """Harness vs real rho for one mechanism and the transfer fraction
    ``(rho_real - 1) / (rho_harness - 1)`` (CI from the paired bootstrap replicates).
    ``transferred``: the real CI lies above 1; ``verdict`` says it in words."""

    mechanism: str
    q: float
    harness: RhoEstimate
    real: RhoEstimate
    transfer_fraction: float
    transfer_ci_low: float
    transfer_ci_high: float
    transferred: bool
    verdict: str
    confidence_level: float


def effect_size_transfer(harness_requests, real_requests, mechanism: str = "sync",
                         q: float = 0.95, block_s: float = 30.0, n_boot: int = 2000,
                         rng=None, confidence_level: float = 0.95) -> TransferResult:
    """rho in harness and real data; inputs are DataFrames with ``latency_s``, ``t_s``
    (arrival, s), boolean ``active`` (mechanism active for the request) and optionally
    boolean ``stressed`` and ``run`` (requests pooled from several runs: time blocks never
    cross runs)."""
    if not 0 < q < 1:
        raise InputError(f"q = {q} must lie in (0, 1)", column="q", fix="use 0.95")
    if not block_s > 0:
        raise InputError(f"block_s = {block_s} must be positive", column="block_s",
                         fix="use a block longer than the latency correlation time, e.g. 30 s")
    if int(n_boot) < 100:
        raise InputError(f"n_boot = {n_boot} is too few", column="n_boot", fix="use >= 1000")
    gen = as_generator(rng)
    harness, reps_h = _rho_estimate(harness_requests, "harness_requests", q, block_s,
                                    int(n_boot), confidence_level, gen)
    real, reps_r = _rho_estimate(real_requests, "real_requests", q, block_s, int(n_boot),
                                 confidence_level, gen)
    alpha = 1 - confidence_level
    if abs(harness.rho - 1) < 1e-12:
        frac, f_lo, f_hi = math.nan, math.nan, math.nan
    else:
        frac = (real.rho - 1) / (harness.rho - 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            f_reps = (reps_r - 1) / (reps_h - 1)
        f_reps = f_reps[np.isfinite(f_reps)]
        f_lo, f_hi = (np.quantile(f_reps, [alpha / 2, 1 - alpha / 2])
                      if f_reps.size and min(harness.n_blocks, real.n_blocks) > 1
                      else (math.nan, math.nan))
    transferred = bool(real.ci_low > 1)
    if real.contaminated:
        verdict = "not interpretable: the real inactive group is contaminated"
    elif transferred:
        verdict = "transferred: the real rho CI excludes 1"
    elif not np.isfinite(real.ci_low):
        verdict = "cannot be estimated: the real data form a single time block, no CI"
    elif np.isfinite(real.ci_high) and real.ci_high < 1:
        verdict = "did not transfer: the real rho CI lies below 1"
    else:
        verdict = "did not transfer: the real rho CI includes 1"
    return TransferResult(mechanism=mechanism, q=float(q), harness=harness, real=real,
                          transfer_fraction=float(frac), transfer_ci_low=float(f_lo),
                          transfer_ci_high=float(f_hi), transferred=transferred,
                          verdict=verdict, confidence_level=float(confidence_level))


@dataclass(frozen=True)
class CorrelationResult(ResultMixin):
    """Pearson and Spearman correlation of harness vs real effects across conditions, with
    permutation p-values (exact over all n! pairings up to n = 9, else Monte Carlo).
    Two-sided p follows scipy: ``min(1, 2 min(p_less, p_greater))``."""

    n: int
    conditions: list
    pearson: float
    pearson_p: float
    spearman: float
    spearman_p: float
    alternative: str
    exact: bool
    null_size: int
    estimable: bool
    reason: str


def _pair(harness_effects, real_effects):
    if isinstance(harness_effects, Mapping) or isinstance(real_effects, Mapping):
        if not (isinstance(harness_effects, Mapping) and isinstance(real_effects, Mapping)):
            raise InputError("pass both effects as mappings condition -> effect, or both as "
                             "arrays", column="real_effects", fix="use the same form for both")
        only_h = sorted(set(harness_effects) - set(real_effects), key=str)
        only_r = sorted(set(real_effects) - set(harness_effects), key=str)
        if only_h or only_r:
            raise InputError(f"conditions differ: only in harness {only_h}; only in real "
                             f"{only_r}", column="condition",
                             fix="measure every condition in both, or drop it from both")
        keys = sorted(harness_effects, key=str)
        x = as_finite_1d([harness_effects[k] for k in keys], "harness_effects")
        y = as_finite_1d([real_effects[k] for k in keys], "real_effects")
        return keys, x, y
    x = as_finite_1d(harness_effects, "harness_effects")
    y = as_finite_1d(real_effects, "real_effects")
    if x.size != y.size:
        raise InputError(f"{x.size} harness effects but {y.size} real effects",
                         column="real_effects", fix="one effect per condition in both")
    return list(range(x.size)), x, y


def _perm_null(x, y, perms):
    """Pearson r of x with y, and its null over the permutations perms (P, n) of y."""
    xc = x - x.mean()
    yc = y - y.mean()
    denom = math.sqrt(float(xc @ xc) * float(yc @ yc))
    r_obs = float(xc @ yc) / denom
    null = (yc[perms] @ xc) / denom
    tol = 1e-9 * max(1.0, abs(r_obs))
    return r_obs, null, tol


def effect_correlation(harness_effects, real_effects, alternative: str = "two-sided",
                       n_resamples: int = 100_000, rng=None) -> CorrelationResult:
    """Pearson and Spearman correlation across conditions with permutation p-values.

    Inputs: (n,) arrays in the same condition order, or mappings condition -> effect.
    Fewer than 4 conditions, or a constant effect, give ``estimable=False`` and a reason.
    """
    check_alternative(alternative)
    keys, x, y = _pair(harness_effects, real_effects)
    n = x.size
    nan = math.nan
    if n < 4:
        return CorrelationResult(n, keys, nan, nan, nan, nan, alternative, False, 0, False,
                                 f"only {n} conditions: a correlation needs at least 4")
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return CorrelationResult(n, keys, nan, nan, nan, nan, alternative, False, 0, False,
                                 "an effect is constant across conditions: correlation "
                                 "undefined")
    exact = n <= MAX_EXACT_CONDITIONS
    if exact:
        perms = np.array(list(itertools.permutations(range(n))), dtype=np.int64)
    else:
        gen = as_generator(rng)
        perms = np.argsort(gen.random((int(n_resamples), n)), axis=1)
    out = []
    from scipy import stats   # scipy.stats costs ~1 s to import: on first use

    for a, b in ((x, y), (stats.rankdata(x), stats.rankdata(y))):
        r, null, tol = _perm_null(a, b, perms)
        k_ge = int(np.count_nonzero(null >= r - tol))
        k_le = int(np.count_nonzero(null <= r + tol))
        if exact:
            p_g, p_l = k_ge / perms.shape[0], k_le / perms.shape[0]
        else:
            p_g, p_l = (k_ge + 1) / (perms.shape[0] + 1), (k_le + 1) / (perms.shape[0] + 1)
        p = {"greater": p_g, "less": p_l, "two-sided": min(1.0, 2 * min(p_g, p_l))}[alternative]
        out.append((r, p))
    return CorrelationResult(n, keys, out[0][0], out[0][1], out[1][0], out[1][1], alternative,
                             exact, int(perms.shape[0]), True, "")
