"""Every bad input the run-log validator must catch, via the API and the CLI (exit code 2)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.runlog.validate import read_valid_run
from evalkit.runlog.validate import validate_run, validate_runs

RUN = "fixture-s0-fixed_h"


SEED0 = ("fixture-s0-no_sync", RUN, "fixture-s0-matched_random-d0", "fixture-s0-matched_random-d1")


@pytest.fixture
def runs(copy_fixture) -> Path:
    """The four seed-0 fixture runs, copied so a test may damage them."""
    return [copy_fixture(f"runs/{name}") for name in SEED0][0].parent


def edit_table(run_dir: Path, name: str, fn) -> None:
    """Rewrite a Parquet table through pandas (NaN becomes null, as in most writers)."""
    path = run_dir / f"{name}.parquet"
    df = fn(pq.read_table(path).to_pandas())
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)


def edit_meta(run_dir: Path, fn) -> None:
    path = run_dir / "run.json"
    meta = json.loads(path.read_text())
    fn(meta)
    path.write_text(json.dumps(meta))


def errors(run_dir):
    return [p for p in validate_run(run_dir) if p.severity == "error"]


def assert_problem(run_dir: Path, *, file: str, column: str | None, words: str, fix: str = ""):
    """The run is rejected with a problem naming file/column, and the CLI exits 2."""
    found = errors(run_dir)
    assert found, "expected an error"
    match = [p for p in found if p.file and p.file.endswith(file) and p.column == column
             and words.lower() in p.message.lower() and fix.lower() in p.fix.lower()]
    assert match, f"no problem for {file}/{column}/{words!r} in {[p.format() for p in found]}"
    assert match[0].fix
    with pytest.raises(InputError) as info:
        read_valid_run(run_dir)
    assert file in str(info.value)
    result = CliRunner().invoke(cli, ["validate", str(run_dir)])   # a single run works too
    assert result.exit_code == 2, result.output
    assert words.lower() in result.output.lower() and file in result.output
    assert "INVALID" in result.output


def test_fixtures_are_valid(fixtures_dir):
    report = validate_runs(fixtures_dir / "runs")
    assert report.ok and len(report.run_dirs) == 12 and not report.problems
    result = CliRunner().invoke(cli, ["validate", str(fixtures_dir / "runs")])
    assert result.exit_code == 0 and "valid: 12 run(s)" in result.output


def test_missing_and_empty_runs_dir(tmp_path):
    for target, words in ((tmp_path / "nope", "does not exist"), (tmp_path, "no runs found")):
        report = validate_runs(target)
        assert not report.ok and words in report.errors[0].message
        result = CliRunner().invoke(cli, ["validate", str(target)])
        assert result.exit_code == 2 and words in result.output


def test_truncated_parquet(runs):
    path = runs / RUN / "requests.parquet"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert_problem(runs / RUN, file="requests.parquet", column=None, words="corrupt or truncated")


def test_corrupt_parquet(runs):
    (runs / RUN / "merges.parquet").write_bytes(b"not parquet at all" * 10)
    assert_problem(runs / RUN, file="merges.parquet", column=None, words="cannot read Parquet")


def test_missing_table(runs):
    (runs / RUN / "merges.parquet").unlink()
    assert_problem(runs / RUN, file="merges.parquet", column=None, words="missing")


def test_missing_column(runs):
    edit_table(runs / RUN, "requests", lambda df: df.drop(columns=["sent_s"]))
    assert_problem(runs / RUN, file="requests.parquet", column="sent_s", words="column is missing")


def test_wrong_dtype(runs):
    edit_table(runs / RUN, "requests", lambda df: df.assign(arrival_s=df.arrival_s.astype(str)))
    assert_problem(runs / RUN, file="requests.parquet", column="arrival_s", words="expected float64",
                   fix="float64")


def test_null_in_required_column(runs):
    edit_table(runs / RUN, "requests", lambda df: df.assign(arrival_s=df.arrival_s.where(df.index != 3)))
    assert_problem(runs / RUN, file="requests.parquet", column="arrival_s", words="null value")


def test_nan_time(runs):
    path = runs / RUN / "requests.parquet"
    table = pq.read_table(path)
    values = table.column("sent_s").to_numpy().copy()
    values[5] = np.nan
    table = table.set_column(table.column_names.index("sent_s"), "sent_s",
                             pa.array(values, from_pandas=False))   # a real NaN, not a null
    pq.write_table(table, path)
    assert_problem(runs / RUN, file="requests.parquet", column="sent_s", words="NaN time")


def test_negative_time(runs):
    edit_table(runs / RUN, "requests",
               lambda df: df.assign(arrival_s=df.arrival_s.where(df.index != 0, -1.0)))
    assert_problem(runs / RUN, file="requests.parquet", column="arrival_s", words="negative time")


def test_end_before_arrival(runs):
    def damage(df):
        df.loc[4, "end_s"] = df.loc[4, "arrival_s"] - 0.5
        return df
    edit_table(runs / RUN, "requests", damage)
    assert_problem(runs / RUN, file="requests.parquet", column="end_s", words="end_s before arrival_s")


def test_first_token_before_sent(runs):
    def damage(df):
        row = df.index[df.ok][0]
        df.loc[row, "first_token_s"] = df.loc[row, "sent_s"] - 0.25
        return df
    edit_table(runs / RUN, "requests", damage)
    assert_problem(runs / RUN, file="requests.parquet", column="first_token_s",
                   words="first_token_s before sent_s")


def test_ok_without_end(runs):
    def damage(df):
        row = df.index[df.ok][0]
        df.loc[row, "end_s"] = np.nan
        return df
    edit_table(runs / RUN, "requests", damage)
    assert_problem(runs / RUN, file="requests.parquet", column="end_s", words="ok=True but end_s is null")


def test_duplicate_request_id(runs):
    edit_table(runs / RUN, "requests",
               lambda df: df.assign(request_id=df.request_id.where(df.index != 7, 3)))
    assert_problem(runs / RUN, file="requests.parquet", column="request_id", words="duplicate")


def test_reversed_merge_window(runs):
    def damage(df):
        df.loc[1, ["start_s", "end_s"]] = df.loc[1, ["end_s", "start_s"]].to_numpy()
        return df
    edit_table(runs / RUN, "merges", damage)
    assert_problem(runs / RUN, file="merges.parquet", column="end_s", words="reversed")


def test_overlapping_merge_windows(runs):
    def damage(df):
        df.loc[2, "start_s"] = df.loc[1, "end_s"] - 1.0
        df.loc[2, "end_s"] = df.loc[2, "start_s"] + 8.0
        return df
    edit_table(runs / RUN, "merges", damage)
    assert_problem(runs / RUN, file="merges.parquet", column="start_s", words="overlapping")


def test_unknown_schema_version(runs):
    edit_meta(runs / RUN, lambda meta: meta.update(schema_version=7))
    assert_problem(runs / RUN, file="run.json", column="schema_version", words="unknown schema_version",
                   fix="upgrade")


def test_mixed_schema_versions_named(runs):
    edit_meta(runs / RUN, lambda meta: meta.update(schema_version=2))
    report = validate_runs(runs)
    mixed = [p for p in report.errors if "mix schema versions" in p.message]
    assert mixed and RUN in mixed[0].message and "fixture-s0-no_sync" in mixed[0].message


def test_run_json_not_json(runs):
    (runs / RUN / "run.json").write_text("{not json")
    assert_problem(runs / RUN, file="run.json", column=None, words="not valid JSON")


@pytest.mark.parametrize("key", ["regime", "slo", "horizon_s", "seed", "rng_seeds"])
def test_run_json_lacks_key(runs, key):
    edit_meta(runs / RUN, lambda meta: meta.pop(key))
    assert_problem(runs / RUN, file="run.json", column=key, words="required key is missing")


@pytest.mark.parametrize("key,value,words", [
    ("role", "baseline", "unknown role"),
    ("backend", "gpu", "unknown backend"),
    ("oracle", "no", "true or false"),
    ("draw", 0, "only matched_random runs have draw"),
    ("matched_to", "wa", "only matched_random runs have matched_to"),
    ("horizon_s", -5, "positive number"),
])
def test_run_json_bad_values(runs, key, value, words):
    edit_meta(runs / RUN, lambda meta: meta.update({key: value}))
    assert_problem(runs / RUN, file="run.json", column=key, words=words)


def test_matched_random_needs_draw_and_reference(runs):
    run = runs / "fixture-s0-matched_random-d0"
    edit_meta(run, lambda meta: meta.update(draw=None, matched_to=None))
    cols = {p.column for p in errors(run)}
    assert {"draw", "matched_to"} <= cols


def test_slo_subkey(runs):
    edit_meta(runs / RUN, lambda meta: meta["slo"].update(e2e_s="10"))
    assert_problem(runs / RUN, file="run.json", column="slo.e2e_s", words="positive number")


def test_incomplete_run_listed_and_excluded(runs):
    edit_meta(runs / RUN, lambda meta: meta.update(complete=False, error="killed at t=120 s"))
    report = validate_runs(runs)
    assert report.excluded == [RUN] and not report.ok
    assert "killed at t=120 s" in report.errors[0].message
    with pytest.raises(InputError, match="incomplete"):
        read_valid_run(runs / RUN)
    result = CliRunner().invoke(cli, ["validate", str(runs)])
    assert result.exit_code == 2
    assert f"EXCLUDED run={RUN}" in result.output and "1 incomplete run(s) excluded" in result.output


def test_milliseconds_arrivals(runs):
    edit_table(runs / RUN, "requests", lambda df: df.assign(
        **{c: df[c] * 1000 for c in ("arrival_s", "sent_s", "first_token_s", "end_s")}))
    found = [p for p in errors(runs / RUN) if p.kind == "scale"]
    assert {p.column for p in found} == {"arrival_s", "end_s"}
    assert all("looks like milliseconds; divide by 1000" in p.fix for p in found)
    assert_problem(runs / RUN, file="requests.parquet", column="arrival_s", words="horizon_s",
                   fix="milliseconds")


def test_milliseconds_latencies_only(runs):
    """Times in ms but horizon_s also in ms: the latency scale still gives it away."""
    edit_meta(runs / RUN, lambda meta: meta.update(horizon_s=meta["horizon_s"] * 1000))
    edit_table(runs / RUN, "requests", lambda df: df.assign(
        **{c: df[c] * 1000 for c in ("arrival_s", "sent_s", "first_token_s", "end_s")}))
    assert_problem(runs / RUN, file="requests.parquet", column="end_s", words="median latency",
                   fix="divide by 1000")


def test_milliseconds_merges(runs):
    edit_table(runs / RUN, "merges", lambda df: df.assign(start_s=df.start_s * 1000,
                                                          end_s=df.end_s * 1000))
    assert_problem(runs / RUN, file="merges.parquet", column="end_s", words="merge duration",
                   fix="milliseconds")


def test_no_sync_with_merges(runs):
    src = runs / RUN / "merges.parquet"
    (runs / "fixture-s0-no_sync" / "merges.parquet").write_bytes(src.read_bytes())
    assert_problem(runs / "fixture-s0-no_sync", file="merges.parquet", column=None, words="no_sync run has")


def test_directory_without_run_json(runs):
    (runs / RUN / "run.json").unlink()
    report = validate_runs(runs)
    assert any(p.kind == "layout" and "no run.json" in p.message for p in report.errors)
    assert CliRunner().invoke(cli, ["validate", str(runs)]).exit_code == 2


def test_duplicate_run_id(runs, tmp_path):
    nested = runs / "again"
    nested.mkdir()
    import shutil
    shutil.copytree(runs / RUN, nested / RUN)
    report = validate_runs(runs)
    assert any("run_id used by 2 directories" in p.message for p in report.errors)


def test_warning_only_is_valid(runs):
    def early(df):
        df.loc[2, "sent_s"] = df.loc[2, "arrival_s"] - 0.5
        return df
    edit_table(runs / RUN, "requests", early)
    problems = validate_run(runs / RUN)
    assert [p.severity for p in problems] == ["warning"] and problems[0].column == "sent_s"
    read_valid_run(runs / RUN)   # warnings do not block reading
    result = CliRunner().invoke(cli, ["validate", str(runs)])
    assert result.exit_code == 0 and "WARNING" in result.output


def test_damaged_run_is_not_silently_dropped_by_summary(runs):
    from evalkit.runlog.summary import summarize_runs
    edit_table(runs / RUN, "requests", lambda df: df.drop(columns=["ok"]))
    with pytest.raises(InputError, match="'ok'|ok"):
        summarize_runs(runs)


def test_pandas_frame_unchanged_types(runs):
    """The helper keeps dtypes, so a test failure is the damage and not the helper."""
    edit_table(runs / RUN, "requests", lambda df: df)
    assert not errors(runs / RUN)
    assert pd.api.types.is_float_dtype(pq.read_table(runs / RUN / "requests.parquet")
                                       .to_pandas().arrival_s)
