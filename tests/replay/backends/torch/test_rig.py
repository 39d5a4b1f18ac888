"""Real torch backend: DiLoCo learners, torch sidecar, open-loop client (CPU, tiny models)."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from evalkit.errors import InputError
from evalkit.replay.backends.torch import client as cl
from evalkit.replay.backends.torch import prepare, replay, start_sidecar
from evalkit.replay.backends.torch.rig import close_rig, current_rig
from evalkit.replay.backends.torch.health import check_model, wait_healthy
from evalkit.pids import pid_alive
from evalkit.policies.base import Decision, Policy
from evalkit.replay.spec import ReplaySpec
from evalkit.replay.traces.model import Trace
from tests.support.optional import installed

pytestmark = [installed("torch", "transformers", "aiohttp"), pytest.mark.torch]


class MergeWhenAllowed(Policy):
    """Merges at the first corridor check 3 s after the previous merge ended."""

    name = "merge_when_allowed"

    def decide(self, state):
        last = state.last_merge_end_s
        return Decision(last is None or state.t_s - last >= 3.0,
                        score=float(state.queue_running))


def small_trace(horizon: float, rate: float, seed: int = 0) -> Trace:
    rng = np.random.default_rng(seed)
    n = int(rate * (horizon - 3))
    arrival = np.sort(rng.uniform(0.5, horizon - 2.5, n))
    return Trace.from_arrays(arrival, rng.integers(8, 32, n), rng.integers(8, 20, n),
                             name="test")


class PlannedAt(Policy):
    """Merges at fixed times (planned starts): K does not depend on machine speed."""

    name = "planned_at"

    def __init__(self, starts):
        super().__init__(starts=list(starts))

    def reset(self, ctx):
        super().reset(ctx)
        self.planned_starts = np.asarray(self.params["starts"], dtype=float)

    def decide(self, state):  # pragma: no cover - planned policies are not asked
        raise AssertionError("planned policy asked to decide")


def make_spec(horizon: float, seed: int = 3, **cfg) -> ReplaySpec:
    config = {"n_learners": 2, "max_batch": 8, **cfg}
    return ReplaySpec(run_id="t", seed=seed, regime="cpu", backend="torch",
                      merge_duration_s=1.0, horizon_s=horizon, h_min=3, h_max=100000,
                      min_gap_s=2.0, max_gap_s=30.0, backend_config=config)


def assert_no_orphans(out):
    close_rig()                        # a complete run leaves the rig warm for the next one
    pids = out.effective["pids"]
    for pid in [pids["server"], *pids["learners"]]:
        assert not pid_alive(pid), f"process {pid} outlived the run"


# -- the serving sidecar and the client, through the code path that talks to vLLM ------------

@pytest.fixture(scope="module")
def sidecar(tmp_path_factory):
    cfg = prepare(make_spec(10.0), "torch")
    server = start_sidecar(cfg, str(tmp_path_factory.mktemp("sidecar")))
    try:
        asyncio.run(wait_healthy(server, 120.0))
        yield server
    finally:
        server.proc.stop()


def _fetch(coro_fn):
    import aiohttp

    async def go():
        async with aiohttp.ClientSession() as s:
            return await coro_fn(s)
    return asyncio.run(go())


def test_client_streams_every_token_from_sidecar(sidecar):
    import pandas as pd
    reqs = pd.DataFrame({"request_id": [0, 1, 2], "arrival_s": [0.0, 0.05, 0.1],
                         "prompt_tokens": [5, 40, 12], "output_tokens": [1, 7, 13]})
    bodies, truncated = cl.request_bodies(reqs, sidecar.model, 0, max_prompt_tokens=30)
    assert truncated == 1
    recs = cl.make_records(reqs)

    async def go(s):
        return await cl.open_loop(s, sidecar.base_url, recs, bodies, time.monotonic(),
                                  timeout_s=30)
    _fetch(go)
    df = cl.records_frame(recs)
    assert df["ok"].all(), df["error"].tolist()
    assert df["tokens_received"].tolist() == [1, 7, 13]
    assert [len(t) for t in df["token_times"]] == [1, 7, 13]
    assert (df["first_token_s"] >= df["sent_s"]).all()
    assert (df["end_s"] >= df["first_token_s"]).all()
    # token times are non-decreasing and tpot is their mean gap
    tt = np.asarray(df["token_times"][2])
    assert np.all(np.diff(tt) >= 0)
    assert df["tpot_s"][2] == pytest.approx(np.diff(tt).mean())
    # the sidecar's own timings of every request, inside the latency the client measured
    server = df[["server_queue_s", "server_prefill_s", "server_decode_s", "server_total_s"]]
    assert server.notna().all().all() and (server >= 0).all().all()
    assert (df["server_total_s"] <= df["end_s"] - df["sent_s"]).all()


def test_metrics_and_models_endpoints(sidecar):
    async def go(s):
        async with s.get(sidecar.base_url + "/metrics") as r:
            return await r.text()
    vals = cl.parse_prometheus(_fetch(go))
    assert vals == {"vllm:num_requests_running": 0.0, "vllm:num_requests_waiting": 0.0}
    names = ("vllm:generation_tokens_total", "evalkit:engine_resets_total")

    async def reset(s):
        async with s.post(sidecar.base_url + "/admin/reset") as r:
            assert r.status == 401                           # the rig's key only
        async with s.post(sidecar.base_url + "/admin/reset",
                          headers={"Authorization": "Bearer wrong"}) as r:
            assert r.status == 401
        async with s.post(sidecar.base_url + "/admin/reset",
                          headers={"Authorization": f"Bearer {sidecar.admin_key}"}) as r:
            assert r.status == 200
        async with s.get(sidecar.base_url + "/metrics") as r:
            return cl.parse_prometheus(await r.text(), names)
    after = _fetch(reset)
    assert after["vllm:generation_tokens_total"] == 0.0      # counters zeroed
    assert after["evalkit:engine_resets_total"] >= 1.0
    asyncio.run(check_model(sidecar))
    from evalkit.replay.backends.torch.health import Server
    with pytest.raises(InputError, match="not served"):
        asyncio.run(check_model(Server(sidecar.base_url, "no-such-model", "endpoint")))


def test_unknown_model_is_an_http_error_recorded_as_failed_request(sidecar):
    import pandas as pd
    reqs = pd.DataFrame({"request_id": [0], "arrival_s": [0.0], "prompt_tokens": [4],
                         "output_tokens": [3]})
    bodies, _ = cl.request_bodies(reqs, "wrong-model", 0, max_prompt_tokens=None)
    recs = cl.make_records(reqs)
    _fetch(lambda s: cl.open_loop(s, sidecar.base_url, recs, bodies, time.monotonic(),
                                  timeout_s=10))
    assert not recs[0].ok and "HTTP 404" in recs[0].error


def test_port_in_use_is_refused(sidecar, tmp_path):
    port = int(sidecar.base_url.rsplit(":", 1)[1])
    cfg = prepare(make_spec(10.0, sidecar_port=port), "torch")
    with pytest.raises(InputError, match="in use"):
        start_sidecar(cfg, str(tmp_path))


def test_parse_prometheus_sums_label_sets():
    text = ('# HELP x\nvllm:num_requests_running{model_name="a"} 2\n'
            'vllm:num_requests_running{model_name="b"} 3.0\nvllm:num_requests_waiting 1\n'
            'vllm:num_requests_waiting_other 9\n')
    assert cl.parse_prometheus(text) == {"vllm:num_requests_running": 5.0,
                                         "vllm:num_requests_waiting": 1.0}


def test_bad_config_and_unreachable_endpoint(monkeypatch):
    with pytest.raises(InputError, match="unknown torch backend_config"):
        prepare(make_spec(10.0, n_lerners=2), "torch")
    from evalkit.replay.backends import vllm
    monkeypatch.setattr(vllm, "ENDPOINT_HEALTH_WAIT_S", 0.3)    # nothing listens on port 9
    spec = make_spec(10.0, endpoint="http://127.0.0.1:9", model="m")
    with pytest.raises(InputError, match="not healthy"):
        vllm.replay(spec, small_trace(10.0, 1.0), MergeWhenAllowed())
    with pytest.raises(InputError, match="endpoint and model"):
        vllm.replay(make_spec(10.0), small_trace(10.0, 1.0), MergeWhenAllowed())


def test_init_params_is_a_function_of_the_seed_only():
    import torch
    from evalkit.replay.backends.models import build_model, init_params, resolve_config
    fields = resolve_config("tiny")
    fresh = build_model(fields, seed=5)
    used = build_model(fields, seed=1)
    with torch.no_grad():
        for p in used.parameters():
            p.mul_(3.0).add_(1.0)          # "trained" by an earlier run
    init_params(used, 5)
    pairs = list(zip(fresh.parameters(), used.parameters()))
    assert all(torch.equal(a, b) for a, b in pairs)
    other = build_model(fields, seed=6)
    assert not torch.equal(next(fresh.parameters()), next(other.parameters()))


def test_rig_key_ignores_per_run_settings_only():
    from evalkit.replay.backends.torch.rig import rig_key
    base = prepare(make_spec(10.0), "torch")
    same = prepare(make_spec(10.0, inner_lr=0.01, merge_min_s=2.0, fault=None), "torch")
    assert rig_key(base, "torch") == rig_key(same, "torch")
    for change in ({"n_learners": 3}, {"trainer_model": "small"}, {"max_batch": 4}):
        assert rig_key(prepare(make_spec(10.0, **change), "torch"), "torch") != \
            rig_key(base, "torch")
    assert rig_key(base, "vllm") != rig_key(base, "torch")


# -- one real replay, checked many ways -----------------------------------------------------

@pytest.fixture(scope="module")
def real_run():
    horizon = 30.0
    out = replay(make_spec(horizon), small_trace(horizon, 2.0), MergeWhenAllowed())
    return out


@pytest.mark.slow
def test_real_run_is_complete_with_merges(real_run):
    out = real_run
    assert out.complete, out.error
    m = out.merges
    assert len(m) >= 3
    assert (m["end_s"] > m["start_s"]).all()
    assert (m["start_s"].iloc[1:].to_numpy() - m["end_s"].iloc[:-1].to_numpy() >= 3.0).all()
    assert (np.diff(m["start_s"].to_numpy()) >= 1.9).all()      # corridor min_gap_s = 2 s
    t_merge = out.decisions.loc[out.decisions["action"] == "merge", "t_s"].to_numpy()
    assert (np.diff(t_merge) >= 2.0).all()
    assert (m["bytes"] > 0).all() and m["bytes"].nunique() == 1
    assert m["inner_step"].is_monotonic_increasing
    assert (out.decisions["action"] == "merge").sum() == len(m)
    assert (out.decisions["action"] == "defer").any()
    assert out.inner_step_s and out.inner_step_s > 0
    assert len(out.steps) > len(m) and out.steps["loss"].notna().all()
    assert out.steps["start_s"].min() >= 0            # learners wait for the replay clock


@pytest.mark.slow
def test_learners_identical_after_each_merge_and_differ_between(real_run):
    m = real_run.merges
    for before, after in zip(m["param_digests_before"], m["param_digests_after"]):
        b, a = before.split(","), after.split(",")
        assert len(a) == 2 and a[0] == a[1]
        assert b[0] != b[1]
    after = m["param_digests_after"].str.split(",").str[0]
    assert after.nunique() == len(m)                 # every merge changed the global model


@pytest.mark.slow
def test_every_request_timed_and_client_kept_up(real_run):
    r = real_run.requests
    assert r["ok"].all(), r["error"].dropna().tolist()
    assert r["first_token_s"].notna().all() and r["end_s"].notna().all()
    assert (r["first_token_s"] >= r["sent_s"]).all() and (r["end_s"] >= r["first_token_s"]).all()
    assert (r["tokens_received"] == r["output_tokens"]).all()
    lag = r["sent_s"] - r["arrival_s"]
    assert lag.min() >= 0
    assert np.quantile(lag, 0.99) < 0.05
    assert real_run.effective["client_keeps_up"]


@pytest.mark.slow
def test_metrics_scraped_during_run(real_run):
    s = real_run.signals
    assert s["scrape_ok"].mean() > 0.9
    assert s["queue_running"].max() >= 1
    assert s["t_s"].is_monotonic_increasing


@pytest.mark.slow
def test_no_orphans_after_complete_run(real_run):
    assert_no_orphans(real_run)


# -- failures end as incomplete runs with the error, and leave nothing behind ----------------

@pytest.mark.slow
@pytest.mark.parametrize("target, words", [("sidecar", "sidecar exited"),
                                           ("learner:1", "learner:1 exited")])
def test_killed_process_ends_run_incomplete(target, words):
    horizon = 25.0
    out = replay(make_spec(horizon, fault={"target": target, "at_s": 6.0}),
                 small_trace(horizon, 2.0), MergeWhenAllowed())
    assert not out.complete
    assert words in out.error
    assert_no_orphans(out)
    assert len(out.requests) == len(small_trace(horizon, 2.0).requests)   # none dropped
    if target == "sidecar":
        assert not out.requests["ok"].all()


@pytest.mark.slow
def test_trace_beyond_capacity_is_refused_with_measured_capacity():
    n = 3000
    trace = Trace.from_arrays(np.linspace(0.5, 10, n), np.full(n, 16), np.full(n, 64))
    with pytest.raises(InputError, match=r"engine sustained [0-9.]+ tokens/s"):
        replay(make_spec(12.0), trace, MergeWhenAllowed())


# -- warm rig: a run's results do not depend on what ran before -----------------------------

@pytest.mark.slow
def test_warm_rig_run_equals_fresh_run():
    close_rig()
    horizon = 14.0
    trace = small_trace(horizon, 1.5)
    planned = [3.0, 7.0, 10.5]
    first = replay(make_spec(horizon), trace, PlannedAt(planned))
    assert first.complete, first.error
    assert first.effective["rig"]["warm"] is False
    other = replay(make_spec(horizon, seed=11), small_trace(horizon, 1.5, seed=4),
                   MergeWhenAllowed())
    assert other.complete, other.error
    again = replay(make_spec(horizon), trace, PlannedAt(planned))
    assert again.complete, again.error
    rig = again.effective["rig"]
    assert rig["warm"] is True and rig["runs_before"] == 2
    assert again.effective["pids"] == first.effective["pids"]       # same processes
    # identical seed-determined start state, different for another seed
    assert again.effective["init_param_digests"] == first.effective["init_param_digests"]
    assert other.effective["init_param_digests"] != first.effective["init_param_digests"]
    d = first.effective["init_param_digests"]
    assert len(d) == 2 and d[0] == d[1]                     # learners start identical
    assert len(first.merges) == len(again.merges) == len(planned)
    # same parameters, optimizer state and data stream: the first inner steps match bit
    # for bit (one thread per learner on CPU is deterministic)
    n = min(5, len(first.steps), len(again.steps))
    assert first.steps["loss"].iloc[:n].tolist() == again.steps["loss"].iloc[:n].tolist()
    assert again.effective["capacity_probe_cached"] is True
    assert again.requests["ok"].all()
    assert current_rig() is not None
    assert_no_orphans(again)
    assert current_rig() is None
