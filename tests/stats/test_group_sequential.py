"""Group-sequential boundaries against published values and brute-force simulation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from evalkit.errors import InputError
from evalkit.stats.group_sequential import (crossing_probabilities, decide, design,
                                            futility_words, plan_seeds, spent_alpha)

# Lan-DeMets O'Brien-Fleming-type, one-sided alpha 0.025, equally spaced looks: the z
# boundaries R's gsDesign prints for sfLDOF (k = 3 and k = 5).
PUBLISHED_OBF = {3: (3.7103, 2.5114, 1.9930), 5: (4.8769, 3.3569, 2.6803, 2.2898, 2.0310)}


@pytest.mark.parametrize("k", sorted(PUBLISHED_OBF))
def test_obrien_fleming_boundaries_match_the_published_table(k):
    gs = design(tuple(4 * (i + 1) for i in range(k)), 0.025, futility=None)
    assert gs.z_bounds == pytest.approx(PUBLISHED_OBF[k], abs=2e-4)


def brownian_crossing(bounds, looks, theta, reps, rng):
    incr = rng.standard_normal((reps, len(looks))) * np.sqrt(np.diff((0,) + tuple(looks)))
    s = np.cumsum(incr + theta * np.diff((0,) + tuple(looks)), axis=1)
    z = s / np.sqrt(looks)
    return float(np.mean(np.any(z >= np.asarray(bounds), axis=1)))


@pytest.mark.parametrize("spending, gamma", [("hwang-shih-decani", -4.0),
                                             ("hwang-shih-decani", 1.0),
                                             ("obrien-fleming", 0.0)])
def test_level_and_power_by_simulation_of_the_canonical_process(spending, gamma):
    looks = (3, 5, 9, 12)                                      # unequal blocks on purpose
    gs = design(looks, 0.025, spending, gamma, futility=None)
    rng = np.random.default_rng(5)
    assert brownian_crossing(gs.z_bounds, looks, 0.0, 200_000, rng) == pytest.approx(0.025,
                                                                                    abs=0.0015)
    p, _ = crossing_probabilities(gs, 0.6, with_futility=False)
    assert brownian_crossing(gs.z_bounds, looks, 0.6, 100_000, rng) == pytest.approx(p.sum(),
                                                                                    abs=0.006)
    assert np.cumsum(crossing_probabilities(gs, 0.0, False)[0]) == pytest.approx(
        gs.alpha_spent, abs=1e-6)


def test_spending_functions_spend_alpha_at_the_end():
    for spending, gamma in (("obrien-fleming", 0.0), ("hwang-shih-decani", -4.0),
                            ("hwang-shih-decani", 0.0)):
        a = spent_alpha([0.0, 0.5, 1.0], 0.025, spending, gamma)
        assert a[0] == 0.0 and a[2] == pytest.approx(0.025) and 0 < a[1] < 0.025


def test_t_boundaries_hold_the_level_for_normal_d_at_small_looks():
    gs = design((5, 10, 15, 20), 0.025, futility=0.0)
    assert all(t > z for t, z in zip(gs.t_bounds, gs.z_bounds))
    rng = np.random.default_rng(1)
    d = rng.standard_normal((20_000, 20))
    passes = 0
    for k, (nk, b) in enumerate(zip(gs.looks, gs.t_bounds)):
        x = d[:, :nk]
        t = x.mean(1) / (x.std(1, ddof=1) / math.sqrt(nk))
        hit = t >= b
        passes += hit.sum()
        d = d[~hit]
    assert passes / 20_000 == pytest.approx(0.025, abs=0.004)


def test_decide_walks_the_looks_and_stops():
    gs = design((5, 10, 15), 0.025, futility=0.0)
    clear = np.array([1.0, 1.2, 0.9, 1.1, 1.05, 0.95, 1.0, 1.1, 0.9, 1.0, 1.2, 1.1, 1.0, 0.9, 1.0])
    out = decide(clear, gs)
    assert [look.decision for look in out.looks][-1] == "pass"
    assert out.decision == "pass" and out.seeds_used == out.looks[-1].seeds
    worse = -clear + np.linspace(0, 0.1, 15)
    out = decide(worse, gs)
    assert out.decision == "stop: not better" and out.seeds_used == 10       # futility at look 2
    assert decide(clear[:7], gs).decision in ("pass", "continue")
    assert json.loads(json.dumps(out.to_dict()))["looks"][0]["seeds"] == 5


def test_decide_without_futility_runs_to_the_last_look():
    gs = design((5, 10, 15), 0.025, futility=None)
    worse = -np.linspace(0.5, 1.5, 15)
    out = decide(worse, gs)
    assert out.seeds_used == 15 and out.decision == "stop: not better"


def test_null_shift_needs_the_gain_above_min_effect():
    gs = design((5, 10), 0.025, futility=None)
    d = np.array([0.6, 0.7, 0.8, 0.65, 0.75, 0.9, 0.7, 0.6, 0.72, 0.68])
    assert decide(d, gs).decision == "pass"
    assert decide(d, gs, null_shift=0.7).decision == "stop: not better"


def test_plan_seeds_reaches_the_power_and_beats_fixed_n():
    plan = plan_seeds(0.8, alpha=0.025, power=0.8, block=4)
    assert plan.power >= 0.8
    smaller = design(plan.design.looks[:-1], 0.025) if len(plan.design.looks) > 1 else None
    if smaller is not None:
        p, _ = crossing_probabilities(smaller, 0.8)
        assert p.sum() < 0.8                               # the smallest such design
    z = stats.norm.isf(0.025) + stats.norm.isf(0.2)
    assert plan.fixed_seeds == math.ceil((z / 0.8) ** 2)
    assert plan.expected_seeds_effect < plan.fixed_seeds
    assert plan.expected_seeds_null < plan.design.max_seeds
    assert json.loads(json.dumps(plan.to_dict()))["design"]["looks"][-1] == plan.design.max_seeds


@pytest.mark.parametrize("call, column", [
    (lambda: design((5, 5, 10)), "looks"),
    (lambda: design((1, 5)), "looks"),
    (lambda: design((5, 10), spending="pocock-ish"), "spending"),
    (lambda: design((5, 10), alpha=1.5), "alpha"),
    (lambda: plan_seeds(0.0), "effect_sd"),
    (lambda: plan_seeds(0.5, power=1.0), "power"),
    (lambda: plan_seeds(0.5, block=1), "block"),
    (lambda: plan_seeds(0.05, max_seeds_limit=10), "effect_sd"),
    (lambda: decide(np.ones(12), design((5, 10))), "seed"),
    (lambda: decide(np.ones(5), design((5, 10)), null_shift=math.nan), "null_shift"),
])
def test_bad_input_names_the_field(call, column):
    with pytest.raises(InputError) as info:
        call()
    assert info.value.column == column


def _rising_z(n, top):
    """The "rising" rule's z bound, written out: -0.75 at no seeds, 1.75 at the maximum."""
    return -0.75 + 2.5 * n / top


