"""Anytime-valid sequential betting test: level under continuous looks, agreement with an
independent implementation, the shift confidence sequence, inputs."""

import math

import numpy as np
import pytest

from evalkit.errors import InputError
from evalkit.stats.randomisation import within_seed_permutation_test
from evalkit.stats.sequential import BET_CAP, anytime_e_process, anytime_test

ALPHA = 0.05


def _skewed(rng, shape, mean=0.06, cv=0.8):
    s2 = math.log(1 + cv ** 2)
    return rng.lognormal(math.log(mean) - s2 / 2, math.sqrt(s2), shape)


# ----------------------------------------------------------------------------- reference

def _reference_e_process(policy, draws, alternative):
    """The same bet written out seed by seed in plain Python (no shared code)."""
    wealth = {"greater": 1.0, "less": 1.0}
    sums = {"greater": [0.0, 0.0], "less": [0.0, 0.0]}
    out = []
    for p, ds in zip(policy, draws):
        runs = [float(p)] + [float(v) for v in ds]
        m = len(ds)
        labelled = []
        for j in range(m + 1):
            others = [runs[i] for i in range(m + 1) if i != j]
            labelled.append(sum(others) / m - runs[j])
        d, lo, hi = labelled[0], min(labelled), max(labelled)
        tied = hi - lo <= 1e-12 * (1 + max(abs(v) for v in labelled))
        outcome = {"greater": 0.0 if tied else d / -lo, "less": 0.0 if tied else -d / hi}
        for side in ("greater", "less"):
            s1, s2 = sums[side]
            stake = min(BET_CAP, max(0.0, s1 / (1.0 + s2)))
            wealth[side] *= 1.0 + stake * outcome[side]
            sums[side] = [s1 + outcome[side], s2 + outcome[side] ** 2]
        out.append(wealth["greater"] if alternative == "greater" else
                   wealth["less"] if alternative == "less" else
                   0.5 * (wealth["greater"] + wealth["less"]))
    return out


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_agrees_with_an_independent_implementation(alternative):
    rng = np.random.default_rng(7)
    m = rng.integers(1, 6, size=25)
    policy = _skewed(rng, 25) * 0.8
    draws = [_skewed(rng, int(k)) for k in m]
    draws[3] = np.full(int(m[3]), policy[3])            # a seed whose runs all tie
    res = anytime_test(policy, draws, alternative, confidence_sequence=False)
    ref = _reference_e_process(policy, draws, alternative)
    np.testing.assert_allclose(res.e_process, ref, rtol=1e-12)
    assert res.e_process[3] == pytest.approx(res.e_process[2], rel=1e-15)   # tie: no bet
    assert res.p_value == pytest.approx(min(1.0, 1.0 / max(1.0, max(ref))))


def test_closed_form_when_the_policy_wins_every_seed():
    # m = 1: x = +1 every seed; stakes 0, 1/2, 2/3, 3/4, 3/4 (cap) ...
    policy = np.full(8, 0.04)
    draws = [[0.06]] * 8
    res = anytime_test(policy, draws, "greater", confidence_sequence=False)
    stakes = [min(BET_CAP, t / (1 + t)) for t in range(8)]
    np.testing.assert_allclose(res.stakes_greater, stakes)
    np.testing.assert_allclose(res.e_process, np.cumprod([1 + s for s in stakes]))
    # 1 * 1.5 * 1.667 * 1.75^5 = 41.0 >= 20 after 8 seeds; 23.4 after 7
    assert res.crossed_at == 7 and res.decision == "reject"
    assert res.p_value == pytest.approx(1 / res.e_process[-1])


@pytest.mark.parametrize("m", [1, 3, 5])
def test_level_holds_with_a_look_after_every_seed(m):
    """Null: the policy run is one more draw (skewed V).  Stopping at the first seed where
    the e-process reaches 1/alpha, up to 60 seeds: false-pass <= alpha within MC error."""
    rng = np.random.default_rng(100 + m)
    reps, n = 2000, 60
    v = _skewed(rng, (reps, n, m + 1))
    for alternative in ("two-sided", "greater"):
        e = anytime_e_process(v[..., 0], v[..., 1:], alternative)
        rate = float(np.mean(e.max(axis=1) >= 1 / ALPHA))
        se = math.sqrt(ALPHA * (1 - ALPHA) / reps)
        assert rate <= ALPHA + 3 * se, (m, alternative, rate)


def _peeking_false_pass(reps, max_seeds, m, seed):
    """Share of null campaigns the fixed-n permutation p passes when looked at every seed."""
    rng = np.random.default_rng(seed)
    passed = 0
    for r in range(reps):
        v = _skewed(rng, (max_seeds, m + 1))
        for k in range(2, max_seeds + 1):
            p = within_seed_permutation_test(v[:k, 0], list(v[:k, 1:]), "two-sided",
                                             n_resamples=199, rng=r,
                                             confidence_level=None).p_value
            if p <= ALPHA:
                passed += 1
                break
    return passed / reps


