"""Boundary values and reported fields of the envelope-side statistics: result plumbing
(json_safe, input checks), the seed bootstrap, load matching, psi, overlap cost, the explained gain and the uniform F_K sampler without edges."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.isotonic import IsotonicRegression

from evalkit.errors import InputError, NotEstimable
from evalkit.stats._result import (ResultMixin, as_finite_1d, as_generator, check_alternative,
                                   check_n_resamples, json_safe, seed_series)
from evalkit.stats.bootstrap import bootstrap_ci, holm
from evalkit.stats.explained import explained_gain
from evalkit.stats.loadmatch import load_match
from evalkit.stats.overlap import RequestIndex, cost_curve, overlap_cost
from evalkit.stats.psi import fit_psi
from evalkit.stats.fk import feasible_class, sample_schedules

# ------------------------------------------------------------------------- _result plumbing


@dataclass
class _Plain:
    a: int
    b: float


@dataclass
class _WithDict:
    a: int

    def to_dict(self):
        return {"custom": self.a}


@dataclass(frozen=True)
class _Mixed(ResultMixin):
    kept: float
    _private: int
    bulky: list
    other: object = None
    _dict_exclude = ("bulky",)


def test_json_safe_converts_each_kind():
    assert json_safe(None) is None
    assert json_safe(3) == 3 and type(json_safe(3)) is int
    assert json_safe("x") == "x"
    assert json_safe(1.5) == 1.5 and type(json_safe(1.5)) is float
    assert json_safe(float("nan")) is None and json_safe(-math.inf) is None
    assert json_safe(np.float32(0.25)) == 0.25 and type(json_safe(np.float32(0.25))) is float
    assert json_safe(np.int64(7)) == 7 and type(json_safe(np.int64(7))) is int
    assert json_safe(np.bool_(True)) is True and json_safe(False) is False
    assert json_safe(np.array([1.0, np.nan])) == [1.0, None]
    assert json_safe((1, np.int64(2))) == [1, 2]
    assert json_safe({1: np.float64(0.5)}) == {"1": 0.5}
    assert json_safe(_Plain(1, np.inf)) == {"a": 1, "b": None}
    assert json_safe(_WithDict(4)) == {"custom": 4}
    assert json_safe(_Plain) == str(_Plain)                 # a dataclass type is not a value
    assert json_safe(complex(1, 2)) == "(1+2j)"


def test_result_mixin_leaves_out_private_and_excluded_fields():
    r = _Mixed(kept=np.float64(2.0), _private=1, bulky=[1, 2, 3], other=None)
    assert r.to_dict() == {"kept": 2.0, "other": None}


def test_as_finite_1d_boundaries():
    assert as_finite_1d([2.0], "x").tolist() == [2.0]                 # default min_size 1
    assert as_finite_1d([1, 2], "x", min_size=2).tolist() == [1.0, 2.0]
    with pytest.raises(InputError, match="x has 1 seeds; at least 2"):
        as_finite_1d([1.0], "x", min_size=2, what="seeds")
    with pytest.raises(InputError, match="x is empty"):
        as_finite_1d([], "x")
    with pytest.raises(InputError, match="must be 1-D"):
        as_finite_1d([[1.0, 2.0]], "x")
    with pytest.raises(InputError, match="must be 1-D"):
        as_finite_1d(3.0, "x")
    with pytest.raises(InputError, match="must be numeric"):
        as_finite_1d(["a"], "x")
    ten = np.r_[np.full(10, np.nan), 1.0]
    with pytest.raises(InputError, match=r"10 NaN/inf entries \(positions 0, 1, 2, 3, 4, 5, 6, "
                                         r"7, 8, 9\)"):
        as_finite_1d(ten, "x")
    eleven = np.r_[1.0, np.full(11, np.inf)]
    with pytest.raises(InputError, match=r"11 NaN/inf entries \(positions 1, .*, 10 \.\.\.\)"):
        as_finite_1d(eleven, "x")


def test_as_generator_each_input():
    g = np.random.default_rng(5)
    assert as_generator(g) is g
    assert as_generator(None).random() == np.random.default_rng(0).random()
    assert as_generator(7).random() == np.random.default_rng(7).random()
    assert as_generator(np.int64(7)).random() == np.random.default_rng(7).random()
    with pytest.raises(InputError, match="rng must be a numpy Generator"):
        as_generator(1.5)


def test_seed_series_inputs_and_checks():
    assert seed_series({0: 1, 1: np.float64(2.5)}, "v") == {0: 1.0, 1: 2.5}
    assert seed_series(pd.Series([0.5, 0.25], index=[3, 4]), "v") == {3: 0.5, 4: 0.25}
    with pytest.raises(InputError, match="must map seed -> value"):
        seed_series([(0, 1.0)], "v")                 # a list has .index but is not a map
    with pytest.raises(InputError, match="v for seed 3 is nan"):
        seed_series({1: 0.0, 3: float("nan")}, "v")


def test_alternative_and_n_resamples_checks():
    for alt in ("greater", "less", "two-sided"):
        assert check_alternative(alt) == alt
    with pytest.raises(InputError, match="unknown alternative"):
        check_alternative("bigger")
    for ok in (1, 2, 100, 1e5, np.inf):
        check_n_resamples(ok)
    for bad in (0, 0.5, 1.5, -3):
        with pytest.raises(InputError, match="positive integer or inf"):
            check_n_resamples(bad)


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


# ------------------------------------------------------------------------- load matching

BASE = {"seed": 0, "n_requests": 1000, "arrival_rate_achieved": 2.0,
        "prompt_tokens_total": 50_000, "output_tokens_total": 20_000, "step_rate": 1.0,
        "violation_rate": 0.05}


def _check(result, key):
    return next(c for c in result.checks if c.key == key)


def test_load_match_accepts_series_and_one_row_frames():
    pol = {**BASE, "violation_rate": 0.08}
    want = load_match(pol, BASE)
    assert want.matched and want.vex == pytest.approx(0.03)
    assert load_match(pd.Series(pol), pd.Series(BASE)).to_dict() == want.to_dict()
    assert load_match(pd.DataFrame([pol]), pd.DataFrame([BASE])).to_dict() == want.to_dict()
    with pytest.raises(InputError, match="policy summary has 2 rows, expected 1"):
        load_match(pd.DataFrame([pol, pol]), BASE)
    with pytest.raises(InputError, match="no_sync summary must be dict-like"):
        load_match(pol, [BASE])
    with pytest.raises(InputError, match="the policy run summary is missing"):
        load_match(None, BASE)
    with pytest.raises(InputError, match="no-sync summary lacks 'step_rate'"):
        load_match(pol, {k: v for k, v in BASE.items() if k != "step_rate"})


def test_load_match_seed_checks():
    no_seed = {k: v for k, v in BASE.items() if k != "seed"}
    assert load_match(no_seed, BASE).matched                    # seed only on one side
    assert load_match(BASE, no_seed).matched
    assert load_match({**BASE, "seed": 0}, BASE).matched        # same seed
    with pytest.raises(InputError, match="no-sync run is seed 0 but the policy run is seed 2"):
        load_match({**BASE, "seed": 2}, BASE)


def test_load_match_relative_difference_exactly_at_the_tolerance():
    base = {**BASE, "arrival_rate_achieved": 2.0}
    pol = {**base, "arrival_rate_achieved": 2.5}                  # rel = 0.25 exactly
    res = load_match(pol, base, {"arrival_rate_achieved": 0.25})
    chk = _check(res, "arrival_rate_achieved")
    assert chk.rel_diff == 0.25 and chk.passed and chk.status == "passed" and chk.reason == ""
    res = load_match(pol, base, {"arrival_rate_achieved": 0.25 - 1e-12})     # float fuzz
    assert _check(res, "arrival_rate_achieved").passed
    res = load_match(pol, base, {"arrival_rate_achieved": 0.2499})
    chk = _check(res, "arrival_rate_achieved")
    assert not chk.passed and chk.status == "failed" and res.failed == ["arrival_rate_achieved"]
    assert "relative difference 0.25 exceeds tolerance 0.2499" in chk.reason
    assert chk.tolerance == 0.2499 and chk.expected == 2.0 and chk.found == 2.5
    with pytest.raises(InputError, match="unknown tolerance keys"):
        load_match(pol, base, {"arrival_rate": 0.3})


def test_load_match_not_evaluable_names_the_runs():
    res = load_match({**BASE, "step_rate": None}, BASE)
    chk = _check(res, "step_rate")
    assert chk.status == "not evaluable" and not chk.passed and math.isnan(chk.rel_diff)
    assert chk.reason == "step_rate is missing/NaN in the policy run"
    res = load_match({**BASE, "step_rate": "n/a"}, {**BASE, "step_rate": float("nan")})
    assert _check(res, "step_rate").reason == "step_rate is missing/NaN in the no-sync and policy run"
    assert res.not_evaluable == ["step_rate"] and res.failed == [] and not res.matched


# ------------------------------------------------------------------------- psi


def test_psi_pools_ties_and_reports_residuals():
    res = fit_psi([1.0, 1.0, 2.0, 3.0], [0.0, 2.0, 3.0, 2.0])
    # pooled means (1, 3, 2) with weights (2, 1, 1); PAVA pools the last two
    assert res.x.tolist() == [1.0, 2.0, 3.0] and res.y.tolist() == [1.0, 2.5, 2.5]
    assert res.residuals.tolist() == [-1.0, 1.0, 0.5, -0.5]
    assert res.eps_cal == 1.0 and res.mean_abs_residual == 0.75
    assert res.n_points == 4 and res.n_groups == 0 and res.loso_reason == "no groups (seeds) given"
    assert math.isnan(res.eps_cal_loso)


def test_psi_two_points_and_input_checks():
    res = fit_psi([0.0, 1.0], [0.0, 0.5])
    assert res.predict([0.5, -1.0, 2.0]).tolist() == [0.25, 0.0, 0.5]
    with pytest.raises(InputError, match="phi has 2 values but vex has 3"):
        fit_psi([0.0, 1.0], [0.0, 0.5, 1.0])
    with pytest.raises(NotEstimable, match=r"Phi is constant \(2.0\)"):
        fit_psi([2.0, 2.0], [0.0, 1.0])
    with pytest.raises(InputError, match="groups has shape"):
        fit_psi([0.0, 1.0], [0.0, 0.5], groups=[1, 2, 3])
    one = fit_psi([0.0, 1.0], [0.0, 0.5], groups=[4, 4])
    assert one.n_groups == 1 and "only 1 group" in one.loso_reason and math.isnan(one.eps_cal_loso)


def _loso_reference(phi, vex, groups):
    out = {}
    for g in np.unique(groups):
        keep = groups != g
        iso = IsotonicRegression(out_of_bounds="clip").fit(phi[keep], vex[keep])
        out[int(g)] = float(np.max(np.abs(vex[~keep] - iso.predict(phi[~keep]))))
    return out


@pytest.mark.parametrize("n_groups", [2, 3])
def test_psi_leave_one_seed_out_against_sklearn(n_groups):
    """Phi spans exactly [0, 1] after any group is held out; errors are well below 1."""
    rng = np.random.default_rng(n_groups)
    groups = np.repeat(np.arange(n_groups), 4)
    phi = np.tile([0.0, 0.3, 0.7, 1.0], n_groups) + 0.0
    phi[4:8] = [0.0, 0.2, 0.5, 1.0]
    vex = 0.1 * phi + rng.normal(0, 0.02, phi.size)
    res = fit_psi(phi, vex, groups=groups)
    want = _loso_reference(phi, vex, groups)
    assert res.loso_per_group == pytest.approx(want, rel=1e-9)
    assert res.eps_cal_loso == pytest.approx(max(want.values()), rel=1e-9)
    assert res.eps_cal_loso < 0.2 and len(set(want.values())) == n_groups
    assert res.n_groups == n_groups and res.loso_reason == ""


def test_psi_group_whose_removal_leaves_a_constant_phi():
    phi = np.array([1.0, 2.0, 5.0, 5.0, 5.0, 5.0])
    groups = np.array([0, 0, 1, 1, 2, 2])
    res = fit_psi(phi, [0.0, 0.1, 0.3, 0.2, 0.4, 0.3], groups=groups)
    assert math.isnan(res.eps_cal_loso)
    assert "groups [0] leave a constant Phi when held out" in res.loso_reason
    assert set(res.loso_per_group) == {1, 2}


# ------------------------------------------------------------------------- overlap


def _brute_cost(u, d, start, end):
    u = np.asarray(u, dtype=float)[..., None]
    return np.sum((start < u + d) & (end > u), axis=-1)


@pytest.mark.parametrize("n_windows", [7, 5000])        # below and above the sorted path
def test_overlap_cost_matches_brute_force(n_windows):
    rng = np.random.default_rng(n_windows)
    start = rng.uniform(0, 100, 60)
    end = start + rng.exponential(5, 60)
    u = rng.uniform(-5, 105, n_windows)
    want = _brute_cost(u, 2.5, start, end)
    assert want.max() > 3
    assert np.array_equal(cost_curve(u, 2.5, start, end), want)


def test_overlap_cost_shapes_index_and_half_second_windows():
    start = np.array([0.0, 1.0, 2.0, 2.0])
    end = np.array([1.0, 3.0, 2.0, 4.0])                 # one request of zero length
    idx = RequestIndex(start, end)
    starts = np.array([[0.0, 1.5, 2.0], [0.5, 1.0, 3.5]])
    res = overlap_cost(starts, 0.5, index=idx)
    want = _brute_cost(starts, 0.5, start, end)
    assert np.array_equal(res.per_window, want)
    assert res.phi.tolist() == want.sum(axis=1).tolist() and res.n_requests == 4
    same = overlap_cost(starts, 0.5, start, end)
    assert np.array_equal(same.per_window, want) and same.duration == 0.5
    one = overlap_cost([0.0, 1.5], 0.5, start, end)
    assert one.phi.shape == () and int(one.phi) == int(want[0, :2].sum())
    with pytest.raises(InputError, match="needs req_start and req_end"):
        overlap_cost(starts, 0.5, start, None)
    with pytest.raises(InputError, match="needs req_start and req_end"):
        overlap_cost(starts, 0.5, None, end)
    with pytest.raises(InputError, match="trailing window axis"):
        overlap_cost(1.0, 0.5, start, end)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(InputError, match="must be positive"):
            idx.cost([1.0], bad)


def test_request_index_checks():
    with pytest.raises(InputError, match=r"starts \(2\) and ends \(3\) differ"):
        RequestIndex([0.0, 1.0], [1.0, 2.0, 3.0])
    with pytest.raises(InputError, match="1 requests have a NaN/inf start or end"):
        RequestIndex([0.0, 1.0], [1.0, np.nan])
    with pytest.raises(InputError, match="1 requests end before they start"):
        RequestIndex([0.0, 1.0], [1.0, 0.5])
    assert RequestIndex([1.0], [1.0]).n_requests == 1


# ------------------------------------------------------------------------- explained gain


def _flat_campaign(policy_shift, n_seeds=3):
    """Per seed: a policy run and a draw at Phi = 2, and another run at Phi = 6.  The draw
    and the policy share Phi, so g_pred = 0 exactly; d = -policy_shift[s]."""
    phi, vex, groups, seeds = [], [], [], []
    for s in range(n_seeds):
        base = len(phi)
        phi += [2.0, 2.0, 6.0]
        vex += [0.25 + policy_shift[s], 0.25, 0.75]
        groups += [s, s, s]
        seeds.append((s, base, [base + 1]))
    return np.array(phi), np.array(vex), np.array(groups), seeds


def test_explained_gain_at_zero_prediction_and_zero_tolerance():
    """g_pred = 0 and U = 0 exactly: the CI of G_pred is [0, 0] (no predicted gain); a band of
    zero width holds no CI (equivalence to within 0 is not a claim), so not within."""
    phi, vex, groups, seeds = _flat_campaign([0.0, 0.0, 0.0])
    res = explained_gain(phi, vex, groups, seeds[:2], n_boot=200, rng=0, tolerance=0.0)
    assert res.n_seeds == 2
    assert res.g_pred_ci == [0.0, 0.0] and res.unexplained_ci == [0.0, 0.0]
    assert res.tolerance == 0.0 and res.tolerance_abs == 0.0
    assert not res.predicts_gain and not res.within_tolerance and not res.explained


def test_explained_gain_unexplained_ci_straddling_zero_is_not_evidence():
    # G = 0, so the band +-0.25 |G| has zero width: a CI straddling 0 merely overlaps it,
    # which the equivalence test does not accept (the old rule called this "within")
    shift = [-0.1, 0.1, -0.05, 0.05, 0.02, -0.02]
    phi, vex, groups, seeds = _flat_campaign(shift, n_seeds=6)
    res = explained_gain(phi, vex, groups, seeds, n_boot=500, rng=1)
    assert res.gain == pytest.approx(0.0, abs=1e-15)
    assert res.unexplained_ci[0] < 0 < res.unexplained_ci[1]
    assert not res.within_tolerance and not res.explained
    wide = explained_gain(phi, vex, groups, seeds, n_boot=500, rng=1, tolerance=1e6)
    assert wide.tolerance_abs == 0.0 and not wide.within_tolerance


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_explained_gain_unexplained_ci_beyond_the_tolerance_is_not_within(sign):
    shift = [sign * v for v in (-0.1, -0.12, -0.09, -0.11, -0.1)]
    phi, vex, groups, seeds = _flat_campaign(shift, n_seeds=5)
    res = explained_gain(phi, vex, groups, seeds, n_boot=500, rng=2)
    assert res.gain == pytest.approx(sign * 0.104)
    assert res.tolerance == 0.25 and res.tolerance_abs == pytest.approx(0.25 * 0.104)
    assert res.n_boot == 500
    if sign > 0:
        assert res.unexplained_ci[0] > res.tolerance_abs
    else:
        assert res.unexplained_ci[1] < -res.tolerance_abs
    assert not res.within_tolerance and not res.predicts_gain and not res.explained


def test_explained_gain_defaults():
    phi, vex, groups, seeds = _flat_campaign([-0.1, -0.12, -0.09])
    res = explained_gain(phi, vex, groups, seeds, rng=0)
    assert res.n_boot == 2000 and res.confidence_level == 0.95 and res.tolerance == 0.25
    assert [r.seed for r in res.per_seed] == [0, 1, 2]
    assert [r.d for r in res.per_seed] == pytest.approx([0.1, 0.12, 0.09])
    assert all(r.g_pred == 0.0 and r.phi_policy == 2.0 and r.n_draws == 1 for r in res.per_seed)


def test_explained_gain_input_checks():
    phi, vex, groups, seeds = _flat_campaign([0.0, 0.0, 0.0])
    with pytest.raises(InputError, match=r"must be \(n,\) arrays"):
        explained_gain(phi, vex[:-1], groups, seeds)
    with pytest.raises(InputError, match=r"must be \(n,\) arrays"):
        explained_gain(phi, vex, groups[:-1], seeds)
    with pytest.raises(InputError, match=r"must be \(n,\) arrays"):
        explained_gain(phi[None, :], vex[None, :], groups[None, :], seeds)
    for which in ("phi", "vex"):
        bad = {"phi": phi.copy(), "vex": vex.copy()}
        bad[which][4] = np.nan
        with pytest.raises(InputError, match="phi or vex holds NaN/inf"):
            explained_gain(bad["phi"], bad["vex"], groups, seeds)
    for tol in (-0.01, float("nan")):
        with pytest.raises(InputError, match="tolerance"):
            explained_gain(phi, vex, groups, seeds, tolerance=tol)
    without_draws = [seeds[0], (1, seeds[1][1], [])]
    with pytest.raises(NotEstimable, match=r"1 seed\(s\) with a policy run and draws"):
        explained_gain(phi, vex, groups, without_draws)
    one_phi = np.where(groups == 2, 2.0, phi)            # seed 0 held out: seeds 1, 2 left
    one_phi[groups == 1] = 2.0
    with pytest.raises(NotEstimable, match="holding out seed 0 leaves a constant"):
        explained_gain(one_phi, vex, groups, seeds)


# ------------------------------------------------------------------------- F_K without edges


def _volume(m, L, w):
    """Volume of {x >= 0, 0 <= y <= w (m of them), x + sum(y) <= L} by quadrature."""
    from scipy import integrate

    if m == 1:
        return integrate.quad(lambda y: max(L - y, 0.0), 0, w, points=[min(L, w)])[0]
    return integrate.dblquad(lambda y2, y1: max(L - y1 - y2, 0.0), 0, w, 0, w)[0]


@pytest.mark.parametrize("m,L,w", [(1, 70.0, 30.0), (1, 1.0, 2.0), (2, 1.5, 1.0),
                                   (2, 2.0, 1.0), (2, 0.5, 1.0), (2, 2.5, 1.0)])
def test_feasible_class_acceptance_rates_against_quadrature(m, L, w):
    k, d, a = m + 1, 5.0, 10.0
    fc = feasible_class(k, (0.0, L + d + m * a), d, a, a + w)
    assert fc.m == m and fc.slack == pytest.approx(L, abs=1e-12)
    vol = _volume(m, L, w)
    assert fc.acceptance_box == pytest.approx(vol / (L * w ** m), rel=1e-7)
    assert fc.acceptance_simplex == pytest.approx(vol / (L ** (m + 1) / math.factorial(m + 1)),
                                                  rel=1e-7)


def test_feasible_class_reported_fields():
    fc = feasible_class(3, (10.0, 110.0), 8.0, 5.0, 30.0)      # min_gap below D: a = D
    assert (fc.k, fc.t0, fc.last_start, fc.duration) == (3, 10.0, 102.0, 8.0)
    assert fc.gap_low == 8.0 and fc.gap_high == 30.0 and fc.slack == 92.0 - 16.0
    assert fc.m == 2
    one = feasible_class(1, (0.0, 50.0), 5.0, 10.0, 30.0)
    assert one.slack == 45.0 and one.m == 0
    assert one.acceptance_box == one.acceptance_simplex == 1.0
    zero = feasible_class(0, (0.0, 3.0), 5.0, 10.0, 30.0)        # K = 0: any span
    assert zero.slack == -2.0 and zero.m == 0 and zero.acceptance_box == 1.0
    fixed = feasible_class(3, (0.0, 100.0), 5.0, 20.0, 20.0)
    assert fixed.m == 0 and fixed.slack == 55.0 and fixed.acceptance_simplex == 1.0
    tight = feasible_class(2, (0.0, 25.0), 5.0, 20.0, 40.0)      # zero slack
    assert tight.slack == 0.0 and tight.m == 1
    assert tight.acceptance_box == tight.acceptance_simplex == 1.0
    inf = feasible_class(3, (0.0, 100.0), 5.0, 10.0, math.inf)
    assert inf.acceptance_box == 0.0 and inf.acceptance_simplex == 1.0 and inf.m == 2


def test_feasible_class_boundaries_that_are_allowed():
    assert feasible_class(1, (0.0, 5.0), 5.0, 10.0, 20.0).slack == 0.0     # span = D
    assert feasible_class(2, (0.0, 30.0), 5.0, 0.0, 5.0).gap_low == 5.0    # min_gap 0, b = a
    assert feasible_class(2, (0.0, 30.0), 0.5, 0.5, 0.5).gap_high == 0.5   # D below 1 s
    assert feasible_class(2, (0.0, 30.5), 5.0, 25.0, 26.0).slack == 0.5   # slack below 1
    assert feasible_class(1, (0.0, 30.0), 5.0, 10.0, 2.0 + 8.0).m == 0     # K = 1: b < D ok
    assert feasible_class(1, (0.0, 30.0), 8.0, 1.0, 2.0).gap_low == 8.0


@pytest.mark.parametrize("args,match", [
    ((-1, (0, 100), 5, 10, 20), "K = -1 is negative"),
    ((2, (0, math.inf), 5, 10, 20), "must be finite"),
    ((2, (-math.inf, 100), 5, 10, 20), "must be finite"),
    ((1, (0, 100), math.inf, 10, 20), "must be finite"),
    ((2, (0, 100), 5, math.nan, 20), "must be finite"),
    ((2, (0, 100), 5, 10, math.nan), "must be finite"),
    ((2, (0, 100), 0, 10, 20), "D = 0.0 must be positive"),
    ((2, (0, 100), -1, 10, 20), "must be positive"),
    ((2, (0, 100), 5, -1, 20), "0 <= min_gap <= max_gap"),
    ((2, (0, 100), 5, 21, 20), "0 <= min_gap <= max_gap"),
    ((2, (0, 100), 10, 5, 9.5), "shorter than the merge duration"),
    ((1, (0, 4.5), 5, 1, 10), "shorter than one window"),
    ((2, (0, 20), 5, 20, 40), r"need at least 25.0 s but the span is 20.0 s"),
    ((3, (0, 40), 5, 20, 40), r"need at least 45.0 s"),
])
def test_feasible_class_rejects(args, match):
    with pytest.raises(InputError, match=match):
        feasible_class(*args)


def test_feasible_class_span_must_be_a_pair_of_numbers():
    for span in ((0, "end"), (0, 1, 2), None):
        with pytest.raises(InputError, match="span must be a pair"):
            feasible_class(2, span, 5, 10, 20)


def _cdf_k2(L, w):
    """K = 2 closed forms: first start x has density ~ min(w, L - x) on [0, L], the gap slack
    y density ~ (L - y) on [0, min(w, L)]."""
    c = min(w, L)
    vol = c * L - c ** 2 / 2
    cdf_y = lambda v: (L * v - v ** 2 / 2) / vol

    def cdf_x(v):
        v = np.asarray(v)
        return np.where(v <= L - c, c * v, c * (L - c) + (c ** 2 - (L - v) ** 2) / 2) / vol
    return cdf_x, cdf_y


@pytest.mark.parametrize("method", ["reject-box", "reject-simplex", "sequential", "auto"])
@pytest.mark.parametrize("L,w", [(1.5, 1.0), (0.8, 3.0), (1.0, 2.0)])
def test_two_windows_in_a_short_span_match_the_closed_form(method, L, w):
    """A slack and gap freedom of about 1 s: a sampler that starts its uniforms at 1 instead
    of 0 (or shifts them) is far off."""
    d, a = 5.0, 10.0
    span = (100.0, 100.0 + L + d + a)
    s = sample_schedules(2, span, d, a, a + w, 20_000, rng=3, method=method, edges=False)
    assert s.shape == (20_000, 2)
    x, y = s[:, 0] - span[0], s[:, 1] - s[:, 0] - a
    assert x.min() >= 0 and y.min() >= -1e-9 and y.max() <= w + 1e-9
    assert s[:, 1].max() <= span[1] - d
    cdf_x, cdf_y = _cdf_k2(L, w)
    assert stats.kstest(x, cdf_x).pvalue > 1e-3
    assert stats.kstest(y, cdf_y).pvalue > 1e-3


@pytest.mark.parametrize("method", ["reject-box", "reject-simplex", "sequential", "auto"])
def test_one_and_zero_schedules(method):
    cfg = (3, (0.0, 100.0), 5.0, 20.0, 40.0)
    one = sample_schedules(*cfg, 1, rng=2, method=method, edges=False)
    assert one.shape == (1, 3)
    g = np.diff(one[0])
    assert one[0, 0] >= 0 and one[0, -1] <= 95 and g.min() >= 20 - 1e-9 and g.max() <= 40 + 1e-9
    assert sample_schedules(*cfg, 0, rng=2, method=method, edges=False).shape == (0, 3)
    assert sample_schedules(*cfg, 0, rng=2).shape == (0, 3)              # with edges
    with pytest.raises(InputError, match="n = -1 must be >= 0"):
        sample_schedules(*cfg, -1, rng=2, method=method, edges=False)
    with pytest.raises(InputError, match="n = -1 must be >= 0"):
        sample_schedules(*cfg, -1, rng=2)


def test_zero_slack_and_fixed_gap_schedules():
    zero = sample_schedules(3, (0.0, 45.0), 5.0, 20.0, 40.0, 5, rng=0, edges=False)
    assert np.array_equal(zero, np.tile([0.0, 20.0, 40.0], (5, 1)))
    fixed = sample_schedules(3, (0.0, 45.5), 5.0, 20.0, 20.0, 4000, rng=1, edges=False)
    assert np.allclose(np.diff(fixed, axis=1), 20.0)
    assert fixed[:, 0].min() >= 0 and fixed[:, 0].max() <= 0.5
    assert stats.kstest(fixed[:, 0] / 0.5, "uniform").pvalue > 1e-3
    wide = sample_schedules(2, (0.0, 40.0), 5.0, 25.0, 25.0, 4000, rng=1, edges=False)
    assert stats.kstest(wide[:, 0] / 10.0, "uniform").pvalue > 1e-3
    single = sample_schedules(1, (0.0, 5.0), 5.0, 10.0, 20.0, 3, rng=0, edges=False)
    assert np.array_equal(single, np.zeros((3, 1)))


def test_many_windows_with_a_loose_gap_cap_use_rejection_not_sequential():
    """K = 70 (69 free gaps, beyond the sequential sampler) with a gap cap that never binds:
    the box sampler accepts almost nothing, the simplex sampler everything."""
    cfg = (70, (0.0, 795.0), 5.0, 10.0, 1010.0)
    fc = feasible_class(*cfg)
    assert fc.acceptance_simplex == 1.0 and fc.acceptance_box < 1e-100
    s = sample_schedules(*cfg, 50, rng=0, edges=False)
    assert s.shape == (50, 70) and np.diff(s, axis=1).min() >= 10 - 1e-9
    assert s.max() <= 790 + 1e-9


def test_sequential_sampler_limit_is_61_windows():
    ok = sample_schedules(61, (0.0, 700.0), 5.0, 10.0, 12.0, 20, rng=0, method="sequential",
                          edges=False)
    gaps = np.diff(ok, axis=1)
    assert ok.shape == (20, 61) and gaps.min() >= 10 - 1e-9 and gaps.max() <= 12 + 1e-9
    with pytest.raises(InputError, match=r"limited to K <= 61"):
        sample_schedules(62, (0.0, 700.0), 5.0, 10.0, 12.0, 20, rng=0, method="sequential",
                         edges=False)


def test_sampler_method_checks():
    cfg = (3, (0.0, 100.0), 5.0, 10.0, math.inf)
    for method in ("reject-box", "sequential"):
        with pytest.raises(InputError, match=f"{method} needs a finite max_gap"):
            sample_schedules(*cfg, 10, method=method, edges=False)
    s = sample_schedules(*cfg, 200, method="reject-simplex", edges=False)
    assert np.diff(s, axis=1).min() >= 10 - 1e-9
    with pytest.raises(InputError, match="unknown sampling method 'gibbs'"):
        sample_schedules(3, (0.0, 100.0), 5.0, 10.0, 40.0, 10, method="gibbs", edges=False)
    with pytest.raises(InputError, match="unknown sampling method 'reject-simplex' for F_K "
                                         "with edges"):
        sample_schedules(3, (0.0, 100.0), 5.0, 10.0, 40.0, 10, method="reject-simplex")


def test_unbounded_gaps_start_min_gap_after_the_training_start():
    """Infinite max_gap with edges: only the leading edge applies (first start at least
    min_gap after train_start); without train_start the span start is the bound."""
    s = sample_schedules(2, (0.0, 100.0), 5.0, 10.0, math.inf, 3000, rng=1, train_start=20.0)
    assert s.min() >= 30.0 - 1e-9 and s[:, 0].min() < 31.0 and s.max() <= 95 + 1e-9
    cdf_x, _ = _cdf_k2(55.0, math.inf)
    assert stats.kstest(s[:, 0] - 30.0, cdf_x).pvalue > 1e-3
    before = sample_schedules(2, (0.0, 100.0), 5.0, 10.0, math.inf, 3000, rng=1,
                              train_start=-50.0)
    assert before.min() >= 0.0 and before[:, 0].min() < 1.0
    free = sample_schedules(2, (0.0, 100.0), 5.0, 10.0, math.inf, 3000, rng=1)
    assert free.min() >= 0.0 and free[:, 0].min() < 1.0
    ignored = sample_schedules(2, (0.0, 100.0), 5.0, 10.0, math.inf, 3000, rng=1,
                               train_start=20.0, edges=False)
    assert np.array_equal(ignored, free)


@pytest.mark.parametrize("L,w", [(1.5, 1.0), (0.8, 3.0), (70.0, 30.0)])
def test_sequential_sampler_inverts_the_exact_conditional_cdf(L, w):
    """K = 2 in units of w: the gap slack y given the budget s = L / w has density ~ (s - y)
    on [0, min(1, s)], so with its uniform U, v = s - y solves v^2 = (1 - U) s^2 + U (s - c)^2
    (c = min(1, s)); then x = U' (s - y).  The sampler draws U for all schedules, then U'."""
    d, a, n = 5.0, 10.0, 500
    span = (0.0, L + d + a)
    s_out = sample_schedules(2, span, d, a, a + w, n, rng=9, method="sequential", edges=False)
    rng = np.random.default_rng(9)
    u, u2 = rng.uniform(size=n), rng.uniform(size=n)
    s, c = L / w, min(1.0, L / w)
    y = s - np.sqrt((1 - u) * s ** 2 + u * (s - c) ** 2)
    x = u2 * (s - y)
    assert np.allclose(s_out[:, 0], x * w, rtol=0, atol=1e-8 * w)
    assert np.allclose(s_out[:, 1] - s_out[:, 0] - a, y * w, rtol=0, atol=1e-8 * w)


def test_non_numeric_inputs_are_input_errors():
    from evalkit.errors import InputError
    from evalkit.stats._result import check_n_resamples
    from evalkit.stats.fk import feasible_class

    with pytest.raises(InputError, match="must be numbers"):
        feasible_class("x", (0.0, 300.0), 8.0, 20.0, 200.0)
    with pytest.raises(InputError, match="must be numbers"):
        feasible_class(3, (0.0, 300.0), None, 20.0, 200.0)
    for bad in ("100", b"100", True):
        with pytest.raises(InputError, match="n_resamples"):
            check_n_resamples(bad)
    check_n_resamples(100)
    check_n_resamples(np.int64(7))
    check_n_resamples(np.inf)
