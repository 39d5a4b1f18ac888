"""`evalkit serve` against real clients: the official `openai` package and prometheus_client's
parser, over HTTP, on the tiny preset on CPU."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request

import pytest

from tests.support.optional import LazyModule, installed

openai = LazyModule("openai")
prom_parser = pytest.importorskip("prometheus_client.parser")

from tests.support.sidecar_server import start_server, stop_server  # noqa: E402

# one worker runs the module, so its server starts once
pytestmark = [installed("torch", "transformers", "aiohttp", "openai"), pytest.mark.torch,
              pytest.mark.xdist_group("test_serve_openai")]


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

    from evalkit.replay.backends.sidecar.server import make_app
    from evalkit.replay.backends.sidecar.tokenizer import SidecarTokenizer

    class DeadEngine:
        tokenizer = SidecarTokenizer(512)
        reset_requested = threading.Event()
        metrics = None

        def dead(self):
            return "the engine failed: RuntimeError: CUDA error: an illegal memory access"

        healthy = dead

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
    from evalkit.replay.backends.sidecar.config import resolve_serve_config
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


# -- vLLM drop-in: schema errors, stop_reason, refusals, sampling checks -----------------------

def _raw(server, path, body: bytes):
    code, _, text = _post(server, path, body)
    return code, json.loads(text)


def test_schema_errors_are_400_in_vllm_shape(server):
    for body in ({"prompt": "x", "n": "two"}, {"prompt": [1, "a"]}, {"prompt": None},
                 {"prompt": "x", "temperature": "hot"}, {"prompt": "x", "stream": 1},
                 {"prompt": "x", "seed": 1.5}, [1, 2], "text"):
        code, out = _raw(server, "/v1/completions", json.dumps(body).encode())
        assert code == 400, body
        err = out["error"]
        assert err["type"] == "BadRequestError" and err["code"] == 400 and err["message"]
    code, out = _raw(server, "/v1/chat/completions", b'{"messages": "hi"}')
    assert code == 400 and out["error"]["param"] == "messages"


def test_a_lone_surrogate_in_a_prompt_is_served(server):
    code, out = _raw(server, "/v1/completions", b'{"prompt": "\\ud800x", "max_tokens": 2}')
    assert code == 200 and out["usage"]["prompt_tokens"] == 4        # 3 bytes + "x"
    code, out = _raw(server, "/tokenize", b'{"prompt": "\\udfff"}')
    assert code == 200 and out["count"] == 3


def test_stop_reason_names_the_stop_string_or_token(client, server):
    full = client.completions.create(model=server.model, prompt="why", max_tokens=8,
                                     temperature=0).choices[0]
    assert full.finish_reason == "length" and full.stop_reason is None
    words = full.text.split(" ")[1:]
    r = client.completions.create(model=server.model, prompt="why", max_tokens=8,
                                  temperature=0, stop=["zzz", words[3]])
    assert (r.choices[0].finish_reason, r.choices[0].stop_reason) == ("stop", words[3])
    tok = int(words[2][1:])
    r = client.completions.create(model=server.model, prompt="why", max_tokens=8,
                                  temperature=0, extra_body={"stop_token_ids": [tok]})
    assert r.choices[0].stop_reason == tok
    chat = client.chat.completions.create(model=server.model, max_tokens=8, temperature=0,
                                          messages=[{"role": "user", "content": "why"}])
    cw = chat.choices[0].message.content.split(" ")[1:]
    stream = list(client.chat.completions.create(
        model=server.model, max_tokens=8, temperature=0, stop=cw[4], stream=True,
        messages=[{"role": "user", "content": "why"}]))
    last = [c for c in stream if c.choices][-1].choices[0]
    assert last.finish_reason == "stop" and last.model_extra["stop_reason"] == cw[4]
    incl = client.completions.create(model=server.model, prompt="why", max_tokens=8,
                                     temperature=0, stop=words[3],
                                     extra_body={"include_stop_str_in_output": True})
    assert incl.choices[0].text == r_text_upto(full.text, words[3], include=True)


def r_text_upto(text: str, stop: str, include: bool = False) -> str:
    at = text.find(stop)
    return text[:at + (len(stop) if include else 0)]


REFUSED = [  # (endpoint, extra body, param)
    ("completions", {"logprobs": 2, "echo": True}, "echo"),
    ("completions", {"suffix": "end"}, "suffix"),
    ("completions", {"logit_bias": {"5": 10}}, "logit_bias"),
    ("completions", {"response_format": {"type": "json_object"}}, "response_format"),
    ("completions", {"guided_regex": "a+"}, "guided_regex"),
    ("completions", {"prompt_logprobs": 1}, "prompt_logprobs"),
    ("completions", {"best_of": 3}, "best_of"),
    ("chat", {"response_format": {"type": "json_schema",
                                  "json_schema": {"name": "x", "schema": {}}}},
     "response_format"),
    ("chat", {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
     "tools"),
    ("chat", {"tool_choice": "auto"}, "tool_choice"),
    ("chat", {"structured_outputs": {"choice": ["a"]}}, "structured_outputs"),
]


@pytest.mark.parametrize("endpoint,extra,param", REFUSED)
def test_unimplemented_options_are_refused_never_ignored(client, server, endpoint, extra,
                                                         param):
    with pytest.raises(openai.BadRequestError) as e:
        if endpoint == "completions":
            client.completions.create(model=server.model, prompt="x", max_tokens=2,
                                      extra_body=extra)
        else:
            client.chat.completions.create(model=server.model, max_tokens=2, extra_body=extra,
                                           messages=[{"role": "user", "content": "x"}])
    assert e.value.status_code == 400 and e.value.body["param"] == param
    assert "is not currently supported" in e.value.message


def test_no_op_values_of_unimplemented_options_are_served(client, server):
    msgs = [{"role": "user", "content": "x"}]
    ref = client.chat.completions.create(model=server.model, max_tokens=4, temperature=0,
                                         messages=msgs).choices[0].message.content
    same = client.chat.completions.create(
        model=server.model, max_tokens=4, temperature=0, messages=msgs, logprobs=False,
        response_format={"type": "text"}, tools=[], tool_choice="none", presence_penalty=0,
        frequency_penalty=0, extra_body={"repetition_penalty": 1.0, "logit_bias": {}})
    assert same.choices[0].message.content == ref


def test_continuous_usage_stats_put_usage_so_far_in_every_chunk(client, server):
    chunks = list(client.completions.create(
        model=server.model, prompt="usage", max_tokens=4, n=2, temperature=0, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True}))
    done = [c.usage.completion_tokens for c in chunks]
    assert done == sorted(done) and done[-1] == 8                    # never goes back
    tokens = [c for c in chunks if c.choices and c.choices[0].text]
    assert [c.usage.completion_tokens for c in tokens] == list(range(1, 9))
    assert all(c.usage.prompt_tokens == 5 for c in chunks)
    plain = list(client.completions.create(
        model=server.model, prompt="usage", max_tokens=4, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert all(c.usage is None for c in plain[:-1]) and plain[-1].usage.completion_tokens == 4


def test_logprobs_completions_and_chat_streaming_or_not(client, server):
    r = client.completions.create(model=server.model, prompt="lp", max_tokens=5, temperature=0,
                                  logprobs=3)
    lp = r.choices[0].logprobs
    assert "".join(lp.tokens) == r.choices[0].text and len(lp.tokens) == 5
    assert lp.text_offset == [sum(map(len, lp.tokens[:i])) for i in range(5)]
    for tok, val, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert len(top) == 3 and val <= 0
        assert top[tok] == pytest.approx(val) and val == pytest.approx(max(top.values()))
    streamed = list(client.completions.create(model=server.model, prompt="lp", max_tokens=5,
                                              temperature=0, logprobs=3, stream=True))
    s_lp = [c.choices[0].logprobs for c in streamed if c.choices and c.choices[0].logprobs]
    assert [x.tokens[0] for x in s_lp] == lp.tokens
    assert [x.token_logprobs[0] for x in s_lp] == pytest.approx(lp.token_logprobs)
    assert [x.text_offset[0] for x in s_lp] == lp.text_offset
    none = client.completions.create(model=server.model, prompt="lp", max_tokens=2)
    assert none.choices[0].logprobs is None
    msgs = [{"role": "user", "content": "lp"}]
    chat = client.chat.completions.create(model=server.model, messages=msgs, max_tokens=4,
                                          temperature=0, logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert "".join(c.token for c in content) == chat.choices[0].message.content
    assert all(len(c.top_logprobs) == 2 and c.bytes == list(c.token.encode())
               and c.top_logprobs[0].logprob == pytest.approx(c.logprob) for c in content)
    only = client.chat.completions.create(model=server.model, messages=msgs, max_tokens=2,
                                          logprobs=True)
    assert all(c.top_logprobs == [] for c in only.choices[0].logprobs.content)
    for kw, words in (({"logprobs": 21}, "greater than max allowed: 20"),
                      ({"logprobs": -1}, "logprobs must be non-negative, got -1.")):
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model=server.model, prompt="lp", max_tokens=2, **kw)
        assert words in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=server.model, messages=msgs, max_tokens=2,
                                       top_logprobs=2)
    assert "`logprobs` must be set to true" in e.value.message


def test_penalties_min_p_and_echo_are_implemented(client, server):
    base = dict(model=server.model, prompt="ab", max_tokens=8, temperature=0)
    plain = client.completions.create(**base).choices[0].text.split()
    k = next(i for i, t in enumerate(plain) if t in plain[:i])    # greedy output repeats
    pen = client.completions.create(**base, frequency_penalty=2.0,
                                    presence_penalty=2.0).choices[0].text.split()
    # a penalty only lowers tokens already generated: greedy is unchanged up to the first
    # repeat, which it replaces
    assert pen[:k] == plain[:k] and pen[k] != plain[k]
    # min_p = 1 keeps only the most likely token: sampling at any temperature is greedy
    one = client.completions.create(**{**base, "temperature": 1.5}, seed=4,
                                    extra_body={"min_p": 1.0}).choices[0].text.split()
    assert one == plain
    echo = client.completions.create(model=server.model, prompt=["ab", "cd"], max_tokens=3,
                                     temperature=0, echo=True)
    bare = client.completions.create(model=server.model, prompt=["ab", "cd"], max_tokens=3,
                                     temperature=0)
    assert [c.text for c in echo.choices] == ["ab" + bare.choices[0].text,
                                              "cd" + bare.choices[1].text]
    assert echo.usage == bare.usage
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=server.model, prompt="ab", max_tokens=3, temperature=0, echo=True, stream=True)
        if c.choices)
    assert streamed == echo.choices[0].text


def test_sampling_values_that_used_to_kill_the_engine(client, server):
    base = dict(model=server.model, prompt="kill", max_tokens=5)
    greedy = client.completions.create(**base, temperature=0).choices[0].text
    # below 1e-5: greedy, as vLLM; below 1e-2: raised to 1e-2, as vLLM
    assert client.completions.create(**base, temperature=1e-300).choices[0].text == greedy
    assert client.completions.create(**base, temperature=9e-6).choices[0].text == greedy
    small = client.completions.create(**base, temperature=1e-3, seed=9).choices[0].text
    assert small == client.completions.create(**base, temperature=1e-2,
                                              seed=9).choices[0].text
    for seed in (-2**63, 2**63 - 1):                      # int64 bounds, n > 1 adds the index
        r = client.completions.create(**base, temperature=1.0, seed=seed, n=2)
        assert len(r.choices) == 2
    ok = client.completions.create(**base, temperature=1.0, seed=1,
                                   extra_body={"stop_token_ids": [10**30], "top_k": 10**30})
    assert ok.choices[0].finish_reason == "length"
    bad = [({"temperature": -0.5}, "temperature must be non-negative, got -0.5."),
           ({"seed": 2**64}, "less than or equal to 9223372036854775807"),
           ({"seed": 10**30}, "less than or equal to 9223372036854775807"),
           ({"seed": -2**63 - 1}, "greater than or equal to -9223372036854775808"),
           ({"top_p": 0}, "top_p must be in (0, 1], got 0.0."),
           ({"top_k": -2}, "top_k must be 0 (disable), or at least 1, got -2."),
           ({"min_p": 1.5}, "min_p must be in [0, 1], got 1.5."),
           ({"presence_penalty": 2.5}, "presence_penalty must be in [-2, 2], got 2.5."),
           ({"repetition_penalty": 0}, "repetition_penalty must be greater than zero"),
           ({"n": 10**30}, "n must be at most 128"),
           ({"n": 0}, "n must be at least 1, got 0."),
           ({"min_tokens": 9}, "min_tokens must be less than or equal to max_tokens=5"),
           ({"max_tokens": 10**30}, "maximum context length")]
    known = {"temperature", "seed", "top_p", "presence_penalty", "n", "max_tokens"}
    for extra, words in bad:
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(**{**base, **{k: v for k, v in extra.items() if k in known}},
                                      extra_body={k: v for k, v in extra.items()
                                                  if k not in known})
        assert words in e.value.message, (extra, e.value.message)
    for raw in (b'{"prompt": "x", "temperature": NaN}', b'{"prompt": "x", "top_p": Infinity}',
                b'{"prompt": "x", "temperature": 1' + b"0" * 400 + b'}',
                b'{"prompt": "x", "frequency_penalty": -Infinity}'):
        code, out = _raw(server, "/v1/completions", raw)
        assert code == 400 and "must be a finite number" in out["error"]["message"], raw
    with urllib.request.urlopen(server.base_url + "/health", timeout=10) as r:
        assert r.status == 200
    assert client.completions.create(**base, temperature=0).choices[0].text == greedy


# -- vLLM's other endpoints ------------------------------------------------------------------

def test_tokenize_detokenize_ping_version(client, server):
    code, out = _raw(server, "/tokenize", json.dumps({"prompt": "hello t7"}).encode())
    assert code == 200 and out["max_model_len"] == 32768
    used = client.completions.create(model=server.model, prompt="hello t7", max_tokens=1)
    assert out["count"] == len(out["tokens"]) == used.usage.prompt_tokens
    msgs = [{"role": "user", "content": "hi"}]
    code, chat = _raw(server, "/tokenize", json.dumps({"model": server.model,
                                                       "messages": msgs}).encode())
    used = client.chat.completions.create(model=server.model, messages=msgs, max_tokens=1)
    assert code == 200 and chat["count"] == used.usage.prompt_tokens
    code, strs = _raw(server, "/tokenize", json.dumps({"prompt": "a",
                                                       "return_token_strs": True}).encode())
    assert strs["token_strs"] == [" t97"]
    code, back = _raw(server, "/detokenize", json.dumps({"tokens": out["tokens"]}).encode())
    assert code == 200
    _, again = _raw(server, "/tokenize", json.dumps({"prompt": back["prompt"]}).encode())
    assert again["tokens"] == out["tokens"]                     # round trip
    for path, body, param in (("/detokenize", {"tokens": [1, 99999]}, "tokens"),
                              ("/detokenize", {}, "tokens"), ("/tokenize", {}, "prompt"),
                              ("/tokenize", {"prompt": "x", "model": "other"}, "model")):
        code, err = _raw(server, path, json.dumps(body).encode())
        assert code in (400, 404) and err["error"]["param"] == param, (path, body)
    for method in ("GET", "POST"):
        req = urllib.request.Request(server.base_url + "/ping", method=method,
                                     data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200
    with urllib.request.urlopen(server.base_url + "/version", timeout=10) as r:
        assert json.loads(r.read())["version"]
    code, _, _ = _post(server, "/admin/reset", {})
    assert code == 404                                   # not on evalkit serve


def test_dashboard_metrics_exist_and_move_under_load(client, server):
    before = _totals(_metrics(server))
    r = client.completions.create(model=server.model, prompt=["one", "two words"],
                                  max_tokens=4, n=3, temperature=1.0, seed=2)
    chat = client.chat.completions.create(model=server.model, max_tokens=3, n=2,
                                          messages=[{"role": "user", "content": "c"}])
    fam = _metrics(server)
    after = _totals(fam)
    d = lambda name, **lab: _delta(after, before, name, model_name=server.model, **lab)  # noqa
    for name in ("vllm:request_inference_time_seconds", "vllm:request_prefill_time_seconds",
                 "vllm:request_decode_time_seconds"):
        assert fam[name].type == "histogram"
        assert d(name + "_count") == 8 and d(name + "_sum") > 0, name
    assert d("vllm:request_inference_time_seconds_sum") >= d(
        "vllm:request_decode_time_seconds_sum")
    for name in ("vllm:num_preemptions", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits"):
        assert fam[name].type == "counter", name
    seq_prompts = 3 * r.usage.prompt_tokens + 2 * chat.usage.prompt_tokens
    assert d("vllm:prompt_tokens_total") == seq_prompts
    assert d("vllm:request_prompt_tokens_sum") == seq_prompts         # n > 1: they agree
    assert d("vllm:prefix_cache_queries_total") == seq_prompts
    # the 2nd and 3rd choice of each prompt (and the 2nd chat choice) reuse the 1st's prefill
    # when they are admitted together, as they are on an idle server
    assert d("vllm:prefix_cache_hits_total") == 2 * r.usage.prompt_tokens + \
        chat.usage.prompt_tokens


def test_the_remaining_accepted_parameters_do_what_they_say(client, server):
    msgs = [{"role": "user", "content": "params"}]
    chat = client.chat.completions.create(model=server.model, messages=msgs, temperature=0,
                                          max_completion_tokens=3, user="u1")
    assert chat.usage.completion_tokens == 3 and chat.choices[0].finish_reason == "length"
    base = dict(model=server.model, prompt="params", max_tokens=6)
    greedy = client.completions.create(**base, temperature=0).choices[0].text
    # top_k = 1, or a top_p below the top token's probability, leave only the argmax
    for extra in ({"top_k": 1}, {}):
        r = client.completions.create(**base, temperature=1.5, seed=8,
                                      top_p=1e-9 if not extra else 1.0, extra_body=extra)
        assert r.choices[0].text == greedy, extra
    same = client.completions.create(**base, temperature=0, n=2, best_of=2,
                                     extra_body={"ignore_eos": True})
    assert [c.text for c in same.choices] == [greedy, greedy]
    first = int(greedy.split(" t")[1])
    cut = client.completions.create(**base, temperature=0,
                                    extra_body={"stop_token_ids": [first]})
    assert cut.choices[0].text == "" and cut.usage.completion_tokens == 1
    held = client.completions.create(**base, temperature=0,
                                     extra_body={"stop_token_ids": [first], "min_tokens": 3})
    assert held.usage.completion_tokens >= 3                 # the stop id waits for 3 tokens
    text = held.choices[0].text
    assert text.startswith(f" t{first}") and greedy.startswith(text)
