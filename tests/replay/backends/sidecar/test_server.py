"""The sidecar engine in-process (tiny model, CPU): one failing sequence or forward pass never
takes the loop down, preemption keeps outputs unchanged, penalties match a reference."""

from __future__ import annotations

import asyncio
import json
import queue
import time

import pytest

from tests.support.optional import LazyModule, installed

torch = LazyModule("torch")

from evalkit.replay.backends.models import build_model, resolve_config  # noqa: E402
from evalkit.replay.backends.sidecar.engine import UNHEALTHY_AFTER, Engine  # noqa: E402
from evalkit.replay.backends.sidecar.openai_requests import Sampling  # noqa: E402
from evalkit.replay.backends.sidecar.sequence import Seq  # noqa: E402

pytestmark = [installed("transformers", "torch"), pytest.mark.torch]


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    return build_model(resolve_config("tiny"), seed=0)


def make_engine(model, **kw) -> Engine:
    eng = Engine(model, device="cpu", max_batch=8, vocab=512, **kw)
    eng.start()
    return eng


def run(eng: Engine, specs: list, timeout_s: float = 60.0) -> list:
    """``specs``: (prompt, Sampling) per sequence -> per sequence (kind, token ids, detail),
    kind "done" or "error"."""
    q: queue.Queue = queue.Queue()
    seqs = []
    for i, (prompt, sp) in enumerate(specs):
        seqs.append(Seq(f"r{i}", list(prompt), sp.max_tokens,
                        lambda item, i=i: q.put((i, item)), sampling=sp))
    for s in seqs:
        eng.inbox.put(s)
    out = [None] * len(seqs)
    toks = [[] for _ in seqs]
    deadline = time.monotonic() + timeout_s
    while any(o is None for o in out):
        i, item = q.get(timeout=max(0.1, deadline - time.monotonic()))
        if item[0] == "token":
            toks[i].append(item[1])
        elif out[i] is None:
            out[i] = (item[0], toks[i], item[1])
    return out


GREEDY8 = Sampling(max_tokens=8, temperature=0.0)


def test_a_failing_sequence_fails_alone_and_the_loop_goes_on(model):
    eng = make_engine(model)
    try:
        ref = run(eng, [([5, 6, 7], GREEDY8), ([9, 10], GREEDY8)])
        sampled = Sampling(max_tokens=8, temperature=1.0, seed=1)
        real_sample = eng._sample

        def sample(row, seq):
            if seq.rid == "r1" and seq.generated == 3:
                raise RuntimeError("probability tensor contains nan")
            return real_sample(row, seq)
        eng._sample = sample
        out = run(eng, [([5, 6, 7], GREEDY8), ([1, 2, 3, 4], sampled), ([9, 10], GREEDY8)])
        assert out[1][0] == "error" and "nan" in out[1][2] and len(out[1][1]) == 3
        assert out[0] == ref[0] and out[2] == ref[1]       # the others are untouched
        assert eng.healthy() is None and eng.thread.is_alive()
        eng._sample = real_sample
        assert run(eng, [([5, 6, 7], GREEDY8)])[0] == ref[0]
    finally:
        eng.stop.set()


def test_a_failing_forward_fails_its_batch_and_health_follows_the_real_state(model):
    eng = make_engine(model)
    try:
        ref = run(eng, [([5, 6, 7], GREEDY8)])
        real = eng._forward
        fails = {"left": 1}

        def forward(cache, **kw):
            if fails["left"] > 0:
                fails["left"] -= 1
                raise RuntimeError("CUDA out of memory")
            return real(cache, **kw)
        eng._forward = forward
        out = run(eng, [([5, 6, 7], GREEDY8), ([9, 10], GREEDY8)])
        assert [o[0] for o in out] == ["error", "error"] and "out of memory" in out[0][2]
        assert eng.healthy() is None                        # one failure: still serving
        assert run(eng, [([5, 6, 7], GREEDY8)])[0] == ref[0]
        fails["left"] = UNHEALTHY_AFTER
        for _ in range(UNHEALTHY_AFTER):
            assert run(eng, [([5, 6, 7], GREEDY8)])[0][0] == "error"
        assert "forward passes failed" in eng.healthy()      # failing every time: say so
        assert eng.thread.is_alive() and eng.dead() is None  # requests are still tried
        assert run(eng, [([5, 6, 7], GREEDY8)])[0] == ref[0]
        assert eng.healthy() is None                        # recovered
    finally:
        eng.stop.set()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_engine_thread_reads_unhealthy(model):
    eng = make_engine(model)

    def die():
        raise SystemExit("killed")
    eng._iteration = die
    eng.thread.join(5)
    assert not eng.thread.is_alive()
    assert "SystemExit" in eng.healthy()


