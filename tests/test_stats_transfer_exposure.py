"""Effect-size transfer (block bootstrap), effect correlation, exposure regression."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats

from evalkit.errors import InputError
from evalkit.runlog.io import Run
from evalkit.stats import (effect_correlation, effect_size_transfer, exposure,
                           exposure_regression)
from evalkit.stats.transfer import _weighted_quantile


def requests(n, effect, seed, stressed_share=0.0):
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0, 600, n))
    active = (t % 60) < 8
    lat = rng.lognormal(0, 0.4, n) * np.where(active, effect, 1.0)
    stressed = active | (rng.uniform(size=n) < stressed_share)
    return pd.DataFrame({"latency_s": lat, "t_s": t, "active": active, "stressed": stressed})


def test_weighted_quantile_equals_numpy_on_expanded_sample():
    rng = np.random.default_rng(0)
    v = np.sort(rng.normal(size=40))
    w = rng.integers(0, 4, size=(25, 40))
    got = _weighted_quantile(v, w, 0.95)
    for row, g in zip(w, got):
        assert g == pytest.approx(np.quantile(np.repeat(v, row), 0.95))
    inf_tail = _weighted_quantile(np.array([1.0, 2.0, np.inf]), np.ones((1, 3)), 0.95)
    assert np.isinf(inf_tail[0])


def test_transfer_rho_and_fraction():
    h, r = requests(4000, 2.0, 1), requests(4000, 1.4, 2)
    res = effect_size_transfer(h, r, n_boot=400, rng=3)
    for df, est in ((h, res.harness), (r, res.real)):
        a, i = df.latency_s[df.active], df.latency_s[~df.active]
        assert est.rho == pytest.approx(np.quantile(a, 0.95) / np.quantile(i, 0.95))
        assert est.ci_low < est.rho < est.ci_high and est.n_blocks == 20
        assert est.contaminated is False
    assert res.transfer_fraction == pytest.approx((res.real.rho - 1) / (res.harness.rho - 1))
    assert res.transferred and "transferred" in res.verdict
    again = effect_size_transfer(h, r, n_boot=400, rng=3)
    assert again.real.ci_low == res.real.ci_low
    json.dumps(res.to_dict(), allow_nan=False)


def test_no_effect_does_not_transfer_and_contamination_flag():
    h = requests(3000, 2.0, 4)
    r = requests(3000, 1.0, 5, stressed_share=0.2)
    res = effect_size_transfer(h, r, n_boot=300, rng=1)
    assert res.real.contaminated and res.real.contamination > 0.05
    assert "contaminated" in res.verdict
    plain = effect_size_transfer(h, r.drop(columns="stressed"), n_boot=300, rng=1)
    assert plain.real.contamination is None and "not checked" in plain.real.contamination_note
    assert plain.real.ci_low < 1 < plain.real.ci_high and not plain.transferred


def test_transfer_bad_input():
    h = requests(500, 2.0, 1)
    with pytest.raises(InputError, match="latency_s"):
        effect_size_transfer(h.drop(columns="latency_s"), h)
    with pytest.raises(InputError, match="no active"):
        effect_size_transfer(h, h.assign(active=False))


def test_effect_correlation_matches_scipy_permutation():
    x = np.array([1.2, 0.4, 2.5, 1.9, 0.9])
    y = np.array([0.5, 0.1, 1.4, 0.6, 0.7])

    def pearson(a, b, axis=-1):
        a = a - a.mean(axis, keepdims=True)
        b = b - b.mean(axis, keepdims=True)
        return (a * b).sum(axis) / np.sqrt((a * a).sum(axis) * (b * b).sum(axis))

    for alt in ("two-sided", "greater"):
        res = effect_correlation(x, y, alternative=alt)
        ref = stats.permutation_test((x, y), pearson, permutation_type="pairings",
                                     n_resamples=np.inf, alternative=alt, vectorized=True)
        assert res.exact and res.null_size == 120
        assert res.pearson == pytest.approx(stats.pearsonr(x, y)[0])
        assert res.pearson_p == pytest.approx(ref.pvalue)
        rx, ry = stats.rankdata(x), stats.rankdata(y)
        ref_s = stats.permutation_test((rx, ry), pearson, permutation_type="pairings",
                                       n_resamples=np.inf, alternative=alt, vectorized=True)
        assert res.spearman == pytest.approx(stats.spearmanr(x, y)[0])
        assert res.spearman_p == pytest.approx(ref_s.pvalue)


def test_effect_correlation_small_or_mismatched():
    few = effect_correlation([1.0, 2.0, 3.0], [1.0, 3.0, 2.0])
    assert not few.estimable and "at least 4" in few.reason
    with pytest.raises(InputError, match="only in real"):
        effect_correlation({"a": 1, "b": 2, "c": 3, "d": 4}, {"a": 1, "b": 2, "c": 3, "e": 4})


def make_run(merge_starts, d=8.0):
    arrival = np.arange(20.0, 100.0, 1.0)
    req = pd.DataFrame({"arrival_s": arrival, "sent_s": arrival, "end_s": arrival + 0.5,
                        "ok": True})
    merges = pd.DataFrame({"start_s": merge_starts, "end_s": np.asarray(merge_starts) + d})
    meta = {"run_id": "r1", "horizon_s": 100.0, "merge_duration_s": d}
    return Run(path=Path("r1"), meta=meta, requests=req, merges=merges)


def test_exposure_of_a_run():
    # a window before the first request (t = 5) is not observed (protocol pitfall 3)
    e = exposure(make_run([5.0, 30.0, 60.0]))
    assert e.windows_total == 3 and e.windows_observed == 2
    # requests [a, a + .5] overlapping [30, 38] or [60, 68]: arrivals 30..37 and 60..67
    assert e.exposure_requests == pytest.approx(16 / 80)
    assert (e.span_start, e.span_end) == (20.0, 99.5)       # first arrival .. last end
    assert e.exposure_time == pytest.approx(16 / 79.5)
    json.dumps(e.to_dict(), allow_nan=False)


def test_exposure_regression_matches_statsmodels_and_flags():
    x = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    v = 0.02 + 0.5 * x + np.array([0.001, -0.002, 0.0, 0.002, -0.001])
    r = exposure_regression(v, x)
    ref = sm.OLS(v, sm.add_constant(x)).fit()
    assert r.r_squared == pytest.approx(ref.rsquared) and r.slope == pytest.approx(ref.params[1])
    assert r.p_value == pytest.approx(ref.pvalues[1]) and r.explains_v
    noisy = exposure_regression([0.3, 0.1, 0.25, 0.05, 0.2], x)
    assert not noisy.explains_v
    flat = exposure_regression(v, [0.2] * 5)
    assert not flat.estimable and "constant" in flat.reason
    with pytest.raises(InputError):
        exposure_regression([0.1, 0.2], [0.1, 0.2])


def test_blocks_never_span_runs_and_one_block_gives_no_ci():
    """Short runs pooled together: with a 'run' column each run is its own block, so the CI is
    a real interval; a single block yields no CI rather than a degenerate point."""
    import numpy as np
    import pandas as pd

    from evalkit.stats import effect_size_transfer

    gen = np.random.default_rng(5)
    frames = []
    for run in range(12):
        t = np.sort(gen.uniform(0, 20, 60))
        active = (t % 10) < 3
        lat = gen.lognormal(0, 0.3, t.size) * np.where(active, 1.5, 1.0)
        frames.append(pd.DataFrame({"run": f"r{run}", "t_s": t, "latency_s": lat,
                                    "active": active}))
    pooled = pd.concat(frames, ignore_index=True)
    res = effect_size_transfer(pooled, pooled, n_boot=500, rng=1)
    assert res.real.n_blocks == 12
    assert res.real.ci_low < res.real.rho < res.real.ci_high
    single = effect_size_transfer(pooled.drop(columns="run"), pooled.drop(columns="run"),
                                  n_boot=500, rng=1)
    assert single.real.n_blocks == 1
    assert np.isnan(single.real.ci_low) and np.isnan(single.real.ci_high)
    assert not single.transferred and "single time block" in single.verdict
