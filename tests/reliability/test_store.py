"""The run store under faults: locks, leftovers of killed writes, damaged and unreadable runs."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from evalkit.cli.main import cli
from evalkit.errors import StoreLocked
from evalkit.replay.campaign import load_campaign, parse_shard
from evalkit.replay.storelock import STALE_AFTER_S, StoreLock, lock_path, scopes_conflict
from evalkit.replay.sweep import check_campaign, run_campaign
from evalkit.runlog.validate import validate_runs
from tests.support.protocols import BUNDLED
from tests.support.reliability_tools import (cli_env, complete_runs, run_cli, run_fingerprints, unprivileged,
                               write_campaign)

NS, WA, D0, D1 = "tiny__no_sync__s0", "tiny__wa__s0", "tiny__mr-wa__s0__d0", "tiny__mr-wa__s0__d1"


def invoke(args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A complete sweep of the tiny campaign (4 runs), made once; tests copy it."""
    folder = tmp_path_factory.mktemp("reference")
    camp = write_campaign(folder)
    s = run_campaign(camp, folder / "runs", progress=False, protocol=BUNDLED)
    assert s.ok and s.count("ran") == 4
    return camp, folder / "runs"


@pytest.fixture
def store(reference, tmp_path):
    camp, runs = reference
    shutil.copytree(runs, tmp_path / "runs")
    return camp, tmp_path / "runs"


# ----------------------------------------------------------------------------- lock

_HOLDER = """
import sys, time
from pathlib import Path
from evalkit.replay.storelock import StoreLock
lock = StoreLock(Path(sys.argv[1])).acquire()
print("locked", flush=True)
time.sleep(600)
"""


def _start_holder(runs: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(runs)], env=cli_env(),
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_second_sweep_exits_2_naming_the_holder_then_takes_over_a_stale_lock(store):
    camp, runs = store
    holder = _start_holder(runs)
    try:
        res = invoke(["sweep", camp, "--out", runs])
        assert res.exit_code == 2, res.output
        assert f"pid {holder.pid} on host" in res.output and "in use by another sweep" in res.output
        assert ".evalkit-sweep.all.lock" in res.output                 # the fix names the file
        check = invoke(["sweep", camp, "--out", runs, "--check"])      # read-only: allowed
        assert check.exit_code == 0 and f"a sweep is running on this directory: pid {holder.pid}" \
            in check.output
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert lock_path(runs, "all").exists()                            # the killed holder's file
    res = invoke(["sweep", camp, "--out", runs])
    assert res.exit_code == 0, res.output
    assert f"took over a stale lock left by pid {holder.pid}" in res.output
    assert "4 skipped" in res.output
    assert not lock_path(runs, "all").exists()                        # released on exit


def test_lock_scopes(tmp_path):
    assert scopes_conflict("all", "shard-0-of-2") and scopes_conflict("all", "all")
    assert not scopes_conflict("shard-0-of-2", "shard-1-of-2")
    assert scopes_conflict("shard-0-of-2", "shard-0-of-3")
    with StoreLock(tmp_path, parse_shard("0/2")), StoreLock(tmp_path, parse_shard("1/2")):
        for other in (None, parse_shard("0/2"), parse_shard("1/3")):
            with pytest.raises(StoreLocked, match=f"pid {os.getpid()}"):
                StoreLock(tmp_path, other).acquire()
    with StoreLock(tmp_path):                                         # all released
        pass


def test_lock_of_another_host_is_never_taken_over_on_a_guess(tmp_path):
    """Where flock may not reach across machines, a remote lock file counts while it is
    refreshed (heartbeat) and still counts once it is older than STALE_AFTER_S: only the
    operator breaks it (tests/reliability/test_locks.py)."""
    path = lock_path(tmp_path, "all")
    path.write_text(json.dumps({"pid": 4242, "host": "elsewhere.example", "scope": "all",
                                "started_at": "2030-01-01T00:00:00+00:00"}))
    with pytest.raises(StoreLocked, match="pid 4242 on host elsewhere.example.*refreshed 0 s"):
        StoreLock(tmp_path).acquire()
    old = time.time() - STALE_AFTER_S - 5
    os.utime(path, (old, old))
    with pytest.raises(StoreLocked, match=r"not refreshed for 1\d\d s.*never taken over") as info:
        StoreLock(tmp_path).acquire()
    assert "--break-lock" in info.value.fix and path.exists()


# ----------------------------------------------------------------------------- leftovers

