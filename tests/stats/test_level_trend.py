"""The level_trend diagnostic (evalkit/stats/level_trend.py) on hand-made seeds: slope, error
and p against scipy's least squares, the flag at alpha, the quarters' gains and its words, and
its rate without a trend."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from evalkit.document.words import level_trend_text
from evalkit.stats.floored import LOG_OFFSET
from evalkit.stats.level_trend import MIN_SEEDS, level_trend, level_trend_applies


def _lognormal(rng, sigma, size=None):
    return np.exp(rng.normal(-sigma ** 2 / 2, sigma, size))


def test_slope_its_error_and_p_are_scipys_least_squares():
    rng = np.random.default_rng(3)
    for n in (4, 9, 30):
        for _ in range(5):
            draws = [rng.gamma(2.0, 0.02, 3) for _ in range(n)]
            policy = rng.gamma(2.0, 0.02, n)
            res = level_trend(policy, draws, 0.05)
            offset = LOG_OFFSET * float(np.mean(np.concatenate(draws)))
            x = np.array([np.log(d + offset).mean() for d in draws])
            ref = sps.linregress(x, np.log(policy + offset) - x)
            assert res.slope == pytest.approx(ref.slope, rel=1e-9, abs=1e-12)
            assert res.se == pytest.approx(ref.stderr, rel=1e-9)
            one_sided = ref.pvalue / 2 if ref.slope > 0 else 1 - ref.pvalue / 2
            assert res.p_value == pytest.approx(one_sided, rel=1e-7, abs=1e-12)
            assert res.flagged == (ref.slope > 0 and one_sided <= 0.05)


def test_the_flag_is_at_alpha_inclusive():
    rng = np.random.default_rng(4)
    level = 0.05 * _lognormal(rng, 0.6, 12)
    draws = [lv * _lognormal(rng, 0.35, 3) for lv in level]
    policy = 0.05 * (level / 0.05) ** 1.3 * _lognormal(rng, 0.35, 12)
    p = level_trend(policy, draws, 0.05).p_value
    assert 0 < p < 0.5
    assert level_trend(policy, draws, p).flagged                       # p == alpha
    assert not level_trend(policy, draws, math.nextafter(p, 0.0)).flagged
    assert level_trend(policy, draws, math.nextafter(p, 1.0)).flagged


def test_the_quarters_gains_are_shares_of_their_draws_v():
    # 8 seeds: levels 1..8 (one draw each at the level), policy 0.5 x level in the light
    # seeds and 1.5 x level in the heavy ones; a quarter is 2 seeds
    levels = np.arange(1.0, 9.0)
    policy = np.where(levels <= 4, 0.5, 1.5) * levels
    res = level_trend(policy, [np.array([v]) for v in levels], 0.05)
    assert res.quarter == 2
    assert res.light_gain == pytest.approx(((1 + 2) - 0.5 * 3) / 3)
    assert res.heavy_gain == pytest.approx(((7 + 8) - 1.5 * 15) / 15)
    assert res.slope > 0 and res.flagged
    text = level_trend_text(res)
    assert "rises with the seed's level" in text
    assert "-50% of the draws' V over the 2 heaviest seeds and 50% over the 2 lightest" in text


def test_too_few_seeds_or_one_level_or_no_violations_state_nothing():
    few = level_trend([1.0] * (MIN_SEEDS - 1), [np.array([1.0, 2.0])] * (MIN_SEEDS - 1), 0.05)
    assert few.slope is None and not few.flagged and level_trend_text(few) == ""
    flat = level_trend([0.5, 1.0, 1.5, 2.0], [np.array([1.0, 3.0])] * 4, 0.05)
    assert flat.slope is None and level_trend_text(flat) == ""
    # levels a millionth apart (float noise in a replayed trace's V) are one level too
    rounded = level_trend([0.05, 0.06, 0.04, 0.05, 0.07, 0.05],
                          [np.full(3, 0.05 * (1 + 1e-6 * k)) for k in range(6)], 0.05)
    assert rounded.slope is None and not rounded.flagged
    # a policy run equal to its seed's one draw everywhere: a flat line, no residual, p = 1
    same = level_trend([0.01, 0.02, 0.04, 0.08], [np.array([v]) for v in (0.01, 0.02, 0.04,
                                                                            0.08)], 0.05)
    assert same.slope == 0.0 and same.se == 0.0 and same.p_value == 1.0 and not same.flagged
    zero = level_trend([0.0] * 5, [np.zeros(3)] * 5, 0.05)
    assert zero.slope is None and zero.heavy_gain is None and not zero.flagged


def test_without_a_trend_the_flag_errs_towards_silence():
    """One more draw or a fixed schedule at widely spread seed levels: the flag fires in at
    most alpha of campaigns (each seed's draw noise pulls the slope negative)."""
    rng = np.random.default_rng(8)
    for policy_sd in (0.8, 0.05):
        flags = 0
        for _ in range(400):
            level = 0.05 * _lognormal(rng, 0.6, 10)
            draws = [lv * _lognormal(rng, 0.8, 3) for lv in level]
            policy = level * _lognormal(rng, policy_sd, 10)
            flags += level_trend(policy, draws, 0.05).flagged
        assert flags / 400 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 400)


def test_runs_at_zero_in_light_seeds_do_not_make_a_trend():
    """Exchangeable binomial V (100 requests a run, 5 draws, seed log-spread 1, 20 seeds):
    light seeds' single runs hit 0 far more often than their draws' mean does; read against
    the mean, the flag fired in 0.12 of campaigns, against single draws it stays within
    alpha."""
    rng = np.random.default_rng(12)
    flags = 0
    for _ in range(400):
        level = np.minimum(0.0654 * _lognormal(rng, 1.0, 20), 1.0)
        draws = [rng.binomial(100, np.minimum(1.0, lv * _lognormal(rng, 0.35, 5))) / 100
                 for lv in level]
        policy = rng.binomial(100, np.minimum(1.0, level * _lognormal(rng, 0.35, 20))) / 100
        flags += level_trend(policy, draws, 0.05).flagged
    assert flags / 400 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 400)


def test_a_perfect_fit_with_a_positive_slope_is_flagged_with_p_0():
    # two levels, each seed's policy run at 1x and 2x its draw: the fit leaves no residual
    # (se = 0 exactly) and the slope, 0.504, is below 1: a trend as surely as a steeper one
    draws = [np.array([0.01])] * 2 + [np.array([0.04])] * 2
    res = level_trend([0.01, 0.01, 0.08, 0.08], draws, 0.05)
    assert res.se == 0.0 and 0 < res.slope < 1
    assert res.p_value == 0.0 and res.flagged
    flat = level_trend([0.01, 0.01, 0.04, 0.04], draws, 0.05)     # no trend, no residual
    assert flat.se == 0.0 and flat.slope == 0.0 and flat.p_value == 1.0 and not flat.flagged


def test_level_trend_applies_from_two_paired_seeds():
    assert level_trend_applies([0.05, 0.06]) and level_trend_applies(np.array([0.1, 0.2, 0.3]))
    assert not level_trend_applies([0.05]) and not level_trend_applies([])
