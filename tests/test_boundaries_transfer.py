"""Boundary values and brute-force references of effect-size transfer: the naive block
bootstrap, the effect correlation, the exposure regression, the paired and the guard-band
estimators, and the campaign-level request tables of the transfer evidence.

The bootstrap references redraw the same resampling from the same seed and compute every
replicate by expanding the resampled requests and calling ``numpy.quantile``, so intervals,
not only point estimates, are compared exactly."""

from __future__ import annotations

import inspect
import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

from evalkit.errors import InputError, NotEstimable
from evalkit.runlog.io import Run, read_run
from evalkit.stats import transfer as tr
from evalkit.stats import transfer_paired as tp
from evalkit.stats.exposure import EXPLAINS_V_R2, exposure, exposure_regression
from evalkit.stats.transfer import (MAX_EXACT_CONDITIONS, _weighted_quantile,
                                    effect_correlation, effect_size_transfer)

# ------------------------------------------------------------------ naive block bootstrap


def test_weighted_quantile_matches_numpy_at_several_levels():
    rng = np.random.default_rng(11)
    v = np.sort(rng.lognormal(size=12))
    w = rng.integers(0, 3, size=(40, 12))
    w[0] = 0
    w[1] = 0
    w[1, -1] = 1                                  # all weight on the largest value
    w[2] = 0
    w[2, 0] = 1                                   # all weight on the smallest value
    for q in (0.95, 0.5, 1 / 3, 0.05):
        got = _weighted_quantile(v, w, q)
        assert np.isnan(got[0])                   # a row with no weight
        for row, g in zip(w[1:], got[1:]):
            assert g == pytest.approx(np.quantile(np.repeat(v, row), q), rel=1e-13)


def test_weighted_quantile_with_a_failed_request_at_the_top():
    v = np.array([1.0, 2.0, np.inf])
    one = np.ones((1, 3))
    # (n - 1) q = 1 exactly: the order statistic 2, not interpolated towards +inf
    assert _weighted_quantile(v, one, 0.5)[0] == 2.0
    assert np.isinf(_weighted_quantile(v, one, 0.75)[0])       # between 2 and +inf
    assert _weighted_quantile(v, one, 0.25)[0] == 1.5
    both_inf = _weighted_quantile(np.array([1.0, np.inf, np.inf]), one, 0.75)
    assert np.isinf(both_inf[0])
    assert _weighted_quantile(np.array([3.0]), np.array([[2]]), 0.95)[0] == 3.0


def _naive_frame(seed, n=150, effect=1.5, horizon=300.0, runs=None, stressed=None):
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0, horizon, n))
    active = (t % 60) < 15
    lat = rng.lognormal(-0.5, 0.4, n) * np.where(active, effect, 1.0)
    df = pd.DataFrame({"latency_s": lat, "t_s": t, "active": active})
    if runs is not None:
        df["run"] = np.asarray(runs)[np.arange(n) % len(runs)]
    if stressed is not None:
        df["stressed"] = stressed
    return df


def _naive_reference(df, q, block_s, n_boot, gen):
    """rho, its replicates and the number of blocks, by brute force."""
    lat = df.latency_s.to_numpy(float)
    t = df.t_s.to_numpy(float)
    act = df.active.to_numpy(bool)
    run = pd.factorize(df["run"])[0] if "run" in df.columns else np.zeros(len(df), int)
    cell = np.floor((t - t.min()) / block_s).astype(int)
    cells = sorted(set(zip(run.tolist(), cell.tolist())))
    block = np.array([cells.index(k) for k in zip(run.tolist(), cell.tolist())])
    nb = len(cells)
    picks = gen.integers(0, nb, size=(n_boot, nb))
    reps = np.empty(n_boot)
    for r in range(n_boot):
        mult = np.bincount(picks[r], minlength=nb)[block]
        a = np.repeat(lat[act], mult[act])
        i = np.repeat(lat[~act], mult[~act])
        reps[r] = (np.quantile(a, q) / np.quantile(i, q)) if a.size and i.size else np.nan
    rho = np.quantile(lat[act], q) / np.quantile(lat[~act], q)
    return rho, reps, nb


