"""`evalkit serve` against real clients: the official `openai` package and prometheus_client's
parser, over HTTP, on the tiny preset on CPU."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("aiohttp")
openai = pytest.importorskip("openai")
prom_parser = pytest.importorskip("prometheus_client.parser")

from _sidecar_server import start_server, stop_server  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def server():
    s = start_server("tiny-test")
    try:
        yield s
    finally:
        stop_server(s)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0,
                         timeout=60)


def _post(server, path, body: bytes | dict, method="POST"):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(server.base_url + path, data=data if method == "POST" else None,
                                 method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()


def _metrics(server) -> dict:
    with urllib.request.urlopen(server.base_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return {f.name: f for f in prom_parser.text_string_to_metric_families(text)}


def _value(families, name, sample, **labels):
    for s in families[name].samples:
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError((name, sample, labels))


# -- models, chat, completions -------------------------------------------------------------------

def test_models_list_and_retrieve(client, server):
    ids = [m.id for m in client.models.list()]
    assert ids == [server.model]
    assert client.models.retrieve(server.model).id == server.model
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("nope")
    assert "does not exist" in e.value.message


def test_chat_non_streaming_n_and_usage(client, server):
    r = client.chat.completions.create(
        model=server.model, messages=[{"role": "system", "content": "be brief"},
                                      {"role": "user", "content": "hello"}],
        max_tokens=6, n=2, temperature=1.0, seed=11)
    assert [c.index for c in r.choices] == [0, 1]
    assert all(c.message.role == "assistant" and c.finish_reason == "length" for c in r.choices)
    assert all(len(c.message.content.split()) == 6 for c in r.choices)
    assert r.choices[0].message.content != r.choices[1].message.content    # n samples differ
    assert r.usage.completion_tokens == 12
    assert r.usage.total_tokens == r.usage.prompt_tokens + 12
    again = client.chat.completions.create(
        model=server.model, messages=[{"role": "system", "content": "be brief"},
                                      {"role": "user", "content": "hello"}],
        max_tokens=6, n=2, temperature=1.0, seed=11)
    assert [c.message.content for c in again.choices] == [c.message.content for c in r.choices]


def test_chat_streaming_matches_non_streaming_with_usage(client, server):
    msgs = [{"role": "user", "content": [{"type": "text", "text": "count"}]}]
    ref = client.chat.completions.create(model=server.model, messages=msgs, max_tokens=8,
                                         temperature=0)
    stream = client.chat.completions.create(model=server.model, messages=msgs, max_tokens=8,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [c.choices[0].delta.content for c in chunks if c.choices
               and c.choices[0].delta.content]
    assert len(content) == 8                                  # one event per token
    assert "".join(content) == ref.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 8
    assert chunks[-1].usage.prompt_tokens == ref.usage.prompt_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_completion_prompt_forms(client, server):
    strings = client.completions.create(model=server.model, prompt=["a b", "hello"],
                                        max_tokens=3, n=2, temperature=0)
    assert [c.index for c in strings.choices] == [0, 1, 2, 3]
    assert strings.choices[0].text == strings.choices[1].text   # greedy: n copies agree
    assert strings.usage.completion_tokens == 12
    assert strings.usage.prompt_tokens == len("a b") + len("hello")
    ids = client.completions.create(model=server.model, prompt=[101, 102, 103], max_tokens=4,
                                    temperature=0)
    lists = client.completions.create(model=server.model, prompt=[[101, 102, 103], [7, 8]],
                                      max_tokens=4, temperature=0)
    assert lists.choices[0].text == ids.choices[0].text          # same ids, same greedy text
    assert lists.usage.prompt_tokens == 5
    one = client.completions.create(model=server.model, prompt="hello", max_tokens=3,
                                    temperature=0)
    assert one.choices[0].text == strings.choices[2].text


def test_stop_strings_cut_the_text_streaming_or_not(client, server):
    full = client.completions.create(model=server.model, prompt="stop test", max_tokens=12,
                                     temperature=0).choices[0].text
    pieces = full.split(" ")[1:]                       # "t12", "t7", ...
    across = pieces[2][-2:] + " " + pieces[3][:2]      # spans the 3rd and 4th token
    for stop in (" " + pieces[4], across, [" " + pieces[6], " " + pieces[5]]):
        first = min(full.find(s) for s in ([stop] if isinstance(stop, str) else stop))
        r = client.completions.create(model=server.model, prompt="stop test", max_tokens=12,
                                      temperature=0, stop=stop)
        assert r.choices[0].finish_reason == "stop"
        assert r.choices[0].text == full[:first]
        streamed = list(client.completions.create(model=server.model, prompt="stop test",
                                                  max_tokens=12, temperature=0, stop=stop,
                                                  stream=True))
        assert "".join(c.choices[0].text for c in streamed if c.choices) == full[:first]
        assert streamed[-1].choices[0].finish_reason == "stop"
    never = client.completions.create(model=server.model, prompt="stop test", max_tokens=12,
                                      temperature=0, stop="zzz")
    assert never.choices[0].text == full and never.choices[0].finish_reason == "length"


def test_stop_token_ids_and_seeded_sampling(client, server):
    greedy = client.completions.create(model=server.model, prompt=[200, 201], max_tokens=6,
                                       temperature=0).choices[0].text
    third = int(greedy.split(" t")[3])
    r = client.completions.create(model=server.model, prompt=[200, 201], max_tokens=6,
                                  temperature=0, extra_body={"stop_token_ids": [third]})
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == greedy[:greedy.find(f" t{third}")]
    a = client.completions.create(model=server.model, prompt="x", max_tokens=8, seed=3,
                                  temperature=1.0).choices[0].text
    b = client.completions.create(model=server.model, prompt="x", max_tokens=8, seed=3,
                                  temperature=1.0).choices[0].text
    c = client.completions.create(model=server.model, prompt="x", max_tokens=8, seed=4,
                                  temperature=1.0).choices[0].text
    assert a == b and a != c


# -- errors ----------------------------------------------------------------------------------

def test_openai_error_bodies_and_status_codes(client, server):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-x", messages=[{"role": "user",
                                                                  "content": "hi"}])
    assert e.value.status_code == 404 and "gpt-x" in e.value.message
    assert e.value.body["code"] == 404 and e.value.body["param"] == "model"
    assert e.value.body["type"] == "NotFoundError"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=server.model, prompt="x", max_tokens=0)
    assert e.value.body["param"] == "max_tokens"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=server.model, prompt=[5, 99999], max_tokens=2)
    assert "out of vocabulary" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=server.model, prompt="x" * 40, max_tokens=32760)
    assert "maximum context length is 32768 tokens" in e.value.message
    assert {k: e.value.body[k] for k in ("type", "param", "code")} == {
        "type": "BadRequestError", "param": "max_tokens", "code": 400}
    # schema errors are 400 too (vLLM), not 422
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=server.model, prompt="x", extra_body={"n": "two"})
    assert e.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=server.model, messages=[])
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=server.model, messages=[{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:,"}}]}])
    assert "text only" in e.value.message


def test_raw_http_errors_are_json(server):
    for path, method, body, status in (("/nope", "GET", None, 404),
                                       ("/v1/completions", "GET", None, 405),
                                       ("/v1/completions", "POST", b"{not json", 400),
                                       ("/v1/completions", "POST", b"[1, 2]", 400)):
        code, ctype, text = _post(server, path, body or b"", method=method)
        assert code == status, (path, text)
        assert ctype.startswith("application/json")
        err = json.loads(text)["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"]
        assert err["code"] == status


def test_engine_failure_is_503():
    """An engine that died answers 503 with an OpenAI error (in-process app, no model)."""
    from aiohttp.test_utils import TestClient, TestServer

    from evalkit.replay.backends.torch.sidecar import make_app
    from evalkit.replay.backends.torch.tokenizer import SidecarTokenizer

    class DeadEngine:
        tokenizer = SidecarTokenizer(512)
        reset_requested = threading.Event()
        metrics = None

        def healthy(self):
            return "the engine failed: RuntimeError: CUDA error: an illegal memory access"

    async def go():
        async with TestClient(TestServer(make_app(DeadEngine(), "m"))) as c:
            r1 = await c.post("/v1/chat/completions",
                              json={"messages": [{"role": "user", "content": "x"}]})
            r2 = await c.get("/health")
            return r1.status, await r1.json(), r2.status
    status, body, health = asyncio.run(go())
    assert status == 503 and health == 503
    assert body["error"]["code"] == 503 and "illegal memory" in body["error"]["message"]


# -- vLLM metrics ----------------------------------------------------------------------------

def _totals(fam) -> dict:
    """Every counter/histogram sample, so a test can look at what one block of requests
    added (the module's server is shared)."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in fam.values() for s in f.samples}


def _delta(after, before, name, **labels):
    key = (name, tuple(sorted({"model_name": labels.pop("model_name", None), **labels}
                              .items())))
    return after[key] - before.get(key, 0.0)


def test_metrics_have_vllm_names_types_and_labels(client, server):
    before = _totals(_metrics(server))
    r1 = client.completions.create(model=server.model, prompt=["ab", "cde"], max_tokens=5,
                                   temperature=0)
    r2 = client.chat.completions.create(model=server.model, max_tokens=4, n=2,
                                        messages=[{"role": "user", "content": "hi"}])
    full = client.completions.create(model=server.model, prompt="m", max_tokens=9,
                                     temperature=0).choices[0].text
    r3 = client.completions.create(model=server.model, prompt="m", max_tokens=9, temperature=0,
                                   stop=full.split(" ")[3])
    assert r3.choices[0].finish_reason == "stop"
    fam = _metrics(server)
    kinds = {"vllm:time_to_first_token_seconds": "histogram",
             "vllm:e2e_request_latency_seconds": "histogram",
             "vllm:inter_token_latency_seconds": "histogram",
             "vllm:time_per_output_token_seconds": "histogram",
             "vllm:request_queue_time_seconds": "histogram",
             "vllm:request_success": "counter", "vllm:prompt_tokens": "counter",
             "vllm:generation_tokens": "counter", "vllm:num_requests_running": "gauge",
             "vllm:num_requests_waiting": "gauge", "vllm:kv_cache_usage_perc": "gauge"}
    for name, kind in kinds.items():
        assert fam[name].type == kind, name
        assert fam[name].documentation
        assert all(s.labels.get("model_name") == server.model for s in fam[name].samples)
    after = _totals(fam)
    d = lambda name, **lab: _delta(after, before, name, model_name=server.model, **lab)  # noqa
    n_seqs = 2 + 2 + 1 + 1
    generated = (r1.usage.completion_tokens + r2.usage.completion_tokens + 9
                 + r3.usage.completion_tokens)
    assert d("vllm:generation_tokens_total") == generated
    # every sequence's prompt counts (n=2 chat: twice), as in vLLM v1 and the histogram
    prompts = r1.usage.prompt_tokens + 2 * r2.usage.prompt_tokens + 1 + 1
    assert d("vllm:prompt_tokens_total") == prompts
    assert d("vllm:request_prompt_tokens_sum") == prompts
    ok = "vllm:request_success_total"
    assert d(ok, finished_reason="length") == n_seqs - 1
    assert d(ok, finished_reason="stop") == 1
    ttft = "vllm:time_to_first_token_seconds"
    assert d(ttft + "_count") == n_seqs
    e2e = "vllm:e2e_request_latency_seconds"
    assert d(e2e + "_count") == n_seqs
    assert d(e2e + "_bucket", le="+Inf") == n_seqs
    itl = "vllm:inter_token_latency_seconds"
    assert d(itl + "_count") == generated - n_seqs
    assert d(e2e + "_sum") >= d(ttft + "_sum") > 0
    q = "vllm:request_queue_time_seconds"
    assert d(q + "_count") == n_seqs
    assert _value(fam, "vllm:num_requests_running", "vllm:num_requests_running") == 0


def test_runner_scraper_reads_the_sidecar_and_vllm_style_text(server):
    from evalkit.replay.backends.torch import client as cl
    with urllib.request.urlopen(server.base_url + "/metrics", timeout=10) as r:
        vals = cl.parse_prometheus(r.read().decode())
    assert vals == {"vllm:num_requests_running": 0.0, "vllm:num_requests_waiting": 0.0}
    # what a vLLM v1 server exposes: an engine label beside model_name, HELP/TYPE lines
    vllm_text = ('# HELP vllm:num_requests_running Number of requests in model execution.\n'
                 '# TYPE vllm:num_requests_running gauge\n'
                 'vllm:num_requests_running{engine="0",model_name="Qwen/Qwen2.5-0.5B"} 3.0\n'
                 '# TYPE vllm:num_requests_waiting gauge\n'
                 'vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen2.5-0.5B"} 1.0\n')
    assert cl.parse_prometheus(vllm_text) == {"vllm:num_requests_running": 3.0,
                                              "vllm:num_requests_waiting": 1.0}


# -- settings ----------------------------------------------------------------------------------

def test_serve_settings_never_fall_back_to_a_default_model(tmp_path):
    from click.testing import CliRunner

    from evalkit.cli.main import cli
    from evalkit.errors import InputError
    from evalkit.replay.backends.torch.serve_config import resolve_serve_config
    # the two forms that used to build a 7.7B model / crash
    assert resolve_serve_config({"model": {"preset": "tiny"}})["model"]["hidden_size"] == 64
    assert resolve_serve_config({"model": "tiny"})["model"]["vocab_size"] == 512
    with pytest.raises(InputError, match="unknown sidecar settings"):
        resolve_serve_config({"modle": "tiny"})
    r = CliRunner().invoke(cli, ["serve", "--preset", "huge"])
    assert r.exit_code == 2 and "tiny" in r.output and "qwen2.5-0.5b" in r.output
    cfg = tmp_path / "s.toml"
    cfg.write_text('max_bacth = 4\n')
    r = CliRunner().invoke(cli, ["serve", "--config", str(cfg)])
    assert r.exit_code == 2 and "max_bacth" in r.output and "max_batch" in r.output
    cfg.write_text('max_batch = 4\ndefault_max_tokens = 32\n'
                   '[model]\npreset = "small"\nnum_hidden_layers = 1\n')
    r = CliRunner().invoke(cli, ["serve", "--config", str(cfg), "--preset", "tiny",
                                 "--served-model-name", "m1", "--print-config"])
    assert r.exit_code == 0, r.output
    eff = json.loads(r.output)
    assert eff["model"]["preset"] == "tiny" and eff["model"]["num_hidden_layers"] == 1
    assert eff["max_batch"] == 4 and eff["model_name"] == "m1" and eff["dtype"] == "float32"
    r = CliRunner().invoke(cli, ["serve", "--device", "tpu", "--print-config"])
    assert r.exit_code == 2 and "cuda" in r.output


def test_serve_refuses_a_busy_port(server):
    from click.testing import CliRunner

    from evalkit.cli.main import cli
    r = CliRunner().invoke(cli, ["serve", "--port", str(server.port)])
    assert r.exit_code == 2 and "--port" in r.output
