"""A sweep into an object store (evalkit/replay/store.py, sweep.py) against moto's S3 server:
an upload cut short is never a run and is removed on resume, a run whose bytes differ from
its manifest is moved aside (kept) and rerun, sweep --check lists both, and the store's
runs equal a local sweep's run for run."""

from __future__ import annotations

import json

import pytest

from evalkit.replay import storelock
from evalkit.replay.sweep import check_campaign, run_campaign
from evalkit.runlog.execution_order import ATTEMPTS_DIR
from evalkit.runlog import store_url
from evalkit.runlog.store_url import local_view, open_store
from tests.support.protocols import BUNDLED
from tests.support.reliability_tools import run_cli, write_campaign
from tests.support.s3_server import SECRET, new_bucket, s3_server

VICTIM = "tiny__wa__s0"


@pytest.fixture(scope="module")
def s3():
    with s3_server() as env:
        yield env


@pytest.fixture(autouse=True)
def quick_settle(monkeypatch):
    """One sweep at a time here: the wait that separates two sweeps starting together
    (tests/replay/test_storelock_lease.py) need not be a second long."""
    monkeypatch.setattr(storelock, "SETTLE_S", 0.05)


def test_cut_upload_is_missing_then_resume_removes_and_reruns_it(s3, tmp_path, monkeypatch):
    camp = write_campaign(tmp_path, draws=1)
    url = f"s3://{new_bucket()}/runs"
    real = store_url.ObjectStore.put_bytes

    def cut(self, rel, data):
        if rel.startswith(VICTIM + "/.attempt-") and rel.endswith("merges.parquet"):
            raise OSError("connection reset by peer")     # the upload stops half-way
        real(self, rel, data)

    monkeypatch.setattr(store_url.ObjectStore, "put_bytes", cut)
    first = run_campaign(camp, url, progress=False, protocol=BUNDLED)
    monkeypatch.undo()
    assert first.count("failed") == 1 and first.count("blocked") == 1    # and its draw
    store = open_store(url)
    assert store.entries()[VICTIM].manifest is None                      # files, no manifest
    states = {s.run_id: s.state for s in check_campaign(camp, url).states}
    assert states[VICTIM] == "missing"
    resumed = run_campaign(camp, url, progress=False, protocol=BUNDLED)
    assert resumed.ok and resumed.count("ran") == 2 and resumed.count("skipped") == 1
    assert any("removed 1 unfinished upload" in n for n in resumed.notes), resumed.notes
    assert all(len(e.attempts) == 1 for e in store.entries().values())
    assert check_campaign(camp, url).complete
    # the worker's start marker outlived it in the store: the re-run records that attempt in
    # its slot, and the marker is gone once the run is published
    with local_view(url) as (copy, _):
        meta = json.loads((copy / VICTIM / "run.json").read_text())
    (attempt,) = meta["run_order"]["attempts"]
    assert attempt["error"].startswith("interrupted")
    assert attempt["position"] == meta["run_order"]["position"]
    assert store.get_bytes(f"{ATTEMPTS_DIR}/{VICTIM}.started.json") is None


def test_a_tampered_run_is_moved_aside_and_rerun(s3, tmp_path):
    camp = write_campaign(tmp_path, draws=1)
    url = f"s3://{new_bucket()}/runs"
    assert run_campaign(camp, url, progress=False, protocol=BUNDLED).ok
    store = open_store(url)
    manifest = store.manifest(VICTIM)
    # an optional table: without the manifest's check the copy would read as a valid run
    store.put_bytes(f"{VICTIM}/.attempt-{manifest['attempt']}/signals.parquet", b"PAR1")
    states = {s.run_id: s for s in check_campaign(camp, url).states}
    assert states[VICTIM].state == "damaged" and "signals.parquet" in states[VICTIM].detail
    resumed = run_campaign(camp, url, progress=False, protocol=BUNDLED)
    assert resumed.ok and resumed.count("ran") == 1
    assert any("was damaged" in n and "manifest.damaged-" in n for n in resumed.notes)
    again = run_campaign(camp, url, progress=False, protocol=BUNDLED)
    assert again.count("skipped") == 3   # resumed again
    entry = store.entries()[VICTIM]
    assert len(entry.damaged) == 1 and manifest["attempt"] in entry.attempts   # kept
    assert check_campaign(camp, url).complete