def test_the_rising_futility_bound_climbs_with_the_share_of_the_plans_seeds():
    looks = (4, 5, 6, 8, 12, 20)
    gs = design(looks, 0.025, "hwang-shih-decani", -2.0, futility="rising")
    assert gs.futility == "rising"
    assert gs.futility_z[0] is gs.futility_z[-1] is None          # none at the first and last
    assert gs.futility_t[0] is gs.futility_t[-1] is None
    for k in range(1, len(looks) - 1):
        z = _rising_z(looks[k], 20)
        assert gs.futility_z[k] == pytest.approx(z, abs=1e-12)
        # as a t bound at the same marginal tail, scipy's t quantile of Phi(z)
        ref = stats.t.ppf(stats.norm.cdf(z), df=looks[k] - 1)
        assert gs.futility_t[k] == pytest.approx(ref, rel=1e-9, abs=1e-12)
    assert list(gs.futility_z[1:-1]) == sorted(gs.futility_z[1:-1])
    # "zero" is the constant 0 on both scales; None stops nothing
    zero = design(looks, 0.025, futility="zero")
    assert zero.futility == 0.0 and zero.futility_t[1:-1] == (0.0,) * 4
    assert design(looks, 0.025, futility=None).futility_t == (None,) * 6
    # non-binding: the efficacy bounds do not depend on the rule
    assert design(looks, 0.025, futility="rising").t_bounds == zero.t_bounds


@pytest.mark.parametrize("rule", ["falling", "", True, math.nan, [0.0]])
def test_an_unknown_futility_rule_is_named(rule):
    with pytest.raises(InputError, match="unknown futility rule") as info:
        design((5, 10), 0.025, futility=rule)
    assert info.value.column == "futility" and "rising" in info.value.fix


def test_futility_words_name_each_rule():
    assert futility_words(None) == "no futility stop"
    assert futility_words("zero") == futility_words(0) == "non-binding futility at t < 0"
    assert futility_words(-0.5) == "non-binding futility at t < -0.5"
    assert "z < -0.75 + 2.5 t" in futility_words("rising")


