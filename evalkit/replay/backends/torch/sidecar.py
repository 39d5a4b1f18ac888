"""A small OpenAI-compatible serving sidecar over a random-init transformers model.

Run as ``python -m evalkit.replay.backends.torch.sidecar --port P --config cfg.json``.
An engine thread does continuous batching: each iteration admits waiting requests (one
left-padded prefill forward for all of them), then runs one batched decode step over every
active request.  The batch's KV cache (a transformers ``DynamicCache``, left-padded) grows
in place across decode steps and is only rebuilt when requests join or leave.  Tokens are greedy; EOS is never honoured, so every request
produces exactly ``max_tokens`` tokens (``ignore_eos``/``min_tokens`` are accepted).

Endpoints: ``POST /v1/completions`` (``stream`` true: one SSE event per token, then
``[DONE]``), ``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus text with
``vllm:num_requests_running`` and ``vllm:num_requests_waiting``), ``POST /admin/reset``
(between runs on a warm rig: drain every request, zero the counters).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field


@dataclass
class Seq:
    rid: str
    prompt: list
    max_tokens: int
    emit: object                      # callable(item) -> None, thread-safe
    generated: int = 0
    n_real: int = 0
    last: int = 0
    cancelled: bool = False
    t_arrive: float = field(default_factory=time.monotonic)


class Engine:
    def __init__(self, model, *, device: str, max_batch: int, vocab: int,
                 max_prefill_batch: int | None = None):
        import torch
        from evalkit.replay.backends.torch.models import cache_kwarg
        self.torch = torch
        self.model = model.eval()
        self.device = device
        self.max_batch = max_batch
        self.max_prefill_batch = max_prefill_batch or max_batch   # 1: one prefill per request
        self.vocab = vocab
        self.cache_arg = cache_kwarg(model)
        self.inbox: queue.Queue = queue.Queue()
        self.waiting: deque = deque()
        self.active: list[Seq] = []
        self.cache = None              # DynamicCache of the active batch, [B, H, T, d]
        self.mask = None               # [B, T] long, 0 = left padding
        self.stop = threading.Event()
        self.reset_requested = threading.Event()
        self.reset_done = threading.Event()
        self.counters = self._zero_counters()
        self.error: str | None = None

    @staticmethod
    def _zero_counters() -> dict:
        return {"generation_tokens": 0, "prompt_tokens": 0, "success": 0, "iterations": 0,
                "prefill_batches": 0, "resets": 0}

    # -- cache helpers -------------------------------------------------------------------
    @staticmethod
    def _new_cache(kv=None):
        from transformers import DynamicCache
        c = DynamicCache()
        for i, (k, v) in enumerate(kv or ()):
            c.update(k, v, i)
        return c

    @staticmethod
    def _kv_of(cache):
        if hasattr(cache, "layers"):
            return [(layer.keys, layer.values) for layer in cache.layers]
        return list(zip(cache.key_cache, cache.value_cache))

    def _forward(self, cache, **kw):
        kw[self.cache_arg] = cache
        out = self.model(use_cache=True, **kw)
        return out, (getattr(out, "cache", None) or out.past_key_values)

    # -- scheduling ----------------------------------------------------------------------
    def num_waiting(self) -> int:
        return len(self.waiting) + self.inbox.qsize()

    def num_running(self) -> int:
        return len(self.active)

    def request_reset(self, timeout_s: float = 30.0) -> bool:
        """Drain every request (they end with an error) and zero the counters."""
        self.reset_done.clear()
        self.reset_requested.set()
        return self.reset_done.wait(timeout_s)

    def _do_reset(self) -> None:
        while True:
            try:
                self.waiting.append(self.inbox.get_nowait())
            except queue.Empty:
                break
        for seq in list(self.active) + list(self.waiting):
            if not seq.cancelled:
                seq.cancelled = True
                seq.emit(("error", "engine reset"))
        self.active, self.waiting = [], deque()
        self.cache, self.mask = None, None
        resets = self.counters["resets"] + 1
        self.counters = self._zero_counters()
        self.counters["resets"] = resets
        if self.device.startswith("cuda"):
            self.torch.cuda.empty_cache()
        self.reset_requested.clear()
        self.reset_done.set()

    def run(self) -> None:
        torch = self.torch
        try:
            with torch.inference_mode():
                while not self.stop.is_set():
                    if self.reset_requested.is_set():
                        self._do_reset()
                    while True:
                        try:
                            self.waiting.append(self.inbox.get_nowait())
                        except queue.Empty:
                            break
                    admit = []
                    while (self.waiting and len(self.active) + len(admit) < self.max_batch
                           and len(admit) < self.max_prefill_batch):
                        seq = self.waiting.popleft()
                        if not seq.cancelled:
                            admit.append(seq)
                    if admit:
                        self._prefill(admit)
                    if self.active:
                        self._decode()
                    elif not self.waiting:
                        try:
                            self.waiting.append(self.inbox.get(timeout=0.05))
                        except queue.Empty:
                            pass
        except Exception as exc:  # surfaces in /health and /metrics
            self.error = f"{type(exc).__name__}: {exc}"
            for seq in list(self.active) + list(self.waiting):
                seq.emit(("error", self.error))
            raise

    def _prefill(self, seqs: list) -> None:
        """One left-padded forward over every newly admitted prompt; joins the batch."""
        torch = self.torch
        n, T = len(seqs), max(len(s.prompt) for s in seqs)
        ids = torch.zeros(n, T, dtype=torch.long)
        mask = torch.zeros(n, T, dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, T - len(s.prompt):] = torch.tensor(s.prompt, dtype=torch.long)
            mask[i, T - len(s.prompt):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        out, cache = self._forward(self._new_cache(), input_ids=ids, attention_mask=mask,
                                   position_ids=pos)
        toks = out.logits[:, -1].argmax(-1).tolist()
        self.counters["prefill_batches"] += 1
        keep = []
        for i, (seq, tok) in enumerate(zip(seqs, toks)):
            self.counters["prompt_tokens"] += len(seq.prompt)
            self._emit_token(seq, tok)
            if seq.generated >= seq.max_tokens:
                self._finish(seq)
            else:
                seq.n_real, seq.last = len(seq.prompt), tok
                keep.append(i)
        if not keep:
            return
        kv = self._kv_of(cache)
        if len(keep) < n:
            idx = torch.tensor(keep, device=self.device)
            kv = [(k.index_select(0, idx), v.index_select(0, idx)) for k, v in kv]
            mask = mask.index_select(0, idx)
        new = [seqs[i] for i in keep]
        if self.cache is None:
            self.cache, self.mask, self.active = self._new_cache(kv), mask, new
            return
        old = self._kv_of(self.cache)
        T = max(self.mask.shape[1], mask.shape[1])
        pad = lambda t: torch.nn.functional.pad(t, (0, 0, T - t.shape[2], 0))  # noqa: E731
        padm = lambda m: torch.nn.functional.pad(m, (T - m.shape[1], 0))  # noqa: E731
        self.cache = self._new_cache(
            [(torch.cat([pad(k0), pad(k1)]), torch.cat([pad(v0), pad(v1)]))
             for (k0, v0), (k1, v1) in zip(old, kv)])
        self.mask = torch.cat([padm(self.mask), padm(mask)])
        self.active += new

    def _decode(self) -> None:
        """One token for every active request; the KV cache grows in place across steps."""
        torch = self.torch
        B = len(self.active)
        ids = torch.tensor([[s.last] for s in self.active], device=self.device)
        pos = torch.tensor([[s.n_real] for s in self.active], device=self.device)
        mask = torch.cat([self.mask, torch.ones(B, 1, dtype=torch.long, device=self.device)], 1)
        out, self.cache = self._forward(self.cache, input_ids=ids, attention_mask=mask,
                                        position_ids=pos)
        toks = out.logits[:, -1].argmax(-1).tolist()
        self.mask = mask
        self.counters["iterations"] += 1
        keep = []
        for i, (seq, tok) in enumerate(zip(self.active, toks)):
            seq.n_real += 1
            seq.last = tok
            if not seq.cancelled:
                self._emit_token(seq, tok)
            if seq.cancelled or seq.generated >= seq.max_tokens:
                self._finish(seq)
            else:
                keep.append(i)
        if len(keep) == B:
            return
        if not keep:
            self.cache, self.mask, self.active = None, None, []
            return
        idx = torch.tensor(keep, device=self.device)
        mask = self.mask.index_select(0, idx)
        first = int((mask.sum(0) > 0).nonzero()[0])      # drop all-padding columns
        self.mask = mask[:, first:]
        self.cache = self._new_cache(
            [(k.index_select(0, idx)[:, :, first:], v.index_select(0, idx)[:, :, first:])
             for k, v in self._kv_of(self.cache)])
        self.active = [self.active[i] for i in keep]

    def _emit_token(self, seq: Seq, tok: int) -> None:
        seq.generated += 1
        self.counters["generation_tokens"] += 1
        seq.emit(("token", tok))

    def _finish(self, seq: Seq) -> None:
        if not seq.cancelled:
            self.counters["success"] += 1
        seq.emit(("done", None))


def make_app(engine: Engine, model_name: str):
    from aiohttp import web

    def err(status, message, typ="BadRequestError"):
        return web.json_response({"object": "error", "message": message, "type": typ,
                                  "code": status}, status=status)

    def to_ids(prompt):
        if isinstance(prompt, str):
            return [b % engine.vocab for b in prompt.encode()] or [0]
        if isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
            return [x % engine.vocab for x in prompt]
        if isinstance(prompt, list) and len(prompt) == 1:
            return to_ids(prompt[0])
        raise ValueError("prompt must be a string or a list of token ids")

    async def completions(request):
        try:
            body = await request.json()
            ids = to_ids(body.get("prompt", ""))
            max_tokens = int(body.get("max_tokens", 16))
        except (ValueError, TypeError) as exc:
            return err(400, str(exc))
        if body.get("model") not in (None, model_name):
            return err(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
        if max_tokens < 1:
            return err(400, "max_tokens must be >= 1")
        if engine.error:
            return err(500, engine.error, "InternalServerError")
        loop = asyncio.get_running_loop()
        q: asyncio.Queue = asyncio.Queue()
        rid = f"cmpl-{id(q):x}"
        seq = Seq(rid, ids, max_tokens, lambda item: loop.call_soon_threadsafe(q.put_nowait, item))
        engine.inbox.put(seq)
        created = int(time.time())

        def chunk(text, finish=None):
            return {"id": rid, "object": "text_completion", "created": created,
                    "model": model_name,
                    "choices": [{"index": 0, "text": text, "logprobs": None,
                                 "finish_reason": finish}]}
        usage = {"prompt_tokens": len(ids), "completion_tokens": 0}
        if not body.get("stream"):
            toks = []
            while True:
                kind, val = await q.get()
                if kind == "error":
                    return err(500, val, "InternalServerError")
                if kind == "done":
                    break
                toks.append(val)
            usage["completion_tokens"] = len(toks)
            usage["total_tokens"] = len(ids) + len(toks)
            out = chunk("".join(f" t{t}" for t in toks), "length")
            out["usage"] = usage
            return web.json_response(out)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        try:
            await resp.prepare(request)
            while True:
                kind, val = await q.get()
                if kind == "error":
                    await resp.write(b"data: " + json.dumps({"error": val}).encode() + b"\n\n")
                    break
                if kind == "done":
                    last = chunk("", "length")
                    await resp.write(b"data: " + json.dumps(last).encode() + b"\n\n")
                    if (body.get("stream_options") or {}).get("include_usage"):
                        usage["total_tokens"] = len(ids) + usage["completion_tokens"]
                        u = {"id": rid, "object": "text_completion", "created": created,
                             "model": model_name, "choices": [], "usage": usage}
                        await resp.write(b"data: " + json.dumps(u).encode() + b"\n\n")
                    await resp.write(b"data: [DONE]\n\n")
                    break
                usage["completion_tokens"] += 1
                await resp.write(b"data: " + json.dumps(chunk(f" t{val}")).encode() + b"\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            seq.cancelled = True
            raise
        return resp

    async def reset(request):
        loop = asyncio.get_running_loop()
        done = await loop.run_in_executor(None, engine.request_reset, 30.0)
        if not done:
            return err(500, "engine did not reset within 30 s", "InternalServerError")
        return web.json_response({"reset": True, "counters": dict(engine.counters)})

    async def models(request):
        return web.json_response({"object": "list", "data": [
            {"id": model_name, "object": "model", "owned_by": "evalkit"}]})

    async def health(request):
        if engine.error:
            return web.Response(status=500, text=engine.error)
        return web.Response(text="ok")

    async def metrics(request):
        lab = f'{{model_name="{model_name}"}}'
        c = engine.counters
        lines = [
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{lab} {engine.num_running()}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{lab} {engine.num_waiting()}",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{lab} {c['generation_tokens']}",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{lab} {c['prompt_tokens']}",
            "# TYPE vllm:request_success_total counter",
            f"vllm:request_success_total{lab} {c['success']}",
            "# TYPE evalkit:engine_iterations_total counter",
            f"evalkit:engine_iterations_total{lab} {c['iterations']}",
            "# TYPE evalkit:prefill_batches_total counter",
            f"evalkit:prefill_batches_total{lab} {c['prefill_batches']}",
            "# TYPE evalkit:engine_resets_total counter",
            f"evalkit:engine_resets_total{lab} {c['resets']}",
        ]
        return web.Response(text="\n".join(lines) + "\n",
                            content_type="text/plain", charset="utf-8")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/admin/reset", reset)
    return app


def main(argv=None) -> int:
    from evalkit.replay.backends.torch.procs import die_with_parent
    die_with_parent()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--config", required=True, help="JSON file: model, device, dtype, ...")
    args = ap.parse_args(argv)
    with open(args.config) as f:
        cfg = json.load(f)
    import socket
    probe = socket.socket()
    try:
        probe.bind((args.host, args.port))
    except OSError as exc:
        print(f"sidecar: port {args.port} is in use: {exc}", file=sys.stderr, flush=True)
        return 3
    finally:
        probe.close()

    import torch
    from aiohttp import web
    from evalkit.replay.backends.torch.models import build_model
    torch.set_num_threads(int(cfg.get("threads", 1)))
    model = build_model(cfg["model"], seed=int(cfg.get("seed", 0)), device=cfg["device"],
                        dtype=cfg.get("dtype", "float32"))
    engine = Engine(model, device=cfg["device"], max_batch=int(cfg.get("max_batch", 16)),
                    vocab=int(cfg["model"]["vocab_size"]))
    thread = threading.Thread(target=engine.run, name="engine", daemon=True)
    thread.start()
    print(f"sidecar: serving {cfg.get('model_name')} on {args.host}:{args.port}", flush=True)
    import os
    import signal
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))   # nothing to flush: stop at once
    web.run_app(make_app(engine, cfg.get("model_name", "evalkit-sidecar")), host=args.host,
                port=args.port, print=None, access_log=None, handle_signals=False,
                shutdown_timeout=1.0)
    engine.stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
