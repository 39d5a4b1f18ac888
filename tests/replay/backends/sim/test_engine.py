"""The simulated backend: determinism, corridor, interference, planned starts, run writing."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from evalkit.replay.backends import sim
from evalkit.policies import get_policy
from evalkit.replay.runner import run_one
from evalkit.replay.spec import ReplaySpec
from evalkit.replay.traces import Lengths, generate, lognormal


def _trace(seed=1, duration=300.0):
    return generate("square_wave", seed=seed, period_s=120.0, burst_s=40.0, quiet_rate=3.5,
                    busy_rate=18.0, duration_s=duration,
                    lengths=Lengths(lognormal(512, 0.8, 16, 4096), lognormal(160, 0.7, 1, 1024)))


def _spec(**kw):
    base = dict(run_id="r", seed=1, regime="t", horizon_s=300.0, h_min=40, h_max=120)
    base.update(kw)
    return ReplaySpec(**base)


def test_same_seed_identical_parquet_tables(tmp_path):
    tr = _trace()
    for d in ("a", "b"):
        run_one(_spec(run_id="x"), tr, "ewma", tmp_path / d)
    for table in ("requests", "merges", "steps", "signals", "decisions"):
        ta = pq.read_table(tmp_path / "a" / "x" / f"{table}.parquet")
        tb = pq.read_table(tmp_path / "b" / "x" / f"{table}.parquet")
        assert ta.equals(tb), table
    other = sim.replay(_spec(seed=2), tr, get_policy("ewma"))
    same = sim.replay(_spec(), tr, get_policy("ewma"))
    assert not np.array_equal(other.requests["sent_s"], same.requests["sent_s"])


def test_corridor_respected_and_forced_at_h_max():
    tr = _trace()
    never = get_policy("pressure_gate", theta=0.0)      # pressure > 0 whenever busy
    # max_gap_s loose so that h_max binds (max_gap_s forcing: tests/replay/backends/sim/test_engine_corridor.py)
    out = sim.replay(_spec(max_gap_s=1000.0), tr, get_policy("fixed_h", H=10_000))
    steps = out.steps
    m = out.merges
    assert len(m) >= 2
    assert m["forced"].all()
    # every merge starts exactly h_max inner steps after the previous one ended (or t=0)
    starts = np.r_[0.0, m["end_s"].to_numpy()[:-1]]
    for s0, (_, row) in zip(starts, m.iterrows()):
        n = int(((steps["start_s"] >= s0 - 1e-9) & (steps["end_s"] <= row.start_s + 1e-9)).sum())
        assert n == 120
    dec = out.decisions
    assert dec["step"].min() >= 40
    assert (dec.loc[dec.action == "forced", "step"] == 120).all()
    out2 = sim.replay(_spec(), tr, get_policy("fixed_h", H=50))
    assert (out2.decisions.query("action == 'merge'")["step"] == 50).all()
    assert sim.replay(_spec(), tr, never).merges.shape[0] >= 1
    assert sim.replay(_spec(), tr, get_policy("no_sync")).merges.empty


def test_merges_raise_latency_of_overlapping_requests():
    tr = _trace(duration=300.0)
    spec = _spec(min_gap_s=60.0, max_gap_s=120.0)
    base = sim.replay(spec, tr, get_policy("no_sync")).requests
    k = 3
    pol = get_policy("matched_random", k=k)
    spec_mr = _spec(min_gap_s=60.0, max_gap_s=120.0, reference_k=k)
    out = sim.replay(spec_mr, tr, pol)
    assert np.allclose(out.merges["start_s"], pol.planned_starts)
    req = out.requests
    lat = (req.end_s - req.arrival_s).to_numpy()
    lat0 = (base.end_s - base.arrival_s).to_numpy()
    over = np.zeros(len(req), bool)
    for _, m in out.merges.iterrows():
        over |= (req.arrival_s < m.end_s).to_numpy() & (req.end_s > m.start_s).to_numpy()
    assert over.sum() > 20
    ratio = np.median(lat[over] / lat0[over])
    assert ratio > 1.1
    assert np.median(lat[~over & (req.arrival_s > 5).to_numpy()] /
                     lat0[~over & (req.arrival_s > 5).to_numpy()]) < ratio
    host = sim.replay(_spec(min_gap_s=60.0, max_gap_s=120.0, reference_k=k,
                            backend_config={"merge_mechanisms": ["host"]}),
                      tr, get_policy("matched_random", k=k)).requests
    lat_h = (host.end_s - host.arrival_s).to_numpy()
    assert np.median(lat_h[over] / lat0[over]) == pytest.approx(1.0, abs=0.02)


def test_training_slowdown_matches_configuration():
    tr = generate("poisson", seed=0, rate=0.5, duration_s=200.0,
                  lengths=Lengths(lognormal(256, 0.1), lognormal(100, 0.1)))
    on = sim.replay(_spec(horizon_s=200.0), tr, get_policy("no_sync")).requests
    off = sim.replay(_spec(horizon_s=200.0, backend_config={"train_colocated": False}),
                     tr, get_policy("no_sync")).requests
    r = np.median((on.end_s - on.arrival_s) / (off.end_s - off.arrival_s))
    assert r == pytest.approx(1.46, rel=0.03)     # light load: latency scales with slowdown


def test_run_json_keys_and_backend_error_recorded(tmp_path, monkeypatch):
    from evalkit.runlog.io import read_meta
    from evalkit.runlog.schema import REQUIRED_META

    tr = _trace()
    res = run_one(_spec(run_id="ok"), tr, "wa", tmp_path)
    meta = read_meta(res.path)
    assert set(REQUIRED_META) <= set(meta)
    for key in ("trace_realisation", "inner_step_s", "policy_params", "k_observed"):
        assert key in meta
    assert meta["trace"]["sha256"] == tr.sha256 and meta["complete"]
    assert "requested" in meta["settings"] and "effective" in meta["settings"]

    def boom(*a, **k):
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(sim, "replay", boom)
    res2 = run_one(_spec(run_id="bad"), tr, "wa", tmp_path)
    meta2 = read_meta(res2.path)
    assert not meta2["complete"] and "simulated crash" in meta2["error"]
