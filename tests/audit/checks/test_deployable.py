"""Decisions of the deployable checks (``not_oracle``, ``real_sidecar``) on a stub context."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from evalkit.audit.checks import deployable as C

from tests.support.decision_stubs import claim, ctx, pair, spec


# ---------------------------------------------------------------------------- deployable

def _run_ctx(pairs, metas=None, backends=None, has_logs=True, oracle=False):
    """A claim context whose campaign knows each run's backend and run.json."""
    ids = [r for p in pairs for r in [p.policy_run, *p.draws.run_id, p.no_sync.run_id]]
    backends = backends or {}
    runs = pd.DataFrame({"run_id": ids, "backend": [backends.get(r, "torch") for r in ids]})
    metas = metas or {}
    c = ctx(claim=claim(pairs, oracle=oracle),
            campaign=SimpleNamespace(has_logs=has_logs, runs=runs))
    c._meta = lambda r: metas.get(r, {"policy": "ewma", "oracle": False})
    return c


def test_not_oracle_reads_the_registry_not_run_json():
    two = [pair(0), pair(1)]
    assert C.not_oracle(_run_ctx(two), spec()).passed is True
    seer = {"policy": "smart", "oracle": False,
            "settings": {"effective": {"policy": {"name": "calibrated_offline"}}}}
    out = C.not_oracle(_run_ctx(two, metas={"s1-pol": seer}), spec())
    assert out.passed is False and "s1-pol" in out.found and "registry" in out.found
    said = {"policy": "ewma", "oracle": True}            # the run's own word counts against it
    assert C.not_oracle(_run_ctx(two, metas={"s0-pol": said}), spec()).passed is False
    unknown = {"policy": "home_made", "oracle": False}
    out = C.not_oracle(_run_ctx(two, metas={"s0-pol": unknown}), spec())
    assert out.evaluable is False and "not a registered class" in out.found
    # a summary table: its oracle column can fail the check, never pass it
    assert C.not_oracle(_run_ctx(two, has_logs=False, oracle=True), spec()).passed is False
    assert C.not_oracle(_run_ctx(two, has_logs=False), spec()).evaluable is False


def test_real_sidecar_looks_at_every_run_of_the_seed():
    sp = spec(real_backends=["torch", "vllm"])
    two = [pair(0), pair(1)]
    assert C.real_sidecar(_run_ctx(two, backends={"s1-pol": "vllm"}), sp).passed is True
    for run in ("s1-pol", "s0-d0", "s1-ns"):          # policy, draw or no-sync on the harness
        out = C.real_sidecar(_run_ctx(two, backends={run: "sim"}), sp)
        assert out.passed is False and f"{run} (sim)" in out.found
    out = C.real_sidecar(_run_ctx(two, backends={"s0-d0": None}), sp)
    assert out.passed is False and "unknown" in out.found
    none = {r: None for r in ("s0-pol", "s0-d0", "s0-ns", "s1-pol", "s1-d0", "s1-ns")}
    assert C.real_sidecar(_run_ctx(two, backends=none), sp).evaluable is False
    sims = {r: "sim" for r in none}
    assert C.real_sidecar(_run_ctx(two, backends=sims), spec(real_backends=["sim"])).passed
