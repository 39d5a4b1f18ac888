"""Claim assembly refuses duplicate runs of one seed; campaign tables of known and unknown
runs; harness baselines with and without their own draws."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evalkit.audit.runset import assemble_claims, load_runset
from evalkit.errors import InputError


# ------------------------------------------------------------------- duplicates in claims

def _table(tmp_path, rows):
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows).assign(draws_per_row=1).to_csv(path, index=False)   # one run a row
    return load_runset(path)


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
    campaign = load_runset(fixtures_dir / "runs")
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
