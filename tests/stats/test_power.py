"""Power planning: the batch permutation p against the exact test, the pilot model, level
under no gain, and `evalkit plan power` end to end."""

from __future__ import annotations

import json
import math

import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.stats.randomisation import within_seed_permutation_test
from evalkit.stats import sign_flip_test
from evalkit.stats.power import (EXACT_LABEL_SETS, permutation_p_batch, pilot_model,
                                  power_plan)
from evalkit.stats.sequential import label_values_equal_m


@pytest.mark.parametrize("n, b", [(6, 100), (9, 20000)])   # 729 label sets: exact; 19,683: MC
def test_batch_permutation_p_matches_the_exact_test(n, b):
    # the audit's default test: studentized (mean/se recomputed per label set)
    rng = np.random.default_rng(1)
    v = rng.lognormal(np.log(0.06), 0.5, (3, n, 3))
    v[:, :, 0] -= 0.01
    vals = label_values_equal_m(v[..., 0], v[..., 1:])
    got = permutation_p_batch(vals, b, np.random.default_rng(2), "two-sided")
    for r in range(3):
        exact = within_seed_permutation_test(v[r, :, 0], list(v[r, :, 1:]), "two-sided",
                                             confidence_level=None)
        assert exact.exact and exact.statistic_name == "studentized"
        if 3 ** n <= EXACT_LABEL_SETS:
            assert got[r] == pytest.approx(exact.p_value, rel=1e-12)
        else:
            se = math.sqrt(exact.p_value * (1 - exact.p_value) / b) * 2 + 1 / b
            assert abs(got[r] - exact.p_value) <= 4 * se, (got[r], exact.p_value)


def test_batch_p_is_the_studentized_not_the_raw_mean_test():
    # one seed with a large label spread: raw mean and mean/se order label sets differently
    pol = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    draws = np.array([[1.0, 1.2], [0.9, 1.1], [1.1, 0.8], [1.0, 0.9], [-9.0, 12.0],
                      [0.2, 1.9]])
    vals = label_values_equal_m(pol[None], draws[None])
    for alt in ("greater", "less", "two-sided"):
        got = permutation_p_batch(vals, 100, np.random.default_rng(0), alt)[0]
        stud = within_seed_permutation_test(pol, list(draws), alt, confidence_level=None)
        raw = within_seed_permutation_test(pol, list(draws), alt, confidence_level=None,
                                           statistic="mean")
        assert got == pytest.approx(stud.p_value, rel=1e-12)
        if alt == "greater":
            assert abs(raw.p_value - stud.p_value) > 0.05     # the case tells them apart


def test_batch_p_with_ties_and_a_degenerate_se():
    # seed runs that all tie (label values 0) and campaigns whose d are all equal (se = 0)
    pol = np.array([[0.1, 0.2, 0.3, 0.4, 0.5],
                    [0.0, 0.0, 0.0, 0.0, 0.0],
                    [0.1, 0.2, 0.3, 0.3, 0.1]])
    draws = np.stack([np.column_stack([pol[0] + 0.1, pol[0] + 0.1]),
                      np.ones((5, 2)),
                      np.array([[0.2, 0.0], [0.2, 0.2], [0.5, 0.3], [0.3, 0.3], [0.4, 0.1]])])
    vals = label_values_equal_m(pol, draws)
    for alt in ("greater", "less", "two-sided"):
        got = permutation_p_batch(vals, 100, np.random.default_rng(0), alt)
        for r in range(3):
            ref = within_seed_permutation_test(pol[r], list(draws[r]), alt,
                                               confidence_level=None)
            assert got[r] == pytest.approx(ref.p_value, rel=1e-12), (alt, r)


def test_batch_p_with_one_draw_is_the_sign_flip_test():
    rng = np.random.default_rng(8)
    v = rng.lognormal(np.log(0.06), 0.5, (4, 10, 2))
    vals = label_values_equal_m(v[..., 0], v[..., 1:])
    got = permutation_p_batch(vals, 100, np.random.default_rng(0), "two-sided")
    for r in range(4):
        assert got[r] == pytest.approx(sign_flip_test(v[r, :, 1] - v[r, :, 0],
                                                      "two-sided").p_value, rel=1e-12)


def test_batch_permutation_p_never_below_the_design_minimum():
    v = np.random.default_rng(3).lognormal(np.log(0.06), 0.5, (50, 2, 6))
    v[:, :, 0] -= 0.05                       # the policy run is the best of every seed
    p = permutation_p_batch(label_values_equal_m(v[..., 0], v[..., 1:]), 400,
                            np.random.default_rng(4), "two-sided")
    assert np.all(p >= 2 / 36 - 1e-12)       # 2 seeds x 6 runs: two-sided min p = 2/36


