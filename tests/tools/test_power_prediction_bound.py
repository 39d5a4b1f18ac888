"""tools/power_prediction_bound.py: the oracle's variance estimates, its interpolated power
function, the Fisher information behind the Cramer-Rao column and the planner figures it reads,
each against brute force on a small case."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from evalkit.stats.floored import floored_mean_test
from evalkit.stats.power import pilot_model
from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
bound = load_script(ROOT / "tools" / "power_prediction_bound.py", "power_prediction_bound")
validation = load_script(ROOT / "tools" / "power_validation.py", "power_validation")


def test_estimates_on_a_pilot_whose_variance_components_are_known_by_hand():
    # 4 seeds, logs of the draws a_s + (-w, 0, w): pooled within variance w^2; the policy's
    # log residual alternates +-c around the seed mean: variance c^2 4/3 (ddof 1)
    w, c = 0.3, 0.2
    levels = np.array([0.0, 0.5, -0.5, 1.0])
    draws = np.exp(levels[:, None] + np.array([-w, 0.0, w]))
    policy = np.exp(levels + c * np.array([1.0, -1.0, 1.0, -1.0]))
    sigma, sigma_policy, sigma_level = bound.oracle_estimates(policy[None], draws[None])
    assert sigma[0] == pytest.approx(w, abs=1e-12)
    assert sigma_policy[0] == pytest.approx(math.sqrt(c * c * 4 / 3 - w * w / 3), abs=1e-12)
    assert sigma_level[0] == pytest.approx(math.sqrt(np.var(levels, ddof=1) - w * w / 3),
                                           abs=1e-12)


def test_a_negative_variance_component_is_truncated_at_zero():
    # the policy sits exactly on each seed's mean log draw: residual variance 0 < w^2 / 3
    draws = np.exp(np.array([[-0.5, 0.0, 0.5], [0.5, 1.0, 1.5], [0.0, 0.5, 1.0]]))
    policy = np.exp(np.log(draws).mean(axis=1))
    _, sigma_policy, _ = bound.oracle_estimates(policy[None], draws[None])
    assert sigma_policy[0] == 0.0


def test_estimates_agree_with_the_planners_lognormal_model_on_every_pilot():
    rng = np.random.default_rng(3)
    policy, draws = bound.campaigns(rng, ("lognormal 0.8", "one more draw"), 5, 10)
    est = bound.oracle_estimates(policy, draws)
    for i in range(5):
        model = pilot_model(policy[i], list(draws[i]), kind="lognormal")
        got = [e[i] for e in est]
        assert got == pytest.approx([model.sigma_within, model.sigma_policy, model.tau],
                                    abs=1e-10)


def test_differences_follow_the_validation_truth():
    # same model by another route: power_validation's campaigns (V0 = 6.54%) against ours
    rng = np.random.default_rng(4)
    truth = ("lognormal 0.35", "fixed schedule 0.05")
    assert bound.true_parameters(truth) == (0.35, 0.05, 0.3)
    policy, draws = bound.campaigns(rng, truth, 100_000, 2)
    theirs = ((draws.mean(axis=-1) - policy) / validation.V0).ravel()
    own_policy, own_draws = bound.campaign_runs(bound.base_normals(rng, 100_000, 2),
                                                *bound.true_parameters(truth), 2)
    ours = (own_draws.mean(axis=-1) - own_policy).ravel()
    assert ours.mean() == pytest.approx(bound.EFFECT, abs=0.005)
    assert theirs.mean() == pytest.approx(bound.EFFECT, abs=0.005)
    assert ours.std() == pytest.approx(theirs.std(), rel=0.02)


AXES = (np.array([0.3, 0.4]), np.array([0.2, 0.3]), np.array([0.25, 0.375]))  # script's steps
SEEDS = 6


def _brute_power(normals, params):
    """Share of campaigns the gate's own test passes, one campaign at a time through the
    audit's single-campaign call."""
    policy, draws = bound.campaign_runs(normals, *params, SEEDS)
    return np.mean([(r.p_value <= bound.ALPHA) & (r.mean > 0) for r in (
        floored_mean_test(p, list(d), "greater", confidence=None)
        for p, d in zip(policy, draws))])


@pytest.fixture(scope="module")
def small_grid():
    normals = bound.base_normals(np.random.default_rng(5), 300, SEEDS)
    return normals, bound.build_power_grid(normals, axes=AXES, ns=(SEEDS,))


