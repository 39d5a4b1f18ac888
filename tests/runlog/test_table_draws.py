"""What a summary-table row is: ``draws_per_row``.

Papers publish one baseline row per seed that often averages several draws; the sign-flip
test on such rows over-rejects.  A table with a single matched-random row for a seed must say
what the row is; an averaged row is refused (exit 2 naming the column and the fix).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from evalkit.runlog.table import read_summary_table
from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.stats import sign_flip_test

CAMPAIGNS = Path(__file__).resolve().parents[2] / "fixtures" / "campaigns"


def _table(path, per_row=None, rows_per_seed=1, n=8, policy_per_row=None):
    rows = []
    for s in range(n):
        pol = {"policy": "wa", "seed": s, "violation_rate": 0.1}
        if policy_per_row is not None:
            pol["draws_per_row"] = policy_per_row
        rows.append(pol)
        for j in range(rows_per_seed):
            row = {"policy": "matched_random", "seed": s, "violation_rate": 0.2 + 0.01 * j}
            if per_row is not None:
                row["draws_per_row"] = per_row
            rows.append(row)
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _gate(path):
    return CliRunner().invoke(cli, ["gate", str(path), "--policy", "wa", "--accept-vouched"])


def test_single_baseline_rows_without_the_column_are_refused(tmp_path):
    res = _gate(_table(tmp_path / "t.csv"))
    assert res.exit_code == 2
    assert "draws_per_row" in res.output and "add a draws_per_row column" in res.output
    with pytest.raises(InputError) as info:
        read_summary_table(tmp_path / "t.csv")
    assert info.value.column == "draws_per_row" and info.value.file == "t.csv"
    assert "8 such seed(s)" in info.value.message


def test_one_draw_a_row_is_the_sign_flip_test(tmp_path):
    res = _gate(_table(tmp_path / "t.csv", per_row=1))
    assert res.exit_code == 0, res.output
    runs, _ = read_summary_table(tmp_path / "t.csv")
    assert (runs.role == "matched_random").sum() == 8


@pytest.mark.parametrize("per_row, ok", [(0, False), (1, True), (2, False), (5, False)])
def test_draws_per_row_threshold(tmp_path, per_row, ok):
    path = _table(tmp_path / "t.csv", per_row=per_row)
    if ok:
        read_summary_table(path)
        return
    with pytest.raises(InputError) as info:
        read_summary_table(path)
    assert info.value.column == "draws_per_row"
    if per_row > 1:
        assert f"averages {per_row} draws" in info.value.message
        assert "its own matched_random row" in info.value.fix
    res = _gate(path)
    assert res.exit_code == 2 and "draws_per_row" in res.output


def test_policy_rows_are_one_run(tmp_path):
    with pytest.raises(InputError, match="draws_per_row = 3 on a policy row"):
        read_summary_table(_table(tmp_path / "t.csv", per_row=1, policy_per_row=3))
    read_summary_table(_table(tmp_path / "u.csv", per_row=1, policy_per_row=1))


def test_several_draw_rows_a_seed_need_no_column(tmp_path):
    # each row is a draw: the within-seed permutation test applies
    runs, _ = read_summary_table(_table(tmp_path / "t.csv", rows_per_seed=3))
    assert (runs.role == "matched_random").sum() == 24


def test_summarize_tables_are_one_run_a_row(tmp_path):
    table = tmp_path / "summary.csv"
    res = CliRunner().invoke(cli, ["summarize", str(CAMPAIGNS / "sim_underpowered"),
                                   "--out", str(table)])
    assert res.exit_code == 0, res.output
    runs, _ = read_summary_table(table)            # one draw a seed, arrival fingerprints
    assert (runs.role == "matched_random").groupby(runs.seed).sum().max() == 1


def test_import_refuses_averaged_rows_too(tmp_path):
    path = _table(tmp_path / "t.csv", per_row=4)
    res = CliRunner().invoke(cli, ["import", "table", str(path), "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "draws_per_row" in res.output


def test_why_sign_flip_on_averaged_rows_over_rejects():
    # lognormal V, a row = mean of 5 draws, 10 seeds: the one-sided "win" rate of the
    # sign-flip test under exchangeability is well above its nominal 0.025
    rng = np.random.default_rng(12)
    reps, wins = 600, 0
    for _ in range(reps):
        v = rng.lognormal(0.0, 1.0, size=(10, 6))
        wins += sign_flip_test(v[:, 1:].mean(axis=1) - v[:, 0], "greater").p_value <= 0.025
    assert wins / reps > 0.025 + 3 * np.sqrt(0.025 * 0.975 / reps)