def test_pilot_model_pools_within_seed_spread():
    draws = [[0.05, 0.07, 0.06], [0.10, 0.12], [0.08]]
    model = pilot_model([0.05, 0.09, 0.07], draws)
    ss = sum(float(np.sum((np.array(d) - np.mean(d)) ** 2)) for d in draws)
    assert model.sd_within == pytest.approx(math.sqrt(ss / (2 + 1)))
    assert model.means == pytest.approx((0.06, 0.11)) and not model.gaussian
    # resampled noise: each pilot seed (>= 2 draws) equally likely, its unbiased variance
    pol, dr = model.sample(np.random.default_rng(0), 4000, 2, 3, gain=0.0)
    within = dr - dr.mean(axis=-1, keepdims=True)
    per_seed = [np.var(d, ddof=1) for d in draws[:2]]
    assert within.std() * math.sqrt(3 / 2) == pytest.approx(math.sqrt(np.mean(per_seed)),
                                                            rel=0.03)


def test_one_draw_pilot_falls_back_to_a_gaussian():
    model = pilot_model([0.05, 0.06, 0.04, 0.07], [[0.06], [0.065], [0.05], [0.08]])
    d = np.array([0.01, 0.005, 0.01, 0.01])
    assert model.gaussian and model.sd_within == pytest.approx(math.sqrt(np.var(d, ddof=1) / 2))


def test_no_gain_keeps_both_levels_and_a_large_gain_is_found():
    rng = np.random.default_rng(3)
    pilot = rng.lognormal(np.log(0.06), 0.6, (8, 4))
    model = pilot_model(pilot[:, 0], list(pilot[:, 1:]))
    reps = 400
    null = power_plan(model, 0.0, draws=(2,), max_seeds=20, seeds_grid=[6, 20], reps=reps,
                      n_resamples=200, rng=4)
    row = null.rows[0]
    se = math.sqrt(0.05 * 0.95 / reps)
    assert max(row.fixed_power) <= 0.05 + 3 * se
    assert row.sequential_power[-1] <= 0.05 + 3 * se
    big = power_plan(model, 0.2, draws=(2,), max_seeds=20, seeds_grid=[20], reps=100,
                     n_resamples=200, rng=5)
    assert big.rows[0].fixed_power[0] == 1.0 and big.rows[0].sequential_power[0] >= 0.95
    assert big.best("fixed").m == 2


def _invoke(args):
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def test_plan_power_cli_table_figure_and_json(tmp_path, fixtures_dir):
    out = tmp_path / "plan.json"
    png = tmp_path / "power.png"
    res = _invoke(["plan", "power", "--pilot", str(fixtures_dir / "campaigns" / "sim_bursty"),
                   "--policy", "wa", "--gain", "0.02", "--reps", "40", "--max-seeds", "8",
                   "--draws", "1,2", "--resamples", "100", "--plot", str(png),
                   "--json", str(out)])
    assert res.exit_code == 0, res.output
    plan = json.loads(out.read_text())
    assert [r["m"] for r in plan["rows"]] == [1, 2] and png.stat().st_size > 1000
    row = plan["rows"][1]
    need = row["fixed_seeds_needed"]
    cell = str(need) if need is not None else "> 8"
    assert f"| 2 | {cell} |" in res.output
    assert f"{row['mean_seeds_to_decision']:.1f}" in res.output
    assert "power plan for wa (pilot sim_bursty, 7 seeds): gain 2.00 pp of V" in res.output
    assert plan["gain"] == 0.02          # the JSON keeps shares


def test_the_plan_gives_gain_and_sd_in_pp_and_its_json_keeps_shares():
    from evalkit.cli.plan_power import format_plan

    model = pilot_model([0.05, 0.09, 0.07], [[0.05, 0.07, 0.06], [0.10, 0.12], [0.08]])
    plan = power_plan(model, 0.0145, draws=(1,), max_seeds=4, reps=10, n_resamples=10, rng=0)
    first = format_plan(plan, "wa").splitlines()[0]
    assert first.startswith("power plan for wa: gain 1.45 pp of V, alpha 0.05 two-sided"), first
    assert f"within-seed sd of a draw {100 * model.sd_within:.2f} pp (" in first
    assert "0.0145" not in first and str(round(model.sd_within, 4)) not in first
    doc = plan.to_dict()
    assert doc["gain"] == 0.0145 and doc["sd_within"] == model.sd_within