def test_grid_nodes_are_the_gates_test_on_the_same_campaigns(small_grid):
    normals, grid = small_grid
    for i, j, k in itertools.product(range(2), repeat=3):
        node = (AXES[0][i], AXES[1][j], AXES[2][k])
        assert grid.values[SEEDS][i, j, k] == _brute_power(normals, node)


def test_interpolation_is_multilinear_in_probits_and_close_to_direct(small_grid):
    normals, grid = small_grid
    point = (0.33, 0.275, 0.35)              # weights 0.7, 0.25, 0.2 on the lower nodes
    frac = [(p - a[0]) / (a[1] - a[0]) for p, a in zip(point, AXES)]
    probit = sum(sps.norm.ppf(grid.values[SEEDS][i, j, k])
                 * np.prod([f if idx else 1 - f for f, idx in zip(frac, (i, j, k))])
                 for i, j, k in itertools.product(range(2), repeat=3))
    assert grid.power(SEEDS, *point) == pytest.approx(sps.norm.cdf(probit), abs=1e-12)
    assert grid.power(SEEDS, *point) == pytest.approx(_brute_power(normals, point), abs=0.02)


def test_outside_the_grid_reads_its_edge_and_is_counted(small_grid):
    _, grid = small_grid
    assert 0 < grid.values[SEEDS].min() and grid.values[SEEDS].max() < 1
    assert grid.power(SEEDS, 0.9, 0.3, 0.375) == pytest.approx(grid.values[SEEDS][1, 1, 1])
    assert grid.power(SEEDS, 0.4, 0.0, 0.375) == pytest.approx(grid.values[SEEDS][1, 0, 1])
    assert grid.clamped([0.9, 0.4, 0.35], [0.3, 0.0, 0.25], [0.375, 0.375, 0.3]).tolist() == \
        [True, True, False]


def test_fisher_information_is_the_covariance_of_the_score():
    params = (0.5, 0.4, 0.3)
    sigma, sigma_policy, sigma_level = params
    seeds, m, pilots = 10, 3, 20_000
    rng = np.random.default_rng(6)
    offset = math.log(1 - bound.EFFECT)

    def loglik(theta, x):
        mu, s2, sp2, t2 = theta
        mean = np.array([mu] * m + [mu + offset + s2 / 2 - sp2 / 2])
        cov = t2 * np.ones((m + 1, m + 1)) + np.diag([s2] * m + [sp2])
        return sps.multivariate_normal(mean, cov).logpdf(x).sum(axis=-1)

    theta = np.array([-2.7, sigma ** 2, sigma_policy ** 2, sigma_level ** 2])
    level = sigma_level * rng.standard_normal((pilots, seeds, 1))
    noise = rng.standard_normal((pilots, seeds, m + 1)) * np.array([sigma] * m + [sigma_policy])
    x = theta[0] + level + noise
    x[..., -1] += offset + sigma ** 2 / 2 - sigma_policy ** 2 / 2
    h = 1e-5
    score = np.stack([(loglik(theta + h * e, x) - loglik(theta - h * e, x)) / (2 * h)
                      for e in np.eye(4)], axis=1)
    info = bound.fisher_information(*params, seeds=seeds, m=m)
    assert np.cov(score.T) == pytest.approx(info, rel=0.05, abs=0.05 * np.abs(info).max())


def test_the_planners_rows_are_read_from_the_validation_table(tmp_path):
    row = ("| lognormal 0.35, policy one more draw | fixed n=10 | 0.588 | smoothed | 0.617 | "
           "+0.030 | 0.50 | 0.80 | 0.282 |")
    other = row.replace("smoothed", "old").replace("| 0.80 | 0.282 |", "| - | - |")
    assert bound.planner_figures(f"{row}\n{other}\n") == {
        ("lognormal 0.35, policy one more draw", "fixed n=10", "smoothed"): (0.588, 0.03, 0.5)}
    figures = bound.read_planner_figures()
    wanted = {(f"{noise}, policy {policy}", f"fixed n={n}", model)
              for noise, policy in bound.LOGNORMAL_TRUTHS for n in (10, 20)
              for model in ("smoothed", "lognormal")}
    assert len(wanted) == 16 and wanted <= set(figures)
    cut = tmp_path / "POWER_VALIDATION.md"
    cut.write_text("\n".join(line for line in bound.VALIDATION.read_text().splitlines()
                             if "lognormal 0.8, policy fixed" not in line))
    with pytest.raises(SystemExit, match="POWER_VALIDATION.md: no row for.*lognormal 0.8"):
        bound.read_planner_figures(cut)