def test_preemption_recomputes_and_keeps_every_output(model):
    prompts = [[3, 4, 5, 6], [7, 8, 9], [11, 12, 13, 14, 15]]
    sp = Sampling(max_tokens=20, temperature=0.0)
    alone = make_engine(model)
    try:
        ref = [run(alone, [(p, sp)])[0] for p in prompts]
    finally:
        alone.stop.set()
    tight = make_engine(model, kv_capacity=40)     # 3 x (prompt + 20) > 40: must preempt
    try:
        out = run(tight, [(p, sp) for p in prompts])
        assert tight.counters["preemptions"] > 0
        assert out == ref
        sampled = Sampling(max_tokens=20, temperature=1.0, seed=5)
        ref_s = [run(make_engine(model), [(p, sampled)])[0] for p in prompts]
        assert run(tight, [(p, sampled) for p in prompts]) == ref_s   # seeded: unchanged
    finally:
        tight.stop.set()


def test_identical_prompts_share_one_prefill_row(model):
    eng = Engine(model, device="cpu", max_batch=8, vocab=512)      # no thread: stepped here
    try:
        calls = []
        real = eng._forward

        def forward(cache, **kw):
            calls.append(tuple(kw["input_ids"].shape))
            return real(cache, **kw)
        eng._forward = forward
        sp = Sampling(max_tokens=2, temperature=1.0, seed=3)
        out = []
        for i in range(3):
            s = Seq(f"r{i}", [5, 6, 7], 2, out.append, index=i, sampling=sp)
            eng.waiting.append(s)
        with torch.inference_mode():
            eng._prefill(list(eng.waiting))
        assert calls[0] == (1, 3)                      # one row for three sequences
        assert len(eng.active) == 3
        firsts = [it[1] for it in out if it[0] == "token"]
        assert len(firsts) == 3 and len(set(firsts)) > 1   # each sampled on its own
    finally:
        eng.stop.set()


def test_logprobs_match_a_full_forward_without_cache(model):
    """The engine's incremental (KV-cached, batched) logprobs against one plain forward over
    prompt + output."""
    eng = make_engine(model)
    got = []
    prompts = [[5, 6, 7, 8], [9, 10]]
    try:
        q: queue.Queue = queue.Queue()
        sp = Sampling(max_tokens=6, temperature=1.0, seed=2, logprobs=2)
        for i, p in enumerate(prompts):
            eng.inbox.put(Seq(f"r{i}", p, 6, lambda item, i=i: q.put((i, item)), index=i,
                              sampling=sp))
        done = 0
        got = [[], []]
        while done < 2:
            i, item = q.get(timeout=60)
            if item[0] == "token":
                got[i].append((item[1], item[4]))
            else:
                done += 1
    finally:
        eng.stop.set()
    for prompt, toks in zip(prompts, got):
        ids = torch.tensor([prompt + [t for t, _ in toks]])
        with torch.inference_mode():
            ref = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
        for j, (tok, (text, lp, alts)) in enumerate(toks):
            row = ref[len(prompt) - 1 + j]
            assert text == f" t{tok}" and lp == pytest.approx(float(row[tok]), abs=1e-4)
            top = torch.topk(row, 2)
            assert [a for a, _ in alts] == [f" t{int(t)}" for t in top.indices]
            assert [b for _, b in alts] == pytest.approx(top.values.tolist(), abs=1e-4)


def _penalized_reference(row: list, prompt: list, out: list, rep, freq, pres) -> list:
    """vLLM's penalties written out per token (an independent re-implementation)."""
    res = []
    for tok, x in enumerate(row):
        if tok in prompt or tok in out:
            x = x / rep if x > 0 else x * rep
        c = out.count(tok)
        x = x - freq * c - (pres if c else 0.0)
        res.append(x)
    return res


@pytest.mark.parametrize("rep,freq,pres", [(1.3, 0.0, 0.0), (1.0, 0.7, 0.0),
                                           (1.0, 0.0, -1.5), (0.8, 2.0, 2.0)])
def test_penalties_match_a_per_token_reference(model, rep, freq, pres):
    eng = Engine(model, device="cpu", max_batch=1, vocab=16)
    g = torch.Generator().manual_seed(0)
    row = torch.randn(16, generator=g)
    seq = Seq("r", [1, 2, 2], 4, lambda item: None,
              sampling=Sampling(max_tokens=4, repetition_penalty=rep, frequency_penalty=freq,
                                presence_penalty=pres))
    seq.out_ids = [2, 5, 5, 9]
    got = eng._penalize(row.clone(), seq).tolist()
    want = _penalized_reference(row.tolist(), seq.prompt, seq.out_ids, rep, freq, pres)
    assert got == pytest.approx(want, abs=1e-6)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_dead_engine_answers_503_on_health_and_generation(model):
    from aiohttp.test_utils import TestClient, TestServer

    from evalkit.replay.backends.sidecar.server import make_app
    eng = make_engine(model)
    eng._iteration = lambda: (_ for _ in ()).throw(SystemExit("gone"))
    eng.thread.join(5)

    async def go():
        async with TestClient(TestServer(make_app(eng, "m"))) as c:
            r1 = await c.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
            r2 = await c.get("/health")
            r3 = await c.get("/ping")
            return r1.status, await r1.json(), r2.status, r3.status
    status, body, health, ping = asyncio.run(go())
    assert (status, health, ping) == (503, 503, 503)
    assert body["error"]["type"] == "ServiceUnavailable" and "SystemExit" in body["error"][
        "message"]