@pytest.mark.parametrize("q, level", [(0.95, 0.95), (0.8, 0.9)])
def test_effect_size_transfer_matches_a_brute_force_block_bootstrap(q, level):
    h = _naive_frame(1, effect=2.0, runs=["a", "b"])
    r = _naive_frame(2, effect=1.3, n=120, horizon=200.0)
    res = effect_size_transfer(h, r, q=q, block_s=30.0, n_boot=150, rng=7,
                               confidence_level=level)
    gen = np.random.default_rng(7)
    rho_h, reps_h, nb_h = _naive_reference(h, q, 30.0, 150, gen)
    rho_r, reps_r, nb_r = _naive_reference(r, q, 30.0, 150, gen)
    a = 1 - level
    for est, df, rho, reps, nb in ((res.harness, h, rho_h, reps_h, nb_h),
                                   (res.real, r, rho_r, reps_r, nb_r)):
        assert est.rho == pytest.approx(rho, rel=1e-12)
        assert est.n_blocks == nb
        assert (est.n_active, est.n_inactive) == (int(df.active.sum()), int((~df.active).sum()))
        assert est.p_active == pytest.approx(np.quantile(df.latency_s[df.active], q))
        assert est.p_inactive == pytest.approx(np.quantile(df.latency_s[~df.active], q))
        ok = np.isfinite(reps)
        assert est.n_boot_undefined == int((~ok).sum())
        lo, hi = np.quantile(reps[ok], [a / 2, 1 - a / 2])
        assert (est.ci_low, est.ci_high) == (pytest.approx(lo, rel=1e-12),
                                             pytest.approx(hi, rel=1e-12))
        assert est.ci_low < est.rho < est.ci_high
        assert est.n_boot == 150 and est.block_s == 30.0
        assert "one block only" not in est.ci_method
    assert nb_h == 20 and nb_r == 7                # two runs of 10 blocks; 200 s in 30 s blocks
    assert res.transfer_fraction == pytest.approx((rho_r - 1) / (rho_h - 1), rel=1e-12)
    f = (reps_r - 1) / (reps_h - 1)
    f = f[np.isfinite(f)]
    lo, hi = np.quantile(f, [a / 2, 1 - a / 2])
    assert res.transfer_ci_low == pytest.approx(lo, rel=1e-12)
    assert res.transfer_ci_high == pytest.approx(hi, rel=1e-12)
    assert res.q == q and res.confidence_level == level and res.mechanism == "sync"


def test_effect_size_transfer_defaults():
    sig = inspect.signature(effect_size_transfer).parameters
    assert sig["q"].default == 0.95 and sig["block_s"].default == 30.0
    assert sig["n_boot"].default == 2000 and sig["confidence_level"].default == 0.95
    assert inspect.signature(effect_correlation).parameters["n_resamples"].default == 100_000
    assert MAX_EXACT_CONDITIONS == 9


def test_effect_size_transfer_parameter_bounds():
    df = _naive_frame(3, n=60)
    for q in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(InputError, match=r"q = .* must lie in \(0, 1\)"):
            effect_size_transfer(df, df, q=q, n_boot=100)
    assert effect_size_transfer(df, df, q=0.5, n_boot=100, rng=0).q == 0.5
    for block_s in (0.0, -5.0):
        with pytest.raises(InputError, match="block_s .* must be positive"):
            effect_size_transfer(df, df, block_s=block_s, n_boot=100)
    assert effect_size_transfer(df, df, block_s=0.5, n_boot=100, rng=0).real.block_s == 0.5
    with pytest.raises(InputError, match="n_boot = 99 is too few"):
        effect_size_transfer(df, df, n_boot=99)
    assert effect_size_transfer(df, df, n_boot=100, rng=0).real.n_boot == 100


