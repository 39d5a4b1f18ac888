"""The seed bootstrap against scipy, and Holm against statsmodels.

Boundaries of the seed bootstrap: BCa against the textbook formula, the percentile method,
resampling in chunks, defaults and argument checks, Holm."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from evalkit.errors import InputError
from evalkit.stats.bootstrap import bootstrap_ci, holm, percentile_t_ci


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


# ------------------------------------------------------------------------- bootstrap


def _replay_resamples(x, b, seed, stat=np.mean):
    """The b resamples of one chunk, drawn from a fresh generator with the same seed."""
    idx = np.random.default_rng(seed).integers(0, x.size, size=(b, x.size))
    return np.array([stat(row) for row in x[idx]])


def _bca_reference(x, dist, theta, level, stat):
    """Efron's BCa from the bootstrap distribution and a jackknife (textbook formulas)."""
    below = (np.sum(dist < theta) + 0.5 * np.sum(dist == theta)) / dist.size
    z0 = stats.norm.ppf(below)
    jack = np.array([stat(np.delete(x, i)) for i in range(x.size)])
    dev = jack.mean() - jack
    ss = np.sum(dev ** 2)
    a = np.sum(dev ** 3) / (6 * ss ** 1.5) if ss > 0 else 0.0
    z = stats.norm.ppf([(1 - level) / 2, (1 + level) / 2])
    return np.quantile(dist, stats.norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z))))


@pytest.mark.parametrize("scale", [0.01, 50.0])
@pytest.mark.parametrize("level", [0.9, 0.95])
def test_bca_matches_the_textbook_formula_on_its_own_distribution(scale, level):
    """Skewed data (non-zero acceleration), at a small scale too (the jackknife sum of
    squares is then far below 1)."""
    x = np.random.default_rng(3).exponential(scale, 9)
    res = bootstrap_ci(x, n_resamples=2000, confidence_level=level, rng=11)
    dist = res.bootstrap_distribution
    assert np.allclose(dist, _replay_resamples(x, 2000, 11), rtol=1e-12, atol=0)
    want = _bca_reference(x, dist, x.mean(), level, np.mean)
    assert [res.ci_low, res.ci_high] == pytest.approx(want, rel=1e-12)
    assert res.ci_low < res.statistic < res.ci_high
    assert res.method == "BCa" and res.note == "" and not res.degenerate
    assert res.n == 9 and res.n_resamples == 2000 and res.confidence_level == level
    assert res.standard_error == pytest.approx(np.std(dist, ddof=1), rel=1e-12)


def test_bca_with_ties_at_the_estimate_matches_the_formula():
    x = np.array([0.0, 1, 1, 1, 2, 5])
    res = bootstrap_ci(x, statistic=np.median, n_resamples=1000, rng=2)
    dist = res.bootstrap_distribution
    assert np.sum(dist == 1.0) > 100                    # many resamples tie with theta = 1
    want = _bca_reference(x, dist, 1.0, 0.95, np.median)
    assert [res.ci_low, res.ci_high] == pytest.approx(want, rel=1e-12)


def test_bca_with_zero_acceleration_when_the_jackknife_is_constant():
    """max of [0, 1, 5, 5]: every leave-one-out max is 5, so a = 0 (not 1)."""
    x = np.array([0.0, 1.0, 5.0, 5.0])
    res = bootstrap_ci(x, statistic=np.max, n_resamples=1000, rng=4)
    dist = res.bootstrap_distribution
    assert not res.degenerate
    want = _bca_reference(x, dist, 5.0, 0.95, np.max)
    assert [res.ci_low, res.ci_high] == pytest.approx(want, rel=1e-12)


def test_percentile_method_is_the_equal_tailed_quantile():
    x = np.random.default_rng(8).normal(size=7)
    res = bootstrap_ci(x, n_resamples=500, confidence_level=0.8, rng=1, method="percentile")
    dist = res.bootstrap_distribution
    assert [res.ci_low, res.ci_high] == pytest.approx(np.quantile(dist, [0.1, 0.9]), rel=1e-12)
    assert res.method == "percentile"


def test_bca_falls_back_to_percentile_when_every_resample_is_on_one_side():
    """The number of distinct values of 10 distinct seeds: a resample reaches 10 only if it
    is a permutation (p = 3.6e-4), so every resample lies below the estimate: z0 = +inf."""
    x = np.arange(10.0)
    res = bootstrap_ci(x, statistic=lambda v: float(np.unique(v).size), n_resamples=200, rng=0)
    dist = res.bootstrap_distribution
    assert dist.max() < 10
    assert "percentile used" in res.note and not res.degenerate
    assert [res.ci_low, res.ci_high] == pytest.approx(np.quantile(dist, [0.025, 0.975]))


def test_resamples_use_every_index_and_the_vectorised_axis():
    """n = 100 seeds and 100 resamples (a square array, where the wrong axis would also
    give 100 values)."""
    x = np.random.default_rng(1).normal(size=100)
    res = bootstrap_ci(x, n_resamples=100, rng=6, method="percentile")
    assert np.allclose(res.bootstrap_distribution, _replay_resamples(x, 100, 6), rtol=1e-12)


