"""Table rules of run-log validation on in-memory tables: types, times, request order and
counts, scale heuristics, merges, steps and reading tables.

The table rules check two reductions before a pass per rule: every problem the rules
find is still reported, with the same message, and nothing is reported where none is."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalkit.runlog.io import write_run
from evalkit.runlog.validate import tables as vtables, validate_run
from evalkit.runlog.validate.problem import Problem
from tests.support.run_tables import err, found, merges, requests


RUN_DIR = Path("runs") / "r"
META = {"role": "policy", "horizon_s": 300.0, "merge_duration_s": 8.0, "slo": {"e2e_s": 5.0}}


def check_requests(table, meta=META) -> list[tuple]:
    out: list[Problem] = []
    vtables._check_requests("r", RUN_DIR, table, meta, out)
    assert all(p.file == str(RUN_DIR / "requests.parquet") and p.run == "r" for p in out)
    return found(out)


def check_merges(table, meta=META) -> list[tuple]:
    out: list[Problem] = []
    vtables._check_merges("r", RUN_DIR, table, meta, out)
    assert all(p.file == str(RUN_DIR / "merges.parquet") for p in out)
    return found(out)


def test_strictly_increasing_helper():
    arr = np.array
    assert vtables._strictly_increasing(arr([], dtype=np.int64))
    assert vtables._strictly_increasing(arr([7]))
    assert vtables._strictly_increasing(arr([1, 2, 5]))
    assert not vtables._strictly_increasing(arr([1, 1, 2]))
    assert not vtables._strictly_increasing(arr([2, 1]))
    assert vtables._strictly_increasing(arr([0.5, 0.75, 1.0]))
    # values it cannot compare are never called increasing: the caller then uses np.unique
    assert not vtables._strictly_increasing(arr(["a", "b"], dtype=object))
    assert not vtables._strictly_increasing(arr(["a", "b", "c"], dtype=object))
    assert vtables._strictly_increasing(arr(["a"], dtype=object))


def test_first_ids_shows_three_then_an_ellipsis():
    ids = np.array([10, 11, 12, 13, 14])
    mask = np.array([True, False, True, True, False])
    assert vtables._first_ids(ids, mask) == "3 row(s), e.g. 10, 12, 13"
    mask4 = np.array([True, True, True, False, True])
    assert vtables._first_ids(ids, mask4) == "4 row(s), e.g. 10, 11, 12 ..."
    assert vtables._first_ids(None, mask) == "3 row(s), e.g. row 0, row 2, row 3"
    assert vtables._first_ids(None, mask4, limit=2) == "4 row(s), e.g. row 0, row 1 ..."


TYPE_CASES = [
    ("int", pa.int64(), True), ("int", pa.int32(), True), ("int", pa.float64(), False),
    ("int", pa.string(), False), ("int", pa.bool_(), False), ("int", pa.null(), True),
    ("float", pa.float64(), True), ("float", pa.float32(), True), ("float", pa.int64(), True),
    ("float", pa.string(), False), ("float", pa.bool_(), False), ("float", pa.null(), True),
    ("bool", pa.bool_(), True), ("bool", pa.int64(), False), ("bool", pa.string(), False),
    ("bool", pa.null(), True),
    ("string", pa.string(), True), ("string", pa.large_string(), True),
    ("string", pa.int64(), False), ("string", pa.bool_(), False), ("string", pa.null(), True),
]


@pytest.mark.parametrize("kind, dtype, ok", TYPE_CASES, ids=[f"{k}-{t}" for k, t, _ in TYPE_CASES])
def test_type_rule_of_each_kind(kind, dtype, ok):
    assert vtables._type_ok(kind, dtype) is ok


def test_floats_reads_casts_and_fills_null_columns():
    table = pa.table({"a": pa.array([1, 2], pa.int64()), "b": pa.array([None, None], pa.null()),
                      "c": pa.array([0.5, None])})
    assert vtables._floats(table, "missing") is None
    np.testing.assert_array_equal(vtables._floats(table, "a"), [1.0, 2.0])
    assert vtables._floats(table, "a").dtype == float
    b = vtables._floats(table, "b")
    assert b.shape == (2,) and np.isnan(b).all()
    c = vtables._floats(table, "c")
    assert c[0] == 0.5 and np.isnan(c[1])


# ----------------------------------------------------------------------------- time checks


def test_check_times_nan_inf_negative_and_zero():
    table = pa.table({"a_s": [0.0, float("nan"), 2.0, 3.0], "b_s": [0.0, float("nan"), 1.0, 2.0],
                      "c_s": [0.0, float("inf"), -1e-12, 0.5]})
    ids = np.array([5, 6, 7, 8])
    out: list[Problem] = []
    vtables._check_times("r", "p", table, ("a_s", "b_s", "c_s", "gone_s"), {"b_s"}, ids, out)
    assert found(out) == [
        err("a_s", "NaN time: 1 row(s), e.g. 6"),
        err("c_s", "infinite time: 1 row(s), e.g. 6"),
        err("c_s", "negative time: 1 row(s), e.g. 7"),
    ]
    assert out[0].fix == "every row needs a finite 'a_s' in seconds"
    assert out[2].fix == "times are seconds from the run's origin and must be >= 0"


def test_check_times_uses_given_arrays_over_the_table():
    table = pa.table({"a_s": [1.0, 2.0]})
    out: list[Problem] = []
    vtables._check_times("r", "p", table, ("a_s",), set(), None, out,
                   arrays={"a_s": np.array([-1.0, 2.0])})
    assert found(out) == [err("a_s", "negative time: 1 row(s), e.g. row 0")]
    out = []
    vtables._check_times("r", "p", table, ("a_s",), set(), None, out, arrays={"a_s": None})
    assert out == []


@pytest.mark.parametrize("b, wrong", [(1.0, False), (1.0 - 0.5e-9, False), (1.0 - 1.5e-9, True),
                                      (0.5, True), (2.0, False), (float("nan"), False)])
def test_order_rule_at_the_time_tolerance(b, wrong):
    out: list[Problem] = []
    vtables._order("r", "p", None, np.array([1.0]), np.array([b]), "x", "x before y", "fix", out)
    assert found(out) == ([err("x", "x before y: 1 row(s), e.g. row 0")] if wrong else [])


def test_order_rule_skips_a_missing_column_and_keeps_severity():
    out: list[Problem] = []
    vtables._order("r", "p", None, None, np.array([0.0]), "x", "m", "f", out)
    vtables._order("r", "p", None, np.array([0.0]), None, "x", "m", "f", out)
    assert out == []
    vtables._order("r", "p", None, np.array([1.0]), np.array([0.0]), "x", "m", "f", out,
             severity="warning", tol=0.5)
    assert found(out) == [("x", "m: 1 row(s), e.g. row 0", "warning", "format")]


# ----------------------------------------------------------------------------- requests


def test_valid_requests_have_no_problem():
    assert check_requests(requests()) == []


def test_requests_without_rows():
    assert check_requests(requests(0)) == [err(None, "requests.parquet has no rows")]


@pytest.mark.parametrize("ids, message", [
    ([0, 1, 2, 3], None), ([3, 0, 2, 1], None),
    ([0, 1, 1, 2], "1 duplicate request_id value(s), e.g. 1"),
    ([2, 2, 0, 0], "2 duplicate request_id value(s), e.g. 0, 2"),
    ([5, 5, 5, 1], "1 duplicate request_id value(s), e.g. 5"),
])
def test_duplicate_request_ids(ids, message):
    table = requests(4, request_id=pa.array(ids, pa.int64()))
    assert check_requests(table) == ([err("request_id", message)] if message else [])


def _one(row, n=3, **values):
    """requests(n) with row ``row`` changed."""
    cols = {}
    base = requests(n)
    for key, value in values.items():
        col = base.column(key).to_pylist()
        col[row] = value
        cols[key] = col
    return requests(n, **cols)


ORDER_CASES = [
    # arrival, sent, first, end -> problems (column, message start)
    ((1.0, 1.0, 1.1, 1.5), []),
    ((1.0, 1.0, 1.0, 1.0), []),
    ((1.0, 1.0, float("nan"), float("nan")), []),
    ((1.0, 1.2, float("nan"), 1.1), [("end_s", "end_s before sent_s")]),
    ((1.0, 1.0, 1.3, 1.2), [("end_s", "end_s before first_token_s")]),
    ((1.0, 1.2, 1.1, 1.5), [("first_token_s", "first_token_s before sent_s")]),
    ((1.0, 0.5, float("nan"), 0.9), [("end_s", "end_s before arrival_s"),
                                     ("sent_s", "sent_s earlier than the scheduled arrival_s")]),
    ((1.0, 0.9985, 1.1, 1.5), [("sent_s", "sent_s earlier than the scheduled arrival_s")]),
    ((1.0, 0.9995, 1.1, 1.5), []),
]


@pytest.mark.parametrize("times, expected", ORDER_CASES)
def test_each_request_order_rule_alone(times, expected):
    arrival, sent, first, end = times
    table = _one(1, arrival_s=arrival, sent_s=sent, first_token_s=first, end_s=end,
                 ok=not math.isnan(end))
    got = check_requests(table)
    want = [(col, f"{msg}: 1 row(s), e.g. 1", "warning" if col == "sent_s" else "error",
             "format") for col, msg in expected]
    assert got == want


def test_ok_request_without_end_and_failed_one_without_end():
    assert check_requests(_one(2, end_s=None, first_token_s=None, ok=True)) == [
        err("end_s", "ok=True but end_s is null: 1 row(s), e.g. 2")]
    assert check_requests(_one(2, end_s=None, first_token_s=None, ok=False)) == []


@pytest.mark.parametrize("col", ["prompt_tokens", "output_tokens"])
@pytest.mark.parametrize("value, bad", [(0, False), (1, False), (-1, True)])
def test_token_counts_zero_is_valid_negative_is_not(col, value, bad):
    got = check_requests(_one(1, **{col: value}))
    assert got == ([err(col, "negative token count: 1 row(s), e.g. 1")] if bad else [])


@pytest.mark.parametrize("col", ["prompt_tokens", "output_tokens"])
def test_one_token_count_above_the_limit_among_small_ones_is_named(col):
    from evalkit.limits import MAX_TOKENS

    got = check_requests(_one(1, **{col: MAX_TOKENS + 1}))
    assert got == [err(col, f"token count above {MAX_TOKENS:,}: 1 row(s), e.g. 1")]
    assert check_requests(_one(1, **{col: MAX_TOKENS})) == []


def test_request_times_are_checked_for_nan_inf_and_sign():
    got = check_requests(_one(0, arrival_s=float("nan")))
    assert got == [err("arrival_s", "NaN time: 1 row(s), e.g. 0")]
    got = check_requests(_one(2, sent_s=float("inf"), first_token_s=None, end_s=None, ok=False))
    assert got == [err("sent_s", "infinite time: 1 row(s), e.g. 2")]
    # first token and end may be null (failed requests); never infinite or negative
    got = check_requests(_one(1, first_token_s=float("nan"), end_s=float("nan"), ok=False))
    assert got == []


def test_requests_with_missing_columns_skip_their_rules():
    table = requests(3, request_id=None, ok=None, prompt_tokens=None)
    assert check_requests(table) == []
    table = requests(3, request_id=None, sent_s=pa.array([0.0, 1.5, 2.0]),
                     first_token_s=None, end_s=pa.array([0.5, 1.2, 2.5]))
    assert check_requests(table) == [err("end_s", "end_s before sent_s: 1 row(s), e.g. row 1")]


# ----------------------------------------------------------------------------- scale


@pytest.mark.parametrize("value, plausible, slack, expected", [
    (100.0, 1.0, 100.0, False), (100.001, 1.0, 100.0, True), (100_000.0, 1.0, 100.0, True),
    (100_001.0, 1.0, 100.0, False), (50.0, 0.5, 100.0, False), (50.01, 0.5, 100.0, True),
    (10_000.0, 1.0, 10.0, True), (10_001.0, 1.0, 10.0, False), (150.0, 2.0, 100.0, False),
    (250.0, 2.0, 100.0, True), (200_000.0, 2.0, 100.0, True), (200_001.0, 2.0, 100.0, False),
])
def test_milliseconds_rule_at_both_bounds(value, plausible, slack, expected):
    assert vtables._looks_ms(value, plausible, slack) is expected


def _times(arrival, latency):
    arrival = np.asarray(arrival, float)
    return requests(len(arrival), arrival_s=arrival, sent_s=arrival,
                    first_token_s=arrival, end_s=arrival + np.asarray(latency, float))


@pytest.mark.parametrize("last, flagged", [(100.0, False), (101.0, True), (10_000.0, True),
                                           (15_000.0, False)])
def test_arrival_scale_against_a_one_second_horizon(last, flagged):
    meta = {"horizon_s": 1.0}
    got = check_requests(_times([0.0, 0.5, last], [0.1, 0.1, 0.1]), meta)
    want = [err("arrival_s", f"arrivals reach {last:.6g} but horizon_s is 1 s", "scale")]
    assert got == (want if flagged else [])


def test_arrival_scale_reads_the_latest_arrival_and_needs_a_positive_horizon():
    table = _times([0.0, 0.5, 500.0], [0.1, 0.1, 0.1])
    assert check_requests(table, {"horizon_s": 1.0})[0][1] == \
        "arrivals reach 500 but horizon_s is 1 s"
    for horizon in (0, -1.0, "1", None):
        assert check_requests(table, {"horizon_s": horizon}) == []
    assert check_requests(table, None) == []


@pytest.mark.parametrize("e2e, latency, flagged", [
    (1.0, [150.0, 150.0, 150.0], True), (1.0, [100.0, 100.0, 100.0], False),
    (1.0, [1.0, 600.0, 600.0], True), (1.0, [1.0, 1.0, 600.0], False),
    (0.5, [60.0, 60.0, 60.0], True), (0.5, [50.0, 50.0, 50.0], False),
    (2.0, [250.0, 250.0, 250.0], True), (2.0, [150.0, 150.0, 150.0], False),
])
def test_latency_scale_against_the_e2e_slo(e2e, latency, flagged):
    meta = {"slo": {"e2e_s": e2e}}
    got = check_requests(_times([0.0, 1.0, 250.0], latency), meta)
    med = float(np.median(latency))
    want = [err("end_s", f"median latency {med:.6g} is over 100x the e2e SLO of {e2e:g} s",
                "scale")]
    assert got == (want if flagged else [])


def test_latency_scale_uses_end_minus_arrival_and_needs_a_positive_slo():
    table = _times([200.0, 250.0, 300.0], [2.0, 2.0, 2.0])   # end + arrival would look like ms
    assert check_requests(table, {"slo": {"e2e_s": 1.0}}) == []
    slow = _times([0.0, 1.0, 2.0], [500.0, 500.0, 500.0])
    for slo in ({"e2e_s": 0}, {"e2e_s": None}, {}, None, [1.0]):
        assert check_requests(slow, {"slo": slo}) == []


# ----------------------------------------------------------------------------- merges


def test_valid_merges_and_touching_windows():
    assert check_merges(merges([10.0, 50.0, 90.0], [18.0, 58.0, 98.0])) == []
    assert check_merges(merges([10.0, 18.0, 26.0], [18.0, 26.0, 34.0])) == []


def test_no_sync_run_with_merges():
    no_sync = {**META, "role": "no_sync"}
    assert check_merges(merges([], []), no_sync) == []
    assert check_merges(merges([10.0], [18.0]), no_sync) == [
        err(None, "a no_sync run has 1 merge(s)")]
    assert check_merges(merges([10.0, 50.0], [18.0, 58.0]), no_sync) == [
        err(None, "a no_sync run has 2 merge(s)")]
    assert check_merges(merges([10.0], [18.0]), None) == []
    assert check_merges(merges([10.0], [18.0]), META) == []


@pytest.mark.parametrize("idx, message", [
    ([0, 1, 2], None), ([2, 0, 1], None), ([0, 1, 1], "duplicate merge_idx [1]"),
    ([4, 4, 4], "duplicate merge_idx [4]"), ([3, 3, 1, 1], "duplicate merge_idx [1, 3]"),
])
def test_duplicate_merge_idx(idx, message):
    starts = [10.0 + 40 * i for i in range(len(idx))]
    table = merges(starts, [s + 8 for s in starts], idx=idx)
    assert check_merges(table) == ([err("merge_idx", message)] if message else [])


@pytest.mark.parametrize("end1, reversed_", [(58.0, False), (50.0 + 1e-6, False), (50.0, True),
                                             (49.0, True)])
def test_reversed_or_empty_merge_window(end1, reversed_):
    table = merges([10.0, 50.0, 90.0], [18.0, end1, 98.0])
    want = [err("end_s", "reversed or empty merge window (end_s <= start_s): 1 row(s), e.g. 1")]
    assert check_merges(table) == (want if reversed_ else [])


@pytest.mark.parametrize("idx, start, end, message", [
    (True, [10.0, 17.0, 90.0], [18.0, 25.0, 98.0],
     "1 overlapping merge window(s): merge_idx 1 starts at 17 s before merge_idx 0 ends at 18 s"),
    ([7, 8, 9], [50.0, 10.0, 90.0], [58.0, 55.0, 98.0],
     "1 overlapping merge window(s): merge_idx 7 starts at 50 s before merge_idx 8 ends at 55 s"),
    (None, [50.0, 10.0, 90.0], [58.0, 55.0, 98.0],
     "1 overlapping merge window(s): row 0 starts at 50 s before row 1 ends at 55 s"),
    (True, [10.0, 15.0, 20.0], [18.0, 23.0, 28.0],
     "2 overlapping merge window(s): merge_idx 1 starts at 15 s before merge_idx 0 ends at 18 s"),
    (True, [10.0, 30.0, 35.0], [18.0, 38.0, 43.0],
     "1 overlapping merge window(s): merge_idx 2 starts at 35 s before merge_idx 1 ends at 38 s"),
])
def test_overlapping_merge_windows_named(idx, start, end, message):
    assert check_merges(merges(start, end, idx=idx), {**META, "merge_duration_s": 8.0}) == [
        err("start_s", message)]


def test_overlap_within_the_time_tolerance_is_not_reported():
    assert check_merges(merges([10.0, 18.0 - 0.5e-9], [18.0, 26.0])) == []
    assert check_merges(merges([10.0, 18.0 - vtables.TIME_TOL_S], [18.0, 26.0])) == []
    assert len(check_merges(merges([10.0, 18.0 - 3 * vtables.TIME_TOL_S], [18.0, 26.0]))) == 1


@pytest.mark.parametrize("D, duration, flagged", [
    (1.0, 150.0, True), (1.0, 100.0, False), (0.5, 60.0, True), (0.5, 40.0, False),
    (8.0, 8.0, False), (2.0, 250.0, True),
])
def test_merge_duration_scale(D, duration, flagged):
    starts = [0.0, 1000.0, 2000.0]
    table = merges(starts, [s + duration for s in starts])
    got = check_merges(table, {"merge_duration_s": D})
    want = [err("end_s", f"median merge duration {duration:.6g} is over 100x "
                f"merge_duration_s = {D:g} s", "scale")]
    assert got == (want if flagged else [])
    assert check_merges(table, {"merge_duration_s": 0}) == []
    assert check_merges(table, None) == []


def test_merge_times_and_missing_window_bounds():
    got = check_merges(merges([-1.0, 10.0, float("nan"), 100.0], [5.0, 18.0, 58.0, float("inf")]))
    assert got == [err("start_s", "NaN time: 1 row(s), e.g. 2"),
                   err("start_s", "negative time: 1 row(s), e.g. 0"),
                   err("end_s", "infinite time: 1 row(s), e.g. 3")]
    only_start = pa.table({"merge_idx": pa.array([0, 1], pa.int64()), "start_s": [10.0, 5.0]})
    assert check_merges(only_start) == []
    only_end = pa.table({"end_s": [10.0, 5.0]})
    assert check_merges(only_end) == []


def test_steps_checks():
    out: list[Problem] = []
    table = pa.table({"start_s": [0.0, 2.0, 4.0], "end_s": [2.0, 1.5, 4.0]})
    vtables._check_steps("r", RUN_DIR, table, out)
    assert found(out) == [err("end_s", "step end_s before start_s: 1 row(s), e.g. row 1")]
    assert out[0].file == str(RUN_DIR / "steps.parquet")
    out = []
    vtables._check_steps("r", RUN_DIR, pa.table({"start_s": [-1.0], "end_s": [float("nan")]}), out)
    assert found(out) == [err("start_s", "negative time: 1 row(s), e.g. row 0"),
                          err("end_s", "NaN time: 1 row(s), e.g. row 0")]


# ----------------------------------------------------------------------------- reading tables


def _write(tmp_path, name, table) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, tmp_path / f"{name}.parquet")
    return tmp_path


def test_read_table_missing_required_and_optional():
    out: list[Problem] = []
    empty = Path("/nonexistent-evalkit-dir")
    assert vtables._read_table("r", empty, "steps", out) is None and out == []
    assert vtables._read_table("r", empty, "signals", out) is None and out == []
    assert vtables._read_table("r", empty, "merges", out) is None
    assert found(out) == [err(None, "merges.parquet is missing")]
    assert out[0].file == str(empty / "merges.parquet")


def test_read_table_keeps_only_the_columns_that_pass(tmp_path):
    table = requests(2, error=pa.array([None, "boom"], pa.string()),
                     extra=pa.array([1, 2]), prompt_tokens=pa.array([1.5, 2.0]),
                     output_tokens=pa.array([None, 3], pa.int64()))
    run = _write(tmp_path, "requests", table)
    out: list[Problem] = []
    got = vtables._read_table("r", run, "requests", out)
    assert found(out) == [
        err("prompt_tokens", "has type double, expected int64"),
        err("output_tokens", "1 null value(s) in a required column"),
    ]
    # the columns that failed are dropped, so value checks never see them; whether the
    # nullable string `error` is read at all is a matter of memory only
    assert [c for c in got.column_names if c != "error"] == [
        "request_id", "arrival_s", "sent_s", "first_token_s", "end_s", "ok"]


def test_read_table_checks_the_type_of_an_unread_nullable_string(tmp_path):
    run = _write(tmp_path, "requests", requests(2, error=pa.array([1, 2], pa.int64())))
    out: list[Problem] = []
    got = vtables._read_table("r", run, "requests", out)
    assert found(out) == [err("error", "has type int64, expected string")]
    assert "error" not in got.column_names and len(got) == 2


def test_read_table_nullable_columns_may_hold_nulls(tmp_path):
    run = _write(tmp_path, "requests", requests(2, first_token_s=pa.array([None, 1.1]),
                                               end_s=pa.array([None, None], pa.null())))
    out: list[Problem] = []
    got = vtables._read_table("r", run, "requests", out)
    assert out == []
    assert "first_token_s" in got.column_names and "end_s" in got.column_names


def test_milliseconds_heuristic_bounds():
    from evalkit.runlog.validate.tables import MS_FACTOR, MS_PLAUSIBLE, _looks_ms

    assert (MS_FACTOR, MS_PLAUSIBLE) == (100.0, 100.0)
    d = 8.0
    # over 100x the plausible value, and value / 1000 within 100x of it
    assert not _looks_ms(800.0, d) and _looks_ms(800.001, d)
    assert _looks_ms(800_000.0, d) and not _looks_ms(800_001.0, d)
    assert _looks_ms(80_000.0, d, slack=10.0) and not _looks_ms(80_001.0, d, slack=10.0)


@pytest.mark.parametrize("col", ["prompt_tokens", "output_tokens"])
def test_a_token_count_at_its_limit_is_valid_beside_a_bad_row(col):
    # one negative row leaves the fast path; the row exactly at the cap is still valid
    base = requests(3).column(col).to_pylist()
    base[0], base[2] = -1, vtables.MAX_TOKENS
    got = check_requests(requests(3, **{col: base}))
    assert got == [err(col, "negative token count: 1 row(s), e.g. 0")]
    base[2] = vtables.MAX_TOKENS + 1
    assert check_requests(requests(3, **{col: base})) == [
        err(col, "negative token count: 1 row(s), e.g. 0"),
        err(col, f"token count above {vtables.MAX_TOKENS:,}: 1 row(s), e.g. 2")]


def _write_requests(tmp_path, requests: pd.DataFrame, run_id: str = "r"):
    meta = {"run_id": run_id, "policy": "wa", "role": "policy", "seed": 0, "draw": None,
            "matched_to": None, "regime": "t", "trace": {"name": "t", "sha256": "x"},
            "backend": "sim", "slo": {"e2e_s": 1.5, "ttft_s": None, "tpot_s": None},
            "merge_duration_s": 8.0, "horizon_s": 600.0,
            "corridor": {"min_gap_s": 20.0, "max_gap_s": 150.0}, "oracle": False,
            "settings": {"requested": {}, "effective": {}}, "rng_seeds": {"trace": 0, "run": 0}}
    merges = pd.DataFrame({"merge_idx": [0], "start_s": [100.0], "end_s": [108.0]})
    return write_run(tmp_path, meta, requests, merges)


def _requests(n=50):
    arrival = np.linspace(1.0, 500.0, n)
    return pd.DataFrame({"request_id": np.arange(n), "arrival_s": arrival,
                         "sent_s": arrival + 0.001, "first_token_s": arrival + 0.1,
                         "end_s": arrival + 0.5, "prompt_tokens": np.full(n, 10),
                         "output_tokens": np.full(n, 20), "ok": np.ones(n, dtype=bool)})


def _messages(run_dir):
    return [(p.column, p.message, p.severity) for p in validate_run(run_dir)]


def test_orderings_within_the_tolerance_pass_and_beyond_it_fail(tmp_path):
    req = _requests()
    req.loc[3, "end_s"] = req.loc[3, "first_token_s"] - 1e-12       # inside the 1e-9 slack
    req.loc[4, "sent_s"] = req.loc[4, "arrival_s"] - 5e-4           # early, inside 1 ms
    assert _messages(_write_requests(tmp_path / "a", req)) == []
    req.loc[5, "end_s"] = req.loc[5, "first_token_s"] - 1e-6
    req.loc[6, "sent_s"] = req.loc[6, "arrival_s"] - 2e-3
    got = _messages(_write_requests(tmp_path / "b", req))
    assert ("end_s", "end_s before first_token_s: 1 row(s), e.g. 5", "error") in got
    assert ("sent_s", "sent_s earlier than the scheduled arrival_s: 1 row(s), e.g. 6",
            "warning") in got


@pytest.mark.parametrize("column, value, message", [
    ("arrival_s", np.nan, "NaN time: 1 row(s), e.g. 7"),
    ("end_s", np.inf, "infinite time: 1 row(s), e.g. 7"),
    ("sent_s", -0.5, "negative time: 1 row(s), e.g. 7"),
    ("first_token_s", 1e12, "time beyond"),
])
def test_a_single_bad_time_is_still_reported(tmp_path, column, value, message):
    req = _requests()
    run_dir = _write_requests(tmp_path, req)
    # rewritten with numpy's values: a NaN stays a NaN value (pandas would make it null)
    values = req[column].to_numpy(dtype=float).copy()
    values[7] = value
    table = pq.read_table(run_dir / "requests.parquet")
    table = table.set_column(table.schema.get_field_index(column), column, pa.array(values))
    pq.write_table(table, run_dir / "requests.parquet")
    got = [m for c, m, _ in _messages(run_dir) if c == column]
    assert any(m.startswith(message) for m in got), got


def test_null_times_where_allowed_raise_nothing(tmp_path):
    req = _requests()
    req.loc[[2, 9], ["first_token_s", "end_s"]] = np.nan
    req.loc[[2, 9], "ok"] = False
    assert _messages(_write_requests(tmp_path, req)) == []


def test_token_counts_out_of_range_are_still_reported(tmp_path):
    req = _requests()
    req.loc[1, "prompt_tokens"] = -3
    got = [m for c, m, _ in _messages(_write_requests(tmp_path, req)) if c == "prompt_tokens"]
    assert got == ["negative token count: 1 row(s), e.g. 1"]
