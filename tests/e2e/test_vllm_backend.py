"""The vllm backend end to end: DiLoCo learners + an OpenAI-compatible server at an endpoint.

vLLM itself does not install on these machines; `evalkit serve` stands in for it, speaking
the same protocol (streamed /v1/completions with usage, /v1/models, /health) and exposing
vLLM's metric names, which the runner's scraper reads."""

from __future__ import annotations

import urllib.request

import numpy as np
import pytest

from tests.support.optional import installed

prom_parser = pytest.importorskip("prometheus_client.parser")

from tests.support.sidecar_server import start_server, stop_server  # noqa: E402

from evalkit.replay.backends.torch.rig import close_rig  # noqa: E402
from evalkit.policies.base import Decision, Policy  # noqa: E402
from evalkit.replay.runner import run_one  # noqa: E402
from evalkit.replay.spec import ReplaySpec  # noqa: E402
from evalkit.replay.traces.model import Trace  # noqa: E402
from evalkit.runlog.io import read_meta, read_table  # noqa: E402
from evalkit.runlog.validate import validate_run  # noqa: E402

pytestmark = [installed("torch", "transformers", "aiohttp"), pytest.mark.torch, pytest.mark.slow]


class MergeEvery3s(Policy):
    name = "merge_every_3s"

    def decide(self, state):
        last = state.last_merge_end_s
        return Decision(last is None or state.t_s - last >= 3.0, score=float(state.queue_running))


@pytest.fixture(scope="module")
def server():
    s = start_server("tiny-e2e")
    try:
        yield s
    finally:
        close_rig()
        stop_server(s)


def _success_count(server) -> float:
    with urllib.request.urlopen(server.base_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    total = 0.0
    for fam in prom_parser.text_string_to_metric_families(text):
        if fam.name == "vllm:request_success":
            total += sum(s.value for s in fam.samples if s.name.endswith("_total"))
    return total


def test_vllm_backend_replays_against_an_openai_endpoint(server, tmp_path):
    horizon = 18.0
    rng = np.random.default_rng(5)
    # 18 scattered requests and a burst of 6 long ones: the burst keeps requests in flight
    # across several scrapes however fast the machine is, so the running gauge must be seen
    scattered, burst = 18, 6
    n = scattered + burst
    arrival = np.concatenate([rng.uniform(0.5, horizon - 3.0, scattered), np.full(burst, 6.0)])
    output = np.concatenate([rng.integers(6, 14, scattered), np.full(burst, 160)])
    order = np.argsort(arrival, kind="stable")
    trace = Trace.from_arrays(arrival[order], rng.integers(8, 32, n), output[order], name="e2e")
    spec = ReplaySpec(run_id="vllm-e2e", seed=3, regime="cpu", backend="vllm",
                      merge_duration_s=1.0, horizon_s=horizon, h_min=3, h_max=100000,
                      min_gap_s=2.0, max_gap_s=30.0, slo={"e2e_s": 5.0, "ttft_s": None,
                                                        "tpot_s": None},
                      backend_config={"endpoint": server.base_url + "/v1",
                                      "model": server.model, "n_learners": 2, "max_batch": 8,
                                      "reuse_rig": False, "scrape_interval_s": 0.2})
    before = _success_count(server)
    res = run_one(spec, trace, MergeEvery3s(), tmp_path / "runs")
    assert res.complete, res.error
    run = res.path
    assert validate_run(run) == []
    meta = read_meta(run)
    eff = meta["settings"]["effective"]
    assert meta["backend"] == "vllm" and eff["server_kind"] == "endpoint"
    assert eff["served_model"] == server.model
    req = read_table(run, "requests")
    assert len(req) == n and req["ok"].all(), req["error"].dropna().tolist()
    assert (req["tokens_received"] == req["output_tokens"]).all()
    assert (req["first_token_s"] >= req["sent_s"]).all()
    merges = read_table(run, "merges")
    assert len(merges) >= 2 and (merges["end_s"] > merges["start_s"]).all()
    assert (np.diff(merges["start_s"]) >= 1.9).all()            # corridor min gap 2 s
    signals = read_table(run, "signals")
    assert signals["scrape_ok"].mean() > 0.9                     # vLLM metric names read
    assert eff["signals"]["available"] is True
    assert eff["signals"]["found"] == ["vllm:num_requests_running", "vllm:num_requests_waiting"]
    assert signals["queue_running"].max() >= 1
    decisions = read_table(run, "decisions")
    assert (decisions["action"] == "merge").sum() == len(merges)
    # the server counted exactly the replayed requests plus the capacity probe's
    probe = eff["probe_requests"] + 1 if not eff.get("capacity_probe_cached") else 0
    assert _success_count(server) - before == n + probe
