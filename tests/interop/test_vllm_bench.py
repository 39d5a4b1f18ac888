"""evalkit import vllm-bench: a vLLM detailed bench result becomes a run that summarizes right."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.runlog.io import iter_run_dirs, read_run
from evalkit.runlog.summary import summarize_runs

SLO = 1.2


def _result(n=60, seed=0, *, t0=5000.0):
    rng = np.random.default_rng(seed)
    start = t0 + np.sort(rng.uniform(0, 30, n))
    ttft = rng.gamma(2, 0.1, n)
    out = rng.integers(2, 40, n)
    itls = [list(rng.uniform(0.01, 0.04, k - 1)) for k in out]
    latency = ttft + np.array([sum(x) for x in itls])
    errors = [""] * n
    for i in (3, 17, 40):                      # failed requests, as vLLM records them
        errors[i] = "ClientConnectorError"
        ttft[i], latency[i], out[i], itls[i] = 0.0, 0.0, 0, []
    return {
        "date": "20260101-000000", "backend": "vllm", "model_id": "m", "num_prompts": n,
        "request_rate": 2.0, "duration": 31.0, "completed": n - 3,
        "input_lens": rng.integers(10, 900, n).tolist(), "output_lens": out.tolist(),
        "ttfts": ttft.tolist(), "itls": itls, "latencies": latency.tolist(),
        "start_times": start.tolist(), "errors": errors,
    }


def _invoke(args):
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def _files(tmp_path, data, merges="start_s,end_s\n5.0,13.0\n20.0,28.0\n"):
    res = tmp_path / "result.json"
    res.write_text(json.dumps(data))
    mer = tmp_path / "merges.csv"
    mer.write_text(merges)
    return res, mer


def test_import_and_summarize(tmp_path):
    data = _result()
    res, mer = _files(tmp_path, data)
    out = tmp_path / "runs"
    r = _invoke(["import", "vllm-bench", str(res), "--out", str(out), "--merges", str(mer),
                 "--policy", "wa", "--seed", "3", "--slo-e2e", str(SLO)])
    assert r.exit_code == 0, r.output
    row = summarize_runs(out).iloc[0]
    lat = np.array(data["latencies"])
    failed = np.array([bool(e) for e in data["errors"]])
    # independent reference: failed requests count as violations and as inf latency
    v = np.mean(failed | (lat > SLO))
    assert row["violation_rate"] == pytest.approx(v, abs=1e-12)
    assert row["n_requests"] == 60 and row["n_failed"] == 3
    full = np.where(failed, np.inf, lat)
    assert row["p50_s"] == pytest.approx(np.quantile(full, 0.5), rel=1e-12)
    assert row["backend"] == "import" and row["seed"] == 3 and row["k_total"] == 2
    run = read_run(iter_run_dirs(out)[0])
    assert run.meta["merge_duration_s"] == 8.0 and run.requests["sent_s"].min() == 0.0
    assert any("vLLM" in note for note in run.meta["notes"])


def test_latency_from_itls_and_absolute_merge_clock(tmp_path):
    data = _result(seed=1)
    ref = np.array(data.pop("latencies"))
    t0 = min(data["start_times"])
    res, mer = _files(tmp_path, data, merges=json.dumps(
        [{"start_s": t0 + 5.0, "end_s": t0 + 13.0}]))
    mer_json = mer.with_suffix(".json")
    mer.rename(mer_json)
    out = tmp_path / "runs"
    r = _invoke(["import", "vllm-bench", str(res), "--out", str(out), "--merges",
                 str(mer_json), "--merge-clock", "absolute", "--policy", "wa", "--seed", "0",
                 "--slo-e2e", str(SLO)])
    assert r.exit_code == 0, r.output
    run = read_run(iter_run_dirs(out)[0])
    assert run.merges["start_s"].tolist() == pytest.approx([5.0])
    ok = run.requests["ok"].to_numpy()
    got = (run.requests["end_s"] - run.requests["sent_s"]).to_numpy()[ok]
    assert got == pytest.approx(ref[ok], abs=1e-9)


@pytest.mark.parametrize("mutate, key", [
    (lambda d: d["ttfts"].pop(), "ttfts"),                        # mismatched lengths
    (lambda d: d.pop("start_times"), "start_times"),              # key missing
    (lambda d: d["input_lens"].__setitem__(2, "12"), "input_lens"),   # wrong type
    (lambda d: d["latencies"].__setitem__(0, -1.0), "latencies"),     # negative
    (lambda d: d.__setitem__("errors", "none"), "errors"),            # not a list
])
def test_bad_result_exit_2_nothing_written(tmp_path, mutate, key):
    data = _result()
    mutate(data)
    res, mer = _files(tmp_path, data)
    out = tmp_path / "runs"
    r = CliRunner().invoke(cli, ["import", "vllm-bench", str(res), "--out", str(out),
                                 "--merges", str(mer), "--policy", "wa", "--seed", "0",
                                 "--slo-e2e", "1"])
    assert r.exit_code == 2
    assert "result.json" in r.output and f"'{key}'" in r.output
    assert not out.exists() or not any(out.iterdir())


def test_bad_merges_and_missing_merges(tmp_path):
    res, mer = _files(tmp_path, _result(), merges="start_s,end_s\n5,13\n10,20\n")
    out = tmp_path / "runs"
    base = ["import", "vllm-bench", str(res), "--out", str(out), "--policy", "wa", "--seed",
            "0", "--slo-e2e", "1"]
    r = CliRunner().invoke(cli, base + ["--merges", str(mer)])
    assert r.exit_code == 2 and "overlap" in r.output and "merges.csv" in r.output
    r = CliRunner().invoke(cli, base)
    assert r.exit_code == 2 and "--merges" in r.output
    assert not out.exists() or not any(out.iterdir())
    # a no-sync baseline needs no merges but an explicit merge duration
    r = CliRunner().invoke(cli, base + ["--role", "no_sync", "--policy", "no_sync",
                                        "--merge-duration", "8"])
    assert r.exit_code == 0, r.output
    assert summarize_runs(out).iloc[0]["k_total"] == 0