def test_decide_stops_below_the_rising_bound_where_zero_would_go_on():
    looks = (4, 8, 12, 16)
    rising = design(looks, 0.025, futility="rising")
    zero = design(looks, 0.025, futility="zero")
    # at 8 seeds of 16 the rising z bound is 0.5: a small positive t (about 0.3) stops there
    d = np.array([0.9, -0.6, 0.4, -0.5, 0.8, -0.7, 0.5, -0.4])
    t8 = d.mean() / (d.std(ddof=1) / math.sqrt(8))
    assert 0 < t8 < rising.futility_t[1]
    out = decide(d, rising)
    assert out.decision == "stop: not better" and out.seeds_used == 8
    assert out.looks[-1].futility == rising.futility_t[1]
    assert decide(d, zero).decision == "continue"
    # at the first look neither rule stops
    assert decide(-np.abs(d[:4]) - 0.1, rising).decision == "continue"


@pytest.mark.parametrize("theta, futility", [(0.0, 0.0), (0.4, 0.0), (0.4, 0.5),
                                             (0.4, "rising"), (0.0, "rising")])
def test_crossing_probabilities_match_simulated_normal_paths(theta, futility):
    """Pass and futility-stop probabilities per look against 400,000 simulated score paths
    (increments N(theta, 1) a seed, Z_k = S_k / sqrt(n_k))."""
    gs = design((5, 10, 15, 20), 0.025, futility=futility)
    passes, stops = crossing_probabilities(gs, theta)
    rng = np.random.default_rng(7)
    paths = 400_000
    s = np.cumsum(rng.normal(theta, 1.0, (paths, 20)), axis=1)
    open_ = np.ones(paths, dtype=bool)
    last = len(gs.looks) - 1
    for k, (n, c) in enumerate(zip(gs.looks, gs.z_bounds)):
        z = s[:, n - 1] / np.sqrt(n)
        hit = open_ & (z >= c)
        bound = _rising_z(n, 20) if futility == "rising" else futility
        stop = open_ & ~hit & (z < bound) if 0 < k < last else np.zeros(paths, dtype=bool)
        for p, sim in ((passes[k], hit.mean()), (stops[k], stop.mean())):
            assert abs(p - sim) <= 4 * np.sqrt(max(sim, 1e-4) * (1 - sim) / paths) + 1e-3
        open_ &= ~(hit | stop)
    assert stops[0] == stops[-1] == 0.0 and stops[1:-1].sum() > 0.05


def test_a_continuation_region_narrower_than_a_grid_step_keeps_a_small_positive_mass():
    from evalkit.stats.group_sequential import _GRID_STEP, _Recursion

    rec = _Recursion(np.array([1.0, 2.0]), 0.0)
    rec.advance(0, 1.0, 1.0 + _GRID_STEP / 4)             # [1, 1.005): no two grid points
    mass = rec.cross_above(1, -10.0) + rec.cross_below(1, -10.0)
    density = stats.norm.pdf(1.0)
    assert 0.0 < mass <= 1.1 * density * _GRID_STEP       # at most one grid step's worth


def test_a_maximum_exactly_at_the_seed_limit_is_allowed_and_one_block_less_is_not():
    need = max(plan_seeds(0.8, block=4).design.looks)
    at_limit = plan_seeds(0.8, block=4, max_seeds_limit=need)
    assert max(at_limit.design.looks) == need and at_limit.power >= 0.8
    with pytest.raises(InputError, match=f"no design with at most {need - 4} seeds"):
        plan_seeds(0.8, block=4, max_seeds_limit=need - 4)


def test_a_power_capped_by_futility_at_every_look_is_named_with_its_fix():
    # a look every 2 seeds with a futility stop at each: at 0.415 SD of d power levels off
    # below 0.8 (tools/INFERENCE_STUDY.md, plan C at policy CV 0.35); looks every 4 reach it
    with pytest.raises(InputError, match="the stop caps its power") as err:
        plan_seeds(0.415, block=2)
    assert "larger block" in err.value.fix
    assert plan_seeds(0.415, block=4).power >= 0.8
    assert plan_seeds(0.415, block=2, futility=None).power >= 0.8
    with pytest.raises(InputError) as err:                 # no cap: the old advice
        plan_seeds(0.05, block=4, max_seeds_limit=40)
    assert "caps" not in str(err.value) and "larger effect" in err.value.fix


