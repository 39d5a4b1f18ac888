"""evalkit import aiperf: real AIPerf 0.13.0 exports (tests/interop/fixtures/aiperf: `aiperf
profile --endpoint-type chat --streaming --concurrency 2 --request-count 8` against `evalkit
serve --preset tiny`; only the artifact directory's absolute path in input_config was made
relative) become runs whose timings are AIPerf's own; every damaged file is exit 2 naming the
file and the field, with nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.interop.aiperf import read_aiperf
from evalkit.limits import MAX_LOG_TIME_S, MAX_TOKENS
from evalkit.runlog.io import iter_run_dirs, read_run
from evalkit.runlog.summary import summarize_runs

FIXTURE = Path(__file__).parent / "fixtures" / "aiperf"
AGGREGATE = "profile_export_aiperf.json"
RECORDS = "profile_export.jsonl"
NO_SYNC = ["--role", "no_sync", "--policy", "no_sync", "--seed", "1", "--slo-e2e", "2",
           "--merge-duration", "1"]


def records() -> list[dict]:
    return [json.loads(line) for line in (FIXTURE / RECORDS).read_text().splitlines()
            if line.strip()]


def aggregate() -> dict:
    return json.loads((FIXTURE / AGGREGATE).read_text())


def write_export(folder: Path, recs=None, agg=None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RECORDS).write_text("".join(json.dumps(r) + "\n" for r in (recs or records())))
    (folder / AGGREGATE).write_text(json.dumps(agg if agg is not None else aggregate()))
    return folder


def _import(path, runs, *extra):
    return CliRunner().invoke(cli, ["import", "aiperf", str(path), "--out", str(runs),
                                    *NO_SYNC, *extra])


def test_the_real_export_imports_with_aiperfs_own_timings(tmp_path):
    runs = tmp_path / "runs"
    res = _import(FIXTURE, runs)
    assert res.exit_code == 0, res.output
    assert CliRunner().invoke(cli, ["validate", str(runs)]).exit_code == 0
    (run_dir,) = iter_run_dirs(runs)
    run = read_run(run_dir)
    assert run_dir.name == "aiperf-concurrency@2-no_sync-s1"
    recs = sorted(records(), key=lambda r: (r["metadata"]["credit_issued_ns"],
                                            r["metadata"]["request_start_ns"]))
    req = run.requests
    assert len(req) == len(recs) == 8 and req["ok"].all()
    t0 = recs[0]["metadata"]["credit_issued_ns"]
    for row, rec in zip(req.itertuples(), recs):
        meta, metrics = rec["metadata"], rec["metrics"]
        assert row.arrival_s == pytest.approx((meta["credit_issued_ns"] - t0) / 1e9, abs=1e-9)
        assert row.sent_s == pytest.approx((meta["request_start_ns"] - t0) / 1e9, abs=1e-9)
        assert row.first_token_s - row.sent_s == pytest.approx(
            metrics["time_to_first_token"]["value"] / 1e3, abs=1e-9)
        assert row.end_s - row.sent_s == pytest.approx(
            metrics["request_latency"]["value"] / 1e3, abs=1e-9)
        assert row.output_tokens == metrics["usage_completion_tokens"]["value"] == 8
        assert row.prompt_tokens == metrics["usage_prompt_tokens"]["value"]
    source = run.meta["settings"]["effective"]["source"]
    assert source["tool"] == "aiperf" and source["tool_version"] == "0.13.0"
    assert len(source["config_sha256"]) == 64 and source["load"] == "concurrency@2"
    assert run.meta["notes"][0].startswith("imported from AIPerf 0.13.0")
    row = summarize_runs(runs).iloc[0]
    assert row["n_requests"] == 8 and row["violation_rate"] == 0


def test_either_file_of_the_pair_reads_the_same_run():
    by_dir = read_aiperf(FIXTURE)
    by_json = read_aiperf(FIXTURE / AGGREGATE)
    by_jsonl = read_aiperf(FIXTURE / RECORDS)
    for other in (by_json, by_jsonl):
        assert other[0].requests.equals(by_dir[0].requests)
        assert other[0].config_sha256 == by_dir[0].config_sha256


def test_a_prefixed_pair_is_found(tmp_path):
    shutil.copy(FIXTURE / AGGREGATE, tmp_path / "exp.json")
    shutil.copy(FIXTURE / RECORDS, tmp_path / "exp.jsonl")
    assert len(read_aiperf(tmp_path / "exp.jsonl")[0].requests) == 8


def test_repetitions_become_runs_of_consecutive_seeds_with_one_config_hash(tmp_path):
    base = tmp_path / "artifacts"
    for n in (1, 2):
        write_export(base / "profile_runs" / f"run_{n:04d}")
    runs = tmp_path / "runs"
    res = CliRunner().invoke(cli, ["import", "aiperf", str(base), "--out", str(runs),
                                   "--role", "no_sync", "--policy", "no_sync", "--seed", "7",
                                   "--slo-e2e", "2", "--merge-duration", "1"])
    assert res.exit_code == 0, res.output
    metas = [read_run(d).meta for d in iter_run_dirs(runs)]
    assert sorted(m["seed"] for m in metas) == [7, 8]
    sources = [m["settings"]["effective"]["source"] for m in metas]
    assert sorted(s["repetition"] for s in sources) == [1, 2]
    assert len({s["config_sha256"] for s in sources}) == 1


def test_the_config_hash_leaves_out_output_location_and_seed_but_not_the_load(tmp_path):
    agg = aggregate()
    agg["input_config"]["artifacts"]["dir"] = "elsewhere"
    agg["input_config"]["datasets"][0]["random_seed"] = 99
    moved = read_aiperf(write_export(tmp_path / "a", agg=agg))[0]
    base = read_aiperf(FIXTURE)[0]
    assert moved.config_sha256 == base.config_sha256
    assert moved.tool_seed == 99 and base.tool_seed == 1
    agg["input_config"]["phases"][0]["concurrency"] = 4
    other = read_aiperf(write_export(tmp_path / "b", agg=agg))[0]
    assert other.config_sha256 != base.config_sha256 and other.label == "concurrency@4"


def test_failed_cancelled_and_warmup_records(tmp_path):
    recs = records()
    recs[0]["error"] = {"code": 500, "type": "ServerError", "message": "boom"}
    for key in ("request_latency", "time_to_first_token", "usage_completion_tokens",
                "output_sequence_length"):
        recs[0]["metrics"].pop(key)
    recs[1]["metadata"]["was_cancelled"] = True
    recs[2]["metadata"]["benchmark_phase"] = "warmup"
    del recs[3]["metadata"]["credit_issued_ns"]
    recs[4]["metadata"]["credit_issued_ns"] = recs[4]["metadata"]["request_start_ns"] + 1000
    (run,) = read_aiperf(write_export(tmp_path / "a", recs))
    req = run.requests
    assert len(req) == 7 and int((~req["ok"]).sum()) == 2
    failed = req[~req["ok"]]
    assert set(failed["error"]) == {"boom", "cancelled by AIPerf"}
    assert failed["end_s"].isna().all()
    assert any("1 warmup records left out" in n for n in run.notes)
    assert any("2 of 7 requests have no credit_issued_ns" in n for n in run.notes)
    assert any("1 failed requests without a prompt or output token count" in n
               for n in run.notes)
    start3 = recs[3]["metadata"]["request_start_ns"]
    row = req[req["source_request_id"] == recs[3]["metadata"]["x_request_id"]].iloc[0]
    assert row["arrival_s"] == row["sent_s"] and start3 > 0
    late = req[req["source_request_id"] == recs[4]["metadata"]["x_request_id"]].iloc[0]
    assert late["arrival_s"] == late["sent_s"]        # a credit after the send is not used


def test_real_timeouts_are_failed_requests_with_their_prompt_length(tmp_path):
    """A real AIPerf export of 6 requests, 5 cut by --request-timeout-seconds 0.2: AIPerf
    records a failure's prompt length as error_isl and no output."""
    runs = tmp_path / "runs"
    res = _import(FIXTURE.parent / "aiperf_timeouts", runs)
    assert res.exit_code == 0, res.output
    run = read_run(iter_run_dirs(runs)[0])
    req = run.requests
    failed = req[~req["ok"]]
    assert len(req) == 6 and len(failed) == 5
    assert (failed["error"] == "TimeoutError()").all() and failed["end_s"].isna().all()
    assert (failed["prompt_tokens"] == 24).all() and (failed["output_tokens"] == 0).all()
    assert summarize_runs(runs).iloc[0]["violation_rate"] == pytest.approx(5 / 6)