def test_statistic_that_ignores_axis_is_applied_per_resample():
    def whole_median(v, axis=None):           # accepts axis but reduces everything
        return np.median(v)

    x = np.array([0.0, 3.0, 1.0, 7.0, 2.0])
    res = bootstrap_ci(x, statistic=whole_median, n_resamples=300, rng=5, method="percentile")
    assert np.array_equal(res.bootstrap_distribution,
                          _replay_resamples(x, 300, 5, np.median))
    assert not res.degenerate


def test_bootstrap_over_many_chunks_fills_every_resample():
    x = np.random.default_rng(2).normal(size=(1 << 21) // 50 + 1)     # < 50 rows per chunk
    res = bootstrap_ci(x, n_resamples=120, rng=3, method="percentile")
    dist = res.bootstrap_distribution
    assert dist.shape == (120,) and np.all(np.isfinite(dist))
    assert np.all(np.abs(dist - x.mean()) < 6 * x.std() / math.sqrt(x.size))
    assert np.unique(dist).size == 120


def test_bootstrap_range_of_one_is_not_degenerate():
    res = bootstrap_ci([0.0, 1.0], n_resamples=200, rng=0, method="percentile")
    assert not res.degenerate and np.ptp(res.bootstrap_distribution) == 1.0
    assert res.ci_low == 0.0 and res.ci_high == 1.0


def test_bootstrap_defaults_and_argument_checks():
    res = bootstrap_ci([1.0, 2.0, 4.0], rng=0)
    assert res.n_resamples == 10_000 and res.confidence_level == 0.95 and res.method == "BCa"
    assert bootstrap_ci([1.0, 2.0, 4.0], n_resamples=100, rng=0).n_resamples == 100
    with pytest.raises(InputError, match="too few"):
        bootstrap_ci([1.0, 2.0, 4.0], n_resamples=99)
    for level in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(InputError, match=r"confidence_level must lie in \(0, 1\)"):
            bootstrap_ci([1.0, 2.0, 4.0], confidence_level=level)
    assert bootstrap_ci([1.0, 2.0, 4.0], n_resamples=100, confidence_level=0.5).ci_low > 1
    with pytest.raises(InputError, match="unknown bootstrap method"):
        bootstrap_ci([1.0, 2.0, 4.0], method="basic")


def test_the_percentile_t_ci_has_the_same_input_checks():
    with pytest.raises(InputError, match="too few"):
        percentile_t_ci([1.0, 2.0, 4.0], n_resamples=99)
    for level in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(InputError, match=r"confidence_level must lie in \(0, 1\)"):
            percentile_t_ci([1.0, 2.0, 4.0], confidence_level=level)
    assert percentile_t_ci([1.0, 2.0, 4.0], n_resamples=100, rng=0).n_resamples == 100

def test_holm_default_alpha_and_p_value_range():
    reject, adjusted = holm([0.04, 0.2])
    assert adjusted.tolist() == pytest.approx([0.08, 0.2])
    assert reject.tolist() == [False, False]                      # 0.08 > 0.05
    assert holm([0.04, 0.2], alpha=0.1)[0].tolist() == [True, False]
    reject, adjusted = holm([0.0, 1.0, 0.5])
    assert reject.tolist() == [True, False, False] and adjusted.tolist() == [0.0, 1.0, 1.0]
    for bad in ([0.5, -0.01], [0.2, 1.01, 0.3]):
        with pytest.raises(InputError, match=r"p-values must lie in \[0, 1\]"):
            holm(bad)


@pytest.mark.parametrize("scale", [1e-4, 1e-2, 1e3])
def test_the_percentile_t_ci_moves_with_the_scale_and_location_of_the_values(scale):
    # t* = (mean* - mean) / se* does not change when every value is scaled or shifted, so
    # with the same resamples the interval is the scaled (shifted) interval
    x = np.random.default_rng(8).lognormal(0.0, 0.8, size=9)
    ref = percentile_t_ci(x, n_resamples=500, rng=3)
    got = percentile_t_ci(scale * x + 0.25, n_resamples=500, rng=3)
    assert got.ci_low == pytest.approx(scale * ref.ci_low + 0.25, rel=1e-9)
    assert got.ci_high == pytest.approx(scale * ref.ci_high + 0.25, rel=1e-9)
    assert ref.ci_low < x.mean() < ref.ci_high


def test_a_resample_of_equal_values_at_the_sample_mean_has_t_zero():
    # about 8% of the resamples of these five values are all 1 (the mean): their t* is 0,
    # not -inf, so the interval stays finite; the all-0 and all-2 ones (0.03% each) are +-inf
    res = percentile_t_ci([0.0, 1.0, 2.0, 1.0, 1.0], n_resamples=4000, rng=1)
    assert np.isfinite(res.ci_low) and np.isfinite(res.ci_high)
    assert res.ci_low < 1.0 < res.ci_high


def test_resamples_of_one_repeated_value_away_from_the_mean_widen_the_interval_to_infinity():
    # a third of the resamples of [1, 1, 1, 1, 0] are all 1 (mean* - mean = +0.2, se* = 0):
    # t* = +inf for each, more than the upper 2.5%, so the lower end is -inf; mirrored below
    up = percentile_t_ci([1.0, 1.0, 1.0, 1.0, 0.0], n_resamples=2000, rng=2)
    assert up.ci_low == -np.inf and np.isfinite(up.ci_high)
    down = percentile_t_ci([0.0, 0.0, 0.0, 0.0, 1.0], n_resamples=2000, rng=2)
    assert down.ci_high == np.inf and np.isfinite(down.ci_low)
