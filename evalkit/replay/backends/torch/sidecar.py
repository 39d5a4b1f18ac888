"""A small OpenAI-compatible serving sidecar over a random-init transformers model.

Run as ``evalkit serve --preset tiny`` (standalone) or, as the torch backend does,
``python -m evalkit.replay.backends.torch.sidecar --port P --config cfg.json``.  An engine
thread does continuous batching: each iteration admits waiting requests (one left-padded
prefill forward for all of them), then runs one batched decode step over every active
request.  The batch's KV cache (a transformers ``DynamicCache``, left-padded) grows in place
across decode steps and is only rebuilt when requests join or leave.  Tokens are sampled
per request (greedy at ``temperature`` 0; ``seed`` makes sampling reproducible); the model
has no EOS, so a request ends at ``max_tokens``, a ``stop`` string or a ``stop_token_ids``
token (``ignore_eos``/``min_tokens`` are accepted).

Endpoints: ``POST /v1/completions`` and ``POST /v1/chat/completions`` (see
:mod:`~evalkit.replay.backends.torch.openai_api`; ``stream`` true: one SSE event per token,
then ``[DONE]``), ``GET /v1/models[/{id}]``, ``GET /health``, ``GET /version``,
``GET /metrics`` (vLLM's metric names, see :mod:`~evalkit.replay.backends.torch.metrics`),
``POST /admin/reset`` (between runs on a warm rig: drain every request, zero the metrics).
Errors are OpenAI error objects with 400/404/405/422/503 status codes.
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

from .openai_api import APIError, Sampling, chunk, parse_chat, parse_completion, response, usage
from .tokenizer import SidecarTokenizer

GREEDY = Sampling(max_tokens=1, temperature=0.0)


@dataclass
class Seq:
    rid: str
    prompt: list
    max_tokens: int
    emit: object                      # callable(item) -> None, thread-safe
    index: int = 0                    # choice index within its request
    sampling: Sampling = GREEDY
    count_prompt: bool = True         # False for the 2nd..nth choice of one prompt
    generated: int = 0
    n_real: int = 0
    last: int = 0
    cancelled: bool = False
    finished: str | None = None       # finish reason once decided
    text: str = ""
    sent: int = 0                     # characters of ``text`` already emitted
    generator: object = None
    t_arrive: float = field(default_factory=time.monotonic)
    t_admit: float | None = None
    t_first: float | None = None
    t_last: float | None = None


class Engine:
    def __init__(self, model, *, device: str, max_batch: int, vocab: int,
                 max_prefill_batch: int | None = None, metrics=None, tokenizer=None):
        import torch
        from evalkit.replay.backends.torch.models import cache_kwarg
        self.torch = torch
        self.model = model.eval()
        self.device = device
        self.max_batch = max_batch
        self.max_prefill_batch = max_prefill_batch or max_batch   # 1: one prefill per request
        self.vocab = vocab
        self.tokenizer = tokenizer or SidecarTokenizer(vocab)
        self.metrics = metrics
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
        self._seed_rng = torch.Generator().manual_seed(int(time.time_ns() % 2**62))

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
        # a finished sequence leaves `active` only after the step's loop; its client may
        # already hold the response, so it no longer counts as running
        return sum(1 for s in list(self.active) if s.finished is None)

    def kv_tokens(self) -> int:
        return sum(s.n_real for s in list(self.active))

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
        if self.metrics is not None:
            self.metrics.reset()
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
                        else:
                            self._finish(seq, "abort")
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

    # -- sampling --------------------------------------------------------------------------
    def _pick(self, logits, seqs: list) -> list:
        """One token per row of ``logits`` [B, V], each by its request's sampling params."""
        torch = self.torch
        toks = logits.argmax(-1).tolist()
        for i, seq in enumerate(seqs):
            sp = seq.sampling
            if sp.greedy:
                continue
            if seq.generator is None:
                gen_dev = logits.device if logits.device.type == "cuda" else "cpu"
                seed = (sp.seed + seq.index if sp.seed is not None else
                        int(torch.randint(0, 2**62, (1,), generator=self._seed_rng)))
                seq.generator = torch.Generator(device=gen_dev).manual_seed(seed)
            row = logits[i].float() / sp.temperature
            if sp.top_k and sp.top_k < row.shape[-1]:
                kth = torch.topk(row, sp.top_k).values[-1]
                row = row.masked_fill(row < kth, float("-inf"))
            probs = torch.softmax(row, -1)
            if sp.top_p < 1.0:
                p_sorted, idx = torch.sort(probs, descending=True)
                drop = p_sorted.cumsum(-1) - p_sorted > sp.top_p
                probs = probs.scatter(0, idx, p_sorted.masked_fill(drop, 0.0))
            toks[i] = int(torch.multinomial(probs, 1, generator=seq.generator))
        return toks

    def _prefill(self, seqs: list) -> None:
        """One left-padded forward over every newly admitted prompt; joins the batch."""
        torch = self.torch
        now = time.monotonic()
        for s in seqs:
            s.t_admit = now
            if self.metrics is not None:
                self.metrics.admitted(now - s.t_arrive, len(s.prompt) if s.count_prompt else 0)
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
        toks = self._pick(out.logits[:, -1], seqs)
        self.counters["prefill_batches"] += 1
        if self.metrics is not None:
            self.metrics.step(prefill=True)
        keep = []
        for i, (seq, tok) in enumerate(zip(seqs, toks)):
            if seq.count_prompt:
                self.counters["prompt_tokens"] += len(seq.prompt)
            if seq.cancelled:
                self._finish(seq, "abort")
                continue
            self._accept(seq, tok)
            if seq.finished:
                self._finish(seq, seq.finished)
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
        toks = self._pick(out.logits[:, -1], self.active)
        self.mask = mask
        self.counters["iterations"] += 1
        if self.metrics is not None:
            self.metrics.step(prefill=False)
        keep = []
        for i, (seq, tok) in enumerate(zip(self.active, toks)):
            seq.n_real += 1
            seq.last = tok
            if seq.cancelled:
                self._finish(seq, "abort")
                continue
            self._accept(seq, tok)
            if seq.finished:
                self._finish(seq, seq.finished)
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

    def _accept(self, seq: Seq, tok: int) -> None:
        """Count a generated token, apply stop conditions, emit the releasable text.

        With stop strings, the last ``len(longest stop) - 1`` characters are held back until
        no stop string can start in them, so a client never sees text past a stop string.
        """
        now = time.monotonic()
        first = seq.generated == 0
        seq.generated += 1
        self.counters["generation_tokens"] += 1
        if self.metrics is not None:
            self.metrics.token(first, now - (seq.t_arrive if first else seq.t_last))
        if first:
            seq.t_first = now
        seq.t_last = now
        sp = seq.sampling
        checking = seq.generated >= sp.min_tokens
        if checking and tok in sp.stop_token_ids:
            seq.finished = "stop"
        else:
            seq.text += self.tokenizer.piece(tok)
            if checking and sp.stop:
                hits = [i for i in (seq.text.find(s, seq.sent) for s in sp.stop) if i >= 0]
                if hits:
                    seq.text = seq.text[:min(hits)]
                    seq.finished = "stop"
        if seq.finished is None and seq.generated >= seq.max_tokens:
            seq.finished = "length"
        hold = 0 if seq.finished or not sp.stop else max(map(len, sp.stop)) - 1
        end = max(seq.sent, len(seq.text) - hold)
        release, seq.sent = seq.text[seq.sent:end], end
        seq.emit(("token", tok, seq.index, release))

    def _finish(self, seq: Seq, reason: str) -> None:
        seq.finished = reason
        if reason != "abort":
            self.counters["success"] += 1
        if self.metrics is not None:
            now = time.monotonic()
            self.metrics.finished(
                reason, e2e_s=now - seq.t_arrive,
                prefill_s=None if seq.t_first is None or seq.t_admit is None
                else seq.t_first - seq.t_admit,
                decode_s=None if seq.t_first is None else (seq.t_last or now) - seq.t_first,
                prompt_tokens=len(seq.prompt), generated=seq.generated)
        seq.emit(("done", reason, seq.index))


