"""F_K with the corridor's edges: uniform sampling against an independent brute force, the
run check, and infeasible classes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from evalkit.errors import InputError
from evalkit.stats import sample_schedules
from evalkit.runlog.design import corridor_violations
from evalkit.stats.fk import edge_class


def brute_force(k, span, d, min_gap, max_gap, n, seed, train_start=0.0):
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
    ref = brute_force(k, span, d, lo, hi, 2000, seed=2)
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