@pytest.mark.parametrize("args, match", [
    (["--gain", "0.01"], "exactly one of --pilot"),
    (["--gain", "0.01", "--pilot", "X", "--twin", "Y"], "exactly one of --pilot"),
    (["--gain", "0.01", "--pilot", "P", "--draws", "0,2"], "--draws"),
    (["--gain", "0.01", "--pilot", "P", "--draws", "a"], "--draws"),
    (["--gain", "0.01", "--pilot", "P", "--policy", "wa", "--alpha", "1.5"],
     "error: option --alpha: alpha must lie in (0, 1)"),
    (["--gain", "0.01", "--pilot", "P", "--policy", "wa", "--max-seeds", "1"],
     "error: option --max-seeds: max_seeds must be >= 2, got 1"),
    (["--gain", "0.01", "--pilot", "P", "--policy", "wa", "--reps", "5"],
     "error: option --reps: reps must be >= 10, got 5"),
])
def test_plan_power_bad_input_exits_2(args, match, fixtures_dir):
    args = [str(fixtures_dir / "campaigns" / "sim_bursty") if a == "P" else a for a in args]
    res = _invoke(["plan", "power", *args])
    assert res.exit_code == 2 and match in res.output


@pytest.mark.slow
def test_plan_power_from_the_fitted_twin(repo_root, tmp_path):
    # the committed twin campaign without seed 3, whose two ewma draws have no feasible
    # schedule on the twin (examples/cpu_real/twin_harness_failed.json)
    src = repo_root / "examples" / "cpu_real"
    shutil.copyfile(src / "twin.toml", tmp_path / "twin.toml")
    text = (src / "twin_campaign.toml").read_text()
    assert "\nseeds = 9\n" in text
    (tmp_path / "twin_campaign.toml").write_text(
        text.replace("\nseeds = 9\n", "\nseeds = [0, 1, 2, 4, 5, 6, 7, 8]\n"))
    res = _invoke(["plan", "power", "--twin", str(tmp_path / "twin_campaign.toml"),
                   "--policy", "ewma", "--gain", "0.05", "--reps", "40", "--max-seeds", "10",
                   "--draws", "2", "--resamples", "100"])
    assert res.exit_code == 0, res.output
    assert "power plan for ewma (twin campaign twin_campaign.toml, 8 seeds)" in res.output


def test_one_seed_is_never_significant():
    # t = mean/se is undefined for one seed; its smallest attainable two-sided p is
    # 2 / (m + 1), so no campaign of one seed and 3 draws can reach alpha = 0.05
    rng = np.random.default_rng(7)
    v = rng.lognormal(np.log(0.06), 0.3, (50, 1, 4))
    v[:, :, 0] -= 0.05
    p = permutation_p_batch(label_values_equal_m(v[..., 0], v[..., 1:]), 100,
                            np.random.default_rng(1), "two-sided")
    assert np.all(p >= 0.5 - 1e-12)


@pytest.mark.parametrize("key, value", [("alpha", 0.0), ("alpha", 1.0), ("alpha", 1.5),
                                        ("target", 1.0), ("target", 1.2), ("target", -0.1)])
def test_alpha_and_target_power_outside_zero_one_are_input_errors(key, value):
    from evalkit.errors import InputError

    model = pilot_model([0.05, 0.06, 0.04, 0.07], [[0.06], [0.065], [0.05], [0.08]])
    with pytest.raises(InputError, match=f"{key} must lie in"):
        power_plan(model, 0.01, max_seeds=4, reps=10, n_resamples=10, rng=0, **{key: value})


def test_a_sampled_campaign_gives_the_policy_the_gain_in_v_below_its_draws():
    model = pilot_model([0.05, 0.09, 0.07], [[0.05, 0.07, 0.06], [0.10, 0.12], [0.08]])
    pol, dr = model.sample(np.random.default_rng(1), 4000, 3, 2, gain=0.01)
    assert pol.shape == (4000, 3) and dr.shape == (4000, 3, 2)
    assert float(np.mean(dr.mean(axis=-1) - pol)) == pytest.approx(0.01, abs=1e-3)


def test_plan_power_searches_up_to_40_seeds_by_default():
    model = pilot_model([0.05, 0.09, 0.07], [[0.05, 0.07, 0.06], [0.10, 0.12], [0.08]])
    plan = power_plan(model, 0.02, draws=(1,), reps=10, n_resamples=10, rng=0)
    assert plan.rows[0].seeds == tuple(range(2, 41))
