"""tools/variance_floor_study.py: each variant is the paired t on d with the variance the
docstring names, checked on single campaigns against a hand computation."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from tools.variance_floor_study import passes


def _hand(pol, draws, floor_kind, less):
    n, m = draws.shape
    dbar = draws.mean(axis=1)
    d = dbar - pol
    s2 = d.var(ddof=1)
    s2_draw = sum(((draws[s] - dbar[s]) ** 2).sum() for s in range(n)) / (n * (m - 1))
    floor = (s2_draw * (1 + 1 / m) if floor_kind == "null"
             else s2_draw * (1 / m + (pol ** 2).mean() / (dbar ** 2).mean()))
    var = s2 if less else max(s2, floor)
    t = d.mean() / math.sqrt(var / n)
    return bool(t > sps.t.ppf(0.975, n - 1) and d.mean() >= 0.005)


def _campaign(rng, n, m, policy_sigma, scale):
    level = 0.0654 * np.exp(0.2 * rng.standard_normal(n))
    draws = level[:, None] * np.exp(0.35 * rng.standard_normal((n, m)))
    pol = level * scale * np.exp(policy_sigma * rng.standard_normal(n))
    return pol, draws


def test_the_floors_are_the_variances_the_docstring_names():
    rng = np.random.default_rng(5)
    seen = {True: 0, False: 0}
    for _ in range(300):
        pol, draws = _campaign(rng, 10, 3, rng.choice([0.02, 0.35, 0.7]),
                               rng.choice([0.3, 0.6, 0.8, 1.0]))
        got = passes(pol[None], draws[None])
        log_d, log_p = np.log(draws), np.log(pol)
        resid = log_p - log_d.mean(axis=1)
        spread_d = (log_d - log_d.mean(axis=1, keepdims=True)) * math.sqrt(3 / 2)
        q1, q3 = np.quantile(spread_d.ravel(), [0.25, 0.75])
        sigma = (q3 - q1) / 1.349
        less = resid.var(ddof=1) / ((1 + 1 / 3) * sigma ** 2) < sps.chi2.ppf(0.05, 9) / 9
        seen[bool(less)] += 1
        d = draws.mean(axis=1) - pol
        t_pass = bool(d.mean() / math.sqrt(d.var(ddof=1) / 10) > sps.t.ppf(0.975, 9)
                      and d.mean() >= 0.005)
        assert bool(got["t"][0]) == t_pass
        assert bool(got["floor, null level"][0]) == _hand(pol, draws, "null", less)
        assert bool(got["floor, policy level"][0]) == _hand(pol, draws, "policy", less)
    assert seen[True] > 20 and seen[False] > 20      # both branches of the pre-test ran


def test_the_null_level_floor_withholds_a_pass_the_t_test_gives_a_lucky_policy():
    # draws with a burst each seed's mean carries; the policy's runs missed every burst
    rng = np.random.default_rng(0)
    n, m = 10, 5
    level = np.full(n, 0.0654)
    draws = level[:, None] * np.exp(0.35 * rng.standard_normal((n, m)) - 0.06)
    draws[:, 0] *= 4.0
    pol = level * np.exp(0.35 * rng.standard_normal(n) - 0.06) * 1.2
    got = passes(pol[None], draws[None])
    assert got["t"][0] and not got["floor, null level"][0]