def test_a_sequence_that_fails_in_the_engine_gets_a_500_and_the_server_serves_on(model):
    from aiohttp.test_utils import TestClient, TestServer

    from evalkit.replay.backends.sidecar.server import make_app
    eng = make_engine(model)
    real = eng._sample

    def sample(row, seq):
        if seq.sampling.seed == 666:
            raise RuntimeError("invalid multinomial distribution")
        return real(row, seq)
    eng._sample = sample
    body = {"prompt": "x", "max_tokens": 3, "temperature": 1.0}

    async def go():
        async with TestClient(TestServer(make_app(eng, "m"))) as c:
            bad = await c.post("/v1/completions", json={**body, "seed": 666})
            streamed = await c.post("/v1/completions", json={**body, "seed": 666,
                                                             "stream": True})
            text = await streamed.text()
            ok = await c.post("/v1/completions", json={**body, "seed": 1})
            health = await c.get("/health")
            return bad.status, await bad.json(), text, ok.status, health.status
    try:
        status, err, text, ok, health = asyncio.run(go())
    finally:
        eng.stop.set()
    assert status == 500 and err["error"]["type"] == "InternalServerError"
    assert "invalid multinomial" in err["error"]["message"]
    assert '"code": 500' in text and text.endswith("data: [DONE]\n\n")
    assert (ok, health) == (200, 200)


def test_a_server_whose_forwards_keep_failing_reads_503_and_heals(model):
    from aiohttp.test_utils import TestClient, TestServer

    from evalkit.replay.backends.sidecar.server import make_app
    eng = make_engine(model)
    real = eng._forward
    fails = {"left": UNHEALTHY_AFTER}

    def forward(cache, **kw):
        if fails["left"] > 0:
            fails["left"] -= 1
            raise RuntimeError("CUDA out of memory")
        return real(cache, **kw)
    eng._forward = forward
    body = {"prompt": "x", "max_tokens": 2}

    async def go():
        async with TestClient(TestServer(make_app(eng, "m"))) as c:
            codes = [(await c.post("/v1/completions", json=body)).status
                     for _ in range(UNHEALTHY_AFTER)]
            sick = (await c.get("/health")).status
            ok = (await c.post("/v1/completions", json=body)).status     # still tried
            return codes, sick, ok, (await c.get("/health")).status
    try:
        codes, sick, ok, healed = asyncio.run(go())
    finally:
        eng.stop.set()
    assert codes == [500] * UNHEALTHY_AFTER and sick == 503
    assert (ok, healed) == (200, 200)


def test_every_choice_returns_the_servers_own_timings_within_the_clients_latency(model):
    """queue, prefill and decode of each choice, measured by the engine, come back in the
    response (``server_timing``; on the choice's last chunk when streamed): what only a
    server that really served the request can report, and never more than the client waited."""
    from aiohttp.test_utils import TestClient, TestServer

    from evalkit.replay.backends.sidecar.server import make_app
    eng = make_engine(model)
    body = {"prompt": "x", "max_tokens": 4, "temperature": 0.0}

    async def go():
        async with TestClient(TestServer(make_app(eng, "m"))) as c:
            t0 = time.monotonic()
            whole = await (await c.post("/v1/completions", json={**body, "n": 2})).json()
            t1 = time.monotonic()
            text = await (await c.post("/v1/completions", json={**body, "stream": True})).text()
            t2 = time.monotonic()
            return whole, t1 - t0, text, t2 - t1
    try:
        whole, latency, text, stream_latency = asyncio.run(go())
    finally:
        eng.stop.set()
    streamed = [json.loads(line[6:]) for line in text.splitlines()
                if line.startswith("data: {") and "server_timing" in line]
    assert [t["index"] for t in whole["server_timing"]] == [0, 1] and len(streamed) == 1
    for timing, waited in [(t, latency) for t in whole["server_timing"]] + [
            (streamed[0]["server_timing"], stream_latency)]:
        phases = [timing[k] for k in ("queue_s", "prefill_s", "decode_s")]
        assert all(p is not None and p >= 0 for p in phases), timing
        assert sum(phases) <= timing["total_s"] + 1e-9
        assert 0 < timing["total_s"] <= waited
