"""Sidecar-transfer tier on campaigns that hold harness (sim) and real (torch) runs.

Campaign-level transfer evidence: lifetimes and lags, pairing requests by id and arrival
tolerance, the paired estimator and its fallback, contamination."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evalkit.audit import audit_campaign, transfer_evidence as te
from evalkit.stats import transfer as tp
from tests.conftest import REPO
from tests.support.rho_sides import _side
from tests.support.selfreg import selfreg_protocol


CAMPAIGNS = REPO / "fixtures" / "campaigns"


def _audit_as_if_real(name: str):
    """The fixture's torch runs carry what a real sidecar's client writes (metrics scrapes
    joined to the requests, tests/support/fixture_model.py), so the transfer checks judge the
    estimate itself.  About the sidecar_transfer tier's machinery: audited under the protocol
    copy that lets the self-registered fixture pass registration."""
    audit = audit_campaign(CAMPAIGNS / name, protocol=selfreg_protocol())
    real = [c for c in audit.claims if c.regime == "bursty_real"]
    assert real and all(c.name != "real_sidecar" or c.passed
                        for claim in real for c in claim.checks)
    return audit


@pytest.fixture(scope="module")
def transfer():
    return _audit_as_if_real("transfer")


@pytest.fixture(scope="module")
def no_transfer():
    return _audit_as_if_real("no_transfer")


def _checks(claim, tier):
    return {c.name: c for c in claim.checks if c.tier == tier}


def _rho_by_hand(runs_dir, backend):
    """Paired p95 ratio, pooled over the backend's merging runs: requests in flight during a
    merge window (in the run or in its seed's no-sync run) against the same request ids in
    that no-sync run."""
    import json

    runs = {}
    for run in sorted(runs_dir.iterdir()):
        meta = json.loads((run / "run.json").read_text())
        if meta["backend"] == backend and meta["complete"]:
            runs[meta["run_id"]] = (meta, pd.read_parquet(run / "requests.parquet"),
                                    pd.read_parquet(run / "merges.parquet"))
    no_sync = {(m["regime"], m["seed"]): r.set_index("request_id")
               for m, r, _ in runs.values() if m["role"] == "no_sync"}
    mine, ref = [], []
    for meta, req, mer in runs.values():
        if meta["role"] == "no_sync":
            continue
        ns = no_sync[(meta["regime"], meta["seed"])].loc[req.request_id]
        end = np.maximum(req.end_s.to_numpy(), ns.end_s.to_numpy())
        hit = np.zeros(len(req), dtype=bool)
        for s, e in zip(mer.start_s, mer.end_s):
            hit |= (req.arrival_s.to_numpy() < e) & (end > s)
        mine.append((req.end_s - req.arrival_s).to_numpy()[hit])
        ref.append((ns.end_s - ns.arrival_s).to_numpy()[hit])
    return np.quantile(np.concatenate(mine), 0.95) / np.quantile(np.concatenate(ref), 0.95)


# the campaign audits are module fixtures: one worker runs the tests that read them
@pytest.mark.xdist_group("transfer_audits")
def test_transfer_passes_when_real_sidecar_shows_the_effect(transfer):
    for claim in transfer.claims:
        checks = _checks(claim, "sidecar_transfer")
        assert checks["transfer_ci_excludes_one"].passed is True
        assert checks["transfer_paired"].passed is True
    # the transfer tier passes; at 10 seeds x 2 draws overlap explains the gain (calibrated),
    # and the real claim is deployable but for pre-registration (its sidecar evidence and
    # recorded code pass real_sidecar and not_oracle)
    real = transfer.claim("wa", "bursty_real")
    assert real.tier_status["sidecar_transfer"] == "passed"
    assert real.tier == "calibrated" and real.tier_status["calibrated"] == "passed"
    assert [c.name for c in real.failed_checks] == ["pre_registered"]
    sim = transfer.claim("wa", "bursty")
    assert sim.tier == "calibrated" and sim.tier_status["deployable"] == "failed"
    # the sim regime never ran on a real sidecar: not evaluable (missing runs), not failed
    real_sidecar = next(c for c in sim.checks if c.name == "real_sidecar")
    assert real_sidecar.evaluable is False and "campaign_toml" in real_sidecar.values


@pytest.mark.xdist_group("transfer_audits")
def test_transfer_rho_matches_hand_computation(transfer):
    got = transfer.to_dict()["transfer"]["sync"]
    for backend, key in (("sim", "rho_harness"), ("torch", "rho_real")):
        assert got[key] == pytest.approx(_rho_by_hand(CAMPAIGNS / "transfer", backend), rel=1e-6)
    lo, hi = got["rho_real_ci"]
    assert 1.0 < lo <= got["rho_real"] <= hi
    assert got["transfer_fraction"] == pytest.approx(
        (got["rho_real"] - 1) / (got["rho_harness"] - 1), rel=1e-9)


@pytest.mark.xdist_group("transfer_audits")
def test_no_transfer_blocks_the_claim_and_says_why(no_transfer):
    got = no_transfer.to_dict()["transfer"]["sync"]
    lo, hi = got["rho_real_ci"]
    assert lo <= 1.0 <= hi
    assert "did not transfer" in got["verdict"]
    for claim in no_transfer.claims:
        check = _checks(claim, "sidecar_transfer")["transfer_ci_excludes_one"]
        assert check.passed is False and check.evaluable is True
        assert "did not transfer" in check.found
    # the transfer tier blocks every tier above it, and the sim claim keeps only the harness tier
    assert no_transfer.claim("wa", "bursty").tier == "harness"
    assert no_transfer.claim("wa", "bursty_real").tier is None


@pytest.fixture(autouse=True)
def _bootstrap_arithmetic_at_few_seeds(monkeypatch):
    """These tests check the two-stage bootstrap's arithmetic against a brute force at 2-4
    seeds, below the "too few seeds" floor (tested in tests/stats/test_transfer.py)."""
    monkeypatch.setattr(tp, "MIN_SEEDS", 1)


# ------------------------------------------------------------------ campaign transfer evidence


class _RunSet:
    """The part of a RunSet that TransferEvidence reads."""

    def __init__(self, runs, tables, has_logs=True):
        self.runs = pd.DataFrame(runs, columns=["run_id", "regime", "seed", "role", "backend",
                                                "horizon_s"])
        self.tables = tables
        self.has_logs = has_logs

    def table(self, run_id, name):
        return self.tables[(run_id, name)]


WINDOWS = np.array([20.0, 80.0, 140.0, 200.0, 260.0])


def _requests(ids, arrival, latency, tokens=None):
    return pd.DataFrame({"request_id": ids, "arrival_s": arrival, "end_s": arrival + latency,
                         "ok": True, "output_tokens": 50.0 if tokens is None else tokens})


def _runset_runs(seed, mult=(2.0, 1.4), no_sync=True, seeds=(0, 1), horizon=300.0):
    """Policy runs with their no-sync runs for a harness (sim) and a real (vllm) backend."""
    rng = np.random.default_rng(seed)
    runs, tables = [], {}
    for backend, m in zip(("sim", "vllm"), mult):
        for s in seeds:
            n = 200
            arrival = np.sort(rng.uniform(0, horizon - 10, n))
            ids = [f"q{i}" for i in range(n)]
            base = rng.lognormal(np.log(0.5), 0.4, n)
            tokens = np.round(base * 100)
            lat = base * rng.lognormal(0, 0.1, n)
            hit = te.overlaps_windows(arrival, arrival + lat, WINDOWS, WINDOWS + 8.0)
            pid = f"{backend}-p{s}"
            regime = "A" if backend == "sim" else "B"        # a regime runs on one backend
            runs.append((pid, regime, s, "policy", backend, horizon))
            tables[(pid, "requests")] = _requests(ids, arrival, np.where(hit, lat * m, lat),
                                                  tokens)
            tables[(pid, "merges")] = pd.DataFrame({"start_s": WINDOWS, "end_s": WINDOWS + 8.0})
            if no_sync:
                nid = f"{backend}-n{s}"
                runs.append((nid, regime, s, "no_sync", backend, horizon))
                order = np.arange(n)[::-1]              # another row order than the policy run
                tables[(nid, "requests")] = _requests([ids[i] for i in order], arrival[order],
                                                      base[order], tokens[order])
                tables[(nid, "merges")] = pd.DataFrame({"start_s": [], "end_s": []})
    return runs, tables


SPEC = {"mechanism": "sync", "harness_backends": ["sim"], "real_backends": ["vllm"]}


def test_lifetimes_and_lags():
    req = pd.DataFrame({"arrival_s": [1.0, 2.0, 3.0, 4.0], "end_s": [1.5, np.nan, 4.0, 9.0],
                        "ok": [True, True, False, True]})
    arrival, end, latency = te._lifetimes(req, 20.0)
    assert end.tolist() == [1.5, 20.0, 4.0, 9.0]
    assert latency.tolist() == [0.5, np.inf, np.inf, 5.0]
    late = pd.DataFrame({"arrival_s": [0.1, 30.0], "end_s": [np.nan, np.nan], "ok": False})
    assert te._lifetimes(late, 20.0)[1].tolist() == [30.0, 30.0]    # past the horizon
    tiny = pd.DataFrame({"arrival_s": [0.1, 0.2], "end_s": [np.nan, 0.3], "ok": [False, True]})
    assert te._lifetimes(tiny, 0.5)[1].tolist() == [0.5, 0.3]
    ws, we = np.array([10.0, 40.0]), np.array([18.0, 48.0])
    lag = te._lag(np.array([5.0, 18.0, 20.0, 45.0, 48.0, 50.0]), ws, we)
    assert np.isnan(lag[0])
    assert lag[1:].tolist() == [0.0, 2.0, 27.0, 0.0, 2.0]


def test_side_pairs_every_request_by_id_whatever_the_row_order():
    runs, tables = _runset_runs(1)
    ev = te.TransferEvidence(_RunSet(runs, tables))
    paired, fallback, notes = ev._side(["sim"])
    assert notes == []
    assert len(paired) == len(fallback) == 400
    assert sorted(paired.run.unique()) == ["sim-p0", "sim-p1"]
    assert sorted(paired.group.unique()) == ["A/0", "A/1"]
    for pid, nid in (("sim-p0", "sim-n0"), ("sim-p1", "sim-n1")):
        req, ns = tables[(pid, "requests")], tables[(nid, "requests")]
        rows = paired[paired.run == pid]
        ref = ns.set_index("request_id").loc[req.request_id]
        np.testing.assert_array_equal(rows.t_s, req.arrival_s)
        np.testing.assert_allclose(rows.latency_s, req.end_s - req.arrival_s)
        np.testing.assert_allclose(rows.latency_ref_s, ref.end_s - ref.arrival_s)
        # in window when either lifetime overlaps a window
        end = np.maximum(req.end_s.to_numpy(), ref.end_s.to_numpy())
        act = te.overlaps_windows(req.arrival_s, end, WINDOWS, WINDOWS + 8.0)
        np.testing.assert_array_equal(rows.active, act)
        own = te.overlaps_windows(req.arrival_s, req.end_s, WINDOWS, WINDOWS + 8.0)
        frows = fallback[fallback.run == pid]
        np.testing.assert_array_equal(frows.active, own)
        np.testing.assert_array_equal(frows.output_tokens, req.output_tokens)
        lag = te._lag(req.arrival_s.to_numpy(), WINDOWS, WINDOWS + 8.0)
        np.testing.assert_array_equal(rows.lag_s, np.where(act, np.nan, lag))
        np.testing.assert_array_equal(frows.lag_s, np.where(own, np.nan, lag))


def test_side_arrival_tolerance_and_matched_share():
    runs, tables = _runset_runs(2, seeds=(0,))
    ns = tables[("sim-n0", "requests")].copy()
    pol = tables[("sim-p0", "requests")].copy()
    pol.loc[0, "arrival_s"] = 0.0
    pol.loc[0, "end_s"] = 0.5
    ns_row = ns.request_id == pol.request_id[0]
    ns.loc[ns_row, "arrival_s"] = 0.001           # exactly the tolerance: still a pair
    ns.loc[ns_row, "end_s"] = 0.401
    tables[("sim-p0", "requests")] = pol
    tables[("sim-n0", "requests")] = ns
    ev = te.TransferEvidence(_RunSet(runs, tables))
    paired, _, notes = ev._side(["sim"])
    assert len(paired) == 200 and notes == []
    assert paired.latency_ref_s[0] == pytest.approx(0.4)
    # 20 of 200 requests 1.5 ms off: 90% matched, still paired on the other 180
    off = ns.copy()
    moved = off.request_id.isin(pol.request_id[1:21])
    off.loc[moved, "arrival_s"] += 0.0015
    tables[("sim-n0", "requests")] = off
    paired, _, notes = te.TransferEvidence(_RunSet(runs, tables))._side(["sim"])
    assert len(paired) == 180 and notes == []
    assert not paired.t_s.isin(pol.arrival_s[1:21]).any()
    # one more: below 90%, the run is not paired
    off.loc[off.request_id == pol.request_id[21], "arrival_s"] += 0.0015
    paired, fallback, notes = te.TransferEvidence(_RunSet(runs, tables))._side(["sim"])
    assert paired.empty and len(fallback) == 200
    assert notes == ["sim: 1 merging run(s) without a usable no-sync pair: sim-p0 (only 90% of "
                     "its requests match sim-n0 by request_id and arrival)"]


def test_side_request_missing_from_no_sync_and_duplicated_ids():
    runs, tables = _runset_runs(3, seeds=(0,))
    ns = tables[("sim-n0", "requests")]
    tables[("sim-n0", "requests")] = ns.iloc[1:]          # the last policy request is missing
    paired, _, notes = te.TransferEvidence(_RunSet(runs, tables))._side(["sim"])
    assert len(paired) == 199 and notes == []
    dup = ns.copy()
    dup.loc[dup.index[5], "request_id"] = dup.request_id.iloc[6]
    tables[("sim-n0", "requests")] = dup
    paired, _, notes = te.TransferEvidence(_RunSet(runs, tables))._side(["sim"])
    assert paired.empty and "only 0% of its requests match sim-n0" in notes[0]


def test_side_needs_a_single_no_sync_run_per_regime_and_seed():
    runs, tables = _runset_runs(4)
    runs.append(("sim-n0b", "A", 0, "no_sync", "sim", 300.0))
    tables[("sim-n0b", "requests")] = tables[("sim-n0", "requests")]
    paired, fallback, notes = te.TransferEvidence(_RunSet(runs, tables))._side(["sim"])
    assert sorted(paired.run.unique()) == ["sim-p1"] and len(fallback) == 400
    assert notes == ["sim: 1 merging run(s) without a usable no-sync pair: sim-p0 (no single "
                     "no-sync run for regime A, seed 0)"]


def test_side_notes_list_five_runs_then_an_ellipsis():
    def runset(k):
        runs, tables = _runset_runs(5, no_sync=False, seeds=tuple(range(k)))
        return te.TransferEvidence(_RunSet(runs, tables))

    _, fallback, notes = runset(5)._side(["sim"])
    assert len(fallback) == 1000 and len(notes) == 1
    assert notes[0].startswith("sim: 5 merging run(s) without a usable no-sync pair: sim-p0 ")
    assert notes[0].endswith("(no single no-sync run for regime A, seed 4)")
    _, _, notes = runset(6)._side(["sim"])
    assert notes[0].startswith("sim: 6 merging run(s)") and notes[0].endswith("seed 4) ...")
    assert "sim-p5" not in notes[0]


def test_evidence_defaults_and_not_evaluable_reasons():
    runs, tables = _runset_runs(6, seeds=(0,))
    ev = te.TransferEvidence(_RunSet(runs, tables))
    assert (ev.seed, ev.n_boot) == (0, 2000)
    assert (te.ARRIVAL_TOL_S, te.MIN_MATCHED_SHARE) == (1e-3, 0.9)
    no_logs = te.TransferEvidence(_RunSet(runs, tables, has_logs=False))
    assert no_logs.get(SPEC) == "not evaluable: a summary table has no request logs"
    sim_only = [r for r in runs if r[4] == "sim"]
    assert te.TransferEvidence(_RunSet(sim_only, tables)).get(SPEC) == (
        "not evaluable: needs both harness (sim) and real (vllm) runs; campaign has sim")
    vllm_only = [r for r in runs if r[4] == "vllm"]
    assert te.TransferEvidence(_RunSet(vllm_only, tables)).get(SPEC).endswith(
        "campaign has vllm")
    assert te.TransferEvidence(_RunSet([], tables)).get(SPEC).endswith("campaign has none")
    only_no_sync = [r for r in runs if r[4] == "sim" or r[3] == "no_sync"]
    assert te.TransferEvidence(_RunSet(only_no_sync, tables)).get(SPEC) == (
        "not evaluable: no merging runs on one side")
    harness_no_sync = [r for r in runs if r[4] == "vllm" or r[3] == "no_sync"]
    assert te.TransferEvidence(_RunSet(harness_no_sync, tables)).get(SPEC) == (
        "not evaluable: no merging runs on one side")


def test_evidence_paired_with_the_default_parameters():
    runs, tables = _runset_runs(7)
    ev = te.TransferEvidence(_RunSet(runs, tables), seed=3, n_boot=100)
    got = ev.get(SPEC)
    assert ev.get(dict(SPEC)) is got                       # computed once per spec
    h, _, _ = ev._side(["sim"])
    r, _, _ = ev._side(["vllm"])
    ref = tp.paired_transfer(h, r, mechanism="sync", block_s=30.0, n_boot=100,
                             rng=np.random.default_rng([3, 2]), bin_s=5.0, max_lag_s=60.0)
    assert got["method"] == tp.PAIRED and got["guard_band_measured"] is True
    assert got["rho_harness"] == ref.harness.rho and got["rho_real"] == ref.real.rho
    assert got["rho_real_ci"] == [ref.real.ci_low, ref.real.ci_high]
    assert got["rho_harness_ci"] == [ref.harness.ci_low, ref.harness.ci_high]
    assert got["transfer_fraction"] == ref.transfer_fraction
    assert got["transfer_fraction_ci"] == [ref.transfer_ci_low, ref.transfer_ci_high]
    assert got["gm_ratio_real_ci"] == [ref.real.gm_ci_low, ref.real.gm_ci_high]
    assert got["transfer_fraction_gm_ci"] == [ref.transfer_gm_ci_low, ref.transfer_gm_ci_high]
    assert got["drain_curve"]["real"] == [b.to_dict() for b in ref.real.drain_curve]
    assert len(got["drain_curve"]["harness"]) == 12
    assert got["guard_band_s"] == {"harness": ref.harness.guard_band_s,
                                   "real": ref.real.guard_band_s}
    assert got["harness"]["n_active"] == ref.harness.n_active
    assert got["real"]["n_seeds"] == 2 and got["real"]["n_runs"] == 2
    assert got["contaminated"] == bool(ref.harness.post_window_effect
                                       or ref.real.post_window_effect)
    assert got["notes"] == [] and got["transferred"] == ref.transferred
    assert got["verdict"] == ref.verdict and got["ci_method"] == ref.real.ci_method
    # not all requests are in a window, and the estimate is still paired
    assert not h.active.all() and h.active.any()
    other = ev.get({**SPEC, "block_s": 20.0, "drain_bin_s": 10.0, "drain_max_lag_s": 30.0})
    assert len(other["drain_curve"]["real"]) == 3 and other is not got


def test_evidence_falls_back_when_one_side_has_no_pairs():
    runs, tables = _runset_runs(8)
    runs = [r for r in runs if not (r[4] == "vllm" and r[3] == "no_sync")]
    ev = te.TransferEvidence(_RunSet(runs, tables), n_boot=100)
    got = ev.get(SPEC)
    _, hf, _ = ev._side(["sim"])
    _, rf, notes = ev._side(["vllm"])
    ref = tp.guard_band_transfer(hf, rf, 30.0, 10, mechanism="sync", block_s=30.0, n_boot=100,
                                 rng=np.random.default_rng([0, 2]))
    assert got["method"] == tp.FALLBACK and got["guard_band_measured"] is False
    assert got["contaminated"] is None
    assert got["rho_real"] == ref.real.rho and got["rho_real_ci"] == [ref.real.ci_low,
                                                                     ref.real.ci_high]
    assert got["guard_band_s"] == {"harness": 30.0, "real": 30.0}
    assert len(got["notes"]) == 2 and got["notes"][0] == notes[0]
    assert got["notes"][1].startswith("weaker: no side-wide no-sync pairing")
    assert "([30.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0] s" in got["notes"][1]
    custom = ev.get({**SPEC, "fallback_guard_band_s": 10.0, "fallback_length_strata": 2})
    assert custom["guard_band_s"]["real"] == 10.0
    assert "([10.0, 10.0] s by output-length stratum)" in custom["notes"][1]
    # harness side unpaired instead: fallback too, its note first
    runs2, tables2 = _runset_runs(8)
    runs2 = [r for r in runs2 if not (r[4] == "sim" and r[3] == "no_sync")]
    got2 = te.TransferEvidence(_RunSet(runs2, tables2), n_boot=100).get(SPEC)
    assert got2["method"] == tp.FALLBACK and got2["notes"][0].startswith("sim: 2 merging")


def test_evidence_falls_back_when_no_paired_request_is_in_a_window():
    runs, tables = _runset_runs(9)
    for backend in ("sim", "vllm"):
        for s in (0, 1):
            tables[(f"{backend}-p{s}", "merges")] = pd.DataFrame({"start_s": [400.0],
                                                                 "end_s": [408.0]})
    for quiet in ("sim", "vllm"):
        t2 = dict(tables)
        other = "vllm" if quiet == "sim" else "sim"
        for s in (0, 1):
            t2[(f"{other}-p{s}", "merges")] = pd.DataFrame({"start_s": WINDOWS,
                                                           "end_s": WINDOWS + 8.0})
        ev = te.TransferEvidence(_RunSet(runs, t2), n_boot=100)
        paired, _, _ = ev._side([quiet])
        assert len(paired) == 400 and not paired.active.any()
        # no in-window request for the fallback either: a reason, not an exception
        assert ev.get(SPEC) == (f"not evaluable: {'harness' if quiet == 'sim' else 'real'}"
                                "_requests: no requests in merge windows")


def test_evidence_contaminated_when_either_side_has_a_post_window_effect(monkeypatch):
    runs, tables = _runset_runs(10)
    h = _side(rho=2.0)
    for h_eff, r_eff, expected in ((True, False, True), (False, True, True),
                                   (False, False, False)):
        hs = tp.RhoSide(**{**{f: getattr(h, f) for f in h.__dataclass_fields__},
                           "post_window_effect": h_eff})
        rs = tp.RhoSide(**{**{f: getattr(h, f) for f in h.__dataclass_fields__},
                           "post_window_effect": r_eff, "rho": 1.5})
        monkeypatch.setattr(te, "paired_transfer",
                            lambda *a, _h=hs, _r=rs, **k: tp.compare_sides(_h, _r))
        got = te.TransferEvidence(_RunSet(runs, tables), n_boot=100).get(SPEC)
        assert got["contaminated"] is expected
        assert got["harness"]["post_window_effect"] is h_eff
        assert got["real"]["post_window_effect"] is r_eff
        assert got["transfer_fraction"] == pytest.approx(0.5)


def test_side_in_window_when_either_lifetime_overlaps():
    """Policy request done before the window, its no-sync twin still in flight (and the
    reverse): both are in window, a symmetric rule."""
    runs, tables = _runset_runs(11, seeds=(0,))
    pol = tables[("sim-p0", "requests")].copy()
    ns = tables[("sim-n0", "requests")].copy()
    ids = pol.request_id[:2].tolist()
    pol.loc[:1, "arrival_s"] = [19.0, 79.0]
    pol.loc[:1, "end_s"] = [19.5, 81.0]            # the second overlaps [80, 88]
    ns_rows = ns.request_id.isin(ids)
    ns.loc[ns_rows, "arrival_s"] = ns.loc[ns_rows, "request_id"].map({ids[0]: 19.0,
                                                                    ids[1]: 79.0})
    ns.loc[ns_rows, "end_s"] = ns.loc[ns_rows, "request_id"].map({ids[0]: 21.0, ids[1]: 79.5})
    tables[("sim-p0", "requests")] = pol
    tables[("sim-n0", "requests")] = ns
    paired, fallback, _ = te.TransferEvidence(_RunSet(runs, tables))._side(["sim"])
    assert paired.active[:2].tolist() == [True, True]
    assert np.isnan(paired.lag_s[:2]).all()
    assert fallback.active[:2].tolist() == [False, True]     # own lifetime only
    assert np.isnan(fallback.lag_s[0])                        # no window has ended yet