def test_records_fewer_than_the_aggregate_counts_are_said(tmp_path):
    (run,) = read_aiperf(write_export(tmp_path / "a", records()[:-1]))
    assert any("the records hold 7 profiling requests, AIPerf's aggregate counts 8" in n
               for n in run.notes), run.notes
    assert not any("aggregate counts" in n for n in read_aiperf(FIXTURE)[0].notes)


def _set(path: tuple, value):
    def mutate(recs, agg):
        target = recs[0] if path[0] == "rec" else agg
        for key in path[1:-1]:
            target = target[key]
        if value is KeyError:
            del target[path[-1]]
        else:
            target[path[-1]] = value
    return mutate


@pytest.mark.parametrize("mutate, file, field", [
    (_set(("agg", "aiperf_version"), KeyError), AGGREGATE, "aiperf_version"),
    (_set(("agg", "input_config"), "x"), AGGREGATE, "input_config"),
    (_set(("agg", "input_config", "datasets", 0, "random_seed"), "1"), AGGREGATE,
     "random_seed"),
    (_set(("rec", "metrics", "request_latency"), KeyError), RECORDS, "request_latency"),
    (_set(("rec", "metrics", "request_latency", "unit"), "fortnights"), RECORDS, "unit"),
    (_set(("rec", "metrics", "time_to_first_token", "value"), -1.0), RECORDS,
     "time_to_first_token"),
    (_set(("rec", "metrics", "time_to_first_token", "value"), 1e6), RECORDS,
     "time_to_first_token"),
    (_set(("rec", "metadata", "request_start_ns"), "soon"), RECORDS, "request_start_ns"),
    (_set(("rec", "metadata", "request_start_ns"), 2 * 10 ** 18 + int(MAX_LOG_TIME_S * 2e9)),
     RECORDS, "request_start_ns"),
    (_set(("rec", "metadata", "benchmark_phase"), "cooldown"), RECORDS, "benchmark_phase"),
    (_set(("rec", "error"), "bad"), RECORDS, "error"),
    (_set(("rec", "metrics", "usage_completion_tokens", "value"), 2.5), RECORDS,
     "usage_completion_tokens"),
    (_set(("rec", "metrics", "usage_prompt_tokens", "value"), MAX_TOKENS + 1), RECORDS,
     "usage_prompt_tokens"),
    (_set(("rec", "metrics", "usage_prompt_tokens"), 3), RECORDS, "usage_prompt_tokens"),
    (_set(("rec", "metadata"), []), RECORDS, "metadata"),
    (_set(("rec", "metrics", "request_latency", "value"), 10 ** 400), RECORDS,
     "request_latency"),
    (_set(("rec", "metrics", "usage_completion_tokens", "value"), 10 ** 400), RECORDS,
     "usage_completion_tokens"),
    (_set(("rec", "metadata", "request_start_ns"), 1 << 64), RECORDS, "request_start_ns"),
    (_set(("agg", "input_config", "phases", 0, "concurrency"), 10 ** 400), AGGREGATE,
     "phases[].concurrency"),
])
def test_a_damaged_export_is_exit_2_naming_file_and_field(tmp_path, mutate, file, field):
    recs, agg = records(), aggregate()
    mutate(recs, agg)
    folder = write_export(tmp_path / "a", recs, agg)
    runs = tmp_path / "runs"
    res = _import(folder, runs)
    assert res.exit_code == 2, res.output
    assert file in res.output and field in res.output, res.output
    assert not runs.exists() or not any(runs.iterdir())


