"""Run-log validation of a damaged copy of a fixture run, one change at a time: times, tokens,
corridor, run.json values and roles, merges and steps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalkit.runlog.validate import validate_run

from tests.support.fixture_run import RUN, edit_meta, run


def edit_requests(run_dir: Path, fn) -> None:
    path = run_dir / "requests.parquet"
    df = fn(pq.read_table(path).to_pandas())
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)


def errors(run_dir: Path) -> list:
    return [p for p in validate_run(run_dir) if p.severity == "error"]


def _set(row: int, **values):
    def damage(df):
        for col, v in values.items():
            df.loc[row, col] = v
        return df
    return damage


def test_fixture_run_is_valid(run):
    assert errors(run) == []


def test_end_before_sent_alone_is_caught(run):
    # arrival <= end < sent, no first token: only "end before sent" applies
    edit_requests(run, _set(4, arrival_s=10.0, sent_s=10.5, first_token_s=np.nan, end_s=10.2,
                            ok=False))
    found = errors(run)
    assert [p.column for p in found] == ["end_s"]
    assert "end_s before sent_s" in found[0].message and "request_id" not in found[0].fix


def test_end_before_first_token_alone_is_caught(run):
    edit_requests(run, _set(4, arrival_s=10.0, sent_s=10.0, first_token_s=10.5, end_s=10.3))
    found = errors(run)
    assert [p.column for p in found] == ["end_s"]
    assert "end_s before first_token_s" in found[0].message


def test_equal_times_are_valid(run):
    # a request finishing the instant it is sent (cache hit) is not out of order
    edit_requests(run, _set(4, arrival_s=10.0, sent_s=10.0, first_token_s=10.0, end_s=10.0))
    assert errors(run) == []


def test_times_within_tolerance_are_valid_and_beyond_are_not(run):
    from evalkit.runlog.validate.tables import TIME_TOL_S

    edit_requests(run, _set(4, arrival_s=10.0, sent_s=10.0, first_token_s=10.0,
                            end_s=10.0 - 0.5 * TIME_TOL_S))
    assert errors(run) == []
    edit_requests(run, _set(4, end_s=10.0 - 2 * TIME_TOL_S))
    assert errors(run)


@pytest.mark.parametrize("col", ["output_tokens", "prompt_tokens"])
def test_zero_tokens_are_valid_negative_are_not(run, col):
    edit_requests(run, _set(4, **{col: 0}))
    assert errors(run) == []
    edit_requests(run, _set(5, **{col: -1}))
    found = errors(run)
    assert [p.column for p in found] == [col] and "negative token count" in found[0].message


def test_fixed_cadence_corridor_min_equals_max_is_valid(run):
    edit_meta(run, lambda m: m.update(corridor={"min_gap_s": 64.0, "max_gap_s": 64.0}))
    assert errors(run) == []
    edit_meta(run, lambda m: m.update(corridor={"min_gap_s": 64.0, "max_gap_s": 63.9}))
    found = errors(run)
    assert found and found[0].column == "corridor" and "min_gap_s" in found[0].message


def test_corridor_zero_min_gap_is_valid(run):
    edit_meta(run, lambda m: m.update(corridor={"min_gap_s": 0.0, "max_gap_s": 64.0}))
    assert errors(run) == []
    edit_meta(run, lambda m: m.update(corridor={"min_gap_s": -1.0, "max_gap_s": 64.0}))
    assert errors(run)


def test_problem_lists_three_ids_then_ellipsis(run):
    def damage(df):
        df.loc[[3, 4, 5, 6, 7], "output_tokens"] = -1
        return df
    edit_requests(run, damage)
    (problem,) = errors(run)
    assert problem.message.endswith("5 row(s), e.g. 3, 4, 5 ...")
    edit_requests(run, lambda df: df.assign(output_tokens=df.output_tokens.abs()))
    edit_requests(run, _set(4, output_tokens=-2))
    assert errors(run)[0].message.endswith("1 row(s), e.g. 4")


def test_unreadable_table_is_reported_not_raised(run, monkeypatch):
    import evalkit.runlog.io as io

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(io.pq, "ParquetFile", denied)
    found = validate_run(run)
    assert found and all(p.kind == "unreadable" for p in found)
    assert "cannot read: Permission denied" in found[0].message


@pytest.mark.parametrize("change, column", [
    ({"role": "no_sync", "policy": "ewma", "corridor": None}, "policy"),
    ({"role": "policy", "policy": "no_sync"}, "role"),
    ({"draw": 0}, "draw"),
    ({"matched_to": "ewma"}, "matched_to"),
    ({"role": "matched_random", "draw": None, "matched_to": "fixed_h"}, "draw"),
    ({"role": "matched_random", "draw": 0, "matched_to": None}, "matched_to"),
    ({"role": "no_sync", "policy": "no_sync", "corridor": None, "oracle": True}, "oracle"),
    ({"role": "matched_random", "draw": 0, "matched_to": ""}, "matched_to"),
    ({"role": "matched_random", "draw": 0, "matched_to": 5}, "matched_to"),
])
def test_role_consistency_of_run_json(run, change, column):
    edit_meta(run, lambda m: m.update(change))
    found = [p for p in errors(run) if p.column == column]
    assert found, [p.format() for p in errors(run)]


def test_an_oracle_policy_run_is_valid(run):
    edit_meta(run, lambda m: m.update({"oracle": True}))
    assert errors(run) == []


@pytest.mark.parametrize("key, value", [
    ("settings", [1]), ("host", "x"), ("rng_seeds", 3), ("evalkit_version", 1),
    ("created_at", ""), ("trace_realisation", ""), ("trace", "fixture-poisson"),
    ("merge_duration_s", 0.0), ("horizon_s", 0),
])
def test_run_json_value_types(run, key, value):
    edit_meta(run, lambda m: m.update({key: value}))
    assert any(p.column == key for p in errors(run)), [p.format() for p in errors(run)]


@pytest.mark.parametrize("sub", ["ttft_s", "tpot_s"])
def test_zero_ttft_or_tpot_slo_is_rejected(run, sub):
    edit_meta(run, lambda m: m["slo"].update({sub: 0}))
    assert any(p.column == f"slo.{sub}" for p in errors(run)), [p.format() for p in errors(run)]


@pytest.mark.parametrize("missing", ["start_s", "end_s"])
def test_merges_without_one_window_bound_is_reported_not_raised(run, missing):
    path = run / "merges.parquet"
    pq.write_table(pq.read_table(path).drop_columns([missing]), path)
    found = errors(run)
    assert any(p.column == missing and "missing" in p.message for p in found), \
        [p.format() for p in found]


def test_merge_scale_ignores_empty_windows(run):
    # D = 8 s; three windows last 8000 (milliseconds written as seconds) and four are empty:
    # the empty ones are errors of their own and must not pull the median duration to 0
    path = run / "merges.parquet"
    df = pq.read_table(path).to_pandas()
    df = pd.concat([df, df.iloc[:2]], ignore_index=True)
    df["merge_idx"] = range(len(df))
    df["start_s"] = 1000.0 * np.arange(len(df))
    df["end_s"] = df.start_s + np.where(np.arange(len(df)) < 3, 8000.0, 0.0)
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    found = validate_run(run)
    assert any(p.kind == "scale" and p.column == "end_s" for p in found), \
        [p.format() for p in found]


@pytest.mark.parametrize("value, words", [(-1.0, "negative time"), (np.inf, "infinite time")])
def test_step_times_are_checked(run, value, words):
    path = run / "steps.parquet"
    df = pq.read_table(path).to_pandas()
    df.loc[1, "start_s"] = value
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    found = [p for p in errors(run) if p.file.endswith("steps.parquet")]
    assert any(p.column == "start_s" and words in p.message for p in found), \
        [p.format() for p in found]


def test_step_ending_before_it_starts_is_reported(run):
    path = run / "steps.parquet"
    df = pq.read_table(path).to_pandas()
    df.loc[1, "end_s"] = df.loc[1, "start_s"] - 0.5
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    found = [p for p in errors(run) if p.file.endswith("steps.parquet")]
    assert any(p.column == "end_s" and "before start_s" in p.message for p in found), \
        [p.format() for p in found]


@pytest.mark.parametrize("early, warned", [(0.0005, False), (0.0015, True)])
def test_early_send_tolerance_is_one_millisecond(run, early, warned):
    edit_requests(run, lambda df: df.assign(sent_s=np.where(df.index == 1, df.arrival_s - early,
                                                            df.sent_s)))
    found = [p for p in validate_run(run) if p.column == "sent_s" and "earlier" in p.message]
    assert bool(found) is warned and all(p.severity == "warning" for p in found)


def test_duplicate_merge_idx_is_reported(run):
    path = run / "merges.parquet"
    df = pq.read_table(path).to_pandas()
    df.loc[2, "merge_idx"] = df.loc[1, "merge_idx"]
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    assert any(p.column == "merge_idx" and "duplicate" in p.message for p in errors(run))


def test_overlapping_windows_are_named_by_merge_idx(run):
    path = run / "merges.parquet"
    df = pq.read_table(path).to_pandas()
    df["merge_idx"] = df.merge_idx + 10
    df.loc[2, "start_s"] = df.loc[1, "end_s"] - 1.0
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    found = [p for p in errors(run) if "overlapping" in p.message]
    assert found and "merge_idx 12 starts at" in found[0].message and "merge_idx 11 ends" in \
        found[0].message, [p.format() for p in errors(run)]


def test_a_run_with_exactly_one_request_has_rows(run):
    edit_requests(run, lambda df: df.iloc[:1].reset_index(drop=True))
    assert not any("has no rows" in p.message for p in validate_run(run))
    edit_requests(run, lambda df: df.iloc[:0])
    assert any("has no rows" in p.message for p in errors(run))


def test_unique_request_ids_out_of_order_are_not_duplicates(run):
    edit_requests(run, lambda df: df.iloc[::-1].reset_index(drop=True))
    assert not any("duplicate request_id" in p.message for p in validate_run(run))
    def one_repeated(df):
        df = df.iloc[::-1].reset_index(drop=True)
        df.loc[0, "request_id"] = df.loc[1, "request_id"]
        return df
    edit_requests(run, one_repeated)
    dup = [p for p in errors(run) if "duplicate request_id" in p.message]
    assert len(dup) == 1 and dup[0].message.startswith("1 duplicate request_id value(s)")


def test_an_unusable_run_json_keeps_its_own_fix(run):
    (run / "run.json").write_text("{not json")
    problem = next(p for p in errors(run) if (p.file or "").endswith("run.json"))
    assert "not valid JSON" in problem.message
    assert problem.fix == "rewrite the run or repair the JSON"


@pytest.mark.parametrize("value", ["3", 1.5, True, None])
def test_seed_must_be_an_integer(run, value):
    edit_meta(run, lambda m: m.update({"seed": value}))
    found = [p for p in errors(run) if p.column == "seed"]
    assert found and "must be an integer" in found[0].message


def test_second_scale_windows_late_in_a_run_are_not_milliseconds(run):
    # durations come from end - start: windows 8 s long starting at 1000 s are seconds
    meta = json.loads((run / "run.json").read_text())
    path = run / "merges.parquet"
    df = pq.read_table(path).to_pandas()
    k = len(df)
    assert k >= 1
    start = 1000.0 + 64.0 * np.arange(k)
    df["start_s"], df["end_s"] = start, start + float(meta["merge_duration_s"])
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    assert not [p for p in validate_run(run) if p.kind == "scale"]


def test_arrival_scale_checked_for_a_horizon_of_one_second(run):
    edit_meta(run, lambda m: m.update({"horizon_s": 1.0}))
    edit_requests(run, lambda df: df.assign(arrival_s=df.arrival_s * 0 + 500.0,
                                            sent_s=df.sent_s * 0 + 500.0))
    scale = [p for p in validate_run(run) if p.kind == "scale" and p.column == "arrival_s"]
    assert len(scale) == 1 and "horizon_s is 1 s" in scale[0].message


def test_raise_if_invalid_only_when_there_are_errors(copy_fixture):
    from evalkit.errors import InputError
    from evalkit.runlog.validate import validate_runs

    runs = copy_fixture("runs")
    report = validate_runs(runs)
    assert report.ok and report.raise_if_invalid() is None
    edit_meta(runs / RUN, lambda m: m.update({"seed": "zero"}))
    report = validate_runs(runs)
    with pytest.raises(InputError, match="must be an integer") as exc:
        report.raise_if_invalid()
    assert exc.value.column == "seed" and exc.value.file.endswith("run.json")


def test_merge_scale_checked_for_a_sub_second_d(run):
    # D = 0.5 s and windows logged in milliseconds (500): the scale check still applies
    edit_meta(run, lambda m: m.update({"merge_duration_s": 0.5}))
    path = run / "merges.parquet"
    df = pq.read_table(path).to_pandas()
    df["end_s"] = df["start_s"] + 500.0
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    scale = [p for p in validate_run(run) if p.kind == "scale" and p.column == "end_s"]
    assert len(scale) == 1 and "merge_duration_s = 0.5 s" in scale[0].message
