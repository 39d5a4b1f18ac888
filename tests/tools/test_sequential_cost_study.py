"""tools/sequential_cost_study.py: its looks and levels against closed forms, its plan search
against brute force, and its report's table and summary derived from the rows."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
cost = load_script(ROOT / "tools" / "sequential_cost_study.py", "sequential_cost_study")


def test_looks_every_batch_and_one_at_the_maximum():
    assert cost.sequential_looks(20, 4) == (4, 8, 12, 16, 20)
    assert cost.sequential_looks(21, 4) == (4, 8, 12, 16, 20, 21)
    assert cost.sequential_looks(8, 4) == (4, 8)
    assert cost.sequential_looks(20, 3, first=8) == (8, 11, 14, 17, 20)
    assert cost.sequential_looks(9, 3, first=8) == (8, 9)


def test_fixed_n_of_equal_power_whole_and_interpolated():
    curve = np.array([0.1, 0.3, 0.5, 0.7, 0.9])          # n = 2 .. 6
    assert cost.fixed_seeds(curve, 0.5) == 4
    assert cost.fixed_seeds_interpolated(curve, 0.5) == pytest.approx(4.0)
    assert cost.fixed_seeds(curve, 0.55) == 5
    assert cost.fixed_seeds_interpolated(curve, 0.55) == pytest.approx(4.25)
    assert cost.fixed_seeds_interpolated(curve, 0.05) == 2
    assert cost.fixed_seeds(curve, 0.95) is None
    assert cost.fixed_seeds_interpolated(curve, 0.95) is None
    flat = np.array([0.1, 0.5, 0.5, 0.7])
    assert cost.fixed_seeds_interpolated(flat, 0.5) == pytest.approx(3.0)


def test_one_look_levels_are_the_fixed_n_t_tests():
    # one look: the t boundary is the fixed-n t-test at alpha (exact on normal d), the z
    # boundary is a t-test at the normal quantile, whose level is the t tail beyond it
    null_d = np.random.default_rng(0).standard_normal((200_000, 12))
    for spending, gamma in (("obrien-fleming", -4.0), ("hwang-shih-decani", -2.0)):
        t_level = cost.normal_level(null_d, (12,), spending, gamma, "t")
        z_level = cost.normal_level(null_d, (12,), spending, gamma, "z")
        assert t_level == pytest.approx(0.025, abs=0.0015)
        assert z_level == pytest.approx(sps.t.sf(sps.norm.isf(0.025), 11), abs=0.0015)


def test_z_boundaries_lose_the_level_at_early_looks():
    null_d = np.random.default_rng(1).standard_normal((100_000, 21))
    looks = cost.sequential_looks(21, 3)
    z = cost.normal_level(null_d, looks, "hwang-shih-decani", -2.0, "z")
    t = cost.normal_level(null_d, looks, "hwang-shih-decani", -2.0, "t")
    assert z > 0.06 and abs(t - 0.025) < 0.004


def _cell(rng, campaigns=400, top=30, policy="fixed schedule"):
    p, dr = cost.study.campaigns(rng, campaigns, top, 3, "cv 0.35", policy, cost.study.EFFECT)
    d = dr.mean(2) - p
    return {"d": d, "floors": cost.look_floors_batch(p, dr, tuple(range(2, top + 1)))}


def test_smallest_plan_is_the_first_maximum_reaching_the_target(monkeypatch):
    monkeypatch.setattr(cost, "TOP", 30)
    cell = _cell(np.random.default_rng(2))
    top, power, used = cost.smallest_plan(cell, 4, "obrien-fleming", -4.0, "gate", 0.6)
    powers = {}
    for n in range(8, 31):
        code, _ = cost.walk(cell, cost.sequential_looks(n, 4), "obrien-fleming", -4.0, "gate")
        powers[n] = float(np.mean(code == cost.PASS))
    assert power == powers[top] >= 0.6
    assert all(powers[n] < 0.6 for n in range(8, top))
    assert used.max() <= top and used.min() >= 4


def test_the_floor_only_raises_the_variance():
    # the gate's walk (t + floor) never passes a campaign the walk without the floor fails,
    # and a policy less variable than its draws is held back by the floor in some
    cell = _cell(np.random.default_rng(3), policy="cv 0.175")
    looks = cost.sequential_looks(24, 4)
    gate, _ = cost.walk(cell, looks, "obrien-fleming", -4.0, "gate")
    plain, _ = cost.walk(cell, looks, "obrien-fleming", -4.0, "t")
    assert np.all(~(gate == cost.PASS) | (plain == cost.PASS))
    assert np.sum(gate == cost.PASS) < np.sum(plain == cost.PASS)


@pytest.mark.slow
def test_report_rows_and_summary_agree(tmp_path):
    out = tmp_path / "cost.md"
    assert cost.main(["--campaigns", "150", "--seed", "4", "--out", str(out)]) == 0
    text = out.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| cv 0.175 |")
            or line.startswith("| fixed schedule |")]
    assert len(rows) == len(cost.POLICIES) * len(cost.SPENDINGS) * len(cost.BATCHES) * len(
        cost.TARGETS)
    gate = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        match = re.match(r"([\d.]+) \((\d+)\)", cells[7])
        if match:
            gate[(cells[0], cells[1], cells[2], cells[3])] = float(match.group(1))
    for target in ("0.8", "0.9"):
        values = [v for k, v in gate.items() if k[3] == target]
        line = next(x for x in text.splitlines() if x.startswith(f"- target power {target}:"))
        assert f"ranges {min(values):.2f}-{max(values):.2f}" in line
    later = text.split("## A later first look")[1].splitlines()
    # every look interval 1-4 from its own first look (a look needs 2 seeds) and from 4-12
    designs = [(b, f) for b in (1, 2, 3, 4) for f in (max(b, 2), 4, 6, 8, 10, 12)
               if f >= max(b, 2)]
    body = [x for x in later if x.startswith("| O'Brien") or x.startswith("| Hwang")]
    assert len(body) == len(cost.SPENDINGS) * len(set(designs))
