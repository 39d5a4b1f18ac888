"""evalkit import inference-perf: a real inference-perf 0.7.0 report (tests/interop/fixtures/
inference_perf: one constant@4 stage of 3 s, streamed completions, per_request with
computed_metrics, against `evalkit serve --preset tiny`) becomes a run with inference-perf's
own timings; what the reports do not say (the version, a request's stage) is exit 2 unless
given; every damaged file is exit 2 naming the file and the field, with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.interop.inference_perf import read_inference_perf
from evalkit.limits import MAX_LOG_TIME_S, MAX_TOKENS
from evalkit.runlog.io import iter_run_dirs, read_run

FIXTURE = Path(__file__).parent / "fixtures" / "inference_perf"
REPORT = "per_request_lifecycle_metrics.json"
CONFIG = "config.yaml"
NO_SYNC = ["--tool-version", "0.7.0", "--role", "no_sync", "--policy", "no_sync", "--seed",
           "1", "--slo-e2e", "2", "--merge-duration", "1"]


def entries() -> list[dict]:
    return json.loads((FIXTURE / REPORT).read_text())


def config_text() -> str:
    return (FIXTURE / CONFIG).read_text()


def write_report(folder: Path, ents=None, config: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / REPORT).write_text(json.dumps(entries() if ents is None else ents))
    (folder / CONFIG).write_text(config_text() if config is None else config)
    return folder


def _import(path, runs, *extra, options=NO_SYNC):
    return CliRunner().invoke(cli, ["import", "inference-perf", str(path), "--out", str(runs),
                                    *options, *extra])


def test_the_real_report_imports_with_inference_perfs_own_timings(tmp_path):
    runs = tmp_path / "runs"
    res = _import(FIXTURE, runs)
    assert res.exit_code == 0, res.output
    assert CliRunner().invoke(cli, ["validate", str(runs)]).exit_code == 0
    (run_dir,) = iter_run_dirs(runs)
    assert run_dir.name == "inference-perf-constant@4-no_sync-s1"
    run = read_run(run_dir)
    ents = sorted(entries(), key=lambda e: e["start_time"])
    req = run.requests
    assert len(req) == len(ents) == 12 and req["ok"].all()
    t0 = ents[0]["start_time"]
    for row, e in zip(req.itertuples(), ents):
        assert row.sent_s == row.arrival_s == pytest.approx(e["start_time"] - t0, abs=1e-9)
        assert row.end_s == pytest.approx(e["end_time"] - t0, abs=1e-9)
        assert row.first_token_s - row.sent_s == pytest.approx(
            e["computed_metrics"]["time_to_first_token"], abs=1e-9)
        usage = e["info"]["response_metrics"]["server_usage"]
        assert row.output_tokens == usage["completion_tokens"] == 8
        assert row.prompt_tokens == usage["prompt_tokens"]
    source = run.meta["settings"]["effective"]["source"]
    assert source == {"tool": "inference-perf", "tool_version": "0.7.0",
                      "config_sha256": source["config_sha256"], "load": "constant@4",
                      "repetition": None}
    assert "version given on the command line" in run.meta["notes"][0]


def test_the_file_itself_reads_as_the_directory():
    a = read_inference_perf(FIXTURE, tool_version="0.7.0")[0]
    b = read_inference_perf(FIXTURE / REPORT, tool_version="0.7.0")[0]
    assert a.requests.equals(b.requests) and a.config_sha256 == b.config_sha256


def test_without_a_version_it_is_exit_2(tmp_path):
    res = _import(FIXTURE, tmp_path / "runs", options=NO_SYNC[2:])
    assert res.exit_code == 2 and "--tool-version" in res.output, res.output
    with pytest.raises(InputError, match="do not record its version"):
        read_inference_perf(FIXTURE, tool_version=" ")


def test_the_config_hash_leaves_out_storage_and_seed_but_not_the_rate(tmp_path):
    base = read_inference_perf(FIXTURE, tool_version="0.7.0")[0]
    text = config_text()
    moved = text.replace("path: ip", "path: elsewhere")
    moved = moved.replace(f"base_seed: {base.tool_seed}", "base_seed: 5")
    assert moved.count("elsewhere") == 1 and "base_seed: 5" in moved
    other = read_inference_perf(write_report(tmp_path / "a", config=moved),
                                tool_version="0.7.0")[0]
    assert other.config_sha256 == base.config_sha256 and other.tool_seed == 5
    faster = text.replace("rate: 4.0", "rate: 8.0")
    assert faster != text
    fast = read_inference_perf(write_report(tmp_path / "b", config=faster),
                               tool_version="0.7.0")[0]
    assert fast.config_sha256 != base.config_sha256 and fast.label == "constant@8"


def test_a_failed_request_is_a_violation(tmp_path):
    ents = entries()
    ents[0]["error"] = {"error_type": "ClientError", "error_msg": "refused"}
    ents[0]["computed_metrics"] = None
    ents[0]["info"]["response_metrics"] = None
    (run,) = read_inference_perf(write_report(tmp_path / "a", ents), tool_version="0.7.0")
    failed = run.requests[~run.requests["ok"]]
    assert len(failed) == 1 and failed["error"].iloc[0] == "refused"
    assert failed["end_s"].isna().all() and failed["output_tokens"].iloc[0] == 0
    assert any("1 failed requests without a token count" in n for n in run.notes)


def test_real_timeouts_are_failed_requests(tmp_path):
    """A real inference-perf report (load.request_timeout 0.15 s, 64 output tokens): 5 of 12
    requests time out; inference-perf records them with error_type TimeoutError, an empty
    error_msg, 0 input tokens and no response metrics."""
    runs = tmp_path / "runs"
    res = _import(FIXTURE.parent / "inference_perf_timeouts", runs)
    assert res.exit_code == 0, res.output
    run = read_run(iter_run_dirs(runs)[0])
    req = run.requests
    failed = req[~req["ok"]]
    assert len(req) == 12 and len(failed) == 5
    assert (failed["error"] == "TimeoutError").all() and failed["end_s"].isna().all()
    assert (req[req["ok"]]["output_tokens"] == 64).all()
    assert any("5 failed requests without a token count" in n for n in run.meta["notes"])


def test_first_token_from_output_token_times_without_computed_metrics(tmp_path):
    ents = entries()
    for e in ents:
        e.pop("computed_metrics")
    (run,) = read_inference_perf(write_report(tmp_path / "a", ents), tool_version="0.7.0")
    e = min(entries(), key=lambda x: x["start_time"])
    row = run.requests.iloc[0]
    assert row["first_token_s"] == pytest.approx(
        e["info"]["response_metrics"]["output_token_times"][0] - e["start_time"], abs=1e-9)
    assert any("12 first-token times from output_token_times" in n for n in run.notes)


def _entry(key_path: tuple, value):
    def mutate(ents):
        target = ents[0]
        for key in key_path[:-1]:
            target = target[key]
        if value is KeyError:
            del target[key_path[-1]]
        else:
            target[key_path[-1]] = value
    return mutate


def _no_ttft(ents):
    ents[0].pop("computed_metrics")
    ents[0]["info"]["response_metrics"]["output_token_times"] = []


def _late(ents):
    span = ents[0]["end_time"] - ents[0]["start_time"]
    ents[0]["start_time"] += MAX_LOG_TIME_S * 3
    ents[0]["end_time"] = ents[0]["start_time"] + span


def _no_tokens(ents):
    ents[0]["info"]["response_metrics"]["server_usage"] = None
    ents[0]["info"]["response_metrics"]["output_tokens"] = None


@pytest.mark.parametrize("mutate, field", [
    (_entry(("start_time",), "soon"), "start_time"),
    (_entry(("start_time",), -1.0), "start_time"),
    (_entry(("start_time",), 10 ** 400), "start_time"),        # beyond any float
    (_entry(("end_time",), KeyError), "end_time"),
    (_entry(("end_time",), 0.5), "end_time"),                     # before its start
    (_late, "start_time"),                                        # out of range
    (_entry(("computed_metrics", "time_to_first_token"), 1e6), "time_to_first_token"),
    (_entry(("error",), "bad"), "error"),
    (_entry(("info", "response_metrics", "server_usage", "completion_tokens"), 1.5),
     "completion_tokens"),
    (_entry(("info", "response_metrics", "server_usage", "prompt_tokens"), MAX_TOKENS + 1),
     "prompt_tokens"),
    (_no_ttft, "computed_metrics"),
    (_no_tokens, "info"),
])
def test_a_damaged_report_is_exit_2_naming_file_and_field(tmp_path, mutate, field):
    ents = entries()
    mutate(ents)
    runs = tmp_path / "runs"
    res = _import(write_report(tmp_path / "a", ents), runs)
    assert res.exit_code == 2, res.output
    assert REPORT in res.output and field in res.output, res.output
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.parametrize("change, field", [
    (lambda t: t.replace("  - rate: 4.0\n    duration: 3\n",
                         "  - rate: 4.0\n    duration: 3\n  - rate: 8.0\n    duration: 3\n"),
     "load.stages"),
    (lambda t: t.replace("  sweep: null", "  sweep: {type: linear}"), "load.sweep"),
    (lambda t: "a: &x [1, 2]\nb: *x\n" + t, "alias"),
    (lambda t: t + "\n  : : [\n", "YAML"),
    (lambda t: "- just\n- a list\n", "mapping"),
    (lambda t: t.replace("  sweep: null", "  sweep: null\n  sweep: null"), "twice"),
    (lambda t: t.replace("  base_seed: ", "  base_seed: x"), "load.base_seed"),
    (lambda t: t.replace("rate: 4.0", "rate: .inf"), "load.stages[0].rate"),
    (lambda t: t + "#" * (256 << 10), "more than 262,144 bytes"),
])
def test_a_config_it_cannot_use_is_exit_2_naming_it(tmp_path, change, field):
    text = change(config_text())
    assert text != config_text()
    res = _import(write_report(tmp_path / "a", config=text), tmp_path / "runs")
    assert res.exit_code == 2, res.output
    assert CONFIG in res.output and field in res.output, res.output


def test_missing_files_are_exit_2_naming_them(tmp_path):
    folder = write_report(tmp_path / "a")
    (folder / CONFIG).unlink()
    res = _import(folder, tmp_path / "runs")
    assert res.exit_code == 2 and CONFIG in res.output, res.output
    assert "is missing beside the per-request report" in res.output, res.output
    res = _import(tmp_path / "empty", tmp_path / "runs")
    assert res.exit_code == 2 and "does not exist" in res.output, res.output
    (tmp_path / "empty").mkdir()
    res = _import(tmp_path / "empty", tmp_path / "runs")
    assert res.exit_code == 2 and "per_request: true" in res.output, res.output
    other = tmp_path / "summary_lifecycle_metrics.json"
    other.write_text("{}")
    res = _import(other, tmp_path / "runs")
    assert res.exit_code == 2 and "not an inference-perf per-request report" in res.output


def test_a_report_that_is_not_a_list_or_is_empty_is_exit_2(tmp_path):
    res = _import(write_report(tmp_path / "a", ents={"x": 1}), tmp_path / "runs")
    assert res.exit_code == 2 and "expected a JSON list" in res.output, res.output
    res = _import(write_report(tmp_path / "b", ents=[]), tmp_path / "runs")
    assert res.exit_code == 2 and "holds no requests" in res.output, res.output


def test_an_import_never_replaces_a_run(tmp_path):
    runs = tmp_path / "runs"
    assert _import(FIXTURE, runs).exit_code == 0
    res = _import(FIXTURE, runs)
    assert res.exit_code == 2 and "--replace" in res.output, res.output
