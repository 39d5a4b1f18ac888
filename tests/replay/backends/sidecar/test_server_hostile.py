"""The sidecar's HTTP front end against hostile clients, in process over loopback with a
stand-in engine (no model): body-read deadlines, bytes reserved as they arrive and released on
timeout, the API key checked before any body byte, malformed requests answered with OpenAI
error objects, idle connections closed, streams nobody reads aborted, stop strings bounded and
matched in time independent of their number, and a port probe that a TIME-WAIT does not
block."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import threading
import time

import pytest

from evalkit.replay.backends.sidecar import server
from evalkit.replay.backends.sidecar.openai_requests import (
    MAX_STOP_BYTES, MAX_STOP_STRINGS, APIError, Sampling, parse_completion)
from evalkit.replay.backends.sidecar.sequence import Seq, append_token, server_timing
from evalkit.replay.backends.sidecar.serve import port_free
from evalkit.replay.backends.sidecar.server import Limits, make_app, start
from evalkit.replay.backends.sidecar.tokenizer import SidecarTokenizer
from tests.support.optional import installed

pytestmark = installed("aiohttp")

KEY = "sk-hostile"
LIMITS = Limits(max_request_bytes=1000, max_request_bytes_in_flight=2000,
                body_idle_timeout_s=0.4, body_read_timeout_s=1.2,
                idle_connection_timeout_s=0.6, stream_write_timeout_s=0.5,
                max_stop_strings=3, max_stop_bytes=12)


FLOOD = [400, 401]                # a prompt the stand-in engine answers with a flood


class StubEngine:
    """Answers every sequence at once with one token, or, for the prompt ``FLOOD``, emits
    64 KiB tokens from a thread until the sequence is cancelled (at most 400)."""
    tokenizer = SidecarTokenizer(512)
    reset_requested = threading.Event()
    metrics = None

    def __init__(self):
        self.inbox = self
        self.seqs: list = []
        self.flooded = 0

    def dead(self):
        return None

    healthy = dead

    def put(self, seq):
        self.seqs.append(seq)
        if seq.prompt == FLOOD:
            threading.Thread(target=self._flood, args=(seq,), daemon=True).start()
            return
        seq.emit(("token", 5, seq.index, " t5", None))
        seq.emit(("done", "length", seq.index, None, server_timing(seq, time.monotonic())))

    def _flood(self, seq):
        for _ in range(400):
            if seq.cancelled:
                return
            seq.emit(("token", 7, seq.index, "x" * 65536, None))
            self.flooded += 1
            time.sleep(0.002)


def serve(test, limits: Limits = LIMITS, api_key: str | None = KEY):
    """Run ``await test(port, state)`` against a listening server, then stop it."""
    async def main():
        app = make_app(StubEngine(), "m", limits=limits, api_key=api_key)
        runner = await start(app, "127.0.0.1", 0)
        try:
            return await test(runner.addresses[0][1], app[server.STATE])
        finally:
            await runner.cleanup()
    return asyncio.run(main())


def head(path: str, length: int | None, key: str | None = KEY, extra: str = "") -> bytes:
    size = f"Content-Length: {length}\r\n" if length is not None else \
        "Transfer-Encoding: chunked\r\n"
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"{auth}{size}{extra}\r\n").encode()


async def send(port: int, data: bytes):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    return reader, writer


async def response(reader, timeout_s: float = 5.0) -> tuple[int, dict, bytes]:
    """Status, headers and body of one response; (0, {}, b"") when none came in time."""
    try:
        async with asyncio.timeout(timeout_s):
            raw = await reader.readuntil(b"\r\n\r\n")
            lines = raw.decode().split("\r\n")
            headers = {k.lower(): v.strip()
                       for k, v in (ln.split(":", 1) for ln in lines[1:] if ln)}
            body = await reader.readexactly(int(headers.get("content-length", 0)))
    except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
        return 0, {}, b""
    return int(lines[0].split()[1]), headers, body


def error_of(body: bytes) -> dict:
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


async def wait_for(cond, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        await asyncio.sleep(0.01)
    return cond()


def tokenize_body(size: int) -> bytes:
    head_, tail = b'{"prompt": "', b'"}'
    return head_ + b"a" * (size - len(head_) - len(tail)) + tail


# -- body reads ----------------------------------------------------------------------------------

def test_a_huge_declared_body_with_one_byte_sent_reserves_one_byte():
    async def go(port, st):
        held = [await send(port, head("/v1/completions", 1000) + b"{") for _ in range(4)]
        assert await wait_for(lambda: st.body_bytes == 4, 2), st.body_bytes
        reader, writer = await send(port, head("/tokenize", 900) + tokenize_body(900))
        status, _, body = await response(reader)       # 4 x 1000 declared > 2000: still served
        for _, w in held + [(reader, writer)]:
            w.close()
        return status, json.loads(body)
    status, out = serve(go)
    assert status == 200 and out["count"] == 900 - 14


def test_a_stalled_body_gets_408_and_releases_its_bytes():
    async def go(port, st):
        reader, writer = await send(port, head("/v1/completions", 1000) + b"{" * 800)
        assert await wait_for(lambda: st.body_bytes == 800, 2)
        t = time.monotonic()
        status, headers, body = await response(reader, timeout_s=5)
        took = time.monotonic() - t
        freed = await wait_for(lambda: st.body_bytes == 0, 1)
        writer.close()
        return status, headers, body, took, freed
    status, headers, body, took, freed = serve(go)
    assert status == 408 and headers["connection"] == "close"
    err = error_of(body)
    assert err["type"] == "RequestTimeout" and "body_idle_timeout_s" in err["message"]
    assert took < 2.0 and freed


def test_a_client_that_goes_away_mid_body_releases_its_bytes_at_once():
    patient = Limits(**{**LIMITS.__dict__, "body_idle_timeout_s": 30.0,
                        "body_read_timeout_s": 60.0})

    async def go(port, st):
        reader, writer = await send(port, head("/tokenize", 1000) + b"{" * 700)
        assert await wait_for(lambda: st.body_bytes == 700, 2)
        writer.close()
        return await wait_for(lambda: st.body_bytes == 0, 1)
    assert serve(go, limits=patient)


def test_a_trickling_body_meets_the_whole_body_deadline():
    async def go(port, st):
        reader, writer = await send(port, head("/tokenize", 1000) + b"{")
        t = time.monotonic()
        sender = asyncio.ensure_future(_trickle(writer))
        status, _, body = await response(reader, timeout_s=5)
        took = time.monotonic() - t
        sender.cancel()
        writer.close()
        return status, body, took, st.body_bytes
    status, body, took, left = serve(go)
    assert status == 408 and "body_read_timeout_s" in error_of(body)["message"]
    assert took < 2.5 and left == 0


async def _trickle(writer):
    while True:
        await asyncio.sleep(0.1)                # well within body_idle_timeout_s
        writer.write(b" ")
        await writer.drain()


def test_bytes_in_flight_are_reserved_as_they_arrive_and_429_beyond():
    async def go(port, st):
        a = await send(port, head("/tokenize", 1000) + tokenize_body(1000)[:900])
        b = await send(port, head("/tokenize", 1000) + tokenize_body(1000)[:900])
        assert await wait_for(lambda: st.body_bytes == 1800, 2)
        c = await send(port, head("/tokenize", 1000) + tokenize_body(1000)[:300])
        refused = await response(c[0])
        for r, w in (a, b):
            w.write(tokenize_body(1000)[900:])
        served = [await response(r) for r, _ in (a, b)]
        freed = await wait_for(lambda: st.body_bytes == 0, 1)
        for _, w in (a, b, c):
            w.close()
        return refused, served, freed
    (status, headers, body), served, freed = serve(go)
    assert status == 429 and headers["retry-after"] == "1" and headers["connection"] == "close"
    assert "max_request_bytes_in_flight" in error_of(body)["message"]
    assert [s for s, _, _ in served] == [200, 200] and freed


def test_unauthenticated_bodies_reserve_nothing_on_any_route():
    async def go(port, st):
        out = {}
        for path in ("/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"):
            for key in (None, "wrong"):
                reader, writer = await send(port, head(path, 1000, key=key) + b"{" * 500)
                status, _, body = await response(reader, timeout_s=0.3)  # before any deadline
                out[path, key] = (status, st.body_bytes, body)
                writer.close()
        return out
    for (path, key), (status, reserved, body) in serve(go).items():
        assert status == 401 and reserved == 0, (path, key, status)
        assert error_of(body)["type"] == "Unauthorized"


def test_expect_100_continue_invites_the_body_only_with_the_key():
    async def go(port, st):
        out = {}
        for path in ("/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"):
            for key in (None, "wrong", KEY):
                reader, writer = await send(
                    port, head(path, 1000, key=key, extra="Expect: 100-continue\r\n"))
                try:
                    async with asyncio.timeout(2.0):
                        first = (await reader.readuntil(b"\r\n")).decode()
                except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                    first = ""
                out[path, key] = first.split(" ", 2)[1] if first.count(" ") else ""
                writer.close()
        return out
    for (path, key), status in serve(go).items():
        assert status == ("100" if key == KEY else "401"), (path, key, status)


# -- connections and the HTTP parser -------------------------------------------------------------

@pytest.mark.parametrize("raw", [
    b"GARBAGE\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    b"POST /tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
    + b"\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
], ids=["request-line", "header-too-long", "two-lengths", "bad-chunk"])
def test_malformed_requests_get_openai_error_objects(raw):
    async def go(port, st):
        reader, writer = await send(port, raw)
        got = await response(reader)
        writer.close()
        return got
    status, headers, body = serve(go)
    assert status == 400, (status, body)
    assert headers["content-type"].startswith("application/json")
    err = error_of(body)
    assert err["code"] == 400 and err["type"] == "BadRequestError" and err["message"]


def test_idle_connections_and_unfinished_heads_are_closed():
    async def go(port, st):
        idle = await send(port, b"")
        partial = await send(port, b"GET /health HTTP/1.1\r\nHo")
        t = time.monotonic()
        closed = [await asyncio.wait_for(r.read(), 5) for r, _ in (idle, partial)]
        return closed, time.monotonic() - t
    closed, took = serve(go)
    assert closed == [b"", b""] and took < 2.0


def test_a_stream_the_client_never_reads_is_aborted():
    async def go(port, st):
        body = json.dumps({"prompt": FLOOD, "max_tokens": 400, "stream": True}).encode()
        reader, writer = await send(port, head("/v1/completions", len(body)) + body)
        engine = st.engine
        assert await wait_for(lambda: engine.seqs, 2)
        cancelled = await wait_for(lambda: engine.seqs[0].cancelled, 8)
        freed = await wait_for(lambda: st.seqs == 0, 1)
        writer.close()
        return cancelled, freed, engine.flooded
    cancelled, freed, flooded = serve(go)
    assert cancelled and freed
    assert 20 < flooded < 400, flooded      # it streamed, then was cut before the flood ended


def _time_wait_on(port: int) -> None:
    """Leave a server-side connection of ``port`` in TIME-WAIT (the server closes first)."""
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", port))
    lsock.listen()
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = lsock.accept()
    conn.close()
    client.recv(1)
    client.close()
    lsock.close()


def test_the_port_probe_takes_a_port_in_time_wait_but_not_one_in_use():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _time_wait_on(port)
    assert port_free("127.0.0.1", port) is None
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        assert port_free("127.0.0.1", busy.getsockname()[1]) is not None


# -- stop strings --------------------------------------------------------------------------------

def _parse(stop, **limits):
    return parse_completion({"prompt": "x", "max_tokens": 4, "stop": stop},
                            SidecarTokenizer(512), model_name="m", max_model_len=64, **limits)


def test_stop_strings_are_bounded_by_count_and_bytes():
    assert len(_parse(["a"] * MAX_STOP_STRINGS).sampling.stop) == MAX_STOP_STRINGS
    with pytest.raises(APIError) as e:
        _parse(["a"] * (MAX_STOP_STRINGS + 1))
    assert e.value.status == 400 and e.value.param == "stop"
    assert "max_stop_strings" in e.value.message and f"{MAX_STOP_STRINGS + 1} strings" in \
        e.value.message
    assert _parse(["é" * (MAX_STOP_BYTES // 2)]).sampling.stop        # 2 bytes a character
    with pytest.raises(APIError) as e:
        _parse(["é" * (MAX_STOP_BYTES // 2) + "a"])
    assert e.value.status == 400 and "max_stop_bytes" in e.value.message
    with pytest.raises(APIError) as e:                     # a 200,000-string bomb: refused
        _parse(["%05d" % i for i in range(200_000)])
    assert "max_stop_strings" in e.value.message
    with pytest.raises(APIError) as e:
        _parse(["ab", "c"], max_stop_strings=10, max_stop_bytes=2)
    assert "at most 2 (max_stop_bytes)" in e.value.message


def test_the_server_applies_its_configured_stop_limits():
    async def go(port, st):
        out = []
        for stop in (["a", "b", "c"], ["a", "b", "c", "d"], ["abcdefghijklm"]):
            body = json.dumps({"prompt": "x", "max_tokens": 1, "stop": stop}).encode()
            reader, writer = await send(port, head("/v1/completions", len(body)) + body)
            status, _, raw = await response(reader)
            out.append((status, json.loads(raw)))
            writer.close()
        return out
    (ok, _), (many, e1), (long_, e2) = serve(go)
    assert ok == 200
    assert many == 400 and "at most 3 per request (max_stop_strings)" in e1["error"]["message"]
    assert long_ == 400 and "at most 12 (max_stop_bytes)" in e2["error"]["message"]


def _generate(stop, pieces: list, **sampling) -> tuple:
    """``stop``: a tuple of stop strings, or a prepared Sampling."""
    sp = stop if isinstance(stop, Sampling) else Sampling(max_tokens=len(pieces), stop=stop,
                                                          **sampling)
    seq = Seq("r", [1], sp.max_tokens, None, sampling=sp)
    released = []
    for tok in range(len(pieces)):
        seq.generated += 1
        released.append(append_token(seq, tok, pieces.__getitem__))
        if seq.finished:
            break
    return "".join(released), seq.finished, seq.stop_reason


def test_stop_matching_time_does_not_grow_with_the_number_of_strings():
    pieces = [f" t{i}" for i in range(300)]
    bomb = Sampling(max_tokens=len(pieces),                        # none ever matches
                    stop=tuple(f"{i:06d}" for i in range(200_000)))
    assert len(bomb.stop_lookup[0]) == 200_000      # built once per request, before the clock
    t = time.monotonic()
    text, reason, _ = _generate(bomb, pieces)
    took = time.monotonic() - t
    assert reason == "length" and text == "".join(pieces)
    assert took < 1.0, took        # ~0.02 s; a scan of every string per token takes ~30 s


def _reference_stop(stop: tuple, pieces: list, min_tokens: int, include: bool):
    """Every stop string searched in the whole unreleased text after every token."""
    text, sent = "", 0
    for n, piece in enumerate(pieces, 1):
        text += piece
        if n >= min_tokens:
            hits = [(i, s) for s in stop if (i := text.find(s, sent)) >= 0]
            if hits:
                at, which = min(hits)
                return text[:at + (len(which) if include else 0)], "stop", which
        sent = max(sent, len(text) - (max(map(len, stop)) - 1))
    return text, "length", None


def test_stop_matching_finds_the_earliest_stop_as_a_full_search_does():
    rng = random.Random(7)
    alphabet = "ab c"
    for _ in range(3000):
        pieces = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 3)))
                  for _ in range(12)]
        stop = tuple({"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 5)))
                      for _ in range(rng.randint(1, 4))})
        min_tokens, include = rng.randint(0, 5), rng.random() < 0.5
        got = _generate(stop, pieces, min_tokens=min_tokens, include_stop_str_in_output=include)
        assert got == _reference_stop(stop, pieces, min_tokens, include), (stop, pieces)