def test_a_record_without_token_counts_is_exit_2(tmp_path):
    recs = records()
    for key in ("usage_prompt_tokens", "input_sequence_length"):
        recs[0]["metrics"].pop(key)
    res = _import(write_export(tmp_path / "a", recs), tmp_path / "runs")
    assert res.exit_code == 2 and "input_sequence_length" in res.output, res.output


def test_only_warmup_records_is_exit_2(tmp_path):
    recs = records()
    for r in recs:
        r["metadata"]["benchmark_phase"] = "warmup"
    res = _import(write_export(tmp_path / "a", recs), tmp_path / "runs")
    assert res.exit_code == 2 and "8 warmup records only" in res.output, res.output


@pytest.mark.parametrize("missing", [AGGREGATE, RECORDS])
def test_a_missing_half_of_the_pair_is_exit_2_naming_it(tmp_path, missing):
    folder = write_export(tmp_path / "a")
    (folder / missing).unlink()
    present = RECORDS if missing == AGGREGATE else AGGREGATE
    res = _import(folder / present, tmp_path / "runs")
    assert res.exit_code == 2 and missing in res.output, res.output
    assert "is missing beside the other export" in res.output, res.output


def test_the_summary_across_repetitions_is_exit_2_naming_the_directory_to_pass(tmp_path):
    summary = tmp_path / "aggregate" / "profile_export_aiperf_aggregate.json"
    summary.parent.mkdir()
    summary.write_text("{}")
    res = _import(summary, tmp_path / "runs")
    assert res.exit_code == 2 and "summary across repetitions" in res.output, res.output


