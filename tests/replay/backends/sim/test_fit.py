"""evalkit sim fit: recovers a known engine, gets the sign of sync excess right, refuses bad input.

"Real-like" campaigns are made with the sim backend itself from known settings and then
relabelled as torch runs, so the truth is known: a training-dominated rig (no-sync runs
are the worst, as on the H200) and a merge-dominated one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.replay.backends.sim.fit import decode_features, fit_service
from evalkit.replay.backends.sim.fit_check import fit_report
from evalkit.replay.backends.sim.fit_data import run_metrics
from evalkit.replay.backends.sim.fit_data import load_real_runs
from evalkit.replay.campaign import parse_campaign
from evalkit.replay.sweep import run_campaign
from tests.support.protocols import BUNDLED

TRUTH = {"max_batch": 8, "iter_base_s": 0.008, "decode_per_seq_s": 0.001,
         "prefill_base_s": 0.006, "prefill_per_token_s": 5e-5, "train_slowdown": 1.5,
         "prefill_budget_tokens": 10**9, "kv_capacity_tokens": 10**9,
         "send_lag_quantiles": [0.0, 0.001, 0.002, 0.01],
         "merge_duration_quantiles": [1.5, 1.52, 1.6], "response_overhead_s": 0.004,
         "step_s": 0.06}


def campaign_dict(regime: str, backend: dict, seeds=4, horizon=40.0) -> dict:
    return {"regime": regime, "seeds": seeds, "matched_random_draws": 1, "horizon_s": horizon,
            "merge_duration_s": 1.5, "inner_step_s": 0.05, "h_min": 20, "h_max": 200,
            "min_gap_s": 2.5, "max_gap_s": 10.0, "slo": {"e2e_s": 0.5},
            "trace": {"generator": "square_wave", "period_s": 10.0, "burst_s": 3.0,
                      "quiet_rate": 1.5, "busy_rate": 7.0, "phase_s": 2.0,
                      "prompt_tokens": "lognormal:24,0.5,4,64",
                      "output_tokens": "lognormal:16,0.5,4,40"},
            "backend": backend, "policies": [{"name": "fixed_h", "params": {"H": 60}}]}


def relabel(runs: Path, backend: str = "torch") -> None:
    for rj in runs.glob("*/run.json"):
        meta = json.loads(rj.read_text())
        meta["backend"] = backend
        rj.write_text(json.dumps(meta))


def real_like(out: Path, merge_slowdown: float, seeds: int = 4) -> Path:
    camp = parse_campaign(campaign_dict("reallike", {"name": "sim", "config": dict(
        TRUTH, merge_slowdown=merge_slowdown)}, seeds=seeds))
    summary = run_campaign(camp, out, n_jobs=1, progress=False, protocol=BUNDLED)
    assert summary.ok
    relabel(out)
    return out


def run_dirs(runs: Path) -> list[Path]:
    return sorted(p.parent for p in runs.glob("*/run.json"))


def mean_v(runs: Path, role_is_no_sync: bool) -> float:
    vs = []
    for d in run_dirs(runs):
        meta = json.loads((d / "run.json").read_text())
        if (meta["role"] == "no_sync") != role_is_no_sync:
            continue
        req = pd.read_parquet(d / "requests.parquet")
        m = run_metrics(req, *pd.read_parquet(d / "merges.parquet")[["start_s", "end_s"]]
                        .to_numpy().T, meta["slo"]["e2e_s"], meta["horizon_s"])
        vs.append(m["v"])
    return float(np.mean(vs))


@pytest.fixture(scope="module")
def train_dominated(tmp_path_factory) -> Path:
    """Inner training slows serving 1.5x, a merge only 1.0x: no-sync is the worst."""
    return real_like(tmp_path_factory.mktemp("train_dom") / "runs", merge_slowdown=1.0)


@pytest.fixture(scope="module")
def train_fit(train_dominated, tmp_path_factory):
    out = tmp_path_factory.mktemp("train_fit")
    res = CliRunner().invoke(cli, ["sim", "fit", str(train_dominated), "--out",
                                   str(out / "twin.toml"), "--report", str(out / "fit.json"),
                                   "--bootstrap", "40", "--predictive-sims", "20",
                                   "--no-progress"])
    assert res.exit_code == 0, res.output
    (out / "stdout.txt").write_text(res.output)
    return out


def test_fit_recovers_the_engine_with_cis_that_cover_it(train_fit):
    rep = json.loads((train_fit / "fit.json").read_text())
    p = rep["parameters"]
    serving = rep["service_while_training"]      # no probe: costs include the trainer
    s = TRUTH["train_slowdown"]
    assert serving["iter_base_s"] == pytest.approx(TRUTH["iter_base_s"] * s, rel=0.1)
    assert serving["decode_per_seq_s"] == pytest.approx(TRUTH["decode_per_seq_s"] * s, rel=0.1)
    assert serving["prefill_per_token_s"] == pytest.approx(TRUTH["prefill_per_token_s"] * s,
                                                           rel=0.25)
    # merge / training slowdown: 1.0 / 1.5
    assert p["merge_ratio"]["value"] == pytest.approx(1.0 / 1.5, rel=0.03)
    lo, hi = p["merge_ratio"]["ci"]
    assert lo <= p["merge_ratio"]["value"] <= hi and hi < 1.0
    assert 1.5 <= p["merge_duration_mean_s"]["value"] <= 1.6
    assert p["step_s"]["value"] == pytest.approx(0.06, rel=0.02)
    for key in ("v_mae", "p95_rel_err", "p95_in_rel_err", "p95_out_rel_err"):
        assert key in rep["heldout"]
    assert rep["heldout"]["v_mae"] <= 0.05 and rep["heldout"]["p95_rel_err"] <= 0.3
    assert rep["targets"]["met"] is True
    assert len(rep["heldout"]["runs"]) == 12 and rep["bootstrap"]["unit"] == "seed"
    assert "no idle-trainer capacity probe" in " ".join(rep["notes"])


def twin_harness(fit_dir: Path, out: Path) -> Path:
    """The same campaign on the sim backend with the fitted twin (campaign key)."""
    camp_file = out / "harness.toml"
    lines = ['regime = "twin"', "seeds = 4", "matched_random_draws = 1", "horizon_s = 40.0",
             "merge_duration_s = 1.5", "inner_step_s = 0.05", "h_min = 20", "h_max = 200",
             "min_gap_s = 2.5", "max_gap_s = 10.0", "[slo]", "e2e_s = 0.5", "[trace]",
             'generator = "square_wave"', "period_s = 10.0", "burst_s = 3.0",
             "quiet_rate = 1.5", "busy_rate = 7.0", "phase_s = 2.0",
             'prompt_tokens = "lognormal:24,0.5,4,64"',
             'output_tokens = "lognormal:16,0.5,4,40"', "[backend]", 'name = "sim"',
             f'sim_params = "{fit_dir / "twin.toml"}"', "[[policies]]", 'name = "fixed_h"',
             "params = { H = 60 }"]
    camp_file.write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(cli, ["sweep", str(camp_file), "--out", str(out / "runs"),
                                   "--no-progress"])
    assert res.exit_code == 0, res.output
    return out / "runs"


def test_twin_as_harness_reproduces_negative_sync_excess(train_dominated, train_fit, tmp_path):
    real_vex = mean_v(train_dominated, False) - mean_v(train_dominated, True)
    assert real_vex < -0.01                      # the constructed rig: no-sync is the worst
    runs = twin_harness(train_fit, tmp_path)
    twin_vex = mean_v(runs, False) - mean_v(runs, True)
    assert twin_vex < -0.01
    meta = json.loads(next(runs.glob("*/run.json")).read_text())
    import hashlib
    sha = hashlib.sha256((train_fit / "twin.toml").read_bytes()).hexdigest()
    assert meta["settings"]["effective"]["twin_sha256"] == sha


def test_the_hand_set_model_gets_that_sign_wrong(train_dominated, tmp_path):
    # red team: the default "a merge adds latency" model cannot show negative sync excess
    camp = parse_campaign(campaign_dict("handset", {"name": "sim", "config": {
        k: v for k, v in TRUTH.items() if k != "response_overhead_s"}}))
    run_campaign(camp, tmp_path / "runs", n_jobs=1, progress=False, protocol=BUNDLED)
    assert mean_v(tmp_path / "runs", False) - mean_v(tmp_path / "runs", True) > 0


def test_merge_dominated_rig_gives_positive_sync_excess(tmp_path):
    runs = real_like(tmp_path / "real", merge_slowdown=3.0, seeds=3)
    assert mean_v(runs, False) - mean_v(runs, True) > 0.01
    camp = load_real_runs(runs)
    rep = fit_report(camp, n_boot=20, n_sims=None)
    assert "predictive" not in rep.report
    assert rep.estimate.merge_ratio == pytest.approx(2.0, rel=0.1)
    assert rep.heldout["sync_excess"]["vex_pred_mean"] > 0.01


# ----------------------------------------------------------------------------- estimators

def test_token_counts_match_brute_force(train_dominated):
    run = load_real_runs(train_dominated).runs[0]
    feats = decode_features(run)
    req = run.requests
    f, e = req["first_token_s"].to_numpy(), req["end_s"].to_numpy()
    o = req["output_tokens"].to_numpy()
    keep = o >= 2
    brute = []
    for i in np.flatnonzero(keep):
        total = 0.0
        for j in range(len(req)):
            span = e[j] - f[j]
            if span <= 0:
                continue
            ov = max(0.0, min(e[i], e[j]) - max(f[i], f[j]))
            total += (o[j] - 1) / span * ov
        brute.append(total)
    np.testing.assert_allclose(feats.tokens, brute, rtol=1e-9)
    np.testing.assert_allclose(feats.iters, o[keep] - 1)


def test_service_fit_is_exact_on_noise_free_linear_data():
    from evalkit.replay.backends.sim.fit import DecodeFeatures

    rng = np.random.default_rng(3)
    n = 200
    iters = rng.integers(2, 40, n).astype(float)
    tokens = iters * rng.uniform(1, 8, n)
    adm = rng.integers(0, 5, n).astype(float)
    prompt = adm * rng.uniform(10, 40, n)
    span = 0.01 * iters + 0.002 * tokens + 0.004 * adm + 1e-4 * prompt
    got = fit_service([DecodeFeatures(iters, span, tokens, adm, prompt, np.zeros(n))])
    assert (got.base, got.per_seq, got.prefill_base, got.per_token) == pytest.approx(
        (0.01, 0.002, 0.004, 1e-4), rel=1e-6)


# ----------------------------------------------------------------------------- bad input

def _fit(path, tmp_path, *extra):
    return CliRunner().invoke(cli, ["sim", "fit", str(path), "--out",
                                    str(tmp_path / "t.toml"), *extra])


def test_sim_runs_are_refused(train_dominated, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(train_dominated, runs)
    relabel(runs, "sim")
    res = _fit(runs, tmp_path)
    assert res.exit_code == 2
    assert "simulator run" in res.output and "backend" in res.output
    assert not (tmp_path / "t.toml").exists()


def test_too_few_seeds_are_refused(train_dominated, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(train_dominated, runs)
    for d in run_dirs(runs):
        if not d.name.endswith(("s0", "s1", "s0__d0", "s1__d0")):
            shutil.rmtree(d)
    res = _fit(runs, tmp_path)
    assert res.exit_code == 2 and "needs >= 3" in res.output


def test_no_no_sync_runs_are_refused(train_dominated, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(train_dominated, runs)
    for d in runs.glob("*no_sync*"):
        shutil.rmtree(d)
    res = _fit(runs, tmp_path)
    assert res.exit_code == 2 and "no-sync runs" in res.output


def test_no_merging_runs_are_refused(train_dominated, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(train_dominated, runs)
    for d in run_dirs(runs):
        if "no_sync" not in d.name:
            shutil.rmtree(d)
    res = _fit(runs, tmp_path)
    assert res.exit_code == 2 and "no run merged" in res.output


def test_several_regimes_need_a_choice(train_dominated, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(train_dominated, runs)
    d = run_dirs(runs)[0]
    meta = json.loads((d / "run.json").read_text())
    meta["regime"] = "other"
    (d / "run.json").write_text(json.dumps(meta))
    res = _fit(runs, tmp_path)
    assert res.exit_code == 2 and "--regime" in res.output
    assert _fit(runs, tmp_path, "--regime", "reallike", "--bootstrap", "20",
                "--predictive-sims", "0").exit_code == 0


def test_a_seed_without_its_no_sync_run_is_refused_by_name(train_dominated, tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(train_dominated, runs)
    (gone,) = [d for d in runs.glob("*no_sync*") if d.name.endswith("s3")]
    shutil.rmtree(gone)
    res = _fit(runs, tmp_path, "--bootstrap", "20", "--no-progress")
    assert res.exit_code == 2, res.output
    assert "no no-sync baseline" in res.output and "seed 3" in res.output
    assert "__s3" in res.output                   # the held-out run it names
    assert not (tmp_path / "t.toml").exists()
    # without the predictive check the fit itself still runs (no-sync in 3 of 4 seeds)
    assert _fit(runs, tmp_path, "--bootstrap", "20", "--predictive-sims", "0").exit_code == 0


def test_too_few_predictive_sims_are_refused(train_dominated, tmp_path):
    res = _fit(train_dominated, tmp_path, "--predictive-sims", "5")
    assert res.exit_code == 2 and "--predictive-sims" in res.output


def test_predictive_check_in_the_report_and_printed(train_dominated, train_fit):
    from evalkit.cli.sim import FIT_DIGITS
    from evalkit.jsonio import to_jsonable
    from evalkit.replay.backends.sim.fit_check import loso_estimates
    from evalkit.replay.backends.sim.fit_predictive import inside, predictive_check

    rep = json.loads((train_fit / "fit.json").read_text())["predictive"]
    assert rep["n_sims"] == 20 and set(rep["variants"]) == {"request", "request+run"}
    for v in rep["variants"].values():
        cov, rows = v["coverage"], v["runs"]
        assert cov["n_runs"] == len(rows) == 12
        assert cov["n_inside"] == sum(inside(r["pit"]) for r in rows)
        assert cov["calibrated"] == (0.80 <= cov["coverage"] <= 0.97)
        groups = {g["group"]: g for g in v["sync_excess"]}
        assert set(groups) == {"fixed_h", "matched_random(fixed_h)"}
        for g in groups.values():        # the constructed rig: no-sync is the worst
            assert g["vex_real_mean"] < 0 and g["vex_pred_mean"] < 0 and g["sign_agrees"]
            assert g["n_seeds"] == 4 and len(g["vex_real_ci95"]) == 2
    floor = rep["sampling_floor"]
    assert floor["v_noise_floor"] > 0 and floor["v_mae"] >= 0
    out = (train_fit / "stdout.txt").read_text()
    assert "predictive check" in out and "coverage" in out and "sampling floor" in out
    assert "Vex fixed_h" in out and "sign agrees" in out
    # deterministic: the same check in this process gives the same numbers
    camp = load_real_runs(train_dominated)
    again = predictive_check(camp, loso_estimates(camp), n_sims=20, seed=0, progress=False)
    assert to_jsonable(again, FIT_DIGITS)["variants"] == rep["variants"]


def test_missing_directory_is_refused(tmp_path):
    res = _fit(tmp_path / "nope", tmp_path)
    assert res.exit_code == 2
