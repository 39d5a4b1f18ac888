"""The twin's predictive check: calibrated when the model is right, failing when it is not.

"Real" runs here are made by the twin's own engine (``serve_with_windows``) from known
settings, each with its own trace, and a run-level speed factor drawn from known residuals,
so the truth is known and the predictive replays can use the true model (or a wrong one).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from evalkit.errors import InputError
from evalkit.replay.backends.sim.engine import serve_with_windows
from evalkit.replay.backends.sim.fit import at_load
from evalkit.replay.backends.sim.fit_data import RealRun
from evalkit.replay.backends.sim.fit_predictive import (coverage_summary, inside, is_calibrated,
                                                        pit_counts, pit_histogram, predict_run,
                                                        randomized_pit, require_baselines, run_v,
                                                        sync_excess_by_group, vex_verdicts)
from evalkit.replay.backends.sim.model import SimConfig

MODEL = {"max_batch": 8, "iter_base_s": 0.008, "decode_per_seq_s": 0.001,
         "prefill_base_s": 0.006, "prefill_per_token_s": 5e-5, "train_slowdown": 1.5,
         "merge_slowdown": 2.0, "prefill_budget_tokens": 10**9,
         "kv_capacity_tokens": 10**9, "send_lag_quantiles": [0.0, 0.001, 0.002, 0.01],
         "prefill_pass": True}
RESIDUALS = np.array([-0.15, -0.05, 0.0, 0.05, 0.15])      # log run-level speed factors


def make_run(i: int, settings: dict, residuals=RESIDUALS, *, horizon: float = 6.0,
             role: str = "policy", seed: int | None = None) -> RealRun:
    """A run of the twin's engine: own trace (rate 4/s), merges at 1.5 s and 4 s (1.5 s)."""
    rng = np.random.default_rng(1000 + i)
    n = max(int(rng.poisson(4.0 * horizon)), 2)
    req = pd.DataFrame({"request_id": np.arange(n),
                        "arrival_s": np.sort(rng.uniform(0, horizon, n)),
                        "prompt_tokens": rng.integers(8, 64, n),
                        "output_tokens": rng.integers(4, 40, n)})
    starts = np.array([] if role == "no_sync" else [1.5, 4.0])
    ends = starts + 1.5
    factor = float(np.exp(rng.choice(residuals))) if residuals is not None else 1.0
    out = serve_with_windows(req, starts, ends, SimConfig.from_dict(at_load(settings, factor)),
                             seed=10**6 + i, horizon_s=horizon)
    return RealRun(run_id=f"run{i}-{role}", path=Path(f"runs/run{i}-{role}"),
                   seed=i if seed is None else seed, role=role,
                   policy="no_sync" if role == "no_sync" else "fixed_h", backend="torch",
                   regime="synthetic", slo={"e2e_s": 0.5}, horizon_s=horizon,
                   merge_duration_s=1.5, requests=out, merge_start=starts, merge_end=ends,
                   step_s=np.empty(0))


def coverage_of(runs, settings, residuals, n_sims) -> dict:
    return coverage_summary([predict_run(r, settings, 1.0, residuals, n_sims, seed=3)
                             for r in runs])


# ----------------------------------------------------------------------------- PIT

def brute_pit(observed, sims, u):
    """Reference (Czado, Gneiting & Held 2009): F(y-) + u (F(y) - F(y-)) with F the
    empirical CDF of the pooled n + 1 values (the sims and the observed one), by loops."""
    pooled = [float(x) for x in sims] + [float(observed)]
    f_below = sum(1 for x in pooled if x < observed) / len(pooled)
    f_at = sum(1 for x in pooled if x <= observed) / len(pooled)
    return f_below + u * (f_at - f_below)


def test_pit_matches_brute_force_with_and_without_ties():
    rng = np.random.default_rng(0)
    for _ in range(300):
        sims = rng.integers(0, 6, size=rng.integers(1, 30)) / 5.0
        obs = float(rng.integers(0, 6) / 5.0)
        u = float(rng.uniform())
        assert randomized_pit(obs, sims, u) == pytest.approx(brute_pit(obs, sims, u), abs=1e-12)
    assert pit_counts(0.4, [0.2, 0.4, 0.4, 0.6]) == (1, 2)
    assert randomized_pit(0.1, [0.2, 0.3], 0.5) == pytest.approx(0.5 / 3)


