"""tools/level_power_bound.py: its closed forms agree with brute force, its H0 policy is the
study's "one more draw", and on a small simulation H0 restricted to campaigns with no policy
run in A passes the gate as often as H1, whose power stays under the bound."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate
from scipy import stats as sps

from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
bound = load_script(ROOT / "tools" / "level_power_bound.py", "level_power_bound")
study = load_script(ROOT / "tools" / "inference_study.py", "inference_study")


def _run_noise_with_tail(rng, noise, size):
    """Runs drawn by the inference study's own model, with A read off each run: lognormal
    noise is in its upper decile exactly when it exceeds exp(s z - s^2 / 2)."""
    x = bound.run_noise(rng, noise, size)
    s = bound.sigma_of(noise)
    return x, x > math.exp(s * sps.norm.isf(bound.TAIL_SHARE) - 0.5 * s * s)


def test_bursty_gain_is_a_burst_free_run_against_the_study_mean():
    # the study's bursty runs have mean 1 and a burst-free run mean 1 / 1.3
    assert bound.avoided_gain("bursty") == pytest.approx(1.0 - 1.0 / 1.3, abs=1e-12)
    rng = np.random.default_rng(1)
    x = bound.run_noise(rng, "bursty", 400_000)
    calm = bound.h1_policy_noise(rng, "bursty", 400_000)
    assert 1.0 - calm.mean() / x.mean() == pytest.approx(bound.avoided_gain("bursty"), abs=0.005)


@pytest.mark.parametrize("noise, gain", [("lognormal 0.8", 0.2389), ("lognormal 0.35", 0.0842)])
def test_lognormal_gain_matches_integration_and_the_study_runs(noise, gain):
    s = bound.sigma_of(noise)
    cut = math.exp(s * sps.norm.isf(bound.TAIL_SHARE) - 0.5 * s * s)
    pdf = sps.lognorm(s, scale=math.exp(-0.5 * s * s)).pdf
    below = integrate.quad(lambda x: x * pdf(x), 0.0, cut)[0]
    assert 1.0 - below / (1.0 - bound.TAIL_SHARE) == pytest.approx(
        bound.avoided_gain(noise), abs=1e-6)
    assert bound.avoided_gain(noise) == pytest.approx(gain, abs=1e-4)
    x, in_tail = _run_noise_with_tail(np.random.default_rng(2), noise, 400_000)
    assert in_tail.mean() == pytest.approx(bound.TAIL_SHARE, abs=0.002)
    assert 1.0 - x[~in_tail].mean() / x.mean() == pytest.approx(bound.avoided_gain(noise),
                                                                 abs=0.004)


@pytest.mark.parametrize("noise", bound.DESIGNS)
def test_h0_policy_is_one_more_draw_and_h1_avoids_the_tail(noise):
    rng = np.random.default_rng(3)
    x, in_tail = bound.h0_policy_noise(rng, noise, 50_000)
    assert in_tail.mean() == pytest.approx(bound.TAIL_SHARE, abs=0.005)
    assert sps.ks_2samp(x, bound.run_noise(rng, noise, 50_000)).pvalue > 0.01
    calm = bound.h1_policy_noise(rng, noise, 50_000)
    assert calm.mean() == pytest.approx(1.0 - bound.avoided_gain(noise), rel=0.01)
    if noise != "bursty":
        s = bound.sigma_of(noise)
        assert calm.max() <= math.exp(s * sps.norm.isf(bound.TAIL_SHARE) - 0.5 * s * s)


def test_bound_divides_the_level_by_the_chance_that_no_policy_run_is_in_a():
    rng = np.random.default_rng(4)
    for n in (5, 10):
        _, in_tail = bound.h0_policy_noise(rng, "bursty", (20_000, n))
        clean = float((~in_tail.any(axis=1)).mean())
        se = math.sqrt(clean * (1.0 - clean) / 20_000)
        assert 0.035 / bound.power_bound(0.035, n) == pytest.approx(clean, abs=3 * se)
    assert bound.power_bound(0.5, 20) == 1.0
    assert bound.seeds_where_bound_lifts(0.035) == 32
    assert bound.power_bound(0.035, 31) < 1.0 <= bound.power_bound(0.035, 32)


def test_h0_without_a_policy_run_in_a_passes_as_h1_and_h1_power_stays_under_the_bound():
    r = bound.measure_cell(np.random.default_rng([0, 32]), 800, 10, 5, "bursty")
    assert r["h0_count"] == math.ceil(800 / 0.9 ** 10)
    assert abs(r["given_clean"] - r["power"]) <= 3 * math.hypot(r["given_clean_se"],
                                                                 r["power_se"])
    assert r["power"] - r["bound"] <= 3 * math.hypot(r["power_se"], r["bound_se"])
    # H0 is the study's "one more draw" cell: the gate passes it as often here as there
    pol, draws = study.campaigns(np.random.default_rng(5), 800, 10, 5, "bursty", "one more draw")
    level = float(study.paired_gate(draws.mean(2) - pol)[0].mean())
    assert abs(r["level"] - level) <= 3 * math.hypot(r["level_se"], bound.rate_se(level, 800))
    # ... well above 0.035, and the power against the burst-free scheduler well above what a
    # level of 0.035 allows (0.100)
    assert r["level"] > 0.06 and r["power"] > 0.2