def test_effect_size_transfer_input_errors_name_the_column():
    df = _naive_frame(4, n=60)
    with pytest.raises(InputError, match="harness_requests must be a DataFrame"):
        effect_size_transfer(None, df)
    with pytest.raises(InputError, match="real_requests must be a DataFrame"):
        effect_size_transfer(df, df.to_numpy())
    for col in ("latency_s", "t_s", "active"):
        with pytest.raises(InputError, match=f"column/key '{col}'.*lacks a column"):
            effect_size_transfer(df, df.drop(columns=col))
    one_nan = df.latency_s.copy()
    one_nan.iloc[3] = np.nan
    with pytest.raises(InputError, match="latency_s holds NaN or negative"):
        effect_size_transfer(df, df.assign(latency_s=one_nan))
    negative = df.latency_s.copy()
    negative.iloc[3] = -0.1
    with pytest.raises(InputError, match="latency_s holds NaN or negative"):
        effect_size_transfer(df.assign(latency_s=negative), df)
    bad_t = df.t_s.copy()
    bad_t.iloc[5] = np.inf
    with pytest.raises(InputError, match="t_s holds NaN/inf"):
        effect_size_transfer(df, df.assign(t_s=bad_t))
    act = df.active.astype(object)
    act.iloc[2] = None
    with pytest.raises(InputError, match="'active' has missing values"):
        effect_size_transfer(df, df.assign(active=act))
    with pytest.raises(InputError, match="no inactive requests"):
        effect_size_transfer(df, df.assign(active=True))
    with pytest.raises(InputError, match="no active requests"):
        effect_size_transfer(df.assign(active=False), df)
    stressed = pd.Series([False] * len(df), dtype=object)
    stressed.iloc[1] = None
    with pytest.raises(InputError, match="'stressed' has missing values"):
        effect_size_transfer(df, df.assign(stressed=stressed))


def test_zero_latency_is_accepted_but_a_zero_inactive_p95_is_not():
    df = _naive_frame(5, n=80)
    lat = df.latency_s.copy()
    lat[df.active.to_numpy().nonzero()[0][0]] = 0.0       # an active request of 0 s is fine
    res = effect_size_transfer(df, df.assign(latency_s=lat), n_boot=100, rng=0)
    assert np.isfinite(res.real.rho)
    zero = df.latency_s.where(df.active, 0.0)
    with pytest.raises(InputError, match="inactive p95 latency is 0"):
        effect_size_transfer(df, df.assign(latency_s=zero), n_boot=100)
    unit = df.latency_s.where(df.active, 1.0)            # inactive p95 exactly 1 s: fine
    got = effect_size_transfer(df, df.assign(latency_s=unit), n_boot=100, rng=0)
    assert got.real.p_inactive == 1.0
    assert got.real.rho == pytest.approx(np.quantile(df.latency_s[df.active], 0.95))


def test_contamination_exactly_at_the_limit_is_not_contaminated():
    df = _naive_frame(6, n=80)
    inactive = np.flatnonzero(~df.active.to_numpy())
    # q = 0.75: the limit is 1 - q = 0.25 exactly; stress a quarter of the inactive group
    n_at = inactive.size // 4
    sub = df.iloc[np.r_[np.flatnonzero(df.active.to_numpy()), inactive[:4 * n_at]]]
    sub = sub.sort_values("t_s").reset_index(drop=True)
    inact = np.flatnonzero(~sub.active.to_numpy())
    stressed = sub.active.to_numpy().copy()
    stressed[inact[:n_at]] = True
    res = effect_size_transfer(sub, sub.assign(stressed=stressed), q=0.75, n_boot=100, rng=0)
    assert res.real.contamination == 0.25
    assert res.real.contaminated is False
    assert "25.0% of inactive requests are stressed (limit 25%)" == res.real.contamination_note
    stressed[inact[n_at]] = True
    res = effect_size_transfer(sub, sub.assign(stressed=stressed), q=0.75, n_boot=100, rng=0)
    assert res.real.contaminated is True
    assert res.real.contamination == pytest.approx((n_at + 1) / inact.size)
    assert "rho is biased towards 1" in res.real.contamination_note
    assert res.verdict == "not interpretable: the real inactive group is contaminated"
    # the harness has no 'stressed' column: not checked
    assert res.harness.contamination is None and res.harness.contaminated is None


