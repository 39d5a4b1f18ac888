"""Sidecar-transfer tier with the paired estimator: the three traps of the naive in/out split.

Harness (sim) and real (torch) regimes side by side (``tests/support/campaign_model.py``); the
harness has a +4 s in-window penalty, the real side the ground truth each test chooses.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from evalkit.audit import audit_campaign
from tests.support import campaign_model as cm

SEEDS = range(5)
ONE_POLICY = {"wa": ("good", None)}


@pytest.fixture(scope="module")
def harness_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("harness") / "runs"
    cm.regime(out, name="bursty", backend="sim", seeds=SEEDS, policies=ONE_POLICY, draws=1)
    return out


def _campaign(harness_dir, tmp_path_factory, name, **real):
    out = tmp_path_factory.mktemp(name) / "runs"
    shutil.copytree(harness_dir, out)
    cm.regime(out, name="bursty_real", backend="torch", seeds=SEEDS, policies=ONE_POLICY,
              draws=1, prefix="real-", **real)
    return out, audit_campaign(out, max_tier="sidecar_transfer")


def _check(audit, name):
    claim = audit.claim("wa", "bursty_real")
    return next(c for c in claim.checks if c.name == name)


def _load(runs_dir, backend):
    """{run_id: (meta, requests, merges)} of the backend's runs."""
    out = {}
    for run in sorted(runs_dir.iterdir()):
        meta = json.loads((run / "run.json").read_text())
        if meta["backend"] == backend:
            out[meta["run_id"]] = (meta, pd.read_parquet(run / "requests.parquet"),
                                   pd.read_parquet(run / "merges.parquet"))
    return out


def _overlaps(lo, hi, starts, ends):
    hit = np.zeros(lo.size, dtype=bool)
    for s, e in zip(starts, ends):
        hit |= (lo < e) & (hi > s)
    return hit


def _naive_and_paired(runs_dir, backend):
    """By hand: the naive p95(in window)/p95(outside) over the merging runs, and the paired
    p95 ratio against the same request ids in the seed's no-sync run."""
    runs = _load(runs_dir, backend)
    no_sync = {(m["regime"], m["seed"]): r for m, r, _ in runs.values() if m["role"] == "no_sync"}
    act, out, mine, ref = [], [], [], []
    for meta, req, mer in runs.values():
        if meta["role"] == "no_sync":
            continue
        lat = (req.end_s - req.arrival_s).to_numpy()
        own = _overlaps(req.arrival_s.to_numpy(), req.end_s.to_numpy(), mer.start_s, mer.end_s)
        act.append(lat[own])
        out.append(lat[~own])
        ns = no_sync[(meta["regime"], meta["seed"])].set_index("request_id").loc[req.request_id]
        end_either = np.maximum(req.end_s.to_numpy(), ns.end_s.to_numpy())
        both = _overlaps(req.arrival_s.to_numpy(), end_either, mer.start_s, mer.end_s)
        mine.append(lat[both])
        ref.append((ns.end_s - ns.arrival_s).to_numpy()[both])
    q = lambda parts: np.quantile(np.concatenate(parts), 0.95)  # noqa: E731
    return q(act) / q(out), q(mine) / q(ref)


def test_length_bias_without_effect_does_not_transfer(harness_dir, tmp_path_factory):
    """Heavy-tailed latencies, merges with no effect at all: the naive split shows rho ~ 1.5+
    (long requests overlap windows more often); the paired rho stays at 1."""
    runs, audit = _campaign(harness_dir, tmp_path_factory, "length_bias", kind="heavy",
                            penalty=0.0)
    naive, paired = _naive_and_paired(runs, "torch")
    assert naive > 1.4                          # the trap is in the data
    got = audit.to_dict()["transfer"]["sync"]
    assert got["method"] == "paired vs no-sync"
    assert got["rho_real"] == pytest.approx(paired, rel=1e-9)
    lo, hi = got["rho_real_ci"]
    assert lo <= 1.0 <= hi and "did not transfer" in got["verdict"]
    check = _check(audit, "transfer_ci_excludes_one")
    assert check.passed is False and "did not transfer" in check.found
    assert audit.claim("wa", "bursty_real").tier_status["sidecar_transfer"] == "failed"


