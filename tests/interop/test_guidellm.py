"""`evalkit import guidellm`: a GuideLLM benchmarks.json (built here the way GuideLLM 0.8
serialises its report, schema 2, and in the earlier layout) into validated runs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.errors import InputError
from evalkit.interop.guidellm import import_guidellm, read_guidellm
from evalkit.runlog.io import read_meta, read_table
from evalkit.runlog.summary import summarize_run

T_BASE = 1_780_000_000.0           # Unix seconds, as GuideLLM's timings
MERGES_UNIX = [(T_BASE + 5.0, T_BASE + 7.0), (T_BASE + 14.0, T_BASE + 16.0),
               (T_BASE + 45.0, T_BASE + 47.0), (T_BASE + 53.0, T_BASE + 55.0)]


def _in_merge(t):
    return any(a <= t < b for a, b in MERGES_UNIX)


def _stats(rid, targeted, n_in, n_req, status, rng):
    """One GenerativeRequestStats as GuideLLM's model_dump(mode='json') writes it."""
    start = targeted + rng.uniform(0.0005, 0.003)
    slow = 0.6 if _in_merge(start) else 0.0
    first = start + 0.04 + slow + rng.uniform(0, 0.02)
    n_out = n_req if status == "successful" else int(rng.integers(0, n_req // 2))
    last = first + 0.02 * max(n_out - 1, 0)
    end = last + 0.001
    error = None
    if status == "errored":
        first = None if n_out == 0 else first
        error = "ReadTimeout: timed out waiting for the server"
    if status == "incomplete":
        end = None
    timings = {"targeted_start": targeted, "predecessor_completed": None,
               "queued": targeted - 0.01, "dequeued": targeted - 0.002,
               "scheduled_at": targeted - 0.001, "resolve_start": start - 0.0004,
               "request_start": start, "first_request_iteration": start + 0.001,
               "first_token_iteration": first, "first_output_token_iteration": first,
               "last_token_iteration": last if n_out else None,
               "last_request_iteration": last if n_out else None,
               "request_iterations": n_out + 1, "token_iterations": n_out,
               "last_request_sent": None, "request_sent_sum": 0.0, "request_sent_count": 0,
               "token_received_sum": 0.0, "token_received_count": 0,
               "request_end": end if status == "successful" else None,
               "resolve_end": None if end is None else end + 0.0003,
               "finalized": None if end is None else end + 0.001}
    info = {"request_id": rid, "conversation_id": None, "history_len": 0, "turn_index": 0,
            "preceding_nodes": 0, "node_id": None, "agent_id": None, "parent_node_ids": [],
            "status": {"successful": "completed", "errored": "errored",
                       "incomplete": "cancelled"}[status],
            "scheduler_node_id": 0, "scheduler_process_id": 0,
            "scheduler_start_time": T_BASE - 1, "timings": timings,
            "settings": {"relative_timestamp": None, "requeue_delay": None,
                         "trace_duration": None},
            "error": error, "traceback": None, "started_at": start,
            "completed_at": None if end is None else end}
    out_tokens = n_out if status == "successful" else None
    latency = None if timings["request_end"] is None else timings["request_end"] - start
    return {
        "type_": "generative_request_stats", "request_id": rid, "response_id": f"cmpl-{rid}",
        "request_args": json.dumps({"method": "POST", "stream": True,
                                    "body": {"model": "tiny-test", "max_tokens": n_req,
                                             "stream": True}}),
        "output": " t1" * n_out, "reasoning_output": None, "tool_calls": None, "info": info,
        "input_metrics": {"text_tokens": n_in, "cached_tokens": None, "text_words": None,
                          "text_characters": None, "total_tokens": n_in},
        "response_metrics": None,
        "output_metrics": {"text_tokens": out_tokens, "total_tokens": out_tokens},
        "request_start_time": start, "request_end_time": end, "request_latency": latency,
        "request_dispatch_delay": start - targeted, "prompt_tokens": n_in,
        "output_tokens": out_tokens, "total_tokens": n_in + (out_tokens or 0),
        "time_to_first_token_ms": None if first is None else 1000 * (first - start),
        "inter_token_latency_ms": 20.0 if n_out > 1 else None}


def _benchmark(k, rate, t_start, duration, rng, *, n_errored=3, n_incomplete=2,
               sample_note=False):
    arrivals = t_start + np.cumsum(rng.exponential(1 / rate, int(rate * duration * 1.5)))
    arrivals = arrivals[arrivals < t_start + duration]
    status = np.array(["successful"] * len(arrivals), dtype=object)
    status[rng.choice(len(arrivals) - n_incomplete, n_errored, replace=False)] = "errored"
    status[-n_incomplete:] = "incomplete"
    groups = {s: [] for s in ("successful", "incomplete", "errored")}
    for i, (t, s) in enumerate(zip(arrivals, status)):
        groups[s].append(_stats(f"b{k}-r{i}", float(t), int(rng.integers(20, 200)),
                                int(rng.integers(8, 40)), s, rng))
    made = {s: len(v) for s, v in groups.items()}
    if sample_note:                              # the report kept a sample of successes
        made["successful"] += 7
    made["total"] = sum(made.values())
    strategy = {"type_": "poisson", "worker_count": 1, "max_concurrency": None,
                "startup_duration": 0.0, "rate": rate, "random_seed": 42}
    return {
        "type_": "generative_benchmark",
        "config": {"id_": f"bench-{k}", "run_id": "run-1", "run_index": k, "strategy": strategy,
                   "constraints": {"max_seconds": {"max_duration": duration}},
                   "sample_size": None, "warmup": {}, "cooldown": {},
                   "prefer_response_metrics": True, "slo": None, "confidence": 0.95,
                   "warnings": [], "profile": {"type_": "async", "strategy_type": "poisson",
                                               "rate": [rate]},
                   "requests": {"data": ["prompt_tokens=100,output_tokens=20"]},
                   "backend": {"type_": "openai_http", "target": "http://127.0.0.1:8000"},
                   "environment": {}},
        "scheduler_state": {"node_id": 0, "num_processes": 1, "start_time": t_start - 0.5},
        "scheduler_metrics": {"start_time": t_start - 0.5, "request_start_time": t_start,
                              "measure_start_time": t_start,
                              "measure_end_time": t_start + duration,
                              "request_end_time": t_start + duration + 1,
                              "end_time": t_start + duration + 1.5, "requests_made": made,
                              "strategy_type": "poisson"},
        "metrics": {"request_totals": made},
        "requests": {**groups, "total": None},
        "warnings": [], "start_time": t_start, "end_time": t_start + duration,
        "duration": duration}


def make_report(path, *, legacy=False, sample_note=False):
    rng = np.random.default_rng(7)
    report = {"metadata": {"version": 2, "guidellm_version": "0.8.1",
                           "python_version": "3.12.3", "platform": "Linux-x86_64"},
              "config": {"target": "http://127.0.0.1:8000", "profile": "poisson",
                         "rate": [2.0, 4.0]},
              "benchmarks": [_benchmark(0, 2.0, T_BASE + 1.0, 20.0, rng,
                                        sample_note=sample_note),
                             _benchmark(1, 4.0, T_BASE + 40.0, 20.0, rng)],
              "conclusions": []}
    if legacy:
        report = _to_legacy(report)
    path.write_text(json.dumps(report))
    return report


def _to_legacy(report):
    """The 0.2-0.3 layout: start_time / first_token_time / end_time on each request."""
    out = {"benchmarks": []}
    for b in report["benchmarks"]:
        reqs = {}
        for s in ("successful", "errored", "incomplete"):
            reqs[s] = []
            for r in b["requests"][s]:
                t = r["info"]["timings"]
                reqs[s].append({
                    "type_": "generative_text_response", "request_id": r["request_id"],
                    "request_type": "text_completions",
                    "scheduler_info": {"targeted_start_time": t["targeted_start"],
                                       "request_start": t["request_start"]},
                    "prompt": "x", "output": r["output"], "prompt_tokens": r["prompt_tokens"],
                    "output_tokens": r["output_tokens"], "start_time": t["request_start"],
                    "end_time": t["request_end"] or t["resolve_end"],
                    "first_token_time": t["first_token_iteration"],
                    "last_token_time": t["last_token_iteration"],
                    "error": r["info"]["error"]})
        out["benchmarks"].append({"type_": "generative_benchmark",
                                  "args": {"strategy": b["config"]["strategy"]},
                                  "total_count": b["scheduler_metrics"]["requests_made"],
                                  "requests": reqs})
    return out


@pytest.fixture
def report(tmp_path):
    p = tmp_path / "benchmarks.json"
    return p, make_report(p)


@pytest.fixture
def merges_file(tmp_path):
    p = tmp_path / "merges.csv"
    p.write_text("start_s,end_s\n" + "".join(f"{a},{b}\n" for a, b in MERGES_UNIX))
    return p


def _reference(raw_bench, slo, incomplete="drop"):
    """Independent V: failed or (request_end - targeted_start) > slo, from the raw dict."""
    bad, n = 0, 0
    for s in ("successful", "errored", "incomplete"):
        if s == "incomplete" and incomplete == "drop":
            continue
        for r in raw_bench["requests"][s]:
            t = r["info"]["timings"]
            n += 1
            bad += s != "successful" or (t["request_end"] - t["targeted_start"]) > slo
    return n, bad / n


def test_import_one_run_per_benchmark_with_errors_as_violations(report, merges_file, tmp_path):
    path, raw = report
    runs = tmp_path / "runs"
    r = CliRunner().invoke(cli, ["import", "guidellm", str(path), "--out", str(runs),
                                 "--merges", str(merges_file), "--policy", "p", "--seed", "1",
                                 "--slo-e2e", "0.5"])
    assert r.exit_code == 0, r.output
    dirs = sorted(p for p in runs.iterdir() if p.is_dir())
    assert [d.name for d in dirs] == ["guidellm-poisson@2.00-p-s1", "guidellm-poisson@4.00-p-s1"]
    for d, bench in zip(dirs, raw["benchmarks"]):
        meta = read_meta(d)
        assert meta["backend"] == "import" and meta["regime"] == d.name.split("-p-")[0]
        req = read_table(d, "requests")
        n, v = _reference(bench, 0.5)
        assert len(req) == n and (~req["ok"]).sum() == 3
        assert req.loc[~req["ok"], "error"].str.contains("ReadTimeout").all()
        assert req.loc[~req["ok"], "end_s"].isna().all()
        row = summarize_run(d)
        assert row["violation_rate"] == pytest.approx(v)
        assert row["n_failed"] == 3
        # times: scheduled arrival from targeted_start; latency end - arrival as in the raw
        t0 = min(x["info"]["timings"]["targeted_start"] for s in ("successful", "errored")
                 for x in bench["requests"][s])
        by_id = {x["request_id"]: x for x in bench["requests"]["successful"]}
        sample = req[req["ok"]].iloc[3]
        t = by_id[sample["source_request_id"]]["info"]["timings"]
        assert sample["arrival_s"] == pytest.approx(t["targeted_start"] - t0, abs=1e-9)
        assert sample["sent_s"] == pytest.approx(t["request_start"] - t0, abs=1e-9)
        assert sample["end_s"] - sample["arrival_s"] == pytest.approx(
            t["request_end"] - t["targeted_start"], abs=1e-9)
        # merges: each benchmark gets the windows inside its span, on its clock
        m = read_table(d, "merges")
        inside = [(a - t0, b - t0) for a, b in MERGES_UNIX
                  if b > t0 and a < t0 + req["end_s"].max()]
        assert len(m) == len(inside) == 2
        assert m["start_s"].tolist() == pytest.approx([a for a, _ in inside])
        assert meta["merge_duration_s"] == pytest.approx(2.0)
        assert any("incomplete" in note for note in meta["notes"])
    r = CliRunner().invoke(cli, ["validate", str(runs)])
    assert r.exit_code == 0, r.output


def test_merge_slowdown_is_visible_in_the_imported_requests(report, merges_file, tmp_path):
    path, _ = report
    run = import_guidellm(path, tmp_path / "runs", policy="p", seed=1, merges=merges_file,
                          slo_e2e_s=0.5, benchmarks=[0])[0]
    req = read_table(run, "requests")
    m = read_table(run, "merges")
    in_window = np.zeros(len(req), dtype=bool)
    for a, b in zip(m["start_s"], m["end_s"]):
        in_window |= (req["sent_s"] >= a) & (req["sent_s"] < b)
    ttft = req["first_token_s"] - req["sent_s"]
    ok = req["ok"].to_numpy()
    assert ttft[in_window & ok].min() > 0.6 > ttft[~in_window & ok].max()


def test_incomplete_requests_as_violations(report, merges_file, tmp_path):
    path, raw = report
    run = import_guidellm(path, tmp_path / "runs", policy="p", seed=1, merges=merges_file,
                          slo_e2e_s=0.5, benchmarks=[1], incomplete="violation")[0]
    req = read_table(run, "requests")
    n, v = _reference(raw["benchmarks"][1], 0.5, incomplete="violation")
    assert len(req) == n and (~req["ok"]).sum() == 5
    assert req["error"].str.startswith("incomplete").sum() == 2
    assert summarize_run(run)["violation_rate"] == pytest.approx(v)
    # errored/incomplete requests carry the requested output length from request_args
    body = {x["request_id"]: json.loads(x["request_args"])["body"]["max_tokens"]
            for x in raw["benchmarks"][1]["requests"]["incomplete"]}
    got = req.set_index("source_request_id").loc[list(body), "output_tokens"]
    assert got.tolist() == list(body.values())


def test_relative_merges_need_one_benchmark_and_no_sync_none(report, tmp_path):
    path, _ = report
    rel = tmp_path / "rel.csv"
    rel.write_text("start_s,end_s\n4.0,6.0\n")
    with pytest.raises(InputError, match="ambiguous"):
        import_guidellm(path, tmp_path / "runs", policy="p", seed=1, merges=rel,
                        merge_clock="relative", slo_e2e_s=0.5)
    run = import_guidellm(path, tmp_path / "runs", policy="p", seed=1, merges=rel,
                          merge_clock="relative", slo_e2e_s=0.5, benchmarks=[1],
                          regime="cpu")[0]
    assert read_meta(run)["regime"] == "cpu"
    assert read_table(run, "merges")["start_s"].tolist() == [4.0]
    with pytest.raises(InputError, match="needs its merge windows"):
        import_guidellm(path, tmp_path / "r2", policy="p", seed=1, slo_e2e_s=0.5)
    runs = import_guidellm(path, tmp_path / "r3", policy="no_sync", role="no_sync", seed=1,
                           slo_e2e_s=0.5, merge_duration_s=2.0)
    assert len(runs) == 2 and all(len(read_table(r, "merges")) == 0 for r in runs)
    with pytest.raises(InputError, match="no benchmark 5"):
        import_guidellm(path, tmp_path / "r4", policy="no_sync", role="no_sync", seed=1,
                        slo_e2e_s=0.5, merge_duration_s=2.0, benchmarks=[5])


def test_legacy_layout_imports_the_same_requests(tmp_path, merges_file):
    new, old = tmp_path / "new.json", tmp_path / "old.json"
    make_report(new)
    make_report(old, legacy=True)
    a, b = read_guidellm(new), read_guidellm(old)
    assert [x.layout for x in a] == ["schema 2"] * 2 and [x.layout for x in b] == ["legacy"] * 2
    for x, y in zip(a, b):
        assert x.label == y.label
        cols = ["arrival_s", "sent_s", "first_token_s", "end_s", "ok", "prompt_tokens"]
        assert x.requests[cols].equals(y.requests[cols])


def test_sampled_report_is_flagged(tmp_path):
    p = tmp_path / "s.json"
    make_report(p, sample_note=True)
    b = read_guidellm(p)[0]
    assert any("sample of the requests" in n and "successful:" in n for n in b.notes)


def test_other_files_exit_2_with_a_fix(tmp_path, report):
    path, raw = report
    cases = []
    vb = tmp_path / "vllm.json"
    vb.write_text(json.dumps({"start_times": [0.0], "ttfts": [0.1], "input_lens": [3]}))
    cases.append((vb, "import vllm-bench"))
    y = tmp_path / "benchmarks.yaml"
    y.write_text("benchmarks: []\n")
    cases.append((y, "as JSON"))
    junk = tmp_path / "junk.json"
    junk.write_text("{nope")
    cases.append((junk, "not valid JSON"))
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"benchmarks": []}))
    cases.append((empty, "no requests"))
    broken = json.loads(path.read_text())
    broken["benchmarks"][1]["requests"]["successful"][2]["info"]["timings"]["request_end"] = None
    broken["benchmarks"][1]["requests"]["successful"][2]["info"]["timings"]["resolve_end"] = None
    bad = tmp_path / "broken.json"
    bad.write_text(json.dumps(broken))
    cases.append((bad, "benchmarks[1].requests.successful"))
    for f, words in cases:
        r = CliRunner().invoke(cli, ["import", "guidellm", str(f), "--out",
                                     str(tmp_path / "runs"), "--policy", "no_sync", "--role",
                                     "no_sync", "--seed", "1", "--slo-e2e", "1",
                                     "--merge-duration", "2"])
        assert r.exit_code == 2, (f, r.output)
        assert words in r.output, (f, r.output)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.parametrize("how", ["from zero", "partly missing"])
