"""Adversarial campaigns that passed the gate before the soundness checks, one per class.

Each starts from an honest fixture campaign that reaches matched_budget (asserted first, so
the attack is what changes the outcome) and tampers with it the way a careless or dishonest
campaign would.  Campaigns: ``python fixtures/make_campaigns.py``.
"""

from __future__ import annotations

import math

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalkit.audit import audit_campaign
from evalkit.cli.main import cli
from evalkit.errors import InputError
from tests.golden.compare import golden_path
from tests.support.gating import gate_decision
from tests.support.one_check import audit_check, audit_checks
from tests.support.rule_attacks import BASE, CAMPAIGNS, gate, runs  # noqa: F401 (fixture)


def check(claim, name):
    return next(c for c in claim.checks if c.name == name)


def edit_table(run_dir: Path, name: str, fn) -> None:
    path = run_dir / f"{name}.parquet"
    df = fn(pd.read_parquet(path))
    df.to_parquet(path, index=False)


def edit_meta(run_dir: Path, fn) -> None:
    path = run_dir / "run.json"
    meta = json.loads(path.read_text())
    fn(meta)
    path.write_text(json.dumps(meta))


def test_honest_base_passes_the_gate(runs):
    res = gate(runs)
    assert res.exit_code == 0, res.output
    names = ("policy_runs_complete", "pairing_real", "schedules_in_corridor",
             "merge_durations_match", "open_loop_sending", "enough_seeds")
    for name, c in audit_checks(runs, "wa", names).items():
        assert c.passed is True, name


def _seeds_where_wa_loses(runs: Path, n: int) -> list[int]:
    wa = audit_campaign(runs).claim("wa")
    d = {p.seed: p.d for p in wa.data.pairs}
    return sorted(d, key=d.get)[:n]


@pytest.mark.parametrize("how", ["delete", "incomplete", "unreadable_meta"])
def test_survivorship_dropped_policy_runs_fail(runs, how):
    worst = _seeds_where_wa_loses(runs, 2)
    for seed in worst:
        run = runs / f"wa-s{seed}"
        if how == "delete":
            shutil.rmtree(run)
        elif how == "incomplete":
            edit_meta(run, lambda m: m.update(complete=False, error="OOM"))
        else:   # a run whose owner cannot be read still counts against every claim
            (run / "run.json").write_text("{")
    if how == "unreadable_meta":
        with pytest.raises(InputError):       # a broken run.json is an input error
            audit_campaign(runs)
        return
    wa = audit_campaign(runs).claim("wa")
    c = check(wa, "policy_runs_complete")
    assert c.passed is False and all(f"seed {s}" in c.found for s in worst)
    assert wa.tier != "matched_budget"
    res = gate(runs)
    assert res.exit_code == 1 and "policy_runs_complete" in res.output
    if how == "incomplete":
        assert "excluded wa-s" in res.output          # the gate lists the exclusions


def test_draws_ignoring_the_corridor_fail(runs):
    # gaps only >= D (9 s), not >= min_gap (20 s): not a schedule the trainer could make
    def squeeze(m):
        m = m.copy()
        m["start_s"] = 30.0 + 9.0 * np.arange(len(m))
        m["end_s"] = m["start_s"] + 8.0
        return m
    edit_table(runs / "mr-wa-s2-d1", "merges", squeeze)
    audit = audit_campaign(runs)
    c = check(audit.claim("wa"), "schedules_in_corridor")
    assert c.passed is False and "mr-wa-s2-d1" in c.found and "min_gap" in c.found
    assert gate_decision(audit).exit_code == 1


def _two_close_merges(m):
    """The second merge 8 s + 1 ms after the first: inside D, far below the 20 s min_gap."""
    m = m.copy()
    m.loc[1, "start_s"] = m.loc[0, "start_s"] + 8.0 + 1e-3
    m.loc[1, "end_s"] = m.loc[1, "start_s"] + 8.0
    return m


def test_policy_breaking_the_corridor_fails(runs):
    edit_table(runs / "wa-s3", "merges", _two_close_merges)
    c = audit_check(runs, "wa", "schedules_in_corridor")
    assert c.passed is False and "wa-s3 (policy)" in c.found


@pytest.mark.parametrize("edge", ["first_late", "trailing_gap"])
def test_corridor_edges_are_checked(runs, edge):
    def move(m):
        m = m.copy()
        if edge == "first_late":        # first merge > max_gap (80 s) after training start
            m["start_s"] = m["start_s"] - m["start_s"].iloc[0] + 85.0
        else:                           # last merge leaves > max_gap before the end
            m["start_s"] = 20.0 + 25.0 * np.arange(len(m))
        m["end_s"] = m["start_s"] + 8.0
        return m
    edit_table(runs / "mr-wa-s1-d0", "merges", move)
    c = audit_check(runs, "wa", "schedules_in_corridor")
    assert c.passed is False and "mr-wa-s1-d0" in c.found