# -- HTTP ----------------------------------------------------------------------------------------

def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def make_app(engine: Engine, model_name: str, *, max_model_len: int = 32768,
             default_max_tokens: int = 256):
    from aiohttp import web

    tok = engine.tokenizer
    started = int(time.time())

    def error_response(exc: APIError):
        return web.json_response(exc.body(), status=exc.status)

    @web.middleware
    async def openai_errors(request, handler):
        try:
            return await handler(request)
        except APIError as exc:
            return error_response(exc)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            msg = (f"no route {request.method} {request.path}" if exc.status == 404
                   else f"{exc.reason}: {request.method} {request.path}")
            return error_response(APIError(exc.status, msg, code=exc.reason.lower()
                                           .replace(" ", "_")))
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:   # a bug: still an OpenAI-shaped answer
            return error_response(APIError(500, f"{type(exc).__name__}: {exc}",
                                           code="internal_error"))

    def check_engine():
        if engine.error:
            raise APIError(503, f"the engine failed: {engine.error}", code="engine_dead")
        if engine.reset_requested.is_set():
            raise APIError(503, "the engine is resetting; retry", code="engine_resetting")

    async def read_json(request):
        try:
            return await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise APIError(400, f"the request body is not valid JSON ({exc})",
                           code="invalid_json") from exc

    async def generate(request, kind: str):
        check_engine()
        body = await read_json(request)
        if kind == "chat":
            req = parse_chat(body, tok, model_name=model_name, max_model_len=max_model_len,
                             default_max_tokens=default_max_tokens)
        else:
            req = parse_completion(body, tok, model_name=model_name,
                                   max_model_len=max_model_len)
        loop = asyncio.get_running_loop()
        q: asyncio.Queue = asyncio.Queue()

        def emit(item):                 # engine thread; the loop may be gone at shutdown
            try:
                loop.call_soon_threadsafe(q.put_nowait, item)
            except RuntimeError:
                pass

        seqs = [Seq(f"{req.request_id}-{p * req.n + j}", ids, req.sampling.max_tokens, emit,
                    index=p * req.n + j, sampling=req.sampling, count_prompt=j == 0)
                for p, ids in enumerate(req.prompts) for j in range(req.n)]
        for seq in seqs:
            engine.inbox.put(seq)
        prompt_tokens = sum(len(p) for p in req.prompts)
        generated = [0] * len(seqs)
        if not req.stream:
            texts, reasons = [""] * len(seqs), [None] * len(seqs)
            left = len(seqs)
            try:
                while left:
                    item = await q.get()
                    if item[0] == "error":
                        raise APIError(503, f"generation failed: {item[1]}",
                                       code="engine_error")
                    if item[0] == "token":
                        _, _, i, text = item
                        texts[i] += text
                        generated[i] += 1
                    else:
                        reasons[item[2]] = item[1]
                        left -= 1
            except BaseException:
                for seq in seqs:
                    seq.cancelled = True
                raise
            return web.json_response(response(
                req, list(zip(range(len(seqs)), texts, reasons)),
                usage(prompt_tokens, sum(generated))))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache"})
        try:
            await resp.prepare(request)
            if req.kind == "chat":
                for seq in seqs:
                    await resp.write(_sse(chunk(req, seq.index, "", first=True)))
            left = len(seqs)
            while left:
                item = await q.get()
                if item[0] == "error":
                    err = APIError(503, f"generation failed: {item[1]}", code="engine_error")
                    await resp.write(_sse(err.body()))
                    return resp
                if item[0] == "token":
                    _, _, i, text = item
                    generated[i] += 1
                    await resp.write(_sse(chunk(req, i, text)))
                else:
                    reason, i = item[1], item[2]
                    left -= 1
                    await resp.write(_sse(chunk(req, i, None if req.kind == "chat" else "",
                                                reason)))
            if req.include_usage:
                await resp.write(_sse(chunk(req, None, None,
                                            use=usage(prompt_tokens, sum(generated)))))
            await resp.write(b"data: [DONE]\n\n")
        except BaseException:           # client gone, or the server stopping
            for seq in seqs:
                seq.cancelled = True
            raise
        return resp

    async def completions(request):
        return await generate(request, "completion")

    async def chat_completions(request):
        return await generate(request, "chat")

    async def reset(request):
        loop = asyncio.get_running_loop()
        done = await loop.run_in_executor(None, engine.request_reset, 30.0)
        if not done:
            raise APIError(503, "the engine did not reset within 30 s", code="reset_timeout")
        return web.json_response({"reset": True, "counters": dict(engine.counters)})

    def model_card():
        return {"id": model_name, "object": "model", "created": started, "owned_by": "evalkit",
                "root": model_name, "parent": None, "max_model_len": max_model_len}

    async def models(request):
        return web.json_response({"object": "list", "data": [model_card()]})

    async def model_detail(request):
        name = request.match_info["model"]
        if name != model_name:
            raise APIError(404, f"The model `{name}` does not exist.", param="model",
                           code="model_not_found")
        return web.json_response(model_card())

    async def health(request):
        if engine.error:
            raise APIError(503, f"the engine failed: {engine.error}", code="engine_dead")
        return web.Response(text="ok")

    async def version(request):
        from evalkit import __version__
        return web.json_response({"version": __version__, "engine": "evalkit-sidecar"})

    async def metrics(request):
        if engine.metrics is None:
            raise APIError(404, "metrics are off", code="not_found")
        from prometheus_client import CONTENT_TYPE_LATEST
        return web.Response(body=engine.metrics.exposition(),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[openai_errors])
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/v1/models/{model:.+}", model_detail)
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/admin/reset", reset)
    return app