def test_contaminated_real_side_is_not_interpretable_even_when_it_transferred():
    df = _naive_frame(7, n=200, effect=3.0)
    res = effect_size_transfer(df, df.assign(stressed=True), n_boot=200, rng=0)
    assert res.transferred and res.real.ci_low > 1
    assert res.verdict == "not interpretable: the real inactive group is contaminated"
    clean = effect_size_transfer(df, df.assign(stressed=df.active), n_boot=200, rng=0)
    assert clean.real.contamination == 0.0 and clean.real.contaminated is False
    assert clean.verdict == "transferred: the real rho CI excludes 1"


def test_real_ci_low_exactly_one_did_not_transfer():
    """Inactive latencies all 1 s, active ones 1 s except in one 30 s block: every replicate
    that misses that block has rho exactly 1, so the real CI starts at exactly 1."""
    t = np.arange(0.0, 300.0, 2.0)
    active = (t % 30) < 10
    lat = np.where(active & (t < 30), 3.0, 1.0)
    df = pd.DataFrame({"latency_s": lat, "t_s": t, "active": active})
    res = effect_size_transfer(_naive_frame(8, effect=2.0), df, n_boot=300, rng=1)
    assert res.real.ci_low == 1.0 and res.real.ci_high > 1.0
    assert not res.transferred
    assert res.verdict == "did not transfer: the real rho CI includes 1"


def test_harness_rho_of_exactly_one_gives_no_transfer_fraction():
    t = np.arange(0.0, 300.0, 2.0)
    flat = pd.DataFrame({"latency_s": 1.0, "t_s": t, "active": (t % 30) < 10})
    res = effect_size_transfer(flat, _naive_frame(9), n_boot=100, rng=0)
    assert res.harness.rho == 1.0
    assert math.isnan(res.transfer_fraction)
    assert math.isnan(res.transfer_ci_low) and math.isnan(res.transfer_ci_high)


def test_one_and_two_blocks():
    """One block: no CI on that side and no fraction CI; two blocks: both."""
    df = _naive_frame(10, n=100, horizon=60.0)
    two = effect_size_transfer(df, df, block_s=30.0, n_boot=200, rng=0)
    assert two.real.n_blocks == 2 and np.isfinite(two.real.ci_low)
    assert two.real.ci_method.endswith("200 replicates")
    assert np.isfinite(two.transfer_ci_low) and np.isfinite(two.transfer_ci_high)
    assert two.transfer_ci_low <= two.transfer_ci_high
    one = effect_size_transfer(df, df, block_s=100.0, n_boot=200, rng=0)
    assert one.real.n_blocks == 1 and one.real.ci_method.endswith("; one block only: no CI")
    assert math.isnan(one.real.ci_low) and math.isnan(one.real.ci_high)
    assert one.verdict == "cannot be estimated: the real data form a single time block, no CI"
    assert not one.transferred
    # harness in one block, real in many: still no CI for the fraction
    mixed = effect_size_transfer(df, _naive_frame(11, effect=1.2), block_s=100.0, n_boot=200,
                                 rng=0)
    assert mixed.harness.n_blocks == 1 and mixed.real.n_blocks == 3
    assert np.isfinite(mixed.transfer_fraction)
    assert math.isnan(mixed.transfer_ci_low) and math.isnan(mixed.transfer_ci_high)


