"""examples/gpu/run_gpu_campaign.sh, every step on the CPU (tiny models, seconds of trace).

The H200 run itself needs a device; this runs the same script with ``DRY_RUN_CPU=1``: plan
freeze (where this evalkit has it), the capped sweep with the torch backend on the CPU, the
twin fit with its predictive check, the twin harness, both audits and RESULTS.md under $OUT.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "gpu" / "run_gpu_campaign.sh"


def has_plan_freeze() -> bool:
    res = subprocess.run([sys.executable, "-m", "evalkit.cli.main", "plan", "freeze", "--help"],
                         capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return res.returncode == 0


def run_script(out: Path, **env) -> subprocess.CompletedProcess:
    full = dict(os.environ, PYTHONPATH=str(ROOT), OUT=str(out), **env)
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, cwd=ROOT,
                          env=full, timeout=1500)


def test_script_parses_and_documents_its_budget():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    text = SCRIPT.read_text()
    assert 'TOTAL_S="${TOTAL_S:-540}"' in text          # one device command of <= 600 s
    assert "plan freeze" in text and "--predictive-sims" in text


def test_without_plan_freeze_the_script_refuses_unless_allowed(tmp_path):
    if has_plan_freeze():
        pytest.skip("this evalkit has `plan freeze`: the refusal path is not reachable")
    res = run_script(tmp_path / "out", DRY_RUN_CPU="1", TOTAL_S="60")
    assert res.returncode == 2
    assert "plan freeze" in res.stderr and "ALLOW_NO_PLAN=1" in res.stderr
    assert not any((tmp_path / "out" / "runs").glob("*/run.json"))


@pytest.mark.slow
def test_cpu_dry_run_of_every_step(tmp_path):
    out = tmp_path / "out"
    res = run_script(out, DRY_RUN_CPU="1", SEEDS_DRY="3", HORIZON_S_DRY="10", TOTAL_S="900",
                     RESERVE_S="300", PREDICTIVE_SIMS="20", ALLOW_NO_PLAN="1")
    log = res.stdout + res.stderr
    runs = sorted(p.parent for p in (out / "runs").glob("*/run.json"))
    assert len(runs) == 9, log[-4000:]                   # 3 seeds x (no-sync, ewma, 1 draw)
    assert all(json.loads((d / "run.json").read_text())["complete"] for d in runs)
    assert all(json.loads((d / "run.json").read_text())["backend"] == "torch" for d in runs)
    if has_plan_freeze():
        plan = json.loads((out / "runs" / "plan.json").read_text())
        assert len(plan["runs"]) == 9
    else:
        assert "WITHOUT a frozen plan" in (out / "plan.log").read_text()
    fit = json.loads((out / "fit.json").read_text())
    assert fit["predictive"]["n_sims"] == 20
    assert fit["predictive"]["variants"]["request"]["coverage"]["n_runs"] == 9
    assert (out / "audit_real" / "audit.json").exists() and (out / "audit" / "audit.json").exists()
    results = (out / "RESULTS.md").read_text()
    assert "held-out predictive check" in results and "coverage" in results
    assert "## Audit" in results


def test_the_paced_gpu_campaign_is_the_paced_cpu_design_on_cuda():
    """examples/gpu/paced_gpu.toml (CAMPAIGN_TOML=paced_gpu.toml) is a valid campaign with the
    paced rig's design: the same policies and draws, a paced trainer, merges contending
    through memory traffic and a host-load gate, on the GPU."""
    import tomllib

    from evalkit.replay.campaign import load_campaign, plan_campaign

    gpu_path = ROOT / "examples" / "gpu" / "paced_gpu.toml"
    gpu, cpu = (tomllib.loads(p.read_text()) for p in
                (gpu_path, ROOT / "examples" / "cpu_paced" / "campaign.toml"))
    # the same policies; one draw each (the CPU campaign gives ewma 2: the device budget)
    assert [(p["name"], p["params"].keys()) for p in gpu["policies"]] == \
        [(p["name"], p["params"].keys()) for p in cpu["policies"]]
    assert gpu["matched_random_draws"] == 1
    cfg = gpu["backend"]["config"]
    assert cfg["device"] == "cuda" and cfg["merge_load"] == "memory"
    assert gpu["inner_step_s"] == cfg["step_period_s"]
    assert cfg["merge_min_s"] < gpu["merge_duration_s"] and cfg["max_load_1m"] > 0
    camp = load_campaign(gpu_path)
    assert len(plan_campaign(camp)) == 6 * 5        # per seed: no-sync, ewma + 1, fixed_h + 1
    assert '"$HERE/${CAMPAIGN_TOML:-bursty_gpu.toml}"' in SCRIPT.read_text()
