"""Like for like covers the hardware: within a seed only the host's name and the rig's run
state and addresses may differ; its platform, the rig's configuration and the capacity probe
(measured once per seed on that hardware) are compared."""

from __future__ import annotations

import json
import shutil

import pytest

from evalkit.audit import audit_campaign
from evalkit.audit.checks.like_for_like import may_differ

from tests.conftest import REPO

REAL = REPO / "examples" / "cpu_real" / "runs"


@pytest.mark.parametrize("key, differs", [
    ("host.hostname", True), ("settings.effective.rig.reset_s", True),
    ("settings.effective.rig.runs_before", True), ("settings.effective.pids", True),
    ("host.platform", False), ("host.python", False), ("host.gpu", False),
    ("settings.effective.rig.gpu", False), ("settings.effective.rig.server_device", False),
    ("settings.effective.capacity_requests_per_s", False),
    ("settings.effective.capacity_tokens_per_s", False),
    ("settings.effective.single_request_s", False),
    ("settings.effective.pacing.ticks", True), ("settings.effective.pacing.missed_ticks", True),
    ("settings.effective.pacing.missed_share", True),
    ("settings.effective.pacing.worst_late_s", True),
    ("settings.effective.pacing.step_period_s", False),
    ("settings.effective.pacing.clock_slack_s", False),
])
def test_only_names_ids_and_run_state_may_differ(key, differs):
    assert may_differ(key) is differs


def _seed0(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    for run in REAL.iterdir():
        if run.is_dir() and run.name.endswith("__s0") or run.name.endswith("__s0__d0") \
                or run.name.endswith("__s0__d1"):
            shutil.copytree(run, runs / run.name)
    return runs


def _like_for_like(runs):
    doc = json.loads(audit_campaign(runs).to_json())
    claim = next(c for c in doc["claims"] if c["policy"] == "ewma")
    return next(c for c in claim["checks"] if c["name"] == "like_for_like")


@pytest.mark.slow
def test_draws_on_other_hardware_are_not_alike(tmp_path):
    """The attack: the policy run on an H200, its draws on a T4, said in host, rig and the
    capacity probe.  The honest seed passes; the edited one fails naming the keys."""
    runs = _seed0(tmp_path)
    assert _like_for_like(runs)["status"] == "passed"
    draw = runs / "cpu_real__mr-ewma__s0__d0" / "run.json"
    meta = json.loads(draw.read_text())
    meta["host"]["platform"] = "Linux-5.15-t4-x86_64"
    meta["settings"]["effective"]["rig"]["gpu"] = "Tesla T4"
    meta["settings"]["effective"]["capacity_requests_per_s"] /= 8
    draw.write_text(json.dumps(meta))
    out = _like_for_like(runs)
    assert out["status"] == "failed"
    for key in ("host.platform", "settings.effective.rig.gpu", "capacity_requests_per_s"):
        assert key in out["found"], out["found"]