def test_a_power_of_zero_or_one_reads_half_a_campaign_from_it():
    axes = (np.array([0.3, 0.4]), np.array([0.0, 0.1]), np.array([0.0, 0.1]))
    values = {10: np.stack([np.zeros((2, 2)), np.ones((2, 2))])}
    grid = bound.PowerGrid(axes, values, reps=100)
    assert grid.power(10, 0.3, 0.0, 0.0) == pytest.approx(0.005)
    assert grid.power(10, 0.4, 0.1, 0.1) == pytest.approx(0.995)
    assert grid.power(10, 0.35, 0.05, 0.05) == pytest.approx(0.5)


def _reading_rows(oracle_within, planner_within):
    return [{"label": f"truth {i}", "n": 10, "within": o, "within_known": o + 0.05,
             "err": 0.01 * i, "sd": 0.05 + 0.01 * i, "cr_within": 0.8,
             "planner": {"smoothed": (0.5, 0.0, p), "lognormal": (0.5, 0.0, p)}}
            for i, (o, p) in enumerate(zip(oracle_within, planner_within))]


def test_the_reading_says_which_side_of_the_oracle_the_planner_lands():
    behind = bound.reading(_reading_rows([0.6, 0.8], [0.5, 0.7]), 0.01)[0]
    assert "Our planner trails the oracle by 0.10 on average" in behind
    assert "most of its miss is the pilot's information" in behind
    far = bound.reading(_reading_rows([0.9, 0.9], [0.5, 0.5]), 0.01)[0]
    assert "trails the oracle by 0.40" in far and "a part of its miss is the planner's" in far
    ahead = bound.reading(_reading_rows([0.5, 0.6], [0.6, 0.7]), 0.01)[0]
    assert "Our planner's share is 0.10 above the oracle's on average" in ahead
    assert "trails" not in ahead
    assert "over the 2 cells the oracle puts 0.55" in ahead.lower()


class _ExactGrid:
    """A power function that returns a fixed value whatever the estimates: each pilot's
    prediction is that value, so its share within the band is 1 or 0."""

    def __init__(self, value):
        self.value = value

    def power(self, n, sigma, sigma_policy, sigma_level):
        return np.full(np.shape(sigma), self.value[n])


def test_pilot_size_rows_count_the_predictions_within_the_band():
    rows = [{"label": f"{t[0]}, policy {t[1]}", "n": n, "truth": 0.5}
            for t in bound.LOGNORMAL_TRUTHS for n in bound.FIXED_N]
    near = {n: 0.5 + 0.06 for n in bound.FIXED_N}            # inside +-0.07 for every pilot
    far = {n: 0.5 + 0.08 for n in bound.FIXED_N}             # outside for every pilot
    for grid, share in ((_ExactGrid(near), 1.0), (_ExactGrid(far), 0.0)):
        got = bound.pilot_size_rows(np.random.default_rng(0), grid, rows, 4, (3, 5))
        assert len(got) == len(rows)
        assert all(r["within"] == [share, share] for r in got)


def test_pilot_size_section_reads_its_own_table():
    sized = [{"label": "a", "n": 10, "truth": 0.4, "within": [0.5, 0.91, 0.95]},
             {"label": "a", "n": 20, "truth": 0.7, "within": [0.3, 0.5, 0.8]},
             {"label": "b", "n": 10, "truth": 0.99, "within": [0.95, 0.97, 1.0]}]
    text = "\n".join(bound.pilot_size_section(sized, (10, 20, 40), 7))
    assert "| a | 10 | 0.400 | 0.50 | 0.91 | 0.95 | 20 |" in text
    assert "| a | 20 | 0.700 | 0.30 | 0.50 | 0.80 | > 40 |" in text
    assert "| b | 10 | 0.990 | 0.95 | 0.97 | 1.00 | 10 |" in text
    assert ("with 40 seeds the oracle lands within the band for 0.9 of pilots in 2 of 3 cells "
            "(at 10 seeds: 1); the largest pilot size any cell needs among those measured is "
            "beyond 40 seeds in 1 cell(s).") in text
    sized[1]["within"][-1] = 0.9
    assert "needs among those measured is 40 seeds." in "\n".join(
        bound.pilot_size_section(sized, (10, 20, 40), 7))
