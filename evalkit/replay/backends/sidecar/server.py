"""The sidecar's HTTP side (aiohttp): one handler per route over an :class:`~.engine.Engine`.

Routes (vLLM's):

==================================  ==========================================================
``POST /v1/completions``            OpenAI completions (``stream``: one SSE event per token)
``POST /v1/chat/completions``       OpenAI chat completions
``GET /v1/models[/{id}]``           the served model
``POST /tokenize``, ``/detokenize`` vLLM's tokenizer endpoints
``GET /health``, ``GET|POST /ping``  200 while the engine serves, else 503 with the reason
``GET /version``                    ``{"version": ...}``
``GET /metrics``                    Prometheus text, vLLM's names (see :mod:`.metrics`)
``POST /admin/reset``               only with an admin key (the replay rig's, never
                                    ``evalkit serve``'s): drain every request, zero metrics
==================================  ==========================================================

Limits (:class:`Limits`, all settable in the serve config): a body over ``max_request_bytes``
is refused with 413 from its ``Content-Length``, before it is read; bodies being read or
parsed at once are capped by bytes (``max_request_bytes_in_flight``, 429 with
``Retry-After`` beyond), counted as they arrive, so a declared length reserves nothing; a
body must keep arriving (``body_idle_timeout_s``) and arrive whole within
``body_read_timeout_s`` (408, its bytes released); large bodies are parsed off the event
loop, so ``/health`` answers meanwhile.  A request may fan out to at most
``max_seqs_per_request`` sequences (prompts x ``n``; 400 beyond), carry at most
``max_stop_strings`` stop strings of ``max_stop_bytes`` together (400), and the server holds
at most ``max_seqs_in_flight`` (429 with ``Retry-After`` beyond).  With an API key the
``/v1`` routes, ``/tokenize`` and ``/detokenize`` need ``Authorization: Bearer <key>`` (401
otherwise, before any body byte is read), as vLLM's ``--api-key``.  A client that
disconnects, or does not take a streamed chunk within ``stream_write_timeout_s``, aborts its
sequences and costs one log line.  :func:`run` serves with SO_REUSEADDR, closes connections
that send no whole request head within ``idle_connection_timeout_s``, and answers requests
the HTTP parser refuses with the same JSON error objects.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from evalkit.version import __version__

from .openai_requests import (MAX_STOP_BYTES, MAX_STOP_STRINGS, APIError, detokenize_request,
                              parse_chat, parse_completion, tokenize_request)
from .openai_responses import chunk, logprobs_block, response, usage
from .sequence import Seq

MiB = 2**20
PARSE_OFF_LOOP_BYTES = 64 * 1024     # smaller bodies are parsed inline (cheaper than a hop)
_CLOSE = {"Connection": "close"}     # a body left half read: the connection cannot go on


@dataclass(frozen=True)
class Limits:
    max_request_bytes: int = 16 * MiB
    max_request_bytes_in_flight: int = 64 * MiB
    max_seqs_per_request: int = 256
    max_seqs_in_flight: int = 4096
    max_stop_strings: int = MAX_STOP_STRINGS
    max_stop_bytes: int = MAX_STOP_BYTES
    body_read_timeout_s: float = 30.0        # a whole body
    body_idle_timeout_s: float = 10.0        # the wait for the next body bytes
    idle_connection_timeout_s: float = 20.0  # a connection without a whole request head
    stream_write_timeout_s: float = 30.0     # a streamed chunk the client does not take
    retry_after_s: int = 1


class ServerState:
    """What the handlers share: the engine, the settings, and the in-flight budgets."""

    def __init__(self, engine, model_name: str, *, max_model_len: int, default_max_tokens: int,
                 limits: Limits, api_key: str | None, admin_key: str | None, log):
        self.engine, self.model_name = engine, model_name
        self.max_model_len, self.default_max_tokens = max_model_len, default_max_tokens
        self.limits, self.api_key, self.admin_key, self.log = limits, api_key, admin_key, log
        self.tok = engine.tokenizer
        self.started = int(time.time())
        self.body_bytes = 0                  # reserved by bodies being read or parsed
        self.seqs = 0                        # sequences queued or running for HTTP clients
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="parse")

    def busy(self, what: str, close: bool = False) -> APIError:
        s = self.limits.retry_after_s
        return APIError(429, f"the server is at its limit of {what}; retry in {s} s",
                        headers={"Retry-After": str(s), **(_CLOSE if close else {})})


STATE = None       # the web.AppKey, made on first use (aiohttp is imported lazily)


def _state(request) -> ServerState:
    return request.app[STATE]


def _log_line(msg: str) -> None:
    print(f"sidecar: {msg}", file=sys.stderr, flush=True)


KEYED_ROUTES = ("/tokenize", "/detokenize")     # beside /v1: every route that reads a body


def _needs_key(path: str) -> bool:
    return path.startswith("/v1") or path in KEYED_ROUTES


def _bearer_ok(request, key: str) -> bool:
    got = request.headers.get("Authorization", "")
    return hmac.compare_digest(got.encode(), f"Bearer {key}".encode())


# -- middleware ---------------------------------------------------------------------------------

def _error_response(exc: APIError):
    from aiohttp import web
    resp = web.json_response(exc.body(), status=exc.status, headers=exc.headers)
    if exc.headers.get("Connection") == "close":
        resp.force_close()
    return resp


def _unauthorized() -> APIError:
    return APIError(401, "Unauthorized: send the API key as 'Authorization: Bearer <key>'")


async def _expect_continue(request):
    """``Expect: 100-continue``: the key is checked before the client is told to send its body
    (aiohttp answers this header before any middleware runs); without the key the answer is a
    401 and the connection closes, so the body is never invited."""
    from aiohttp.web_urldispatcher import _default_expect_handler
    st = _state(request)
    if st.api_key and _needs_key(request.path) and not _bearer_ok(request, st.api_key):
        exc = _unauthorized()
        exc.headers["Connection"] = "close"
        return _error_response(exc)
    return await _default_expect_handler(request)


def _middlewares():
    from aiohttp import web

    @web.middleware
    async def openai_errors(request, handler):
        try:
            st = _state(request)
            if st.api_key and _needs_key(request.path) and not _bearer_ok(request, st.api_key):
                raise _unauthorized()
            return await handler(request)
        except APIError as exc:
            return _error_response(exc)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            msg = (f"no route {request.method} {request.path}" if exc.status == 404
                   else f"{exc.reason}: {request.method} {request.path}")
            return _error_response(APIError(exc.status, msg))
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:   # a bug: still an OpenAI-shaped answer
            return _error_response(APIError(500, f"{type(exc).__name__}: {exc}"))

    return [openai_errors]


# -- bodies -------------------------------------------------------------------------------------

def _decode_json(raw: bytes):
    try:
        return json.loads(raw)
    except RecursionError:
        raise APIError(400, "the request body is nested too deeply to parse") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise APIError(400, f"the request body is not valid JSON ({exc})") from None


async def _read_body(request, reserved: list) -> bytes:
    """The body, read chunk by chunk within ``max_request_bytes`` (413), the in-flight byte
    budget (429; each chunk is reserved as it arrives and added to ``reserved[0]``, which the
    caller releases), ``body_idle_timeout_s`` between chunks and ``body_read_timeout_s`` in
    all (408)."""
    st, lim = _state(request), _state(request).limits
    loop = asyncio.get_running_loop()
    deadline = loop.time() + lim.body_read_timeout_s
    parts, size = [], 0
    while True:
        left = deadline - loop.time()
        wait = min(left, lim.body_idle_timeout_s)
        try:
            async with asyncio.timeout(max(wait, 0)):
                data = await request.content.readany()
        except TimeoutError:
            what = (f"within {lim.body_read_timeout_s:g} s (body_read_timeout_s)"
                    if wait >= left else
                    f"for {lim.body_idle_timeout_s:g} s (body_idle_timeout_s)")
            raise APIError(408, f"the request body did not arrive {what}; "
                                "send the whole body at once", headers=_CLOSE) from None
        if not data:
            return b"".join(parts)
        size += len(data)
        if size > lim.max_request_bytes:
            raise APIError(413, f"the request body is over {lim.max_request_bytes} bytes "
                                "(max_request_bytes)", headers=_CLOSE)
        if st.body_bytes + len(data) > lim.max_request_bytes_in_flight:
            raise st.busy(f"{lim.max_request_bytes_in_flight} request bytes being read "
                          "(max_request_bytes_in_flight)", close=True)
        st.body_bytes += len(data)
        reserved[0] += len(data)
        parts.append(data)


async def _parsed_body(request, parse):
    """Read the body within the byte and time limits and return ``parse(json)``, off the
    event loop for large bodies."""
    st, lim = _state(request), _state(request).limits
    length = request.content_length
    if length is not None and length > lim.max_request_bytes:
        raise APIError(413, f"the request body is {length} bytes; the server takes at most "
                            f"{lim.max_request_bytes} (max_request_bytes)")
    reserved = [0]
    try:
        raw = await _read_body(request, reserved)

        def work():
            return parse(_decode_json(raw))
        if len(raw) < PARSE_OFF_LOOP_BYTES:
            return work()
        return await asyncio.get_running_loop().run_in_executor(st.pool, work)
    finally:
        st.body_bytes -= reserved[0]


def _check_serving(st: ServerState) -> None:
    why = st.engine.dead()
    if why:
        raise APIError(503, why)
    if st.engine.reset_requested.is_set():
        raise APIError(503, "the engine is resetting; retry")


# -- generation ---------------------------------------------------------------------------------

def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class _Abandoned(Exception):
    """The client went away."""


async def _generate(request, kind: str):
    from aiohttp import web
    st = _state(request)
    _check_serving(st)
    lim = st.limits
    common = dict(model_name=st.model_name, max_model_len=st.max_model_len,
                  max_seqs=lim.max_seqs_per_request, max_stop_strings=lim.max_stop_strings,
                  max_stop_bytes=lim.max_stop_bytes)
    if kind == "chat":
        req = await _parsed_body(request, lambda b: parse_chat(
            b, st.tok, default_max_tokens=st.default_max_tokens, **common))
    else:
        req = await _parsed_body(request, lambda b: parse_completion(b, st.tok, **common))
    n_seqs = len(req.prompts) * req.n
    if st.seqs + n_seqs > lim.max_seqs_in_flight:
        raise st.busy(f"{lim.max_seqs_in_flight} sequences in flight (max_seqs_in_flight)")
    loop = asyncio.get_running_loop()
    q: asyncio.Queue = asyncio.Queue()

    def emit(item):                 # engine thread; the loop may be gone at shutdown
        try:
            loop.call_soon_threadsafe(q.put_nowait, item)
        except RuntimeError:
            pass

    seqs = [Seq(f"{req.request_id}-{p * req.n + j}", ids, req.sampling.max_tokens, emit,
                index=p * req.n + j, sampling=req.sampling)
            for p, ids in enumerate(req.prompts) for j in range(req.n)]
    st.seqs += n_seqs
    for seq in seqs:
        st.engine.inbox.put(seq)
    prompt_tokens = sum(len(p) for p in req.prompts)
    echo = [req.echo[i // req.n] if req.echo else "" for i in range(n_seqs)]
    ended = [False] * n_seqs
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "Cache-Control": "no-cache"})
    try:
        if req.stream:
            return await _stream(request, resp, req, q, prompt_tokens, echo, ended)
        return await _collect(request, req, q, prompt_tokens, echo, ended)
    except (_Abandoned, ConnectionResetError, asyncio.CancelledError) as exc:
        left = ended.count(False)
        st.log(f"client disconnected: aborted {kind} request {req.request_id} "
               f"({left} of {n_seqs} sequence(s) unfinished)")
        if isinstance(exc, asyncio.CancelledError):
            raise
        return resp if resp.prepared else web.Response(status=499)
    finally:
        for seq in seqs:
            seq.cancelled = True          # no-op for finished ones; aborts the rest
        st.seqs -= n_seqs


def _gone(request) -> bool:
    t = request.transport
    return t is None or t.is_closing()


async def _next(request, q):
    """The next engine item; raises _Abandoned once the client has disconnected.

    The transport is checked before every item, not only when the queue is idle: a handler
    cancellation (aiohttp's, on disconnect) can be swallowed by ``wait_for`` when an item
    arrives at the same moment, and a generating sequence delivers items all the time."""
    while True:
        if _gone(request):
            raise _Abandoned()
        try:
            return q.get_nowait()
        except asyncio.QueueEmpty:
            pass
        try:
            return await asyncio.wait_for(q.get(), timeout=0.25)
        except asyncio.TimeoutError:
            pass


def _failure(msg: str) -> APIError:
    return APIError(503 if msg == "engine reset" else 500, f"generation failed: {msg}")


async def _collect(request, req, q, prompt_tokens, echo, ended):
    from aiohttp import web
    n = len(ended)
    texts, reasons, whys, generated = list(echo), [None] * n, [None] * n, [0] * n
    timings: list = [None] * n
    lps: list = [[] for _ in range(n)]
    while not all(ended):
        item = await _next(request, q)
        if item[0] == "error":
            raise _failure(item[1])
        if item[0] == "token":
            _, _, i, text, lp = item
            texts[i] += text
            generated[i] += 1
            if lp is not None:
                lps[i].append(lp)
        else:
            _, reason, i, why, timing = item
            reasons[i], whys[i], timings[i] = reason, why, {"index": i, **timing}
            ended[i] = True
    blocks = [logprobs_block(req, lps[i], len(echo[i])) for i in range(n)]
    body = response(req, list(zip(range(n), texts, reasons, whys, blocks)),
                    usage(prompt_tokens, sum(generated)))
    body["server_timing"] = timings
    return web.json_response(body)


async def _stream(request, resp, req, q, prompt_tokens, echo, ended):
    await resp.prepare(request)
    timeout_s = _state(request).limits.stream_write_timeout_s

    async def send(data: bytes):
        """One write; a client that takes none of it for ``stream_write_timeout_s`` is gone."""
        try:
            async with asyncio.timeout(timeout_s):
                await resp.write(data)
        except TimeoutError:
            if request.transport is not None:
                request.transport.abort()
            raise _Abandoned() from None

    generated = [0] * len(ended)
    offsets = [len(e) for e in echo]        # characters streamed per choice (text_offset)

    def so_far():                    # vLLM's continuous_usage_stats: usage in every chunk
        return usage(prompt_tokens, sum(generated)) if req.continuous_usage else None
    for i in range(len(ended)):
        if req.kind == "chat":
            await send(_sse(chunk(req, i, "", first=True, use=so_far())))
        elif echo[i]:
            await send(_sse(chunk(req, i, echo[i], use=so_far())))
    while not all(ended):
        item = await _next(request, q)
        if item[0] == "error":
            await send(_sse(_failure(item[1]).body()))
            break
        if item[0] == "token":
            _, _, i, text, lp = item
            generated[i] += 1
            block = None if lp is None else logprobs_block(req, [lp], offsets[i])
            offsets[i] += len(lp[0]) if lp is not None else 0
            await send(_sse(chunk(req, i, text, use=so_far(), logprobs=block)))
        else:
            _, reason, i, why, timing = item
            ended[i] = True
            finish = chunk(req, i, None if req.kind == "chat" else "", reason,
                           stop_reason=why, use=so_far())
            finish["server_timing"] = {"index": i, **timing}
            await send(_sse(finish))
    else:
        if req.include_usage:
            await send(_sse(chunk(req, None, None, use=usage(prompt_tokens, sum(generated)))))
    await send(b"data: [DONE]\n\n")
    return resp


async def completions(request):
    return await _generate(request, "completion")


async def chat_completions(request):
    return await _generate(request, "chat")


# -- the other routes ---------------------------------------------------------------------------

def _model_card(st: ServerState) -> dict:
    return {"id": st.model_name, "object": "model", "created": st.started,
            "owned_by": "evalkit", "root": st.model_name, "parent": None,
            "max_model_len": st.max_model_len}


async def models(request):
    from aiohttp import web
    return web.json_response({"object": "list", "data": [_model_card(_state(request))]})


async def model_detail(request):
    from aiohttp import web
    st = _state(request)
    name = request.match_info["model"]
    if name != st.model_name:
        raise APIError(404, f"The model `{name}` does not exist.", param="model")
    return web.json_response(_model_card(st))


async def tokenize(request):
    from aiohttp import web
    st = _state(request)
    return web.json_response(await _parsed_body(request, lambda b: tokenize_request(
        b, st.tok, model_name=st.model_name, max_model_len=st.max_model_len)))


async def detokenize(request):
    from aiohttp import web
    st = _state(request)
    return web.json_response(await _parsed_body(request, lambda b: detokenize_request(
        b, st.tok, model_name=st.model_name)))


async def health(request):
    from aiohttp import web
    why = _state(request).engine.healthy()
    if why:
        raise APIError(503, why)
    return web.Response(text="ok")


async def version(request):
    from aiohttp import web
    return web.json_response({"version": __version__, "engine": "evalkit-sidecar"})


async def metrics(request):
    from aiohttp import web
    engine = _state(request).engine
    if engine.metrics is None:
        raise APIError(404, "metrics are off")
    from prometheus_client import CONTENT_TYPE_LATEST
    return web.Response(body=engine.metrics.exposition(),
                        headers={"Content-Type": CONTENT_TYPE_LATEST})


async def admin_reset(request):
    from aiohttp import web
    st = _state(request)
    if not _bearer_ok(request, st.admin_key):
        raise APIError(401, "Unauthorized: /admin/reset needs the admin key")
    loop = asyncio.get_running_loop()
    done = await loop.run_in_executor(None, st.engine.request_reset, 30.0)
    if not done:
        raise APIError(503, "the engine did not reset within 30 s")
    return web.json_response({"reset": True, "counters": dict(st.engine.counters)})


def make_app(engine, model_name: str, *, max_model_len: int = 32768,
             default_max_tokens: int = 256, limits: Limits | None = None,
             api_key: str | None = None, admin_key: str | None = None, log=_log_line):
    """The aiohttp application; ``admin_key`` adds ``POST /admin/reset`` behind it."""
    global STATE
    from aiohttp import web
    if STATE is None:
        STATE = web.AppKey("sidecar_state", ServerState)
    limits = limits or Limits()
    app = web.Application(client_max_size=limits.max_request_bytes, middlewares=_middlewares())
    app[STATE] = ServerState(engine, model_name, max_model_len=max_model_len,
                             default_max_tokens=default_max_tokens, limits=limits,
                             api_key=api_key or None, admin_key=admin_key or None, log=log)
    app.router.add_post("/v1/completions", completions, expect_handler=_expect_continue)
    app.router.add_post("/v1/chat/completions", chat_completions, expect_handler=_expect_continue)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/v1/models/{model:.+}", model_detail)
    app.router.add_post("/tokenize", tokenize, expect_handler=_expect_continue)
    app.router.add_post("/detokenize", detokenize, expect_handler=_expect_continue)
    app.router.add_get("/health", health)
    app.router.add_get("/ping", health)
    app.router.add_post("/ping", health)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    if admin_key:
        app.router.add_post("/admin/reset", admin_reset)
    return app


# -- serving ------------------------------------------------------------------------------------

def _json_error_runner(app, **kwargs):
    """An AppRunner whose connections answer a request aiohttp cannot parse (bad request line
    or header, a head over its size limits, bad chunking) with an OpenAI error object instead
    of aiohttp's text/plain page; the connection then closes."""
    from http import HTTPStatus

    from aiohttp import web
    from aiohttp.web_protocol import RequestHandler

    class JSONErrorHandler(RequestHandler):
        def handle_error(self, request, status=500, exc=None, message=None):
            if request.writer.output_size > 0:          # a response is under way: nothing to add
                raise ConnectionError("response already started; cannot send the error")
            try:
                phrase = HTTPStatus(status).phrase
            except ValueError:
                phrase = "error"
            detail = message or (str(exc) if exc else "") or phrase
            what = "malformed HTTP request" if status < 500 else "internal server error"
            _log_line(f"{what} answered {status}: {' '.join(detail.split())[:200]}")
            resp = _error_response(APIError(status, f"{what} ({phrase}): {detail}"))
            resp.force_close()
            return resp

    class Server(web.Server):
        def __call__(self):
            return JSONErrorHandler(self, loop=self._loop, **self._kwargs)

    class Runner(web.AppRunner):
        async def _make_server(self):
            plain = await super()._make_server()
            return Server(plain.request_handler, request_factory=plain.request_factory,
                          handler_cancellation=plain.handler_cancellation, loop=plain._loop,
                          **plain._kwargs)

    return Runner(app, **kwargs)


async def start(app, host: str, port: int, *, handle_signals: bool = False):
    """Listen on ``host:port`` (SO_REUSEADDR) and return the runner (``await
    runner.cleanup()`` stops it).  A connection that has not sent a whole request head within
    ``idle_connection_timeout_s`` (an idle keep-alive one too) is closed."""
    from aiohttp import web
    runner = _json_error_runner(app, handle_signals=handle_signals, access_log=None,
                                handler_cancellation=True, shutdown_timeout=1.0,
                                keepalive_timeout=app[STATE].limits.idle_connection_timeout_s)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, reuse_address=True).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


def run(app, *, host: str, port: int, handle_signals: bool = True, ready=None) -> None:
    """Serve ``app`` until stopped (Ctrl-C / SIGTERM with ``handle_signals``); ``ready()`` is
    called once the socket listens."""
    from aiohttp import web

    async def main():
        runner = await start(app, host, port, handle_signals=handle_signals)
        try:
            if ready is not None:
                ready()
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    except (web.GracefulExit, KeyboardInterrupt):
        pass
