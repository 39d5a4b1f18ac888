"""What only a real sidecar writes (evalkit/audit/checks/deployable.py:sidecar_evidence): its
metrics scrapes joined to the client's requests; the backend string in run.json is no
evidence, neither for the deployable tier nor for the transfer estimate."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from evalkit.audit.checks import transfer as T
from evalkit.audit.checks.deployable import real_sidecar, server_timing_faults, sidecar_evidence
from evalkit.audit.runset import SeedPair, load_runset

from tests.conftest import REPO
from tests.support.decision_stubs import claim, ctx, spec

REAL = REPO / "examples" / "cpu_real" / "runs"
REAL_RUN = "cpu_real__ewma__s0"


def _copy(tmp_path, run=REAL_RUN):
    dest = tmp_path / "runs" / run
    shutil.copytree(REAL / run, dest)
    return dest


def _edit_meta(run_dir, edit):
    meta = json.loads((run_dir / "run.json").read_text())
    edit(meta)
    (run_dir / "run.json").write_text(json.dumps(meta))


def _edit_signals(run_dir, edit):
    sig = pd.read_parquet(run_dir / "signals.parquet")
    sig = edit(sig)
    sig.to_parquet(run_dir / "signals.parquet", index=False)


def _evidence(run_dir):
    runs = load_runset(run_dir.parent)
    return sidecar_evidence(runs, run_dir.name)


def test_every_recorded_real_sidecar_run_carries_the_evidence():
    runs = load_runset(REAL)
    assert [r for r in runs.run_ids if sidecar_evidence(runs, r) is not None] == []


def test_a_simulator_run_labelled_torch_has_none(tmp_path):
    """The attack: a simulator run whose run.json says backend "torch"."""
    sim = next(p for p in sorted((REPO / "fixtures" / "campaigns" / "sim_bursty").iterdir())
               if (p / "run.json").exists())
    dest = tmp_path / "runs" / sim.name
    shutil.copytree(sim, dest)
    _edit_meta(dest, lambda m: m.update(backend="torch"))
    assert "no signals.parquet" in _evidence(dest)


def _set(column, value):
    def edit(sig):
        sig[column] = value
        return sig
    return edit


@pytest.mark.parametrize("edit, said", [
    (lambda sig: sig.drop(columns=["arrivals_seen"]), "has no arrivals_seen"),
    (_set("scrape_ok", False), "no successful metrics scrape"),
    (lambda sig: sig.assign(arrivals_seen=sig.arrivals_seen + 5), "do not join the client"),
    (lambda sig: sig.assign(queue_waiting=sig.queue_waiting + 500), "more requests running"),
    (lambda sig: sig.iloc[:-3], "run.json says 200 scrapes"),
])
def test_forged_or_partial_scrapes_do_not_join(tmp_path, edit, said):
    dest = _copy(tmp_path)
    _edit_signals(dest, edit)
    assert said in _evidence(dest)


def test_the_transfer_estimate_refuses_real_labelled_runs_without_evidence(tmp_path):
    """The transfer fixture's torch runs with their scrapes removed are labelled torch without
    evidence: once the estimate exists the transfer checks fail them; a campaign without both
    sides stays not evaluable (the tier is skipped, real_sidecar judges the label); recorded
    real runs, and the fixture's runs with their scrapes, pass through."""
    source = REPO / "fixtures" / "campaigns" / "transfer"
    sp = spec(real_backends=["torch", "vllm"], mechanism="sync")
    assert T.unshown_real_runs(SimpleNamespace(runset=load_runset(source)), sp) is None
    shutil.copytree(source, tmp_path / "transfer")
    removed = [p.unlink() or p for p in sorted((tmp_path / "transfer").glob("*/signals.parquet"))]
    assert removed
    fixture = load_runset(tmp_path / "transfer")
    out = T.unshown_real_runs(SimpleNamespace(runset=fixture), sp)
    assert out.passed is False and "labelled torch/vllm without it" in out.found
    n_real = int(fixture.runs.backend.isin(["torch", "vllm"]).sum())
    assert n_real > 3 and out.found.startswith(f"{n_real} run(s) labelled torch/vllm")
    assert out.found.count("no signals.parquet") == 3          # three named, the rest counted
    assert out.found.endswith(f"(+{n_real - 3} more)")
    real = SimpleNamespace(runset=load_runset(REAL))
    assert T.unshown_real_runs(real, sp) is None
    estimated = SimpleNamespace(runset=fixture, transfer=lambda s: {"estimate": "made"})
    one_side = SimpleNamespace(runset=fixture, transfer=lambda s: "not evaluable: one side")
    for check in (T.transfer_ci_excludes_one, T.transfer_paired):
        out = check(estimated, sp)
        assert out.passed is False and "without it" in out.found
        assert check(one_side, sp).evaluable is False


