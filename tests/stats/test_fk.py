"""Uniform sampling from F_K: feasibility, exact marginals and agreement with brute force.

F_K at its edges: min = max, zero slack, a minimum gap below the duration, edge classes at K
= 0 and 1.

F_K with the corridor's edges: uniform sampling against an independent brute force, the
run check, and infeasible classes."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from evalkit.errors import InputError
from evalkit.runlog.design import corridor_violations
from evalkit.stats.fk import (_f, _int_power, _rejection, edge_class, feasible_class,
                              sample_schedules)


METHODS = ("reject-box", "reject-simplex", "sequential")


def brute_force(k, span, d, min_gap, max_gap, n, seed):
    """Independent reference: uniform starts in the span, sorted, kept if the gaps fit."""
    rng = np.random.default_rng(seed)
    lo, hi = span[0], span[1] - d
    out = []
    have = 0
    while have < n:
        s = np.sort(rng.uniform(lo, hi, size=(200_000, k)), axis=1)
        g = np.diff(s, axis=1)
        ok = np.all((g >= max(min_gap, d)) & (g <= max_gap), axis=1)
        out.append(s[ok])
        have += ok.sum()
    return np.concatenate(out)[:n]


def assert_feasible(s, k, span, d, min_gap, max_gap):
    assert s.shape[1] == k
    assert s.min() >= span[0] and s.max() <= span[1] - d + 1e-9
    g = np.diff(s, axis=1)
    assert g.min() >= max(min_gap, d) - 1e-9 and g.max() <= max_gap + 1e-9


@pytest.mark.parametrize("method", METHODS)
def test_two_windows_first_gap_matches_closed_form(method):
    # K = 2: L = 100 - 10 - 20 = 70 slack, w = 30; gap slack y has density prop. to (L - y)
    k, span, d, a, b = 2, (0.0, 100.0), 10.0, 20.0, 50.0
    s = sample_schedules(k, span, d, a, b, 4000, rng=1, method=method, edges=False)
    assert_feasible(s, k, span, d, a, b)
    L, c = 70.0, 30.0
    y = np.diff(s, axis=1)[:, 0] - a
    cdf = lambda v: (L * v - v ** 2 / 2) / (L * c - c ** 2 / 2)
    assert stats.kstest(y, cdf).pvalue > 1e-3
    # first start x: density prop. to min(w, L - x) on [0, L]
    x = s[:, 0]
    total = c * (L - c) + c ** 2 / 2
    cdf_x = lambda v: np.where(v <= L - c, c * v, c * (L - c) + (c ** 2 - (L - v) ** 2) / 2) / total
    assert stats.kstest(x, cdf_x).pvalue > 1e-3


@pytest.mark.parametrize("method", METHODS)
def test_k4_agrees_with_brute_force(method):
    cfg = (4, (0.0, 200.0), 5.0, 30.0, 60.0)
    s = sample_schedules(*cfg, 3000, rng=2, method=method, edges=False)
    assert_feasible(s, *cfg)
    ref = brute_force(*cfg, 3000, seed=3)
    pairs = [(s[:, 0], ref[:, 0]), (s[:, 1] - s[:, 0], ref[:, 1] - ref[:, 0]),
             (s[:, -1], ref[:, -1]), (s[:, 2] - s[:, 1], ref[:, 2] - ref[:, 1])]
    for mine, theirs in pairs:
        assert stats.ks_2samp(mine, theirs).pvalue > 1e-3


def test_chi_square_on_grid_vs_brute_force():
    cfg = (3, (0.0, 100.0), 8.0, 20.0, 40.0)
    s = sample_schedules(*cfg, 6000, rng=4, edges=False)
    ref = brute_force(*cfg, 6000, seed=5)
    # joint cell of (first start, first gap) on a 4 x 4 grid
    def cells(x):
        a = np.minimum((x[:, 0] / 44 * 4).astype(int), 3)
        b = np.minimum(((x[:, 1] - x[:, 0] - 20) / 20 * 4).astype(int), 3)
        return np.bincount(a * 4 + b, minlength=16)
    table = np.vstack((cells(s), cells(ref)))
    table = table[:, table.sum(axis=0) > 0]
    assert stats.chi2_contingency(table).pvalue > 1e-3


def test_tight_corridor_uses_sequential_and_is_uniform():
    # K = 30, slack 0.45 of the maximum: both rejection samplers accept < 2 %
    cfg = (30, (0.0, 2531.0), 8.0, 60.0, 120.0)
    fc = feasible_class(*cfg)
    assert max(fc.acceptance_box, fc.acceptance_simplex) < 0.02     # auto -> sequential
    s = sample_schedules(*cfg, 1500, rng=6, edges=False)
    assert_feasible(s, *cfg)
    ref = sample_schedules(*cfg, 1500, rng=7, method="reject-simplex", edges=False)
    for col in (0, 10, 29):
        assert stats.ks_2samp(s[:, col], ref[:, col]).pvalue > 1e-3
    gaps, ref_gaps = np.diff(s, axis=1), np.diff(ref, axis=1)
    for col in (0, 14, 28):
        assert stats.ks_2samp(gaps[:, col], ref_gaps[:, col]).pvalue > 1e-3


def test_acceptance_rates_are_exact():
    cfg = (5, (0.0, 300.0), 5.0, 30.0, 80.0)
    fc = feasible_class(*cfg)
    rng = np.random.default_rng(0)
    x = rng.uniform(0, fc.slack, 200_000)
    y = rng.uniform(0, fc.gap_high - fc.gap_low, (200_000, 4))
    emp = np.mean(x + y.sum(axis=1) <= fc.slack)
    assert emp == pytest.approx(fc.acceptance_box, abs=0.005)


def test_edge_cases_and_determinism():
    assert sample_schedules(0, (0, 100), 5, 10, 20, 7, rng=0, edges=False).shape == (7, 0)
    one = sample_schedules(1, (0, 100), 5, 10, 20, 5000, rng=0, edges=False)
    assert one.min() >= 0 and one.max() <= 95
    assert stats.kstest(one[:, 0] / 95, "uniform").pvalue > 1e-3
    fixed = sample_schedules(3, (0, 100), 5, 20, 20, 10, rng=0, edges=False)    # fixed gaps
    assert np.allclose(np.diff(fixed, axis=1), 20)
    inf_gap = sample_schedules(3, (0, 100), 5, 10, np.inf, 100, rng=0, edges=False)
    assert np.diff(inf_gap, axis=1).min() >= 10
    a = sample_schedules(8, (0, 600), 8, 30, 90, 100, rng=9, edges=False)
    assert np.array_equal(a, sample_schedules(8, (0, 600), 8, 30, 90, 100, rng=9, edges=False))


@pytest.mark.parametrize("args,match", [
    ((10, (0, 100), 5, 20, 40), "infeasible corridor"),
    ((3, (0, 100), 10, 2, 5), "overlap"),
    ((2, (0, 4), 5, 1, 10), "shorter than one window"),
    ((2, (0, 100), 5, 30, 20), "min_gap <= max_gap"),
    ((2, (0, 100), 0, 1, 10), "positive"),
])
def test_infeasible_constraints_raise(args, match):
    with pytest.raises(InputError, match=match):
        sample_schedules(*args, 10, rng=0, edges=False)


def test_the_rejection_sampler_asks_for_at_most_two_million_candidates_at_a_time():
    # memory stays bounded (2 M x k floats) however rare acceptance is; below the cap a
    # batch is the expected need with 10% and 64 candidates to spare
    asked = []

    def draw(batch):
        asked.append(batch)
        return np.zeros((batch // 50, 2))             # 2% of the candidates are accepted
    out = _rejection(draw, 100_000, 0.02)
    assert out.shape == (100_000, 2)
    assert asked == [2_000_000, 2_000_000, 1_100_064]
    asked.clear()
    _rejection(draw, 1_000, 0.02)
    assert asked == [math.ceil(1_000 / 0.02 * 1.1) + 64]


def test_integer_powers_by_squaring_are_within_a_few_ulps_of_the_exact_power():
    z = np.array([0.0, 1e-3, 0.37, 1.0, 1.5, 2.75, 9.999])
    for k in (0, 1, 2, 3, 7, 16, 33, 61):
        got = _int_power(z, k)
        exact = np.array([float(Fraction(x) ** k) for x in z])
        assert np.allclose(got, exact, rtol=16 * np.finfo(float).eps, atol=0.0), k


@pytest.mark.parametrize("j, p", [(1, 1), (3, 1), (4, 2), (8, 3)])
def test_the_float_volume_function_agrees_with_the_exact_one(j, p):
    v = np.linspace(-0.5, j + 0.5, 23)
    exact = np.array([float(_f(j, p, Fraction(x), exact=True)) for x in v])
    assert np.allclose(_f(j, p, v), exact, rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------------------------- F_K

def test_fixed_cadence_corridor_min_equals_max():
    # gaps fixed at 64 s: only the first start is free, every schedule is a shifted comb
    s = sample_schedules(3, (0.0, 300.0), 8.0, 64.0, 64.0, 200, rng=1, edges=False)
    assert s.shape == (200, 3)
    assert np.allclose(np.diff(s, axis=1), 64.0)
    assert s.min() >= 0.0 and s[:, -1].max() <= 292.0 + 1e-9
    fc = feasible_class(3, (0.0, 300.0), 8.0, 64.0, 64.0)
    assert fc.m == 0 and fc.slack == pytest.approx(292.0 - 128.0)


def test_fixed_cadence_with_edges():
    # edges: first start in [64, 64] after training start, gaps 64, end within 64 of 292
    s = sample_schedules(4, (0.0, 300.0), 8.0, 64.0, 64.0, 50, rng=2)
    assert np.allclose(s, [64.0, 128.0, 192.0, 256.0])
    assert corridor_violations([64, 128, 192, 256], [72, 136, 200, 264], (0, 300), 8.0,
                               64.0, 64.0) == []


def test_zero_slack_schedule_is_the_only_one():
    # K windows packed at min gap fill the span exactly
    s = sample_schedules(3, (0.0, 28.0), 8.0, 10.0, 50.0, 20, rng=3, edges=False)
    assert np.allclose(s, [0.0, 10.0, 20.0])
    with pytest.raises(InputError):
        feasible_class(3, (0.0, 27.999), 8.0, 10.0, 50.0)


def test_min_gap_below_duration_uses_duration():
    fc = feasible_class(2, (0.0, 100.0), 8.0, 2.0, 50.0)
    assert fc.gap_low == 8.0
    s = sample_schedules(2, (0.0, 100.0), 8.0, 2.0, 50.0, 500, rng=4, edges=False)
    assert np.diff(s, axis=1).min() >= 8.0 - 1e-9


def test_edge_class_k0_edge():
    with pytest.raises(InputError):
        edge_class(0, (0, 300), 8.0, 0, 292.0)
    assert edge_class(0, (0, 300), 8.0, 0, 292.01).k == 0


def test_edge_class_without_free_gaps_reports_acceptance_one():
    assert edge_class(1, (0, 300), 8.0, 10.0, 200.0).acceptance == 1.0
    assert edge_class(4, (0, 300), 8.0, 64.0, 64.0).acceptance == 1.0


def test_edge_class_gap_count_at_k0_and_k1():
    assert edge_class(0, (0, 300), 8.0, 0, 292.01).m == 0
    ec = edge_class(1, (0, 300), 8.0, 0, 300.0)
    assert ec.k == 1 and ec.m == 0
    assert edge_class(3, (0, 300), 8.0, 0, 300.0).m == 2


def test_edge_class_zero_slack_at_the_end_is_feasible():
    # first start >= 20, gaps >= 20, last start <= 68 - 8 = 60: exactly one latest schedule
    ec = edge_class(3, (0, 68), 8.0, 20.0, 30.0)
    assert ec.k == 3 and ec.last_hi == 60.0 and ec.first_lo == 20.0
    with pytest.raises(InputError):
        edge_class(3, (0, 67.99), 8.0, 20.0, 30.0)


def test_edge_class_k0_reports_acceptance_one():
    assert edge_class(0, (0, 300), 8.0, 0, 292.01).acceptance == 1.0


def test_single_window_sample_stays_inside_both_edges():
    from evalkit.stats.fk import sample_class

    ec = edge_class(1, (0, 300), 8.0, 20.0, 200.0)       # first start in [20, 200], last in [92, 292]
    starts = sample_class(ec, 2000, np.random.default_rng(0))[:, 0]
    assert starts.min() >= 92.0 and starts.max() <= 200.0
    assert starts.min() < 95.0 and starts.max() > 197.0


def test_edge_class_zero_slack_at_the_start_is_feasible():
    # first start <= 30, gaps <= 30, last start >= 128 - 8 - 30 = 90: only the latest schedule
    assert edge_class(3, (0, 128), 8.0, 20.0, 30.0).k == 3
    with pytest.raises(InputError):
        edge_class(3, (0, 128.01), 8.0, 20.0, 30.0)


def brute_force_from_start(k, span, d, min_gap, max_gap, n, seed, train_start=0.0):
    """Independent reference: K sorted uniform starts in the span, kept if every rule of
    F_K with edges holds (written from the protocol's definition, not from the sampler)."""
    rng = np.random.default_rng(seed)
    t0, t1 = span
    out = []
    while len(out) < n:
        s = np.sort(rng.uniform(t0, t1 - d, size=(200_000, k)), axis=1)
        g = np.diff(s, axis=1)
        ok = np.all(g >= max(min_gap, d), axis=1) & np.all(g <= max_gap, axis=1)
        ok &= (s[:, 0] - train_start >= min_gap) & (s[:, 0] - train_start <= max_gap)
        ok &= (t1 - d) - s[:, -1] < max_gap
        out.extend(s[ok])
    return np.array(out[:n])


CASES = [
    (3, (0.0, 200.0), 8.0, 20.0, 80.0),      # loose: box rejection
    (6, (0.0, 300.0), 8.0, 30.0, 60.0),      # tight gaps: sequential
    (2, (15.0, 150.0), 5.0, 25.0, 70.0),     # span starts after training (t0 > 0)
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("method", ["reject-box", "sequential"])
def test_uniform_against_brute_force(case, method):
    k, span, d, lo, hi = case
    got = sample_schedules(k, span, d, lo, hi, 2000, rng=1, method=method, train_start=0.0)
    ref = brute_force_from_start(k, span, d, lo, hi, 2000, seed=2)
    assert got.shape == (2000, k)
    assert all(corridor_violations(s, s + d, (0.0, span[1]), d, lo, hi, 0.0, 1e-9) == []
               for s in got[:300])
    for j in range(k):
        assert stats.ks_2samp(got[:, j], ref[:, j]).pvalue > 1e-3, (j, method)
    gaps = np.diff(got, axis=1).ravel()
    gaps_ref = np.diff(ref, axis=1).ravel()
    if gaps.size:
        assert stats.ks_2samp(gaps, gaps_ref).pvalue > 1e-3


def test_acceptance_is_the_exact_volume_ratio():
    ec = edge_class(3, (0.0, 200.0), 8.0, 20.0, 80.0, train_start=0.0)
    rng = np.random.default_rng(0)
    c = ec.first_hi - ec.first_lo
    w = ec.gap_high - ec.gap_low
    x = rng.uniform(0, c, 400_000)
    y = rng.uniform(0, w, (400_000, 2))
    tot = x + y.sum(axis=1)
    lo = ec.last_lo - ec.first_lo - 2 * ec.gap_low
    hi = ec.last_hi - ec.first_lo - 2 * ec.gap_low
    share = np.mean((tot >= lo) & (tot <= hi))
    assert share == pytest.approx(ec.acceptance, abs=4e-3)


def test_run_check_names_each_edge():
    d, lo, hi = 8.0, 20.0, 80.0
    assert corridor_violations([30, 90, 150], [38, 98, 158], (0, 200), d, lo, hi) == []
    assert "first merge" in corridor_violations([10, 70, 130], [18, 78, 138], (0, 200), d, lo,
                                                hi)[0]
    assert "> max_gap" in corridor_violations([85, 150], [93, 158], (0, 200), d, lo, hi)[0]
    assert "apart <" in corridor_violations([30, 39, 100, 160], [38, 47, 108, 168], (0, 200),
                                            d, lo, hi)[0]
    assert "forced" in corridor_violations([30, 80], [38, 88], (0, 200), d, lo, hi)[0]
    assert corridor_violations([], [], (0, 200), d, lo, hi)          # K = 0 over 192 s
    # tolerance: decisions at step ends
    assert corridor_violations([19.8, 80, 140], [27.8, 88, 148], (0, 200), d, lo, hi,
                               tol=0.5) == []


def test_infeasible_edges_raise():
    with pytest.raises(InputError, match="infeasible"):
        edge_class(1, (0.0, 400.0), 8.0, 20.0, 80.0, train_start=0.0)   # 1 window, 392 s
    with pytest.raises(InputError, match="K = 0"):
        edge_class(0, (0.0, 400.0), 8.0, 20.0, 80.0)
    with pytest.raises(InputError, match="finite max_gap"):
        edge_class(2, (0.0, 400.0), 8.0, 20.0, np.inf)


@pytest.mark.parametrize("j, p", [(1, 1), (2, 1), (3, 2), (4, 3)])
def test_uniform_sum_integrals_exact_and_float_agree_beyond_j(j, p):
    from fractions import Fraction

    from evalkit.stats.fk import _f

    for v in (0.25, j / 2, j - 0.1, j + 0.5, j + 2.0):
        exact = float(_f(j, p, Fraction(v), exact=True))
        assert exact == pytest.approx(float(_f(j, p, v)), rel=1e-12, abs=1e-15)
    # p = 1 is the Irwin-Hall CDF: 1 beyond j, and v^j / j! below 1
    if p == 1:
        assert float(_f(j, 1, Fraction(j + 1), exact=True)) == pytest.approx(1.0)
        assert float(_f(j, 1, Fraction(1, 2), exact=True)) == pytest.approx(0.5 ** j
                                                                            / math.factorial(j))


def test_sampling_no_merges_or_no_schedules_gives_empty_arrays_of_the_right_shape():
    from evalkit.stats.fk import sample_class

    rng = np.random.default_rng(0)
    no_merge = edge_class(0, (0.0, 100.0), 8.0, 10.0, 200.0)
    assert sample_class(no_merge, 5, rng).shape == (5, 0)
    three = edge_class(3, (0.0, 300.0), 8.0, 10.0, 120.0)
    for method in ("auto", "reject-box", "sequential"):
        assert sample_class(three, 0, rng, method=method).shape == (0, 3)


def test_fixed_cadence_from_d_with_a_free_first_start():
    from evalkit.stats.fk import sample_class

    # gaps fixed at D = max_gap = 8 (min_gap 2 < D); the edges leave the first start in [4, 8]
    ec = edge_class(3, (0.0, 36.0), 8.0, 2.0, 8.0)
    assert ec.gap_low == ec.gap_high == 8.0
    s = sample_class(ec, 4000, np.random.default_rng(3))
    assert np.allclose(np.diff(s, axis=1), 8.0)
    assert s[:, 0].min() >= 4.0 - 1e-12 and s[:, 0].max() <= 8.0 + 1e-12
    assert stats.kstest((s[:, 0] - 4.0) / 4.0, "uniform").pvalue > 1e-3
    for row in s[:50]:
        assert corridor_violations(row, row + 8.0, (0.0, 36.0), 8.0, 2.0, 8.0, tol=1e-9) == []


def test_a_class_of_zero_volume_gives_its_one_schedule():
    from evalkit.stats.fk import sample_class

    # K = 2, D = 2, gaps [5, 40]: in a 122 s run the edges leave only [40, 80]
    forced = edge_class(2, (0.0, 122.0), 2.0, 5.0, 40.0)
    assert forced.acceptance == 0.0
    for method in ("auto", "reject-box", "sequential"):
        s = sample_class(forced, 5, np.random.default_rng(0), method=method)
        assert np.array_equal(s, np.tile([40.0, 80.0], (5, 1)))
    # the other corner: every gap at its minimum from the earliest start
    packed = edge_class(3, (0.0, 17.0), 2.0, 5.0, 40.0)
    assert packed.acceptance == 0.0
    s = sample_class(packed, 3, np.random.default_rng(0), method="reject-box")
    assert np.array_equal(s, np.tile([5.0, 10.0, 15.0], (3, 1)))
    ec = edge_class(2, (0.0, 121.0), 2.0, 5.0, 40.0)           # just inside: a sliver
    assert 0 < ec.acceptance < 1e-3

    s = sample_class(ec, 200, np.random.default_rng(0))
    for row in s:
        assert corridor_violations(row, row + 2.0, (0.0, 121.0), 2.0, 5.0, 40.0,
                                   tol=1e-9) == []


def test_a_zero_volume_slice_has_no_uniform_draw():
    from evalkit.stats.fk import sample_class

    # run_end = t1 + max_gap pins the last start to t1 - D = 115: a slice of schedules
    # (first start in [35, 40]), not a corner, so there is nothing to sample uniformly
    ec = edge_class(3, (0.0, 117.0), 2.0, 5.0, 40.0, run_end=157.0)
    assert ec.last_lo == ec.last_hi == 115.0 and ec.acceptance == 0.0
    with pytest.raises(InputError, match="leaves no freedom"):
        sample_class(ec, 3, np.random.default_rng(0))
