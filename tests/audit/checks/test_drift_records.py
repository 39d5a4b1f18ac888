"""Execution evidence cross-checked: run start times against the plan's creation, the run's
own write time and the recorded order (evalkit/audit/checks/drift.py:order_faults)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from evalkit.audit import audit_campaign
from evalkit.audit.checks.drift import order_faults
from evalkit.audit.runset import load_runset

from tests.audit.checks.test_drift import _drift_check, artifact
from tests.conftest import REPO


def _run(position, started, written=None, seed=7):
    return {"created_at": written or started,
            "run_order": {"order_seed": seed, "position": position, "started_at": started}}


def _ctx(metas, plan_created=None):
    cache = {"plan": {"created_at": plan_created} if plan_created else None}
    runset = SimpleNamespace(has_logs=True, run_ids=list(metas), meta=metas.__getitem__,
                             _cache=cache)
    return SimpleNamespace(runset=runset)


HONEST = {"a": _run(0, "2026-01-01T10:00:00+00:00"), "b": _run(1, "2026-01-01T10:01:00+00:00"),
          "c": _run(2, "2026-01-01T10:02:00+00:00")}


def test_honest_records_agree():
    assert order_faults(_ctx(HONEST, "2026-01-01T09:59:00+00:00")) == []
    real = load_runset(REPO / "examples" / "cpu_real" / "runs")
    assert order_faults(SimpleNamespace(runset=real)) == []


@pytest.mark.parametrize("edit, plan, said", [
    ({}, "2026-01-01T10:30:00+00:00", "a started 2026-01-01T10:00:00+00:00, before the plan"),
    ({"b": _run(1, "2026-01-01T10:01:00+00:00", "2026-01-01T09:00:00+00:00")}, None,
     "b started 2026-01-01T10:01:00+00:00, after it was written"),
    ({"c": _run(2, "2026-01-01T10:02:00+00:00", seed=8)}, None, "2 order seeds"),
    ({"c": _run(1, "2026-01-01T10:02:00+00:00")}, None, "position 1 is recorded by 2 runs"),
    # the attack: draws that ran 10-12 minutes later, their start times edited to sit beside
    # their policy runs, while another run's records keep the true order
    ({"c": _run(2, "2026-01-01T09:48:00+00:00")}, None, "c (position 2) started 780 s before"),
])
def test_records_that_contradict_each_other(edit, plan, said):
    faults = order_faults(_ctx({**HONEST, **edit}, plan))
    assert any(said in f for f in faults), faults


def test_the_drift_check_blocks_on_a_contradiction(tmp_path):
    """An interleaved campaign on a steady host passes; with one run's start time moved
    ahead of the runs before it in the recorded order, the drift check fails."""
    artifact(tmp_path / "runs", seeds=6, policy_first=False)
    claim = audit_campaign(tmp_path / "runs", max_tier="matched_budget").claim("fixed_h", "cpu")
    assert _drift_check(claim).passed is True
    path = tmp_path / "runs" / "mr-fixed_h-s5-d0" / "run.json"
    meta = json.loads(path.read_text())
    meta["run_order"]["started_at"] = "2000-01-01T00:00:00+00:00"
    path.write_text(json.dumps(meta))
    claim = audit_campaign(tmp_path / "runs", max_tier="matched_budget").claim("fixed_h", "cpu")
    chk = _drift_check(claim)
    assert chk.passed is False and "contradict each other" in chk.found
    assert "mr-fixed_h-s5-d0 (position 11) started" in chk.found
