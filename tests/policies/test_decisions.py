"""Decision logic of each policy on hand-made states."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from evalkit.errors import InputError
from evalkit.policies import Corridor, DecisionState, RunContext, get_policy
from evalkit.policies.forecast import ArrivalRateEWMA, sorted_quantile
from evalkit.policies.planned import min_phi_schedule, window_costs


def _state(**kw):
    base = dict(t_s=100.0, steps_since_merge=200, total_steps=200, merges_done=0,
                last_merge_end_s=None, inner_step_s=0.5)
    base.update(kw)
    return DecisionState(**base)


def _ctx(**kw):
    base = dict(seed=0, rng=np.random.default_rng(0), merge_duration_s=8.0,
                corridor=Corridor(128, 512, 64.0, 256.0), span=(0.0, 592.0), horizon_s=600.0,
                inner_step_s=0.5)
    base.update(kw)
    return RunContext(**base)


def test_wa_score_matches_hand_calculation():
    st = _state(loss_drop=0.02, tokens_since_sync=400_000, net=0.2, pressure=0.5, ckpt=0.4,
                staleness_s=900.0)
    pol = get_policy("wa")
    pol.reset(_ctx())
    d = pol.decide(st)
    progress = 0.5 * (0.02 / 0.05) + 0.5 * 0.4
    pressure = 0.5 * 0.2 + 0.75 * 0.5 + 0.25 * 0.4 + 0.0 + 0.25 * 0.5
    assert d.score == pytest.approx(progress - pressure)
    assert d.merge is (progress - pressure > 0)
    # caps at 1, configurable weights and tau
    st2 = _state(loss_drop=1.0, tokens_since_sync=5e6, pressure=0.1)
    pol2 = get_policy("wa", w_serving=2.0, tau=0.7)
    pol2.reset(_ctx())
    d2 = pol2.decide(st2)
    assert d2.score == pytest.approx(1.0 - 0.2)
    assert d2.merge
    pol3 = get_policy("wa", tau=0.95)
    pol3.reset(_ctx())
    assert not pol3.decide(st2).merge


def test_fixed_gate_and_random_deferral():
    fh = get_policy("fixed_h", H=200)
    assert fh.decide(_state(steps_since_merge=200)).merge
    assert not fh.decide(_state(steps_since_merge=199)).merge
    gate = get_policy("pressure_gate")
    assert gate.params["theta"] == 0.6
    assert not gate.decide(_state(pressure=0.61)).merge
    assert gate.decide(_state(pressure=0.6)).merge
    rd = get_policy("random_deferral", p=0.75)
    rd.reset(_ctx(rng=np.random.default_rng(5)))
    got = [rd.decide(_state()).merge for _ in range(2000)]
    u = np.random.default_rng(5).random(2000)
    assert got == list(u >= 0.75)


def test_ewma_rate_forecast_and_rule():
    ew = ArrivalRateEWMA(alpha=0.5, bin_s=1.0)
    arrivals = np.array([0.1, 0.2, 1.5, 2.2, 2.4, 2.6, 2.8])
    # bins [0,1): 2/s, [1,2): 1/s, [2,3): 4/s -> 2, 1.5, 2.75
    assert ew.update(arrivals, 3.0) == pytest.approx(2.75)
    pol = get_policy("ewma", alpha=0.5, quantile=0.5, warmup=2, bin_s=1.0)
    pol.reset(_ctx())
    # forecast = in flight + lambda * D
    d1 = pol.decide(_state(t_s=3.0, queue_running=3, queue_waiting=1, recent_arrivals=arrivals))
    assert d1.score == pytest.approx(4 + 2.75 * 8.0)
    assert not d1.merge                       # warm-up
    pol.decide(_state(t_s=3.0, queue_running=30, recent_arrivals=arrivals))
    low = pol.decide(_state(t_s=3.0, queue_running=0, recent_arrivals=arrivals))
    assert low.merge and low.info["threshold"] == pytest.approx(np.median([26.0, 52.0]))
    high = pol.decide(_state(t_s=3.0, queue_running=40, recent_arrivals=arrivals))
    assert not high.merge
    assert sorted_quantile([1.0, 2.0, 4.0, 10.0], 0.3) == pytest.approx(
        np.quantile([1.0, 2.0, 4.0, 10.0], 0.3))


def test_calibrated_online_is_wa_with_cost():
    pol = get_policy("calibrated_online", cost_scale=50.0, alpha=1.0, bin_s=1.0)
    pol.reset(_ctx())
    arrivals = np.array([0.5, 1.5, 1.6])
    st = _state(t_s=2.0, queue_running=10, recent_arrivals=arrivals, loss_drop=0.05,
                tokens_since_sync=1e6)
    d = pol.decide(st)
    c_hat = 10 + 2.0 * 8.0
    assert d.info["c_hat"] == pytest.approx(c_hat)
    assert d.score == pytest.approx(1.0 - 1.0 * (c_hat / 50.0))


def test_registry_errors_list_valid_choices():
    with pytest.raises(InputError, match="fixed_h"):
        get_policy("nope")
    with pytest.raises(InputError, match="valid parameters: H"):
        get_policy("fixed_h", h=3)
    with pytest.raises(InputError, match="theta"):
        get_policy("pressure_gate", theta=1.5)


def test_window_costs_brute_force():
    rng = np.random.default_rng(1)
    a = np.sort(rng.uniform(0, 100, 200))
    e = a + rng.exponential(5, 200)
    e[::17] = np.inf                      # still in flight when the run ended
    u = np.linspace(0, 95, 50)
    brute = [(np.sum((a < x + 8) & (e > x))) for x in u]
    assert window_costs(u, 8.0, a, e, horizon_s=103.0).tolist() == brute


def test_dp_equals_brute_force():
    rng = np.random.default_rng(3)
    for trial in range(20):
        m, k = 14, int(rng.integers(1, 4))
        cost = rng.integers(0, 20, m).astype(float)
        lo, hi = 2, int(rng.integers(2, 6))
        best = np.inf
        for combo in itertools.combinations(range(m), k):
            gaps = np.diff(combo)
            if np.all((gaps >= lo) & (gaps <= hi)):
                best = min(best, cost[list(combo)].sum())
        idx, total = min_phi_schedule(cost, k, lo, hi)
        assert total == best
        assert cost[idx].sum() == best
        assert np.all(np.diff(idx) >= lo) and np.all(np.diff(idx) <= hi)
    with pytest.raises(InputError):
        min_phi_schedule(np.zeros(5), 4, 3, 4)


def test_calibrated_offline_plans_low_overlap_windows():
    # a burst of long requests in [100, 200]: the optimal windows avoid it
    a = np.concatenate([np.arange(0, 600, 5.0), np.arange(100, 200, 0.5)])
    e = np.concatenate([np.arange(0, 600, 5.0) + 1.0, np.arange(100, 200, 0.5) + 30])
    fr = pd.DataFrame({"arrival_s": np.sort(a), "end_s": e[np.argsort(a)]})
    pol = get_policy("calibrated_offline", k=2)
    pol.reset(_ctx(future_requests=fr))
    s = pol.planned_starts
    assert len(s) == 2 and pol.oracle
    assert 64 <= s[1] - s[0] <= 256
    assert not np.any((s + 8 > 100) & (s < 230))


def test_matched_random_draws_lie_in_fk():
    pol = get_policy("matched_random")
    for seed in range(30):
        pol.reset(_ctx(rng=np.random.default_rng(seed), reference_k=4, span=(12.0, 592.0)))
        s = pol.planned_starts
        assert len(s) == 4
        assert s[0] >= 12.0 and s[-1] <= 592.0 + 1e-9
        gaps = np.diff(s)
        assert np.all(gaps >= 64.0 - 1e-9) and np.all(gaps <= 256.0 + 1e-9)
    with pytest.raises(InputError, match="needs K"):
        pol.reset(_ctx())
