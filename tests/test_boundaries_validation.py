"""Run-log validation rule by rule, on in-memory tables and small run directories.

Every check of :mod:`evalkit.runlog.validate` is called with values at, just inside and just
outside its threshold, and the problems it reports are compared in full (column, message,
severity): a rule that stops firing, fires on a valid neighbour, names the wrong row or
counts wrongly fails here.  The design facts of :mod:`evalkit.runlog.design` are compared
with independent computations (hashlib, brute force).
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalkit.runlog import design
from evalkit.fsutil import map_ordered
from evalkit.runlog import validate as v
from evalkit.runlog.validate import problem as vproblem
from evalkit.runlog.validate import store as vstore
from evalkit.runlog.validate import tables as vtables
from evalkit.runlog.validate import Problem, RunCheck, ValidationReport

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
POLICY = "fixture-s0-fixed_h"
RUN_DIR = Path("runs") / "r"
META = {"role": "policy", "horizon_s": 300.0, "merge_duration_s": 8.0, "slo": {"e2e_s": 5.0}}


# ----------------------------------------------------------------------------- helpers


def requests(n: int = 3, **cols) -> pa.Table:
    base = {
        "request_id": pa.array(range(n), pa.int64()),
        "arrival_s": [float(i) for i in range(n)],
        "sent_s": [float(i) for i in range(n)],
        "first_token_s": [i + 0.1 for i in range(n)],
        "end_s": [i + 0.5 for i in range(n)],
        "prompt_tokens": pa.array([10] * n, pa.int64()),
        "output_tokens": pa.array([5] * n, pa.int64()),
        "ok": [True] * n,
        "error": pa.array([None] * n, pa.string()),
    }
    for key, value in cols.items():
        if value is None:
            del base[key]
        else:
            base[key] = value
    return pa.table(base)


def merges(start, end, idx=True) -> pa.Table:
    cols = {"start_s": pa.array(start, pa.float64()), "end_s": pa.array(end, pa.float64())}
    if idx is True:
        cols = {"merge_idx": pa.array(range(len(start)), pa.int64()), **cols}
    elif idx is not None:
        cols = {"merge_idx": pa.array(idx, pa.int64()), **cols}
    return pa.table(cols)


def found(problems) -> list[tuple]:
    return [(p.column, p.message, p.severity, p.kind) for p in problems]


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


def err(column, message, kind="format"):
    return (column, message, "error", kind)


def copy_run(tmp_path, name=POLICY, dest=None) -> Path:
    run = tmp_path / (dest or name)
    shutil.copytree(FIXTURES / name, run)
    return run


def edit_meta(run: Path, **changes) -> None:
    meta = json.loads((run / "run.json").read_text())
    for key, value in changes.items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    (run / "run.json").write_text(json.dumps(meta))


# ----------------------------------------------------------------------------- small helpers


@pytest.mark.parametrize("value, number, integer", [
    (1, True, True), (0.5, True, False), (-2, True, True), (True, False, False),
    (False, False, False), (float("nan"), False, False), (float("inf"), False, False),
    ("1", False, False), (None, False, False), (2 ** 70, True, True),
])
def test_number_and_integer_predicates(value, number, integer):
    assert vproblem._is_number(value) is number
    assert vproblem._is_int(value) is integer


@pytest.mark.parametrize("value, expected", [
    ("a", True), (" x ", True), ("", False), ("   ", False), (5, False), (None, False),
    (["a"], False),
])
def test_nonempty_string_predicate(value, expected):
    assert vproblem._nonempty_str(value) is expected


def test_short_cuts_at_sixty_characters_and_describes_huge_integers():
    sixty = "a" * 58                       # repr adds two quotes: 60 characters
    assert vproblem._short(sixty) == repr(sixty)
    sixty_one = "a" * 59
    assert vproblem._short(sixty_one) == repr(sixty_one)[:60] + "... (61 characters)"
    assert vproblem._short(10 ** 30) == str(10 ** 30)
    assert vproblem._short(10 ** 30 + 1) == "a 31-digit integer"
    assert vproblem._short(-(10 ** 30) - 1) == "a 31-digit integer"
    assert vproblem._short(-(10 ** 30)) == str(-(10 ** 30))
    assert vproblem._short(True) == "True" and vproblem._short("x") == "'x'" and vproblem._short(2.5) == "2.5"


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


# ----------------------------------------------------------------------------- drivers


def test_inspect_run_of_a_missing_directory(tmp_path):
    check = v.inspect_run(tmp_path / "nope")
    assert check.meta is None and check.run == "nope"
    assert [(p.file, p.message, p.fix) for p in check.problems] == [
        (str(tmp_path / "nope"), "run directory does not exist", "pass an existing run directory")]


def test_inspect_run_of_a_directory_it_may_not_search(monkeypatch, tmp_path):
    from evalkit.runlog.io import UnreadableRun

    target = tmp_path / "locked"
    real_is_dir = Path.is_dir

    def is_dir(self):
        if self == target:
            raise PermissionError(13, "Permission denied")
        return real_is_dir(self)

    monkeypatch.setattr(Path, "is_dir", is_dir)
    check = v.inspect_run(target)
    assert [(p.run, p.file, p.message, p.fix, p.kind) for p in check.problems] == [
        ("locked", str(target), "cannot read: Permission denied", UnreadableRun.READ_FIX,
         "unreadable")]


def test_inspect_run_with_an_unreadable_run_json(monkeypatch, tmp_path):
    from evalkit.runlog.io import UnreadableRun

    run = copy_run(tmp_path)

    def denied(run_dir):
        raise UnreadableRun.from_os_error(PermissionError(13, "Permission denied"),
                                          Path(run_dir) / "run.json")

    monkeypatch.setattr(v, "read_meta", denied)
    check = v.inspect_run(run)
    assert [(p.file, p.message, p.fix, p.kind) for p in check.problems] == [
        (str(run / "run.json"), "cannot read: Permission denied", UnreadableRun.READ_FIX,
         "unreadable")]
    assert check.meta is None


def test_inspect_run_with_run_json_that_is_not_json(tmp_path):
    run = copy_run(tmp_path)
    (run / "run.json").write_text("{not json")
    check = v.inspect_run(run)
    (p,) = check.problems
    assert p.file == str(run / "run.json") and p.column is None and p.kind == "format"
    assert p.message.startswith("run.json is not valid JSON")
    assert p.fix == "rewrite the run or repair the JSON"
    assert check.meta is None and check.tables == {}


def test_inspect_run_names_the_run_by_its_run_id(tmp_path):
    run = copy_run(tmp_path, dest="renamed")
    check = v.inspect_run(run)
    assert check.run == POLICY
    assert [(p.run, p.column) for p in check.problems] == [(POLICY, "run_id")]
    edit_meta(run, run_id="")
    check = v.inspect_run(run)
    assert check.run == "renamed" and [p.column for p in check.problems] == ["run_id"]


def test_inspect_run_reads_every_present_table(tmp_path):
    check = v.inspect_run(copy_run(tmp_path))
    assert check.problems == [] and not check.incomplete and check.errors == []
    assert sorted(check.tables) == ["merges", "requests", "steps"]
    assert check.meta["run_id"] == POLICY


@pytest.mark.parametrize("version, unknown", [(1, False), (2, True), (0, True), ("1", True)])
def test_schema_version_gate(tmp_path, version, unknown):
    run = copy_run(tmp_path)
    edit_meta(run, schema_version=version, policy="")
    check = v.inspect_run(run)
    if unknown:
        (p,) = check.problems
        assert p.column == "schema_version" and check.tables == {}
        assert p.message == f"unknown schema_version {version!r}; this evalkit reads 1"
    else:
        assert [p.column for p in check.problems] == ["policy"]
        assert sorted(check.tables) == ["merges", "requests", "steps"]


def test_missing_schema_version_is_a_missing_key_not_an_unknown_version(tmp_path):
    run = copy_run(tmp_path)
    edit_meta(run, schema_version=None)
    check = v.inspect_run(run)
    assert [(p.column, p.message) for p in check.problems] == [
        ("schema_version", "required key is missing")]
    assert sorted(check.tables) == ["merges", "requests", "steps"]


def test_incomplete_run_is_excluded_unless_asked(tmp_path):
    run = copy_run(tmp_path)
    edit_meta(run, complete=False, error="x" * 600)
    (pq.read_table(run / "requests.parquet"))
    check = v.inspect_run(run)
    (p,) = check.problems
    assert check.incomplete and p.kind == "incomplete" and p.column == "complete"
    assert p.message == (f"incomplete run (complete: false) ({'x' * 500}): excluded, never "
                         "audited")
    assert check.tables == {}
    check = v.inspect_run(run, include_incomplete=True)
    assert check.problems == [] and not check.incomplete
    assert sorted(check.tables) == ["merges", "requests", "steps"]
    edit_meta(run, error=None)
    (p,) = v.inspect_run(run).problems
    assert p.message == "incomplete run (complete: false): excluded, never audited"


def test_inspect_run_checks_steps(tmp_path):
    run = copy_run(tmp_path)
    path = run / "steps.parquet"
    steps = pq.read_table(path).to_pandas()
    steps.loc[1, "end_s"] = steps.loc[1, "start_s"] - 1.0
    pq.write_table(pa.Table.from_pandas(steps, preserve_index=False), path)
    problems = v.validate_run(run)
    assert [(Path(p.file).name, p.column) for p in problems] == [("steps.parquet", "end_s")]
    assert problems[0].message == "step end_s before start_s: 1 row(s), e.g. row 1"


def test_validate_run_lists_errors_before_warnings(tmp_path):
    run = copy_run(tmp_path)
    path = run / "requests.parquet"
    df = pq.read_table(path).to_pandas()
    df.loc[0, "sent_s"] = df.loc[0, "arrival_s"] - 0.5         # warning, found first
    df.loc[3, "prompt_tokens"] = -1                            # error, found later
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    problems = v.validate_run(run)
    assert [(p.severity, p.column) for p in problems] == [
        ("error", "prompt_tokens"), ("warning", "sent_s")]
    check = v.inspect_run(run)
    assert [p.severity for p in check.problems] == ["warning", "error"]
    report = v.validate_runs(tmp_path)
    assert [p.severity for p in report.problems] == ["error", "warning"]
    assert report.ok is False and len(report.warnings) == 1 and len(report.errors) == 1


def test_validate_runs_calls_on_run_with_tables_then_drops_them(tmp_path):
    copy_run(tmp_path)
    copy_run(tmp_path, "fixture-s0-no_sync")
    seen = []

    def on_run(check):
        seen.append((check.run, sorted(check.tables)))

    for threads in (1, 2):
        seen.clear()
        report = v.validate_runs(tmp_path, on_run=on_run, threads=threads)
        assert sorted(seen) == [("fixture-s0-fixed_h", ["merges", "requests", "steps"]),
                                ("fixture-s0-no_sync", ["merges", "requests", "steps"])]
        assert report.runs == ["fixture-s0-fixed_h", "fixture-s0-no_sync"]
        assert report.ok and report.problems == []


def test_validate_runs_reports_a_duplicate_run_id(tmp_path):
    copy_run(tmp_path)
    copy_run(tmp_path, dest="copy")
    report = v.validate_runs(tmp_path)
    dup = [p for p in report.problems if p.message == "run_id used by 2 directories"]
    assert len(dup) == 1 and dup[0].run == POLICY and dup[0].column == "run_id"
    assert dup[0].file == f"{tmp_path / 'copy'}, {tmp_path / POLICY}"


# ----------------------------------------------------------------------------- across runs


def _report(root="R"):
    return ValidationReport(Path(root), [], [])


def test_cross_run_duplicates_and_schema_versions():
    report = _report()
    vstore._cross_run(report, [(Path("a"), "r1", {"schema_version": 1}),
                          (Path("b"), "r2", {"schema_version": 1}),
                          (Path("c"), "r3", None)])
    assert report.problems == []
    vstore._cross_run(report, [(Path("a"), "r1", {"schema_version": 1}),
                          (Path("b"), "r1", {})])
    assert found(report.problems) == [err("run_id", "run_id used by 2 directories")]
    assert report.problems[0].file == "a, b" and report.problems[0].run == "r1"
    report = _report()
    vstore._cross_run(report, [(Path("a"), "rb", {"schema_version": 2}),
                          (Path("b"), "ra", {"schema_version": 1}),
                          (Path("c"), "rc", {"schema_version": 1}),
                          (Path("d"), "rd", None)])
    (p,) = report.problems
    assert (p.run, p.file, p.column) == ("R", None, "schema_version")
    assert p.message == "runs mix schema versions (v1: ra, rc; v2: rb)"


def test_layout_problems_of_a_runs_dir(tmp_path):
    report = v.validate_runs(tmp_path / "missing")
    (p,) = report.problems
    assert p.message == "RUNS_DIR does not exist" and p.run == str(tmp_path / "missing")
    assert p.fix == "pass the directory that holds the run directories"
    (tmp_path / "file").write_text("x")
    (p,) = v.validate_runs(tmp_path / "file").problems
    assert p.message == "RUNS_DIR is not a directory"
    (tmp_path / "empty").mkdir()
    (p,) = v.validate_runs(tmp_path / "empty").problems
    assert p.message == "no runs found (no run.json below RUNS_DIR)"
    assert p.file == str(tmp_path / "empty") and not v.validate_runs(tmp_path / "empty").ok


def test_orphans_and_leftovers_are_reported_beside_the_runs(tmp_path):
    root = tmp_path / "runs"
    copy_run(root)
    orphan = root / "orphan"
    orphan.mkdir()
    shutil.copy(FIXTURES / POLICY / "requests.parquet", orphan / "requests.parquet")
    (root / f".{POLICY}.tmp-1").mkdir()
    (root / ".gone.old-1").mkdir()
    report = v.validate_runs(root)
    got = sorted((p.run, p.kind, p.severity) for p in report.problems)
    assert got == [(f".{POLICY}.tmp-1", "layout", "warning"), ("gone", "layout", "error"),
                   ("orphan", "layout", "error")]
    assert report.runs == [POLICY]


def test_layout_problems_of_a_listing():
    from evalkit.runlog.io import RunListing, UnreadableRun

    listing = RunListing(Path("R"), unreadable=[(Path("R/locked"), "cannot list it")],
                         orphans=[Path("R/orphan")])
    got = vstore._layout_problems(listing)
    assert [(p.run, p.file, p.message, p.kind, p.severity) for p in got] == [
        ("locked", "R/locked", "cannot list it: any run inside is not checked and would be "
         "missing", "unreadable", "error"),
        ("orphan", "R/orphan/run.json", "directory holds Parquet files but no run.json",
         "layout", "error")]
    assert got[0].fix == UnreadableRun.READ_FIX


@pytest.mark.parametrize("run_dirs, unreadable, no_runs", [
    ([], [], True), ([Path("R/a")], [], False), ([], [(Path("R/x"), "denied")], False),
    ([Path("R/a")], [(Path("R/x"), "denied")], False)])
def test_no_runs_found_only_when_nothing_is_there(monkeypatch, run_dirs, unreadable, no_runs):
    from evalkit.runlog.io import RunListing

    monkeypatch.setattr(vstore, "list_runs", lambda root: RunListing(root, run_dirs=list(run_dirs),
                                                                  unreadable=list(unreadable)))
    report, dirs = vstore._start_report("R")
    assert dirs == run_dirs and report.run_dirs == run_dirs
    messages = [p.message for p in report.problems]
    assert ("no runs found (no run.json below RUNS_DIR)" in messages) is no_runs
    assert len(messages) == len(unreadable) + no_runs


def test_unlistable_table_path_is_unreadable_not_missing(monkeypatch, tmp_path):
    real_exists = Path.exists

    def exists(self, *args, **kwargs):
        if self.name == "merges.parquet":
            raise PermissionError(13, "Permission denied")
        return real_exists(self, *args, **kwargs)

    monkeypatch.setattr(Path, "exists", exists)
    out: list[Problem] = []
    assert vtables._read_table("r", tmp_path, "merges", out) is None
    assert found(out) == [(None, "cannot read: Permission denied", "error", "unreadable")]


def test_leftover_of_each_kind(tmp_path):
    (tmp_path / "r1").mkdir()
    tmp = vstore._leftover_problem(tmp_path / ".r1.tmp-9")
    assert (tmp.run, tmp.severity, tmp.kind) == (".r1.tmp-9", "warning", "layout")
    assert tmp.message.startswith("left by an interrupted write of run r1")
    damaged = vstore._leftover_problem(tmp_path / ".r1.damaged-9")
    assert damaged.severity == "warning" and damaged.message.startswith("a damaged copy of run r1")
    old_landed = vstore._leftover_problem(tmp_path / ".r1.old-9")
    assert old_landed.severity == "warning" and old_landed.run == ".r1.old-9"
    assert old_landed.message.startswith("the previous copy of run r1")
    old_lost = vstore._leftover_problem(tmp_path / ".r2.old-9")
    assert (old_lost.run, old_lost.severity) == ("r2", "error")
    assert old_lost.fix.startswith("restore it: mv .r2.old-9 r2")


# ----------------------------------------------------------------------------- reports


def test_problem_format_labels_and_locations():
    p = Problem("r", "f.parquet", "c", "bad", "fix it")
    assert p.format() == "ERROR    run=r file=f.parquet column=c: bad (fix: fix it)"
    w = Problem("r", None, None, "odd", "look", severity="warning")
    assert w.format() == "WARNING  run=r: odd (fix: look)"
    x = Problem("r", "run.json", None, "gone", "rerun", kind="incomplete")
    assert x.format() == "EXCLUDED run=r file=run.json: gone (fix: rerun)"
    e = p.as_error()
    assert e.message == "run r: bad" and e.fix == "fix it"


def test_report_properties_and_summary_line():
    problems = [
        Problem("a", "fa", None, "m", "f"),
        Problem("a", "fa2", None, "m", "f"),
        Problem("b", "fb", None, "m", "f", severity="warning"),
        Problem("c", "fc", "complete", "m", "f", kind="incomplete"),
        Problem("d", "fd", None, "m", "f", kind="unreadable"),
        Problem("d", "fd", None, "m", "f", kind="unreadable"),
        Problem("e", "fe", None, "m", "f", kind="unreadable"),
    ]
    report = ValidationReport(Path("R"), [Path("a"), Path("b"), Path("c")], problems)
    assert report.errors == [problems[i] for i in (0, 1, 3, 4, 5, 6)]
    assert report.warnings == [problems[2]]
    assert report.excluded == ["c"]
    assert report.unreadable == problems[4:]
    assert not report.ok
    assert report.summary_line() == (
        "INVALID: 3 run(s) checked in R; 5 error(s) in 3 run(s), 1 warning(s), "
        "1 incomplete run(s) excluded, 2 unreadable path(s)")
    ok = ValidationReport(Path("R"), [Path("a")], [problems[2]])
    assert ok.ok and ok.summary_line() == (
        "valid: 1 run(s) checked in R; 0 error(s) in 0 run(s), 1 warning(s), "
        "0 incomplete run(s) excluded")
    ok.raise_if_invalid()
    with pytest.raises(Exception) as info:
        report.raise_if_invalid()
    assert "run a: m" in str(info.value)


def test_run_check_properties():
    problems = [Problem("r", None, None, "m", "f", severity="warning"),
                Problem("r", None, None, "m", "f", kind="incomplete")]
    check = RunCheck(Path("r"), "r", None, problems)
    assert check.incomplete and check.errors == [problems[1]]
    check = RunCheck(Path("r"), "r", None, problems[:1])
    assert not check.incomplete and check.errors == []


def test_map_ordered_cancels_queued_work_when_the_consumer_stops():
    started = []
    lock = threading.Lock()

    def work(item):
        with lock:
            started.append(item)
        if item:
            time.sleep(0.2)
        return item

    gen = map_ordered(work, range(6), threads=2, window=4)
    assert next(gen) == 0
    gen.close()
    # 1..3 were submitted; the two workers can only have started 1 and 2 (each sleeps),
    # so 3 was still queued and is cancelled; 4 and 5 were never submitted
    assert 0 in started and max(started) <= 2


# ----------------------------------------------------------------------------- design facts


def _fingerprint_reference(arrivals) -> str:
    a = sorted(x for x in arrivals if math.isfinite(x))
    ticks = np.array([round(x * 1_000_000) for x in a], dtype=np.int64)
    return hashlib.sha256(str(len(a)).encode() + ticks.tobytes()).hexdigest()[:32]


@pytest.mark.parametrize("arrivals", [[], [1.0], [0.5, 0.25, 3.000001], [2.0, float("nan"), 1.0],
                                      [1.0, 1.0, 7.123456]])
def test_arrival_fingerprint_matches_hashlib(arrivals):
    assert design.arrival_fingerprint(arrivals) == _fingerprint_reference(arrivals)


def test_arrival_fingerprint_resolves_one_microsecond():
    assert design.arrival_fingerprint([1.0]) != design.arrival_fingerprint([1.000001])
    assert design.arrival_fingerprint([1.0]) == design.arrival_fingerprint([1.0000001])
    assert design.arrival_fingerprint([1.0, 2.0]) == design.arrival_fingerprint([2.0, 1.0])


def _tied_brute(sent, end, window):
    ends = [e for e in end if math.isfinite(e)]
    sends = [s for s in sent if math.isfinite(s)]
    if not sends or not ends:
        return 0.0
    tied = sum(1 for s in sends if any(0 <= s - e <= window for e in ends if e <= s)
               and s - max(e for e in ends if e <= s) <= window)
    return tied / len(sends)


@pytest.mark.parametrize("sent, end, expected", [
    ([1.0005], [1.0], 1.0), ([1.001], [1.0], 1.0), ([1.0011], [1.0], 0.0), ([1.0], [1.0], 1.0),
    ([0.5], [1.0], 0.0), ([1.0005, 5.0], [1.0, 3.0], 0.5), ([5.0, 1.0005], [3.0, 1.0], 0.5),
    ([float("nan"), 1.0005], [1.0], 1.0), ([float("nan")], [1.0], 0.0), ([1.0], [], 0.0),
    ([1.0], [float("nan")], 0.0), ([2.0005, 3.0], [1.0, 2.0, 2.5], 0.5),
    ([1.0005, 2.0005, 9.0], [1.0, 2.0], 2 / 3), ([1.0004, 1.0008], [1.0], 1.0),
    ([1.5], [1.0, 2.0], 0.0), ([0.001], [0.0], 1.0), ([0.0011], [0.0], 0.0),
])
def test_completion_tied_share_cases(sent, end, expected):
    got = design.completion_tied_share(sent, end)
    assert got == pytest.approx(expected, abs=1e-12)
    assert got == pytest.approx(_tied_brute(sent, end, design.TIED_WINDOW_S), abs=1e-12)


@pytest.mark.parametrize("arrivals, expected", [
    ([], 0.0), ([1.0], 0.0), ([1.0, 1.0], 1.0), ([1.0, 2.0], 0.0), ([1.0, 1.0, 2.0, 3.0], 0.5),
    ([1.0, 1.0, 1.0, 2.0], 0.75), ([1.0, 2.0, 3.0], 0.0), ([5.0, 5.0000001, float("nan")], 1.0),
    ([5.0, 5.000001], 0.0),
])
def test_identical_arrival_share_cases(arrivals, expected):
    assert design.identical_arrival_share(arrivals) == pytest.approx(expected, abs=1e-12)


def test_corridor_tolerance_values():
    assert design.corridor_tolerance(0.0) == pytest.approx(0.05)
    assert design.corridor_tolerance(float("nan")) == pytest.approx(0.05)
    assert design.corridor_tolerance(2.0) == pytest.approx(3.05)
    assert design.corridor_tolerance(0.1, base=0.0) == pytest.approx(0.15)


CORRIDOR_META = {"horizon_s": 300.0, "merge_duration_s": 8.0,
                 "corridor": {"min_gap_s": 20.0, "max_gap_s": 200.0}}


@pytest.mark.parametrize("corridor", [None, {}, {"min_gap_s": 20.0}, {"max_gap_s": 200.0},
                                      {"min_gap_s": None, "max_gap_s": 200.0}])
def test_run_corridor_violations_without_both_gaps(corridor):
    meta = {**CORRIDOR_META, "corridor": corridor}
    assert design.run_corridor_violations(meta, [64.0], [72.0]) == [
        "run.json has no corridor (min_gap_s/max_gap_s): F_K cannot be checked"]


def test_run_corridor_violations_measures_from_training_start():
    starts, ends = np.array([60.0, 150.0, 240.0]), np.array([68.0, 158.0, 248.0])
    assert design.run_corridor_violations(CORRIDOR_META, starts, ends) == []
    # the first merge must come at least min_gap after training started (the caller's
    # training start: the plan's or the run's time origin)
    (msg,) = design.run_corridor_violations(CORRIDOR_META, starts, ends, train_start=50.0)
    assert msg.startswith("first merge 10 s after training start < min_gap 20 s")
    # a run's own training_start_s does not move its edge
    late = {**CORRIDOR_META, "training_start_s": 50.0}
    assert design.run_corridor_violations(late, starts, ends) == []
    # measured from 0 when training_start_s is absent or null: exactly min_gap is fine
    edge = np.array([20.0, 150.0, 240.0])
    edge_ends = edge + 8.0
    assert design.run_corridor_violations(CORRIDOR_META, edge - 0.05, edge_ends) == []
    assert design.run_corridor_violations({**CORRIDOR_META, "training_start_s": None},
                                          edge - 0.05, edge_ends) == []
    assert design.run_corridor_violations(CORRIDOR_META, edge - 0.06, edge_ends) != []
    # the tolerance grows with the inner step
    assert design.run_corridor_violations(CORRIDOR_META, edge - 1.0, edge_ends, 1.0) == []
    assert design.run_corridor_violations(CORRIDOR_META, edge - 1.0, edge_ends, 0.5) != []


def test_design_facts_exact():
    meta = {**CORRIDOR_META, "role": "policy"}
    req = {"arrival_s": np.array([0.0, 1.0, 1.0, 3.0]), "sent_s": np.array([0.0, 1.0, 1.0, 3.0]),
           "end_s": np.array([0.9995, 2.0, 2.5, 4.0])}
    mer = {"start_s": np.array([60.0, 150.0, 240.0]), "end_s": np.array([68.0, 159.0, 250.0])}
    steps = {"start_s": np.array([0.0, 1.0, 2.0]), "end_s": np.array([1.0, 2.5, 4.0])}
    facts = design.design_facts(meta, req, mer, steps)
    assert facts == {
        "arrival_fingerprint": _fingerprint_reference(req["arrival_s"]),
        "merge_duration_median_s": 9.0,
        "corridor_violations": 0,
        "corridor_note": "",
        "completion_tied_share": 0.5,
        "identical_arrival_share": 0.5,
        "inner_step_median_s": 1.5,
    }
    assert set(facts) == set(design.DESIGN_COLUMNS)
    no_steps = design.design_facts(meta, req, mer, None)
    assert math.isnan(no_steps["inner_step_median_s"])
    empty_steps = design.design_facts(meta, req, mer, {"start_s": [], "end_s": []})
    assert math.isnan(empty_steps["inner_step_median_s"])
    no_merges = design.design_facts(meta, req, {"start_s": [], "end_s": []}, None)
    assert math.isnan(no_merges["merge_duration_median_s"])


def test_design_facts_corridor_only_for_runs_that_merge_by_policy():
    bad = {"start_s": np.array([5.0]), "end_s": np.array([13.0])}     # first merge too early
    req = {"arrival_s": [0.0], "sent_s": [0.0], "end_s": [1.0]}
    policy = design.design_facts({**CORRIDOR_META, "role": "policy"}, req, bad, None)
    assert policy["corridor_violations"] == len(policy["corridor_note"].split("; ")) >= 1
    assert "first merge 5 s after training start < min_gap 20 s" in policy["corridor_note"]
    no_sync = design.design_facts({**CORRIDOR_META, "role": "no_sync"}, req, bad, None)
    assert no_sync["corridor_violations"] == 0 and no_sync["corridor_note"] == ""
