"""A small evalkit-native client for `evalkit serve`: bursts of concurrent streamed completions,
saved as vLLM ``bench serve --save-detailed`` results (what `evalkit compare` reads).

``python -m tests.compare.serve_client OUT`` records the runs the quick comparison test reads
(``tests/compare/recorded``, 8 repetitions): three servers -- max batch 1, max batch 8, and max batch 8 again
-- benchmarked in interleaved order, one file per repetition and configuration.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.request
from pathlib import Path

CONFIGS = {"batch1": ("--max-batch", "1"), "batch8": ("--max-batch", "8"),
           "batch8_again": ("--max-batch", "8")}
PROMPT = "the quick brown fox jumps over the lazy dog " * 2


def _one(url: str, model: str, max_tokens: int, out: dict, i: int) -> None:
    body = json.dumps({"model": model, "prompt": PROMPT, "max_tokens": max_tokens,
                       "stream": True, "ignore_eos": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    first, chunks, error = None, 0, ""
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            for line in r:
                line = line.strip()
                if line.startswith(b"data:") and b"[DONE]" not in line:
                    first = first or time.perf_counter()
                    chunks += 1
    except OSError as exc:
        error = str(exc) or type(exc).__name__
    end = time.perf_counter()
    out[i] = {"start": start, "ttft": None if first is None or error else first - start,
              "latency": None if error else end - start, "error": error,
              "output": max_tokens if not error else 0}


def burst(url: str, model: str, *, requests: int = 8, max_tokens: int = 32,
          seed: int | None = None) -> dict:
    """``requests`` concurrent completions: one vLLM-bench-style result."""
    out: dict = {}
    threads = [threading.Thread(target=_one, args=(url, model, max_tokens, out, i))
               for i in range(requests)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = [out[i] for i in range(requests)]
    result = {"start_times": [r["start"] for r in rows], "ttfts": [r["ttft"] for r in rows],
              "latencies": [r["latency"] for r in rows], "errors": [r["error"] for r in rows],
              "input_lens": [len(PROMPT.split())] * requests,
              "output_lens": [r["output"] for r in rows]}
    if seed is not None:
        result["seed"] = seed
    return result


def record(out_dir, servers: dict, *, reps: int) -> None:
    """``reps`` bursts per server, the servers' order rotating each repetition;
    ``out_dir/<config>/run-<rep>.json`` (seed = rep)."""
    names = list(servers)
    for rep in range(reps):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for name in order:
            server = servers[name]
            folder = Path(out_dir) / name
            folder.mkdir(parents=True, exist_ok=True)
            result = burst(server.base_url, server.model, seed=rep)
            (folder / f"run-{rep}.json").write_text(json.dumps(result))


def start_servers(configs: dict = CONFIGS) -> dict:
    """One `evalkit serve` per configuration, started side by side (each takes ~15 s)."""
    from tests.support.sidecar_server import start_server

    servers, failures = {}, []

    def start(name, extra):
        try:
            servers[name] = start_server(name, *extra)
        except RuntimeError as exc:
            failures.append(exc)

    threads = [threading.Thread(target=start, args=item) for item in configs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        stop_servers(servers)
        raise failures[0]
    return servers


def stop_servers(servers: dict) -> None:
    from tests.support.sidecar_server import stop_server

    for s in servers.values():
        stop_server(s)


def main(out_dir: str, reps: int = 8) -> None:
    servers = start_servers()
    try:
        record(out_dir, servers, reps=reps)
    finally:
        stop_servers(servers)


if __name__ == "__main__":
    main(sys.argv[1])