def test_backlog_magnitude_and_guard_band(harness_dir, tmp_path_factory):
    """Same +4 s in window plus a backlog on arrivals up to 10 s after it: the naive split
    nearly hides the effect; paired, the real rho matches the harness and the drain curve
    returns to 1 at 10 s."""
    runs, audit = _campaign(harness_dir, tmp_path_factory, "backlog", backlog_s=10.0,
                            backlog_add=4.0)
    naive_real, _ = _naive_and_paired(runs, "torch")
    naive_harness, _ = _naive_and_paired(runs, "sim")
    assert (naive_real - 1) / (naive_harness - 1) < 0.5       # the trap: "fraction" collapses
    got = audit.to_dict()["transfer"]["sync"]
    f_lo, f_hi = got["transfer_fraction_ci"]
    assert 0.8 < got["transfer_fraction"] < 1.25 and f_lo <= 1.0 <= f_hi
    assert got["guard_band_s"] == {"harness": 0.0, "real": 10.0}
    curve = got["drain_curve"]["real"]
    assert [b["lag_lo"] for b in curve[:3]] == [0.0, 5.0, 10.0]
    assert set(curve[0]) >= {"lag_lo", "lag_hi", "n", "ratio", "ci_low", "ci_high"}
    assert curve[0]["ci_low"] > curve[1]["ci_low"] > 1.0 and curve[2]["ci_low"] <= 1.0
    assert _check(audit, "transfer_ci_excludes_one").passed is True
    paired = _check(audit, "transfer_paired")
    assert paired.passed is True and "returns to 1 after 10 s" in paired.found
    assert audit.claim("wa", "bursty_real").tier_status["sidecar_transfer"] == "passed"


def test_long_requests_in_window_only_is_no_false_alarm(harness_dir, tmp_path_factory):
    """An in-window-only effect with long requests (median 8 s): many "inactive" requests
    start within a median latency after a window (the old contamination rule flagged it),
    yet nothing happens after windows: the drain curve is 1 from lag 0, the tier passes."""
    runs, audit = _campaign(harness_dir, tmp_path_factory, "long_requests", kind="long")
    stressed = []
    for meta, req, mer in _load(runs, "torch").values():
        if meta["role"] == "no_sync":
            continue
        own = _overlaps(req.arrival_s.to_numpy(), req.end_s.to_numpy(), mer.start_s, mer.end_s)
        lat = (req.end_s - req.arrival_s).to_numpy()
        tail = _overlaps(req.arrival_s.to_numpy(), req.end_s.to_numpy(), mer.end_s,
                         mer.end_s + np.median(lat[~own]))
        stressed.append(tail[~own])
    assert np.concatenate(stressed).mean() > 0.05          # old rule: "contaminated"
    got = audit.to_dict()["transfer"]["sync"]
    assert got["guard_band_s"]["real"] == 0.0
    assert got["drain_curve"]["real"][0]["ci_low"] <= 1.0
    assert _check(audit, "transfer_paired").passed is True
    assert _check(audit, "transfer_ci_excludes_one").passed is True
    assert audit.claim("wa", "bursty_real").tier_status["sidecar_transfer"] == "passed"


def test_without_no_sync_falls_back_and_is_weaker(harness_dir, tmp_path_factory):
    _, audit = _campaign(harness_dir, tmp_path_factory, "fallback", no_sync=False)
    got = audit.to_dict()["transfer"]["sync"]
    assert got["method"] == "guard-band fallback (weaker)" and "weaker" in got["verdict"]
    assert got["drain_curve"] == {"harness": [], "real": []}
    assert got["guard_band_measured"] is False and got["guard_band_s"]["real"] == 30.0
    check = _check(audit, "transfer_paired")
    assert check.evaluable is False and check.blocking and "weaker" in check.found
    assert audit.claim("wa", "bursty_real").tier_status["sidecar_transfer"] == "failed"
