"""Readers: the real Azure file, synthetic Mooncake / BurstGPT / vLLM-bench files."""

import json

import numpy as np
import pandas as pd
import pytest

from evalkit.errors import InputError
from evalkit.replay.traces import (
    detect_bucket, grid_fraction, import_trace, read_azure, read_burstgpt, read_mooncake, read_trace,
    read_vllm_bench,
)


def test_azure_real_file(azure_trace):
    t = read_azure(azure_trace)
    raw = pd.read_csv(azure_trace)
    assert t.n == len(raw) == 8819
    assert 55 * 60 < t.duration_s < 58 * 60
    assert t.arrival_s[0] == 0.0 and np.all(np.diff(t.arrival_s) >= 0)
    # Independent reference: parse two rows by hand (7-decimal wall clock).
    assert t.arrival_s[1] == pytest.approx(4.0319600 - 3.9799600, abs=1e-6)
    assert t.requests["prompt_tokens"].sum() == raw["ContextTokens"].sum()
    assert t.requests["output_tokens"].sum() == raw["GeneratedTokens"].sum()
    assert list(t.requests["request_id"]) == list(range(t.n))
    assert t.meta["format"] == "azure" and t.meta["dropped"] == {}


def test_azure_round_trip_hash(azure_trace, tmp_path):
    t = read_azure(azure_trace)
    assert t.write(tmp_path / "a.parquet") == read_trace(tmp_path / "a.parquet").sha256
    assert read_azure(azure_trace).sha256 == t.sha256


def _azure_csv(path, stamps, ctx=None, gen=None):
    n = len(stamps)
    pd.DataFrame({"TIMESTAMP": stamps, "ContextTokens": ctx or [100] * n,
                  "GeneratedTokens": gen or [10] * n}).to_csv(path, index=False)
    return path


