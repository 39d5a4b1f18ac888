"""Boundary values of run-log validation and metrics: equal times, zero tokens, exactly at the
SLO, a fixed-cadence corridor (min = max), windows reaching past the observed span."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalkit.runlog import metrics
from evalkit.runlog.validate import validate_run

RUN = "fixture-s0-fixed_h"


@pytest.fixture
def run(copy_fixture) -> Path:
    return copy_fixture(f"runs/{RUN}")


def edit_requests(run_dir: Path, fn) -> None:
    path = run_dir / "requests.parquet"
    df = fn(pq.read_table(path).to_pandas())
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)


def edit_meta(run_dir: Path, fn) -> None:
    path = run_dir / "run.json"
    meta = json.loads(path.read_text())
    fn(meta)
    path.write_text(json.dumps(meta))


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


# --------------------------------------------------------------------------------- metrics

def test_exactly_at_slo_is_not_a_violation():
    slo = 2.0
    lat = np.array([np.nextafter(slo, 0), slo, np.nextafter(slo, 9), np.inf])
    assert metrics.violations(lat, slo).tolist() == [False, False, True, True]


def test_slo_flags_at_each_slo_boundary():
    arrival = np.zeros(4)
    first = np.array([1.0, 1.0, 1.0 + 1e-9, 0.5])
    end = np.array([5.0, 5.0 + 1e-9, 3.0, 0.5 + 0.2 * 2])       # last: 3 tokens at 0.2 s
    tokens = np.array([5, 5, 5, 3])
    ok = np.ones(4, bool)
    flags = metrics.slo_flags(arrival, first, end, tokens, ok,
                              {"e2e_s": 5.0, "ttft_s": 1.0, "tpot_s": 1.0})
    assert flags.e2e.tolist() == [False, True, False, False]
    assert flags.ttft.tolist() == [False, False, True, False]
    assert flags.good.tolist() == [True, False, False, True]
    exact = metrics.slo_flags(arrival, first, end, tokens, ok,
                              {"e2e_s": 5.0, "ttft_s": None, "tpot_s": 0.2})
    assert exact.tpot[3] == False  # noqa: E712 - exactly at the TPOT SLO
    assert exact.ttft is None


def test_tpot_zero_and_one_token_requests_cannot_violate():
    tp = metrics.tpot([1.0, 1.0, 1.0], [9.0, 9.0, 9.0], [0, 1, 2], [True, True, True])
    assert tp.tolist() == [0.0, 0.0, 8.0]


def test_failed_request_is_always_a_violation():
    flags = metrics.slo_flags([0.0], [0.1], [0.2], [3], [False],
                              {"e2e_s": 5.0, "ttft_s": None, "tpot_s": None})
    assert flags.good.tolist() == [False] and flags.e2e.tolist() == [True]


def test_time_exposure_is_clipped_to_the_span():
    span = (10.0, 20.0)
    # window [5, 12] covers 2 s of the span, [18, 30] covers 2 s: 4 / 10
    assert metrics.time_exposure([5.0, 18.0], [12.0, 30.0], span) == pytest.approx(0.4)
    # a window entirely outside the span adds nothing
    assert metrics.time_exposure([0.0, 25.0], [5.0, 30.0], span) == 0.0
    # touching the span edge adds nothing; covering all of it gives exactly 1
    assert metrics.time_exposure([20.0], [25.0], span) == 0.0
    assert metrics.time_exposure([0.0], [40.0], span) == 1.0
    assert np.isnan(metrics.time_exposure([0.0], [1.0], (5.0, 5.0)))


def test_observed_windows_boundaries():
    span = metrics.Span(10.0, 50.0, 8.0)
    starts = np.array([10.0, 42.0, 9.999, 42.001])
    ends = starts + 8.0
    assert metrics.observed_windows(starts, ends, span).tolist() == [True, True, False, False]
    assert metrics.windows_observed(starts, ends, span) == 2


def test_observed_span_clipped_to_horizon_and_failed_requests_run_to_it():
    span = metrics.observed_span([5.0, 6.0], [7.0, np.nan], 100.0, 8.0)
    assert (span.start_s, span.end_s) == (5.0, 100.0)
    span = metrics.observed_span([5.0, 6.0], [7.0, 130.0], 100.0, 8.0)
    assert span.end_s == 100.0
    span = metrics.observed_span([5.0, 6.0], [7.0, 9.0], 100.0, 8.0)
    assert span.end_s == 9.0


def test_request_overlap_touching_window_edge_is_not_exposure():
    # request [0, 10] and window [10, 18]: no positive overlap; [0, 10.001] overlaps
    assert metrics.overlaps_windows([0.0, 0.0], [10.0, 10.001], [10.0], [18.0]).tolist() == [
        False, True]
    assert metrics.overlaps_windows([18.0, 17.999], [20.0, 20.0], [10.0], [18.0]).tolist() == [
        False, True]


def test_step_rate_zero_steps_and_zero_width():
    assert np.isnan(metrics.step_rate(0, 0.0, 10.0, [], []))
    assert np.isnan(metrics.step_rate(5, 3.0, 3.0, [], []))
    assert metrics.step_rate(10, 0.0, 10.0, [], []) == 1.0
    assert metrics.step_rate(10, 0.0, 10.0, [0.0], [5.0]) == 2.0
    assert np.isnan(metrics.step_rate(10, 0.0, 10.0, [0.0], [10.0]))


def test_clopper_pearson_at_zero_and_n():
    from scipy.stats import binomtest

    for k in (0, 10):
        lo, hi = metrics.clopper_pearson(k, 10)
        ref = binomtest(k, 10).proportion_ci(0.95, method="exact")
        assert (lo, hi) == pytest.approx((ref.low, ref.high))
    assert metrics.clopper_pearson(0, 10)[0] == 0.0 and metrics.clopper_pearson(10, 10)[1] == 1.0


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


def test_corridor_tolerance_adds_one_and_a_half_steps():
    from evalkit.runlog.design import CORRIDOR_TOLERANCE_S, corridor_tolerance

    assert corridor_tolerance(float("nan")) == CORRIDOR_TOLERANCE_S
    assert corridor_tolerance(2.0) == pytest.approx(CORRIDOR_TOLERANCE_S + 3.0)
    assert corridor_tolerance(0.0, base=0.0) == 0.0


def test_mixed_schema_versions_listed_in_version_order(copy_fixture):
    from evalkit.runlog.validate import validate_runs

    runs = copy_fixture("runs")
    edit_meta(runs / RUN, lambda m: m.update({"schema_version": 2}))
    mixed = [p for p in validate_runs(runs).errors if "mix schema versions" in p.message]
    assert len(mixed) == 1
    message = mixed[0].message
    assert 0 <= message.index("v1: ") < message.index("v2: ")
    assert f"v2: {RUN})" in message


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


def test_report_splits_errors_and_warnings():
    from evalkit.runlog.validate import Problem, ValidationReport

    err = Problem("r1", None, "x", "bad", "fix it")
    warn = Problem("r2", None, "y", "odd", "check it", severity="warning")
    report = ValidationReport(runs_dir=Path("runs"), run_dirs=[], problems=[err, warn])
    assert report.errors == [err] and report.warnings == [warn]


@pytest.mark.parametrize("n", [7, 101, 5000])
def test_quantile_between_order_statistics_of_skewed_values(n):
    # exponential values are far from linear, so interpolating from the wrong pair shows
    x = np.random.default_rng(n).exponential(size=n) ** 3
    for q in (0.013, 0.37, 0.5, 0.951, 0.99):
        assert metrics.quantile(x, q) == pytest.approx(np.quantile(x, q), rel=1e-12)
    got = metrics.quantiles(x, (0.13, 0.37, 0.951))
    assert np.allclose(got, np.quantile(x, (0.13, 0.37, 0.951)), rtol=1e-12)


@pytest.mark.parametrize("strided, rest", [(100.0, "low"), (0.0, "high")])
def test_quantile_when_the_sample_bracket_misses(strided, rest):
    # every value the strided sample sees is the same, far from the bulk: the bracket
    # [a, b] misses the order statistics below (or above) it, and the full sort must decide
    n = 8192
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, n) if rest == "low" else rng.uniform(50, 51, n)
    x[:: n // metrics.SAMPLE_SIZE] = strided
    for q in (0.5, 0.9):
        assert metrics.quantile(x, q) == pytest.approx(np.quantile(x, q), rel=1e-12)


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


def test_completion_tied_window_is_one_millisecond():
    from evalkit.runlog.design import TIED_WINDOW_S, completion_tied_share

    assert TIED_WINDOW_S == 1e-3
    end = [1.0, 2.0, 3.0, 4.0]
    assert completion_tied_share([1.0005, 2.001, 3.0015, 4.0019], end) == 0.5


def test_step_ending_before_it_starts_is_reported(run):
    path = run / "steps.parquet"
    df = pq.read_table(path).to_pandas()
    df.loc[1, "end_s"] = df.loc[1, "start_s"] - 0.5
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    found = [p for p in errors(run) if p.file.endswith("steps.parquet")]
    assert any(p.column == "end_s" and "before start_s" in p.message for p in found), \
        [p.format() for p in found]


def test_completion_tied_share_without_sends_or_completions_is_zero():
    from evalkit.runlog.design import completion_tied_share

    assert completion_tied_share([], [1.0]) == 0.0
    assert completion_tied_share([np.nan], [1.0]) == 0.0
    assert completion_tied_share([1.0, 2.0], [np.nan, np.nan]) == 0.0


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


def test_huge_integers_are_described_not_printed_from_just_above_ten_to_the_thirty():
    from evalkit.runlog.schema import short_repr as _short
    assert _short(10 ** 30) == repr(10 ** 30)
    assert _short(-(10 ** 30)) == repr(-(10 ** 30))
    assert _short(10 ** 30 + 1) == "a 31-digit integer"
    assert _short(True) == "True"
    assert _short("x" * 61) == repr("x" * 61)[:60] + "... (63 characters)"
    assert _short("x" * 58) == repr("x" * 58)


def test_request_exposure_of_one_and_of_no_requests():
    one = dict(arrival_s=[1.0], sent_s=[1.0], ok=[True], merge_start=[2.0], merge_end=[3.0],
               horizon_s=10.0)
    assert metrics.request_exposure(end_s=[2.5], **one) == 1.0     # in flight in the window
    assert metrics.request_exposure(end_s=[1.5], **one) == 0.0     # done before it
    assert np.isnan(metrics.request_exposure([], [], [], [], [2.0], [3.0], 10.0))


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


def test_each_kind_of_leftover_is_named_for_what_it_is(copy_fixture):
    import shutil

    from evalkit.runlog.validate import validate_runs

    runs = copy_fixture("runs")
    shutil.copytree(runs / RUN, runs / f".{RUN}.tmp-0000abcd")
    shutil.copytree(runs / RUN, runs / f".{RUN}.damaged-0000abcd")
    shutil.copytree(runs / RUN, runs / f".{RUN}.old-0000abcd")         # its run is in place
    gone = "fixture-s1-fixed_h"
    (runs / gone).rename(runs / f".{gone}.old-0000abcd")                # replacement missing
    report = validate_runs(runs)
    by_file = {Path(p.file).name: p for p in report.problems if p.kind == "layout"}
    tmp, dmg, old = (by_file[f".{RUN}.{t}-0000abcd"] for t in ("tmp", "damaged", "old"))
    assert "interrupted write" in tmp.message and tmp.severity == "warning"
    assert "damaged copy" in dmg.message and dmg.severity == "warning"
    assert "previous copy" in old.message and old.severity == "warning"
    lost = by_file[f".{gone}.old-0000abcd"]
    assert "replacement never landed" in lost.message and lost.severity == "error"
    assert lost.run == gone


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


def _tied_share_brute(sent, end, window):
    done = [e for e in end if np.isfinite(e)]
    sends = [s for s in sent if np.isfinite(s)]
    if not sends or not done:
        return 0.0
    tied = 0
    for s in sends:
        before = [e for e in done if e <= s]
        tied += bool(before) and s - max(before) <= window
    return tied / len(sends)


@pytest.mark.parametrize("seed", range(5))
def test_design_shares_match_brute_force(seed):
    from evalkit.runlog.design import completion_tied_share, identical_arrival_share

    rng = np.random.default_rng(seed)
    n = 60
    # a grid of 1 ms steps makes exact ties, sends exactly 1 ms after a completion, and
    # repeated arrivals common; some requests never completed or were never sent
    sent = rng.integers(0, 80, n) * 1e-3
    end = rng.integers(0, 80, n) * 1e-3
    end[rng.random(n) < 0.2] = np.nan
    sent[rng.random(n) < 0.1] = np.nan
    for window in (0.0, 1e-3, 2e-3):
        assert completion_tied_share(sent, end, window) == pytest.approx(
            _tied_share_brute(sent, end, window), abs=1e-12)
    arrival = np.round(rng.integers(0, 40, n) * 0.5, 6)
    arrival[0] = np.nan
    finite = arrival[np.isfinite(arrival)]
    brute = np.mean([np.sum(finite == a) > 1 for a in finite])
    assert identical_arrival_share(arrival) == pytest.approx(brute)
    assert identical_arrival_share([1.0]) == 0.0 and identical_arrival_share([]) == 0.0
    assert identical_arrival_share([1.0, 1.0 + 4e-7]) == 1.0          # same microsecond
    assert identical_arrival_share([1.0, 1.0 + 2e-6]) == 0.0


def test_arrival_fingerprint_properties():
    from evalkit.runlog.design import arrival_fingerprint

    a = np.array([0.5, 1.25, 3.0, 7.125])
    fp = arrival_fingerprint(a)
    assert len(fp) == 32 and int(fp, 16) >= 0
    assert arrival_fingerprint(a[::-1]) == fp                     # order does not matter
    assert arrival_fingerprint(np.append(a, np.nan)) == fp        # nor unfinished NaN rows
    assert arrival_fingerprint(a + 4e-7) == fp                    # below the microsecond
    assert arrival_fingerprint(a + np.array([0, 0, 0, 2e-6])) != fp
    assert arrival_fingerprint(a[:3]) != fp
    assert arrival_fingerprint(np.append(a, a[-1])) != fp         # a repeated arrival counts


def test_design_facts_of_a_run():
    from evalkit.runlog.design import design_facts

    meta = {"role": "policy", "horizon_s": 300.0, "merge_duration_s": 8.0,
            "corridor": {"min_gap_s": 20.0, "max_gap_s": 200.0}, "training_start_s": 0.0}
    req = {"arrival_s": np.array([1.0, 2.0]), "sent_s": np.array([1.0, 2.0]),
           "end_s": np.array([1.5, 2.5])}
    merges = {"start_s": np.array([64.0, 150.0, 230.0]), "end_s": np.array([72.0, 160.0, 236.0])}
    steps = {"start_s": np.array([0.0, 2.0, 5.0]), "end_s": np.array([2.0, 5.0, 9.0])}
    facts = design_facts(meta, req, merges, steps)
    assert facts["merge_duration_median_s"] == 8.0
    assert facts["inner_step_median_s"] == 3.0
    assert facts["corridor_violations"] == 0 and facts["corridor_note"] == ""
    assert facts["completion_tied_share"] == 0.0 and facts["identical_arrival_share"] == 0.0
    # a merge 10 s after training start breaks min_gap; no steps -> no step slack
    early = {"start_s": np.array([10.0, 150.0]), "end_s": np.array([18.0, 158.0])}
    facts = design_facts(meta, req, early, None)
    assert facts["corridor_violations"] == 1 and "< min_gap" in facts["corridor_note"]
    assert np.isnan(facts["inner_step_median_s"])
    # a no-sync run is never held to the corridor; without merges no window length
    none = {"start_s": np.array([]), "end_s": np.array([])}
    facts = design_facts({**meta, "role": "no_sync"}, req, none, None)
    assert facts["corridor_violations"] == 0 and np.isnan(facts["merge_duration_median_s"])
    assert design_facts(meta, req, none, None)["corridor_violations"] == 1   # max_gap forces one


def test_milliseconds_heuristic_bounds():
    from evalkit.runlog.validate.tables import MS_FACTOR, MS_PLAUSIBLE, _looks_ms

    assert (MS_FACTOR, MS_PLAUSIBLE) == (100.0, 100.0)
    d = 8.0
    # over 100x the plausible value, and value / 1000 within 100x of it
    assert not _looks_ms(800.0, d) and _looks_ms(800.001, d)
    assert _looks_ms(800_000.0, d) and not _looks_ms(800_001.0, d)
    assert _looks_ms(80_000.0, d, slack=10.0) and not _looks_ms(80_001.0, d, slack=10.0)


def test_problem_format_names_run_file_and_column():
    from evalkit.runlog.validate import Problem

    p = Problem("r1", "runs/r1/requests.parquet", "end_s", "NaN time", "fix it")
    assert p.format() == ("ERROR    run=r1 file=runs/r1/requests.parquet column=end_s: "
                          "NaN time (fix: fix it)")
    w = Problem("r1", None, None, "odd", "look", severity="warning")
    assert w.format() == "WARNING  run=r1: odd (fix: look)"
    x = Problem("r1", None, None, "stopped", "rerun", kind="incomplete")
    assert x.format().startswith("EXCLUDED run=r1: stopped")


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


@pytest.mark.parametrize("corridor", [None, {}, {"min_gap_s": 20.0}, {"max_gap_s": 200.0}])
def test_corridor_check_without_both_gaps_says_so(corridor):
    from evalkit.runlog.design import run_corridor_violations

    meta = {"horizon_s": 300.0, "merge_duration_s": 8.0, "corridor": corridor}
    out = run_corridor_violations(meta, [64.0], [72.0])
    assert out == ["run.json has no corridor (min_gap_s/max_gap_s): F_K cannot be checked"]


def test_span_properties():
    s = metrics.Span(10.0, 25.0, 4.0)
    assert s.length_s == 15.0 and s.last_start_s == 21.0 and s.starts() == (10.0, 21.0)
    assert tuple(s) == (10.0, 25.0)
    assert metrics.Span(30.0, 25.0, 4.0).length_s == 0.0           # an empty span
    assert s == metrics.Span(10, 25, 4) and s != metrics.Span(10, 25, 5) and s != (10.0, 25.0)
    assert repr(s) == "Span(start_s=10.0, end_s=25.0, D=4.0)"


def test_merge_scale_checked_for_a_sub_second_d(run):
    # D = 0.5 s and windows logged in milliseconds (500): the scale check still applies
    edit_meta(run, lambda m: m.update({"merge_duration_s": 0.5}))
    path = run / "merges.parquet"
    df = pq.read_table(path).to_pandas()
    df["end_s"] = df["start_s"] + 500.0
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    scale = [p for p in validate_run(run) if p.kind == "scale" and p.column == "end_s"]
    assert len(scale) == 1 and "merge_duration_s = 0.5 s" in scale[0].message


@pytest.mark.parametrize("threads, window", [(1, None), (2, 1), (3, 4), (4, None)])
def test_map_ordered_yields_every_result_in_order(threads, window):
    from evalkit.fsutil import map_ordered

    out = list(map_ordered(lambda x: x * x, range(11), threads=threads, window=window))
    assert out == [x * x for x in range(11)]
    assert list(map_ordered(lambda x: x, [], threads=threads)) == []
