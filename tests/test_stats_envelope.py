"""Envelopes, placement gain, load matching, bootstrap and Holm."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from evalkit.errors import InputError
from evalkit.stats import (bootstrap_ci, fit_psi, holm, load_match, matched_random_envelope,
                           overlap_cost, placement_gain, proxy_envelope, sample_schedules)


def test_measured_envelope_per_seed_mean_and_band():
    draws = {1: [0.10, 0.20, 0.30], 2: [0.05, 0.15], 3: [0.4]}
    env = matched_random_envelope(draws)
    assert env.v_mr == {1: pytest.approx(0.2), 2: pytest.approx(0.1), 3: pytest.approx(0.4)}
    assert env.band_low[1] == pytest.approx(np.quantile([0.1, 0.2, 0.3], 0.05))
    assert env.single_draw_seeds == [3] and env.n_draws_total == 6
    df = pd.DataFrame({"seed": [1, 1, 1, 2, 2, 3],
                       "violation_rate": [0.1, 0.2, 0.3, 0.05, 0.15, 0.4]})
    assert matched_random_envelope(df).v_mr == env.v_mr
    json.dumps(env.to_dict(), allow_nan=False)
    with pytest.raises(InputError):
        matched_random_envelope({1: [0.1, np.nan]})


def test_proxy_envelope_matches_direct_computation():
    rng = np.random.default_rng(0)
    rs = np.sort(rng.uniform(0, 600, 5000))
    re = rs + rng.exponential(3, 5000)
    psi = fit_psi([1000.0, 2000.0, 3000.0], [0.0, 0.02, 0.05])
    env = proxy_envelope(psi, 0.03, 8, (0, 600), 8, 30, 90, rs, re, n=2000, rng=5)
    starts = sample_schedules(8, (0, 600), 8, 30, 90, 2000, rng=np.random.default_rng(5))
    phi = overlap_cost(starts, 8, rs, re).phi
    assert np.array_equal(env.phi, phi)
    assert env.mean == pytest.approx(0.03 + np.mean(np.interp(phi, psi.x, psi.y)))
    assert 0 <= env.frac_outside_calibration <= 1
    assert "phi" not in env.to_dict()
    with pytest.raises(InputError, match="never read as V = 0"):
        proxy_envelope(psi, None, 8, (0, 600), 8, 30, 90, rs, re, n=10)


def test_placement_gain_pairs_by_seed():
    mr = {1: 0.30, 2: 0.32, 3: 0.28, 4: 0.35, 5: 0.31, 6: 0.29}
    pol = {s: v - 0.05 for s, v in mr.items()}
    g = placement_gain(mr, pd.Series(pol))
    assert g.gain == pytest.approx(0.05) and g.test.p_value == 1 / 64
    assert g.ci_low > 0 and g.test.wins == 6
    json.dumps(g.to_dict(), allow_nan=False)
    with pytest.raises(InputError, match=r"only in v_mr_per_seed: \[6\]"):
        placement_gain(mr, {s: v for s, v in pol.items() if s != 6})
    with pytest.raises(InputError, match="at least 2"):
        placement_gain({1: 0.3}, {1: 0.2})


def summary(**kw):
    base = dict(seed=1, n_requests=1000, arrival_rate_achieved=5.0, prompt_tokens_total=10_000,
                output_tokens_total=5000, step_rate=2.0, violation_rate=0.05)
    base.update(kw)
    return base


def test_load_match_checks_and_vex():
    r = load_match(summary(violation_rate=0.08), summary())
    assert r.matched and r.vex == pytest.approx(0.03)
    assert {c.key for c in r.checks} == {"n_requests", "arrival_rate_achieved",
                                         "prompt_tokens_total", "output_tokens_total",
                                         "step_rate"}
    bad = load_match(summary(n_requests=990, step_rate=np.nan), summary())
    assert not bad.matched and bad.failed == ["n_requests"]
    assert bad.not_evaluable == ["step_rate"]
    step = [c for c in bad.checks if c.key == "step_rate"][0]
    assert step.status == "not evaluable" and not step.passed
    assert load_match(summary(step_rate=2.2), summary(), {"step_rate": 0.2}).matched
    json.dumps(bad.to_dict(), allow_nan=False)


def test_load_match_bad_input():
    with pytest.raises(InputError, match="missing"):
        load_match(summary(), None)
    with pytest.raises(InputError, match="seed"):
        load_match(summary(seed=2), summary())
    s = summary()
    del s["step_rate"]
    with pytest.raises(InputError, match="step_rate"):
        load_match(summary(), s)


def test_bootstrap_ci_close_to_scipy():
    x = np.random.default_rng(3).exponential(size=15)
    for method in ("BCa", "percentile"):
        mine = bootstrap_ci(x, n_resamples=40_000, method=method, rng=1)
        ref = stats.bootstrap((x,), np.mean, n_resamples=40_000, method=method,
                              rng=np.random.default_rng(2)).confidence_interval
        assert mine.ci_low == pytest.approx(ref.low, abs=0.03)
        assert mine.ci_high == pytest.approx(ref.high, abs=0.03)
    a = bootstrap_ci(x, rng=np.random.default_rng(8))
    b = bootstrap_ci(x, rng=np.random.default_rng(8))
    assert a.ci_low == b.ci_low
    assert bootstrap_ci(x, statistic=np.median, n_resamples=1000).statistic == np.median(x)
    flat = bootstrap_ci([1.0, 1.0, 1.0])
    assert flat.degenerate and flat.ci_low == flat.ci_high == 1.0
    with pytest.raises(InputError):
        bootstrap_ci([1.0])


def test_holm_matches_statsmodels():
    p = [0.01, 0.04, 0.03, 0.2]
    reject, adj = holm(p)
    ref = multipletests(p, method="holm")
    assert np.array_equal(reject, ref[0]) and np.allclose(adj, ref[1])
    assert np.allclose(adj, [0.04, 0.09, 0.09, 0.2])
    with pytest.raises(InputError):
        holm([0.1, 1.5])