def test_short_policy_windows_fail(runs):
    for seed in range(10):
        edit_table(runs / f"wa-s{seed}", "merges",
                   lambda m: m.assign(end_s=m.start_s + 4.0))      # D/2; run.json says 8
    audit = audit_campaign(runs)
    c = check(audit.claim("wa"), "merge_durations_match")
    assert c.passed is False and "D = 8 s" in c.found
    assert gate_decision(audit).exit_code == 1


def test_pseudo_replication_counts_once(runs):
    # every "seed" replays seed 0's requests (one trace realisation, seed-independent runs)
    src = {p.name: p for p in runs.iterdir()}
    for seed in range(1, 10):
        for name in (f"wa-s{seed}", f"mr-wa-s{seed}-d0", f"mr-wa-s{seed}-d1"):
            twin = name.replace(f"s{seed}", "s0")
            for table in ("requests", "merges"):
                shutil.copy(src[twin] / f"{table}.parquet", src[name] / f"{table}.parquet")
    audit = audit_campaign(runs)
    wa = audit.claim("wa")
    out = wa.to_dict()
    assert out["n_seeds"] == 10 and out["effective_n"] == 1
    assert check(wa, "enough_seeds").passed is False
    assert any("effective n = 1" in n for n in wa.notes)
    assert gate_decision(audit).exit_code == 1


def _closed_loop(req: pd.DataFrame) -> pd.DataFrame:
    """Each request sent when the previous one completes (closed loop, latency from send)."""
    req = req.sort_values("arrival_s").reset_index(drop=True).copy()
    dur = (req.end_s - req.sent_s).to_numpy()
    first = (req.first_token_s - req.sent_s).to_numpy()
    t = float(req.arrival_s.iloc[0])
    sent, end = [], []
    for i in range(len(req)):
        sent.append(t)
        t = t + dur[i]
        end.append(t)
    req["arrival_s"] = req["sent_s"] = sent
    req["end_s"] = end
    req["first_token_s"] = np.array(sent) + first
    return req


