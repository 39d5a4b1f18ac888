"""Synthetic harness result files for the comparison tests: vLLM ``bench serve`` results
(``--save-result --save-detailed``) whose latencies are drawn from a seeded model."""

from __future__ import annotations

import json

import numpy as np


def vllm_result(rng: np.random.Generator, *, n: int = 200, ttft_scale: float = 0.05,
                tpot: float = 0.01, fail_share: float = 0.0, seed: int | None = None) -> dict:
    """One run: ``n`` requests sent at 0.05 s spacing, lognormal TTFT around ``ttft_scale``,
    64 output tokens at ``tpot`` s each; ``fail_share`` of the requests error."""
    start = np.arange(n) * 0.05 + 100.0
    ttft = ttft_scale * rng.lognormal(0.0, 0.3, n)
    out = np.full(n, 64)
    latency = ttft + tpot * (out - 1) * rng.lognormal(0.0, 0.1, n)
    failed = rng.random(n) < fail_share
    result = {
        "start_times": start.tolist(), "input_lens": [32] * n, "output_lens": out.tolist(),
        "ttfts": [None if f else float(t) for f, t in zip(failed, ttft)],
        "latencies": [None if f else float(x) for f, x in zip(failed, latency)],
        "errors": ["boom" if f else "" for f in failed],
    }
    if seed is not None:
        result["seed"] = seed
    return result


def write_side(folder, results: list[dict], *, stem: str = "run") -> None:
    """``folder/run-0.json``, ``run-1.json``, ...: one file per repetition."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, r in enumerate(results):
        (folder / f"{stem}-{i}.json").write_text(json.dumps(r))


def make_sides(tmp_path, *, reps: int = 6, b_scale: float = 0.05, a_scale: float = 0.05,
               seeds: bool = True, run_sd: float = 0.1, base_seed: int = 0):
    """A and B folders of ``reps`` vLLM results each; repetition i of A and B share a
    run-level factor (the host's state when the pair ran) so that pairing pays."""
    rng = np.random.default_rng(base_seed)
    a, b = [], []
    for i in range(reps):
        host = float(np.exp(rng.normal(0.0, run_sd)))
        a.append(vllm_result(rng, ttft_scale=a_scale * host, seed=i if seeds else None))
        b.append(vllm_result(rng, ttft_scale=b_scale * host, seed=i if seeds else None))
    write_side(tmp_path / "A", a)
    write_side(tmp_path / "B", b)
    return tmp_path / "A", tmp_path / "B"
