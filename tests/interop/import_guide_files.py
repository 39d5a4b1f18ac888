"""Small vLLM bench and GuideLLM result files for the import guide (examples/IMPORT.md).

One campaign as the guide describes it: per seed one policy run, two matched-random draws
and one no-sync run, every run replaying the seed's requests on the same schedule.  Merges
slow the requests they overlap; the policy places its K merges in the trace's quiet phases,
the draws place K merges at random inside the same corridor.  The numbers are made up but
shaped like the tools' files; what the guide shows is the path to a verdict, not a result.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SEEDS = (1, 2, 3, 4, 5, 6)
DRAWS = (0, 1)
K = 3
MERGE_S = 2.0
SPAN_S = 60.0
HORIZON_S = 64.0
MIN_GAP_S, MAX_GAP_S = 6.0, 30.0
T0_PERF = 1000.0            # the bench client's perf_counter at its first send
T0_UNIX = 1_780_000_000.0   # GuideLLM's Unix clock at the benchmark's first arrival


def _requests(seed: int):
    """The seed's schedule: send offsets (s), prompt and output lengths; busy every other
    10 s, quiet between."""
    rng = np.random.default_rng(seed)
    busy = np.concatenate([np.sort(rng.uniform(a, a + 10.0, 40)) for a in (0, 20, 40)])
    quiet = np.concatenate([np.sort(rng.uniform(a, a + 10.0, 6)) for a in (10, 30, 50)])
    send = np.sort(np.concatenate([busy, quiet]))
    return send, rng.integers(20, 400, send.size), rng.integers(8, 64, send.size)


def _schedule(seed: int, role: str, draw: int | None):
    """K merge windows (start, end) in s from the first send: quiet phases for the policy,
    uniformly random with the corridor's gaps for a draw."""
    if role == "policy":
        starts = np.array([11.0, 31.0, 51.0])
    else:
        rng = np.random.default_rng(1000 * seed + 17 + (draw or 0))
        while True:         # the corridor: first start and every gap in [min gap, max gap]
            starts = np.sort(rng.uniform(MIN_GAP_S, SPAN_S - 2 * MERGE_S, K))
            gaps = np.diff(np.concatenate([[0.0], starts, [HORIZON_S - MERGE_S]]))
            if (gaps >= MIN_GAP_S).all() and (gaps <= MAX_GAP_S).all():
                break
    return [(float(s), float(s + MERGE_S)) for s in starts]


def _latencies(seed: int, send, out, windows, salt: int):
    """(ttft, e2e) per request: a base service time, +1.5 s when a merge overlaps it."""
    rng = np.random.default_rng(seed * 7919 + salt)
    ttft = rng.gamma(4.0, 0.03, send.size)
    e2e = ttft + out * rng.uniform(0.008, 0.012, send.size)
    for a, b in windows:
        hit = (send < b) & (send + e2e > a)
        e2e = np.where(hit, e2e + 1.5, e2e)
        ttft = np.where(hit & (send >= a), ttft + 1.0, ttft)
    return ttft, np.maximum(e2e, ttft + 1e-3)


def _vllm_result(seed, send, prompt, out, ttft, e2e, t0: float, index: int) -> dict:
    """As `vllm bench serve --save-result --save-detailed` writes it: the configuration, what
    the bench measured (each run its own: date, duration, throughput, percentiles) and the
    per-request arrays."""
    start = t0 + send
    duration = float((send + e2e).max())
    return {"date": f"20260101-{index // 60:02d}{index % 60:02d}00", "backend": "vllm",
            "model_id": "tiny", "tokenizer_id": "tiny", "dataset_name": "sharegpt",
            "num_prompts": int(send.size), "request_rate": "inf", "burstiness": 1.0,
            "max_concurrency": None, "duration": duration, "completed": int(send.size),
            "failed": 0, "total_input_tokens": int(prompt.sum()),
            "total_output_tokens": int(out.sum()),
            "request_throughput": send.size / duration,
            "output_throughput": float(out.sum()) / duration,
            "mean_ttft_ms": 1000 * float(ttft.mean()),
            "p99_e2el_ms": 1000 * float(np.quantile(e2e, 0.99)),
            "input_lens": prompt.tolist(), "output_lens": out.tolist(),
            "ttfts": ttft.tolist(), "latencies": e2e.tolist(),
            "itls": [[] for _ in send], "start_times": start.tolist(),
            "errors": [""] * int(send.size)}


