"""Boundaries of reading summary tables: structure, numbers, bounds, the K column, roles,
policies and draws, run ids and no-sync rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evalkit.runlog.table import is_summary_table, read_summary_table
from evalkit.errors import InputError

from tests.support.summary_csv import write_csv


def values(frame, *cols):
    """Rows of some columns, with every missing value as None."""
    return [[None if pd.isna(v) else v for v in row] for row in frame[list(cols)].values.tolist()]


def read_csv(tmp_path, text):
    return read_summary_table(write_csv(tmp_path, text))


def table_error(tmp_path, text, match, name="t.csv"):
    with pytest.raises(InputError, match=match) as info:
        read_summary_table(write_csv(tmp_path, text, name))
    return info.value


def test_is_summary_table(tmp_path):
    for name in ("a.csv", "a.CSV", "a.parquet", "a.pq"):
        (tmp_path / name).write_text("x")
        assert is_summary_table(tmp_path / name)
    (tmp_path / "a.txt").write_text("x")
    (tmp_path / "d.csv").mkdir()
    assert not is_summary_table(tmp_path / "a.txt")
    assert not is_summary_table(tmp_path / "d.csv")
    assert not is_summary_table(tmp_path / "missing.csv")


def test_summary_table_row_numbers_of_csv_and_parquet(tmp_path):
    err = table_error(tmp_path, "policy,seed,violation_rate\nwa,0,0.1\nwa,1,1.5\n",
                      r"row 3: 1.5 is outside \[0, 1\]")
    assert err.column == "violation_rate" and err.file == "t.csv"
    path = tmp_path / "t.parquet"
    pd.DataFrame({"policy": ["wa", "wa"], "seed": [0, 1],
                  "violation_rate": [0.1, 1.5]}).to_parquet(path)
    with pytest.raises(InputError, match=r"row 2: 1.5 is outside"):
        read_summary_table(path)


def test_summary_table_from_parquet_with_numbers_and_nulls(tmp_path):
    path = tmp_path / "t.parquet"
    pd.DataFrame({"policy": ["wa", "matched_random"], "seed": [3, 3],
                  "violation_rate": [0.25, 0.5], "K": [4.0, np.nan],
                  "matched_to": [None, "wa"], "draws_per_row": [1, 1]}).to_parquet(path)
    runs, notes = read_summary_table(path)
    assert runs.seed.tolist() == [3, 3] and runs.violation_rate.tolist() == [0.25, 0.5]
    assert runs.k_observed.iloc[0] == 4 and np.isnan(runs.k_observed.iloc[1])
    assert runs.run_id.tolist() == ["t.parquet:row1", "t.parquet:row2"]
    assert values(runs, "matched_to") == [[None], ["wa"]] and notes == []


def test_summary_table_structure_errors(tmp_path):
    err = table_error(tmp_path, "policy,violation_rate\nwa,0.1\n",
                      "lacks a required column")
    assert err.column == "seed"
    table_error(tmp_path, "policy,seed,violation_rate\n", "summary table has no rows")


def test_summary_table_notes_only_unused_columns(tmp_path):
    runs, notes = read_csv(tmp_path, "policy,seed,violation_rate,run_id,k_observed,"
                           "arrival_rate_achieved,colour,role\nwa,0,0.1,r0,3,2.5,red,policy\n")
    assert notes == ["summary table columns not used by the audit: colour"]
    assert runs.run_id.tolist() == ["r0"] and runs.k_observed.tolist() == [3]
    runs, notes = read_csv(tmp_path, "policy,seed,violation_rate\nwa,0,0.1\n")
    assert notes == []


@pytest.mark.parametrize("seed, match", [("", "value is missing"), ("x", "not a number: 'x'"),
                                         ("inf", "not a finite number: 'inf'"),
                                         ("nan", "not a finite number: 'nan'"),
                                         ("1.5", "not an integer: '1.5'")])
def test_summary_table_number_errors(tmp_path, seed, match):
    err = table_error(tmp_path, f"policy,seed,violation_rate\nwa,{seed},0.1\n", f"row 2: {match}")
    assert err.column == "seed"


def test_summary_table_blank_required_and_non_finite_rates(tmp_path):
    err = table_error(tmp_path, "policy,seed,violation_rate\nwa,0, \n", "row 2: value is missing")
    assert err.column == "violation_rate"
    err = table_error(tmp_path, "policy,seed,violation_rate\nwa,0,nan\n", "not a finite number")
    assert err.column == "violation_rate"
    err = table_error(tmp_path, "policy,seed,violation_rate\n ,0,0.1\n", "row 2: value is missing")
    assert err.column == "policy"


def test_a_blank_regime_in_a_table_that_names_regimes_is_missing_not_default(tmp_path):
    # it joined a "default" regime, and the claim then failed on draws it lacked
    rows = "wa,0,a,0.1\nmatched_random,0,{},0.2\nwa,1,a,0.1\nmatched_random,1,a,0.2\n"
    err = table_error(tmp_path, "policy,seed,regime,violation_rate\n" + rows.format(" "),
                      "row 3: value is missing while other rows name their regime")
    assert err.column == "regime"
    named, _ = read_csv(tmp_path, "policy,seed,regime,violation_rate\n" + rows.format("a"))
    assert set(named["regime"]) == {"a"}
    for blank in ("policy,seed,regime,violation_rate\nwa,0,,0.1\nmatched_random,0,,0.2\n",
                  "policy,seed,violation_rate\nwa,0,0.1\nmatched_random,0,0.2\n"):
        assert set(read_csv(tmp_path, blank)[0]["regime"]) == {"default"}  # one regime


@pytest.mark.parametrize("col, value, ok", [
    ("violation_rate", "0", True), ("violation_rate", "1", True),
    ("violation_rate", "-0.01", False), ("violation_rate", "1.01", False),
    ("no_sync_violation_rate", "0", True), ("no_sync_violation_rate", "1", True),
    ("no_sync_violation_rate", "-0.01", False), ("no_sync_violation_rate", "1.01", False),
    ("K", "0", True), ("K", "-1", False), ("k_observed", "0", True), ("k_observed", "-1", False),
    ("n_requests", "1", True), ("n_requests", "0", False),
    ("draw", "-1", False),     # draw 0 on a policy row: test_table_contradictions
])
def test_summary_table_value_bounds(tmp_path, col, value, ok):
    cols = {"policy": "wa", "seed": "0", "violation_rate": "0", col: value}
    text = ",".join(cols) + "\n" + ",".join(cols.values()) + "\n"
    if ok:
        runs, _ = read_csv(tmp_path, text)
        field = {"K": "k_observed", "no_sync_violation_rate": "violation_rate"}.get(col, col)
        row = runs[runs.role == ("no_sync" if col.startswith("no_sync") else "policy")].iloc[0]
        assert float(row[field]) == float(value)
    else:
        err = table_error(tmp_path, text, f"row 2: {float(value)} is outside")
        assert err.column == col


def test_summary_table_k_column_choice(tmp_path):
    runs, _ = read_csv(tmp_path, "policy,seed,violation_rate,K,k_observed\n"
                       "wa,0,0.1,5,5\nwa,1,0.1,,7\nwa,2,0.1,,\n")
    assert runs.k_observed.iloc[:2].tolist() == [5, 7] and np.isnan(runs.k_observed.iloc[2])
    err = table_error(tmp_path, "policy,seed,violation_rate,K,k_observed\nwa,0,0.1,5,7\n",
                      "k_observed 7 contradicts K 5")           # K beside another k_observed
    assert err.column == "k_observed"
    err = table_error(tmp_path, "policy,seed,violation_rate,K,k_observed\nwa,0,0.1,,x\n",
                      "not a number")
    assert err.column == "k_observed"


def test_summary_table_roles_policies_and_draws(tmp_path):
    runs, _ = read_csv(tmp_path, "policy,seed,violation_rate,role,matched_to,draw,regime\n"
                       "wa,0,0.1,,,,r1\n"
                       "wa,0,0.2,matched_random,,3,r1\n"
                       "ewma,0,0.3,matched_random,ewma,,r2\n"
                       "matched_random,0,0.4,matched_random,wa,,r1\n"
                       "matched_random,0,0.5,,,,r1\n"
                       "idle,0,0.05,no_sync,,,r1\n"
                       "no_sync,1,0.06,,,,r1\n")
    assert values(runs, "role", "policy", "matched_to", "regime") == [["policy", "wa", None, "r1"],
                   ["matched_random", "matched_random", "wa", "r1"],
                   ["matched_random", "matched_random", "ewma", "r2"],
                   ["matched_random", "matched_random", "wa", "r1"],
                   ["matched_random", "matched_random", None, "r1"],
                   ["no_sync", "no_sync", None, "r1"],
                   ["no_sync", "no_sync", None, "r1"]]
    assert runs.draw.iloc[1] == 3 and np.isnan(runs.draw.iloc[0])


@pytest.mark.parametrize("row, col, match", [
    ("matched_random,0,0.2,policy,", "role", "role 'policy' contradicts policy 'matched_random'"),
    ("no_sync,0,0.2,matched_random,", "role", "role 'matched_random' contradicts policy"),
    ("wa,0,0.2,baseline,", "role", "unknown role 'baseline'"),
    ("wa,0,0.2,matched_random,ewma", "matched_to", "draw names policy 'wa' but matched_to 'ewma'"),
])
def test_summary_table_role_errors(tmp_path, row, col, match):
    err = table_error(tmp_path, f"policy,seed,violation_rate,role,matched_to\n{row}\n",
                      f"row 2: {match}")
    assert err.column == col


def test_summary_table_oracle_values(tmp_path):
    values = ["true", "TRUE", "1", "yes", "y", "t", "false", "0", "no", "n", "f", ""]
    text = "policy,seed,violation_rate,oracle\n" + "".join(
        f"wa,{i},0.1,{v}\n" for i, v in enumerate(values))
    runs, _ = read_csv(tmp_path, text)
    assert runs.oracle.tolist() == [True] * 6 + [False] * 6
    err = table_error(tmp_path, "policy,seed,violation_rate,oracle\nwa,0,0.1,maybe\n",
                      "cannot read 'maybe' as true/false")
    assert err.column == "oracle"


def test_summary_table_passthrough_columns(tmp_path):
    runs, notes = read_csv(tmp_path, "policy,seed,violation_rate,arrival_fingerprint,"
                           "corridor_note,arrival_rate_achieved,corridor_violations\n"
                           "wa,0,0.1,fp-abc,late window,2.5,1\n"
                           "wa,1,0.1,,,,\n")
    assert values(runs, "arrival_fingerprint") == [["fp-abc"], [None]]
    assert runs.corridor_note.tolist() == ["late window", ""]
    assert runs.arrival_rate_achieved.iloc[0] == 2.5 and np.isnan(runs.arrival_rate_achieved[1])
    assert runs.corridor_violations.iloc[0] == 1.0 and notes == []
    runs, _ = read_csv(tmp_path, "policy,seed,violation_rate\nwa,0,0.1\n")
    assert "arrival_fingerprint" not in runs and "step_rate" not in runs
    err = table_error(tmp_path, "policy,seed,violation_rate,step_rate\nwa,0,0.1,fast\n",
                      "not a number: 'fast'")
    assert err.column == "step_rate"


def test_summary_table_run_ids(tmp_path):
    runs, _ = read_csv(tmp_path, "policy,seed,violation_rate,run_id\nwa,0,0.1,first\nwa,1,0.1,\n")
    assert runs.run_id.tolist() == ["first", "t.csv:row3"]


def test_summary_table_no_sync_from_column(tmp_path):
    runs, _ = read_csv(tmp_path, "policy,seed,violation_rate,no_sync_violation_rate\n"
                       "wa,0,0.1,0.05\n"
                       "matched_random,0,0.2,0.05\n"
                       "wa,1,0.1,\n"
                       "wa,2,0.1,0.07\n")
    ns = runs[runs.role == "no_sync"]
    assert ns.run_id.tolist() == ["t.csv:row2:no_sync", "t.csv:row5:no_sync"]
    assert ns.seed.tolist() == [0, 2] and ns.violation_rate.tolist() == [0.05, 0.07]
    assert ns.k_observed.tolist() == [0, 0] and ns.policy.tolist() == ["no_sync"] * 2
    assert not ns.oracle.any() and ns.regime.tolist() == ["default"] * 2


def test_summary_table_no_sync_column_contradicting_itself(tmp_path):
    err = table_error(tmp_path, "policy,seed,violation_rate,no_sync_violation_rate\n"
                      "wa,0,0.1,0.05\nmatched_random,0,0.2,0.06\n",
                      r"row 3: 0.06 contradicts 0.05 on row 2 \(regime default, seed 0\)")
    assert err.column == "no_sync_violation_rate"
    # other seeds and regimes carry their own no-sync V
    runs, _ = read_csv(tmp_path, "policy,seed,regime,violation_rate,no_sync_violation_rate\n"
                       "wa,0,a,0.1,0.05\nwa,1,a,0.1,0.06\nwa,0,b,0.1,0.07\n")
    ns = runs[runs.role == "no_sync"]
    assert sorted(zip(ns.regime, ns.seed, ns.violation_rate)) == [
        ("a", 0, 0.05), ("a", 1, 0.06), ("b", 0, 0.07)]


def test_summary_table_no_sync_column_and_explicit_no_sync_rows(tmp_path):
    runs, _ = read_csv(tmp_path, "policy,seed,violation_rate,no_sync_violation_rate\n"
                       "no_sync,0,0.05,\n"
                       "wa,0,0.1,0.05\n"
                       "wa,1,0.1,0.07\n")
    ns = runs[runs.role == "no_sync"]
    assert ns.seed.tolist() == [0, 1] and ns.violation_rate.tolist() == [0.05, 0.07]
    assert ns.run_id.tolist() == ["t.csv:row2", "t.csv:row4:no_sync"]
    err = table_error(tmp_path, "policy,seed,violation_rate,no_sync_violation_rate\n"
                      "no_sync,0,0.05,\nwa,0,0.1,0.06\n",
                      "row 3: no_sync_violation_rate 0.06 contradicts the no_sync row")
    assert err.column == "no_sync_violation_rate"


GENERIC_NOTE = ("matched-random rows without matched_to serve every policy of their regime; "
                "the table vouches that their K matches each policy's K")


def test_summary_table_generic_draw_note(tmp_path):
    _, notes = read_csv(tmp_path, "policy,seed,violation_rate\nwa,0,0.1\nmatched_random,0,0.2\n")
    assert notes == [GENERIC_NOTE]
    _, notes = read_csv(tmp_path, "policy,seed,violation_rate\nmatched_random,0,0.2\n")
    assert notes == [GENERIC_NOTE]
    _, notes = read_csv(tmp_path, "policy,seed,violation_rate,matched_to\n"
                        "wa,0,0.1,\nmatched_random,0,0.2,wa\n")
    assert notes == []
    _, notes = read_csv(tmp_path, "policy,seed,violation_rate,matched_to\n"
                        "wa,0,0.1,\nmatched_random,0,0.2,\n")
    assert notes == [GENERIC_NOTE]