# ------------------------------------------------------------------ effect correlation


def _brute_p(x, y, alternative, ranks=False):
    from scipy import stats
    if ranks:
        x, y = stats.rankdata(x), stats.rankdata(y)
    r = np.corrcoef(x, y)[0, 1]
    null = np.array([np.corrcoef(x, y[list(p)])[0, 1]
                     for p in itertools.permutations(range(len(y)))])
    tol = 1e-9
    p_g = np.mean(null >= r - tol)
    p_l = np.mean(null <= r + tol)
    return r, {"greater": p_g, "less": p_l, "two-sided": min(1.0, 2 * min(p_g, p_l))}[alternative]


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_effect_correlation_exact_p_against_brute_force(alternative):
    x = np.array([0.3, 1.1, 0.7, 2.0, 1.6, 0.2])
    y = np.array([0.2, 0.9, 1.0, 1.5, 0.4, 0.1])
    res = effect_correlation(x, y, alternative=alternative)
    assert res.exact and res.null_size == 720 and res.estimable and res.reason == ""
    r, p = _brute_p(x, y, alternative)
    assert res.pearson == pytest.approx(r, rel=1e-12) and res.pearson_p == pytest.approx(p)
    rs, ps = _brute_p(x, y, alternative, ranks=True)
    assert res.spearman == pytest.approx(rs, rel=1e-12) and res.spearman_p == pytest.approx(ps)
    assert res.alternative == alternative and res.n == 6 and res.conditions == list(range(6))


def test_effect_correlation_perfect_and_null_correlation():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    perfect = effect_correlation(x, x, alternative="greater")
    # only the identity pairing reaches r = 1: p = 1/24, ties at r counted
    assert perfect.pearson == pytest.approx(1.0) and perfect.pearson_p == pytest.approx(1 / 24)
    assert perfect.spearman_p == pytest.approx(1 / 24)
    less = effect_correlation(x, x, alternative="less")
    assert less.pearson_p == 1.0
    # r = 0 exactly with a symmetric null: both one-sided p above 1/2, two-sided capped at 1
    flat = effect_correlation(x, [1.0, 2.0, 2.0, 1.0])
    assert flat.pearson == pytest.approx(0.0, abs=1e-15)
    assert flat.pearson_p == 1.0 and flat.spearman_p == 1.0


def test_effect_correlation_monte_carlo_p_with_its_plus_one():
    rng = np.random.default_rng(3)
    x = rng.normal(size=10)
    y = x + rng.normal(size=10)
    res = effect_correlation(x, y, alternative="greater", n_resamples=999, rng=5)
    assert not res.exact and res.null_size == 999 and res.n == 10
    perms = np.argsort(np.random.default_rng(5).random((999, 10)), axis=1)
    from scipy import stats
    for (a, b), got_r, got_p in (((x, y), res.pearson, res.pearson_p),
                                 ((stats.rankdata(x), stats.rankdata(y)), res.spearman,
                                  res.spearman_p)):
        r = np.corrcoef(a, b)[0, 1]
        null = np.array([np.corrcoef(a, b[p])[0, 1] for p in perms])
        assert got_r == pytest.approx(r, rel=1e-12)
        assert got_p == pytest.approx((np.sum(null >= r - 1e-9) + 1) / 1000, rel=1e-12)
    less = effect_correlation(x, y, alternative="less", n_resamples=999, rng=5)
    null = np.array([np.corrcoef(x, y[p])[0, 1] for p in perms])
    assert less.pearson_p == pytest.approx((np.sum(null <= res.pearson + 1e-9) + 1) / 1000)
    two = effect_correlation(x, y, n_resamples=999, rng=5)
    assert two.pearson_p == pytest.approx(2 * min(res.pearson_p, less.pearson_p))


