"""tools/power_validation.py: the pilot-size section reads each plan's named pilot seeds (the
fixed n's from the plan of that n, the sequential one from the plan whose max seeds is the
design's) and prints their quartiles per truth; the tail-check section splits the pilots by
their plan's flag and prints each group's mean error and coverage."""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np

from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
validation = load_script(ROOT / "tools" / "power_validation.py", "power_validation")


def test_the_pilot_size_rows_are_the_quartiles_of_what_each_plan_names(monkeypatch):
    truth = validation.TRUTHS[0]
    monkeypatch.setattr(validation, "TRUTHS", [truth])
    monkeypatch.setattr(validation, "true_power", lambda rng, t, reps: {
        "fixed n=10": 0.4, "fixed n=20": 0.7, "sequential <= 20": 0.6, "mean seeds": 17.0})
    named = iter([(11, 101), (21, 201), (12, 102), (22, 202), (13, 103), (24, 204),
                  (14, 104), (26, 208)])
    seen = []

    def plan(model, gain, *, max_seeds, seeds_grid, **kw):
        seen.append((max_seeds, tuple(seeds_grid)))
        fixed, seq = next(named)
        return types.SimpleNamespace(rows=(types.SimpleNamespace(
            fixed_pilot_seeds=fixed, sequential_pilot_seeds=seq),))

    monkeypatch.setattr(validation, "power_plan", plan)
    rows = validation.pilot_size_rows(np.random.default_rng(0), 4, 10, 3, truth_reps=10)
    assert seen == [(10, (10,)), (20, (20,))] * 4
    body = {r.split(" | ")[1]: r for r in rows[2:]}
    q = np.percentile([11, 12, 13, 14], [25, 50, 75])
    assert body["fixed n=10"].endswith(f"| 0.400 | {q[1]:.0f} | {q[0]:.0f} | {q[2]:.0f} |")
    q = np.percentile([21, 22, 24, 26], [25, 50, 75])
    assert body["fixed n=20"].endswith(f"| 0.700 | {q[1]:.0f} | {q[0]:.0f} | {q[2]:.0f} |")
    # the sequential design runs to 20 seeds: only the n = 20 plans speak for it
    q = np.percentile([201, 202, 204, 208], [25, 50, 75])
    assert body["sequential <= 20"].endswith(f"| 0.600 | {q[1]:.0f} | {q[0]:.0f} | {q[2]:.0f} |")
    assert "mean seeds" not in body and len(rows) == 5


def test_the_tail_check_rows_split_the_pilots_by_their_plans_flag(monkeypatch):
    truth = validation.TRUTHS[0]
    monkeypatch.setattr(validation, "TRUTHS", [truth])
    monkeypatch.setattr(validation, "true_power", lambda rng, t, reps: {
        "fixed n=10": 0.4, "fixed n=20": 0.7, "sequential <= 20": 0.6, "mean seeds": 17.0})
    # (flag, fixed n=10 (point, lo, hi), fixed n=20, sequential)
    pilots = iter([(True, (0.5, 0.3, 0.6), (0.9, 0.8, 0.95), (0.7, 0.5, 0.8)),
                   (True, (0.7, 0.5, 0.8), (0.8, 0.6, 0.9), (0.9, 0.7, 0.95)),
                   (False, (0.35, 0.2, 0.5), (0.6, 0.5, 0.65), (0.6, 0.4, 0.7))])

    def plan(model, gain, **kw):
        flag, f10, f20, seq = next(pilots)
        row = types.SimpleNamespace(
            seeds=(10, 20), fixed_power=(f10[0], f20[0]), fixed_power_low=(f10[1], f20[1]),
            fixed_power_high=(f10[2], f20[2]), sequential_power=(0.1, seq[0]),
            sequential_power_low=(0.0, seq[1]), sequential_power_high=(0.2, seq[2]))
        return types.SimpleNamespace(rows=(row,), tail=types.SimpleNamespace(
            heavy_right_tail=flag))

    monkeypatch.setattr(validation, "power_plan", plan)
    rows = validation.tail_check_rows(np.random.default_rng(0), 3, 10, 3, truth_reps=10)
    body = {r.split(" | ")[2]: r for r in rows[2:]}
    assert len(rows) == 5
    # flagged: errors +0.1 and +0.3, covered once; not flagged: -0.05, covered
    assert body["fixed n=10"].endswith("| 2/3 | fixed n=10 | 0.400 | +0.200 | 0.50 | -0.050 | "
                                       "1.00 |")
    assert body["fixed n=20"].endswith("| 0.700 | +0.150 | 0.50 | -0.100 | 0.00 |")
    assert body["sequential <= 20"].endswith("| 0.600 | +0.200 | 0.50 | +0.000 | 1.00 |")