def test_randomised_pit_is_uniform_for_an_exchangeable_discrete_draw():
    """V on a coarse grid (many ties): the randomised PIT is still U(0, 1), coverage 90%."""
    rng = np.random.default_rng(1)
    pits = []
    for _ in range(4000):
        draws = rng.binomial(6, 0.3, size=41) / 6.0
        pits.append(randomized_pit(draws[0], draws[1:], float(rng.uniform())))
    pits = np.asarray(pits)
    assert stats.kstest(pits, "uniform").pvalue > 0.01
    assert np.mean([inside(p) for p in pits]) == pytest.approx(0.90, abs=0.015)
    # the non-randomised mid-rank would not be uniform here (the check needs the randomising)
    mids = [(np.sum(d[1:] < d[0]) + 0.5 * (np.sum(d[1:] == d[0]) + 1)) / 41
            for d in (rng.binomial(6, 0.3, size=41) / 6.0 for _ in range(4000))]
    assert stats.kstest(mids, "uniform").pvalue < 1e-6


def test_interval_and_band_thresholds_at_and_beside_their_values():
    assert inside(0.05) and inside(0.95) and inside(0.5)
    assert not inside(0.0499) and not inside(0.9501)
    assert is_calibrated(0.80) and is_calibrated(0.97) and is_calibrated(0.9)
    assert not is_calibrated(0.7999) and not is_calibrated(0.9701)


def test_pit_histogram_counts_every_value_once():
    assert pit_histogram([0.0, 0.05, 0.1, 0.55, 0.999, 1.0]) == [2, 1, 0, 0, 0, 1, 0, 0, 0, 2]


# ----------------------------------------------------------------------------- calibration

def test_right_model_is_calibrated_and_doubled_merge_slowdown_is_not():
    runs = [make_run(i, MODEL) for i in range(20)]
    right = coverage_of(runs, MODEL, RESIDUALS, n_sims=20)
    assert right["calibrated"], right
    assert 0.80 <= right["coverage"] <= 0.97
    # the same runs judged by a model whose merges slow serving half as much as the truth's
    # (the truth's merge slowdown is doubled): observed V sits above the intervals
    wrong = coverage_of(runs, dict(MODEL, merge_slowdown=1.0), RESIDUALS, n_sims=20)
    assert wrong["coverage"] < 0.6 and wrong["below_band"] and not wrong["calibrated"]
    assert wrong["n_above"] > wrong["n_below"]


def test_a_model_without_the_run_level_scatter_is_too_narrow():
    runs = [make_run(i, MODEL) for i in range(20)]
    narrow = coverage_of(runs, MODEL, None, n_sims=20)
    assert narrow["coverage"] < 0.6 and not narrow["calibrated"]
    assert narrow["n_below"] > 0 and narrow["n_above"] > 0        # a U-shaped PIT


@pytest.mark.slow
def test_calibration_with_many_runs_is_near_ninety_percent():
    runs = [make_run(i, MODEL) for i in range(60)]
    right = coverage_of(runs, MODEL, RESIDUALS, n_sims=60)
    assert right["coverage"] == pytest.approx(0.90, abs=0.07)
    doubled = [make_run(i, dict(MODEL, merge_slowdown=4.0)) for i in range(60)]
    assert coverage_of(doubled, MODEL, RESIDUALS, n_sims=60)["coverage"] < 0.5


def test_predictions_are_deterministic_given_the_seed():
    run = make_run(0, MODEL)
    a = predict_run(run, MODEL, 1.0, RESIDUALS, 20, seed=5)
    b = predict_run(run, MODEL, 1.0, RESIDUALS, 20, seed=5)
    c = predict_run(run, MODEL, 1.0, RESIDUALS, 20, seed=6)
    assert np.array_equal(a.sims, b.sims) and a.pit == b.pit
    assert not np.array_equal(a.sims, c.sims)
    assert a.v_real == run_v(run, run.requests)


# ----------------------------------------------------------------------------- sync excess

def seed_pairs(n_seeds: int, truth: dict):
    out = []
    for s in range(n_seeds):
        out += [make_run(10 * s, truth, seed=s), make_run(10 * s + 1, truth, seed=s,
                                                          role="no_sync")]
    return out


def test_vex_sign_and_ci_per_group():
    runs = seed_pairs(4, MODEL)
    preds = [predict_run(r, MODEL, 1.0, RESIDUALS, 20, seed=0) for r in runs]
    (row,) = sync_excess_by_group(preds, n_boot=2000)
    real = [np.mean([p.v_real for p in preds if p.run.seed == s and not p.run.no_sync])
            - np.mean([p.v_real for p in preds if p.run.seed == s and p.run.no_sync])
            for s in range(4)]
    assert row["group"] == "fixed_h" and row["n_seeds"] == 4
    assert row["vex_real_mean"] == pytest.approx(np.mean(real))
    lo, hi = row["vex_real_ci95"]
    assert lo <= row["vex_real_mean"] <= hi


