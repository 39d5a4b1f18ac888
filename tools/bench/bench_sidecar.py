"""Benchmark of the torch sidecar's engine: batched prefill vs one prefill per request.

    python tools/bench/bench_sidecar.py [--device cpu|cuda] [--model small] [--n 32]

``--n`` requests (prompt ``--prompt`` tokens, ``--out`` output tokens) arrive at once, as in
the capacity probe and at a burst onset.  The reference, timed in the same run, is the same
engine admitting one request per iteration (one prefill forward per request, the sidecar's
earlier behaviour).  Prints output tokens/s of both and their ratio (> 1: batching helps).
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np


def run_once(model, args, max_prefill_batch):
    from evalkit.replay.backends.sidecar.engine import Engine
    from evalkit.replay.backends.sidecar.sequence import Seq
    eng = Engine(model, device=args.device, max_batch=args.n, vocab=int(model.config.vocab_size),
                 max_prefill_batch=max_prefill_batch)
    left = threading.Semaphore(0)
    rng = np.random.default_rng(0)
    th = threading.Thread(target=eng.run, daemon=True)
    th.start()
    t0 = time.perf_counter()
    for i in range(args.n):
        eng.inbox.put(Seq(str(i), rng.integers(100, 500, args.prompt).tolist(), args.out,
                          lambda item: item[0] != "token" and left.release()))
    for _ in range(args.n):
        left.acquire()
    elapsed = time.perf_counter() - t0
    eng.stop.set()
    th.join()
    return args.n * args.out / elapsed, eng.counters["prefill_batches"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--model", default="small")
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--out", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    import torch
    from evalkit.replay.backends.models import build_model, resolve_config
    dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    model = build_model(resolve_config(args.model), seed=0, device=args.device, dtype=dtype)
    torch.set_num_threads(1)
    run_once(model, args, None)                      # warm-up
    ref = max(run_once(model, args, 1)[0] for _ in range(args.reps))
    new, batches = max(run_once(model, args, None) for _ in range(args.reps))
    print(f"{args.n} requests at once, prompt {args.prompt}, output {args.out}, "
          f"model {args.model} on {args.device}")
    print(f"  one prefill per request (reference): {ref:8.1f} output tokens/s")
    print(f"  batched prefill ({batches} prefill forwards): {new:8.1f} output tokens/s")
    print(f"  ratio batched / reference: {new / ref:.2f}")


if __name__ == "__main__":
    main()
