"""Importers accept only what `evalkit validate` accepts: token counts and times within the
ranges of evalkit.limits (no int64 wrap, no 1e308 s), exit 2 naming the file, the field and
the allowed range; whatever else validate refuses is refused before anything is written; and
every importer's output passes validate."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.limits import MAX_LOG_TIME_S, MAX_MERGES, MAX_TOKENS, MAX_TRACE_REQUESTS
from evalkit.runlog.validate import validate_runs
from tests.interop.test_guidellm import MERGES_UNIX, make_report
from tests.interop.test_summary_table import TABLE
from tests.interop.test_vllm_bench import _files, _result

TOKEN_RANGE = f"[0, {MAX_TOKENS:,}]"
TIME_RANGE = f"[0, {MAX_LOG_TIME_S:,.0f}] s"


def _invoke(args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _vllm(tmp_path, data, merges="start_s,end_s\n5.0,13.0\n20.0,28.0\n"):
    res, mer = _files(tmp_path, data, merges)
    runs = tmp_path / "runs"
    out = _invoke(["import", "vllm-bench", res, "--out", runs, "--merges", mer,
                   "--policy", "wa", "--seed", "0", "--slo-e2e", "1.2"])
    return out, res, runs


def _nothing_written(runs):
    return not runs.exists() or not any(runs.iterdir())


@pytest.mark.parametrize("key,index,value,shown", [
    ("output_lens", 5, 2 ** 70, TOKEN_RANGE),
    ("input_lens", 0, MAX_TOKENS + 1, TOKEN_RANGE),
    ("ttfts", 2, 1e12, TIME_RANGE),
    ("latencies", 7, 1e308, TIME_RANGE),
])
def test_vllm_values_beyond_the_log_ranges_exit_2_naming_field_and_range(tmp_path, key, index,
                                                                         value, shown):
    data = _result()
    data[key][index] = value
    res, path, runs = _vllm(tmp_path, data)
    assert res.exit_code == 2, res.output
    assert str(path) in res.output and f"'{key}'" in res.output
    assert f"entry {index} is {value!r}" in res.output and shown in res.output
    assert _nothing_written(runs)


def test_vllm_start_time_1e308_exits_2(tmp_path):
    data = _result()
    data["start_times"][9] = 1e308
    res, path, runs = _vllm(tmp_path, data)
    assert res.exit_code == 2, res.output
    assert str(path) in res.output and "'start_times'" in res.output
    assert "start_times[9] = 1e+308" in res.output and TIME_RANGE in res.output
    assert _nothing_written(runs)


def test_what_validate_refuses_is_refused_before_anything_is_written(tmp_path):
    """Merge windows before the first request (negative run times): no source rule names
    them, validate does -- the import says so and writes nothing."""
    res, path, runs = _vllm(tmp_path, _result(), merges="start_s,end_s\n-9.0,-5.0\n2.0,4.0\n")
    assert res.exit_code == 2, res.output
    assert "would not pass evalkit validate" in res.output and "negative time" in res.output
    assert str(path) in res.output and "'start_s'" in res.output
    assert _nothing_written(runs)


def _guidellm(tmp_path, edit=None):
    report = tmp_path / "benchmarks.json"
    raw = make_report(report)
    if edit is not None:
        edit(raw)
        report.write_text(json.dumps(raw))
    merges = tmp_path / "merges.csv"
    merges.write_text("start_s,end_s\n" + "".join(f"{a},{b}\n" for a, b in MERGES_UNIX))
    runs = tmp_path / "runs"
    res = _invoke(["import", "guidellm", report, "--out", runs, "--merges", merges,
                   "--policy", "p", "--seed", "1", "--slo-e2e", "0.5"])
    return res, report, runs


def _first_successful(raw):
    return raw["benchmarks"][1]["requests"]["successful"][3]


def test_guidellm_token_count_2_pow_70_exits_2(tmp_path):
    def edit(raw):
        _first_successful(raw)["prompt_tokens"] = 2 ** 70
    res, report, runs = _guidellm(tmp_path, edit)
    assert res.exit_code == 2, res.output
    assert str(report) in res.output and "benchmarks[1].requests.successful[].prompt_tokens" \
        in res.output and TOKEN_RANGE in res.output
    assert _nothing_written(runs)


def test_guidellm_time_1e308_exits_2(tmp_path):
    def edit(raw):
        req = _first_successful(raw)
        req["info"]["timings"]["request_end"] = 1e308
    res, report, runs = _guidellm(tmp_path, edit)
    assert res.exit_code == 2, res.output
    assert str(report) in res.output and "info.timings.request_end" in res.output
    assert TIME_RANGE in res.output and _nothing_written(runs)


@pytest.mark.parametrize("column,value,shown", [
    ("n_requests", 10 ** 12, f"[1, {MAX_TRACE_REQUESTS:,}]"),
    ("K", MAX_MERGES + 1, f"[0, {MAX_MERGES:,}]"),
])
def test_table_counts_beyond_a_run_exit_2_before_anything_is_allocated(tmp_path, column,
                                                                        value, shown):
    """A row of 10**12 requests would synthesise 10**12 request rows (out of memory)."""
    n, k = (value, 2) if column == "n_requests" else (4_000_000, value)
    table = tmp_path / "table.csv"
    table.write_text("policy,seed,violation_rate,n_requests,K,role,draws_per_row\n"
                     f"wa,0,0.5,{n},{k},policy,1\nwa,0,0.5,{n},{k},matched_random,1\n")
    res = _invoke(["import", "table", table, "--out", tmp_path / "runs"])
    assert res.exit_code == 2, res.output
    assert str(table) in res.output and f"'{column}'" in res.output and shown in res.output
    assert not (tmp_path / "runs").exists()


def test_every_importers_output_passes_validate(tmp_path):
    for sub in ("v", "g"):
        (tmp_path / sub).mkdir()
    res, _, runs = _vllm(tmp_path / "v", _result())
    assert res.exit_code == 0, res.output
    assert validate_runs(runs).ok
    res, _, runs = _guidellm(tmp_path / "g")
    assert res.exit_code == 0, res.output
    assert validate_runs(runs).ok and len(list(runs.iterdir())) == 2
    table = tmp_path / "table.csv"
    table.write_text(TABLE)
    res = _invoke(["import", "table", table, "--out", tmp_path / "t"])
    assert res.exit_code == 0, res.output
    report = validate_runs(tmp_path / "t")
    assert report.ok and len(report.run_dirs) == 7
    assert _invoke(["validate", tmp_path / "t"]).exit_code == 0
