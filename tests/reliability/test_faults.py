"""Fault injection: kill -9 at random points of `sweep` and `audit`, two concurrent sweeps.

Kill points are file-system events (renames, fsyncs, opening a file for writing, Parquet
writes ...) counted by a small harness that SIGKILLs its own process at the K-th one; K is
drawn from a seeded generator, so a failure names a reproducible point.  After every kill:
nothing that was complete is lost (a published run is still published, or waits as a
restorable ``.old-*`` copy) and nothing half-written is visible (every visible run
validates).  The final resume must produce the same runs as an uninterrupted sweep.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from evalkit.replay.storelock import lock_path
from evalkit.runlog.validate import validate_runs
from tests.support.reliability_tools import (cli_env, complete_runs, run_cli, run_fingerprints, run_with_kill,
                               write_campaign, write_kill_harness)

N_SWEEP_KILLS = 5
N_AUDIT_KILLS = 4


def _restorable(runs: Path) -> set[str]:
    """Run ids that exist only as an ``.old-*`` copy (moved aside, replacement not landed)."""
    out = set()
    for p in runs.iterdir():
        if p.name.startswith(".") and ".old-" in p.name:
            rid = p.name[1:].rpartition(".old-")[0]
            if not (runs / rid).exists() and json.loads((p / "run.json").read_text())["complete"]:
                out.add(rid)
    return out


@pytest.mark.slow
def test_kill_9_at_random_points_of_a_sweep_loses_nothing(tmp_path):
    camp = write_campaign(tmp_path, seeds=2, draws=1)        # 6 runs
    harness = write_kill_harness(tmp_path)
    ref = tmp_path / "reference"
    count = tmp_path / "count"
    res = run_with_kill(harness, ["sweep", camp, "--out", ref], 0, count_file=count)
    assert res.returncode == 0, res.stderr
    total = int(count.read_text())
    expected = run_fingerprints(ref)
    assert len(expected) == 6 and total > 30

    runs = tmp_path / "runs"
    rng = np.random.default_rng(20260501)
    done_before: set[str] = set()
    killed = 0
    for i in range(N_SWEEP_KILLS):
        done = complete_runs(runs) if runs.exists() else set()
        if i == N_SWEEP_KILLS - 1 or len(done) == len(expected):
            # a complete run made incomplete is replaced: the kill may land between the two
            # renames of a replace
            victim = sorted(done)[int(rng.integers(len(done)))]
            meta_p = runs / victim / "run.json"
            meta = json.loads(meta_p.read_text())
            meta["complete"] = False
            meta_p.write_text(json.dumps(meta))
            done_before.discard(victim)
        missing = len(expected) - len(complete_runs(runs) if runs.exists() else set())
        k = int(rng.integers(1, max(2, total * missing // len(expected))))
        res = run_with_kill(harness, ["sweep", camp, "--out", runs], k)
        killed += res.returncode == -9
        assert res.returncode in (0, -9), (k, res.stdout, res.stderr)
        if not runs.exists():
            continue
        now = complete_runs(runs)
        # nothing complete lost: still published, or restorable from its .old-* copy
        assert done_before <= now | _restorable(runs), (k, done_before - now)
        report = validate_runs(runs)
        bad = [p for p in report.errors if p.kind not in ("incomplete", "layout")]
        assert not bad, (k, [p.format() for p in bad])      # nothing half-written is visible
        done_before = now
    assert killed >= 3                                   # the kills really happened

    res = run_cli(["sweep", camp, "--out", runs])         # resume, uninterrupted
    assert res.returncode == 0, res.stdout + res.stderr
    assert run_fingerprints(runs) == expected
    # each store froze its own plan: the plans (whose hashes the runs carry) differ only in
    # their wall-clock created_at
    plans = [json.loads((d / "plan.json").read_text()) for d in (ref, runs)]
    for plan in plans:
        plan.pop("created_at")
    assert plans[0] == plans[1]
    report = validate_runs(runs)
    assert report.ok and not report.warnings, [p.format() for p in report.problems]
    assert not [p for p in runs.iterdir() if p.name.startswith(".tiny")]
    assert not lock_path(runs, "all").exists()


@pytest.mark.slow
def test_two_concurrent_sweeps_one_runs_the_other_exits_2(tmp_path):
    camp = write_campaign(tmp_path, seeds=3, draws=2)        # 12 runs: a few seconds
    runs = tmp_path / "runs"
    first = subprocess.Popen([sys.executable, "-m", "evalkit.cli.main", "sweep", str(camp),
                              "--out", str(runs)], env=cli_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not lock_path(runs, "all").exists() and first.poll() is None:
        assert time.time() < deadline
        time.sleep(0.05)
    second = run_cli(["sweep", camp, "--out", runs])
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, out + err
    if "12 ran" in out and second.returncode == 2:          # the usual case: they overlapped
        assert f"pid {first.pid} on host" in second.stderr and "in use by another" in \
            second.stderr
    else:                                                   # the first was already done
        assert second.returncode == 0 and "12 skipped" in second.stdout
    assert "12 ran" in out                                   # no job done twice
    report = validate_runs(runs)
    assert report.ok and not report.warnings and len(report.run_dirs) == 12
    assert len(complete_runs(runs)) == 12


# ----------------------------------------------------------------------------- audit

def _report_state(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in ("report.html", "report.md", "audit.json")
            if (out / name).exists()}


def _publish_is_atomic() -> bool:
    try:
        import evalkit.report.publish  # noqa: F401 - the report helper's atomic publication
    except ImportError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.xfail(not _publish_is_atomic(), strict=True,
                   reason="audit output is not yet published atomically")
def test_kill_9_at_random_points_of_an_audit_leaves_a_complete_report(tmp_path, fixtures_dir):
    runs = fixtures_dir / "campaigns" / "summary_table.csv"      # the cheapest full audit
    harness = write_kill_harness(tmp_path)
    out = tmp_path / "report"
    # the previous report (alpha 0.1) and the new one (default alpha) differ
    assert run_cli(["audit", runs, "--out", out, "--alpha", "0.1"]).returncode == 0
    old = _report_state(out)
    user_file = out / "notes.txt"
    user_file.write_text("mine")
    new_dir = tmp_path / "new"
    count = tmp_path / "count"
    shutil.copytree(out, new_dir)
    res = run_with_kill(harness, ["audit", runs, "--out", new_dir], 0, count_file=count)
    assert res.returncode == 0, res.stderr
    new = _report_state(new_dir)
    total = int(count.read_text())
    assert new != old and len(old) == len(new) == 3 and total > 3
    rng = np.random.default_rng(20260502)
    for k in sorted(rng.choice(np.arange(1, total + 1), size=min(N_AUDIT_KILLS, total),
                               replace=False)):
        target = tmp_path / f"kill-{k}"
        shutil.copytree(out, target)
        res = run_with_kill(harness, ["audit", runs, "--out", target], int(k))
        assert res.returncode == -9, (k, res.stderr)          # same input, same events: killed
        got = _report_state(target)
        assert got in (old, new), (k, sorted(got))            # previous or new, never a mix
        assert (target / "notes.txt").read_text() == "mine"   # the user's file survives
        audit = json.loads(got["audit.json"])
        for claim in audit.get("claims", []):                # every figure it names exists
            for rel in (claim.get("figures") or {}).values():
                assert (target / rel).is_file(), (k, rel)
