"""F_K at its edges: min = max, zero slack, a minimum gap below the duration, edge classes at K
= 0 and 1."""

from __future__ import annotations

import numpy as np
import pytest

from evalkit.errors import InputError
from evalkit.runlog.design import corridor_violations
from evalkit.stats.fk import edge_class, feasible_class, sample_schedules


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