def test_fixed_n_p_value_with_the_same_looks_inflates():
    rng = np.random.default_rng(5)
    reps, n, m = 60, 30, 3
    seq = _skewed(rng, (2000, n, m + 1))
    e = anytime_e_process(seq[..., 0], seq[..., 1:], "two-sided")
    seq_rate = float(np.mean(e.max(axis=1) >= 1 / ALPHA))
    fixed_rate = _peeking_false_pass(reps, n, m, seed=6)
    # a fixed-n p looked at after every seed passes far more than alpha of null campaigns
    assert fixed_rate >= 2.5 * ALPHA, fixed_rate
    assert seq_rate <= ALPHA


@pytest.mark.slow
def test_fixed_n_p_value_inflates_with_60_looks():
    rate = _peeking_false_pass(300, 60, 3, seed=8)
    assert rate >= 4 * ALPHA, rate


# ----------------------------------------------------------------------------- CS

def test_confidence_sequence_is_the_inversion_of_the_test():
    rng = np.random.default_rng(11)
    n, m = 20, 3
    policy = _skewed(rng, n, cv=0.3) - 0.015
    draws = [_skewed(rng, m, cv=0.3) for _ in range(n)]
    res = anytime_test(policy, draws, "two-sided")
    lo, hi = res.ci_low, res.ci_high
    assert math.isfinite(lo) and math.isfinite(hi) and lo < res.statistic < hi
    eps = 1e-6
    for delta, crosses in ((lo + eps, False), (hi - eps, False), (lo - 1e-3, True),
                           (hi + 1e-3, True)):
        shifted = anytime_test(policy + delta, draws, "two-sided", confidence_sequence=False)
        assert (shifted.e_max >= 1 / ALPHA) is crosses, delta
    # running intersection: the sequence only shrinks
    finite = [(a, b) for a, b in zip(res.cs_low, res.cs_high) if math.isfinite(a)]
    assert all(a2 >= a1 - 1e-9 and b2 <= b1 + 1e-9
               for (a1, b1), (a2, b2) in zip(finite, finite[1:]))
    # 0 outside the sequence exactly when the two-sided test has rejected
    assert (lo > 0 or hi < 0) == res.rejected


def test_futility_compares_the_upper_bound_with_the_smallest_effect():
    rng = np.random.default_rng(12)
    n, m = 40, 3
    policy = _skewed(rng, n, cv=0.2)
    draws = [_skewed(rng, m, cv=0.2) for _ in range(n)]
    res = anytime_test(policy, draws, "two-sided")
    assert res.futile(res.ci_high + 1e-9) and not res.futile(res.ci_high)
    assert not res.futile(res.ci_high - 1e-9)


@pytest.mark.slow
def test_confidence_sequence_covers_the_true_shift_at_all_times():
    rng = np.random.default_rng(13)
    reps, n, m, delta = 200, 15, 3, 0.01
    miss = 0
    for _ in range(reps):
        v = _skewed(rng, (n, m + 1), cv=0.5)
        res = anytime_test(v[:, 0] - delta, list(v[:, 1:]), "two-sided")
        miss += any(not (a <= delta <= b) for a, b in zip(res.cs_low, res.cs_high))
    assert miss / reps <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / reps)


# ----------------------------------------------------------------------------- inputs

def test_result_fields_and_dict():
    res = anytime_test([0.05, 0.04, 0.05], [[0.06, 0.07], [0.05], [0.06, 0.06, 0.05]],
                       "greater")
    d = res.to_dict()
    assert d["m"] == [2, 1, 3] and len(d["e_process"]) == 3 and d["decision"] == "continue"
    assert d["crossed_at"] is None and d["threshold"] == pytest.approx(20.0)
    assert d["ci_high"] is None or isinstance(d["ci_high"], float)


@pytest.mark.parametrize("alpha", [0, 1, -0.1, 1.5, "0.05", True])
def test_bad_alpha_is_an_input_error(alpha):
    with pytest.raises(InputError, match="alpha"):
        anytime_test([0.05, 0.04], [[0.06], [0.05]], alpha=alpha)


def test_bad_design_is_an_input_error():
    with pytest.raises(InputError, match="draws"):
        anytime_test([0.05, 0.04], [[0.06]])
    with pytest.raises(InputError, match="alternative"):
        anytime_test([0.05], [[0.06]], alternative="bigger")
    with pytest.raises(InputError, match="draws"):
        anytime_e_process(np.zeros((2, 3)), np.zeros((2, 4, 1)))


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_the_simulation_e_process_is_the_tests_e_process_campaign_by_campaign(alternative):
    rng = np.random.default_rng(11)
    pol = rng.normal(0.0, 1.0, (3, 9))
    dr = rng.normal(0.3, 1.0, (3, 9, 2))
    many = anytime_e_process(pol, dr, alternative)
    for r in range(3):
        one = anytime_test(pol[r], list(dr[r]), alternative, 0.05, confidence_sequence=False)
        assert np.allclose(many[r], one.e_process, rtol=1e-12, atol=0.0)