def test_azure_bad_inputs(tmp_path):
    p = _azure_csv(tmp_path / "a.csv", ["2023-11-16 18:17:03.9799600", "2023-11-16 18:17:02.0"])
    with pytest.raises(InputError, match="1 arrival times go backwards"):
        read_azure(p)
    t = read_azure(p, sort=True)
    assert list(t.arrival_s) == pytest.approx([0.0, 1.97996])
    p = _azure_csv(tmp_path / "b.csv", ["2023-11-16 18:17:03.0", "yesterday"])
    with pytest.raises(InputError) as e:
        read_azure(p)
    assert e.value.column == "TIMESTAMP" and "'yesterday'" in e.value.message
    pd.DataFrame({"TIMESTAMP": ["2023-11-16 18:17:03.0"], "Context": [1]}).to_csv(
        tmp_path / "c.csv", index=False)
    with pytest.raises(InputError) as e:
        read_azure(tmp_path / "c.csv")
    assert e.value.column == "ContextTokens"
    (tmp_path / "d.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    with pytest.raises(InputError, match="empty"):
        read_azure(tmp_path / "d.csv")


def _mooncake(path, rng, n_buckets=40, bucket_ms=3000, per_bucket=(1, 28)):
    rows = []
    for k in range(n_buckets):
        if k % 5 == 4:
            continue                       # some empty buckets: gaps of 2 buckets occur too
        for _ in range(rng.integers(*per_bucket)):
            rows.append({"timestamp": k * bucket_ms,
                         "input_length": int(rng.integers(1, 9000)),
                         "output_length": int(rng.integers(1, 500)), "hash_ids": [1, 2, 3]})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return rows


def test_mooncake_jitter_stays_in_buckets(tmp_path):
    rows = _mooncake(tmp_path / "m.jsonl", np.random.default_rng(0))
    t = read_mooncake(tmp_path / "m.jsonl", seed=5)
    j = t.meta["jitter"]
    assert j["applied"] and j["bucket_s"] == pytest.approx(3.0) and j["seed"] == 5
    assert j["on_grid_fraction"] == 1.0
    assert j["max_requests_per_timestamp"] == max(
        pd.Series([r["timestamp"] for r in rows]).value_counts())
    raw_counts = np.bincount([r["timestamp"] // 3000 for r in rows])
    got_counts = np.bincount((t.arrival_s // 3.0).astype(int), minlength=len(raw_counts))
    np.testing.assert_array_equal(got_counts, raw_counts)      # every request stays in its bucket
    assert np.all(np.diff(t.arrival_s) >= 0) and len(np.unique(t.arrival_s)) == t.n
    # The multiset of (timestamp bucket, lengths) triples is preserved.
    want = sorted((r["timestamp"] // 3000, r["input_length"], r["output_length"]) for r in rows)
    got = sorted(zip((t.arrival_s // 3.0).astype(int), t.requests["prompt_tokens"],
                     t.requests["output_tokens"]))
    assert want == got


def test_mooncake_jitter_seeded_and_optional(tmp_path):
    _mooncake(tmp_path / "m.jsonl", np.random.default_rng(1))
    a = read_mooncake(tmp_path / "m.jsonl", seed=1)
    assert a.sha256 == read_mooncake(tmp_path / "m.jsonl", seed=1).sha256
    assert a.sha256 != read_mooncake(tmp_path / "m.jsonl", seed=2).sha256
    raw = read_mooncake(tmp_path / "m.jsonl", jitter=False)
    assert raw.meta["jitter"]["applied"] is False and "disabled" in raw.meta["jitter"]["reason"]
    assert set(np.round(raw.arrival_s, 9)) <= set(np.arange(40) * 3.0)


def test_detect_bucket():
    assert detect_bucket([0, 0, 3, 3, 3, 9]) == (3.0, 3)
    assert detect_bucket([0.0, 0.001, 0.002]) == (pytest.approx(0.001), 1)
    assert grid_fraction([0, 3, 9, 12], 3.0) == 1.0
    assert grid_fraction([0, 3, 4.5, 12], 3.0) == pytest.approx(1 / 3)


def test_mooncake_bad_inputs(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 1, "output_length": 1}\n{oops\n')
    with pytest.raises(InputError, match="line 2"):
        read_mooncake(p)
    p.write_text('{"timestamp": 0, "input_length": 1}\n')
    with pytest.raises(InputError) as e:
        read_mooncake(p)
    assert e.value.column == "output_length"
    p.write_text('{"timestamp": 0, "input_length": 1, "output_length": 1}\n' * 3)
    with pytest.raises(InputError, match="--no-jitter"):
        read_mooncake(p)
    assert read_mooncake(p, jitter=False).n == 3
    p.write_text('{"timestamp": 3000, "input_length": 1, "output_length": 1}\n'
                 '{"timestamp": 0, "input_length": 1, "output_length": 1}\n')
    with pytest.raises(InputError, match="backwards"):
        read_mooncake(p)


def test_burstgpt_drops_failed_rows(tmp_path):
    df = pd.DataFrame({"Timestamp": [5.0, 6.0, 7.5, 9.0, 12.0],
                       "Model": ["ChatGPT", "GPT-4", "ChatGPT", "ChatGPT", "GPT-4"],
                       "Request tokens": [100, 200, 300, 400, 500],
                       "Response tokens": [10, 0, 30, 0, 50], "Total tokens": [0] * 5,
                       "Log Type": ["Conversation log"] * 5})
    df.to_csv(tmp_path / "b.csv", index=False)
    t = read_burstgpt(tmp_path / "b.csv")
    assert t.n == 3 and t.meta["dropped"] == {"failed (Response tokens == 0)": 2}
    assert list(t.arrival_s) == [0.0, 2.5, 7.0] and t.meta["t0"] == 5.0
    assert list(t.requests["prompt_tokens"]) == [100, 300, 500]
    assert t.meta["models"] == {"ChatGPT": 2, "GPT-4": 1}


def test_burstgpt_all_failed_is_empty(tmp_path):
    pd.DataFrame({"Timestamp": [1.0], "Request tokens": [3], "Response tokens": [0]}).to_csv(
        tmp_path / "b.csv", index=False)
    with pytest.raises(InputError, match="empty"):
        read_burstgpt(tmp_path / "b.csv")


def _vllm(path, **over):
    data = {"request_rate": 4.0, "burstiness": 1.0,
            "input_lens": [10, 20, 30, 40], "output_lens": [5, 0, 7, 8],
            "start_times": [1000.5, 1000.7, 1001.0, 1002.25],
            "errors": ["", "timeout", "", ""], "ttfts": [0.1, 0, 0.2, 0.3]}
    data.update(over)
    path.write_text(json.dumps(data))
    return path


def test_vllm_bench(tmp_path):
    t = read_vllm_bench(_vllm(tmp_path / "v.json"))
    assert t.n == 3 and t.meta["dropped"]["failed (non-empty error)"] == 1
    assert list(t.arrival_s) == pytest.approx([0.0, 0.5, 1.75])
    assert list(t.requests["output_tokens"]) == [5, 7, 8]
    assert t.meta["bench"]["request_rate"] == 4.0


def test_vllm_bench_bad_inputs(tmp_path):
    p = tmp_path / "v.json"
    data = json.loads(_vllm(p).read_text())
    del data["start_times"]
    p.write_text(json.dumps(data))
    with pytest.raises(InputError) as e:
        read_vllm_bench(p)
    assert e.value.column == "start_times"
    with pytest.raises(InputError) as e:
        read_vllm_bench(_vllm(p, output_lens=[1, 2]))
    assert e.value.column == "output_lens"
    p.write_text("[1, 2]")
    with pytest.raises(InputError, match="JSON object"):
        read_vllm_bench(p)


def test_import_trace_dispatch(tmp_path):
    with pytest.raises(InputError, match="unknown format"):
        import_trace(tmp_path / "x", "sharegpt")
    with pytest.raises(InputError, match="not found"):
        import_trace(tmp_path / "x.csv", "azure")