# ------------------------------------------------------------------ the server's own timings

def _timing(run_dir, allowance_s=0.05, min_share=0.99):
    runs = load_runset(run_dir.parent)
    return server_timing_faults(runs, run_dir.name, allowance_s, min_share)


def _with_server_times(run_dir, total):
    """The recorded real run as this client writes it now: the server's phases per request,
    ``total(requests)`` its end-to-end time."""
    req = pd.read_parquet(run_dir / "requests.parquet")
    req["server_queue_s"] = 0.0
    req["server_prefill_s"] = req.first_token_s - req.sent_s
    req["server_decode_s"] = req.end_s - req.first_token_s
    req["server_total_s"] = total(req)
    req.to_parquet(run_dir / "requests.parquet", index=False)


def test_server_times_inside_the_clients_latency_hold(tmp_path):
    dest = _copy(tmp_path)
    _with_server_times(dest, lambda req: req.end_s - req.sent_s - 0.01)
    assert _timing(dest) == (None, None)


def test_a_run_recorded_before_server_timings_is_not_evaluable_not_passed(tmp_path):
    """examples/cpu_real's runs predate the columns: a state of their own, not a pass."""
    fault, unrecorded = _timing(_copy(tmp_path))
    assert fault is None and "recorded before server timings" in unrecorded


def test_a_torch_labelled_run_without_server_times_fails(tmp_path):
    """The attack: columns present (the client's format) but no server answered them."""
    dest = _copy(tmp_path)
    _with_server_times(dest, lambda req: float("nan"))
    fault, _ = _timing(dest)
    assert "0.0% of" in fault and "without one" in fault and REAL_RUN in fault


