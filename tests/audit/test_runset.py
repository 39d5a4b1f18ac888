"""The run set (the audit's input) and its claims: seed pairs and their draws, regimes,
generic draws, duplicates, run sets read from a runs directory or a summary table.

Claim assembly refuses duplicate runs of one seed; run tables of known and unknown runs;
harness baselines with and without their own draws."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evalkit.audit.runset import assemble_claims, ClaimData, load_runset, SeedPair
from evalkit.errors import InputError
from tests.support.summary_csv import write_csv


# ================================================================================ campaigns

def runset_of(tmp_path, text, name="t.csv"):
    return load_runset(write_csv(tmp_path, text, name))


TWO_POLICIES = ("policy,seed,violation_rate,matched_to,oracle,draw\n"
                "wa,0,0.10,,,\newma,0,0.12,,false,\n"
                "matched_random,0,0.20,wa,,0\nmatched_random,0,0.30,wa,,1\n"
                "matched_random,0,0.40,ewma,,0\nno_sync,0,0.05,,,\n"
                "wa,1,0.11,,,\newma,1,0.13,,true,\n"
                "matched_random,1,0.31,wa,,1\nmatched_random,1,0.21,wa,,0\n"
                "matched_random,1,0.41,ewma,,0\nno_sync,1,0.06,,,\n")


def test_claims_pair_each_seed_with_its_own_draws_and_no_sync(tmp_path):
    runset = runset_of(tmp_path, TWO_POLICIES)
    assert runset.source == "summary" and not runset.has_logs and runset.runs_dir is None
    ewma, wa = assemble_claims(runset)
    assert (wa.regime, wa.policy, ewma.policy) == ("default", "wa", "ewma")
    assert wa.seeds == [0, 1] and not wa.generic_draws and not wa.oracle and ewma.oracle
    assert [p.draws.violation_rate.tolist() for p in wa.pairs] == [[0.2, 0.3], [0.21, 0.31]]
    assert [p.draws.violation_rate.tolist() for p in ewma.pairs] == [[0.4], [0.41]]
    assert [p.policy_run for p in wa.pairs] == ["t.csv:row2", "t.csv:row8"]
    assert [float(p.no_sync.violation_rate) for p in wa.pairs] == [0.05, 0.06]
    assert wa.pairs[0].d == pytest.approx(0.25 - 0.10)
    assert wa.pairs[1].v_mr == pytest.approx(0.26) and len(wa.paired) == 2
    table = wa.per_seed_table()
    assert table.seed.tolist() == [0, 1] and table.n_draws.tolist() == [2, 2]
    assert table.v_mr_min.tolist() == [0.2, 0.21] and table.v_mr_max.tolist() == [0.3, 0.31]
    assert table.v_no_sync.tolist() == [0.05, 0.06] and table.v_policy.tolist() == [0.1, 0.11]
    assert table.k_policy.isna().all()
    assert table.d.tolist() == pytest.approx([0.15, 0.15])
    assert runset.row("t.csv:row4").violation_rate == 0.2
    assert runset.row("t.csv:row5").violation_rate == 0.3
    assert runset.row("t.csv:row8").policy == "wa"


def test_seed_pair_without_draws_or_no_sync():
    pair = SeedPair(seed=0, policy_run="p", v_policy=0.1, k_policy=2.0, realisation=None,
                    draws=pd.DataFrame({"violation_rate": []}), no_sync=None)
    assert math.isnan(pair.v_mr) and math.isnan(pair.d)
    claim = ClaimData(regime="r", policy="wa", policy_runs=pd.DataFrame({"oracle": [False]}),
                      pairs=[pair], generic_draws=False)
    row = claim.per_seed_table().iloc[0]
    assert claim.paired == [] and row.n_draws == 0 and row.k_policy == 2.0
    assert np.isnan(row.v_mr_min) and np.isnan(row.v_mr_max) and np.isnan(row.v_no_sync)


def test_claims_regimes_are_separate(tmp_path):
    runset = runset_of(tmp_path, "policy,seed,regime,violation_rate,matched_to\n"
                           "wa,0,r1,0.1,\nmatched_random,0,r1,0.2,\nno_sync,0,r1,0.01,\n"
                           "wa,0,r2,0.3,\newma,0,r2,0.3,\nmatched_random,0,r2,0.4,wa\n"
                           "matched_random,0,r2,0.5,ewma\nno_sync,0,r2,0.02,\n")
    claims = assemble_claims(runset)
    assert [(c.regime, c.policy) for c in claims] == [("r1", "wa"), ("r2", "ewma"), ("r2", "wa")]
    r1, r2_ewma, r2_wa = claims
    assert r1.generic_draws and not r2_wa.generic_draws
    assert r1.pairs[0].draws.violation_rate.tolist() == [0.2]
    assert r2_wa.pairs[0].draws.violation_rate.tolist() == [0.4]
    assert r2_ewma.pairs[0].draws.violation_rate.tolist() == [0.5]
    assert float(r1.pairs[0].no_sync.violation_rate) == 0.01
    assert float(r2_wa.pairs[0].no_sync.violation_rate) == 0.02


def test_generic_draws_serve_one_policy_only(tmp_path):
    one = "policy,seed,violation_rate\nwa,0,0.1\nmatched_random,0,0.2\n"
    assert len(assemble_claims(runset_of(tmp_path, one))[0].paired) == 1
    with pytest.raises(InputError, match="1 matched-random rows without matched_to, but the "
                       r"regime has 2 policies \(ewma, wa\)") as info:
        assemble_claims(runset_of(tmp_path, one + "ewma,0,0.15\n"))
    assert info.value.column == "matched_to"
    # a harness baseline without draws of its own is not served by them
    runset = runset_of(tmp_path, one + "fixed_h,0,0.15\n")
    claims = assemble_claims(runset, baseline_policies=("fixed_h",))
    assert [c.policy for c in claims] == ["wa"] and claims[0].generic_draws
    assert runset.notes[-1] == ("regime default: fixed_h is a harness baseline with no "
                                "matched-random draws of its own; audited as a baseline, "
                                "not as a claim")


def test_generic_draws_flag_with_some_matched_draws(tmp_path):
    runset = runset_of(tmp_path, "policy,seed,violation_rate,matched_to\n"
                           "wa,0,0.1,\nmatched_random,0,0.2,wa\nwa,1,0.1,\nmatched_random,1,0.3,\n")
    (claim,) = assemble_claims(runset)
    assert claim.generic_draws and len(claim.paired) == 2


def test_claims_duplicates_and_only_baselines(tmp_path):
    text = "policy,seed,violation_rate\nwa,0,0.1\nwa,1,0.1\nwa,1,0.2\nwa,2,0.1\nwa,2,0.2\n"
    with pytest.raises(InputError, match="several policy runs for seed 1 "
                       r"\(t.csv:row3, t.csv:row4\)"):
        assemble_claims(runset_of(tmp_path, text))
    text = "policy,seed,violation_rate\nwa,0,0.1\nno_sync,0,0.01\nno_sync,1,0.01\n"
    assert [p.no_sync is not None for p in assemble_claims(
        runset_of(tmp_path, text))[0].pairs] == [True]
    with pytest.raises(InputError, match="several no-sync runs for seed 0"):
        assemble_claims(runset_of(tmp_path, text + "no_sync,0,0.02\n"))
    # a policy run exists, its draws are missing: the error says so, not "every run is a
    # baseline"
    with pytest.raises(InputError, match="no claim to audit: the policy runs fixed_h "
                       r"\(regime default, 1 run\) have no matched-random draws") as info:
        assemble_claims(runset_of(tmp_path, "policy,seed,violation_rate\nfixed_h,0,0.1\n"),
                        baseline_policies=("fixed_h",))
    assert info.value.column == "matched_to" and "--matched-to POLICY" in info.value.fix
    assert "every run is a baseline" not in str(info.value)
    with pytest.raises(InputError, match=r"no policy runs to audit \(every run is a "
                       r"baseline\)") as info:
        assemble_claims(runset_of(tmp_path, "policy,seed,violation_rate\nno_sync,0,0.1\n"))
    assert info.value.column == "role"


def test_load_runset_input_kinds(tmp_path):
    with pytest.raises(InputError, match="input does not exist"):
        load_runset(tmp_path / "nothing")
    (tmp_path / "notes.txt").write_text("policy,seed,violation_rate\n")
    with pytest.raises(InputError, match="neither a runs directory nor a summary table"):
        load_runset(tmp_path / "notes.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no runs found") as info:
        load_runset(tmp_path / "empty")
    # named by its base name: no absolute path in what the audit reports
    assert info.value.message == "no runs found (no run.json below this directory)"
    assert info.value.file == "empty"


def _edit_run(run_dir: Path, **changes):
    meta = json.loads((run_dir / "run.json").read_text())
    meta.update(changes)
    (run_dir / "run.json").write_text(json.dumps(meta))


def test_runs_dir_runset_lists_incomplete_runs_once_with_owner(copy_fixture):
    runs_dir = copy_fixture("runs")
    _edit_run(runs_dir / "fixture-s1-fixed_h", complete=False, error="boom")
    runset = load_runset(runs_dir)
    assert runset.source == "runs" and runset.has_logs and runset.runs_dir == runs_dir
    assert runset.excluded == [{"run_id": "fixture-s1-fixed_h", "reason": "incomplete run: boom",
                                "regime": "fixture", "seed": 1, "role": "policy",
                                "policy": "fixed_h", "matched_to": None, "draw": None}]
    assert len(runset.runs) == 11 and "fixture-s1-fixed_h" not in set(runset.runs.run_id)
    for run_dir in runs_dir.iterdir():
        _edit_run(run_dir, complete=False)
    with pytest.raises(InputError, match="no complete runs"):
        load_runset(runs_dir)


def test_runs_dir_runset_of_a_single_run(copy_fixture):
    runs_dir = copy_fixture("runs")
    for run_dir in runs_dir.iterdir():
        if run_dir.name != "fixture-s0-fixed_h":
            shutil.rmtree(run_dir)
    runset = load_runset(runs_dir)
    assert runset.runs.run_id.tolist() == ["fixture-s0-fixed_h"] and runset.excluded == []


def test_runs_dir_runset_notes_draws_of_policies_without_runs(copy_fixture):
    runs_dir = copy_fixture("runs")
    assert load_runset(runs_dir).notes == []
    _edit_run(runs_dir / "fixture-s0-matched_random-d0", matched_to="ghost")
    notes = load_runset(runs_dir).notes
    assert notes[-1] == ("matched-random draws matched to policies with no policy runs (not "
                         "audited): ghost")


def _patched_summary(monkeypatch, edit):
    import evalkit.audit.runset as runset_module

    real = runset_module.summarize_runs

    def fake(path, **kwargs):
        summary = real(path, **kwargs)
        attrs = dict(summary.attrs)
        summary = edit(summary.copy(), attrs)
        summary.attrs = attrs
        return summary

    monkeypatch.setattr(runset_module, "summarize_runs", fake)


def test_runs_dir_runset_k_observed_is_not_k_total(monkeypatch, fixtures_dir):
    def more_total(summary, attrs):
        summary["k_total"] = summary["k_observed"] + 3
        return summary

    truth = load_runset(fixtures_dir / "runs").runs.set_index("run_id").k_observed
    _patched_summary(monkeypatch, more_total)
    got = load_runset(fixtures_dir / "runs").runs.set_index("run_id").k_observed
    assert got.to_dict() == truth.to_dict()


def test_runs_dir_runset_k_total_fallback(monkeypatch, fixtures_dir):
    def no_observed(summary, attrs):
        summary["k_total"] = summary["k_observed"] + 1
        return summary.drop(columns=["k_observed"])

    truth = load_runset(fixtures_dir / "runs").runs.set_index("run_id").k_observed
    _patched_summary(monkeypatch, no_observed)
    got = load_runset(fixtures_dir / "runs").runs.set_index("run_id").k_observed
    assert got.to_dict() == (truth + 1).to_dict()


def test_runs_dir_runset_drops_incomplete_summary_rows(monkeypatch, fixtures_dir):
    def one_incomplete(summary, attrs):
        summary.loc[summary.run_id == "fixture-s2-no_sync", "complete"] = False
        return summary

    _patched_summary(monkeypatch, one_incomplete)
    runs = load_runset(fixtures_dir / "runs").runs
    assert len(runs) == 11 and "fixture-s2-no_sync" not in set(runs.run_id)


def test_runs_dir_runset_excluded_and_unreadable_from_the_summary(monkeypatch, copy_fixture):
    runs_dir = copy_fixture("runs")
    _edit_run(runs_dir / "fixture-s1-fixed_h", complete=False, error="boom")

    def extra(summary, attrs):
        attrs["excluded"] = list(attrs.get("excluded", [])) + ["other-run"]
        attrs["unreadable"] = [{"run_id": "locked-run", "reason": "cannot read: denied"},
                               {"run_id": "fixture-s1-fixed_h", "reason": "cannot read"}]
        attrs["warnings"] = ["odd spacing"]
        return summary

    _patched_summary(monkeypatch, extra)
    runset = load_runset(runs_dir)
    assert [(e["run_id"], e["reason"]) for e in runset.excluded] == [
        ("fixture-s1-fixed_h", "incomplete run: boom"), ("locked-run", "cannot read: denied"),
        ("other-run", "incomplete run")]
    assert runset.notes == ["validation warning: odd spacing"]


def test_runs_dir_runset_rejects_summary_rows_without_a_run(monkeypatch, fixtures_dir):
    def ghost(summary, attrs):
        row = summary.iloc[[0]].copy()
        row["run_id"] = "ghost-run"
        return pd.concat([summary, row], ignore_index=True)

    _patched_summary(monkeypatch, ghost)
    with pytest.raises(InputError, match="summary lists run ghost-run without a complete run"):
        load_runset(fixtures_dir / "runs")


def test_runs_dir_runset_columns_before_the_table(fixtures_dir):
    runset = load_runset(fixtures_dir / "runs")
    run_id = "fixture-s0-no_sync"
    reference = pd.read_parquet(fixtures_dir / "runs" / run_id / "requests.parquet")
    got = runset.columns(run_id, "requests", ("arrival_s", "end_s"))
    assert np.array_equal(got["arrival_s"], reference.arrival_s.to_numpy(float))
    assert np.array_equal(got["end_s"], reference.end_s.to_numpy(float), equal_nan=True)
    assert runset.columns(run_id, "requests", ("arrival_s", "end_s")) is got
    full = runset.table(run_id, "requests")
    assert len(full) == len(reference)
    again = runset.columns(run_id, "requests", ("end_s",))
    assert np.array_equal(again["end_s"], reference.end_s.to_numpy(float), equal_nan=True)


def test_runs_dir_runset_corrupt_log_is_an_input_error(copy_fixture):
    runs_dir = copy_fixture("runs")
    runset = load_runset(runs_dir)
    run_id = "fixture-s0-no_sync"
    (runs_dir / run_id / "requests.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(InputError, match="cannot read Parquet"):
        runset.columns(run_id, "requests", ("arrival_s",))
    with pytest.raises(InputError, match="cannot read Parquet"):
        runset.table(run_id, "requests")


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
    runset = load_runset(fixtures_dir / "runs")
    run_id = runset.runs.run_id.iloc[0]
    req = runset.table(run_id, "requests")
    assert len(req) > 0 and "arrival_s" in req.columns
    assert runset.table(run_id, "requests") is req                 # cached
    cols = runset.columns(run_id, "requests", ("arrival_s",))
    assert np.array_equal(cols["arrival_s"], req.arrival_s.to_numpy(float))
    for call in (lambda: runset.table("no-such-run", "requests"),
                 lambda: runset.columns("no-such-run", "requests", ("arrival_s",))):
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
    runset = _table(tmp_path, _baseline_rows(fixed_h_draws=True))
    claims = assemble_claims(runset, baseline_policies=("fixed_h",))
    assert [c.policy for c in claims] == ["fixed_h", "wa"]
    fixed_h = claims[0]
    assert len(fixed_h.paired) == 3 and not fixed_h.generic_draws
    assert all(float(p.draws.violation_rate.iloc[0]) == 0.25 for p in fixed_h.pairs)
    assert not any("harness baseline" in note for note in runset.notes)


def test_harness_baseline_without_draws_is_not_a_claim(tmp_path):
    runset = _table(tmp_path, _baseline_rows(fixed_h_draws=False))
    claims = assemble_claims(runset, baseline_policies=("fixed_h",))
    assert [c.policy for c in claims] == ["wa"]
    assert any("fixed_h is a harness baseline" in note for note in runset.notes)
    # without the baseline list, fixed_h is an ordinary claim with no draws
    claims = assemble_claims(_table(tmp_path, _baseline_rows(fixed_h_draws=False)))
    assert [c.policy for c in claims] == ["fixed_h", "wa"] and claims[0].paired == []


def test_only_the_summary_tables_note_marks_an_imported_run_synthesised():
    from evalkit.audit.runset import _synthesised
    from evalkit.runlog.table import SYNTH_NOTE

    assert _synthesised({"backend": "import", "notes": [SYNTH_NOTE + " t.csv"]})
    assert _synthesised({"backend": "import", "notes": SYNTH_NOTE})
    assert not _synthesised({"backend": "import", "notes": ["imported from vllm bench serve"]})
    assert not _synthesised({"backend": "import", "notes": None})
    assert not _synthesised({"backend": "sim", "notes": [SYNTH_NOTE]})