def test_vex_verdicts():
    assert vex_verdicts(0.1, 0.05, [0.02, 0.2]) == {
        "sign_real": 1, "sign_pred": 1, "sign_agrees": True, "real_sign_resolved": True,
        "pred_inside_real_ci": True}
    v = vex_verdicts(0.1, -0.05, [-0.1, 0.2])
    assert not v["sign_agrees"] and not v["real_sign_resolved"] and v["pred_inside_real_ci"]
    assert not vex_verdicts(0.1, 0.3, [0.02, 0.2])["pred_inside_real_ci"]
    assert vex_verdicts(-1e-17, 0.01, [-0.1, 0.1])["sign_real"] == 0     # rounding: no sign
    assert not vex_verdicts(-1e-17, 0.0, [-0.1, 0.1])["sign_agrees"]


def test_a_seed_without_no_sync_is_an_error_naming_the_run():
    runs = seed_pairs(3, MODEL)
    runs = [r for r in runs if not (r.seed == 2 and r.no_sync)]
    with pytest.raises(InputError) as err:
        require_baselines(runs)
    msg = str(err.value)
    assert "run20-policy" in msg and "seed 2" in msg and "no no-sync baseline" in msg


# ----------------------------------------------------------------------------- end to end

def _loso_check(runs_dir):
    from evalkit.replay.backends.sim.fit_check import loso_estimates
    from evalkit.replay.backends.sim.fit_data import load_real_runs
    from evalkit.replay.backends.sim.fit_predictive import predictive_check

    camp = load_real_runs(runs_dir)
    return predictive_check(camp, loso_estimates(camp), n_sims=40, seed=0, progress=False)


@pytest.mark.slow
def test_fitted_twin_on_twin_made_campaign_is_calibrated(tmp_path):
    """The whole method: fit leave-one-seed-out to runs the engine made, then judge."""
    from tests.replay.backends.sim.test_fit import real_like

    rep = _loso_check(real_like(tmp_path / "runs", merge_slowdown=1.0, seeds=6))
    for v in rep["variants"].values():
        assert v["coverage"]["n_runs"] == 18 and v["coverage"]["calibrated"], v["coverage"]
        for g in v["sync_excess"]:       # no-sync is the worst on this rig; the twin knows
            assert g["real_sign_resolved"] and g["sign_agrees"] and g["pred_inside_real_ci"]


@pytest.mark.slow
def test_a_mechanism_that_changes_between_seeds_fails_the_check(tmp_path):
    """Half the seeds with merges 3x as disruptive: one constant merge slowdown cannot
    predict each held-out seed, and the coverage says so."""
    import json
    import shutil

    from tests.replay.backends.sim.test_fit import real_like

    a = real_like(tmp_path / "a", merge_slowdown=1.0, seeds=6)
    b = real_like(tmp_path / "b", merge_slowdown=3.0, seeds=6)
    mix = tmp_path / "mix"
    mix.mkdir()
    for src, keep in ((a, {0, 1, 2}), (b, {3, 4, 5})):
        for rj in src.glob("*/run.json"):
            if json.loads(rj.read_text())["seed"] in keep:
                shutil.copytree(rj.parent, mix / rj.parent.name)
    rep = _loso_check(mix)
    for v in rep["variants"].values():
        c = v["coverage"]
        assert c["n_runs"] == 18 and c["coverage"] < 0.6 and c["below_band"], c


def test_predictive_check_shows_progress_and_is_deterministic(capsys):
    from evalkit.replay.backends.sim.fit import FitEstimate, HostLoad, Service
    from evalkit.replay.backends.sim.fit_data import RealCampaign
    from evalkit.replay.backends.sim.fit_predictive import predictive_check

    runs = seed_pairs(3, MODEL)
    camp = RealCampaign(runs=runs, regime="synthetic", backend="torch", source="runs")
    est = FitEstimate(settings=MODEL, service=Service(0.012, 0.0015, 0.009, 7.5e-5),
                      merge_ratio=2.0 / 1.5, load=HostLoad(0.0, 1.0))
    estimates = {s: est for s in camp.seeds}
    a = predictive_check(camp, estimates, n_sims=20, seed=1, progress=True)
    assert "twin predictive replays" in capsys.readouterr().err
    b = predictive_check(camp, estimates, n_sims=20, seed=1, progress=False)
    assert capsys.readouterr().err == ""
    assert a["variants"]["request"]["runs"] == b["variants"]["request"]["runs"]
    assert a["variants"]["request+run"]["coverage"] == b["variants"]["request+run"]["coverage"]
    with pytest.raises(InputError, match="--predictive-sims"):
        predictive_check(camp, estimates, n_sims=19, seed=1, progress=False)