def test_resume_restores_a_run_whose_replacement_never_landed(store):
    """kill -9 between the two renames of a replace: the run exists only as .old-*."""
    camp, runs = store
    before = run_fingerprints(runs)
    (runs / WA).rename(runs / f".{WA}.old-1234abcd")
    partial = runs / f".{WA}.tmp-5678ef00"                  # the unpublished replacement
    partial.mkdir()
    (partial / "requests.parquet").write_bytes(b"PAR1 half")
    report = validate_runs(runs)
    (lost,) = [p for p in report.errors if p.kind == "layout"]
    assert "replacement never landed" in lost.message and f".{WA}.old-1234abcd {WA}" in lost.fix
    check = check_campaign(camp, runs)
    assert {s.run_id: s.state for s in check.missing} == {WA: "interrupted"}
    s = run_campaign(camp, runs, progress=False, protocol=BUNDLED)
    assert s.ok and s.count("skipped") == 4 and s.count("ran") == 0     # restored, not re-run
    assert any(f"restored {WA}" in n for n in s.notes)
    assert run_fingerprints(runs) == before
    assert sorted(p.name for p in runs.iterdir() if p.name.startswith(f".{WA}")) == []
    report = validate_runs(runs)
    assert report.ok and not report.warnings


def test_resume_removes_old_copies_whose_replacement_landed(store):
    camp, runs = store
    shutil.copytree(runs / NS, runs / f".{NS}.old-00000001")
    shutil.copytree(runs / NS, runs / f".{NS}.tmp-00000002")
    warnings = validate_runs(runs).warnings
    assert len(warnings) == 2 and all(w.severity == "warning" for w in warnings)
    old = [w for w in warnings if ".old-" in w.run][0]
    assert f"run {NS} is in place" in old.fix                         # the right fix, not "rerun"
    s = run_campaign(camp, runs, progress=False, protocol=BUNDLED)
    assert s.ok and s.count("skipped") == 4
    assert not [p for p in runs.iterdir() if p.name.startswith(".tiny")]


def test_leftovers_of_other_shards_are_left_alone(store):
    camp, runs = store
    mine = parse_shard("0/2")
    from evalkit.replay.campaign import plan_campaign, shard_jobs

    theirs = [j.run_id for j in plan_campaign(load_campaign(camp))
              if j not in shard_jobs(plan_campaign(load_campaign(camp)), mine)]
    other = runs / f".{theirs[0]}.tmp-0badf00d"
    other.mkdir()
    run_campaign(camp, runs, progress=False, shard=mine, protocol=BUNDLED)
    assert other.exists()


# ----------------------------------------------------------------------------- damaged runs

