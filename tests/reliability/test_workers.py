"""Pool workers of `sweep --jobs 2` under faults: the main process killed, a worker killed.

Workers must die with the sweep (they hold no lock of their own, and the store is free for
the next sweep at once), and a worker killed under a job (the OOM killer) is an environment
failure -- exit 2 naming the run it was on, resumable -- never exit 3.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.reliability_tools import TINY_CAMPAIGN, cli_env, complete_runs, run_cli

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(),
                                reason="needs /proc to find the pool workers")


def _slow_campaign(folder: Path) -> Path:
    """4 seeds x (no-sync, wa, 2 draws) of ~1 s each: long enough to kill in the middle."""
    path = folder / "c.toml"
    text = TINY_CAMPAIGN.format(seeds=4, draws=2).replace("horizon_s = 240.0",
                                                          "horizon_s = 3000.0")
    path.write_text("\n".join(line for line in text.splitlines()      # sim's default lengths
                               if not line.startswith(("prompt_tokens", "output_tokens"))))
    return path


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out.update(int(c) for c in (task / "children").read_text().split())
        except OSError:
            pass
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start_sweep(camp: Path, runs: Path) -> tuple[subprocess.Popen, set[int]]:
    """`sweep --jobs 2` started, with its two workers forked and a run or two written."""
    proc = subprocess.Popen([sys.executable, "-m", "evalkit.cli.main", "sweep", str(camp),
                             "--out", str(runs), "--jobs", "2", "--no-progress"],
                            env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 120
    workers: set[int] = set()
    while time.time() < deadline:
        workers = _children(proc.pid)
        if len(workers) >= 2 and len(complete_runs(runs) if runs.is_dir() else ()) >= 1:
            return proc, workers
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"the sweep did not get going: {proc.communicate()}")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_workers_die_with_the_sweep_and_the_lock_is_free(tmp_path, sig):
    camp, runs = _slow_campaign(tmp_path), tmp_path / "runs"
    proc, workers = _start_sweep(camp, runs)
    os.kill(proc.pid, sig)
    proc.communicate(timeout=60)
    deadline = time.time() + 5
    while time.time() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.05)
    try:
        assert not any(_alive(w) for w in workers), "orphaned workers outlived the sweep"
    finally:
        for w in workers:
            try:
                os.kill(w, signal.SIGKILL)
            except ProcessLookupError:
                pass
    check = run_cli(["sweep", camp, "--out", runs, "--check"])
    assert "a sweep is running" not in check.stdout, check.stdout
    resumed = run_cli(["sweep", camp, "--out", runs, "--jobs", "2", "--no-progress"])
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "in use by another sweep" not in resumed.stdout + resumed.stderr
    assert f"took over a stale lock left by pid {proc.pid}" in resumed.stdout
    assert len(complete_runs(runs)) == 16


def test_forked_children_do_not_keep_the_lock(tmp_path):
    """The lock's descriptor is closed in a forked child: only the holder keeps the lock."""
    from evalkit.replay.storelock import StoreLock, current_holders

    runs = tmp_path / "runs"
    lock = StoreLock(runs).acquire()
    r, w = os.pipe()
    ready_r, ready_w = os.pipe()
    child = os.fork()
    if child == 0:                      # the child outlives the parent's lock below
        os.write(ready_w, b"r")         # the at-fork handlers have run by now
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    os.close(ready_w)
    assert os.read(ready_r, 1) == b"r"
    os.close(ready_r)
    try:
        fd = lock._fd
        assert fd is not None
        lock._fd = None                 # drop the parent's lock as a kill would: close only
        from evalkit.replay import storelock as S
        S._HELD_FDS.discard(fd)
        if lock._stop is not None:
            lock._stop.set()
        os.close(fd)
        assert current_holders(runs) == []          # the kernel lock went with the parent
        with StoreLock(runs) as second:
            assert second.notes == []               # same pid wrote it: nothing to take over
    finally:
        os.write(w, b"x")
        os.close(w)
        os.waitpid(child, 0)


@pytest.mark.slow
def test_a_killed_worker_is_exit_2_naming_its_run_and_resume_completes(tmp_path):
    camp, runs = _slow_campaign(tmp_path), tmp_path / "runs"
    proc, workers = _start_sweep(camp, runs)
    victim = sorted(workers)[0]
    os.kill(victim, signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, out + err
    assert "internal error" not in err and "BrokenProcessPool" not in out + err
    assert f"worker process {victim} was killed by signal 9 (SIGKILL)" in err, err
    assert "while running tiny__" in err and "resume with the same command" in err
    resumed = run_cli(["sweep", camp, "--out", runs, "--jobs", "2", "--no-progress"])
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert len(complete_runs(runs)) == 16
    check = run_cli(["validate", runs])
    assert check.returncode == 0 and "valid: 16 run(s)" in check.stdout, check.stdout


def _die(camp, job, runs_dir):
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_worker_killed_under_a_job_fails_it_with_worker_lost(tmp_path):
    """In process: the future of the job a killed worker was on, and every later submit,
    raise WorkerLost (an InputError: exit 2) naming the worker, the signal and the run."""
    from evalkit.errors import InputError
    from evalkit.replay.campaign import load_campaign, plan_campaign
    from evalkit.replay.executors import PoolExecutor, WorkerLost
    from tests.support.reliability_tools import write_campaign

    camp = load_campaign(write_campaign(tmp_path, draws=0))
    job = plan_campaign(camp)[0]
    ex = PoolExecutor(camp, 1, worker=_die)
    try:
        fut = ex.submit(_die, camp, job, tmp_path / "runs")
        exc = fut.exception(timeout=60)
        assert isinstance(exc, WorkerLost) and isinstance(exc, InputError)
        assert "was killed by signal 9 (SIGKILL)" in exc.message
        assert f"while running {job.run_id}" in exc.message and "resume" in exc.fix
        with pytest.raises(WorkerLost):
            ex.submit(_die, camp, job, tmp_path / "runs")
    finally:
        ex.shutdown()