def test_a_directory_without_exports_is_exit_2(tmp_path):
    res = _import(tmp_path, tmp_path / "runs")
    assert res.exit_code == 2 and "profile_runs" in res.output, res.output


def test_merges_are_needed_for_a_merging_run_and_ambiguous_across_repetitions(tmp_path):
    base = tmp_path / "artifacts"
    for n in (1, 2):
        write_export(base / "profile_runs" / f"run_{n:04d}")
    merges = tmp_path / "merges.csv"
    merges.write_text("start_s,end_s\n0.1,0.3\n")
    common = ["import", "aiperf", str(base), "--out", str(tmp_path / "runs"), "--policy",
              "wa", "--seed", "1", "--slo-e2e", "2"]
    res = CliRunner().invoke(cli, common)
    assert res.exit_code == 2 and "--merges" in res.output, res.output
    res = CliRunner().invoke(cli, common + ["--merges", str(merges)])
    assert res.exit_code == 2 and "2 runs is ambiguous" in res.output, res.output
    single = base / "profile_runs" / "run_0001"
    res = CliRunner().invoke(cli, ["import", "aiperf", str(single), "--out",
                                   str(tmp_path / "runs"), "--policy", "wa", "--seed", "1",
                                   "--slo-e2e", "2", "--merges", str(merges)])
    assert res.exit_code == 0, res.output
    (run_dir,) = iter_run_dirs(tmp_path / "runs")
    assert read_run(run_dir).merges["start_s"].tolist() == [0.1]


def test_an_import_never_replaces_a_run(tmp_path):
    runs = tmp_path / "runs"
    assert _import(FIXTURE, runs).exit_code == 0
    res = _import(FIXTURE, runs)
    assert res.exit_code == 2 and "--replace" in res.output, res.output
    assert _import(FIXTURE, runs, "--replace").exit_code == 0
    assert any(p.name.startswith(".aiperf-concurrency@2-no_sync-s1.replaced-")
               for p in runs.iterdir())


def test_read_aiperf_raises_input_error_on_a_missing_path(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        read_aiperf(tmp_path / "nope.json")
