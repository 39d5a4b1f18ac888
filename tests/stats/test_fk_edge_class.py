"""Edge classes of F_K: fields, feasibility at each bound, acceptance as the box share, sampled
schedules respecting every edge."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalkit.errors import InputError
from evalkit.runlog.design import corridor_violations
from evalkit.stats import fk as se


# --------------------------------------------------------------------------------------------
# F_K with edges: edge_class fields, infeasibility, corridor_violations
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k, span, d, min_gap, max_gap, train_start, run_end, fields", [
    # fields: first_lo, first_hi, gap_low, last_lo, last_hi
    (3, (0.0, 100.0), 2.0, 5.0, 40.0, None, None, (5.0, 40.0, 5.0, 58.0, 98.0)),
    (3, (0.0, 100.0), 8.0, 5.0, 40.0, None, None, (5.0, 40.0, 8.0, 52.0, 92.0)),
    (2, (10.0, 100.0), 2.0, 5.0, 60.0, 0.0, None, (10.0, 60.0, 5.0, 38.0, 98.0)),
    (2, (10.0, 100.0), 2.0, 15.0, 60.0, 0.0, 110.0, (15.0, 60.0, 15.0, 48.0, 98.0)),
    (1, (0.0, 30.0), 2.0, 5.0, 40.0, None, None, (5.0, 28.0, 5.0, -12.0, 28.0)),
    (1, (0.0, 30.0), 2.0, 5.0, 20.0, -4.0, None, (1.0, 16.0, 5.0, 8.0, 28.0)),
])
def test_edge_class_fields(k, span, d, min_gap, max_gap, train_start, run_end, fields):
    ec = se.edge_class(k, span, d, min_gap, max_gap, train_start=train_start, run_end=run_end)
    assert (ec.first_lo, ec.first_hi, ec.gap_low, ec.last_lo, ec.last_hi) == fields
    assert (ec.k, ec.gap_high, ec.duration, ec.m) == (k, max_gap, d, max(k - 1, 0))
    assert 0.0 < ec.acceptance <= 1.0


def test_edge_class_k0_fields_and_threshold():
    ec = se.edge_class(0, (0.0, 21.9), 2.0, 5.0, 20.0)
    assert (ec.k, ec.m, ec.acceptance) == (0, 0, 1.0)
    assert (ec.first_lo, ec.first_hi, ec.gap_low, ec.gap_high) == (5.0, 19.9, 5.0, 20.0)
    assert ec.last_lo == pytest.approx(-0.1) and ec.last_hi == pytest.approx(19.9)
    with pytest.raises(InputError, match="K = 0 is infeasible: 20 s"):
        se.edge_class(0, (0.0, 22.0), 2.0, 5.0, 20.0)
    # the trainer's own end and start decide, not the span's
    se.edge_class(0, (0.0, 22.0), 2.0, 5.0, 20.0, run_end=21.0)
    with pytest.raises(InputError):
        se.edge_class(0, (0.0, 21.0), 2.0, 5.0, 20.0, run_end=22.0)
    with pytest.raises(InputError):
        se.edge_class(0, (0.0, 21.0), 2.0, 5.0, 20.0, train_start=-1.0)
    se.edge_class(0, (0.0, 22.0), 2.0, 5.0, 20.0, train_start=0.5)


def test_edge_class_needs_finite_max_gap_and_gap_at_least_d():
    with pytest.raises(InputError, match="finite max_gap"):
        se.edge_class(2, (0.0, 100.0), 2.0, 5.0, math.inf)
    with pytest.raises(InputError, match="shorter than the merge duration"):
        se.edge_class(2, (0.0, 100.0), 10.0, 5.0, 9.0)
    ec = se.edge_class(2, (0.0, 100.0), 10.0, 5.0, 10.0, run_end=30.0)
    assert ec.gap_low == ec.gap_high == 10.0 and ec.acceptance == 1.0
    # K = 1 has no gap: a max_gap below D is no contradiction
    se.edge_class(1, (0.0, 30.0), 10.0, 5.0, 9.0, run_end=25.0)


@pytest.mark.parametrize("k, span, d, min_gap, max_gap, ok", [
    (3, (0.0, 100.0), 2.0, 5.0, 40.0, True),
    # hi_sum < 0: K windows need first_lo + m a <= last_hi
    (3, (0.0, 17.0), 2.0, 5.0, 40.0, True),       # 5 + 10 = 15 = last_hi
    (3, (0.0, 16.9), 2.0, 5.0, 40.0, False),
    # lo_sum > c + m w: too few windows for the run
    (2, (0.0, 121.0), 2.0, 5.0, 40.0, True),      # last_lo = 79, first_hi + max_gap = 80
    (2, (0.0, 122.1), 2.0, 5.0, 40.0, False),
    # c < 0: the first window cannot fit
    (1, (0.0, 7.0), 2.0, 5.0, 40.0, True),        # first_hi = 5 = first_lo
    (1, (0.0, 6.9), 2.0, 5.0, 40.0, False),
])
def test_edge_class_feasibility_at_each_bound(k, span, d, min_gap, max_gap, ok):
    if ok:
        ec = se.edge_class(k, span, d, min_gap, max_gap)
        s = se.sample_class(ec, 50, np.random.default_rng(1))
        assert s.shape == (50, k)
        for row in s:
            assert corridor_violations(row, row + d, span, d, min_gap, max_gap,
                                          tol=1e-9) == []
    else:
        with pytest.raises(InputError, match=f"infeasible corridor: no schedule of K = {k}"):
            se.edge_class(k, span, d, min_gap, max_gap)


def _acceptance_by_sampling(ec, n=400_000, seed=0):
    """Share of box schedules (first start, then gaps in [a, max_gap]) whose last start lies
    in [last_lo, last_hi]."""
    rng = np.random.default_rng(seed)
    first = rng.uniform(ec.first_lo, ec.first_hi, n)
    gaps = rng.uniform(ec.gap_low, ec.gap_high, (n, ec.m))
    last = first + gaps.sum(axis=1)
    return np.mean((last >= ec.last_lo) & (last <= ec.last_hi))


@pytest.mark.parametrize("k, span, d, min_gap, max_gap, train_start", [
    (2, (0.0, 60.0), 2.0, 5.0, 30.0, None),
    (3, (0.0, 60.0), 2.0, 5.0, 30.0, None),
    (4, (0.0, 90.0), 6.0, 5.0, 30.0, None),
    (3, (0.0, 60.0), 2.0, 5.0, 20.0, -20.0),      # first start pinned: c = 0
])
def test_edge_class_acceptance_is_the_box_share(k, span, d, min_gap, max_gap, train_start):
    ec = se.edge_class(k, span, d, min_gap, max_gap, train_start=train_start)
    if ec.first_hi == ec.first_lo:
        rng = np.random.default_rng(0)
        gaps = rng.uniform(ec.gap_low, ec.gap_high, (400_000, ec.m))
        last = ec.first_lo + gaps.sum(axis=1)
        ref = np.mean((last >= ec.last_lo) & (last <= ec.last_hi))
    else:
        ref = _acceptance_by_sampling(ec)
    assert ec.acceptance == pytest.approx(ref, abs=5 * math.sqrt(ref * (1 - ref) / 4e5) + 1e-4)
    assert ec.acceptance < 1.0


def test_sampled_schedules_respect_every_edge_in_both_samplers():
    ec = se.edge_class(4, (0.0, 90.0), 6.0, 5.0, 30.0, train_start=-3.0)
    for method in ("reject-box", "sequential", "auto"):
        s = se.sample_class(ec, 300, np.random.default_rng(2), method=method)
        assert s.shape == (300, 4)
        assert np.all(s[:, 0] >= ec.first_lo - 1e-9) and np.all(s[:, 0] <= ec.first_hi + 1e-9)
        g = np.diff(s, axis=1)
        assert np.all(g >= ec.gap_low - 1e-9) and np.all(g <= ec.gap_high + 1e-9)
        assert np.all(s[:, -1] >= ec.last_lo - 1e-9) and np.all(s[:, -1] <= ec.last_hi + 1e-9)
        # the span of first starts is used, not a point
        assert s[:, 0].max() - s[:, 0].min() > 0.3 * (ec.first_hi - ec.first_lo)
    with pytest.raises(InputError, match="unknown sampling method"):
        se.sample_class(ec, 3, np.random.default_rng(2), method="grid")
    assert se.sample_class(ec, 0, np.random.default_rng(2)).shape == (0, 4)


def test_single_window_sample_is_uniform_on_the_intersection():
    ec = se.edge_class(1, (0.0, 30.0), 2.0, 5.0, 20.0, train_start=-4.0)
    s = se.sample_class(ec, 4000, np.random.default_rng(3))[:, 0]
    lo, hi = max(ec.first_lo, ec.last_lo), min(ec.first_hi, ec.last_hi)
    assert (lo, hi) == (8.0, 16.0)
    assert s.min() >= lo and s.max() <= hi
    assert s.mean() == pytest.approx(12.0, abs=0.15)


def test_fixed_cadence_first_start_range():
    # gaps fixed at D = max_gap = 10: s1 in [max(first_lo, last_lo - 20), min(first_hi, ...)]
    ec = se.edge_class(3, (0.0, 38.0), 10.0, 5.0, 10.0)
    assert (ec.first_lo, ec.first_hi, ec.last_lo, ec.last_hi) == (5.0, 10.0, 18.0, 28.0)
    s = se.sample_class(ec, 2000, np.random.default_rng(4))
    np.testing.assert_allclose(np.diff(s, axis=1), 10.0, atol=1e-9)
    lo = max(ec.first_lo, ec.last_lo - 20.0)
    hi = min(ec.first_hi, ec.last_hi - 20.0)
    assert s[:, 0].min() >= lo - 1e-9 and s[:, 0].max() <= hi + 1e-9
    assert s[:, 0].min() < lo + 0.1 * (hi - lo) and s[:, 0].max() > hi - 0.1 * (hi - lo)


CV = dict(span=(0.0, 100.0), duration=2.0, min_gap=5.0, max_gap=30.0)


@pytest.mark.parametrize("starts, kw, expected", [
    # no merges: forced one when (t1 - D) - train start >= max_gap (+ tol)
    ([], dict(span=(0.0, 32.0)), ["no merge in 30 s of training: max_gap 30 s forces one"]),
    ([], dict(span=(0.0, 31.9)), []),
    ([], dict(span=(0.0, 32.5), tol=0.5), ["no merge in"]),
    ([], dict(span=(0.0, 32.4), tol=0.5), []),
    ([], dict(span=(0.0, 500.0), max_gap=math.inf), []),
    ([], dict(span=(0.0, 40.0), train_start=8.5), []),
    # first merge vs min_gap / max_gap from the training start
    ([5.0, 30.0, 55.0, 80.0], {}, []),
    ([4.9, 30.0, 55.0, 80.0], {}, ["first merge 4.9 s after training start < min_gap 5 s"]),
    ([4.6, 30.0, 55.0, 80.0], dict(tol=0.4), []),
    ([30.0, 55.0, 80.0], {}, []),
    ([30.1, 55.0, 80.0], {}, ["first merge 30.1 s after training start > max_gap 30 s"]),
    ([30.4, 55.0, 80.0], dict(tol=0.4), []),
    ([6.0, 30.0, 55.0, 80.0], dict(train_start=1.5), ["first merge 4.5 s"]),
    ([2.0, 30.0, 55.0, 80.0], dict(train_start=-3.0), []),
    # gaps below a = max(min_gap, D): name the rule that binds
    ([5.0, 10.0, 40.0, 70.0, 75.0], {}, []),
    ([5.0, 9.9, 39.0, 69.0, 74.0], {}, ["merges 0 and 1 start 4.9 s apart < min_gap 5 s"]),
    ([5.0, 12.9, 40.0, 70.0, 78.0], dict(duration=8.0),
     ["merges 0 and 1 start 7.9 s apart < D 8 s"]),
    ([5.0, 9.0, 13.0, 17.0, 21.0, 50.0, 79.0], {},
     ["merges 0 and 1", "merges 1 and 2", "merges 2 and 3"]),
    # gaps above max_gap, the first three
    ([5.0, 35.1, 60.0, 90.0], {}, ["merges 0 and 1 start 30.1 s apart > max_gap 30 s"]),
    ([5.0, 35.1, 65.2, 95.3], dict(span=(0.0, 120.0)),
     ["merges 0 and 1", "merges 1 and 2", "merges 2 and 3"]),
    ([5.0, 35.1, 65.2, 95.3, 125.4], dict(span=(0.0, 150.0)),
     ["merges 0 and 1", "merges 1 and 2", "merges 2 and 3"]),
    # trailing gap: (t1 - D) - last start >= max_gap (+ tol)
    ([5.0, 35.0, 60.0, 68.0], {}, ["last merge 30 s before the last feasible start"]),
    ([5.0, 35.0, 60.0, 68.1], {}, []),
    ([5.0, 35.0, 60.0, 67.9], dict(tol=0.2), []),
    ([5.0, 35.0, 60.0, 68.0], dict(max_gap=math.inf), []),
    # a window past the end
    ([5.0, 34.0, 63.0, 93.0, 98.0], {}, []),
    ([5.0, 34.0, 63.0, 93.0, 98.1], {}, ["a merge window runs past the end of the run"]),
    ([5.0, 34.0, 63.0, 93.0, 98.3], dict(tol=0.3), []),
])
def test_corridor_violations_table(starts, kw, expected):
    args = {**CV, **kw}
    s = np.asarray(starts, dtype=float)
    got = corridor_violations(s, s + args["duration"], **args)
    assert len(got) == len(expected), got
    for g, e in zip(got, expected):
        assert g.startswith(e), (g, e)


def test_corridor_violations_ends_and_order():
    cv = {**CV, "span": (0.0, 90.0)}
    s = np.array([65.0, 5.0, 35.0])
    e = np.array([67.0, 7.0, 37.0])
    assert corridor_violations(s, e, **cv) == []
    # the end of a window after the run's end, though its start is feasible
    e2 = np.array([90.2, 7.0, 37.0])
    assert corridor_violations(s, e2, **cv) == ["a merge window runs past the end of the run"]
    assert corridor_violations(s, np.array([90.0, 7.0, 37.0]), **cv) == []
    assert corridor_violations(s, e2, tol=0.2, **cv) == []
    # unknown ends (NaN) are skipped
    assert corridor_violations(s, np.array([np.nan, 7.0, 37.0]), **cv) == []
    # the sort of starts carries the ends along: ends of the unsorted input stay paired
    s3 = np.array([35.0, 5.0])
    e3 = np.array([37.0, 101.0])
    assert corridor_violations(s3, e3, span=(0.0, 40.0), duration=2.0, min_gap=5.0,
                                  max_gap=30.0) == ["a merge window runs past the end of "
                                                    "the run"]


def test_corridor_violations_defaults_train_start_zero_no_tolerance():
    s = np.array([5.0, 35.0, 65.0])
    assert corridor_violations(s, s + 2, (0.0, 70.0), 2.0, 5.0, 30.0) == []
    s = np.array([4.5, 34.0, 64.0])
    assert len(corridor_violations(s, s + 2, (0.0, 70.0), 2.0, 5.0, 30.0)) == 1
    assert corridor_violations(s, s + 2, (0.0, 70.0), 2.0, 5.0, 30.0, tol=0.5) == []