def build_engine(cfg: dict) -> Engine:
    """Model, metrics and engine thread from a resolved sidecar config (see serve_config)."""
    import torch
    from evalkit.replay.backends.torch.metrics import ServingMetrics
    from evalkit.replay.backends.torch.models import build_model
    torch.set_num_threads(int(cfg["threads"]))
    model = build_model(cfg["model"], seed=int(cfg["seed"]), device=cfg["device"],
                        dtype=cfg["dtype"])
    engine = Engine(model, device=cfg["device"], max_batch=int(cfg["max_batch"]),
                    vocab=int(cfg["model"]["vocab_size"]),
                    max_prefill_batch=cfg.get("max_prefill_batch"))
    engine.metrics = ServingMetrics(cfg["model_name"], running=engine.num_running,
                                    waiting=engine.num_waiting, kv_used_tokens=engine.kv_tokens,
                                    kv_cache_tokens=int(cfg["kv_cache_tokens"]))
    threading.Thread(target=engine.run, name="engine", daemon=True).start()
    return engine


def port_free(host: str, port: int) -> str | None:
    """None when ``host:port`` can be bound, else the reason."""
    import socket
    probe = socket.socket()
    try:
        probe.bind((host, port))
        return None
    except OSError as exc:
        return str(exc)
    finally:
        probe.close()


