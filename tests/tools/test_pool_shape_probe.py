"""tools/pool_shape_probe.py: its pools are the ones it names, rescaled as the planner's own,
and its report has a row per truth and quantity with cells derived from the predictions."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from evalkit.stats.power import pilot_model
from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
probe = load_script(ROOT / "tools" / "pool_shape_probe.py", "pool_shape_probe")


def _pilot(seed=0, truth=("bursty x4 on 10%", "fixed schedule 0.05")):
    return probe.pilot(np.random.default_rng(seed), truth)


def test_the_pilot_draws_are_its_levels_times_the_noise_it_reports():
    policy, draws, noise = _pilot()
    assert draws.shape == noise.shape == (probe.pv.PILOT_SEEDS, probe.pv.M)
    ratio = draws / noise                       # each seed's level, shared by its draws
    assert np.allclose(ratio, ratio[:, :1])
    assert policy.shape == (probe.pv.PILOT_SEEDS,)


def test_the_planners_own_pool_round_trips_through_with_pool():
    policy, draws, _ = _pilot(1)
    model = pilot_model(policy, list(draws), kind="smoothed")
    again = probe.with_pool(model, np.array(model.residuals) * 3.0 + 1.0)   # scale, shift
    assert np.allclose(again.residuals, model.residuals)
    assert again.mean_draw == pytest.approx(model.mean_draw, rel=1e-12)


def test_pools_are_the_named_residuals_at_the_pilots_sd():
    policy, draws, noise = _pilot(2)
    model = pilot_model(policy, list(draws), kind="smoothed")
    pools = probe.pools(draws, noise)
    assert np.allclose(pools["the pilot's true noise"], np.log(noise))
    assert np.all(np.sum(np.isclose(pools["seed median"], 0.0), axis=1) >= 1)   # m = 3
    assert np.allclose(pools["seed mean"].sum(axis=1), 0.0)
    for pool in pools.values():
        scaled = np.array(probe.with_pool(model, pool).residuals)
        assert scaled.mean() == pytest.approx(0.0, abs=1e-12)
        assert scaled.std() == pytest.approx(model.sigma_within, rel=1e-12)


def test_report_has_a_row_per_truth_and_quantity(tmp_path):
    out = tmp_path / "probe.md"
    assert probe.main(["--pilots", "2", "--truth-reps", "300", "--reps", "60",
                       "--out", str(out)]) == 0
    rows = [x for x in out.read_text().splitlines()
            if x.startswith("| ") and not x.startswith("| truth")]
    assert len(rows) == len(probe.pv.TRUTHS) * len(probe.KEYS)
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] in probe.KEYS and 0.0 <= float(cells[2]) <= 1.0
        assert len(cells) == 3 + len(probe.POOLS)
        assert all(re.fullmatch(r"[+-]\d\.\d{3} \([01]\.\d{2}\)", c) for c in cells[3:])
