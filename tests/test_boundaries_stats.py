"""Boundary values of load matching, F_K (min = max, zero slack, corridor edges) and claim
assembly (duplicate runs of one seed)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from evalkit.audit.campaign import assemble_claims, load_campaign
from evalkit.errors import InputError
from evalkit.stats import load_match
from evalkit.stats.loadmatch import DEFAULT_TOLERANCES
from evalkit.runlog.design import corridor_violations
from evalkit.stats.fk import edge_class, feasible_class, sample_schedules

BASE = {"seed": 0, "n_requests": 1000, "arrival_rate_achieved": 2.0,
        "prompt_tokens_total": 50_000, "output_tokens_total": 20_000, "step_rate": 1.0,
        "violation_rate": 0.05}


def _status(result, key):
    return next(c for c in result.checks if c.key == key)


# ---------------------------------------------------------------------------- load match

@pytest.mark.parametrize("key", ["arrival_rate_achieved", "output_tokens_total", "step_rate"])
def test_load_match_tolerance_edges(key):
    tol = DEFAULT_TOLERANCES[key]
    at = {**BASE, key: BASE[key] * (1 + tol)}
    res = load_match(at, BASE)
    assert _status(res, key).passed and res.matched
    below = {**BASE, key: BASE[key] * (1 - tol)}
    assert load_match(below, BASE).matched
    over = {**BASE, key: BASE[key] * (1 + tol) * 1.001}
    res = load_match(over, BASE)
    assert not res.matched and res.failed == [key] and _status(res, key).status == "failed"
    assert _status(res, key).rel_diff == pytest.approx(tol * 1.001 + 0.001, rel=1e-6)


@pytest.mark.parametrize("key", ["n_requests", "prompt_tokens_total"])
def test_load_match_zero_tolerance_is_exact(key):
    assert load_match(BASE, BASE).matched
    res = load_match({**BASE, key: BASE[key] + 1}, BASE)
    assert res.failed == [key]


def test_load_match_zero_counts():
    zero = {**BASE, "output_tokens_total": 0}
    assert load_match(zero, zero).matched               # 0 vs 0: identical
    res = load_match({**BASE, "output_tokens_total": 1}, zero)
    assert res.failed == ["output_tokens_total"]
    assert math.isinf(_status(res, "output_tokens_total").rel_diff)
    res = load_match(zero, BASE)
    assert res.failed == ["output_tokens_total"]


def test_load_match_explicit_tolerance_and_vex():
    res = load_match({**BASE, "step_rate": 1.2, "violation_rate": 0.08}, BASE,
                     {"step_rate": 0.2})
    assert res.matched and res.vex == pytest.approx(0.03)
    assert res.v_policy == 0.08 and res.v_no_sync == 0.05
    assert not load_match({**BASE, "step_rate": 1.2}, BASE, {"step_rate": 0.19}).matched


@pytest.mark.parametrize("which", ["policy", "no_sync"])
def test_load_match_nan_violation_rate_is_rejected(which):
    bad = {**BASE, "violation_rate": float("nan")}
    args = (bad, BASE) if which == "policy" else (BASE, bad)
    with pytest.raises(InputError) as info:
        load_match(*args)
    assert info.value.column == "violation_rate"


def test_load_match_nan_quantity_is_not_evaluable_not_passed():
    res = load_match({**BASE, "step_rate": float("nan")}, BASE)
    check = _status(res, "step_rate")
    assert check.status == "not evaluable" and not check.passed and not res.matched
    assert res.not_evaluable == ["step_rate"] and res.failed == []
    assert "policy" in check.reason


def test_load_match_missing_baseline_and_seed_mismatch():
    with pytest.raises(InputError):
        load_match(BASE, None)
    with pytest.raises(InputError) as info:
        load_match({**BASE, "seed": 1}, BASE)
    assert info.value.column == "seed"


# --------------------------------------------------------------------------------- F_K

def test_fixed_cadence_corridor_min_equals_max():
    # gaps fixed at 64 s: only the first start is free, every schedule is a shifted comb
    s = sample_schedules(3, (0.0, 300.0), 8.0, 64.0, 64.0, 200, rng=1, edges=False)
    assert s.shape == (200, 3)
    assert np.allclose(np.diff(s, axis=1), 64.0)
    assert s.min() >= 0.0 and s[:, -1].max() <= 292.0 + 1e-9
    fc = feasible_class(3, (0.0, 300.0), 8.0, 64.0, 64.0)
    assert fc.m == 0 and fc.slack == pytest.approx(292.0 - 128.0)


def test_fixed_cadence_with_edges():
    # edges: first start in [64, 64] after training start, gaps 64, end within 64 of 292
    s = sample_schedules(4, (0.0, 300.0), 8.0, 64.0, 64.0, 50, rng=2)
    assert np.allclose(s, [64.0, 128.0, 192.0, 256.0])
    assert corridor_violations([64, 128, 192, 256], [72, 136, 200, 264], (0, 300), 8.0,
                               64.0, 64.0) == []


def test_zero_slack_schedule_is_the_only_one():
    # K windows packed at min gap fill the span exactly
    s = sample_schedules(3, (0.0, 28.0), 8.0, 10.0, 50.0, 20, rng=3, edges=False)
    assert np.allclose(s, [0.0, 10.0, 20.0])
    with pytest.raises(InputError):
        feasible_class(3, (0.0, 27.999), 8.0, 10.0, 50.0)


def test_min_gap_below_duration_uses_duration():
    fc = feasible_class(2, (0.0, 100.0), 8.0, 2.0, 50.0)
    assert fc.gap_low == 8.0
    s = sample_schedules(2, (0.0, 100.0), 8.0, 2.0, 50.0, 500, rng=4, edges=False)
    assert np.diff(s, axis=1).min() >= 8.0 - 1e-9


def test_corridor_violation_edges():
    span, d = (0.0, 300.0), 8.0
    ok = [64.0, 128.0, 192.0, 256.0]
    ends = [x + d for x in ok]
    assert corridor_violations(ok, ends, span, d, 64.0, 64.0) == []
    # first merge one ulp-ish early / late
    early = [63.99] + ok[1:]
    assert any("< min_gap" in v for v in corridor_violations(early, ends, span, d, 64, 70))
    assert corridor_violations(early, ends, span, d, 64, 70, tol=0.01) == []
    late = [70.01, 134.01, 198.01, 262.01]
    assert any("> max_gap" in v for v in corridor_violations(late, ends, span, d, 0, 70))
    # gaps: exactly D is allowed when min_gap < D; below D is not
    tight = [64.0, 72.0, 136.0, 200.0, 264.0]
    assert corridor_violations(tight, [x + d for x in tight], span, d, 4.0, 70.0) == []
    tighter = [64.0, 71.9, 136.0, 200.0, 264.0]
    out = corridor_violations(tighter, [x + d for x in tighter], span, d, 4.0, 70.0)
    assert len(out) == 1 and "< D" in out[0]
    # the trailing edge: last start 292 - 70 = 222 s before the last feasible start is forced
    trail_ok = [64.0, 128.0, 192.0, 222.01]
    assert corridor_violations(trail_ok, [x + d for x in trail_ok], span, d, 0, 70) == []
    trail_bad = [64.0, 128.0, 192.0, 222.0]
    out = corridor_violations(trail_bad, [x + d for x in trail_bad], span, d, 0, 70)
    assert len(out) == 1 and "forced merge" in out[0]


def test_corridor_no_merges_edge():
    # 292 s of training without a merge: forced at max_gap >= 292, allowed when max_gap > 292
    assert corridor_violations([], [], (0, 300), 8.0, 0, 292.0) != []
    assert corridor_violations([], [], (0, 300), 8.0, 0, 292.01) == []


def test_corridor_window_past_end():
    assert corridor_violations([200.0], [300.0], (0, 300), 8.0, 0, 300) == []
    out = corridor_violations([200.0], [300.5], (0, 300), 8.0, 0, 300)
    assert out == ["a merge window runs past the end of the run"]
    out = corridor_violations([292.5], [300.0], (0, 300), 8.0, 0, 300)
    assert out and "past the end" in out[-1]


def test_edge_class_k0_edge():
    with pytest.raises(InputError):
        edge_class(0, (0, 300), 8.0, 0, 292.0)
    assert edge_class(0, (0, 300), 8.0, 0, 292.01).k == 0


# ------------------------------------------------------------------- duplicates in claims

def _table(tmp_path, rows):
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows).assign(draws_per_row=1).to_csv(path, index=False)   # one run a row
    return load_campaign(path)


def _rows(n_seeds=3):
    rows = []
    for seed in range(n_seeds):
        rows += [{"policy": "wa", "seed": seed, "violation_rate": 0.10},
                 {"policy": "matched_random", "seed": seed, "violation_rate": 0.20}]
    return rows


def test_duplicate_policy_runs_for_one_seed_are_an_error(tmp_path):
    assert len(assemble_claims(_table(tmp_path, _rows()))[0].pairs) == 3
    rows = _rows() + [{"policy": "wa", "seed": 1, "violation_rate": 0.09}]
    with pytest.raises(InputError) as info:
        assemble_claims(_table(tmp_path, rows))
    assert info.value.column == "seed" and "seed 1" in info.value.message


def test_duplicate_no_sync_runs_for_one_seed_are_an_error(tmp_path):
    rows = _rows() + [{"policy": "no_sync", "seed": 2, "violation_rate": 0.01}] * 2
    with pytest.raises(InputError) as info:
        assemble_claims(_table(tmp_path, rows))
    assert info.value.column == "seed" and "no-sync" in info.value.message


def test_campaign_tables_of_known_and_unknown_runs(fixtures_dir):
    campaign = load_campaign(fixtures_dir / "runs")
    run_id = campaign.runs.run_id.iloc[0]
    req = campaign.table(run_id, "requests")
    assert len(req) > 0 and "arrival_s" in req.columns
    assert campaign.table(run_id, "requests") is req                 # cached
    cols = campaign.columns(run_id, "requests", ("arrival_s",))
    assert np.array_equal(cols["arrival_s"], req.arrival_s.to_numpy(float))
    for call in (lambda: campaign.table("no-such-run", "requests"),
                 lambda: campaign.columns("no-such-run", "requests", ("arrival_s",))):
        with pytest.raises(InputError) as info:
            call()
        assert info.value.column == "run_id" and "no-such-run" in info.value.message


def test_edge_class_without_free_gaps_reports_acceptance_one():
    assert edge_class(1, (0, 300), 8.0, 10.0, 200.0).acceptance == 1.0
    assert edge_class(4, (0, 300), 8.0, 64.0, 64.0).acceptance == 1.0


def _baseline_rows(fixed_h_draws: bool):
    rows = []
    for seed in range(3):
        rows += [{"policy": "wa", "seed": seed, "violation_rate": 0.10},
                 {"policy": "matched_random", "matched_to": "wa", "seed": seed,
                  "violation_rate": 0.20},
                 {"policy": "fixed_h", "seed": seed, "violation_rate": 0.15}]
        if fixed_h_draws:
            rows.append({"policy": "matched_random", "matched_to": "fixed_h", "seed": seed,
                         "violation_rate": 0.25})
    return rows


def test_harness_baseline_with_its_own_draws_is_a_claim(tmp_path):
    campaign = _table(tmp_path, _baseline_rows(fixed_h_draws=True))
    claims = assemble_claims(campaign, baseline_policies=("fixed_h",))
    assert [c.policy for c in claims] == ["fixed_h", "wa"]
    fixed_h = claims[0]
    assert len(fixed_h.paired) == 3 and not fixed_h.generic_draws
    assert all(float(p.draws.violation_rate.iloc[0]) == 0.25 for p in fixed_h.pairs)
    assert not any("harness baseline" in note for note in campaign.notes)


def test_harness_baseline_without_draws_is_not_a_claim(tmp_path):
    campaign = _table(tmp_path, _baseline_rows(fixed_h_draws=False))
    claims = assemble_claims(campaign, baseline_policies=("fixed_h",))
    assert [c.policy for c in claims] == ["wa"]
    assert any("fixed_h is a harness baseline" in note for note in campaign.notes)
    # without the baseline list, fixed_h is an ordinary claim with no draws
    claims = assemble_claims(_table(tmp_path, _baseline_rows(fixed_h_draws=False)))
    assert [c.policy for c in claims] == ["fixed_h", "wa"] and claims[0].paired == []


def test_edge_class_gap_count_at_k0_and_k1():
    assert edge_class(0, (0, 300), 8.0, 0, 292.01).m == 0
    ec = edge_class(1, (0, 300), 8.0, 0, 300.0)
    assert ec.k == 1 and ec.m == 0
    assert edge_class(3, (0, 300), 8.0, 0, 300.0).m == 2


def test_load_match_defaults_are_the_shipped_protocol_tolerances():
    import tomllib
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "protocols" / "diloco-slo.toml"
    protocol = tomllib.loads(path.read_text())
    assert DEFAULT_TOLERANCES == protocol["checks"]["load_match"]["tolerances"]


def test_edge_class_zero_slack_at_the_end_is_feasible():
    # first start >= 20, gaps >= 20, last start <= 68 - 8 = 60: exactly one latest schedule
    ec = edge_class(3, (0, 68), 8.0, 20.0, 30.0)
    assert ec.k == 3 and ec.last_hi == 60.0 and ec.first_lo == 20.0
    with pytest.raises(InputError):
        edge_class(3, (0, 67.99), 8.0, 20.0, 30.0)


def test_edge_class_k0_reports_acceptance_one():
    assert edge_class(0, (0, 300), 8.0, 0, 292.01).acceptance == 1.0


def test_corridor_window_end_within_tolerance_of_the_run_end():
    kw = dict(train_start=0.0, tol=0.05)
    assert corridor_violations([200.0], [300.0], (0, 300), 8.0, 0, 300, **kw) == []
    assert corridor_violations([200.0], [300.04], (0, 300), 8.0, 0, 300, **kw) == []
    out = corridor_violations([200.0], [300.06], (0, 300), 8.0, 0, 300, **kw)
    assert out and "past the end" in out[-1]


def test_single_window_sample_stays_inside_both_edges():
    from evalkit.stats.fk import sample_class

    ec = edge_class(1, (0, 300), 8.0, 20.0, 200.0)       # first start in [20, 200], last in [92, 292]
    starts = sample_class(ec, 2000, np.random.default_rng(0))[:, 0]
    assert starts.min() >= 92.0 and starts.max() <= 200.0
    assert starts.min() < 95.0 and starts.max() > 197.0


def test_edge_class_zero_slack_at_the_start_is_feasible():
    # first start <= 30, gaps <= 30, last start >= 128 - 8 - 30 = 90: only the latest schedule
    assert edge_class(3, (0, 128), 8.0, 20.0, 30.0).k == 3
    with pytest.raises(InputError):
        edge_class(3, (0, 128.01), 8.0, 20.0, 30.0)


def test_corridor_gap_within_tolerance_of_max_gap_is_allowed_from_both_sides():
    span, d, tol = (0.0, 300.0), 8.0, 0.5
    def gaps_of(g):
        s = [64.0 + i * g for i in range(4)]
        return corridor_violations(s, [x + d for x in s], span, d, 0.0, 70.0, tol=tol)
    assert gaps_of(69.8) == []                     # just below max_gap: never a violation
    assert gaps_of(70.4) == []                     # above it, but within the tolerance
    out = gaps_of(70.6)
    assert len(out) == 3 and all("> max_gap" in v for v in out)