def serve(cfg: dict, *, host: str, port: int, handle_signals: bool = True) -> None:
    """Build the engine and serve until stopped (Ctrl-C / SIGTERM with ``handle_signals``)."""
    from aiohttp import web
    engine = build_engine(cfg)
    app = make_app(engine, cfg["model_name"], max_model_len=int(cfg["max_model_len"]),
                   default_max_tokens=int(cfg["default_max_tokens"]))
    print(f"sidecar: serving {cfg['model_name']} ({cfg['model'].get('preset')}, "
          f"{cfg['device']}, {cfg['dtype']}) on http://{host}:{port}", flush=True)
    try:
        web.run_app(app, host=host, port=port, print=None, access_log=None,
                    handle_signals=handle_signals, shutdown_timeout=1.0)
    finally:
        engine.stop.set()


def main(argv=None) -> int:
    from evalkit.errors import InputError
    from evalkit.replay.backends.torch.procs import die_with_parent
    from evalkit.replay.backends.torch.serve_config import resolve_serve_config
    die_with_parent()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--config", required=True, help="JSON file of sidecar settings")
    args = ap.parse_args(argv)
    try:
        with open(args.config) as f:
            cfg = resolve_serve_config(json.load(f), where=args.config)
    except InputError as exc:
        print(f"sidecar: error: {exc.format()}", file=sys.stderr, flush=True)
        return 2
    busy = port_free(args.host, args.port)
    if busy is not None:
        print(f"sidecar: port {args.port} is in use: {busy}", file=sys.stderr, flush=True)
        return 3
    import os
    import signal
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))   # nothing to flush: stop at once
    serve(cfg, host=args.host, port=args.port, handle_signals=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
