"""The forecaster against a closed form, and the policy's rule against a brute-force replay."""

import statistics

import numpy as np
import pytest

pytest.importorskip("evalkit_forecast_policy",
                    reason="the example plugin is not installed: pip install -e "
                           "examples/plugin_policy")

from evalkit.policies import Corridor, DecisionState, RunContext, get_policy  # noqa: E402
from evalkit_forecast_policy import HoltDeferral, HoltForecaster  # noqa: E402


def _ctx(D=8.0):
    return RunContext(seed=0, rng=np.random.default_rng(0), merge_duration_s=D,
                      corridor=Corridor(1, 100, 1.0, 100.0), span=(0.0, 100.0),
                      horizon_s=100.0, inner_step_s=1.0)


def _state(t, q):
    return DecisionState(t_s=t, steps_since_merge=10, total_steps=10, merges_done=0,
                         last_merge_end_s=None, inner_step_s=1.0, queue_running=q)


def test_a_linear_ramp_is_forecast_exactly_once_the_trend_is_learnt():
    h = HoltForecaster(alpha=1.0, beta=1.0)        # no smoothing: level = q, trend = slope
    for t in range(5):
        h.update(float(t), 3.0 + 2.0 * t)
    assert h.forecast(4.0) == pytest.approx(3.0 + 2.0 * 4 + 2.0 * 4.0)


def test_a_constant_series_forecasts_itself():
    h = HoltForecaster(alpha=0.3, beta=0.2)
    for t in range(50):
        h.update(0.5 * t, 7.0)
    assert h.forecast(8.0) == pytest.approx(7.0)


def test_rule_matches_a_brute_force_replay_of_the_median():
    pol = HoltDeferral(alpha=1.0, beta=0.0, warmup=3, ahead_s=0.0)   # forecast = q
    pol.reset(_ctx())
    qs = [5, 1, 9, 4, 2, 8, 3, 3, 10, 0]
    got = [pol.decide(_state(float(i), q)).merge for i, q in enumerate(qs)]
    want = [i >= 3 and q <= statistics.median(qs[:i]) for i, q in enumerate(qs)]
    assert got == want and any(want) and not all(want)


def test_found_through_evalkit_by_entry_point_and_module_class():
    from evalkit.policies import resolve_policy
    assert resolve_policy("holt_defer") is HoltDeferral
    assert resolve_policy("evalkit_forecast_policy.holt:HoltDeferral") is HoltDeferral
    assert get_policy("holt_defer", alpha=0.2).params["alpha"] == 0.2


@pytest.mark.parametrize("bad", [{"alpha": 0.0}, {"beta": 1.5}, {"warmup": -1}])
def test_bad_parameters_are_refused(bad):
    with pytest.raises(ValueError):
        HoltDeferral(**bad)
