"""Hostile values in run logs and a full disk under summarize and audit: exit 2, named.

`validate` used to accept negative ``inner_step`` / ``bytes``, ``seed = -1`` and horizons or
end times of 1e308; a token count near 2**63 passed and made the run's token total negative.
A full disk while writing a summary or a report gave an error that named no path.
"""

from __future__ import annotations

import errno
import json
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.limits import MAX_HORIZON_S, MAX_LOG_TIME_S, MAX_TOKENS
from evalkit.runlog.summary import summarize_runs
from evalkit.runlog.validate import validate_run

RUN = "fixture-s0-fixed_h"


def _set_cell(path, column: str, value, type_=None) -> None:
    """Row 0 of ``column`` in a Parquet file set to ``value`` (column type kept or ``type_``)."""
    table = pq.read_table(path)
    i = table.schema.get_field_index(column)
    values = table.column(i).to_pylist()
    values[0] = value
    table = table.set_column(i, column, pa.array(values, type_ or table.schema.field(i).type))
    pq.write_table(table, path)


def _set_meta(run_dir, **changes) -> None:
    meta = json.loads((run_dir / "run.json").read_text())
    meta.update(changes)
    (run_dir / "run.json").write_text(json.dumps(meta))


def _errors(run_dir) -> list[tuple[str, str]]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")               # no numpy warning may leak
        return [(p.column, p.message) for p in validate_run(run_dir) if p.severity == "error"]


@pytest.fixture
def run(copy_fixture):
    return copy_fixture("runs") / RUN


@pytest.mark.parametrize("table, column, value, said", [
    ("merges", "inner_step", -1, "negative inner_step"),
    ("merges", "bytes", -1, "negative bytes"),
    ("requests", "end_s", 1e308, f"time beyond {MAX_LOG_TIME_S:,.0f} s"),
    ("requests", "end_s", MAX_LOG_TIME_S * (1 + 1e-9), "time beyond"),
    ("merges", "end_s", 1e308, "time beyond"),
    ("requests", "prompt_tokens", 2 ** 63 - 1, f"token count above {MAX_TOKENS:,}"),
    ("requests", "prompt_tokens", MAX_TOKENS + 1, "token count above"),
])
def test_out_of_range_table_values_are_errors(run, table, column, value, said):
    _set_cell(run / f"{table}.parquet", column, value)
    found = _errors(run)
    assert any(c == column and said in m for c, m in found), found
    assert not any("negative" in m for c, m in found if column.endswith("tokens")), found


def test_a_huge_unsigned_token_count_is_above_the_limit_not_negative(run):
    _set_cell(run / "requests.parquet", "output_tokens", 2 ** 64 - 1, pa.uint64())
    found = _errors(run)
    assert found == [("output_tokens", f"token count above {MAX_TOKENS:,}: 1 row(s), e.g. 0")]


@pytest.mark.parametrize("table, column, value", [
    ("requests", "prompt_tokens", MAX_TOKENS), ("requests", "end_s", MAX_LOG_TIME_S / 2),
    ("merges", "inner_step", 0), ("merges", "bytes", 0), ("merges", "bytes", None)])
def test_values_at_the_limits_are_valid(run, table, column, value):
    if column == "end_s":       # a late end keeps the order checks satisfied
        value = float(value)
    _set_cell(run / f"{table}.parquet", column, value)
    assert _errors(run) == []


@pytest.mark.parametrize("key, value, said", [
    ("seed", -1, "outside [0, 2**63)"),
    ("horizon_s", 1e308, "30-day"),
    ("horizon_s", MAX_HORIZON_S * (1 + 1e-9), "30-day"),
    ("merge_duration_s", 1e308, "30-day"),
])
def test_out_of_range_run_json_values_are_errors(run, key, value, said):
    _set_meta(run, **{key: value})
    found = _errors(run)
    assert any(c == key and said in m for c, m in found), found


def test_seed_zero_and_a_30_day_horizon_are_valid(run):
    _set_meta(run, seed=0)
    assert not [c for c, _ in _errors(run) if c == "seed"]
    _set_meta(run, horizon_s=MAX_HORIZON_S)
    assert not [c for c, _ in _errors(run) if c == "horizon_s"]


def test_run_token_totals_stay_exact_at_the_limit(copy_fixture):
    runs = copy_fixture("runs")
    path = runs / RUN / "requests.parquet"
    n = pq.read_metadata(path).num_rows
    table = pq.read_table(path)
    table = table.set_column(table.schema.get_field_index("prompt_tokens"), "prompt_tokens",
                             pa.array(np.full(n, MAX_TOKENS, dtype=np.int64)))
    pq.write_table(table, path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = summarize_runs(runs, threads=1)
    assert int(df.set_index("run_id").loc[RUN, "prompt_tokens_total"]) == n * MAX_TOKENS


# ----------------------------------------------------------------------------- disk full

def _full_disk(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")      # as a write() raises it


def test_summarize_on_a_full_disk_names_the_output(tmp_path, monkeypatch):
    import pandas as pd

    monkeypatch.setattr(pd.DataFrame, "to_csv", _full_disk)
    out = tmp_path / "summary.csv"
    runs = Path(__file__).resolve().parents[2] / "fixtures" / "runs"
    res = CliRunner().invoke(cli, ["summarize", str(runs), "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert str(out) in res.output and "disk is full" in res.output, res.output
    assert not out.exists() and list(tmp_path.iterdir()) == []     # no partial file left


def test_audit_on_a_full_disk_names_the_report_directory(tmp_path, monkeypatch):
    from evalkit.report import publish

    monkeypatch.setattr(publish, "_write", _full_disk)
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))
    table = Path(__file__).resolve().parents[2] / "fixtures" / "campaigns" / "summary_table.csv"
    out = tmp_path / "report"
    res = CliRunner().invoke(cli, ["audit", str(table), "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert str(out) in res.output and "disk is full" in res.output, res.output
    assert "internal error" not in res.output
