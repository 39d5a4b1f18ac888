"""The endpoint backend against OpenAI-compatible servers with and without vLLM's metrics.

A stub server on 127.0.0.1 (tests/support/stub_openai.py) plays an engine that speaks the
protocol but exports no vLLM metrics (SGLang, TGI, llama.cpp's server); `evalkit serve`
(tests/e2e/test_vllm_backend.py) and vLLM itself (below, when installed) export them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

import numpy as np
import pytest

from tests.support.stub_openai import start_stub
from evalkit.errors import InputError
from evalkit.replay.backends import vllm as vb
from evalkit.policies import POLICIES, get_policy
from evalkit.replay.spec import ReplaySpec


@pytest.fixture
def stub(request):
    s = start_stub(metrics=getattr(request, "param", None))
    yield s
    s.stop()


def test_metric_names_reads_samples_and_declared_gauges():
    text = ("# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_waiting{model_name="m",engine="0"} 2.0\n'
            "process_cpu_seconds_total 1.5\n")
    assert vb.metric_names(text) == {"vllm:num_requests_running", "vllm:num_requests_waiting",
                                     "process_cpu_seconds_total"}


@pytest.mark.parametrize("stub, available, reason", [
    (None, False, "GET /metrics answered HTTP 404"),
    ("other", False, "/metrics has no vllm:num_requests_running, vllm:num_requests_waiting"),
    ("vllm", True, None),
], indirect=["stub"])
def test_probe_signals_tells_servers_with_and_without_vllm_metrics(stub, available, reason):
    got = vb.probe_signals(stub.base_url)
    assert got["available"] is available and got["reason"] == reason
    assert got["metrics_url"] == stub.base_url + "/metrics"


def test_probe_of_a_server_that_is_not_there():
    got = vb.probe_signals("http://127.0.0.1:9")
    assert not got["available"] and got["reason"].startswith("GET /metrics failed")


def _spec(stub, **cfg):
    return ReplaySpec(run_id="eng", seed=1, regime="r", backend="vllm", merge_duration_s=1.0,
                      horizon_s=12.0, h_min=3, h_max=100000, min_gap_s=2.0, max_gap_s=30.0,
                      slo={"e2e_s": 5.0, "ttft_s": None, "tpot_s": None},
                      backend_config={"endpoint": stub.base_url + "/v1", "model": stub.model,
                                      "n_learners": 1, "max_batch": 4, "reuse_rig": False,
                                      "scrape_interval_s": 0.2, **cfg})


def _trace(n=10, horizon=12.0):
    from evalkit.replay.traces.model import Trace
    rng = np.random.default_rng(2)
    return Trace.from_arrays(np.sort(rng.uniform(0.5, horizon - 4.0, n)),
                             rng.integers(8, 24, n), rng.integers(4, 10, n), name="eng")


NEEDS = sorted(n for n, c in POLICIES.items() if c.requires_signals)


def test_the_policies_that_read_engine_signals_are_the_forecast_and_pressure_ones():
    assert NEEDS == ["calibrated_online", "ewma", "pressure_gate", "wa"]


@pytest.mark.parametrize("name", NEEDS)
def test_a_policy_that_reads_signals_is_refused_before_anything_starts(stub, tmp_path, name):
    from evalkit.replay.runner import run_one
    with pytest.raises(InputError) as err:
        run_one(_spec(stub), _trace(), name, tmp_path / "runs")
    text = err.value.format()
    assert f"policy {name!r} reads" in text and "GET /metrics answered HTTP 404" in text
    assert "fixed_h" in text and "--disable-log-stats" in text
    assert not (tmp_path / "runs").exists()                 # nothing written


def test_a_plugin_declaring_signals_is_refused_the_same_way(stub):
    from evalkit.policies.base import Decision, Policy

    class Reads(Policy):
        name = "reads"
        requires_signals = ("queue_waiting",)

        def decide(self, state):
            return Decision(False)

    with pytest.raises(InputError, match="policy 'reads' reads queue_waiting"):
        vb.refuse_blind_policy(Reads(), vb.probe_signals(stub.base_url))
    vb.refuse_blind_policy(get_policy("fixed_h"), vb.probe_signals(stub.base_url))


@pytest.mark.parametrize("args, reason", [
    ([], None),
    (["--max-model-len", "2048"], None),
    (["--disable-log-stats"], "vllm_args has --disable-log-stats"),
    (["--api-server-count", "1"], None),
    (["--api-server-count", "2"], "vllm_args has --api-server-count 2"),
    (["--api-server-count=3"], "vllm_args has --api-server-count 3"),
])
def test_vllm_arguments_that_switch_its_gauges_off_are_recognised(args, reason):
    assert vb.stats_off_reason(args) == reason


def test_serve_vllm_without_stats_refuses_a_policy_that_reads_signals(tmp_path):
    from evalkit.replay.runner import run_one
    spec = ReplaySpec(run_id="nostats", seed=1, regime="r", backend="vllm",
                      merge_duration_s=1.0, horizon_s=12.0, h_min=3, h_max=100000,
                      min_gap_s=2.0, max_gap_s=30.0,
                      backend_config={"serve_vllm": "some/model", "n_learners": 1,
                                      "vllm_args": ["--disable-log-stats"]})
    with pytest.raises(InputError, match="the server does not provide them "
                                         r"\(vllm_args has --disable-log-stats\)"):
        run_one(spec, _trace(), "ewma", tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


def test_a_bad_endpoint_url_is_named_before_any_probe():
    with pytest.raises(InputError, match="is not an http"):
        vb._base_url("127.0.0.1:8000")


def _signals_frame(oks):
    import pandas as pd
    return pd.DataFrame({"t_s": np.arange(len(oks), dtype=float), "scrape_ok": oks,
                         "error": [None if ok else "HTTP 404" for ok in oks]})


@pytest.mark.parametrize("oks, available", [([False] * 4, False), ([False, True], True),
                                            ([], False)])
def test_mark_signals_records_availability_and_fails_a_blind_policy(oks, available):
    from evalkit.replay.spec import RunOutput
    for name, needs in (("fixed_h", False), ("ewma", True)):
        out = RunOutput(requests=None, merges=None, signals=_signals_frame(oks))
        out = vb.mark_signals(out, get_policy(name), None)
        sig = out.effective["signals"]
        assert sig["available"] is available and sig["scrapes_ok"] == sum(oks)
        assert out.complete is (available or not needs)
        assert any("engine signals unavailable" in n for n in out.notes) is (not available)


torch_ok = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "aiohttp"))


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.skipif(not torch_ok, reason="needs the torch extra (pip install -e '.[torch]')")
def test_replay_against_a_server_without_metrics_completes_with_signals_unavailable(
        stub, tmp_path):
    from evalkit.replay.backends.torch.rig import close_rig
    from evalkit.replay.runner import run_one
    from evalkit.runlog.io import read_meta, read_table
    from evalkit.runlog.validate import validate_run

    try:
        res = run_one(_spec(stub), _trace(), get_policy("fixed_h", H=4), tmp_path / "runs")
    finally:
        close_rig()
    assert res.complete, res.error
    assert validate_run(res.path) == []
    meta = read_meta(res.path)
    sig = meta["settings"]["effective"]["signals"]
    assert sig["available"] is False and sig["scrapes_ok"] == 0 and sig["scrapes"] > 0
    assert sig["reason"] == "GET /metrics answered HTTP 404"
    assert any("engine signals unavailable" in n for n in meta["notes"])
    view = meta["settings"]["effective"]["server_view"]       # real_sidecar: not evaluable
    assert view["available"] is False and "failed: HTTPError" in view["reason"]
    req = read_table(res.path, "requests")
    assert len(req) == 10 and req["ok"].all()
    assert not read_table(res.path, "signals")["scrape_ok"].astype(bool).any()


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None or not shutil.which("vllm"),
                    reason="vLLM is not installed here (it needs a GPU host: pip install vllm)")
@pytest.mark.skipif(not os.environ.get("EVALKIT_VLLM_MODEL"),
                    reason="set EVALKIT_VLLM_MODEL to a model vLLM can load offline")
def test_vllm_serve_exposes_the_signals_the_scraper_needs(tmp_path):
    """Launches `vllm serve MODEL` as the backend does and replays ewma against it."""
    from evalkit.replay.backends.torch.rig import close_rig
    from evalkit.replay.runner import run_one
    from evalkit.runlog.io import read_meta

    spec = ReplaySpec(run_id="vllm-real", seed=1, regime="r", backend="vllm",
                      merge_duration_s=1.0, horizon_s=20.0, h_min=3, h_max=100000,
                      min_gap_s=2.0, max_gap_s=30.0,
                      backend_config={"serve_vllm": os.environ["EVALKIT_VLLM_MODEL"],
                                      "vllm_args": ["--max-model-len", "2048"],
                                      "device": "cuda", "n_learners": 1, "reuse_rig": False})
    try:
        res = run_one(spec, _trace(n=20, horizon=20.0), get_policy("ewma"), tmp_path / "runs")
    finally:
        close_rig()
    assert res.complete, res.error
    assert read_meta(res.path)["settings"]["effective"]["signals"]["available"] is True
