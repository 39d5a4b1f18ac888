"""RESULTS.md's twin-as-a-stochastic-model section: every sentence follows from fit.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
CPU_REAL = REPO / "examples" / "cpu_real"


@pytest.fixture(scope="module")
def mr():
    return load_script(REPO / "examples" / "make_results.py", "make_results")


def cov(n_inside, n_below, n_above, n=60):
    c = n_inside / n
    return {"n_runs": n, "n_inside": n_inside, "coverage": c, "coverage_ci95": [0.1, 0.9],
            "level": 0.9, "band": [0.8, 0.97], "calibrated": 0.8 <= c <= 0.97,
            "below_band": c < 0.8, "n_below": n_below, "n_above": n_above,
            "interval_width_mean": 0.1, "pit_histogram": [6] * 10}


@pytest.mark.parametrize("n_inside, below, above, has", [
    (54, 3, 3, "**calibrated**"),
    (48, 6, 6, "inside [80%, 97%]"),                  # 80% exactly: inside the band
    (47, 7, 6, "on both sides (intervals too narrow)"),
    (44, 4, 12, "mostly above the interval (V under-predicted)"),
    (44, 12, 4, "mostly below the interval (V over-predicted)"),
    (44, 0, 16, "lie above the interval (V under-predicted)"),
    (59, 1, 0, "above [80%, 97%]: **not calibrated** (intervals too wide)"),
])
def test_coverage_sentence_follows_the_counts(mr, n_inside, below, above, has):
    text = mr.coverage_sentence("request", cov(n_inside, below, above))
    assert has in text and f"{n_inside} of 60" in text
    assert ("**not calibrated**" in text) == (not 0.8 <= n_inside / 60 <= 0.97)


def vex(group, real, pred, ci):
    from evalkit.replay.backends.sim.fit_predictive import vex_verdicts

    return dict({"group": group, "n_seeds": 10, "vex_real_mean": real, "vex_pred_mean": pred,
                 "vex_real_ci95": ci}, **vex_verdicts(real, pred, ci))


def test_vex_sentence_and_table(mr):
    v = {"sync_excess": [vex("ewma", 0.15, 0.11, [0.09, 0.23]),
                         vex("fixed_h", 0.08, -0.01, [0.01, 0.15]),
                         vex("matched_random(ewma)", 0.07, 0.05, [-0.03, 0.18])]}
    text = mr.vex_sentence(v)
    assert "inside the real CI for 2 of 3 groups" in text
    assert "excludes 0 for 2 (ewma, fixed_h)" in text
    assert "agrees for ewma and is wrong for fixed_h" in text
    rows = mr.vex_table(v)
    assert "| ewma | 10 | +0.1500 [0.0900, 0.2300] | +0.1100 | agrees | yes |" in rows
    assert any("| fixed_h |" in r and "**wrong**" in r and "**no**" in r for r in rows)
    assert any("same (real CI spans 0" in r for r in rows)
    none = mr.vex_sentence({"sync_excess": [vex("a", 0.01, 0.02, [-0.1, 0.1])]})
    assert "no group's real CI excludes 0" in none


def test_section_is_provisional_exactly_when_design_checks_fail(mr, tmp_path):
    fit = json.loads((CPU_REAL / "fit.json").read_text())
    failing = {"claims": [{"checks": [{"name": "load_match", "passed": False}]}]}
    passing = {"claims": [{"checks": [{"name": "load_match", "passed": True}]}]}
    bad = "\n".join(mr.twin_judgement_lines(tmp_path, fit, failing))
    good = "\n".join(mr.twin_judgement_lines(tmp_path, fit, passing))
    assert "**Provisional.**" in bad and "`load_match`" in bad and "not a valid comparison" in bad
    assert "Provisional" not in good
    assert (tmp_path / "twin_pit.png").stat().st_size > 1000


def test_committed_results_carry_the_fit_reports_numbers():
    fit = json.loads((CPU_REAL / "fit.json").read_text())
    text = (CPU_REAL / "RESULTS.md").read_text()
    pred = fit["predictive"]
    assert f"{pred['n_sims']} times with different seeds" in text
    for name, v in pred["variants"].items():
        c = v["coverage"]
        assert f"`{name}`" in text
        assert f"in {c['n_inside']} of {c['n_runs']} held-out runs = {c['coverage']:.1%}" in text
        assert ("**calibrated**" in text) or not c["calibrated"]
    hist = [v["coverage"]["pit_histogram"] for v in pred["variants"].values()]
    assert f"| [0.0, 0.1) | {hist[0][0]} | {hist[1][0]} |" in text
    assert "**Provisional.**" in text          # this campaign's design checks fail
    assert (CPU_REAL / "twin_pit.png").exists()


def test_a_zero_prediction_has_no_sign(mr):
    from evalkit.cli.sim import predictive_lines

    rows = mr.vex_table({"sync_excess": [vex("ewma", 0.02, 0.0, [0.0, 0.05])]})
    assert "twin predicts 0" in rows[-1] and "opposite" not in rows[-1]
    pred = {"band": [0.8, 0.97], "n_sims": 20, "seed": 0, "level": 0.9,
            "sampling_floor": {"v_mae": 0.05, "v_noise_floor": 0.03,
                               "v_noise_floor_robust": 0.05},
            "variants": {"request": {"coverage": cov(54, 3, 3),
                                     "sync_excess": [vex("ewma", 0.02, 0.0, [0.0, 0.05])]}}}
    lines = predictive_lines(pred)
    assert any("the twin predicts no excess (0)" in ln for ln in lines)
    assert not any("opposite sign" in ln for ln in lines)
    assert any("inside the band: calibrated" in ln for ln in lines)
