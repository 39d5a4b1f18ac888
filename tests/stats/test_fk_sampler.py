"""F_K without edges: acceptance rates against quadrature, reported fields, the closed form for
two windows, the sequential sampler against the exact inverse CDF."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from evalkit.errors import InputError
from evalkit.stats._result import check_n_resamples
from evalkit.stats.fk import feasible_class, sample_schedules


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


def test_the_sequential_sampler_keeps_a_first_start_with_no_freedom_where_it_is():
    from evalkit.stats.fk import FeasibleClass, sample_class

    fc = FeasibleClass(k=3, first_lo=10.0, first_hi=10.0, gap_low=20.0, gap_high=40.0,
                       last_lo=60.0, last_hi=80.0, duration=8.0, acceptance=0.01, edges=True)
    s = sample_class(fc, 2000, np.random.default_rng(0), method="sequential")
    gaps = np.diff(s, axis=1)
    assert np.all(s[:, 0] == 10.0)
    assert gaps.min() >= 20.0 and gaps.max() <= 40.0
    assert s[:, -1].min() >= 60.0 and s[:, -1].max() <= 80.0