def _batched(req: pd.DataFrame) -> pd.DataFrame:
    """Batches of 16 requests sharing one arrival time."""
    req = req.sort_values("arrival_s").reset_index(drop=True).copy()
    shift = req.arrival_s.groupby(np.arange(len(req)) // 16).transform("min") - req.arrival_s
    for col in ("arrival_s", "sent_s", "first_token_s", "end_s"):
        req[col] = req[col] + shift
    return req


@pytest.mark.parametrize("how, word", [(_closed_loop, "closed loop"), (_batched, "batched")])
def test_closed_loop_or_batched_sending_fails(runs, how, word):
    for name in [p.name for p in runs.iterdir() if p.is_dir()]:
        edit_table(runs / name, "requests", how)
    audit = audit_campaign(runs)
    c = check(audit.claim("wa"), "open_loop_sending")
    assert c.passed is False and word in c.found
    assert gate_decision(audit).exit_code == 1


def test_table_pooling_draws_of_other_policies_is_an_input_error(tmp_path):
    rows = []
    for seed in range(8):
        rows += [{"policy": "wa", "seed": seed, "violation_rate": 0.10},
                 {"policy": "ewma", "seed": seed, "violation_rate": 0.12}]
        rows += [{"policy": "matched_random", "seed": seed, "violation_rate": 0.2}] * 2
    path = tmp_path / "three_columns.csv"
    pd.DataFrame(rows).assign(draws_per_row=1).to_csv(path, index=False)
    with pytest.raises(InputError) as info:
        audit_campaign(path)
    assert info.value.column == "matched_to" and "matched_to" in info.value.fix
    assert gate(path).exit_code == 2


def _paired_table(path, d, v_policy=0.2):
    """A three-column summary table: per seed, wa at ``v_policy`` and one matched-random row
    ``d[seed]`` above it."""
    rows = []
    for seed, diff in enumerate(d):
        rows.append({"policy": "wa", "seed": seed, "violation_rate": v_policy})
        rows.append({"policy": "matched_random", "seed": seed,
                     "violation_rate": v_policy + diff})
    pd.DataFrame(rows).assign(draws_per_row=1).to_csv(path, index=False)
    return path


def test_three_column_table_cannot_pass_unless_vouched(tmp_path):
    path = _paired_table(tmp_path / "three_columns.csv", [0.10] * 8, v_policy=0.10)
    assert gate(path).exit_code == 1
    res = gate(path, "--accept-vouched")
    assert res.exit_code == 0 and "vouched" in res.output


def test_summarize_table_design_columns_count_only_when_vouched(tmp_path):
    # a table's design columns (fingerprints, corridor, durations, load) are its word: the
    # summarize table of an honest campaign reaches its runs' tiers only with --accept-vouched
    from tests.support.selfreg import selfreg_protocol

    runs = CAMPAIGNS / "sim_bursty"
    table = tmp_path / "summary.csv"
    res = CliRunner().invoke(cli, ["summarize", str(runs), "--out", str(table)])
    assert res.exit_code == 0, res.output

    # the campaign is self-registered: its tiers above matched_budget are audited under the
    # protocol copy that allows self-registration, where the runs reach calibrated
    # (tests/audit/test_result_audit_campaign.py); the runs' test, from the golden document
    from_runs = next(c for c in json.loads(golden_path("sim_bursty").read_text())["claims"]
                     if c["policy"] == "wa")
    plain = audit_campaign(table).claim("wa")
    assert plain.tier not in ("matched_budget", "placement_gain")
    assert check(plain, "pairing_real").evaluable is False
    assert check(plain, "pairing_real").found.startswith("the table's word")
    vouched = audit_campaign(table, protocol=selfreg_protocol().with_accept_vouched(True)
                             ).claim("wa")
    # every tier that needs no request logs (psi needs them) is reached, vouched
    assert vouched.tier == "placement_gain"
    for name in ("load_match", "pairing_real", "schedules_in_corridor",
                 "merge_durations_match", "open_loop_sending"):
        assert check(vouched, name).vouched is True, name
    assert vouched.to_dict()["p_two_sided"] == pytest.approx(from_runs["p_two_sided"],
                                                            rel=1e-12)


def test_tied_seeds_do_not_count_towards_power(tmp_path):
    # d = [.1, .1, .1, .1, 0, 0]: six seeds, but two cannot move the test: 1/16 is the floor
    path = _paired_table(tmp_path / "tied.csv", [0.1, 0.1, 0.1, 0.1, 0.0, 0.0])
    from evalkit.audit.protocol import load_protocol

    wa = audit_campaign(path, protocol=load_protocol().with_accept_vouched(True)).claim("wa")
    es = check(wa, "enough_seeds")
    assert es.passed is False and es.found.startswith("underpowered: 4 independent")
    assert "2 seed(s) whose policy run and draws have the same V" in es.found
    gs = check(wa, "gain_significant")
    assert gs.passed is False and "0.125" in gs.found     # two-sided 2/16, not 2/64
    assert wa.underpowered


def test_claim_lists_only_its_own_exclusions(tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(CAMPAIGNS / "sim_bursty", runs)
    edit_meta(runs / "no_sync-s2", lambda m: m.update(complete=False, error="OOM"))
    edit_meta(runs / "ewma-s1", lambda m: m.update(complete=False, error="OOM"))
    res = audit_campaign(runs)
    wa = res.claim("wa").to_dict()
    listed = {e["run_id"] for e in wa["exclusions"]}
    # its regime's no-sync run and its own crashed attempt (rerun), not ewma's run
    assert listed == {"no_sync-s2", "wa-s6-attempt0"}
    ewma = {e["run_id"] for e in res.claim("ewma").to_dict()["exclusions"]}
    assert ewma == {"no_sync-s2", "ewma-s1"}
    c = check(res.claim("wa"), "policy_runs_complete")
    assert c.passed is False and "no_sync-s2" in c.found and "ewma-s1" not in c.found


def test_table_hiding_one_merge_duration_is_not_verified(tmp_path):
    table = tmp_path / "summary.csv"
    res = CliRunner().invoke(cli, ["summarize", str(CAMPAIGNS / BASE), "--out", str(table)])
    assert res.exit_code == 0, res.output
    df = pd.read_csv(table)
    c = check(audit_campaign(table).claim("wa"), "merge_durations_match")
    assert c.evaluable is False and c.found.startswith("the table's word")   # never verified
    # blank the policy run's window length (it merged): the table does not even say its D
    df.loc[df.run_id == "wa-s3", "merge_duration_median_s"] = np.nan
    df.to_csv(table, index=False)
    c = check(audit_campaign(table).claim("wa"), "merge_durations_match")
    assert c.evaluable is False and c.blocking and "no observed merge durations" in c.found


@pytest.mark.parametrize("key, value", [("corridor", {"min_gap_s": 5.0, "max_gap_s": 80.0}),
                                        ("merge_duration_s", 4.0)])
def test_policy_run_json_declaring_a_looser_design_fails(runs, key, value):
    # the policy's merges come 8 s apart; its run.json claims a 5 s minimum gap (or D = 4 s)
    # so that its own corridor check passes, while its draws were placed under 20 s / 8 s
    edit_table(runs / "wa-s3", "merges", _two_close_merges)
    edit_meta(runs / "wa-s3", lambda m: m.update({key: value}))
    audit = audit_campaign(runs)
    c = check(audit.claim("wa"), "schedules_in_corridor")
    assert c.passed is False and "seed 3: runs declare different designs" in c.found
    assert gate_decision(audit).exit_code == 1


@pytest.mark.parametrize("n_seeds", [1, 2])
def test_a_claim_shows_its_differences_from_two_seeds(tmp_path, n_seeds):
    path = _paired_table(tmp_path / "few.csv", [0.1, 0.3][:n_seeds])
    out = audit_campaign(path).claim("wa").to_dict()
    if n_seeds == 2:                      # a test exists: d and its mean are shown
        assert out["wins"] == 2 and out["mean_diff"] == pytest.approx(0.2)
        # one draw a seed: no floor, the t-test on d = (0.1, 0.3): t = 2 with 1 df
        assert out["p_two_sided"] == pytest.approx(1 - 2 * math.atan(2) / math.pi, rel=1e-9)
    else:
        assert out["wins"] == 0 and out["mean_diff"] is None and out["p_two_sided"] is None