def test_effect_correlation_exact_up_to_nine_conditions():
    x = np.array([3.0, 1.0, 4.0, 1.5, 5.0, 9.0, 2.0, 6.0, 5.5])
    y = x[::-1].copy()
    nine = effect_correlation(x, y, alternative="less")
    assert nine.exact and nine.null_size == math.factorial(9)
    ten = effect_correlation(np.append(x, 7.0), np.append(y, 0.5), n_resamples=200, rng=0)
    assert not ten.exact and ten.null_size == 200


def test_effect_correlation_needs_four_varying_conditions():
    three = effect_correlation([1.0, 2.0, 3.0], [1.0, 3.0, 2.0])
    assert not three.estimable and three.null_size == 0 and not three.exact
    assert three.reason == "only 3 conditions: a correlation needs at least 4"
    assert math.isnan(three.pearson) and math.isnan(three.spearman_p)
    four = effect_correlation([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0])
    assert four.estimable and four.null_size == 24 and np.isfinite(four.pearson)
    for x, y in (([2.0] * 5, [1.0, 2.0, 3.0, 4.0, 5.0]), ([1.0, 2.0, 3.0, 4.0, 5.0], [2.0] * 5)):
        flat = effect_correlation(x, y)
        assert not flat.estimable and flat.null_size == 0
        assert flat.reason == "an effect is constant across conditions: correlation undefined"
    # a range of exactly 1 is not constant
    unit = effect_correlation([0.0, 0.5, 1.0, 0.25], [1.0, 2.0, 1.5, 1.25])
    assert unit.estimable and unit.null_size == 24


