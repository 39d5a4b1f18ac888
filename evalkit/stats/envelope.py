"""Matched-random envelopes (measured and proxy) and the placement gain G = MR - V."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from evalkit.errors import InputError
from evalkit.stats._result import ResultMixin, as_generator, seed_series
from evalkit.stats.bootstrap import bootstrap_ci
from evalkit.stats.overlap import RequestIndex
from evalkit.stats.psi import PsiFit
from evalkit.stats.schedules import sample_schedules
from evalkit.stats.signflip import SignFlipResult, sign_flip_test

DEFAULT_QUANTILES = (0.05, 0.95)
_PROXY_CHUNK = 50_000


@dataclass(frozen=True)
class MeasuredEnvelope(ResultMixin):
    """Envelope from replayed matched-random draws.

    Per seed: ``v_mr`` (mean V over that seed's draws = V_MR(s)), ``n_draws`` and the
    ``band_low``/``band_high`` quantiles across its draws.  Pooled over all draws:
    ``mean`` and ``pooled_low``/``pooled_high``.  Seeds with one draw have a degenerate band;
    ``single_draw_seeds`` lists them.
    """

    seeds: list
    v_mr: dict
    n_draws: dict
    band_low: dict
    band_high: dict
    quantiles: tuple
    mean: float
    pooled_low: float
    pooled_high: float
    n_draws_total: int
    single_draw_seeds: list


def _draws_by_seed(draws, value_column: str) -> dict:
    if hasattr(draws, "columns"):
        for col in ("seed", value_column):
            if col not in draws.columns:
                raise InputError("matched-random draws table lacks a column", column=col,
                                 fix=f"pass a DataFrame with 'seed' and '{value_column}'")
        return {seed: group[value_column].to_numpy(dtype=float)
                for seed, group in draws.groupby("seed", sort=True)}
    if isinstance(draws, Mapping):
        return {seed: np.atleast_1d(np.asarray(v, dtype=float)) for seed, v in draws.items()}
    raise InputError("draws must be a mapping seed -> V of each draw, or a DataFrame",
                     column="draws", fix="group the matched-random runs by seed")


def matched_random_envelope(draws, quantiles=DEFAULT_QUANTILES,
                            value_column: str = "violation_rate") -> MeasuredEnvelope:
    """Measured envelope: ``draws`` maps seed -> V of each replayed matched-random draw
    (or a DataFrame with columns ``seed`` and ``value_column``)."""
    by_seed = _draws_by_seed(draws, value_column)
    if not by_seed:
        raise InputError("no matched-random draws", column="draws",
                         fix="replay matched-random draws for every seed")
    q_lo, q_hi = (float(q) for q in quantiles)
    v_mr, n_draws, lo, hi, singles = {}, {}, {}, {}, []
    for seed, values in sorted(by_seed.items(), key=lambda kv: str(kv[0])):
        if values.size == 0:
            raise InputError(f"seed {seed!r} has no matched-random draws", column="draws",
                             fix="replay at least one draw for every seed")
        if not np.all(np.isfinite(values)):
            raise InputError(f"seed {seed!r} has a NaN/inf V among its draws", column="draws",
                             fix="rerun or remove the broken draw explicitly")
        v_mr[seed] = float(values.mean())
        n_draws[seed] = int(values.size)
        lo[seed], hi[seed] = (float(v) for v in np.quantile(values, [q_lo, q_hi]))
        if values.size == 1:
            singles.append(seed)
    pooled = np.concatenate(list(by_seed.values()))
    p_lo, p_hi = np.quantile(pooled, [q_lo, q_hi])
    return MeasuredEnvelope(seeds=list(v_mr), v_mr=v_mr, n_draws=n_draws, band_low=lo,
                            band_high=hi, quantiles=(q_lo, q_hi), mean=float(pooled.mean()),
                            pooled_low=float(p_lo), pooled_high=float(p_hi),
                            n_draws_total=int(pooled.size), single_draw_seeds=singles)


@dataclass(frozen=True)
class ProxyEnvelope(ResultMixin):
    """Proxy envelope: V of ``n`` schedules drawn uniformly from F_K, predicted as
    ``V(no-sync) + psi(Phi(S))``.  ``mean`` is the proxy MR; ``quantile_values`` the band.
    ``frac_outside_calibration``: share of sampled Phi outside the Phi range psi was fitted
    on (psi is flat there: an extrapolation).  ``phi``/``v`` hold every sample."""

    mean: float
    quantiles: tuple
    quantile_values: tuple
    v_no_sync: float
    k: int
    n: int
    phi_mean: float
    phi_low: float
    phi_high: float
    frac_outside_calibration: float
    eps_cal: float
    method: str
    phi: np.ndarray = field(repr=False, default=None)
    v: np.ndarray = field(repr=False, default=None)
    _dict_exclude = ("phi", "v")


def proxy_envelope(psi_fit: PsiFit, v_no_sync, k, span, duration, min_gap, max_gap,
                   req_start, req_end, n: int = 100_000, rng=None,
                   quantiles=DEFAULT_QUANTILES) -> ProxyEnvelope:
    """Proxy MR: Phi of n uniform F_K schedules (against the no-sync run's request
    intervals ``req_start``/``req_end``) mapped through psi-hat, plus V(no-sync)."""
    if v_no_sync is None:
        raise InputError("V(no-sync) is missing", column="v_no_sync",
                         fix="replay the load-matched no-sync run for this seed; a missing "
                             "baseline is never read as V = 0")
    v0 = float(v_no_sync)
    if not math.isfinite(v0):
        raise InputError(f"V(no-sync) is {v0}", column="v_no_sync", fix="rerun the no-sync run")
    if not isinstance(psi_fit, PsiFit):
        raise InputError("psi_fit must be a PsiFit from fit_psi", column="psi_fit",
                         fix="fit psi with evalkit.stats.fit_psi first")
    gen = as_generator(rng)
    index = RequestIndex(req_start, req_end)
    phi = np.empty(int(n))
    for i in range(0, phi.size, _PROXY_CHUNK):
        c = min(_PROXY_CHUNK, phi.size - i)
        starts = sample_schedules(k, span, duration, min_gap, max_gap, c, gen)
        phi[i:i + c] = index.cost(starts, duration).sum(axis=1)
    v = v0 + psi_fit.predict(phi)
    qs = tuple(float(q) for q in quantiles)
    outside = (phi < psi_fit.x[0]) | (phi > psi_fit.x[-1])
    return ProxyEnvelope(
        mean=float(v.mean()), quantiles=qs, quantile_values=tuple(float(x) for x in
                                                                  np.quantile(v, qs)),
        v_no_sync=v0, k=int(k), n=int(phi.size), phi_mean=float(phi.mean()),
        phi_low=float(phi.min()), phi_high=float(phi.max()),
        frac_outside_calibration=float(outside.mean()), eps_cal=psi_fit.eps_cal,
        method="Phi of schedules sampled exactly uniformly from F_K, mapped through psi-hat, "
               "plus V(no-sync)", phi=phi, v=v)


def paired_by_seed(a, b, name_a: str, name_b: str):
    """Match two seed -> value maps; mismatched seed sets raise InputError naming seeds."""
    sa, sb = seed_series(a, name_a), seed_series(b, name_b)
    only_a = sorted(set(sa) - set(sb), key=str)
    only_b = sorted(set(sb) - set(sa), key=str)
    if only_a or only_b:
        raise InputError(f"seed sets differ: seeds only in {name_a}: {only_a}; only in "
                         f"{name_b}: {only_b}", column="seed",
                         fix="pair every seed in both conditions (rerun the missing runs) or "
                             "drop those seeds from both explicitly")
    seeds = sorted(sa, key=str)
    if len(seeds) < 2:
        raise InputError(f"only {len(seeds)} seed(s): a paired comparison needs at least 2",
                         column="seed", fix="replay more seeds (6 for a two-sided 5% test)")
    return seeds, np.array([sa[s] for s in seeds]), np.array([sb[s] for s in seeds])


@dataclass(frozen=True)
class PlacementGain(ResultMixin):
    """G = MR - V per seed and on average (positive: the policy beats random placement).

    ``test`` is the paired sign-flip test on the per-seed gains; ``ci_low``/``ci_high`` its
    inverted-test CI (``ci_method``); ``bootstrap_low``/``bootstrap_high`` a BCa seed bootstrap
    for comparison."""

    gain: float
    seeds: list
    per_seed: dict
    ci_low: float
    ci_high: float
    ci_method: str
    bootstrap_low: float
    bootstrap_high: float
    test: SignFlipResult


def placement_gain(v_mr_per_seed, v_policy_per_seed, alternative: str = "greater",
                   confidence_level: float = 0.95, n_resamples=None, rng=None) -> PlacementGain:
    """Paired placement gain over seeds; inputs map seed -> V (dict or pandas Series)."""
    seeds, mr, pol = paired_by_seed(v_mr_per_seed, v_policy_per_seed, "v_mr_per_seed",
                                    "v_policy_per_seed")
    gen = as_generator(rng)
    d = mr - pol
    test = sign_flip_test(d, alternative=alternative, n_resamples=n_resamples, rng=gen,
                          confidence_level=confidence_level)
    boot = bootstrap_ci(d, n_resamples=10_000, confidence_level=confidence_level, rng=gen)
    return PlacementGain(gain=float(d.mean()), seeds=seeds,
                         per_seed={s: float(x) for s, x in zip(seeds, d)},
                         ci_low=test.ci_low, ci_high=test.ci_high, ci_method=test.ci_method,
                         bootstrap_low=boot.ci_low, bootstrap_high=boot.ci_high, test=test)