def test_targets_on_another_clock_fall_back_to_the_send_time(tmp_path, how):
    """GuideLLM under load has written targeted starts as offsets from 0 beside Unix send
    times: taken as they are, the run's times would be Unix timestamps (validate refuses
    them).  The importer must take latency from the send, say so, and never mix clocks."""
    raw = make_report(tmp_path / "ok.json")
    b0 = raw["benchmarks"][0]
    succ = b0["requests"]["successful"]
    t_first = min(r["info"]["timings"]["request_start"] for r in succ)
    for i, r in enumerate(succ):
        t = r["info"]["timings"]
        if how == "partly missing" and i < 2:
            t["targeted_start"] = None
        else:
            t["targeted_start"] = t["targeted_start"] - t_first   # seconds from 0
    p = tmp_path / "offclock.json"
    p.write_text(json.dumps(raw))
    b = read_guidellm(p)[0]
    req = b.requests
    assert any("not on the send times' clock" in n for n in b.notes), b.notes
    assert not any(n.startswith("no targeted start times") for n in b.notes)
    assert (req["arrival_s"] == req["sent_s"]).all()
    assert req["sent_s"].min() == 0.0 and req["end_s"].max() < 60.0
    runs = tmp_path / "runs"
    r = CliRunner().invoke(cli, ["import", "guidellm", str(p), "--out", str(runs),
                                 "--role", "no_sync", "--policy", "no_sync", "--seed", "1",
                                 "--slo-e2e", "2", "--merge-duration", "1"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["validate", str(runs)])
    assert r.exit_code == 0, r.output


def test_targets_on_the_send_clock_are_kept(tmp_path):
    """The control: the same report with honest Unix targets keeps them as arrivals."""
    p = tmp_path / "ok.json"
    make_report(p)
    b = read_guidellm(p)[0]
    assert not any("clock" in n for n in b.notes)
    assert (b.requests["arrival_s"] < b.requests["sent_s"]).mean() > 0.9