def test_effect_correlation_inputs():
    h = {"b": 2.0, "a": 1.0, "d": 4.0, "c": 3.5}
    r = {"c": 3.0, "a": 0.5, "b": 2.5, "d": 3.9}
    res = effect_correlation(h, r)
    arr = effect_correlation([1.0, 2.0, 3.5, 4.0], [0.5, 2.5, 3.0, 3.9])
    assert res.conditions == ["a", "b", "c", "d"]
    assert res.pearson == arr.pearson and res.pearson_p == arr.pearson_p
    with pytest.raises(InputError, match="both as arrays"):
        effect_correlation(h, [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(InputError, match="both as arrays"):
        effect_correlation([1.0, 2.0, 3.0, 4.0], r)
    with pytest.raises(InputError, match=r"only in harness \['e'\]; only in real \[\]"):
        effect_correlation({**h, "e": 1.0}, r)
    with pytest.raises(InputError, match=r"only in harness \[\]; only in real \['e'\]"):
        effect_correlation(h, {**r, "e": 1.0})
    with pytest.raises(InputError, match="4 harness effects but 5 real effects"):
        effect_correlation([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0, 5.0])
    with pytest.raises(InputError, match="unknown alternative"):
        effect_correlation([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], alternative="bigger")


# ------------------------------------------------------------------ exposure


def _run(arrival, end, merge_starts, d=8.0, horizon=100.0, ok=True):
    arrival = np.asarray(arrival, float)
    req = pd.DataFrame({"arrival_s": arrival, "sent_s": arrival, "end_s": end, "ok": ok})
    merges = pd.DataFrame({"start_s": np.asarray(merge_starts, float),
                           "end_s": np.asarray(merge_starts, float) + d})
    return Run(path=Path("r"), meta={"run_id": "r1", "horizon_s": horizon,
                                     "merge_duration_s": d}, requests=req, merges=merges)


def test_exposure_fields_and_missing_inputs():
    run = _run(np.arange(10.0, 90.0, 2.0), np.arange(10.0, 90.0, 2.0) + 1.0, [20.0, 50.0])
    e = exposure(run)
    assert (e.run_id, e.windows_total, e.windows_observed, e.n_requests) == ("r1", 2, 2, 40)
    # [a, a + 1] overlapping [20, 28] or [50, 58]: a in 20..26 and 50..56 -> 8 requests
    assert e.exposure_requests == pytest.approx(8 / 40)
    assert (e.span_start, e.span_end) == (10.0, 89.0)
    for key in ("horizon_s", "merge_duration_s"):
        meta = {k: v for k, v in run.meta.items() if k != key}
        with pytest.raises(InputError, match=f"r1: column/key '{key}': run.json lacks a key"):
            exposure(Run(path=run.path, meta=meta, requests=run.requests, merges=run.merges))
    for col in ("arrival_s", "end_s", "sent_s", "ok"):
        with pytest.raises(InputError, match=f"column/key '{col}': run table lacks a column"):
            exposure(Run(path=run.path, meta=run.meta, requests=run.requests.drop(columns=col),
                         merges=run.merges))
    with pytest.raises(InputError, match="column/key 'start_s'"):
        exposure(Run(path=run.path, meta=run.meta, requests=run.requests,
                     merges=run.merges.drop(columns="start_s")))


def test_exposure_of_a_run_directory(copy_fixture):
    path = copy_fixture("runs/fixture-s0-fixed_h")
    from_path = exposure(path)
    assert from_path == exposure(read_run(path))
    assert from_path == exposure(str(path))
    assert from_path.n_requests > 0 and from_path.windows_total > 0


def test_exposure_regression_against_statsmodels_at_the_threshold():
    x = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    v = np.array([0.05, 0.13, 0.12, 0.24, 0.22])
    ref = sm.OLS(v, sm.add_constant(x)).fit()
    got = exposure_regression(v, x)
    assert got.estimable and got.reason == "" and got.n == 5
    assert got.r_squared == pytest.approx(ref.rsquared, rel=1e-12)
    assert got.intercept == pytest.approx(ref.params[0], rel=1e-12)
    assert got.slope == pytest.approx(ref.params[1], rel=1e-12)
    assert got.p_value == pytest.approx(ref.pvalues[1], rel=1e-12)
    lo, hi = ref.conf_int()[1]
    assert (got.slope_ci_low, got.slope_ci_high) == (pytest.approx(lo), pytest.approx(hi))
    assert got.slope_ci_low < got.slope < got.slope_ci_high
    # default threshold 0.8; R^2 exactly at the threshold explains V
    assert got.threshold == EXPLAINS_V_R2 == 0.8
    assert 0.8 < ref.rsquared and got.explains_v
    at = exposure_regression(v, x, threshold=float(ref.rsquared))
    assert at.explains_v
    above = exposure_regression(v, x, threshold=float(ref.rsquared) + 1e-9)
    assert not above.explains_v and above.threshold == pytest.approx(ref.rsquared + 1e-9)


def test_exposure_regression_boundaries():
    three = exposure_regression([0.1, 0.3, 0.2], [0.1, 0.2, 0.3])
    assert three.estimable and three.n == 3
    with pytest.raises(InputError, match="exposure"):
        exposure_regression([0.1, 0.3, 0.2], [0.1, 0.2])
    with pytest.raises(InputError, match="4 V values but 3 exposures"):
        exposure_regression([0.1, 0.3, 0.2, 0.4], [0.1, 0.2, 0.3])
    flat_x = exposure_regression([0.1, 0.3, 0.2], [0.2] * 3)
    assert not flat_x.estimable and not flat_x.explains_v
    assert flat_x.reason == "exposure is constant across runs: regression undefined"
    assert flat_x.n == 3 and math.isnan(flat_x.slope)
    flat_v = exposure_regression([0.2] * 3, [0.1, 0.2, 0.3])
    assert flat_v.reason == "V is constant across runs: regression undefined"
    # a range of exactly 1 is not constant
    unit = exposure_regression([0.0, 1.0, 0.4], [0.0, 0.5, 1.0])
    assert unit.estimable and np.isfinite(unit.slope)
    unit_v = exposure_regression([0.0, 0.5, 1.0], [0.1, 0.5, 0.2])
    assert unit_v.estimable