def test_store_runs_equal_a_local_sweep_and_hold_no_secret(s3, tmp_path):
    """Sweep into the store (through the CLI) and into a folder; every run's tables are
    equal byte for byte and no file written, object stored or line printed holds the
    secret key."""
    camp = write_campaign(tmp_path, draws=1)
    url = f"s3://{new_bucket()}/runs"
    remote = run_cli(["sweep", camp, "--out", url, "--no-progress"], cwd=tmp_path)
    assert remote.returncode == 0, remote.stdout + remote.stderr
    assert run_campaign(camp, tmp_path / "runs", progress=False, protocol=BUNDLED).ok
    printed = remote.stdout + remote.stderr
    store = open_store(url)
    assert SECRET not in printed and all(SECRET.encode() not in store.get_bytes(key)
                                         for key in store.list())
    assert all(SECRET.encode() not in p.read_bytes() for p in tmp_path.rglob("*")
               if p.is_file())
    with local_view(url) as (copy, _):
        for run in sorted((tmp_path / "runs").glob("tiny__*")):
            for table in sorted(run.glob("*.parquet")):
                assert (copy / run.name / table.name).read_bytes() == table.read_bytes()


def test_summarize_gate_and_break_lock_read_a_store_as_a_folder(s3, tmp_path):
    """The CLI on a store URL prints what it prints on a folder holding the same runs."""
    from click.testing import CliRunner

    from evalkit.cli.main import cli
    from evalkit.replay.storelock import LeaseLock

    camp = write_campaign(tmp_path, draws=1)
    url = f"s3://{new_bucket()}/runs"
    assert run_campaign(camp, url, progress=False, protocol=BUNDLED).ok
    runner = CliRunner()
    with local_view(url) as (copy, _):
        for args in (["summarize", "{}", "--format", "csv"], ["gate", "{}", "--policy", "wa"]):
            on_store = runner.invoke(cli, [a.format(url) for a in args])
            on_copy = runner.invoke(cli, [a.format(copy) for a in args])
            assert on_store.exit_code == on_copy.exit_code == (0 if args[0] == "summarize"
                                                               else 1), on_store.output
            assert on_store.output == on_copy.output
    lock = LeaseLock(open_store(url), settle_s=0.05).acquire()
    lock._stop.set()                                  # a driver gone without releasing it
    locked = runner.invoke(cli, ["sweep", str(camp), "--out", url])
    assert locked.exit_code == 2 and "locked by another sweep" in locked.output
    broken = runner.invoke(cli, ["sweep", str(camp), "--out", url, "--break-lock"])
    assert broken.exit_code == 0 and "broke the lock" in broken.output, broken.output


def test_a_re_run_in_the_store_brings_its_kept_attempt_to_the_audit(s3, tmp_path, monkeypatch):
    """A run that failed and was re-run keeps its failed run.json under .attempts in the
    store; the local view the audit reads holds it, so the re-run's record is checked
    against it (and a view without it is a fault)."""
    from types import SimpleNamespace

    from evalkit.audit.checks.drift import order_faults
    from evalkit.audit.runset import load_runset
    from evalkit.replay.backends import sim

    camp = write_campaign(tmp_path, draws=1)
    url = f"s3://{new_bucket()}/runs"
    real_replay = sim.replay

    def failing(spec, trace, policy, progress=None):
        if spec.run_id == VICTIM:
            raise RuntimeError("engine died")
        return real_replay(spec, trace, policy, progress=progress)

    monkeypatch.setattr(sim, "replay", failing)
    try:
        run_campaign(camp, url, progress=False, protocol=BUNDLED)
    except Exception:                   # noqa: BLE001 - the sweep may stop at the failure
        pass
    monkeypatch.setattr(sim, "replay", real_replay)
    assert run_campaign(camp, url, progress=False, protocol=BUNDLED).ok
    with local_view(url) as (root, _):
        meta = json.loads((root / VICTIM / "run.json").read_text())
        (attempt,) = meta["run_order"]["attempts"]
        assert attempt["run_json_sha256"]
        assert (root / ATTEMPTS_DIR / f"{VICTIM}.1.run.json").is_file()
        assert order_faults(SimpleNamespace(runset=load_runset(root))) == []
        (root / ATTEMPTS_DIR / f"{VICTIM}.1.run.json").unlink()
        faults = order_faults(SimpleNamespace(runset=load_runset(root)))
        assert any("is not kept" in f for f in faults), faults