def test_hwang_shih_decani_spending_defaults_to_gamma_minus_4():
    from evalkit.stats.group_sequential import spent_alpha

    t = np.array([0.0, 0.25, 0.5, 1.0])
    want = 0.025 * (1 - np.exp(4.0 * t)) / (1 - np.exp(4.0))
    assert np.allclose(spent_alpha(t, 0.025, "hwang-shih-decani"), want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("gamma", [-1000.0, -800.0, -50.0, 50.0, 800.0, 1e300, -1e300])
def test_steep_hwang_shih_decani_spending_neither_overflows_nor_leaves_its_range(gamma):
    # a plan may name any finite gamma: e^{-gamma t} overflowed from gamma -710 on (exit 3)
    from evalkit.stats.group_sequential import spent_alpha

    t = np.linspace(0.0, 1.0, 21)
    got = spent_alpha(t, 0.025, "hwang-shih-decani", gamma)
    assert np.all(np.isfinite(got)) and got[0] == 0.0 and got[-1] == pytest.approx(0.025)
    assert np.all(np.diff(got) >= 0) and np.all(got <= 0.025 * (1 + 1e-12))
    if abs(gamma) <= 50:                      # the closed form in long double
        tl = t.astype(np.longdouble)
        g = np.longdouble(gamma)
        want = 0.025 * (1 - np.exp(-g * tl)) / (1 - np.exp(-g))
        assert np.allclose(got, want.astype(float), rtol=1e-9, atol=1e-300)
    gs = design((5, 10, 15, 20), 0.025, "hwang-shih-decani", gamma)
    fixed, bounds = stats.norm.isf(0.025), np.asarray(gs.z_bounds)
    if gamma < 0:        # (next to) nothing spent before the end: the last look is the fixed test
        assert bounds[-1] == pytest.approx(fixed, abs=1e-3)
        assert np.all(bounds[:-1] > 4) and (gamma > -800 or np.all(np.isinf(bounds[:-1])))
    else:                # everything spent at the first look
        assert bounds[0] == pytest.approx(fixed, abs=1e-3)
        assert np.all(bounds[1:] > 4) and (gamma < 800 or np.all(np.isinf(bounds[1:])))


def test_each_look_records_its_floor_and_whether_it_binds():
    # d with sample variance ~1e-6 at each look; a floor of 1e-4 at the first look binds
    # (t on it is 10x smaller), 1e-8 at the second does not, none at the third
    d = 0.01 + 0.001 * np.random.default_rng(3).standard_normal(12)
    gs = design((4, 8, 12), 0.025)
    plain = decide(d, gs)
    out = decide(d, gs, variance_floor=[1e-4, 1e-8, np.nan])
    first = out.looks[0]
    assert first.floor_binds and first.variance_floor == 1e-4
    assert first.statistic == pytest.approx(d[:4].mean() / math.sqrt(1e-4 / 4))
    assert first.statistic < plain.looks[0].statistic
    assert len(out.looks) == 2 and out.decision == "pass"        # decided at the second
    assert not out.looks[1].floor_binds and out.looks[1].variance_floor == 1e-8
    assert out.looks[1].statistic == plain.looks[1].statistic
    assert all(look.variance_floor is None and not look.floor_binds for look in plain.looks)


@pytest.mark.parametrize("theta", [0.0, 0.4])
def test_the_recursion_keeps_every_path_at_each_look(theta):
    # at the first look the two sides are the normal law's closed forms and sum to 1; at the
    # next, the paths that continued (Z_1 below its boundary) split between the two sides
    from evalkit.stats.group_sequential import _Recursion

    info = np.array([4.0, 8.0])
    rec = _Recursion(info, theta)
    c0 = 1.3
    drift = theta * math.sqrt(info[0])
    assert rec.cross_below(0, c0) == pytest.approx(stats.norm.cdf(c0 - drift), abs=1e-12)
    assert rec.cross_above(0, c0) == pytest.approx(stats.norm.sf(c0 - drift), abs=1e-12)
    rec.advance(0, -math.inf, c0)
    kept = stats.norm.cdf(c0 - drift)
    # the grid (step 0.02, trapezoid weights) integrates to about 1e-5
    assert rec.cross_above(1, 0.7) + rec.cross_below(1, 0.7) == pytest.approx(kept, abs=5e-5)


def test_the_seed_limit_defaults_to_400():
    with pytest.raises(InputError, match="no design with at most 400 seeds"):
        plan_seeds(0.05, block=4)