def _runs():
    """(name, role, seed, draw, windows) of every run of the campaign."""
    for seed in SEEDS:
        yield f"policy-s{seed}", "policy", seed, None, _schedule(seed, "policy", None)
        for d in DRAWS:
            yield f"random-s{seed}-d{d}", "matched_random", seed, d, \
                _schedule(seed, "matched_random", d)
        yield f"nosync-s{seed}", "no_sync", seed, None, []


def _folder(folder) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _simulated():
    """Per run: its index (the salt of its noise), name, seed, merge windows and its requests'
    send offsets, prompt and output lengths, TTFT and E2E."""
    for salt, (name, _role, seed, _draw, windows) in enumerate(_runs()):
        send, prompt, out = _requests(seed)
        yield salt, name, seed, windows, (send, prompt, out,
                                          *_latencies(seed, send, out, windows, salt))


def write_vllm_files(folder: Path) -> list[str]:
    """``<run>.json`` (vLLM bench --save-result --save-detailed) and, for merging runs,
    ``merges-<run>.csv`` (start_s, end_s on the bench client's perf_counter clock)."""
    folder = _folder(folder)
    names = []
    for salt, name, seed, windows, (send, prompt, out, ttft, e2e) in _simulated():
        t0 = T0_PERF + 100.0 * salt            # each run on its own bench process's clock
        (folder / f"{name}.json").write_text(json.dumps(
            _vllm_result(seed, send, prompt, out, ttft, e2e, t0, salt)))
        if windows:
            (folder / f"merges-{name}.csv").write_text("start_s,end_s\n" + "".join(
                f"{t0 + a!r},{t0 + b!r}\n" for a, b in windows))
        names.append(name)
    return names


def write_guidellm_files(folder: Path) -> list[str]:
    """``<run>.guidellm.json`` (one constant-rate benchmark, report schema 2, timings in Unix
    seconds) and ``merges-<run>.unix.csv`` (merge windows in Unix seconds)."""
    folder = _folder(folder)
    names = []
    for salt, name, seed, windows, (send, prompt, out, ttft, e2e) in _simulated():
        t0 = T0_UNIX + 100.0 * salt            # each run started at its own time
        successful = []
        for i in range(send.size):
            t = t0 + send[i]
            successful.append({
                "request_id": f"{name}-{i}", "prompt_tokens": int(prompt[i]),
                "output_tokens": int(out[i]),
                "info": {"error": None, "timings": {
                    "targeted_start": t, "request_start": t,
                    "first_token_iteration": t + float(ttft[i]),
                    "request_end": t + float(e2e[i])}}})
        report = {"metadata": {"version": 2, "guidellm_version": "0.8.1"},
                  "benchmarks": [{"config": {"strategy": {"type_": "constant", "rate": 3.0}},
                                  "scheduler_metrics": {"requests_made": {
                                      "successful": int(send.size), "errored": 0,
                                      "incomplete": 0}},
                                  "requests": {"successful": successful, "errored": [],
                                               "incomplete": []}}]}
        (folder / f"{name}.guidellm.json").write_text(json.dumps(report))
        if windows:
            (folder / f"merges-{name}.unix.csv").write_text("start_s,end_s\n" + "".join(
                f"{t0 + a!r},{t0 + b!r}\n" for a, b in windows))
        names.append(name)
    return names