def test_truncated_table_is_damaged_moved_aside_and_rerun(store, reference):
    camp, runs = store
    expected = run_fingerprints(reference[1])
    req = runs / D0 / "requests.parquet"
    damaged_bytes = req.read_bytes()[: len(req.read_bytes()) // 2]
    req.write_bytes(damaged_bytes)
    assert invoke(["validate", runs]).exit_code == 2                  # validate saw it ...
    res = invoke(["sweep", camp, "--out", runs, "--check"])           # ... and now so does --check
    assert res.exit_code == 2 and "damaged" in res.output and D0 in res.output
    assert "requests.parquet" in res.output
    res = invoke(["sweep", camp, "--out", runs])                      # ... and resume re-runs it
    assert res.exit_code == 0, res.output
    assert "1 ran" in res.output and "3 skipped" in res.output and "moved aside" in res.output
    (kept,) = [p for p in runs.iterdir() if p.name.startswith(f".{D0}.damaged-")]
    assert (kept / "requests.parquet").read_bytes() == damaged_bytes  # never deleted
    assert run_fingerprints(runs) == expected
    assert invoke(["sweep", camp, "--out", runs, "--check"]).exit_code == 0
    report = validate_runs(runs)
    assert report.ok and [w.kind for w in report.warnings] == ["layout"]
    assert "damaged copy" in report.warnings[0].message


@pytest.mark.parametrize("damage", ["bad-json", "no-run-json", "missing-table"])
def test_other_damage_is_detected_and_repaired(store, reference, damage):
    camp, runs = store
    if damage == "bad-json":
        (runs / WA / "run.json").write_text('{"complete": tr')
    elif damage == "no-run-json":
        (runs / WA / "run.json").unlink()
    else:
        (runs / WA / "merges.parquet").unlink()
    states = {s.run_id: s.state for s in check_campaign(camp, runs).missing}
    assert states == {WA: "damaged"}
    s = run_campaign(camp, runs, progress=False, protocol=BUNDLED)
    assert s.ok and {o.run_id for o in s.outcomes if o.status == "ran"} == {WA}
    assert run_fingerprints(runs) == run_fingerprints(reference[1])
    assert len([p for p in runs.iterdir() if p.name.startswith(f".{WA}.damaged-")]) == 1


# ----------------------------------------------------------------------------- unreadable

@pytest.mark.slow
def test_unreadable_runs_are_errors_in_validate_and_exclusions_in_audit(tmp_path, copy_fixture):
    drop = unprivileged(tmp_path)
    runs = copy_fixture("runs")
    hidden = runs / "fixture-s1-fixed_h"
    locked_table = runs / "fixture-s2-matched_random-d0" / "requests.parquet"
    hidden.chmod(0)
    locked_table.chmod(0)
    try:
        res = run_cli(["validate", runs], preexec_fn=drop)
        assert res.returncode == 2, res.stdout + res.stderr
        assert "INVALID" in res.stdout and "2 unreadable path(s)" in res.stdout
        assert str(hidden) in res.stdout and str(locked_table) in res.stdout
        assert "Permission denied" in res.stdout and "chmod" in res.stdout

        out = tmp_path / "report"
        res = run_cli(["audit", runs, "--out", out], preexec_fn=drop, env=cli_env(
            {"MPLCONFIGDIR": str(tmp_path / "mpl")}, log_dir=tmp_path / "logs"))
        assert res.returncode == 0, res.stdout + res.stderr
        audit = json.loads((out / "audit.json").read_text())
        excluded = {e["run_id"]: e["reason"] for e in audit["input"]["excluded"]}
        assert "fixture-s1-fixed_h" in excluded and "unreadable" in excluded["fixture-s1-fixed_h"]
        assert "fixture-s2-matched_random-d0" in excluded

        res = run_cli(["summarize", runs], preexec_fn=drop)
        assert res.returncode == 0 and "excluded: fixture-s1-fixed_h (unreadable" in res.stderr
    finally:
        hidden.chmod(0o755)
        locked_table.chmod(0o644)


def test_unreadable_runs_dir_and_run_json(tmp_path, copy_fixture):
    drop = unprivileged(tmp_path)
    runs = copy_fixture("runs")
    meta = runs / "fixture-s0-fixed_h" / "run.json"
    meta.chmod(0)
    try:
        res = run_cli(["validate", runs], preexec_fn=drop)
        assert res.returncode == 2 and str(meta) in res.stdout and "cannot read" in res.stdout
    finally:
        meta.chmod(0o644)
    runs.chmod(0)
    try:
        res = run_cli(["validate", runs], preexec_fn=drop)
        assert res.returncode == 2 and str(runs) in res.stdout + res.stderr
        res = run_cli(["audit", runs, "--out", tmp_path / "r"], preexec_fn=drop)
        assert res.returncode == 2 and str(runs) in res.stderr, res.stderr
        assert "Permission denied" in res.stderr or "not readable" in res.stderr
        assert "Traceback" not in res.stderr
    finally:
        runs.chmod(0o755)


def test_resume_leaves_an_unreadable_run_alone_and_exits_2(store, tmp_path):
    drop = unprivileged(tmp_path)
    camp, runs = store
    target = runs / D1 / "requests.parquet"
    before = target.read_bytes()
    target.chmod(0)
    try:
        res = run_cli(["sweep", camp, "--out", runs], preexec_fn=drop)
        assert res.returncode == 2, res.stdout + res.stderr
        assert f"failed: {D1}" in res.stdout and "fix its permissions" in res.stdout
        res = run_cli(["sweep", camp, "--out", runs, "--check"], preexec_fn=drop)
        assert res.returncode == 2 and "unreadable" in res.stdout and D1 in res.stdout
    finally:
        target.chmod(0o644)
    assert target.read_bytes() == before
    assert complete_runs(runs) == {NS, WA, D0, D1}


@pytest.mark.slow
def test_read_only_out_exits_2(tmp_path, store):
    drop = unprivileged(tmp_path)
    camp, runs = store
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        for args in (["sweep", camp, "--out", ro / "runs"],
                     ["summarize", runs, "--out", ro / "t.csv"],
                     ["trace", "generate", "poisson", "--rate", "1", "--duration", "10",
                      "--seed", "0", "--out", ro / "t.parquet"]):
            res = run_cli(args, preexec_fn=drop)
            assert res.returncode == 2, (args, res.stdout, res.stderr)
            assert str(ro) in res.stderr and "permission" in res.stderr.lower()
            assert "Traceback" not in res.stderr
    finally:
        ro.chmod(0o755)
    assert list(ro.iterdir()) == []


# ----------------------------------------------------------------------------- durability

def test_run_files_and_directory_are_fsynced_before_the_publishing_rename(tmp_path, monkeypatch):
    """A power loss must not leave a renamed (published) run with unwritten data."""
    import evalkit.fsutil as fsutil
    from evalkit.runlog.io import read_run, write_run

    events = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def rename(src, dst, *a, **k):
        events.append(("rename", str(src), str(dst)))
        return real_rename(src, dst, *a, **k)

    if not Path("/proc/self/fd").exists():
        pytest.skip("needs /proc to name the file behind a descriptor")
    monkeypatch.setattr(fsutil.os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    run = read_run(Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "fixture-s0-fixed_h")
    for _ in range(2):                                  # a new run, then a replace
        events.clear()
        final = write_run(tmp_path, run.meta, run.requests, run.merges)
        publish = [i for i, e in enumerate(events) if e[0] == "rename" and e[2] == str(final)]
        assert len(publish) == 1
        tmp = events[publish[0]][1]
        synced = {e[1] for e in events[:publish[0]] if e[0] == "fsync"}
        files = {str(Path(tmp) / p.name) for p in final.iterdir()}
        assert files | {tmp} <= synced, files | {tmp} - synced       # data and directory
        assert ("fsync", str(tmp_path)) in events[publish[0]:]     # and the parent after


# ----------------------------------------------------------------------------- environment

ENV_WORDS = "this is the environment, the run was not judged"


def _fail_reading(monkeypatch, exc):
    """Make Arrow's read of D0's requests table raise ``exc`` (below evalkit's handling)."""
    from evalkit.runlog.io import TableFile

    class Failing:
        def __init__(self, handle):
            self.handle = handle

        def read(self, **kw):
            raise exc

        def close(self):
            self.handle.close()

    opened = TableFile.__init__

    def init(self, run_dir, name):
        opened(self, run_dir, name)
        if name == "requests" and Path(run_dir).name == D0:
            self._handle = Failing(self._handle)

    monkeypatch.setattr(TableFile, "__init__", init)


@pytest.mark.parametrize("exc", [
    MemoryError(),
    pa.ArrowMemoryError("malloc of size 4194304 failed"),
    OSError(errno.ENOMEM, "Cannot allocate memory"),
    OSError(errno.EMFILE, "Too many open files"),
    OSError(errno.EIO, "Input/output error"),
    OSError("Memory mapping file failed: Cannot allocate memory"),    # Arrow: no errno
], ids=["MemoryError", "ArrowMemoryError", "ENOMEM", "EMFILE", "EIO", "arrow-mmap-text"])
def test_an_environment_failure_is_never_damage_and_the_sweep_keeps_the_run(store, monkeypatch,
                                                                            exc):
    camp, runs = store
    before = run_fingerprints(runs)
    _fail_reading(monkeypatch, exc)
    res = invoke(["validate", runs])
    assert res.exit_code == 2, res.output
    assert ENV_WORDS in res.output and f"{D0}/requests.parquet" in res.output
    assert "rerun this run" not in res.output and "corrupt" not in res.output
    assert "INVALID" not in res.output                # not judged: neither valid nor invalid
    res = invoke(["sweep", camp, "--out", runs, "--check"])
    assert res.exit_code == 2 and ENV_WORDS in res.output and "damaged" not in res.output
    res = invoke(["sweep", camp, "--out", runs])
    assert res.exit_code == 2 and ENV_WORDS in res.output
    assert "moved aside" not in res.output and " ran" not in res.output
    assert not [p for p in runs.iterdir() if ".damaged-" in p.name]
    assert run_fingerprints(runs) == before                       # nothing moved or re-run


@pytest.mark.parametrize("exc", [MemoryError(), OSError(errno.ENOMEM, "Cannot allocate memory")],
                         ids=["MemoryError", "ENOMEM"])
def test_run_json_that_cannot_be_read_for_memory_is_not_damage(store, monkeypatch, exc):
    import evalkit.runlog.io as io

    camp, runs = store
    before = run_fingerprints(runs)
    bounded = io.read_bounded

    def read_bounded(path, *args, **kw):
        if Path(path).parent.name == WA:
            raise exc
        return bounded(path, *args, **kw)

    monkeypatch.setattr(io, "read_bounded", read_bounded)
    res = invoke(["validate", runs])
    assert res.exit_code == 2 and ENV_WORDS in res.output and f"{WA}/run.json" in res.output
    assert "INVALID" not in res.output and "rewrite the run" not in res.output
    res = invoke(["sweep", camp, "--out", runs])
    assert res.exit_code == 2 and ENV_WORDS in res.output and "moved aside" not in res.output
    assert run_fingerprints(runs) == before


def test_a_damaged_table_is_still_damage(store, monkeypatch):
    """The environment check does not swallow real damage: Arrow's own complaint stays one."""
    camp, runs = store
    _fail_reading(monkeypatch, pa.ArrowInvalid("Parquet magic bytes not found in footer"))
    res = invoke(["validate", runs])
    assert res.exit_code == 2 and "corrupt or truncated" in res.output
    assert ENV_WORDS not in res.output


_UNDER_A_MEMORY_LIMIT = """
import resource, sys
from evalkit.cli.main import main
import evalkit.cli.runs, evalkit.runlog.validate, pyarrow.parquet  # noqa: F401 - loaded first
size = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + (4 << 20), size + (4 << 20)))
main(sys.argv[1:])
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (Linux)")
def test_a_real_memory_limit_is_reported_as_the_environment(tmp_path):
    """``ulimit -v``: the 9 MB requests table of a valid run cannot be mapped with 4 MiB to
    spare; validate says out of memory (exit 2), never corrupt, and the run reads fine after."""
    import numpy as np
    import pandas as pd

    from evalkit.runlog.io import write_run

    n = 400_000
    t = np.arange(n) * 1e-3
    requests = pd.DataFrame({
        "request_id": np.arange(n), "arrival_s": t, "sent_s": t, "first_token_s": t + 0.01,
        "end_s": t + 0.1, "prompt_tokens": np.ones(n, np.int64),
        "output_tokens": np.ones(n, np.int64), "ok": np.ones(n, bool),
        "error": pd.array([None] * n, dtype="string")})
    merges = pd.DataFrame({"merge_idx": pd.Series([], dtype=np.int64),
                           "start_s": pd.Series([], dtype=float),
                           "end_s": pd.Series([], dtype=float)})
    meta = {"run_id": "big", "policy": "no_sync", "role": "no_sync", "seed": 0, "draw": None,
            "matched_to": None, "regime": "r", "trace": {"name": "t", "sha256": "0" * 64},
            "backend": "import", "slo": {"e2e_s": 1.0, "ttft_s": None, "tpot_s": None},
            "merge_duration_s": 1.0, "horizon_s": float(t[-1] + 1),
            "corridor": {"min_gap_s": 0.0, "max_gap_s": 1.0}, "oracle": False,
            "settings": {}, "rng_seeds": {"seed": 0}, "notes": []}
    runs = tmp_path / "runs"
    write_run(runs, meta, requests, merges)
    res = subprocess.run([sys.executable, "-c", _UNDER_A_MEMORY_LIMIT, "validate", str(runs)],
                         env=cli_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "out of memory; " + ENV_WORDS in res.stderr
    assert "corrupt" not in res.stdout + res.stderr and "rerun" not in res.stdout + res.stderr
    assert invoke(["validate", runs]).exit_code == 0


@pytest.mark.parametrize("exc", [MemoryError(), OSError(errno.ENOMEM, "Cannot allocate memory"),
                                 OSError(errno.EMFILE, "Too many open files")],
                         ids=["MemoryError", "ENOMEM", "EMFILE"])
def test_a_summary_table_read_under_memory_pressure_is_the_environment(tmp_path, monkeypatch,
                                                                        exc):
    import pandas as pd

    table = tmp_path / "table.csv"
    table.write_text("policy,seed,violation_rate\nwa,0,0.1\n")

    def read_csv(*args, **kw):
        raise exc

    monkeypatch.setattr(pd, "read_csv", read_csv)
    res = invoke(["audit", table, "--out", tmp_path / "audit"])
    assert res.exit_code == 2, res.output
    assert "this is the environment, the table was not judged" in res.output
    assert "cannot read the summary table" not in res.output
