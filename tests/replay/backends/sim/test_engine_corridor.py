"""The sim backend's corridor in seconds: min/max gap between merge starts, and K in F_K."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evalkit.replay.backends import sim
from evalkit.policies import get_policy
from evalkit.replay.spec import ReplaySpec
from evalkit.replay.traces import Lengths, generate, lognormal
from evalkit.runlog import metrics
from evalkit.stats import sample_schedules

H_MIN, H_MAX, STEP, D, HORIZON = 40, 120, 0.5, 8.0, 300.0
MIN_GAP, MAX_GAP = 45.0, 75.0          # min gap > h_min * step + D = 28 s


def _trace(seed=3):
    return generate("square_wave", seed=seed, period_s=120.0, burst_s=40.0, quiet_rate=3.5,
                    busy_rate=18.0, duration_s=HORIZON,
                    lengths=Lengths(lognormal(512, 0.8, 16, 4096), lognormal(160, 0.7, 1, 1024)))


def _spec(**kw):
    base = dict(run_id="r", seed=1, regime="t", horizon_s=HORIZON, merge_duration_s=D,
                inner_step_s=STEP, h_min=H_MIN, h_max=H_MAX, min_gap_s=MIN_GAP,
                max_gap_s=MAX_GAP)
    base.update(kw)
    return ReplaySpec(**base)


def _span(out, spec):
    req = out.requests
    return metrics.observed_span(req["arrival_s"].to_numpy(), req["end_s"].to_numpy(),
                                 spec.horizon_s, spec.merge_duration_s)


def _k_observed(out, spec):
    m = out.merges
    return metrics.windows_observed(m["start_s"].to_numpy(), m["end_s"].to_numpy(),
                                    _span(out, spec))


@pytest.fixture(scope="module")
def trace():
    return _trace()


@pytest.fixture(scope="module")
def oracle_intervals(trace):
    base = sim.replay(_spec(), trace, get_policy("no_sync")).requests
    return pd.DataFrame({"arrival_s": base["arrival_s"], "end_s": base["end_s"]})


ONLINE = [("fixed_h", {"H": H_MIN}), ("fixed_h", {"H": 10_000}), ("pressure_gate", {}),
          ("pressure_gate", {"theta": 1.0}), ("random_deferral", {"p": 0.5}), ("wa", {}),
          ("calibrated_online", {}), ("ewma", {})]


def _check_corridor(out, spec, label):
    m = out.merges
    starts = m["start_s"].to_numpy()
    gaps = np.diff(starts)
    assert np.all(gaps >= MIN_GAP - 1e-9), (label, gaps.min())
    assert np.all(gaps <= MAX_GAP + 1e-9), (label, gaps.max())
    assert np.all(starts + D <= spec.horizon_s + 1e-9), label
    # F_K with its edges, as the audit checks it: first start within the corridor after
    # training start, no room left for a forced merge at the end
    from evalkit.runlog.design import corridor_violations

    assert corridor_violations(starts, m["end_s"].to_numpy(), (0.0, spec.horizon_s), D,
                               MIN_GAP, MAX_GAP, train_start=0.0, tol=1e-9) == [], label
    # the policy is never asked inside the seconds corridor
    dec = out.decisions
    asked = dec[dec["action"].isin(["merge", "defer"])]["t_s"].to_numpy()
    prev = np.searchsorted(starts, asked, side="left") - 1
    has_prev = prev >= 0
    assert np.all(asked[has_prev] - starts[prev[has_prev]] >= MIN_GAP - 1e-9), label


@pytest.mark.parametrize("name,params", ONLINE)
def test_online_policies_respect_min_and_max_gap_and_k_is_feasible(trace, name, params):
    spec = _spec()
    out = sim.replay(spec, trace, get_policy(name, **params))
    label = f"{name}{params}"
    _check_corridor(out, spec, label)
    assert len(out.merges) >= 2, label
    # the step corridor still holds: no merge before h_min steps since the last one ended
    merged = out.decisions[out.decisions["action"] == "merge"]
    assert (merged["step"] >= H_MIN).all(), label
    # K fits F_K: the matched-random sampler accepts it over the run's span ...
    span = _span(out, spec)
    k = _k_observed(out, spec)
    draws = sample_schedules(k, (span.start_s, spec.horizon_s), D, MIN_GAP, MAX_GAP, 4,
                             np.random.default_rng(0))
    assert draws.shape == (4, k)
    # ... and a matched-random replay with that K places exactly K merges in the corridor
    spec_mr = _spec(reference_k=k, role="matched_random")
    mr = sim.replay(spec_mr, trace, get_policy("matched_random"))
    assert len(mr.merges) == k
    _check_corridor(mr, spec_mr, "matched_random")


def test_calibrated_offline_and_no_sync_respect_the_corridor(trace, oracle_intervals):
    spec = _spec(future_requests=oracle_intervals)
    ref = sim.replay(_spec(), trace, get_policy("wa"))
    k = _k_observed(ref, spec)
    out = sim.replay(spec, trace, get_policy("calibrated_offline", k=k))
    assert len(out.merges) == k
    _check_corridor(out, spec, "calibrated_offline")
    assert sim.replay(spec, trace, get_policy("no_sync")).merges.empty


def test_without_the_seconds_corridor_eager_policies_would_be_infeasible(trace):
    # the step corridor alone lets fixed_h merge every h_min*step + D = 28 s < MIN_GAP:
    # more merges than F_K can hold for this span (this is what the seconds corridor prevents)
    loose = _spec(min_gap_s=None, max_gap_s=None)
    out = sim.replay(loose, trace, get_policy("fixed_h", H=H_MIN))
    k = _k_observed(out, loose)
    span = _span(out, loose)
    assert np.diff(out.merges["start_s"]).min() < MIN_GAP
    with pytest.raises(Exception, match="infeasible"):
        sample_schedules(k, (span.start_s, HORIZON), D, MIN_GAP, MAX_GAP, 1)
    tight = sim.replay(_spec(), trace, get_policy("fixed_h", H=H_MIN))
    assert len(tight.merges) < len(out.merges)


def test_forced_merge_by_max_gap_mid_step(trace):
    spec = _spec(min_gap_s=30.0, max_gap_s=50.0)        # 50 s < D + h_max*step = 68 s
    out = sim.replay(spec, trace, get_policy("pressure_gate", theta=0.0))
    m = out.merges
    starts = m["start_s"].to_numpy()
    assert len(m) >= 4
    # before the first merge the seconds corridor counts from training start (F_K's edges):
    # the first start lies in [min_gap, max_gap], forced at max_gap (mid-step) if need be
    first = out.steps[out.steps["end_s"] <= starts[0] + 1e-9]
    assert 30.0 - 1e-9 <= starts[0] <= 50.0 + 1e-9
    if not m["forced"].iloc[0]:
        assert len(first) >= H_MIN
    else:
        assert starts[0] == 50.0 or len(first) == H_MAX
    # gaps never exceed max_gap; those that were forced hit it exactly (mid-step)
    gaps = np.diff(starts)
    assert np.all(gaps <= 50.0 + 1e-9) and np.all(gaps >= 30.0 - 1e-9)
    forced_later = m["forced"].to_numpy()[1:]
    assert forced_later.any()
    np.testing.assert_allclose(gaps[forced_later], 50.0, atol=1e-9)
    dec = out.decisions
    assert (dec["action"] == "forced").sum() == int(m["forced"].sum())
    # a forced start at the deadline is not an inner-step end (the partial step is dropped)
    step_ends = out.steps["end_s"].to_numpy()
    deadline_starts = starts[1:][forced_later]
    assert np.min(np.abs(step_ends[:, None] - deadline_starts[None, :]), axis=0).min() > 1e-9


def test_h_max_still_forces_when_max_gap_is_loose(trace):
    spec = _spec(min_gap_s=20.0, max_gap_s=1000.0)
    out = sim.replay(spec, trace, get_policy("fixed_h", H=10_000))
    m, steps = out.merges, out.steps
    assert len(m) >= 2 and m["forced"].all()
    prev_end = np.r_[0.0, m["end_s"].to_numpy()[:-1]]
    for s0, start in zip(prev_end, m["start_s"]):
        n = int(((steps["start_s"] >= s0 - 1e-9) & (steps["end_s"] <= start + 1e-9)).sum())
        assert n == H_MAX
    np.testing.assert_allclose(np.diff(m["start_s"]), D + H_MAX * STEP, rtol=0.02)


def test_no_merge_starts_after_horizon_minus_d(trace):
    spec = _spec(min_gap_s=30.0, max_gap_s=31.0)
    out = sim.replay(spec, trace, get_policy("fixed_h", H=10_000))
    starts = out.merges["start_s"].to_numpy()
    assert starts.max() + D <= HORIZON + 1e-9
    # the next deadline would have fallen after horizon - D: no merge there
    assert starts.max() + 31.0 + D > HORIZON
