"""One capacity probe per seed: a run re-done on a fresh rig takes the probe an earlier run of
its seed recorded, so like_for_like compares one measurement, not two."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pandas as pd
import pytest

from evalkit.replay.backends.torch import coordinator
from evalkit.replay.backends.torch.coordinator import (PROBE_VALUES, _probe,
                                                       probe_shape, recorded_probe)
from evalkit.replay.job import seed_probe
from evalkit.replay.spec import ReplaySpec
from tests.support.optional import installed

pytestmark = installed("torch", "aiohttp")

CFG = {"max_batch": 4, "max_prompt_tokens": 64}
REQUESTS = pd.DataFrame({"prompt_tokens": [10, 12, 14], "output_tokens": [20, 22, 24]})


def probe_values(rate: float) -> dict:
    return {k: rate for k in PROBE_VALUES} | {"probe_prompt_tokens": 12,
                                              "probe_output_tokens": 22, "probe_requests": 4}


def run_json(run_id: str, seed: int, rate: float, *, started: str, complete: bool = True,
             trace: str = "trace-a") -> dict:
    return {"run_id": run_id, "seed": seed, "complete": complete, "trace_realisation": trace,
            "run_order": {"started_at": started},
            "settings": {"effective": {**probe_values(rate), **CFG}}}


@pytest.fixture
def measured(monkeypatch):
    calls = []

    async def fake_probe(server, requests, cfg, seed):
        calls.append(seed)
        return probe_values(99.0)

    monkeypatch.setattr(coordinator, "probe_capacity", fake_probe)
    return calls


def test_recorded_probe_of_the_seed_wins_over_rig_cache_and_measurement(measured):
    rig = SimpleNamespace(probes={probe_shape(REQUESTS, CFG): probe_values(50.0)}, server=None)
    recorded = {"run_id": "a__s1", "shape": list(probe_shape(REQUESTS, CFG)),
                "values": probe_values(7.0)}
    got = _probe(rig, REQUESTS, CFG, 1, recorded)
    assert got["capacity_requests_per_s"] == 7.0
    assert got["capacity_probe_from"] == "a__s1" and got["capacity_probe_cached"] is True
    assert measured == []


def test_recorded_probe_of_another_shape_is_not_used(measured):
    rig = SimpleNamespace(probes={}, server=None)
    other = {"run_id": "a__s1", "shape": [1, 2, 4, 64], "values": probe_values(7.0)}
    got = _probe(rig, REQUESTS, CFG, 1, other)
    assert got["capacity_requests_per_s"] == 99.0 and got["capacity_probe_cached"] is False
    assert got["capacity_probe_from"] is None and measured == [1]
    again = _probe(rig, REQUESTS, CFG, 1)              # then the rig's own cache
    assert again["capacity_probe_cached"] is True and measured == [1]


def test_recorded_probe_needs_a_complete_run_with_every_value():
    meta = run_json("a__s1", 1, 5.0, started="2026-01-01T00:00:00+00:00")
    assert recorded_probe(meta)["values"]["capacity_requests_per_s"] == 5.0
    assert recorded_probe(meta)["shape"] == [12, 22, 4, 64]
    assert recorded_probe({**meta, "complete": False}) is None
    partial = json.loads(json.dumps(meta))
    del partial["settings"]["effective"]["single_request_s"]
    assert recorded_probe(partial) is None


def write(runs, meta):
    d = runs / meta["run_id"]
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps(meta))


def test_seed_probe_takes_the_earliest_complete_run_of_the_same_seed_and_trace(tmp_path):
    runs = tmp_path / "runs"
    write(runs, run_json("late__s1", 1, 3.0, started="2026-01-01T00:05:00+00:00"))
    write(runs, run_json("early__s1", 1, 2.0, started="2026-01-01T00:01:00+00:00"))
    write(runs, run_json("failed__s1", 1, 9.0, started="2026-01-01T00:00:00+00:00",
                         complete=False))
    write(runs, run_json("other_seed__s2", 2, 8.0, started="2026-01-01T00:00:00+00:00"))
    write(runs, run_json("other_trace__s1", 1, 7.0, started="2026-01-01T00:00:00+00:00",
                         trace="trace-b"))
    write(runs, run_json("me__s1", 1, 6.0, started="2026-01-01T00:00:00+00:00"))
    (runs / ".me__s1.damaged-1").mkdir()
    (runs / "broken__s1").mkdir()
    (runs / "broken__s1" / "run.json").write_text("{not json")
    spec = ReplaySpec(run_id="me__s1", seed=1, regime="x", backend="torch")
    trace = SimpleNamespace(sha256="trace-a")
    got = seed_probe(runs, spec, trace)
    assert got["run_id"] == "early__s1" and got["values"]["capacity_requests_per_s"] == 2.0
    assert seed_probe(runs, dataclasses.replace(spec, seed=3), trace) is None


def test_backends_without_a_probe_are_not_scanned(tmp_path):
    runs = tmp_path / "runs"
    write(runs, run_json("early__s1", 1, 2.0, started="2026-01-01T00:01:00+00:00"))
    spec = ReplaySpec(run_id="me__s1", seed=1, regime="x", backend="sim")
    assert seed_probe(runs, spec, SimpleNamespace(sha256="trace-a")) is None


def test_probe_is_not_a_requested_setting():
    from evalkit.replay.runner import _requested
    spec = ReplaySpec(run_id="r", seed=1, regime="x", seed_probe={"run_id": "a"})
    assert "seed_probe" not in _requested(spec)


def test_the_vllm_backend_reads_the_same_probe_record():
    from evalkit.replay.runner import load_backend
    meta = run_json("a__s1", 1, 5.0, started="2026-01-01T00:00:00+00:00")
    assert load_backend("vllm").recorded_probe(meta) == recorded_probe(meta)
