"""`evalkit serve` under hostile or unlucky clients (loopback, tiny preset, CPU): the API key,
bounded fan-out and sequences in flight, KV-pressure preemption, body limits enforced before
reading, bytes in flight reserved as they arrive, deeply nested JSON, disconnects that abort
(streaming or not) with one log line, a restart on a port in TIME-WAIT."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.support.optional import LazyModule, installed

openai = LazyModule("openai")
prom_parser = pytest.importorskip("prometheus_client.parser")

from tests.support.sidecar_server import configured_server, start_server, stop_server  # noqa: E402

# one worker runs the module, so its server starts once
pytestmark = [installed("torch", "transformers", "aiohttp", "openai"), pytest.mark.torch,
              pytest.mark.xdist_group("test_serve_limits")]

KEY = "sk-test-key"
LIMITS = {"max_seqs_per_request": 8, "max_seqs_in_flight": 12, "kv_cache_tokens": 64,
          "max_request_bytes": 1_048_576, "max_request_bytes_in_flight": 2_097_152}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with configured_server(tmp_path_factory.mktemp("limits"), "lim", LIMITS,
                           "--api-key", KEY) as server:
        yield server


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=KEY, max_retries=0,
                         timeout=60)


def _get(server, path, headers=None):
    req = urllib.request.Request(server.base_url + path, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _post(server, path, body: bytes, headers=None):
    req = urllib.request.Request(server.base_url + path, data=body, method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {KEY}", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def _metric(server, sample: str, **labels) -> float:
    _, text = _get(server, "/metrics")
    for fam in prom_parser.text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise KeyError(sample)


def _raw_request(server, head: str, body: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    sock.sendall(head.encode() + body)
    return sock


def _head(path: str, length: int | None, extra: str = "") -> str:
    size = f"Content-Length: {length}\r\n" if length is not None else \
        "Transfer-Encoding: chunked\r\n"
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {KEY}\r\n{size}{extra}\r\n")


def _read_response(sock: socket.socket, timeout_s: float = 10.0) -> tuple[int, dict, bytes]:
    sock.settimeout(timeout_s)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ln)}
    n = int(headers.get("content-length", 0))
    while len(rest) < n:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return int(lines[0].split()[1]), headers, rest[:n]


def _disconnect_lines(server) -> list:
    return [ln for ln in server.log_path.read_text().splitlines() if "client disconnected" in ln]


# -- auth ---------------------------------------------------------------------------------------

def test_api_key_guards_the_openai_routes_and_every_body_route(server, client):
    assert [m.id for m in client.models.list()] == ["lim"]
    for key in ("wrong", ""):
        bad = openai.OpenAI(base_url=server.base_url + "/v1", api_key=key or "x", max_retries=0)
        if not key:
            bad = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0,
                                default_headers={"Authorization": ""})
        with pytest.raises(openai.AuthenticationError) as e:
            bad.completions.create(model="lim", prompt="x", max_tokens=1)
        assert e.value.status_code == 401 and e.value.body["type"] == "Unauthorized"
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
    for path in ("/health", "/ping", "/metrics", "/version"):
        assert _get(server, path)[0] == 200, path           # probes need no key, as vLLM
    assert _get(server, "/v1/models")[0] == 401
    for path in ("/tokenize", "/detokenize"):          # they read a body: keyed as /v1
        code, _, body = _post(server, path, b'{"prompt": "x"}', {"Authorization": ""})
        assert code == 401 and body["error"]["type"] == "Unauthorized", path
    # the admin route does not exist on evalkit serve, key or not
    code, _, body = _post(server, "/admin/reset", b"{}")
    assert code == 404 and body["error"]["code"] == 404


def test_serve_refuses_an_empty_api_key():
    from click.testing import CliRunner

    from evalkit.cli.main import cli
    r = CliRunner().invoke(cli, ["serve", "--api-key", " ", "--port", "1"])
    assert r.exit_code == 2 and "--api-key" in r.output


# -- fan-out and sequences in flight -------------------------------------------------------------

def test_fan_out_per_request_is_bounded(server, client):
    at = client.completions.create(model="lim", prompt=["a"] * 8, max_tokens=1)
    assert len(at.choices) == 8                                        # at the limit
    assert len(client.completions.create(model="lim", prompt=["a"] * 4, n=2,
                                         max_tokens=1).choices) == 8
    for kw, asked in (({"prompt": ["a"] * 9}, 9), ({"prompt": ["a"] * 3, "n": 3}, 9),
                      ({"prompt": "a", "n": 9}, 9), ({"prompt": [[5]] * 5, "n": 2}, 10)):
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model="lim", max_tokens=1, **kw)
        assert "max_seqs_per_request" in e.value.message
        assert f"asks for {asked} sequences" in e.value.message, e.value.message
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="lim", n=9, max_tokens=1,
                                       messages=[{"role": "user", "content": "x"}])
    t = time.monotonic()
    with pytest.raises(openai.BadRequestError) as e:                   # 50,000 prompts
        client.completions.create(model="lim", prompt=["ab"] * 50_000, n=8, max_tokens=1)
    assert "400000 sequences (50000 prompt(s) x n=8)" in e.value.message
    assert time.monotonic() - t < 5.0


def test_sequences_in_flight_are_bounded_with_429_and_retry_after(server, client):
    def accepted(n: int):
        """A streaming request returns once its 200 headers arrive, before any token."""
        return client.completions.create(model="lim", prompt="x", n=n, max_tokens=2000,
                                         stream=True)
    hold = accepted(8)                                         # 8 sequences in flight
    try:
        with pytest.raises(openai.RateLimitError) as e:
            client.completions.create(model="lim", prompt="x", n=5, max_tokens=1)
        assert e.value.status_code == 429
        assert e.value.response.headers["retry-after"] == "1"
        assert "max_seqs_in_flight" in e.value.message
        accepted(4).close()                                    # 8 + 4: at the limit
    finally:
        hold.close()
    deadline = time.monotonic() + 10
    while True:
        try:
            accepted(5).close()
            break
        except openai.RateLimitError:
            assert time.monotonic() < deadline, "the aborted stream never freed its budget"
            time.sleep(0.2)


def test_kv_pressure_preempts_and_outputs_stay_the_same(server, client):
    prompts = ["abcdef", "ghijkl", "mnopqr"]                    # 3 x (6 + 50) > 64 tokens
    alone = [client.completions.create(model="lim", prompt=p, max_tokens=50,
                                       temperature=0).choices[0].text for p in prompts]
    before = _metric(server, "vllm:num_preemptions_total")
    out = [None] * 3

    def go(i):
        out[i] = client.completions.create(model="lim", prompt=prompts[i], max_tokens=50,
                                           temperature=0).choices[0].text
    threads = [threading.Thread(target=go, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert out == alone
    assert _metric(server, "vllm:num_preemptions_total") > before


# -- bodies -------------------------------------------------------------------------------------

def _health_latencies(server, stop: threading.Event, out: list) -> None:
    while not stop.is_set():
        t = time.monotonic()
        _get(server, "/health")
        out.append(time.monotonic() - t)
        time.sleep(0.02)


def test_a_63_mib_body_is_refused_unread_and_health_keeps_answering(server):
    lat: list = []
    stop = threading.Event()
    probe = threading.Thread(target=_health_latencies, args=(server, stop, lat))
    probe.start()
    try:
        size = 63 * 2**20
        payload = b'{"prompt": "' + b"a" * (size - 20) + b'"}'
        t = time.monotonic()
        sock = _raw_request(server, _head("/v1/completions", len(payload)))
        try:
            try:
                sock.sendall(payload)
            except OSError:
                pass                                # the server may close before the end
            status, headers, body = _read_response(sock)
        finally:
            sock.close()
        took = time.monotonic() - t
    finally:
        stop.set()
        probe.join(10)
    assert status == 413
    err = json.loads(body)["error"]
    assert err["type"] == "RequestEntityTooLarge" and err["code"] == 413
    assert "max_request_bytes" in err["message"]
    assert took < 5.0
    assert lat and max(lat) < 1.0, max(lat)


def _tokenize_body(size: int) -> bytes:
    """A /tokenize body of exactly ``size`` bytes."""
    head, tail = b'{"prompt": "', b'"}'
    return head + b"a" * (size - len(head) - len(tail)) + tail


def test_the_body_size_limit_at_and_just_over_its_value(server):
    limit = LIMITS["max_request_bytes"]
    status, _, out = _post(server, "/tokenize", _tokenize_body(limit))
    assert status == 200 and out["count"] == limit - 14
    status, _, out = _post(server, "/tokenize", _tokenize_body(limit + 1))
    assert status == 413 and out["error"]["code"] == 413


def test_a_chunked_body_over_the_limit_is_413(server):
    sock = _raw_request(server, _head("/v1/completions", None))
    try:
        def chunk(b: bytes) -> bytes:
            return f"{len(b):x}\r\n".encode() + b + b"\r\n"
        try:
            sock.sendall(chunk(b'{"prompt": "'))
            for _ in range(20):                                     # 1.25 MiB
                sock.sendall(chunk(b"a" * 65536))
            sock.sendall(chunk(b'"}') + b"0\r\n\r\n")
        except OSError:
            pass
        status, _, body = _read_response(sock)
    finally:
        sock.close()
    assert status == 413 and json.loads(body)["error"]["type"] == "RequestEntityTooLarge"


def test_bodies_in_flight_are_capped_by_bytes(server, client):
    """Bytes are reserved as they arrive: two bodies 900,000 bytes in hold 1.8 MB of the
    2 MiB budget, a third that pushes past it is 429, small requests still fit."""
    part = _tokenize_body(1_000_000)[:900_000]
    held = [_raw_request(server, _head("/tokenize", 1_000_000), part) for _ in range(2)]
    try:
        time.sleep(0.5)
        sock = _raw_request(server, _head("/tokenize", 1_000_000), part[:400_000])
        try:
            status, headers, body = _read_response(sock)
        finally:
            sock.close()
        assert status == 429 and headers["retry-after"] == "1"
        assert "being read" in json.loads(body)["error"]["message"]
        small = client.completions.create(model="lim", prompt="x", max_tokens=1)  # still served
        assert small.choices
    finally:
        for s in held:
            s.close()
    deadline = time.monotonic() + 10
    big = json.dumps({"prompt": "a" * 900_000, "max_tokens": 1}).encode()
    while True:
        status, _, out = _post(server, "/tokenize", big)
        if status != 429:
            break
        assert time.monotonic() < deadline, "abandoned bodies never released their bytes"
        time.sleep(0.2)
    assert status == 200 and out["count"] == 900_000


def test_declared_lengths_reserve_nothing_until_the_bytes_arrive(server, client):
    """Four clients declaring the largest body and sending one byte (issue 34, item 1) leave
    the budget to everyone else."""
    held = [_raw_request(server, _head(path, LIMITS["max_request_bytes"]), b"{")
            for path in ("/v1/completions", "/v1/chat/completions", "/tokenize", "/tokenize")]
    try:
        time.sleep(0.3)
        assert client.completions.create(model="lim", prompt="x", max_tokens=1).choices
        status, _, out = _post(server, "/tokenize", _tokenize_body(LIMITS["max_request_bytes"]))
        assert status == 200, out
    finally:
        for s in held:
            s.close()


def test_deeply_nested_json_is_400_not_500(server):
    for body in (b"[" * 200_000 + b"]" * 200_000,
                 b'{"prompt": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_001):
        status, _, out = _post(server, "/v1/completions", body)
        assert status == 400 and "nested too deeply" in out["error"]["message"]
        assert out["error"]["type"] == "BadRequestError"
    assert _get(server, "/health")[0] == 200


# -- disconnects ----------------------------------------------------------------------------------

def _wait(cond, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("stream", [False, True])
def test_a_disconnected_request_is_aborted_with_one_log_line(server, stream):
    aborted = lambda: _metric(server, "vllm:request_success_total",  # noqa: E731
                              finished_reason="abort")
    body = json.dumps({"prompt": "x", "max_tokens": 20000, "stream": stream}).encode()
    for _ in range(3):      # a disconnect racing a token once went unnoticed: try a few
        before, lines = aborted(), len(_disconnect_lines(server))
        sock = _raw_request(server, _head("/v1/completions", len(body)), body)
        assert _wait(lambda: _metric(server, "vllm:num_requests_running") == 1, 20)
        if stream:
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        sock.close()
        t = time.monotonic()
        assert _wait(lambda: _metric(server, "vllm:num_requests_running") == 0, 5), \
            "the engine kept generating for a client that is gone"
        assert time.monotonic() - t < 3.0
        assert aborted() == before + 1
        assert _wait(lambda: len(_disconnect_lines(server)) == lines + 1, 5)
    assert "Traceback" not in server.log_path.read_text()


# -- start-up and restarts ------------------------------------------------------------------------

def test_serve_says_what_it_does_until_it_is_ready(monkeypatch, capsys):
    """Issue 35: start-up takes seconds; each step gets a status line, the last one only once
    the socket listens."""
    from evalkit.replay.backends.sidecar import serve as sidecar
    from evalkit.replay.backends.sidecar.config import resolve_serve_config
    from evalkit.replay.backends.sidecar.tokenizer import SidecarTokenizer

    class Engine:
        tokenizer = SidecarTokenizer(512)
        stop = threading.Event()

    steps: list = []

    def build(cfg):
        steps.append(("build", capsys.readouterr().out))
        return Engine()

    def run(app, *, host, port, handle_signals, ready):
        steps.append(("listen", capsys.readouterr().out))
        ready()
    monkeypatch.setattr(sidecar, "build_engine", build)
    monkeypatch.setattr(sidecar, "run", run)
    sidecar.serve(resolve_serve_config({}), host="127.0.0.1", port=8123, api_key="k")
    (_, before_build), (_, before_listen) = steps
    assert before_build.splitlines() == [
        "sidecar: loading torch and transformers ...",
        "sidecar: building the tiny model (cpu, float32, seed 0) and starting the engine ..."]
    assert before_listen == ""
    last = capsys.readouterr().out.splitlines()
    assert len(last) == 1 and last[0].startswith("sidecar: ready on http://127.0.0.1:8123 after ")
    assert last[0].endswith("s: serving evalkit-sidecar, API key required")
    assert Engine.stop.is_set()



@pytest.mark.slow
def test_serve_restarts_at_once_on_a_port_in_time_wait(tmp_path):
    from tests.support.sidecar_server import free_port
    port = free_port()
    first = start_server("r1", port=port, log_path=tmp_path / "first.log")
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        stop_server(first)                # the server closes the connection: TIME-WAIT
    finally:
        sock.close()
    plain = socket.socket()               # the precondition: a bind without SO_REUSEADDR fails
    with pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))
    plain.close()
    second = start_server("r2", port=port, log_path=tmp_path / "second.log", timeout_s=120)
    try:
        assert _get(second, "/health")[0] == 200
    finally:
        stop_server(second)
    text = (tmp_path / "second.log").read_text()
    assert "loading torch" in text and f"ready on http://127.0.0.1:{port}" in text