def test_server_times_longer_than_the_clients_latency_fail(tmp_path):
    """The attack: server times made up beyond what the client saw (a simulator's own clock)."""
    dest = _copy(tmp_path)
    _with_server_times(dest, lambda req: req.end_s - req.sent_s + 0.2)
    fault, _ = _timing(dest)
    assert "0.0% of" in fault and "latency + 0.05 s" in fault
    # one request in a hundred over the allowance is tolerated, two are not
    n = len(pd.read_parquet(dest / "requests.parquet"))
    _with_server_times(dest, lambda req: (req.end_s - req.sent_s).where(
        req.index >= max(1, n // 100), req.end_s - req.sent_s + 0.2))
    assert _timing(dest, min_share=1 - max(1, n // 100) / n)[0] is None
    assert _timing(dest, min_share=1.0)[0] is not None


def test_a_partial_set_of_server_columns_fails(tmp_path):
    dest = _copy(tmp_path)
    _with_server_times(dest, lambda req: req.end_s - req.sent_s)
    req = pd.read_parquet(dest / "requests.parquet").drop(columns=["server_decode_s"])
    req.to_parquet(dest / "requests.parquet", index=False)
    assert "without server_decode_s" in _timing(dest)[0]



# ------------------------------------------------ the thresholds, at their boundary

def _over_allowance(count):
    """Server times inside the client's latency except for the first ``count`` requests,
    which exceed it by more than the allowance."""
    def total(req):
        client = req.end_s - req.sent_s
        return client.where(req.index >= count, client + 0.2)
    return total


def test_a_share_exactly_at_the_minimum_passes_one_request_fewer_fails(tmp_path):
    dest = _copy(tmp_path)
    n = len(pd.read_parquet(dest / "requests.parquet"))
    min_share = (n - 3) / n
    _with_server_times(dest, _over_allowance(3))
    assert _timing(dest, min_share=min_share) == (None, None)
    _with_server_times(dest, _over_allowance(4))
    fault, _ = _timing(dest, min_share=min_share)
    assert fault is not None and f"{(n - 4) / n:.1%} of {n} completed requests" in fault


def test_a_server_time_exactly_at_latency_plus_allowance_passes_just_above_fails(tmp_path):
    dest = _copy(tmp_path)
    _with_server_times(dest, lambda req: req.end_s - req.sent_s + 0.05)
    assert _timing(dest, allowance_s=0.05, min_share=1.0) == (None, None)
    _with_server_times(dest, lambda req: (req.end_s - req.sent_s + 0.05).where(
        req.index > 0, np.nextafter(req.end_s - req.sent_s + 0.05, np.inf)))
    fault, _ = _timing(dest, allowance_s=0.05, min_share=1.0)
    assert fault is not None and "latency + 0.05 s" in fault


def _seed_claim_ctx(root, runs):
    """A claim context over the recorded real runs of seed 0 under ``root``."""
    policy, draw, no_sync = runs
    seed = SeedPair(seed=0, policy_run=policy, v_policy=0.1, k_policy=3.0, realisation=None,
                    draws=pd.DataFrame({"run_id": [draw], "draw": [0], "k_observed": [3.0],
                                        "violation_rate": [0.2], "seed": [0]}),
                    no_sync=pd.Series({"run_id": no_sync, "violation_rate": 0.05}))
    return ctx(claim=claim([seed]), runset=load_runset(root))


# seed 0's policy run, one draw and its no-sync run
SEED0 = (REAL_RUN, "cpu_real__mr-ewma__s0__d0", "cpu_real__no_sync__s0")
TIMING = spec("real_sidecar", real_backends=["torch", "vllm"], server_time_allowance_s=0.05,
              server_time_min_share=0.99)


def test_runs_recorded_before_the_server_columns_leave_the_check_not_evaluable(tmp_path):
    """The recorded real runs carry scrapes but predate the server_*_s columns: the check
    says not evaluable, it does not pass them."""
    for run in SEED0:
        _copy(tmp_path, run)
    out = real_sidecar(_seed_claim_ctx(tmp_path / "runs", SEED0), TIMING)
    assert out.evaluable is False and out.passed is None
    assert "recorded before server timings" in out.found
    for run in SEED0:                        # the same runs with server times inside latency
        _with_server_times(tmp_path / "runs" / run, lambda req: req.end_s - req.sent_s)
    assert real_sidecar(_seed_claim_ctx(tmp_path / "runs", SEED0), TIMING).passed is True


# ------------------------------------------- vLLM: the server's aggregate view of the run

def _with_view(run_dir, **view):
    _edit_meta(run_dir, lambda m: m["settings"]["effective"].update(
        server_view={"available": True, "source": "vllm /metrics", "rig_requests": 0,
                     "rig_latency_bound_s": 0.0, **view}))


def _client(run_dir):
    """The run's completed requests and the client's summed latency, as the check sums it."""
    req = pd.read_parquet(run_dir / "requests.parquet")
    latency = (req.end_s.to_numpy(dtype=float, na_value=np.nan)
               - req.sent_s.to_numpy(dtype=float, na_value=np.nan))
    return int(req.ok.sum()), float(np.nansum(latency))


def test_a_vllm_view_that_counts_the_runs_requests_within_its_latency_holds(tmp_path):
    dest = _copy(tmp_path)
    n, client_s = _client(dest)
    _with_view(dest, requests=n, e2e_sum_s=client_s - 1.0)
    assert _timing(dest) == (None, None)


def test_a_vllm_view_counting_other_than_the_completed_requests_fails(tmp_path):
    dest = _copy(tmp_path)
    n, client_s = _client(dest)
    for counted in (n - 1, n + 1):
        _with_view(dest, requests=counted, e2e_sum_s=client_s / 2)
        fault, _ = _timing(dest)
        assert f"the server counted {counted} requests of the run, the client completed {n}" \
            in fault


def test_failed_requests_widen_the_count_by_their_number(tmp_path):
    dest = _copy(tmp_path)
    req = pd.read_parquet(dest / "requests.parquet")
    req.loc[req.index[:2], "ok"] = False
    req.to_parquet(dest / "requests.parquet", index=False)
    n, client_s = _client(dest)
    for counted, holds in ((n - 1, False), (n, True), (n + 2, True), (n + 3, False)):
        _with_view(dest, requests=counted, e2e_sum_s=client_s / 2)
        assert (_timing(dest)[0] is None) is holds, counted


def test_the_servers_summed_time_exactly_at_the_bound_holds_just_above_fails(tmp_path):
    dest = _copy(tmp_path)
    n, client_s = _client(dest)
    bound = client_s + n * 0.05
    _with_view(dest, requests=n, e2e_sum_s=bound)
    assert _timing(dest, allowance_s=0.05) == (None, None)
    _with_view(dest, requests=n, e2e_sum_s=float(np.nextafter(bound, np.inf)))
    fault, _ = _timing(dest, allowance_s=0.05)
    assert "summed e2e time" in fault and f"+ {n} x 0.05 s" in fault


def test_the_rigs_own_probe_requests_are_set_aside_with_their_client_side_bound(tmp_path):
    dest = _copy(tmp_path)
    n, client_s = _client(dest)
    e2e_sum_s = client_s + 4.0 + (n + 5) * 0.05 - 0.5      # within only with the rig bound
    _with_view(dest, requests=n + 5, e2e_sum_s=e2e_sum_s, rig_requests=5,
               rig_latency_bound_s=4.0)
    assert _timing(dest) == (None, None)
    _with_view(dest, requests=n + 5, e2e_sum_s=e2e_sum_s, rig_requests=0, rig_latency_bound_s=4.0)
    assert "the server counted" in _timing(dest)[0]
    _with_view(dest, requests=n + 5, e2e_sum_s=client_s + 4.0 + (n + 5) * 0.05 + 1.0,
               rig_requests=5, rig_latency_bound_s=4.0)
    assert "summed e2e time" in _timing(dest)[0]


def test_an_unrecorded_vllm_view_is_not_evaluable_a_malformed_one_fails(tmp_path):
    dest = _copy(tmp_path)
    _edit_meta(dest, lambda m: m["settings"]["effective"].update(
        server_view={"available": False, "reason": "GET /metrics failed"}))
    fault, unrecorded = _timing(dest)
    assert fault is None and "view was not recorded (GET /metrics failed)" in unrecorded
    for bad in ("12", -1, True, None):
        _with_view(dest, requests=bad, e2e_sum_s=1.0)
        fault, unrecorded = _timing(dest)
        assert unrecorded is None
        assert "settings.effective.server_view.requests is" in fault, bad
    _edit_meta(dest, lambda m: m["settings"]["effective"].update(server_view=[1]))
    assert "server_view is list, not an object" in _timing(dest)[0]


def test_a_claim_of_vllm_runs_with_server_views_passes_real_sidecar(tmp_path):
    for run in SEED0:
        dest = _copy(tmp_path, run)
        n, client_s = _client(dest)
        _with_view(dest, requests=n, e2e_sum_s=client_s - 0.5)
    out = real_sidecar(_seed_claim_ctx(tmp_path / "runs", SEED0), TIMING)
    assert out.passed is True


def test_a_scrape_of_unknown_latency_joins_with_no_latency_allowed(tmp_path):
    """A scrape whose latency was not recorded is joined as if it took none: its count of
    arrivals must reach what the client had sent by its time less the join's slack, not
    what it had sent a second earlier."""
    dest = _copy(tmp_path)
    sent = np.sort(pd.read_parquet(dest / "requests.parquet").sent_s.to_numpy(float))
    sig = pd.read_parquet(dest / "signals.parquet")
    t = sig.t_s.to_numpy(float)
    by_slack = np.searchsorted(sent, t - 0.25, side="right")
    a_second_earlier = np.searchsorted(sent, t - 1.25, side="right")
    i = int(np.argmax(by_slack > a_second_earlier))
    assert by_slack[i] > a_second_earlier[i]

    def forge(sig):
        sig.loc[i, "scrape_latency_s"] = np.nan
        sig.loc[i, "arrivals_seen"] = a_second_earlier[i]
        return sig
    _edit_signals(dest, forge)
    assert "do not join the client" in _evidence(dest)
