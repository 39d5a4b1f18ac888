"""The execution-drift check: the historical artifact (every seed's policy runs executed
before its draws, the draws on a busier host) is blocked; a blocked, interleaved campaign
passes; thresholds at, just below and just above their values; runs without records."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from tests.support import campaign_model as cm
from evalkit.audit import audit_campaign
from evalkit.audit.runset import SeedPair
from evalkit.audit.checks.drift import drift_adjusted_gain, execution_drift
from evalkit.audit.protocol import load_protocol
from evalkit.runlog.io import write_run

SLO_S = 1.6                 # base latency ~1.2 s: ~20% of requests violate on an idle host
T0 = dt.datetime(2026, 12, 1, 4, 45, tzinfo=dt.timezone.utc)


def _steps(load: float) -> pd.DataFrame:
    step = cm.STEP_S * load                   # a busier host: slower inner steps
    start = np.arange(0.0, cm.HORIZON - step, step)
    return pd.DataFrame({"step": np.arange(start.size, dtype=np.int64), "start_s": start,
                         "end_s": start + step, "loss": 3.0 - start / 1000,
                         "tokens": np.full(start.size, 4096, dtype=np.int64)})


def _write(out: Path, run_id, role, seed, starts, load, minute, position, *, draw=None,
           record_order=True, n_runs=20):
    tr = cm.trace(seed)
    rng = np.random.default_rng([seed, sum(map(ord, run_id))])
    req = cm.requests_for(tr, starts, rng, penalty=4.0)
    served = (req.end_s - req.arrival_s) * load       # every request slowed by the host
    req["end_s"] = req.arrival_s + served
    req["first_token_s"] = req.arrival_s + np.minimum(0.3, served / 2)
    starts = np.sort(np.asarray(starts, float))
    merges = pd.DataFrame({"merge_idx": np.arange(starts.size, dtype=np.int64),
                           "start_s": starts, "end_s": starts + cm.D,
                           "inner_step": (starts / cm.STEP_S).astype(np.int64),
                           "bytes": np.full(starts.size, 1_000_000, dtype=np.int64)})
    when = T0 + dt.timedelta(minutes=float(minute))
    meta = {"run_id": run_id, "policy": "fixed_h" if role == "policy" else "matched_random",
            "role": role, "seed": seed, "draw": draw,
            "matched_to": "fixed_h" if role == "matched_random" else None, "regime": "cpu",
            "trace": {"name": "model", "sha256": f"normal-{seed}"}, "backend": "torch",
            "slo": {"e2e_s": SLO_S, "ttft_s": None, "tpot_s": None},
            "merge_duration_s": cm.D, "horizon_s": cm.HORIZON,
            "corridor": {"min_gap_s": cm.MIN_GAP, "max_gap_s": cm.MAX_GAP}, "oracle": False,
            "settings": {"requested": {}, "effective": {}}, "rng_seeds": {"trace": seed},
            "inner_step_s": cm.STEP_S, "evalkit_version": "test",
            "host": {"hostname": "test", "platform": "test", "python": "3.11"},
            "created_at": (when + dt.timedelta(minutes=1)).isoformat(timespec="seconds")}
    if record_order:
        meta["run_order"] = {"order_seed": 1, "position": position, "runs": n_runs,
                             "block": seed, "blocks": n_runs // 2, "position_in_block": 0,
                             "window": 2, "started_at": when.isoformat(),
                             "host_load": {"load_1m": 4.0 * load, "probe_s": 0.010 * load}}
    write_run(out, meta, req, merges, steps=_steps(load))


def artifact(out: Path, *, seeds=10, busy=1.28, policy_first=True, record_order=True):
    """fixed_h and its one matched-random draw per seed, both placing K = 4 random windows
    in the corridor.  policy_first: every policy run first (a minute apart), then every draw,
    10-20 minutes later on a host ``busy`` times slower; else each seed's two runs back to
    back on the same host."""
    for s in range(seeds):
        pol = cm.schedule("random", np.random.default_rng([s, 1]))
        drw = cm.schedule("random", np.random.default_rng([s, 2]))
        if policy_first:
            times, loads, pos = (s, 10 + s), (1.0, busy), (s, seeds + s)
        else:
            times, loads, pos = (2 * s, 2 * s + 1), (1.0, 1.0), (2 * s, 2 * s + 1)
        _write(out, f"fixed_h-s{s}", "policy", s, pol, loads[0], times[0], pos[0],
               record_order=record_order, n_runs=2 * seeds)
        _write(out, f"mr-fixed_h-s{s}-d0", "matched_random", s, drw, loads[1], times[1],
               pos[1], draw=0, record_order=record_order, n_runs=2 * seeds)


def _protocol_without_drift(tmp_path):
    text = (Path(__file__).resolve().parents[3] / "protocols" / "diloco-slo.toml").read_text()
    text = text.replace(', "execution_drift"]', "]")
    head, _, rest = text.partition("[checks.execution_drift]")
    rest = rest[rest.index("[checks.no_sync_present]"):]
    p = tmp_path / "no-drift.toml"
    p.write_text(head + rest)
    return load_protocol(str(p))


def claim_timing_of(runs: Path) -> float:
    """Median over seeds of |relative step-rate difference| draw vs policy, from summarize."""
    from evalkit.runlog.summary import summarize_runs

    table = summarize_runs(runs).set_index("run_id").step_rate
    return float(np.median([abs(table[f"mr-fixed_h-s{s}-d0"] / table[f"fixed_h-s{s}"] - 1)
                            for s in range(10)]))


def _drift_check(claim):
    return next(c for c in claim.checks if c.name == "execution_drift")


def test_historical_artifact_is_blocked_and_passes_without_the_check(tmp_path):
    artifact(tmp_path / "runs")
    # red team: without the drift check the artifact reaches matched_budget (10/10 seeds)
    without = audit_campaign(tmp_path / "runs", protocol=_protocol_without_drift(tmp_path),
                             max_tier="matched_budget").claim("fixed_h", "cpu")
    # (its synthetic runs, labelled torch without a sidecar's scrapes, fail sidecar_transfer:
    # the matched_budget rung is what the drift check guards)
    assert without.to_dict()["tier_status"]["matched_budget"] == "passed", without.stop_reason
    assert without.sign_flip.statistic > 0 and without.sign_flip.wins == 10
    claim = audit_campaign(tmp_path / "runs", max_tier="matched_budget").claim("fixed_h", "cpu")
    chk = _drift_check(claim)
    assert claim.tier is None and chk.passed is False and chk.blocking
    assert "trainer step rate differs" in chk.found
    assert "host probe latency: draws higher than the policy run by a median 28.0%" in chk.found
    rates = claim_timing_of(tmp_path / "runs")
    assert f"median {rates:.1%} > 5%" in chk.found     # the draws' slower steps, as measured
    assert "policy first in 10/10 seeds" in chk.found and "evalkit sweep" in chk.recommendation


def test_historical_artifact_without_run_order_records_is_still_caught(tmp_path):
    artifact(tmp_path / "runs", record_order=False)
    claim = audit_campaign(tmp_path / "runs", max_tier="matched_budget").claim("fixed_h", "cpu")
    chk = _drift_check(claim)
    assert chk.passed is False and "trainer step rate differs" in chk.found
    assert "no run-order records: write times" in chk.found


def test_interleaved_campaign_on_a_steady_host_passes(tmp_path):
    artifact(tmp_path / "runs", policy_first=False)
    claim = audit_campaign(tmp_path / "runs", max_tier="matched_budget").claim("fixed_h", "cpu")
    chk = _drift_check(claim)
    assert chk.passed is True, chk.found
    assert "no run-order records" not in chk.found


def test_require_run_order_fails_closed_without_records(tmp_path):
    artifact(tmp_path / "runs", policy_first=False, record_order=False)
    text = (Path(__file__).resolve().parents[3] / "protocols" / "diloco-slo.toml").read_text()
    p = tmp_path / "strict.toml"
    p.write_text(text.replace("require_run_order = false", "require_run_order = true"))
    claim = audit_campaign(tmp_path / "runs", protocol=load_protocol(str(p)),
                           max_tier="matched_budget").claim("fixed_h", "cpu")
    chk = _drift_check(claim)
    assert chk.passed is False and "without run-order records" in chk.found
    loose = audit_campaign(tmp_path / "runs", max_tier="matched_budget").claim("fixed_h", "cpu")
    assert _drift_check(loose).passed is True
    assert "no run-order records" in _drift_check(loose).found


# ----------------------------------------------------------------------------- thresholds

SPEC = {"max_explained_share": 0.5, "load_rel_tol": 0.05, "probe_rel_tol": 0.25,
        "require_run_order": False}


def _ctx(v_pol, v_draw, rate_pol, rate_draw, minutes_pol=None, minutes_draw=None):
    """A claim context of one policy run and one draw per seed, from arrays."""
    n = len(v_pol)
    units, rows, metas = [], [], {}
    for s in range(n):
        pid, did = f"p{s}", f"d{s}"
        draws = pd.DataFrame({"run_id": [did], "violation_rate": [v_draw[s]]})
        units.append(SeedPair(s, pid, v_pol[s], 4, None, draws, None))
        rows += [{"run_id": pid, "step_rate": rate_pol[s]},
                 {"run_id": did, "step_rate": rate_draw[s]}]
        for rid, minute in ((pid, None if minutes_pol is None else minutes_pol[s]),
                            (did, None if minutes_draw is None else minutes_draw[s])):
            metas[rid] = ({} if minute is None else
                          {"run_order": {"position": 0, "started_at": (
                              T0 + dt.timedelta(minutes=float(minute))).isoformat()}})
    runset = SimpleNamespace(runs=pd.DataFrame(rows), has_logs=True)
    return SimpleNamespace(units=units, runset=runset, alpha=0.05,
                           _meta=lambda rid: metas[rid])


@pytest.mark.parametrize("rel, blocked", [(0.05, False), (0.0499, False), (0.0501, True)])
def test_step_rate_tolerance_at_below_and_above(rel, blocked):
    rng = np.random.default_rng(1)
    v = rng.uniform(0.2, 0.3, 10)
    rate = np.full(10, 10.0)
    out = execution_drift(_ctx(v, v + 0.01, rate, rate * (1 - rel)), SPEC)
    assert (out.passed is False) is blocked, out.found
    assert f"median {rel:.1%}" in out.found


@pytest.mark.parametrize("alpha, blocked", [(0.0625, True), (0.0624, False)])
def test_step_rate_imbalance_at_p_equal_to_alpha_is_blocked(alpha, blocked):
    # five seeds all slower on the draws: the exact two-sided sign flip gives p = 2/32
    v = np.linspace(0.2, 0.3, 5)
    rate = np.full(5, 10.0)
    ctx = _ctx(v, v + 0.01, rate, rate * 0.8)
    ctx.alpha = alpha
    out = execution_drift(ctx, SPEC)
    assert "sign-flip p = 0.0625" in out.found
    assert (out.passed is False) is blocked, out.found


def test_step_rate_difference_without_a_consistent_sign_passes():
    rng = np.random.default_rng(2)
    v = rng.uniform(0.2, 0.3, 10)
    rate = np.full(10, 10.0)
    signs = np.array([1, -1] * 5)
    out = execution_drift(_ctx(v, v + 0.01, rate, rate * (1 + 0.2 * signs)), SPEC)
    assert out.passed is True and "sign-flip p = 1" in out.found


def _time_drift_ctx():
    """V rises with execution time; draws run after their policy runs by varying gaps."""
    rng = np.random.default_rng(3)
    n = 12
    t_pol = np.arange(n) * 10.0
    gap = rng.uniform(1.0, 9.0, n)
    base = rng.uniform(0.2, 0.3, n)
    slope = 0.01
    v_pol = base + slope * t_pol + rng.normal(0, 0.002, n)
    v_draw = base + slope * (t_pol + gap) + rng.normal(0, 0.002, n)
    rate = np.full(n, 10.0)
    return _ctx(v_pol, v_draw, rate, rate, t_pol, t_pol + gap)


def test_time_drift_explaining_the_gain_is_blocked_with_its_share():
    ctx = _time_drift_ctx()
    from evalkit.audit.checks.drift import claim_timing

    fit = drift_adjusted_gain(claim_timing(ctx), "t_min")
    share = (fit["gain"] - fit["gain_adj"]) / fit["gain"]
    assert fit["gain"] > 0 and share > 0.8 and fit["beta_p"] < 0.05
    for limit, blocked in ((share, True), (share - 1e-9, True), (share + 1e-9, False)):
        out = execution_drift(ctx, {**SPEC, "max_explained_share": limit})
        assert (out.passed is False) is blocked, (limit, out.found)
    out = execution_drift(ctx, SPEC)
    assert "execution time drift explains" in out.found


def test_fixed_effects_regression_matches_statsmodels():
    import statsmodels.formula.api as smf

    from evalkit.audit.checks.drift import claim_timing

    df = claim_timing(_time_drift_ctx())
    fit = drift_adjusted_gain(df, "t_min")
    ols = smf.ols("v ~ C(seed) + pol + t_min",
                  data=df.assign(pol=df.is_policy.astype(float))).fit()
    assert fit["gain_adj"] == pytest.approx(-ols.params["pol"], rel=1e-9)
    assert fit["beta"] == pytest.approx(ols.params["t_min"], rel=1e-9)
    assert fit["beta_p"] == pytest.approx(ols.pvalues["t_min"], rel=1e-6)


def test_nothing_recorded_is_not_evaluable():
    v = np.full(6, 0.2)
    ctx = _ctx(v, v + 0.01, np.full(6, np.nan), np.full(6, np.nan))
    out = execution_drift(ctx, SPEC)
    assert out.passed is None and not out.evaluable


def _probe_ctx(v_draw_slope):
    """Probe latency 60% higher for every seed's draw; V of the draw rises with the probe
    by ``v_draw_slope`` per second of probe latency (0: V does not depend on it)."""
    rng = np.random.default_rng(5)
    n = 10
    v = rng.uniform(0.2, 0.3, n)
    probe_pol = rng.uniform(0.010, 0.020, n)
    probe_draw = probe_pol * rng.uniform(1.5, 1.7, n)
    v_draw = v + 0.002 + v_draw_slope * (probe_draw - probe_pol) + rng.normal(0, 1e-4, n)
    ctx = _ctx(v, v_draw, np.full(n, 10.0), np.full(n, 10.0), np.arange(n) * 2.0,
               np.arange(n) * 2.0 + 1.0)
    metas = {}
    for s in range(n):
        for rid, probe, minute in ((f"p{s}", probe_pol[s], 2.0 * s),
                                   (f"d{s}", probe_draw[s], 2.0 * s + 1)):
            metas[rid] = {"run_order": {"position": 0, "started_at": (
                T0 + dt.timedelta(minutes=minute)).isoformat(),
                "host_load": {"probe_s": float(probe)}}}
    ctx._meta = lambda rid: metas[rid]
    return ctx


def test_probe_imbalance_blocks_only_when_v_depends_on_the_probe():
    quiet = execution_drift(_probe_ctx(0.0), SPEC)
    assert quiet.passed is True and "host probe latency: draws higher" in quiet.found
    loud = execution_drift(_probe_ctx(20.0), SPEC)
    assert loud.passed is False and "host probe latency differs" in loud.found
    assert "V depends on it" in loud.found


def _exact_fit_frame(v_of, z_of=lambda z: z):
    """Three seeds of one policy row and three draws, with dyadic values so that the seed
    fixed-effects fit of ``v_of(policy, z, seed)`` on z is exact to the last bit."""
    rows = [dict(seed=s, is_policy=bool(pol), v=v_of(pol, z + s, s), probe=z_of(z + s))
            for s in range(3) for pol, z in [(1, 0.0), (0, 1.0), (0, 2.0), (0, 5.0)]]
    return pd.DataFrame(rows)


def test_an_exact_fit_has_slope_p_zero_when_the_slope_is_not_zero_and_one_when_it_is():
    sloped = drift_adjusted_gain(_exact_fit_frame(lambda pol, z, s: 2 * z + 0.5 * s), "probe")
    assert sloped["beta"] == 2.0 and sloped["beta_p"] == 0.0 and sloped["gain_adj"] == 0.0
    flat = drift_adjusted_gain(_exact_fit_frame(lambda pol, z, s: -0.25 * pol + 0.5 * s),
                               "probe")
    assert flat["beta"] == 0.0 and flat["beta_p"] == 1.0 and flat["gain_adj"] == 0.25


@pytest.mark.parametrize("rel, fitted", [(1e-8, True), (1e-11, False)])
def test_a_covariate_is_degenerate_below_a_part_in_1e9_of_its_level(rel, fitted):
    # the tolerance compares the within-seed sum of squares with the raw one: a probe
    # at level 1e4 varying by 1e-8 of it is a covariate; by 1e-11 it is rounding noise
    frame = _exact_fit_frame(lambda pol, z, s: 0.01 * z - 0.001 * pol,
                             z_of=lambda z: 1e4 * (1.0 + rel * z))
    fit = drift_adjusted_gain(frame, "probe")
    assert (fit is not None) is fitted


@pytest.mark.parametrize("slope, shown", [(7e-5, "1%"), (4e-5, "0%")])
def test_a_small_drift_share_is_shown_to_the_percent_and_below_half_a_percent_as_zero(slope,
                                                                                     shown):
    # G = 0.05 + slope x mean gap; the drift explains slope x mean gap of it: 0.69% or 0.40%
    n = 12
    gap = np.linspace(3.0, 7.0, n)
    t_pol = np.arange(n) * 10.0
    base = np.linspace(0.2, 0.3, n)
    v_draw = base + 0.05 + slope * gap
    rate = np.full(n, 10.0)
    out = execution_drift(_ctx(base, v_draw, rate, rate, t_pol, t_pol + gap), SPEC)
    assert f", {shown} of G explained by drift" in out.found


def test_relative_differences_leave_out_a_seed_with_any_unrecorded_draw():
    import pandas as pd

    from evalkit.audit.checks.drift import relative_differences

    df = pd.DataFrame({"seed": [0, 0, 0, 1, 1, 1, 2, 2],
                       "is_policy": [True, False, False, True, False, False, True, False],
                       "rate": [2.0, 2.2, 2.6, 2.0, np.nan, 3.0, 0.0, 1.0]})
    # seed 0: draws 2.4 on average against 2.0; seed 1 has a draw without a rate; seed 2's
    # policy rate is not positive
    assert relative_differences(df, "rate") == pytest.approx([0.2])
